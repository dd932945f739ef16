"""DualFL (Park & Xu): accelerated dual ascent whose local problems are solved exactly.

docs/algorithms/dualfl.md. Each round every client solves
``argmin f_j(theta) - <nu * zeta_j, theta>`` with
``f_j = N a_j L_j + psi`` (so that ``P = mean_j f_j``), the server averages the
local solutions, and each client moves its dual variable ``zeta_j`` by an
accelerated (FISTA-like) step; ``sum_j zeta_j = 0`` throughout.
"""

import numpy as np

from ..local import local_steps, resolve_local_solver, solve_direct, solve_fista
from ..local.sdca import solve_hinge_dual
from .base import FederatedSolver, check_positive

#: proximal strength ``alpha`` relative to the loss's curvature (the pooled
#: smoothness bound for least squares; for other smooth losses the bound times
#: the measured curvature scale). Measured (rounds to a 1e-8 gap) on the oracle
#: Lasso / elastic-net splits, L1 and L2 logistic regression (breast cancer,
#: digits) and 20 shifted, uneven ridge problems: 0.1 beat 0.3 and 0.03 in total
#: (see docs/algorithms/dualfl.md).
AUTO_PROXIMAL = 0.1
#: the proximal strength follows the measured curvature down to this fraction
#: of the smoothness bound
MIN_CURVATURE_SCALE = 2.0 ** -10
#: hysteresis of the curvature scale (see DualFL._scale_for)
SCALE_MARGIN = 0.85
#: balance of the inner and outer loops (proximal="auto"): the inner DualFL
#: iteration should contract the consensus residual by a moderate factor per
#: round. If the median of its last BALANCE_WINDOW contractions is below
#: FAST_INNER, alpha is needlessly strong (the outer loop pays for it) and
#: halves; above SLOW_INNER it is too weak and doubles (and is never halved
#: below that again, so the rule cannot oscillate).
FAST_INNER = 0.5
SLOW_INNER = 0.9
BALANCE_WINDOW = 4
#: ... measured after the first BALANCE_START rounds (the early rounds contract
#: fast whatever alpha is)
BALANCE_START = 16
BALANCE_RANGE = (2.0 ** -20, 8.0)
#: the balance at the start when the objective is strongly convex (a ridge,
#: no intercept): digits (benchmarks/reproduce.py) gap after 8 rounds 5.4e-2
#: at 1, 5.5e-4 at 0.25, rounds to 1e-8 47 -> 37 (docs/algorithms/dualfl.md)
STRONGLY_CONVEX_BALANCE = 0.25
#: non-smooth losses (hinge) keep the previous rule, measured there: no
#: proximal term when the objective is strongly convex (the paper's DualFL),
#: otherwise NONSMOOTH_PROXIMAL times the smoothness bound, capped at
#: RIDGE_PROXIMAL sqrt(mu L) with a ridge mu, fixed (no curvature to measure, and
#: the balance rule cost 10-100x in gap on the hinge oracles; see
#: docs/algorithms/dualfl.md)
NONSMOOTH_PROXIMAL = 0.3
RIDGE_PROXIMAL = 0.25
#: power iterations per measurement of a client's curvature (warm-started)
CURVATURE_ITERATIONS = 3


