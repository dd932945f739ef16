"""DualFL (Park & Xu): accelerated dual ascent whose local problems are solved exactly.

ALGORITHMS.md section 2. Each round every client solves
``argmin f_j(theta) - <nu * zeta_j, theta>`` with
``f_j = N a_j L_j + psi`` (so that ``P = mean_j f_j``), the server averages the
local solutions, and each client moves its dual variable ``zeta_j`` by an
accelerated (FISTA-like) step; ``sum_j zeta_j = 0`` throughout.
"""

import numpy as np

from ..local import local_steps, resolve_local_solver, solve_direct, solve_fista
from ..local.sdca import solve_hinge_dual
from .base import FederatedSolver, check_positive

# Proximal strength relative to the pooled smoothness when the objective is
# not known to be strongly convex (measured on the oracle problems: see
# benchmarks/bench_solvers.py).
AUTO_PROXIMAL = 0.3
# With a ridge mu: proximal strength RIDGE_PROXIMAL * sqrt(mu L) (measured on
# logistic regression, breast cancer and digits: 0.25 needed 119 / 151 rounds
# to 1e-8, 0.5 167 / 289, 0.1 263 / 275, a flat 0.3 L 148 / 1802).
RIDGE_PROXIMAL = 0.25


class DualFL(FederatedSolver):
    """DualFL with a re-centred proximal term: exact for any convex objective.

    Parameters
    ----------
    nu : float or None, default=None
        Dual step ``nu`` (the strong-convexity modulus the local objectives
        are guaranteed). ``None`` uses the modulus skfed knows, per block:
        the proximal strength (below) plus the ridge part of the penalty on
        coefficients when there is no intercept. A number is the user's
        statement that every ``f_j`` is ``nu``-strongly convex.
    rho : float or "auto", default="auto"
        Acceleration parameter in ``[0, 1)``; 0 gives FISTA's momentum
        (valid for non-smooth objectives), ``rho = nu / L`` gives the linear
        rate ``1 - sqrt(nu / L)`` on smooth objectives. ``"auto"`` uses
        ``nu / L`` (largest client, per block) when the penalty is smooth and
        0 otherwise.
    proximal : float or "auto", default="auto"
        Strength ``alpha`` of the proximal term ``(alpha / 2) ||theta - c||^2``
        added to every local objective, relative to the pooled smoothness of
        each block (coefficients, intercept). ``"auto"``: 0.3 without a ridge
        term; 0 when the objective is strongly convex (a ridge and no
        intercept); with a ridge and an intercept ``min(0.3, 0.25 sqrt(mu / L))``
        on both blocks (a strength ~ ``sqrt(mu L)`` balances the local conditioning
        against the outer re-centring loop).
    recenter_tol : float, default=0.2
        The anchor ``c`` moves to the current server model when a round moves
        the model by less than ``recenter_tol`` times its distance to ``c``
        (the inner DualFL iteration has nearly solved the proximal problem).
    local_solver : {"auto", "fista", "direct", "dual"}, default="auto"
        ``"direct"`` solves each local problem exactly as a linear system
        (least-squares loss, no non-smooth penalty; the client's Gram matrix
        is computed once). ``"fista"``: accelerated proximal gradient with
        restart. ``"dual"``: coordinate ascent on the dual of the local
        problem, the non-smooth local solver for the hinge loss (no
        non-smooth penalty; its duals warm-start across rounds). ``"auto"``:
        dual for the hinge loss, else direct when it applies and
        ``n_features < 2000``, else FISTA.
    local_tol : float, default=1e-10
        Local problems are solved by FISTA with restart, warm-started, until
        their gradient mapping is below ``local_tol`` times its value at the
        client's first start (an absolute target) ...
    local_rtol : float, default=1e-2
        ... or below ``local_rtol`` times its value at this round's warm
        start (a relative target: it tightens by itself as the warm starts
        approach the solution, which they do as the duals converge).
    max_local_iter : int, default=1000

    Notes
    -----
    Full participation only: the average must be over every client for
    ``sum_j zeta_j = 0`` to hold (sampling is future work in the paper).

    Deviation (non-strongly convex objectives: the Lasso, any intercept).
    The paper (its section 4) adds ``(alpha / 2) ||theta||^2`` and so
    converges to the optimum of a perturbed problem. skfed adds
    ``(alpha / 2) ||theta - c||^2`` instead: with ``nu = alpha`` the fixed
    point of DualFL for an anchor ``c`` is ``prox_{P / alpha}(c)`` (sum the
    local optimality conditions; the ``zeta_j`` cancel), so re-centring ``c``
    on the server model is the proximal-point method on ``P`` itself, and
    the limit is the optimum of the estimator's own objective. The dual
    variables are kept across anchors (their optimum, the deviation of each
    client's gradient from the mean, depends on ``c`` only through the
    solution); the momentum restarts.

    Deviation (metric). ``nu`` and ``alpha`` are per block (coefficients,
    intercept), i.e. DualFL runs in block-scaled coordinates; the theory is
    invariant under that change of variables.

    Output: the server model is the average of the clients' (exactly
    sparse) local solutions; they agree only in the limit, so the fitted
    model is one proximal-gradient step from that average, taken with the
    pooled gradient of the last monitoring pass (never a worse objective).

    Local stopping rule: the paper's primal-dual gap criterion needs the
    conjugate of ``g_j``; skfed uses the gradient-mapping norm relative to
    a fixed per-client reference, warm-started (ALGORITHMS.md 2.4).
    """

    name = "dualfl"
    polish_output = True
    requires_full_participation = True
    requires_smooth_datafit = False  # the hinge loss is solved in the dual
    penalty_support = "prox"

    def check_problem(self, problem, participation):
        super().check_problem(problem, participation)
        fit = problem.datafit
        if not fit.smooth and not (fit.dual_coordinate and problem.prox_penalty is None):
            raise ValueError(
                f"solver 'dualfl' solves non-smooth local problems only for the hinge loss "
                f"with a smooth penalty (in the dual); {fit!r} with {problem.prox_penalty!r} "
                "needs a subgradient solver ('fedmls' or 'fedavg')."
            )

    def guarantee(self, problem, participation=1.0):
        if not problem.datafit.smooth:
            return "sublinear", ("exact local solves in the dual; the non-smooth loss makes "
                                 "the dual non-strongly concave, so the rate is O(1/r^2)")
        return "exact", "exact local solves, accelerated dual ascent, re-centred proximal term"

    def __init__(self, nu=None, rho="auto", *, proximal="auto", recenter_tol=0.2,
                 local_solver="auto", local_tol=1e-10, local_rtol=1e-2, max_local_iter=1000):
        self.nu = nu
        self.rho = rho
        self.proximal = proximal
        self.recenter_tol = recenter_tol
        self.local_solver = local_solver
        self.local_tol = local_tol
        self.local_rtol = local_rtol
        self.max_local_iter = max_local_iter

    # -- setup ------------------------------------------------------------
    def setup(self, problem, participation=1.0):
        super().setup(problem, participation)
        check_positive(self.nu, "nu", allow_none=True)
        check_positive(self.proximal, "proximal", allow_auto=True, strict=False)
        check_positive(self.recenter_tol, "recenter_tol")
        check_positive(self.local_tol, "local_tol")
        check_positive(self.local_rtol, "local_rtol", strict=False)
        check_positive(self.max_local_iter, "max_local_iter")
        self.dual_ = not problem.datafit.smooth
        if self.local_solver == "dual" and not self.dual_:
            raise ValueError("local_solver='dual' is the hinge loss's local solver; "
                             f"{problem.datafit!r} is smooth: use 'auto', 'fista' or 'direct'.")
        if self.dual_ and self.local_solver not in ("auto", "dual"):
            raise ValueError(f"local_solver={self.local_solver!r} cannot solve the non-smooth "
                             f"{problem.datafit!r}; use 'dual' (or 'auto').")
        self.direct_ = not self.dual_ and resolve_local_solver(
            self.local_solver if self.local_solver != "dual" else "auto", problem,
            composite=True)
        if not (self.rho == "auto" or (isinstance(self.rho, (int, float)) and 0 <= self.rho < 1)):
            raise ValueError(f"rho must be in [0, 1) or 'auto'; got {self.rho!r}.")
        lay = problem.layout
        pooled = problem.pooled_constants()
        mu_coef = problem.smooth_curvature  # ridge part of the penalty
        strongly_convex = mu_coef > 0 and not lay.fit_intercept
        if self.proximal == "auto":
            # with a ridge mu the coefficients are strongly convex already: a
            # proximal term ~ sqrt(mu L) balances the local conditioning
            # (L / alpha) against the outer re-centring loop (alpha / mu); the
            # intercept (curved by the data near the optimum) gets the same
            L_coef = pooled["coef"] + mu_coef
            coef_factor = (AUTO_PROXIMAL if mu_coef == 0 else
                           min(AUTO_PROXIMAL, RIDGE_PROXIMAL * float(np.sqrt(mu_coef / L_coef))))
            int_factor = coef_factor if mu_coef > 0 else AUTO_PROXIMAL
            if strongly_convex:  # the paper's DualFL, no proximal term needed
                coef_factor = int_factor = 0.0
        else:
            coef_factor = int_factor = float(self.proximal)
        alpha = lay.block_vector(coef_factor * (pooled["coef"] + mu_coef),
                                 int_factor * pooled["intercept"])
        if not strongly_convex and not np.all(alpha > 0) and self.nu is None and (
                mu_coef == 0 or (lay.fit_intercept and int_factor == 0)):
            raise ValueError(
                "DualFL needs strongly convex local objectives: this objective is not "
                "strongly convex (L1 penalty or an intercept), so proximal must be > 0."
            )
        self.alpha_ = alpha
        self.nu_ = (alpha + lay.block_vector(mu_coef, 0.0)
                    if self.nu is None else lay.block_vector(self.nu, self.nu))
        # local smoothness per client and block: N a_j L_j + ridge + alpha
        self.local_steps_ = local_steps(problem, alpha)
        self.local_q_ = min(float(np.min(self.nu_ * s)) for s in self.local_steps_)
        q = self.local_q_
        if self.rho == "auto":
            # nu / L needs a smooth dual-side (smooth f_j); FISTA momentum otherwise
            smooth = problem.prox_penalty is None and problem.datafit.smooth
            self.rho_ = q if smooth else 0.0
        else:
            self.rho_ = float(self.rho)
        return self

    # -- rounds -----------------------------------------------------------
    def init_server(self, theta0):
        theta = np.array(theta0, dtype=float)
        return {"theta": theta, "previous": theta, "anchor": theta, "t": 1.0, "beta": 0.0,
                "recenter": False}

    def init_client(self, j, theta0):
        return {"j": j}

    def broadcast(self, server, rnd):
        return {"theta": server["theta"], "beta": server["beta"],
                "recenter": float(server["recenter"])}

    def client_update(self, client, state, message, rng):
        state = dict(state)
        theta_bar = message["theta"]
        if "zeta" not in state:  # first round
            state.update(zeta=np.zeros_like(theta_bar), u_prev=None, local=theta_bar.copy(),
                         anchor=theta_bar.copy(), reference=None, duals=None)
        else:
            # dual step of the previous round, with momentum beta
            u = state["zeta"] + theta_bar - state["local"]
            beta = message["beta"]
            state["zeta"] = u if state["u_prev"] is None else (1 + beta) * u - beta * state["u_prev"]
            state["u_prev"] = u
            if message["recenter"]:
                state["anchor"] = theta_bar.copy()
        # local problem: f_j + (alpha/2)||theta - c||^2 - <nu zeta, theta>
        j, linear = state["j"], self.alpha_ * state["anchor"] + self.nu_ * state["zeta"]
        if self.direct_:
            state["local"] = solve_direct(client, self.problem_, j, self.alpha_, linear)
        elif self.dual_:
            state["local"], state["duals"], state["reference"] = solve_hinge_dual(
                client, self.problem_, j, self.alpha_, linear, state.get("duals"),
                tol=self.local_tol, rtol=self.local_rtol, max_epochs=self.max_local_iter,
                reference=state["reference"])
        else:
            state["local"], state["reference"] = solve_fista(
                client, self.problem_, j, self.alpha_, linear, state["local"],
                self.local_steps_[j], composite=True, strong_convexity=self.local_q_,
                tol=self.local_tol, rtol=self.local_rtol, max_iter=self.max_local_iter,
                reference=state["reference"])
        return {"theta": state["local"]}, state

    def aggregate(self, server, replies, weights, participants):
        theta = sum(r["theta"] for r in replies) / len(replies)
        rho, t = self.rho_, server["t"]
        t_next = 0.5 * (1 - rho * t * t + np.sqrt((1 - rho * t * t) ** 2 + 4 * t * t))
        beta = ((t - 1) / t_next) * ((1 - rho * t_next) / (1 - rho))
        # recentre the proximal anchor once the inner iteration has (nearly) converged
        recenter = False
        if np.any(self.alpha_ > 0):
            weight = np.sqrt(self.alpha_)
            step = np.linalg.norm(weight * (theta - server["theta"]))
            outer = np.linalg.norm(weight * (theta - server["anchor"]))
            recenter = step <= self.recenter_tol * outer
        anchor = theta if recenter else server["anchor"]
        if recenter:
            t_next = 1.0  # momentum restarts with the new anchor
        return {"theta": theta, "previous": server["theta"], "anchor": anchor, "t": t_next,
                "beta": beta, "recenter": recenter}

    def server_model(self, server):
        return server["theta"]

    def client_models(self, server, message, replies):
        return [r["theta"] for r in replies]
