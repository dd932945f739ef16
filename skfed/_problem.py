"""What the server knows about a federated problem before round one."""

from dataclasses import dataclass, field

import numpy as np


@dataclass
class FederatedProblem:
    """The global objective ``P(theta) = sum_j a_j L_j(theta) + psi(coef)``.

    Only summaries cross the client boundary to build this: each client's
    sample count, weight sum and smoothness constants (computed locally,
    sent once, counted in ``history_.setup_bytes``).

    Attributes
    ----------
    layout : Layout
    datafit : Datafit
    penalty : Penalty or None
    weights : ndarray of shape (n_clients,)
        ``a_j``, summing to one.
    n_samples : ndarray of shape (n_clients,)
    lipschitz : list of dict
        Per client: ``coef``, ``intercept`` and ``joint`` smoothness constants
        of ``L_j`` (see :meth:`ClientObjective.lipschitz`).
    """

    layout: object
    datafit: object
    penalty: object
    weights: np.ndarray
    n_samples: np.ndarray
    lipschitz: list = field(default_factory=list)
    strong_convexity: float = 0.0

    @property
    def n_clients(self):
        return len(self.weights)

    def block_steps(self, scale=1.0, worst_client=True):
        """Per-block step sizes ``1 / (scale * joint * L_block)`` as a theta-sized vector.

        ``worst_client=True`` uses the largest client constants (safe for local
        steps on any client); otherwise the constants of the averaged loss.
        """
        Lc = np.array([l["coef"] for l in self.lipschitz])
        Li = np.array([l["intercept"] for l in self.lipschitz])
        joint = max(l["joint"] for l in self.lipschitz)
        if worst_client:
            Lc, Li = Lc.max(), Li.max()
        else:
            Lc, Li = float(self.weights @ Lc), float(self.weights @ Li)
        coef_step = 1.0 / (scale * joint * Lc) if Lc > 0 else 1.0
        int_step = 1.0 / (scale * joint * Li) if Li > 0 else 1.0
        return self.layout.block_vector(coef_step, int_step)

    def objective(self, client_values, theta):
        return float(self.weights @ client_values) + self.layout.penalty_value(
            self.penalty, theta
        )
