"""Federated proximal Newton: every site sends its loss, gradient and Hessian.

Each round the clients evaluate the server's *trial* point; the server tests
it with an Armijo line search on the pooled objective and, when it accepts
it, builds the next direction from the gradient and Hessian it has just
received, so a line-search step costs no extra round. Past a byte budget the
Hessian is not sent, and the server runs proximal L-BFGS on the aggregated
gradients instead.
"""

from functools import lru_cache

import numpy as np

from .._messages import show
from ..local.quadratic_model import CompactModel, DenseModel, solve_quadratic_model
from .base import FederatedSolver, check_positive

#: Armijo constant of the sufficient-decrease test (Lee, Sun & Saunders 2014)
SIGMA = 1e-4
#: the pooled objective is a sum of rounded client values: a trial within
#: this relative amount of the Armijo bound is accepted (otherwise the last
#: steps, whose decrease is below round-off, would be halved for ever)
ROUNDOFF = 1e-14
#: after this many halvings the direction is given up: the server
#: re-evaluates its last accepted point (a restart; also what heals a warm
#: start whose saved state belongs to other data)
MAX_HALVINGS = 30
#: L-BFGS keeps a pair only if s'y > CURVATURE * ||s|| ||y|| (B stays positive definite)
CURVATURE = 1e-10
HESSIAN_MODES = ("auto", "full", "quasi-newton")
#: sub-problem tolerances of subproblem_tol="auto" (see FedNewton)
NEWTON_SUBPROBLEM_TOL = 1e-12
QUASI_NEWTON_SUBPROBLEM_TOL = 1e-2


@lru_cache(maxsize=8)
def _upper(p):
    return np.triu_indices(p)


def pack_upper(H):
    """The upper triangle of the symmetric ``H``, row by row: ``p (p + 1) / 2`` floats."""
    return H[_upper(H.shape[0])]


def unpack_upper(packed, p):
    """The symmetric ``p x p`` matrix of :func:`pack_upper`'s output."""
    H = np.zeros((p, p))
    H[_upper(p)] = packed
    return H + np.triu(H, 1).T


