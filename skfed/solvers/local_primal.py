"""Primal-averaging local-update solvers: FedAvg, FedProx, FedMID, FedMID-OSP.

They share one round: clients start from the server model ``w``, take local
steps, send ``Delta w``; the server moves ``w + eta_s * mean(Delta w)`` and
(except FedAvg) applies the penalty's prox. They differ in how the penalty
enters (docs/algorithms/fedmid.md, fedavg.md and fedprox.md):

=============  ===================  ==================  =========================
solver         client step          server step         exact regime
=============  ===================  ==================  =========================
FedAvg (d)     SGD on loss + psi    plain average       smooth psi, 1 full step
               by subgradient
FedMID         proximal SGD         prox(eta_s K eta_c) never for L1 (see FedMID)
FedMID-OSP     SGD on the loss      prox(eta_s K eta_c) 1 full step, eta_s = 1
FedProx        SGD on loss +        prox(eta_s K eta_c) 1 full step, eta_s = 1
               (mu/2)||w - w_r||^2
=============  ===================  ==================  =========================
"""

import numpy as np

from ._local_update import LocalUpdateSolver
from .base import check_positive


class _PrimalLocalSolver(LocalUpdateSolver):
    client_prox = False
    server_prox = True
    subgradient_penalty = False
    mu = 0.0

    def __init__(self, client_lr="auto", server_lr=1.0, *, local_steps=1,
                 local_epochs=None, batch_size=None, client_lr_schedule="constant"):
        self.client_lr = client_lr
        self.server_lr = server_lr
        self.local_steps = local_steps
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.client_lr_schedule = client_lr_schedule

    def init_server(self, theta0):
        return {"w": np.array(theta0, dtype=float)}

    def broadcast(self, server, rnd):
        return {"w": server["w"], "round": rnd}

    def client_update(self, client, state, message, rng):
        layout, penalty = client.layout, self.problem_.prox_penalty
        scale = self._lr_scale(message["round"])
        steps, coef_step = self.steps_ * scale, self.coef_step_ * scale
        w0 = message["w"]
        w = w0.copy()
        n_steps = 0
        for rows in self.schedule_.batches(client.n_samples, rng):
            g = self._local_gradient(client, w, rows)
            if self.subgradient_penalty and penalty is not None:
                g[: layout.n_coef] += penalty.subgradient(
                    layout.coef(w).reshape(layout.penalty_shape)).ravel()
            if self.mu:
                g += self.mu * (w - w0)
            w = w - steps * g
            if self.client_prox:
                w = layout.apply_prox(penalty, w, coef_step)
            n_steps += 1
        return {"dw": w - w0, "delta": coef_step * n_steps}, state

    def summed_fields(self, server):
        # the weighted means of the model increments and of the prox steps taken
        return {"dw": "weighted", "delta": "weighted"}

    def aggregate_sums(self, server, sums, participants):
        dw, delta = sums["dw"], sums["delta"]
        if not np.all(np.isfinite(dw)):
            raise FloatingPointError(
                f"{type(self).__name__} diverged (non-finite update); lower client_lr."
            )
        w = server["w"] + self.server_lr * dw
        if self.server_prox:
            w = self.problem_.layout.apply_prox(self.problem_.prox_penalty, w,
                                                self.server_lr * delta)
        return {"w": w}

    def server_model(self, server):
        return server["w"]

    def client_models(self, server, message, replies):
        return [message["w"] + r["dw"] for r in replies]


_PARAMS_DOC = """
    Parameters
    ----------
    client_lr : float or "auto", default="auto"
        See :class:`~skfed.solvers._local_update.LocalUpdateSolver`.
    server_lr : float, default=1.0
    local_steps : int, default=1
    local_epochs : float or None, default=None
    batch_size : int or None, default=None
    client_lr_schedule : {"constant", "inverse_sqrt"}, default="constant"
"""


