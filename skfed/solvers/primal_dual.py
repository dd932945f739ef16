"""Primal-dual (augmented Lagrangian) solvers: FedPD, FedADMM, FedDyn and A-FedPD.

All four solve the consensus problem ``min sum_j f_j(theta_j) + N psi(theta)``
subject to ``theta_j = theta``, with ``f_j = N a_j L_j + psi_smooth`` (so that
the objective is the pooled one), through the local subproblem

    theta_j = argmin f_j(x) + <lambda_j, x> + (rho / 2) ||x - theta^t||^2

and the dual step ``lambda_j += rho (theta_j - theta^t)``. They differ in who
stores the duals and how the server forms the next model (docs/algorithms/fedpd.md,
fedadmm.md, feddyn.md and afedpd.md):

==========  ==================  ==================================================
solver      duals live on       server model (before prox_{psi / rho})
==========  ==================  ==================================================
FedPD       clients             mean over all clients of theta_j + lambda_j / rho
FedADMM     clients             mean over all clients of the *stored* (stale for
                                absent clients) theta_j + lambda_j / rho
FedDyn      clients             mean over participants of theta_j + mean over all
                                clients of lambda_j / rho (absent ones unchanged)
A-FedPD     server              as FedDyn, but absent clients' duals take the
                                "virtual" step lambda_j += rho (mean_S theta_j - theta^t)
==========  ==================  ==================================================

A composite penalty is applied by the server's ``prox_{psi / rho}`` (the
FedADMM extension; none of the papers has ``psi``).
"""

import numpy as np

from ..local import local_steps as fista_steps
from ..local import resolve_local_solver, solve_direct, solve_fista
from .base import FederatedSolver, check_positive


class _PrimalDualSolver(FederatedSolver):
    duals_on_server = False
    polish_output = False
    _wire_attributes = ("rho_", "steps_", "q_", "direct_")  # see FederatedSolver

    def __init__(self, rho="auto", *, local_steps=None, local_solver="auto", local_tol=1e-10,
                 local_rtol=1e-2, max_local_iter=1000):
        self.rho = rho
        self.local_steps = local_steps
        self.local_solver = local_solver
        self.local_tol = local_tol
        self.local_rtol = local_rtol
        self.max_local_iter = max_local_iter

    # -- setup ------------------------------------------------------------
    def setup(self, problem, participation=1.0):
        super().setup(problem, participation)
        check_positive(self.rho, "rho", allow_auto=True)
        check_positive(self.local_steps, "local_steps", allow_none=True)
        check_positive(self.local_tol, "local_tol")
        check_positive(self.local_rtol, "local_rtol", strict=False)
        lay = problem.layout
        pooled = problem.pooled_constants()
        factor = 1.0 if self.rho == "auto" else float(self.rho)
        if self.rho == "auto":
            coef_rho = pooled["coef"] + problem.smooth_curvature
            self.rho_ = lay.block_vector(coef_rho, pooled["intercept"])
        else:
            self.rho_ = lay.block_vector(factor, factor)
        self.rho_ = np.maximum(self.rho_, np.finfo(float).tiny)
        self.steps_ = fista_steps(problem, self.rho_)
        self.q_ = min(float(np.min(self.rho_ * s)) for s in self.steps_)
        self.direct_ = self.local_steps is None and resolve_local_solver(
            self.local_solver, problem, composite=False)
        return self

    def _server_prox(self, v):
        lay = self.problem_.layout
        return lay.apply_prox(self.problem_.prox_penalty, v,
                              1.0 / float(self.rho_[0]) if lay.n_coef else 0.0)

    # -- local work -------------------------------------------------------
    def _solve_local(self, client, state, theta_t, lam):
        """argmin f_j(x) + <lam, x> + (rho/2)||x - theta_t||^2 (exact, or K gradient steps)."""
        problem, j, rho = self.problem_, state["j"], self.rho_
        linear = rho * theta_t - lam
        if self.local_steps is not None:
            x, step = theta_t.copy(), self.steps_[j]
            scale = problem.n_clients * problem.weights[j]
            for _ in range(int(self.local_steps)):
                g = problem.add_smooth_gradient(scale * client.gradient(x), x)
                x = x - step * (g + rho * x - linear)
            return x
        if self.direct_:
            return solve_direct(client, problem, j, rho, linear)
        start = state.get("local", theta_t)
        x, state["reference"] = solve_fista(
            client, problem, j, rho, linear, start, self.steps_[j], composite=False,
            strong_convexity=self.q_, tol=self.local_tol, rtol=self.local_rtol,
            max_iter=self.max_local_iter, reference=state.get("reference"))
        return x

    def _local_and_dual(self, client, state, theta_t):
        """Solve the local problem with this client's dual, then take the dual step
        ``lambda_j += rho (theta_j - theta_t)``; updates ``state``, returns ``theta_j``."""
        lam = state.get("lam", np.zeros_like(theta_t))
        x = self._solve_local(client, state, theta_t, lam)
        state["lam"] = lam + self.rho_ * (x - theta_t)
        state["local"] = x
        return x

    def broadcast(self, server, rnd):
        return {"theta": server["theta"]}

    def init_client(self, j, theta0):
        return {"j": j}

    def client_models(self, server, message, replies):
        return [r["theta"] for r in replies] if "theta" in replies[0] else None

    def server_model(self, server):
        return server["theta"]