def full_message_bytes(p):
    """Bytes one client sends per round with the Hessian: value, gradient and the
    packed Hessian of ``p`` parameters, 8 bytes a float."""
    return 8 * (p * (p + 1) // 2 + p + 1)


class FedNewton(FederatedSolver):
    """Federated proximal Newton method: the pooled optimum in a few rounds.

    Each round every client sends the value, the gradient and the Hessian
    (upper triangle) of its sample-weighted mean loss at the broadcast
    point. The server sums them with the clients' weights, adds the ridge
    part of the penalty, and solves the proximal Newton sub-problem
    ``min_d g'd + d'Hd / 2 + psi(theta + d)`` for the non-smooth part ``psi``
    of the penalty: a linear solve without one, coordinate descent for L1
    (as glmnet), accelerated projected / proximal gradient for the balls and
    the nuclear norm. An Armijo line search on the pooled objective
    globalizes the step without extra rounds (Notes).

    Parameters
    ----------
    hessian : {"auto", "full", "quasi-newton"}, default="auto"
        ``"full"``: clients send their Hessians. ``"quasi-newton"``: they
        send value and gradient only, and the server builds a limited-memory
        BFGS model of the pooled Hessian from the gradients (proximal
        L-BFGS): more rounds, ``p + 1`` floats a message. ``"auto"``: full
        while one client's message, ``8 (p (p + 1) / 2 + p + 1)`` bytes for
        ``p`` parameters (coefficients and intercepts), fits in
        ``max_message_bytes``, and when the loss defines its second
        derivative (``Datafit.raw_hessian``); quasi-Newton otherwise.
    max_message_bytes : int, default=8 * 2**20
        Budget of one client's message per round under ``hessian="auto"``
        (8 MiB: the Hessian of about 1,450 parameters).
    memory : int, default=20
        Curvature pairs kept by the quasi-Newton model (measured: 20 pairs
        needed half the rounds of 10 on the diabetes Lasso, 49 against 97).
    subproblem_tol : float or "auto", default="auto"
        The sub-problem is solved until the norm of its proximal-gradient
        mapping is ``subproblem_tol`` times its value at ``d = 0`` (the
        pooled objective's own stationarity at the current point), or to
        round-off. ``"auto"``: 1e-12 with the Hessian (the step is then the
        exact proximal Newton step: one round for least squares), 1e-2 with
        quasi-Newton (its model is itself approximate; tighter solves cost
        server time and saved no rounds in our measurements).
    max_subproblem_iter : int, default=10000
        Coordinate-descent sweeps or FISTA iterations per sub-problem at most.

    Attributes
    ----------
    hessian_ : str
        The mode used, ``"full"`` or ``"quasi-newton"`` (set by ``setup``).
    message_bytes_ : int
        Bytes of one client's message per round in that mode.
    subproblem_tol_ : float
        The sub-problem tolerance used.

    See Also
    --------
    DualFL : the solver for the hinge loss and for losses without a second
        derivative.

    Notes
    -----
    *Globalization without extra rounds.* The server keeps the last accepted
    point ``theta_k``, its objective ``F_k``, the direction ``d_k`` and the
    predicted decrease ``Delta_k = g'd_k + psi(theta_k + d_k) - psi(theta_k)``.
    Each round the clients evaluate the trial ``theta_k + t d_k``; the server
    accepts it when ``F(theta_k + t d_k) <= F_k + sigma t Delta_k``
    (``sigma = 1e-4``) and computes the next direction from the gradient and
    Hessian it received at that trial; otherwise it halves ``t`` and discards
    them. The server model (the point monitored and returned) is the current
    trial; a trial the line search rejects was never a model, and its round's
    ``history_`` record has a NaN objective and stationarity (a record of the
    rejected trial's objective would show a spike the model never had; a fit
    that ends on a trial the test would reject returns the last accepted
    point). The first trial is ``theta_0`` plus the full Newton step, which
    for least squares is the exact minimizer: least squares (ridge; the Lasso
    to ``subproblem_tol``) converges in one round. A quadratic loss's Hessian
    is computed once per client and cached. Full participation only: a
    Newton step from some clients' Hessian is not the pooled step.

    *What a site reveals.* A gradient is one ``p``-vector per round. A
    Hessian of least squares is the site's weighted second-moment matrix
    ``X'DX / n_j`` (with an intercept, also its feature means and, in
    effect, its feature covariance): every pairwise product of features,
    summed over the site's rows, identical in every round. For logistic
    regression it is the same matrix with each row weighted by
    ``sigma(1 - sigma)`` at the current model. With ``p`` parameters and
    fewer than ``p (p + 1) / 2`` rows at a site, the Hessians of a few
    rounds can pin its rows down far more than gradients do: use
    ``hessian="quasi-newton"`` (gradients only) when second moments must
    not leave a site.

    Non-smooth losses (hinge) have no Hessian: they are refused, and
    ``solver="auto"`` uses DualFL, FedMLS or FedAvg for them. A ridge part of
    the penalty enters the Hessian as ``alpha`` on the coefficient block (a
    user-defined smooth penalty enters by its ``curvature`` bound, which
    only changes the speed, not the limit). For a multinomial loss the
    Hessian is singular along a common shift of the intercepts; the step is
    then the minimum-norm least-squares solution.

    References
    ----------
    J. D. Lee, Y. Sun and M. A. Saunders, "Proximal Newton-type methods for
    minimizing composite functions", SIAM J. Optim. 24(3), 2014.

    J. Friedman, T. Hastie and R. Tibshirani, "Regularization paths for
    generalized linear models via coordinate descent", J. Stat. Softw.
    33(1), 2010 (glmnet: coordinate descent on the quadratic approximation).

    R. H. Byrd, J. Nocedal and R. B. Schnabel, "Representations of
    quasi-Newton matrices and their use in limited memory methods",
    Math. Program. 63, 1994 (the compact L-BFGS matrix).
    """

    name = "newton"
    requires_full_participation = True
    monitors_in_replies = True
    requires_smooth_datafit = True
    #: the line search globalizes the step: no curvature bound needed (GLMs)
    requires_curvature_bound = False
    penalty_support = "prox"
    _wire_attributes = ("hessian_", "message_bytes_", "subproblem_tol_",  # see FederatedSolver
                        "initial_curvature_")

    def __init__(self, hessian="auto", *, max_message_bytes=8 * 2**20, memory=20,
                 subproblem_tol="auto", max_subproblem_iter=10000):
        self.hessian = hessian
        self.max_message_bytes = max_message_bytes
        self.memory = memory
        self.subproblem_tol = subproblem_tol
        self.max_subproblem_iter = max_subproblem_iter

    # -- checks and promises ----------------------------------------------
    def check_problem(self, problem, participation):
        fit = problem.datafit
        if not fit.smooth:
            raise ValueError(
                f"solver 'newton' (FedNewton) needs a smooth loss, but {fit!r} is not "
                "differentiable (no gradient, no Hessian); use 'dualfl' (exact local "
                "solves in the dual, l2 penalty), 'fedmls' or 'fedavg'.")
        super().check_problem(problem, participation)
        if self.hessian == "full" and not fit.has_hessian:
            raise ValueError(
                f"solver 'newton' with hessian='full' needs the loss's second derivative, "
                f"but {fit!r} does not define raw_hessian; use hessian='quasi-newton' "
                "(gradients only) or 'auto'.")

    def guarantee(self, problem, participation=1.0):
        if getattr(self, "hessian_", None) == "quasi-newton":
            return "exact", ("proximal L-BFGS on the pooled gradients with an Armijo line "
                             "search on the pooled objective: every accepted point decreases "
                             "it, and the limit is the pooled optimum (linear rate)")
        return "exact", ("proximal Newton on the pooled gradient and Hessian with an Armijo "
                         "line search on the pooled objective: the pooled optimum, locally "
                         "quadratically (least squares in one round)")

    # -- setup ------------------------------------------------------------
    def _hessian_mode(self, layout, datafit):
        """``"full"`` or ``"quasi-newton"``: what ``hessian`` resolves to."""
        if self.hessian not in HESSIAN_MODES:
            raise ValueError(f"hessian must be one of {HESSIAN_MODES}; got {show(self.hessian)}.")
        check_positive(self.max_message_bytes, "max_message_bytes")
        if self.hessian != "auto":
            return self.hessian
        fits = full_message_bytes(layout.size) <= self.max_message_bytes
        return "full" if fits and datafit.has_hessian else "quasi-newton"

    def needs_smoothness(self, layout, datafit):
        # only the quasi-Newton start (a proximal-gradient step) uses them
        return self._hessian_mode(layout, datafit) != "full"

    def setup(self, problem, participation=1.0):
        super().setup(problem, participation)
        check_positive(self.memory, "memory")
        check_positive(self.subproblem_tol, "subproblem_tol", allow_auto=True)
        check_positive(self.max_subproblem_iter, "max_subproblem_iter")
        p = problem.layout.size
        self.hessian_ = self._hessian_mode(problem.layout, problem.datafit)
        full = self.hessian_ == "full"
        self.message_bytes_ = full_message_bytes(p) if full else 8 * (p + 1)
        self.subproblem_tol_ = (self.subproblem_tol if self.subproblem_tol != "auto" else
                                NEWTON_SUBPROBLEM_TOL if full else QUASI_NEWTON_SUBPROBLEM_TOL)
        # the first quasi-Newton step: a proximal-gradient step at the pooled
        # smoothness, per block (then B_0 = gamma I from the latest pair)
        # (only quasi-Newton takes that step: a full-Hessian Newton fit under secure
        # aggregation has no constants at setup, its monitor gets them masked later)
        self.initial_curvature_ = None if full else 1.0 / problem.block_steps(
            worst_client=False)
        return self

    # -- rounds -----------------------------------------------------------
    def init_server(self, theta0):
        theta = np.array(theta0, dtype=float)
        return {"trial": theta, "theta": None, "objective": np.inf, "direction": None,
                "decrease": 0.0, "step": 1.0, "halvings": 0, "grad": None, "pairs": []}

    def broadcast(self, server, rnd):
        return {"theta": server["trial"]}

    def client_update(self, client, state, message, rng):
        theta = message["theta"]
        if self.hessian_ == "full":
            value, grad, H = client.value_gradient_hessian(theta)
            return {"value": value, "grad": grad, "hessian": pack_upper(H)}, state
        value, grad = client.value_and_gradient(theta)
        return {"value": value, "grad": grad}, state

    def summed_fields(self, server):
        # the pooled loss, gradient and Hessian are weighted sums of the sites'
        fields = {"value": "weighted", "grad": "weighted"}
        if self.hessian_ == "full":
            fields["hessian"] = "weighted"
        return fields

    def aggregate_sums(self, server, sums, participants):
        problem = self.problem_
        lay = problem.layout
        x = server["trial"]
        F = float(sums["value"]) + lay.penalty_value(problem.penalty, x)
        if server["theta"] is not None and not self._sufficient_decrease(server, F):
            return self._backtrack(server)
        g = problem.add_smooth_gradient(sums["grad"], x)
        if not np.all(np.isfinite(g)):
            raise FloatingPointError("FedNewton: a client's gradient is not finite at the "
                                     "trial point (overflow in the loss).")
        pairs = server["pairs"]
        if self.hessian_ == "full":
            H = unpack_upper(sums["hessian"], lay.size)
            H[np.arange(lay.n_coef), np.arange(lay.n_coef)] += problem.smooth_curvature
            model = DenseModel(H)
        else:
            pairs = self._update_pairs(server, x, g)
            model = self._lbfgs_model(pairs)
        d = solve_quadratic_model(model, g, x, problem.prox_penalty, lay,
                                  tol=self.subproblem_tol_, max_iter=self.max_subproblem_iter)
        psi = problem.prox_penalty
        decrease = float(g @ d) + lay.penalty_value(psi, x + d) - lay.penalty_value(psi, x)
        if not decrease < 0:
            # For the sub-problem's minimizer decrease <= -d'Bd (Lee, Sun & Saunders,
            # Prop. 2.4); a non-negative value is round-off (a step along an active
            # sphere, a free intercept beside it): use the bound.
            decrease = -float(d @ model.matvec(d))
        if not decrease < 0:  # stationary to working precision: keep evaluating x
            d, decrease = np.zeros_like(x), 0.0
        return {"trial": x + d, "theta": x, "objective": F, "direction": d,
                "decrease": decrease, "step": 1.0, "halvings": 0, "grad": g, "pairs": pairs,
                "rejected": False}

    def withheld_trial(self, server):
        """A trial point a site would not answer (a few rows would dominate its sums
        there, as where ``exp`` overflows for one row): rejected like one that fails the
        Armijo test. The first point has no step to halve: the fit stops."""
        return None if server["theta"] is None else self._backtrack(server)

    def rejected_trial(self, server):
        """The last aggregate halved the step (or gave the direction up): the
        evaluated trial failed the Armijo test."""
        return bool(server.get("rejected", False))

    def fallback_model(self, server, objective):
        """The last accepted point when the fit ends on a trial that fails the
        Armijo test (``max_rounds`` reached before the line search judged it)."""
        if server["theta"] is None or not np.isfinite(objective):
            return None
        return None if self._sufficient_decrease(server, objective) else server["theta"]

    def may_stop(self, server, tol):
        """The last step was a full step whose predicted decrease is at most
        ``tol**2`` times the objective: in Newton's quadratic regime the model
        is then within about that of the optimum (relative). The stationarity
        rule alone stopped 3e-4 (wine) and 1.4e-4 (digits) short on one class of
        a one-vs-rest squared hinge at the default tol, where one or two more
        rounds reach the optimum: the objective sums the classes, and a class
        with a small share of it can lag."""
        if server["halvings"]:
            return False
        if self.hessian_ == "full" and self.problem_.datafit.quadratic:
            return True  # the model is the objective: the step was exact
        return -server["decrease"] <= tol * tol * max(abs(server["objective"]),
                                                      np.finfo(float).tiny)

    def _sufficient_decrease(self, server, F):
        """The Armijo test of the trial's pooled objective ``F``."""
        F_k, t = server["objective"], server["step"]
        if not np.isfinite(F):
            return False
        if not np.isfinite(F_k):  # e.g. a warm start outside a new constraint
            return True
        slack = ROUNDOFF * max(abs(F_k), abs(F))
        return F <= F_k + SIGMA * t * server["decrease"] + slack

    def _backtrack(self, server):
        """Halve the step; after ``MAX_HALVINGS`` re-evaluate the accepted point."""
        out = dict(server, rejected=True)
        if server["halvings"] + 1 >= MAX_HALVINGS:
            out.update(trial=server["theta"], theta=None, objective=np.inf, halvings=0,
                       step=1.0, grad=None, pairs=[])
            return out
        t = 0.5 * server["step"]
        out.update(step=t, halvings=server["halvings"] + 1,
                   trial=server["theta"] + t * server["direction"])
        return out

    def _update_pairs(self, server, x, g):
        pairs = list(server["pairs"])
        if server["theta"] is not None and server["grad"] is not None:
            s, y = x - server["theta"], g - server["grad"]
            if s @ y > CURVATURE * np.linalg.norm(s) * np.linalg.norm(y):
                pairs = (pairs + [(s, y)])[-int(self.memory):]
        return pairs

    def _lbfgs_model(self, pairs):
        if not pairs:
            return CompactModel(self.initial_curvature_,
                                np.zeros((self.initial_curvature_.size, 0)), np.zeros((0, 0)))
        s, y = pairs[-1]
        return CompactModel.from_pairs(pairs, float(y @ y) / float(s @ y))

    def server_model(self, server):
        return server["trial"]