class FedMID(_PrimalLocalSolver):
    """Federated Mirror Descent: local proximal SGD, server prox after averaging.
    {params}
    Notes
    -----
    As specified (FCO paper Alg. 2) the penalty is applied twice per round:
    ``K`` client prox steps and one server prox of the same total size. For
    an L1 penalty the two shrinkages add up, so even with one full-batch step
    on a single client the fixed point is the Lasso at ``2 * alpha``, not
    ``alpha``, whatever the learning rate. This is the paper's "curse of
    primal averaging" in its plainest form; it is pinned by a test. For
    constraints (projection twice = once) the fixed point is right.
    """.format(params=_PARAMS_DOC)

    name = "fedmid"

    def _one_step_guarantee(self, problem):
        if problem.prox_penalty is None:
            return super()._one_step_guarantee(problem)
        # even a projection: the server averages the clients' projected points,
        # and an average of projections is not the projection of the average
        return "biased", ("the clients apply the penalty's prox (or projection) before "
                          "averaging (the solution at twice the penalty for an L1 term)")
    client_prox = True


class FedMIDOSP(_PrimalLocalSolver):
    """FedMID with the prox only on the server ("only server proximal").
    {params}
    Notes
    -----
    Exact regime: one full-batch step, full participation, ``server_lr=1``
    and the default step: a round is then one proximal-gradient step on the
    pooled objective. Several local steps on heterogeneous clients drift.
    """.format(params=_PARAMS_DOC)

    name = "fedmid-osp"


class FedAvg(_PrimalLocalSolver):
    """FedAvg with the penalty handled by its subgradient ("FedAvg (d)").
    {params}
    Notes
    -----
    The classical baseline: clients run SGD on ``loss + psi`` using a
    subgradient of ``psi``, the server averages. With a smooth penalty (or
    none) and one full-batch step it is gradient descent on the pooled
    objective (exact). With an L1 penalty it is a subgradient method: it
    never produces exact zeros and only converges with a decaying step
    (``client_lr_schedule="inverse_sqrt"``), slowly. Constraints are refused.
    """.format(params=_PARAMS_DOC)

    name = "fedavg"
    requires_smooth_datafit = False  # subgradients of the hinge loss too

    def _one_step_guarantee(self, problem):
        if problem.prox_penalty is None and problem.datafit.smooth:
            return super()._one_step_guarantee(problem)
        return "biased", ("subgradient steps (non-smooth loss or penalty) at a constant "
                          "step: no exact zeros; only a decaying step converges, slowly")
    server_prox = False
    subgradient_penalty = True
    penalty_support = "subgradient"


class FedProx(_PrimalLocalSolver):
    """FedProx: local steps on ``L_j(w) + (mu / 2) ||w - w_r||^2``, server prox.

    Parameters
    ----------
    mu : float, default=0.1
        Weight of the proximal term that limits client drift (in units of the
        loss curvature when ``client_lr="auto"``: the automatic step accounts
        for the extra curvature ``mu``).
    client_lr : float or "auto", default="auto"
    server_lr : float, default=1.0
    local_steps : int, default=1
    local_epochs : float or None, default=None
    batch_size : int or None, default=None
    client_lr_schedule : {"constant", "inverse_sqrt"}, default="constant"

    Notes
    -----
    FedProx (Li et al., 2020) targets smooth problems; skfed applies a
    composite penalty by a server prox at the accumulated step, as FedMID-OSP
    (with ``mu=0`` the two are identical), so the output is exactly sparse.
    Exact regime: one full-batch step (the proximal term then vanishes),
    full participation. With several local steps on heterogeneous clients its
    fixed point is biased; a larger ``mu`` shrinks the drift but slows progress.
    """

    name = "fedprox"

    def __init__(self, mu=0.1, client_lr="auto", server_lr=1.0, *, local_steps=1,
                 local_epochs=None, batch_size=None, client_lr_schedule="constant"):
        self.mu = mu
        super().__init__(client_lr, server_lr, local_steps=local_steps,
                         local_epochs=local_epochs, batch_size=batch_size,
                         client_lr_schedule=client_lr_schedule)

    def setup(self, problem, participation=1.0):
        check_positive(self.mu, "mu", strict=False)
        return super().setup(problem, participation)

    def _auto_lr_factor(self, problem):
        # local objective has curvature L_j + mu: keep the step below 1/(L + mu).
        # One step starts at w_r, where the proximal term has zero gradient.
        if self.schedule_.n_steps(int(np.max(problem.n_samples))) == 1:
            return 1.0
        Lc = max(l["coef"] for l in problem.lipschitz) + problem.smooth_curvature
        return Lc / (Lc + self.mu) if np.isfinite(Lc) and Lc > 0 else 1.0