_PARAMS_DOC = """
    Parameters
    ----------
    rho : float or "auto", default="auto"
        Penalty of the augmented Lagrangian: the weight of the proximal term
        of the local problem and the dual step. ``"auto"`` uses the pooled
        smoothness of each block (coefficients, intercept), computed before
        round one; a number is used for every block.
    local_steps : int or None, default=None
        ``None`` solves each local problem to ``local_tol`` (the regime in
        which the method is exact); an integer takes that many gradient steps
        from the server model (the papers' practice; inexact).
    local_solver : {"auto", "direct", "fista"}, default="auto"
        How ``local_steps=None`` solves: a linear system for least squares
        ("direct"), else FISTA with restart, warm-started.
    local_tol, local_rtol : float, default=1e-10, 1e-2
        FISTA stops at ``local_tol`` times its first gradient mapping, or
        ``local_rtol`` times this round's starting one.
    max_local_iter : int, default=1000
"""


class FedPD(_PrimalDualSolver):
    """FedPD (Zhang et al., 2021): full participation, duals on the clients.
    {params}
    Notes
    -----
    Communication: 1 vector down (the model), 1 up (``theta_j + lambda_j / rho``).
    With exact local solves it is consensus ADMM: exact.
    """.format(params=_PARAMS_DOC)

    name = "fedpd"
    requires_full_participation = True

    def init_server(self, theta0):
        return {"theta": np.array(theta0, dtype=float)}

    def client_update(self, client, state, message, rng):
        state = dict(state)
        x = self._local_and_dual(client, state, message["theta"])
        return {"v": x + state["lam"] / self.rho_}, state

    def summed_fields(self, server):
        return {"v": "sum"}  # the plain mean of theta_j + lambda_j / rho

    def aggregate_sums(self, server, sums, participants):
        return {"theta": self._server_prox(sums["v"] / len(participants))}


class FedADMM(_PrimalDualSolver):
    """FedADMM: consensus ADMM with partial participation and stale duals.
    {params}
    Notes
    -----
    The server keeps the mean over all clients of ``theta_j + lambda_j / rho``
    and moves it by the participants' increments (1 vector up); absent
    clients count with their last values. Communication: 1 down, 1 up.
    """.format(params=_PARAMS_DOC)

    name = "fedadmm"

    def init_server(self, theta0):
        theta = np.array(theta0, dtype=float)
        return {"theta": theta, "mean_v": theta.copy()}

    def client_update(self, client, state, message, rng):
        state = dict(state)
        v_old = state.get("v", state["theta0"])
        x = self._local_and_dual(client, state, message["theta"])
        state["v"] = x + state["lam"] / self.rho_
        return {"dv": state["v"] - v_old}, state

    def init_client(self, j, theta0):
        return {"j": j, "theta0": np.array(theta0, dtype=float)}

    def summed_fields(self, server):
        return {"dv": "sum"}  # the participants' increments of the stored means

    def aggregate_sums(self, server, sums, participants):
        N = self.problem_.n_clients
        mean_v = server["mean_v"] + sums["dv"] / N
        return {"theta": self._server_prox(mean_v), "mean_v": mean_v}