class DualFL(FederatedSolver):
    """DualFL with a re-centred proximal term: exact for any convex objective.

    Parameters
    ----------
    nu : float or None, default=None
        Dual step ``nu`` (the strong-convexity modulus the local objectives
        are guaranteed). ``None`` uses the modulus skfed knows, per block:
        the proximal strength (below) plus the ridge part of the penalty on
        coefficients. A number is the user's statement that every ``f_j`` is
        ``nu``-strongly convex.
    rho : float or "auto", default="auto"
        Acceleration parameter in ``[0, 1)``; 0 gives FISTA's momentum
        (valid for non-smooth objectives), ``rho = nu / L`` gives the linear
        rate ``1 - sqrt(nu / L)`` on smooth objectives. ``"auto"`` uses
        ``nu / L`` (largest client, per block) when the penalty is smooth and
        0 otherwise.
    proximal : float or "auto", default="auto"
        Strength ``alpha`` of the proximal term ``(alpha / 2) ||theta - c||^2``
        added to every local objective. A number: that fraction of the pooled
        smoothness of each block (coefficients plus ridge, intercept), fixed;
        0 is the paper's DualFL (only for strongly convex objectives).
        ``"auto"`` (Notes): ``0.1`` times the loss's curvature, adapted as
        the rounds reveal it (curvature of the loss at the server model,
        inner/outer balance), for every objective, strongly convex or not.
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
    anchor_momentum : bool, default=True
        Extrapolate the anchor when it is re-centred (Nesterov's momentum on
        the outer proximal-point loop, with adaptive restart); ``False`` is
        the plain proximal-point loop. Smooth losses only: with a non-smooth
        loss the anchor is never extrapolated and the dual momentum restarts
        with each anchor (the previous rule, better there).

    Notes
    -----
    Defaults (issue 14; measured in docs/algorithms/dualfl.md). The outer
    loop (re-centring the anchor ``c``) is a proximal-point method on ``P``:
    plain, it contracts by ``alpha / (alpha + mu)`` per re-centring, where
    ``mu`` is ``P``'s curvature near the optimum, so it needs ``alpha / mu``
    re-centrings; with ``anchor_momentum`` (Catalyst-style extrapolation
    ``c = x_k + b (x_k - x_{k-1})``, FISTA's ``b``, restarted when the
    proximal step ``alpha (c - x_k)`` opposes the momentum or grows) about
    ``sqrt(alpha / mu)``. The inner dual momentum is kept across
    re-centrings and restarted when the consensus residual (its gradient)
    grows. ``proximal="auto"`` sets ``alpha = 0.1 s b L`` per block with
    ``L`` the pooled smoothness bound (plus the ridge ``mu``), where

    - ``s`` is the loss's curvature at the server model relative to its
      bound (1 for least squares): at each re-centring the clients measure
      the top curvature of their loss along the coefficients (three
      warm-started power iterations, Hessian-vector products by gradient
      differences; one scalar each way), and ``s`` moves to the weighted
      ratio, as a power of two, when it leaves its octave by 15%. A
      saturated logistic fit has ``s ~ 0.1`` (breast cancer and digits):
      ``alpha`` relative to the bound would be ten times too strong;
    - ``b`` balances the two loops: the inner iteration's contraction of
      the consensus residual per round (median of the last four, after 16
      rounds) below 0.5 halves it, above 0.9 doubles it (never to be halved
      below that again). Where the clients' curvatures are complementary
      (the inner iteration is fast at any ``alpha``) ``b`` falls towards the
      paper's DualFL; where they share their stiff directions it stays.

    A re-centring is also forced when a new curvature measurement changes
    ``s`` (the inner problem changes anyway). With a ridge and no intercept
    (strongly convex) ``b`` starts at 1/4: the proximal term is optional
    there and a weaker one keeps the paper's fast first rounds.

    The paper's DualFL (``alpha = 0``, ``nu = mu``) is ``proximal=0`` with a
    ridge and no intercept. For smooth losses it is no longer the default
    there: it ignores the curvature the data add to ``mu`` and is slower than
    one-step proximal gradient when the sites share their stiff directions.
    For a non-smooth loss (hinge) ``"auto"`` keeps the previous rule: the
    paper's DualFL when strongly convex, otherwise a fixed
    ``min(0.3, 0.25 sqrt(mu / L)) L`` (0.3 L without a ridge).

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
    solution), and so is their momentum; when ``alpha`` changes, ``nu zeta_j``
    is kept (``zeta_j`` rescaled) and every momentum restarts.

    Deviation (metric). ``nu`` and ``alpha`` are per block (coefficients,
    intercept), i.e. DualFL runs in block-scaled coordinates; the theory is
    invariant under that change of variables.

    Output: the server model is the average of the clients' (exactly
    sparse) local solutions; they agree only in the limit, so the fitted
    model is one proximal-gradient step from that average, taken with the
    pooled gradient of the last monitoring pass (never a worse objective).

    Local stopping rule: the paper's primal-dual gap criterion needs the
    conjugate of ``g_j``; skfed uses the gradient-mapping norm relative to
    a fixed per-client reference, warm-started (docs/algorithms/dualfl.md,
    *Deviations*).
    """

    name = "dualfl"
    polish_output = True
    requires_full_participation = True
    requires_smooth_datafit = False  # the hinge loss is solved in the dual
    penalty_support = "prox"
    _wire_attributes = ("dual_", "direct_", "adaptive_", "balanced_",  # see FederatedSolver
                        "initial_balance_", "alpha_", "nu_", "local_steps_", "local_q_",
                        "rho_", "bound_")

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
                 local_solver="auto", local_tol=1e-10, local_rtol=1e-2, max_local_iter=1000,
                 anchor_momentum=True):
        self.nu = nu
        self.rho = rho
        self.proximal = proximal
        self.recenter_tol = recenter_tol
        self.local_solver = local_solver
        self.local_tol = local_tol
        self.local_rtol = local_rtol
        self.max_local_iter = max_local_iter
        self.anchor_momentum = anchor_momentum

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
        mu_coef = problem.smooth_curvature  # ridge part of the penalty
        # the proximal strength follows the loss's curvature at the server model
        # when it is "auto" and the loss is neither quadratic (its curvature is
        # the bound) nor non-smooth (no curvature to measure)
        self.adaptive_ = (self.proximal == "auto" and problem.datafit.smooth
                          and not problem.datafit.quadratic)
        # the inner/outer balance of alpha: "auto" on smooth losses only
        self.balanced_ = self.proximal == "auto" and problem.datafit.smooth
        strongly_convex = mu_coef > 0 and not lay.fit_intercept
        # strongly convex: alpha is optional (the paper's DualFL has none) and a
        # weaker start keeps the paper's fast first rounds
        self.initial_balance_ = (STRONGLY_CONVEX_BALANCE if self.balanced_ and strongly_convex
                                 else 1.0)
        alpha = self._alpha(1.0, self.initial_balance_)
        if not strongly_convex and not np.all(alpha > 0) and self.nu is None:
            raise ValueError(
                "DualFL needs strongly convex local objectives: this objective is not "
                "strongly convex (L1 penalty or an intercept), so proximal must be > 0."
            )
        self.alpha_ = alpha
        self.nu_, self.local_steps_, self.local_q_, self.rho_ = self._constants(
            1.0, self.initial_balance_)[1:]
        # the smoothness bounds of the clients' mean losses, weighted as in P
        self.bound_ = float(problem.weights @ [l["coef"] for l in problem.lipschitz])
        return self

    def _alpha(self, scale, balance=1.0):
        """Proximal strength per block when the loss's curvature is ``scale`` times
        its smoothness bound (1 for a quadratic loss), times the inner/outer
        ``balance`` factor."""
        problem = self.problem_
        lay, pooled, mu = problem.layout, problem.pooled_constants(), problem.smooth_curvature
        if self.proximal == "auto" and not problem.datafit.smooth:
            if mu > 0 and not lay.fit_intercept:
                return lay.block_vector(0.0, 0.0)  # strongly convex: the paper's DualFL
            L = pooled["coef"] + mu
            factor = (NONSMOOTH_PROXIMAL if mu == 0 else
                      min(NONSMOOTH_PROXIMAL, RIDGE_PROXIMAL * float(np.sqrt(mu / L))))
            return lay.block_vector(factor * L, (factor if mu > 0 else NONSMOOTH_PROXIMAL)
                                    * pooled["intercept"])
        factor = AUTO_PROXIMAL * balance if self.proximal == "auto" else float(self.proximal)
        return lay.block_vector(factor * (scale * pooled["coef"] + mu),
                                factor * scale * pooled["intercept"])

    def _constants(self, scale, balance=1.0):
        """``(alpha, nu, local_steps, local_q, rho)`` at a curvature scale and
        balance (cached)."""
        cache = self.__dict__.setdefault("_constants_cache", {})
        key = (scale, balance)
        if key not in cache:
            problem, lay = self.problem_, self.problem_.layout
            alpha = self._alpha(scale, balance)
            nu = (alpha + lay.block_vector(problem.smooth_curvature, 0.0)
                  if self.nu is None else lay.block_vector(self.nu, self.nu))
            # local smoothness per client and block: N a_j L_j + ridge + alpha
            steps = local_steps(problem, alpha)
            q = min(float(np.min(nu * s)) for s in steps)
            if self.rho == "auto":
                # nu / L needs a smooth dual-side (smooth f_j); FISTA momentum otherwise
                smooth = problem.prox_penalty is None and problem.datafit.smooth
                rho = q if smooth else 0.0
            else:
                rho = float(self.rho)
            cache[key] = (alpha, nu, steps, q, rho)
        return cache[key]

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_constants_cache", None)  # recomputed where the solver runs
        return state

    # -- rounds -----------------------------------------------------------
    def init_server(self, theta0):
        theta = np.array(theta0, dtype=float)
        return {"theta": theta, "anchor": theta, "outer_point": theta, "t": 1.0,
                "beta": 0.0, "recenter": False, "outer_t": 1.0, "anchor_beta": 0.0,
                "scale": 1.0, "balance": self.initial_balance_, "residual": np.inf, "curvature": None,
                "gnorm": np.inf, "floor": BALANCE_RANGE[0], "contractions": (),
                "rounds": 0}

    def init_client(self, j, theta0):
        return {"j": j}

    def broadcast(self, server, rnd):
        message = {"theta": server["theta"], "beta": server["beta"],
                   "recenter": float(server["recenter"])}
        if self.anchor_momentum:
            message["anchor_beta"] = server["anchor_beta"]
        if self.adaptive_:
            message["scale"] = server["scale"]
        if self.balanced_:
            message["balance"] = server["balance"]
        return message

    def client_update(self, client, state, message, rng):
        state = dict(state)
        theta_bar = message["theta"]
        key = (message.get("scale", 1.0), message.get("balance", 1.0))
        alpha, nu, steps, q, _ = self._constants(*key)
        first = "zeta" not in state
        if first:  # first round
            state.update(zeta=np.zeros_like(theta_bar), u_prev=None, local=theta_bar.copy(),
                         anchor=theta_bar.copy(), outer_point=theta_bar.copy(),
                         reference=None, duals=None, key=key)
        else:
            # dual step of the previous round, with momentum beta
            u = state["zeta"] + theta_bar - state["local"]
            beta = message["beta"]
            state["zeta"] = u if state["u_prev"] is None else (1 + beta) * u - beta * state["u_prev"]
            state["u_prev"] = u
            if state["key"] != key:
                # a new proximal strength: keep nu * zeta (the deviation of this
                # client's gradient from the mean) and restart the momentum
                state["zeta"] = state["zeta"] * (self._constants(*state["key"])[1] / nu)
                state["u_prev"] = None
                state["key"] = key
            if message["recenter"]:
                # the new anchor: the server model, extrapolated along the last
                # outer step (an accelerated proximal-point method)
                b = message.get("anchor_beta", 0.0)
                state["anchor"] = theta_bar + b * (theta_bar - state["outer_point"])
                state["outer_point"] = theta_bar.copy()
        reply = {}
        if self.adaptive_ and (first or message["recenter"]):
            reply["curvature"], state["curvature_v"] = _top_curvature(
                client, theta_bar, state.get("curvature_v"), rng)
        # local problem: f_j + (alpha/2)||theta - c||^2 - <nu zeta, theta>
        j, linear = state["j"], alpha * state["anchor"] + nu * state["zeta"]
        if self.direct_:
            state["local"] = solve_direct(client, self.problem_, j, alpha, linear)
        elif self.dual_:
            state["local"], state["duals"], state["reference"] = solve_hinge_dual(
                client, self.problem_, j, alpha, linear, state.get("duals"),
                tol=self.local_tol, rtol=self.local_rtol, max_epochs=self.max_local_iter,
                reference=state["reference"])
        else:
            state["local"], state["reference"] = solve_fista(
                client, self.problem_, j, alpha, linear, state["local"],
                steps[j], composite=True, strong_convexity=q,
                tol=self.local_tol, rtol=self.local_rtol, max_iter=self.max_local_iter,
                reference=state["reference"])
        reply["theta"] = state["local"]
        # the client's part of the consensus residual, measured from the broadcast
        # model (the server subtracts the mean's part: only sums leave the sites)
        metric = np.where(alpha > 0, alpha, nu)
        reply["spread"] = float(np.sum(metric * (state["local"] - theta_bar) ** 2))
        return reply, state

    def summed_fields(self, server):
        fields = {"theta": "sum", "spread": "sum"}
        if self.adaptive_ and (server["rounds"] == 0 or server["recenter"]):
            fields["curvature"] = "weighted"  # measured in the first round and at re-centrings
        return fields

    def aggregate_sums(self, server, sums, participants):
        n = len(participants)
        theta = sums["theta"] / n
        scale, balance = server["scale"], server["balance"]
        alpha, nu, _, _, rho = self._constants(scale, balance)
        t = server["t"]
        t_next = 0.5 * (1 - rho * t * t + np.sqrt((1 - rho * t * t) ** 2 + 4 * t * t))
        beta = ((t - 1) / t_next) * ((1 - rho * t_next) / (1 - rho))
        # the dual iteration's gradient is the consensus residual: restart its
        # momentum when the residual grows (O'Donoghue & Candes; Goldstein et al.)
        metric = np.where(alpha > 0, alpha, nu)
        # sum_j |theta_j - mean|^2 = sum_j |theta_j - broadcast|^2 - n |mean - broadcast|^2
        residual = max(0.0, float(sums["spread"]) - n * float(
            np.sum(metric * (theta - server["theta"]) ** 2)))
        if residual > server["residual"]:
            t_next, beta = 1.0, 0.0
        curvature = server["curvature"]
        if "curvature" in sums:
            curvature = float(sums["curvature"])
        # re-centre the proximal anchor once the inner iteration has (nearly) converged
        recenter = False
        if np.any(alpha > 0):
            weight = np.sqrt(alpha)
            step = np.linalg.norm(weight * (theta - server["theta"]))
            outer = np.linalg.norm(weight * (theta - server["anchor"]))
            recenter = bool(step <= self.recenter_tol * outer)
            if (self.adaptive_ and "curvature" in sums
                    and self._scale_for(curvature, scale) != scale):
                # a new curvature scale: the inner problem changes (and its
                # momentum restarts) whatever it has reached, so the model is
                # the next anchor now rather than after another round
                recenter = True
        contractions = server["contractions"]
        rounds = server["rounds"] + 1
        if (rounds > BALANCE_START and not server["recenter"] and np.isfinite(server["residual"])
                and server["residual"] > 0):
            contractions = (contractions + (residual / server["residual"],))[-BALANCE_WINDOW:]
        out = dict(server, theta=theta, t=t_next, beta=beta, recenter=recenter,
                   residual=residual, curvature=curvature, anchor_beta=0.0,
                   contractions=contractions, rounds=rounds)
        if not recenter:
            return out
        point, outer_t, anchor_beta = server["outer_point"], server["outer_t"], 0.0
        new_scale, new_balance, floor = scale, balance, server["floor"]
        if self.adaptive_ and curvature is not None:
            new_scale = self._scale_for(curvature, scale)
        if self.balanced_ and len(contractions) >= BALANCE_WINDOW:
            inner = float(np.median(contractions))
            if inner < FAST_INNER and balance / 2 >= floor:
                new_balance = balance / 2
            elif inner > SLOW_INNER and balance < BALANCE_RANGE[1]:
                new_balance = floor = min(balance * 2, BALANCE_RANGE[1])
        gnorm = float(np.linalg.norm(np.sqrt(alpha) * (server["anchor"] - theta)))
        if (new_scale, new_balance) != (scale, balance):
            # a new proximal problem: every momentum restarts
            outer_t, t_next, beta, gnorm, contractions = 1.0, 1.0, 0.0, np.inf, ()
        elif not self.problem_.datafit.smooth:
            # non-smooth loss: the previous rule, better on the hinge oracles
            # (docs/algorithms/dualfl.md): the dual momentum restarts with each
            # anchor, and the anchor is not extrapolated
            t_next = 1.0
        elif self.anchor_momentum:
            # adaptive restart: the proximal-point step (anchor - theta, a
            # gradient of the Moreau envelope) must neither oppose the momentum
            # nor grow
            if (np.dot(alpha * (server["anchor"] - theta), theta - point) > 0
                    or gnorm > server["gnorm"]):
                outer_t = 1.0
            else:
                t_new = 0.5 * (1 + np.sqrt(1 + 4 * outer_t * outer_t))
                anchor_beta = (outer_t - 1) / t_new
                outer_t = t_new
        out.update(anchor=theta + anchor_beta * (theta - point), outer_point=theta,
                   outer_t=outer_t, anchor_beta=anchor_beta, scale=new_scale,
                   balance=new_balance, floor=floor, contractions=contractions, t=t_next,
                   beta=beta, gnorm=gnorm)
        return out

    def _scale_for(self, curvature, scale):
        """The curvature scale to use: the measured ratio of the loss's top
        curvature to its smoothness bound, rounded down to a power of two and
        moved only when the ratio leaves ``[scale, 2 scale)`` by a margin (each
        move restarts the momentum)."""
        ratio = float(np.clip(curvature / max(self.bound_, np.finfo(float).tiny),
                              MIN_CURVATURE_SCALE, 1.0))
        if SCALE_MARGIN * scale <= ratio < 2.0 * scale / SCALE_MARGIN or ratio == scale:
            return scale
        return float(2.0 ** np.floor(np.log2(ratio)))

    def server_model(self, server):
        return server["theta"]

    def client_models(self, server, message, replies):
        return [r["theta"] for r in replies]


def _top_curvature(client, theta, v, rng, n_iter=CURVATURE_ITERATIONS):
    """Largest curvature of the client's mean loss at ``theta`` along the
    coefficients: a few warm-started power iterations whose Hessian-vector
    products are differences of gradients. Returns ``(curvature, v)``."""
    lay = client.layout
    n = lay.n_coef
    if v is None:
        v = rng.standard_normal(n)
    v = v / max(np.linalg.norm(v), np.finfo(float).tiny)
    g0 = client.gradient(theta)[:n]
    eps = 1e-6 * (1.0 + np.linalg.norm(theta))
    curvature = 0.0
    for _ in range(n_iter):
        shifted = theta.copy()
        shifted[:n] += eps * v
        hv = (client.gradient(shifted)[:n] - g0) / eps
        curvature = float(v @ hv)
        norm = np.linalg.norm(hv)
        if not norm > 0:
            break
        v = hv / norm
    return max(curvature, 0.0), v
