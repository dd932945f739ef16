"""Federated Dual Averaging (FedDualAvg) and its "only server proximal" variant.

Yuan, Zaheer & Reddi, "Federated Composite Optimization", ICML 2021, Alg. 3
and Alg. 5; ALGORITHMS.md section 1.2 and 1.4.
"""

import numpy as np

from ._local_update import LocalUpdateSolver


class FedDualAvg(LocalUpdateSolver):
    """Federated Dual Averaging: server averaging in the dual space.

    The server keeps a dual vector ``z`` and the accumulated step ``eps``;
    clients run dual averaging from ``z`` (primal retrieved by
    ``prox_{e psi}(z)`` before each gradient) and send back ``Delta z``. Because
    gradients are averaged where they are accumulated, the prox and the
    average commute (no "curse of primal averaging") and the output is
    exactly sparse / low-rank.

    Parameters
    ----------
    client_lr : float or "auto", default="auto"
        See :class:`~skfed.solvers._local_update.LocalUpdateSolver`.
    server_lr : float, default=1.0
    local_steps : int, default=1
    local_epochs : float or None, default=None
    batch_size : int or None, default=None
    client_lr_schedule : {"constant", "inverse_sqrt"}, default="constant"

    Notes
    -----
    Exact regime: one full-batch local step, full participation and
    ``client_lr <= 1/L`` (the default): a round is then one step of Nesterov's
    dual gradient method and converges to the pooled optimum. With several
    local steps on heterogeneous clients the fixed point is biased by client
    drift; the bias shrinks with ``client_lr`` (``"inverse_sqrt"`` removes it
    asymptotically). Minibatches or partial participation make it stochastic.

    Deviation: ``client_lr="auto"`` uses one step per block (coefficients,
    intercept), i.e. the distance-generating function ``h`` is a block-scaled
    Euclidean norm rather than ``||.||^2 / 2``. It converges to the same
    optimum and is much better conditioned when the intercept dominates the
    smoothness constant. ``eps`` accumulates the coefficient step, the only
    block the penalty acts on. The smooth part of the penalty (the ridge term
    of an elastic net) is treated as part of the loss and only the non-smooth
    part is retrieved by the prox: dual averaging with a strongly convex
    ``psi`` shrinks its effective step like ``1 / r`` and would converge
    sublinearly.
    """

    name = "feddualavg"
    client_prox = True

    def __init__(self, client_lr="auto", server_lr=1.0, *, local_steps=1,
                 local_epochs=None, batch_size=None, client_lr_schedule="constant"):
        self.client_lr = client_lr
        self.server_lr = server_lr
        self.local_steps = local_steps
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.client_lr_schedule = client_lr_schedule

    def init_server(self, theta0):
        # grad h = identity, so the initial dual is the initial primal
        return {"z": np.array(theta0, dtype=float), "eps": 0.0}

    def broadcast(self, server, rnd):
        return {"z": server["z"], "eps": server["eps"], "round": rnd}

    def client_update(self, client, state, message, rng):
        layout, penalty = client.layout, self.problem_.prox_penalty
        scale = self._lr_scale(message["round"])
        steps, coef_step = self.steps_ * scale, self.coef_step_ * scale
        z, e = message["z"].copy(), float(message["eps"])
        for rows in self.schedule_.batches(client.n_samples, rng):
            w = layout.apply_prox(penalty, z, e) if self.client_prox else z
            z -= steps * self._local_gradient(client, w, rows)
            e += coef_step
        return {"dz": z - message["z"], "deps": e - message["eps"]}, state

    def aggregate(self, server, replies, weights, participants):
        dz = sum(a * r["dz"] for a, r in zip(weights, replies))
        deps = sum(a * r["deps"] for a, r in zip(weights, replies))
        z = server["z"] + self.server_lr * dz
        if not (np.all(np.isfinite(dz)) and np.all(np.isfinite(z))):
            raise FloatingPointError(
                "FedDualAvg diverged (non-finite update); lower client_lr or server_lr."
            )
        return {"z": z, "eps": server["eps"] + self.server_lr * deps}

    def server_model(self, server):
        return self.problem_.layout.apply_prox(self.problem_.prox_penalty, server["z"], server["eps"])

    def client_models(self, server, message, replies):
        lay, pen = self.problem_.layout, self.problem_.prox_penalty
        return [lay.apply_prox(pen, message["z"] + r["dz"], message["eps"] + r["deps"])
                for r in replies]


class FedDualAvgOSP(FedDualAvg):
    """FedDualAvg with the proximal retrieval only on the server ("OSP").

    Clients take gradients at the dual point ``z`` itself (no client prox);
    the server retrieves ``prox_{eps psi}(z)``. The FCO paper states it has
    no convergence theory: the dual follows gradient descent on the loss
    alone, so as ``eps`` grows the retrieved model is shrunk ever further
    (for the Lasso it tends to zero). An ablation, not a solver to trust.
    Parameters as :class:`FedDualAvg`.
    """

    name = "feddualavg-osp"

    def guarantee(self, problem, participation=1.0):
        return "biased", "no convergence theory: clients step without the penalty (ablation)"
    client_prox = False
