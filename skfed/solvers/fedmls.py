"""FedMLS (Palenzuela, Dadras, Yurtsever & Lofstedt): multilevel local solves for
non-smooth federated problems (docs/algorithms/fedmls.md, the authors' FedMLS.m)."""

import math

import numpy as np

from ..penalties import L2Ball
from .base import FederatedSolver, check_positive


class FedMLS(FederatedSolver):
    """FedMLS: accelerated consensus with growing inexact local solves.

    Round ``k`` (``k = 1, 2, ...``), with ``lambda_k = lambda0 / k``,
    ``gamma_k = 2 / (k + 1)`` and ``T_k = ceil(t0 * k)`` local steps: client
    ``j`` runs ``T_k`` averaged subgradient-prox steps on
    ``(1 / (N beta_k)) f_j(u) + ||u - v||^2 / 2`` with
    ``v = z_j - (k / 4)(y_j - y)``, updates its ``(x_j, y_j, z_j)`` and sends
    ``y_j``; the server averages and moves its ``(x, y, z)``. The output is
    the server's ``x``.

    Parameters
    ----------
    lambda0 : float or "auto", default="auto"
        ``lambda0`` in the paper's units (client losses as *sums* over their
        samples, as the authors' code). ``"auto"`` sets the weight of the
        local (sub)gradient to ``1 / L`` per block, with ``L`` the largest
        client's smoothness bound of its scaled loss ``f_j = N a_j L_j``; for
        a non-smooth loss with a ridge ``mu`` (the hinge SVM) to
        ``1 / sqrt(L mu)``, ``L`` from the Gram matrix.
    t0 : float, default=1
        ``T_k = ceil(t0 * k)`` local steps in round ``k`` (the paper's Remark 3.3).
    radius : float or None, default=None
        Project the coefficients (not the intercept) of the local iterates on
        ``||w||_2 <= radius``. ``None`` (the authors' code) does not project;
        the paper projects the whole vector: skfed follows the code's CVX
        reference, which bounds the weights only.
    batch_fraction : float in (0, 1] or None, default=None
        Stochastic subgradients on a random fraction of the client's rows
        (the paper's 10% minibatches); ``None`` is deterministic.

    Notes
    -----
    Non-smooth losses (hinge) and penalties (L1) enter through subgradients;
    full participation. Its rate is sublinear (it targets non-smooth
    problems): expect ~1e-4 relative accuracy, not 1e-8. Communication: 1
    vector down (``y``), 1 up (``y_j``). Like DualFL, the output is
    retrieved with one proximal-gradient step from ``x`` when the loss is
    smooth (exact zeros for the Lasso).
    """

    name = "fedmls"
    requires_full_participation = True
    requires_smooth_datafit = False
    penalty_support = "subgradient"
    polish_output = True
    _wire_attributes = ("gradient_weight_", "ball_")  # see FederatedSolver

    def guarantee(self, problem, participation=1.0):
        return "sublinear", "subgradient-type local solves: converges, at a sublinear rate"

    def __init__(self, lambda0="auto", *, t0=1.0, radius=None, batch_fraction=None):
        self.lambda0 = lambda0
        self.t0 = t0
        self.radius = radius
        self.batch_fraction = batch_fraction

    def setup(self, problem, participation=1.0):
        super().setup(problem, participation)
        check_positive(self.lambda0, "lambda0", allow_auto=True)
        check_positive(self.t0, "t0")
        check_positive(self.radius, "radius", allow_none=True)
        check_positive(self.batch_fraction, "batch_fraction", allow_none=True)
        if self.batch_fraction is not None and self.batch_fraction > 1:
            raise ValueError(f"batch_fraction must be in (0, 1]; got {self.batch_fraction}.")
        lay, N = problem.layout, problem.n_clients
        if self.lambda0 == "auto":
            Lc = max(N * a * l["coef"] * l["joint"] for a, l in zip(problem.weights, problem.lipschitz))
            Li = max(N * a * l["intercept"] * l["joint"] for a, l in zip(problem.weights, problem.lipschitz))
            Lc += problem.smooth_curvature
            mu = problem.smooth_curvature
            if not problem.datafit.smooth and mu > 0 and np.isfinite(Lc):
                # a non-smooth loss has no 1/L step; with a ridge mu the geometric
                # mean 1/sqrt(L mu) of the two scales was near the best weight of a
                # lambda0 sweep on the hinge SVM (breast cancer, 5 sites)
                Lc = float(np.sqrt(Lc * mu))
                Li = Lc
            self.gradient_weight_ = lay.block_vector(1.0 / Lc if np.isfinite(Lc) and Lc > 0 else 1.0,
                                                     1.0 / Li if np.isfinite(Li) and Li > 0 else 1.0)
        else:
            # paper: weight lambda0 / (4N) on the gradient of a sum loss, which is
            # (n / N) times our f_j
            n = float(np.sum(problem.n_samples))
            self.gradient_weight_ = lay.block_vector(1.0, 1.0) * self.lambda0 * n / (4 * N * N)
        self.ball_ = L2Ball(self.radius) if self.radius is not None else None
        return self

    def _subgradient(self, client, j, u, rng):
        problem, lay = self.problem_, client.layout
        rows = None
        if self.batch_fraction is not None:
            size = max(1, int(round(self.batch_fraction * client.n_samples)))
            rows = np.sort(rng.choice(client.n_samples, size=size, replace=False))
        g = client.gradient(u, rows)
        g *= problem.n_clients * problem.weights[j]
        problem.add_smooth_gradient(g, u)
        if problem.prox_penalty is not None:
            W = lay.coef(u).reshape(lay.penalty_shape)
            g[: lay.n_coef] += problem.prox_penalty.subgradient(W).ravel()
        return g

    def _project(self, u, lay):
        if self.ball_ is None:
            return u
        return lay.apply_prox(self.ball_, u, 1.0)

    def init_server(self, theta0):
        t = np.array(theta0, dtype=float)
        return {"x": t, "y": t.copy(), "z": t.copy()}

    def init_client(self, j, theta0):
        t = np.array(theta0, dtype=float)
        return {"j": j, "x": t, "y": t.copy(), "z": t.copy()}

    def broadcast(self, server, rnd):
        # the server's own round count, so that a resumed (warm-started) fit continues
        return {"y": server["y"], "round": int(server.get("k", 0))}

    def client_update(self, client, state, message, rng):
        state = dict(state)
        lay, j = client.layout, state["j"]
        k = message["round"] + 1
        gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
        v = state["z"] - (k / 4.0) * (state["y"] - message["y"])
        u = state["z"].copy()
        u_avg = u.copy()
        for t in range(1, math.ceil(self.t0 * k) + 1):  # k local steps: few, fresh arrays
            step = 2.0 / (t + 2)
            # u - step (w g + u - v), as (1 - step) u + step (v - w g)
            g = self._subgradient(client, j, u, rng)
            g *= self.gradient_weight_
            np.subtract(v, g, out=g)
            g *= step
            u *= 1.0 - step
            u += g
            u = self._project(u, lay)
            theta_t = 2.0 * (t + 1) / (t * (t + 3))
            # (1 - theta_t) u_avg + theta_t u
            u_avg += theta_t * (u - u_avg)
        if not np.all(np.isfinite(u)):
            raise FloatingPointError(
                f"FedMLS diverged on client {j} in round {k}: the local (sub)gradient "
                "weight is too large for this problem; lower lambda0 (or use 'auto').")
        state["z"] = u
        state["x"] = (1 - gamma) * state["x"] + gamma * u_avg
        state["y"] = (1 - gamma_next) * state["x"] + gamma_next * state["z"]
        return {"y": state["y"]}, state

    def summed_fields(self, server):
        return {"y": "sum"}  # the plain mean of the clients' y_j

    def aggregate_sums(self, server, sums, participants):
        k = int(server.get("k", 0)) + 1
        gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
        y_bar = sums["y"] / len(participants)
        x = (1 - gamma) * server["x"] + gamma * server["z"]
        y = (1 - gamma_next) * x + gamma_next * server["z"]
        z = server["z"] - ((k + 1) / 4.0) * (y - y_bar)
        return {"x": x, "y": y, "z": z, "k": k}

    def server_model(self, server):
        return server["x"]

    def client_models(self, server, message, replies):
        return [r["y"] for r in replies]
