"""What the server knows about a federated problem before round one."""

from dataclasses import dataclass, field

import numpy as np

from .wire import wire_class


@wire_class(role="problem")
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
        Per client: smoothness constants of ``L_j`` (see
        :meth:`ClientObjective.lipschitz`).
    pooled_lipschitz : dict or None
        The same constants for the pooled loss ``sum_j a_j L_j``, estimated
        federatedly (:func:`skfed.federation.smoothness.pooled_smoothness`); ``None``
        falls back to the weighted average of the client constants.
    weight_total : float or None
        The sites' total weight (public: each site's weight sum is released in
        the setup, and a site service signs its own); the masked sums of a fit
        are scaled by its inverse.
    prox_penalty, smooth_penalty : Penalty or None
        The penalty split into the part solvers apply by its prox and the
        smooth part they add to the loss (:meth:`Penalty.split_smooth`).
    """

    layout: object
    datafit: object
    penalty: object
    weights: np.ndarray
    n_samples: np.ndarray
    lipschitz: list = field(default_factory=list)
    pooled_lipschitz: dict = None
    weight_total: float = None

    def __post_init__(self):
        if self.penalty is None:
            self.prox_penalty, self.smooth_penalty = None, None
        else:
            self.prox_penalty, self.smooth_penalty = self.penalty.split_smooth()
        self.smooth_curvature = self.smooth_penalty.curvature if self.smooth_penalty else 0.0

    @property
    def output_blocks(self):
        """Indices of ``theta`` per output (coefficient row and intercept) when
        the outputs are separate problems (one-vs-rest, multi-output least
        squares with a row-separable penalty); ``None`` otherwise."""
        lay = self.layout
        penalty_ok = self.penalty is None or getattr(self.penalty, "separable_outputs", False)
        if lay.n_outputs < 2 or not self.datafit.separable_outputs or not penalty_ok:
            return None
        rows = np.arange(lay.n_coef).reshape(lay.n_outputs, lay.n_features)
        return [np.r_[rows[k], [lay.n_coef + k] if lay.fit_intercept else []].astype(int)
                for k in range(lay.n_outputs)]

    def pooled_constants(self):
        """Smoothness constants of the pooled loss: the federated estimate when
        available, else the weighted average of the clients' constants."""
        if self.pooled_lipschitz is not None:
            return self.pooled_lipschitz
        return {"coef": float(self.weights @ [l["coef"] for l in self.lipschitz]),
                "intercept": float(self.weights @ [l["intercept"] for l in self.lipschitz]),
                "joint": max(l["joint"] for l in self.lipschitz)}

    def add_smooth_gradient(self, grad, theta):
        """Add the gradient of the penalty's smooth part (in place) and return ``grad``.

        The global objective is ``sum_j a_j (L_j + psi_s) + psi_ns`` (the
        ``a_j`` sum to one), so each client adds ``grad psi_s`` to its own.
        """
        if self.smooth_penalty is not None:
            lay = self.layout
            W = lay.coef(theta).reshape(lay.penalty_shape)
            grad[: lay.n_coef] += self.smooth_penalty.gradient(W).ravel()
        return grad

    @property
    def n_clients(self):
        return len(self.weights)

    def block_steps(self, scale=1.0, worst_client=True):
        """Per-block step sizes ``1 / (scale * joint * L_block)`` as a theta-sized vector.

        ``worst_client=True`` uses the largest client constants (safe for local
        steps on any client); otherwise the constants of the pooled loss.
        """
        if worst_client:
            Lc = max(l["coef"] for l in self.lipschitz)
            Li = max(l["intercept"] for l in self.lipschitz)
            joint = max(l["joint"] for l in self.lipschitz)
        else:
            pooled = self.pooled_constants()
            Lc, Li, joint = (pooled[k] for k in ("coef", "intercept", "joint"))
        Lc = Lc + self.smooth_curvature
        coef_step = 1.0 / (scale * joint * Lc) if Lc > 0 else 1.0
        int_step = 1.0 / (scale * joint * Li) if Li > 0 else 1.0
        return self.layout.block_vector(coef_step, int_step)

    def sampled_steps(self, n_active):
        """Per-block steps ``1 / (joint * L_block)`` safe for one full gradient step on
        the weighted average loss of any ``n_active`` clients.

        That loss is ``sum_S a_j L_j / sum_S a_j``, whose Hessian is at most
        ``1 / sum_S a_j`` times the pooled one (every ``L_j`` is convex) and at
        most the largest client's: its constant is the smaller of
        ``L_pooled / (sum of the n_active smallest a_j)`` and ``max_j L_j``.
        The joint factor is the largest client's (a subset's mean can couple
        the blocks as strongly as one client's).
        """
        pooled = self.pooled_constants()
        share = float(np.sort(self.weights)[:max(1, int(n_active))].sum())
        joint = max(l["joint"] for l in self.lipschitz)
        Lc = min(pooled["coef"] / share, max(l["coef"] for l in self.lipschitz))
        Li = min(pooled["intercept"] / share, max(l["intercept"] for l in self.lipschitz))
        Lc = Lc + self.smooth_curvature
        coef_step = 1.0 / (joint * Lc) if Lc > 0 else 1.0
        int_step = 1.0 / (joint * Li) if Li > 0 else 1.0
        return self.layout.block_vector(coef_step, int_step)

    def minibatch_steps(self, batch_size):
        """Per-block steps safe for a gradient step on any minibatch of ``batch_size`` rows.

        A batch mean loss is at most ``n_j / B`` times less smooth than the
        client mean loss, and never less smooth than its roughest row; the
        joint factor is taken as its worst case, 2.
        """
        Lc = max(min(l["coef"] * n / min(batch_size, n), l["row"])
                 for l, n in zip(self.lipschitz, self.n_samples)) + self.smooth_curvature
        Li = max(l["intercept"] for l in self.lipschitz)
        coef_step = 1.0 / (2.0 * Lc) if Lc > 0 else 1.0
        int_step = 1.0 / (2.0 * Li) if Li > 0 else 1.0
        return self.layout.block_vector(coef_step, int_step)

    def objective(self, client_values, theta):
        return float(self.weights @ client_values) + self.layout.penalty_value(
            self.penalty, theta
        )