class FedDyn(_PrimalDualSolver):
    """FedDyn (Acar et al., 2021): dynamic regularization, duals on the clients.
    {params}
    Notes
    -----
    Clients keep ``h_j = lambda_j / rho`` and move it only when they take
    part; the server tracks ``mean_j h_j`` from the models it receives and
    sets ``theta = prox(mean_S theta_j + mean_j h_j)``. Communication: 1 down,
    1 up. (The official code also scales ``alpha`` per client by its data
    share; here the client weights already sit in ``f_j``.)
    """.format(params=_PARAMS_DOC)

    name = "feddyn"

    def init_server(self, theta0):
        theta = np.array(theta0, dtype=float)
        return {"theta": theta, "h_bar": np.zeros_like(theta)}

    def client_update(self, client, state, message, rng):
        state = dict(state)
        theta_t = message["theta"]
        h = state.get("h", np.zeros_like(theta_t))
        x = self._solve_local(client, state, theta_t, self.rho_ * h)
        state["h"] = h + (x - theta_t)
        state["local"] = x
        return {"theta": x}, state

    def summed_fields(self, server):
        return {"theta": "sum"}  # the sum of the participants' local models

    def aggregate_sums(self, server, sums, participants):
        N, m = self.problem_.n_clients, len(participants)
        # each participant's h_j moved by theta_j - theta^t
        h_bar = server["h_bar"] + (sums["theta"] - m * server["theta"]) / N
        theta = self._server_prox(sums["theta"] / m + h_bar)
        return {"theta": theta, "h_bar": h_bar}


class AFedPD(_PrimalDualSolver):
    """A-FedPD (Sun, Shen & Tao, 2024): server-stored duals with virtual updates.

    Parameters
    ----------
    virtual_update : bool, default=True
        Absent clients' duals take the step ``lambda_j += rho (theta_bar -
        theta^t)`` with the participants' mean ``theta_bar``, so that the mean
        dual moves as under full participation. ``False`` gives FedDyn's
        sequence exactly (with the duals stored on the server).
    {params}
    Notes
    -----
    Reconstructed from the paper's prose (its formulas were lost; see
    docs/algorithms/afedpd.md). Communication per participant: 2 vectors down (the
    model and its dual), 1 up (its local model).
    """.format(params=_PARAMS_DOC.replace("    Parameters\n    ----------\n", ""))

    name = "afedpd"
    duals_on_server = True

    def __init__(self, rho="auto", *, virtual_update=True, local_steps=None, local_solver="auto",
                 local_tol=1e-10, local_rtol=1e-2, max_local_iter=1000):
        self.virtual_update = virtual_update
        super().__init__(rho, local_steps=local_steps, local_solver=local_solver,
                         local_tol=local_tol, local_rtol=local_rtol,
                         max_local_iter=max_local_iter)

    def init_server(self, theta0):
        theta = np.array(theta0, dtype=float)
        N = self.problem_.n_clients
        return {"theta": theta, "lams": np.zeros((N, theta.size))}

    def personalize(self, server, message, j):
        return {"theta": message["theta"], "lam": server["lams"][j]}

    def client_update(self, client, state, message, rng):
        state = dict(state)
        x = self._solve_local(client, state, message["theta"], message["lam"])
        state["local"] = x
        return {"theta": x}, state

    # summed_fields stays None: the server updates each participant's own dual
    def aggregate(self, server, replies, weights, participants):
        theta_t = server["theta"]
        models = np.array([r["theta"] for r in replies])
        theta_bar = models.mean(axis=0)
        lams = server["lams"].copy()
        if self.virtual_update:
            lams += self.rho_ * (theta_bar - theta_t)  # everyone, then overwrite participants
        lams[participants] = server["lams"][participants] + self.rho_ * (models - theta_t)
        theta = self._server_prox(theta_bar + lams.mean(axis=0) / self.rho_)
        return {"theta": theta, "lams": lams}
