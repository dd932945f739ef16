"""Local steps corrected by a control variate: what SCAFFOLD, Local G-ECL and the
decentralized solvers share (the step size rule and the corrected local loop).

Kept apart from :mod:`~skfed.solvers.control_variates` and
:mod:`~skfed.solvers.decentralized` so that neither has to import the other
for it (Local G-ECL delegates a decentralized topology to the latter).
"""

import numbers

import numpy as np

from .._messages import show
from .base import FederatedSolver, check_positive


class _ControlVariateSolver(FederatedSolver):
    penalty_support = "smooth"
    #: "auto" step is 1 / (max(K, this) L)
    min_auto_divisor = 1
    #: "auto" gives each client the step of its own smoothness (centralized
    #: solvers, whose server can weigh the replies); else the roughest client's
    per_client_steps = False
    _wire_attributes = ("steps_", "client_steps_", "uniform_steps_")  # see FederatedSolver

    def _check_common(self):
        check_positive(self.lr, "lr", allow_auto=True)
        if not isinstance(self.local_steps, numbers.Integral) or self.local_steps < 1:
            raise ValueError(
                f"local_steps must be an integer >= 1; got {show(self.local_steps)}.")

    def setup(self, problem, participation=1.0):
        self._check_common()
        super().setup(problem, participation)
        lay, N = problem.layout, problem.n_clients
        if self.lr == "auto":
            # the local loop of client j runs on f_j = N a_j L_j + psi
            divisor = max(self.local_steps, self.min_auto_divisor)
            own = []
            for a, l in zip(problem.weights, problem.lipschitz):
                Lc = N * a * l["coef"] * l["joint"] + problem.smooth_curvature
                Li = N * a * l["intercept"] * l["joint"]
                own.append(lay.block_vector(1.0 / Lc if Lc > 0 else 1.0,
                                            1.0 / Li if Li > 0 else 1.0) / divisor)
            # the common step: the roughest client's, per block
            self.steps_ = np.min(own, axis=0)
            self.client_steps_ = own if self.per_client_steps else [self.steps_] * N
        else:
            self.steps_ = lay.block_vector(self.lr, self.lr)
            self.client_steps_ = [self.steps_] * N
        # with one step for everyone the server's average is the papers' plain mean
        self.uniform_steps_ = all(s is self.steps_ for s in self.client_steps_)
        return self

    def _corrected_steps(self, client, j, start, first_point, lam):
        """``K`` steps ``x <- x - eta_j (grad f_j(.) - lam)`` from ``start``; the first
        gradient is taken at ``first_point`` (Local G-ECL's stale first step)."""
        eta = self.client_steps_[j]
        x = start - eta * (self._grad(client, j, first_point) - lam)
        for _ in range(self.local_steps - 1):
            x = x - eta * (self._grad(client, j, x) - lam)
        return x

    #: kind of a summed field averaged with weights ``1 / eta_j`` (see reply_coefficients)
    STEP_WEIGHTED = "step-weighted"

    def _step_weighted_kind(self):
        """The kind under which the server sums a field it averages with weights
        ``1 / eta_j``: ``"sum"`` (divided by the count after) when every client
        has the same step, the papers' plain mean; else ``"step-weighted"``."""
        return "sum" if self.uniform_steps_ else self.STEP_WEIGHTED

    def reply_coefficients(self, field, kind, weights, participants):
        """Coefficients of a summed field; ``"step-weighted"``: per client and coordinate,
        ``(1 / eta_j) / sum_{k in participants} (1 / eta_k)`` (an array per client).

        With per-client steps ``eta_j`` a client's displacement is ``K eta_j``
        times its average corrected gradient; weighting by ``1 / eta_j``
        averages the gradients, so one round with ``K = 1`` is a gradient step
        of size ``1 / mean_j(1 / eta_j)`` on the pooled objective, and
        ``sum_j (x_server - x_j) / eta_j = 0`` (Local G-ECL's ``sum_j lambda_j = 0``).
        """
        if kind != self.STEP_WEIGHTED:
            return super().reply_coefficients(field, kind, weights, participants)
        inverse = np.array([1.0 / self.client_steps_[j] for j in participants])
        return inverse / inverse.sum(axis=0)

    def _step_weighted_mean(self, total, participants):
        """The ``1 / eta_j``-weighted mean of a field from its sum of kind
        :meth:`_step_weighted_kind`."""
        return total / len(participants) if self.uniform_steps_ else total

    def _grad(self, client, j, x):
        problem = self.problem_
        g = problem.n_clients * problem.weights[j] * client.gradient(x)
        return problem.add_smooth_gradient(g, x)

    def init_client(self, j, theta0):
        return {"j": j}

    def server_model(self, server):
        return server["x"]
