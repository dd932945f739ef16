"""Newton's method on a Cox model whose baseline hazard is shared across sites.

The partial likelihood of a shared baseline does not split into one term per
site: every risk set holds rows of several sites. What does split are the
**risk-set sums** at the pooled event times (:func:`~skfed.datafits.cox.
risk_set_sums`): each site sends its own, the server adds them and computes
the pooled loss, gradient and Hessian (:func:`~skfed.datafits.cox.cox_terms`),
then takes :class:`~skfed.solvers.newton.FedNewton`'s globalized step.

What a site discloses each round: at each broadcast event time, the sums of
``w exp(x'b)``, ``w exp(x'b) x`` and ``w exp(x'b) x x'`` over its rows at risk
and over its events there, and its numbers of events and their weights. With
a time at which one site has a single event, the event sums are that row's
covariates: the exact shared baseline is for sites that accept it; a
coarsened time grid (``FedCoxPH(time_grid=...)``) groups times so that each
sum covers several rows.
"""

import numpy as np

from ..datafits.cox import cox_terms, risk_set_sums
from ..federation.operations import SUMS, Arg, Refused, operation_for, site_operation
from ..federation.session import add_fields
from .newton import FedNewton, pack_upper

#: the most times a public grid of event times may hold
MAX_GRID = 1 << 16


def grid_problem(grid):
    """The form of a public grid of event times: ``{stratum code: increasing times}``."""
    if not isinstance(grid, dict) or len(grid) > 4096:
        return "a grid of event times is {stratum: times} (at most 4,096 strata)"
    total = 0
    for code, times in grid.items():
        times = np.asarray(times) if isinstance(times, (list, tuple, np.ndarray)) else None
        if not isinstance(code, (int, float)) or isinstance(code, bool) or times is None or \
                times.ndim != 1 or times.dtype.kind not in "iuf" or not np.all(
                    np.isfinite(times)) or np.any(np.diff(times) <= 0):
            return "a stratum's grid times are finite and increasing"
        total += times.size
    return None if total <= MAX_GRID else f"a grid of at most {MAX_GRID} times"


def check_risk_sets(Y, grid, rules):
    """Without ``allow_event_times``: every grid time's events at this site, and the rows
    leaving its risk set after it, number 0 or at least ``min_level_count`` (differences
    of the risk-set sums are sums over those rows), else refused (rule
    ``min_level_count``)."""
    if rules.allow_event_times:
        return
    _decide_risk_sets(risk_set_counts(Y, grid), rules)


def risk_set_counts(Y, grid):
    """Per stratum of the grid: the events at each grid time and the rows leaving the
    risk set after it (what :func:`check_risk_sets` decides on; they add over parts)."""
    time, event, stratum = Y[:, 0], Y[:, 1] > 0, Y[:, 2]
    out = []
    for code, times in grid.items():
        times = np.asarray(times, dtype=float)
        rows = stratum == float(code)
        k = np.searchsorted(times, time[rows], side="right") - 1
        inside = k >= 0
        leaving = np.bincount(k[inside], minlength=times.size)
        events = np.bincount(k[inside & event[rows] & (time[rows] == times[np.maximum(k, 0)])],
                             minlength=times.size)
        out.append((events, leaving))
    return out


def check_client_risk_sets(client, grid, rules):
    """:func:`check_risk_sets` on a fit's client objective; on an engine's partitions,
    on their counts added (the rule decided on the whole dataset)."""
    if rules.allow_event_times:
        return
    if hasattr(client, "map_parts"):
        parts = client.map_parts(_client_counts, grid)
        counts = [tuple(sum(p[j][i] for p in parts) for i in range(2))
                  for j in range(len(parts[0]))]
    else:
        counts = _client_counts(client, grid)
    _decide_risk_sets(counts, rules)


def _client_counts(client, grid):
    return risk_set_counts(client.Y, grid)


def _decide_risk_sets(counts, rules):
    floor = rules.min_level_count
    for events, leaving in counts:
        for what, held in (("events", events), ("rows leaving the risk set", leaving)):
            if np.any((held > 0) & (held < floor)):
                raise Refused("min_level_count", f"a time of the grid has fewer than "
                              f"{floor} {what} here; use a coarser time_grid")


def _risk_set_rule(client, values, rules):
    check_client_risk_sets(client, values["grid"], rules)


@site_operation(
    "fit.risk_sets", releases=SUMS, target="fit", maskable=True,
    finer="per-time sums at each time or interval of a public grid: a time holding 0 or "
          ">= min_level_count of the site's events and of its rows leaving the risk set, "
          "unless allow_event_times",
    describes="at each broadcast event time (a shared Cox baseline): the sums of "
              "w exp(x'b), w exp(x'b) x and w exp(x'b) x x' over the site's rows at risk "
              "and over its events there, and its event count and weight; without "
              "allow_event_times only where each time holds 0 or >= min_level_count "
              "events and rows leaving the risk set",
    arguments=(Arg("theta", "floats", most=1 << 20), Arg("grid", "value", check=grid_problem),
               Arg("order", "int", low=0, high=2),
               Arg("scale", "float", low=0, optional=True, default=1.0)),
    checks=(_risk_set_rule,), combine="sum")  # sums at public times: they add up
def client_risk_set_sums(client, theta, grid, order, scale=1.0):
    """At a site: its risk-set sums at the broadcast event times (see module), times
    the public ``scale`` (the inverse of the total weight: it keeps the sums within
    secure aggregation's fixed-point range)."""
    if hasattr(client, "map_parts"):  # an engine's partitions: their sums added
        return client.run(operation_for(client_risk_set_sums), (theta, grid, order, scale))
    eta = client.raw(theta)[:, 0]
    sums = risk_set_sums(client.X, eta, client.Y, client.sample_weight, grid, order=order)
    return {k: np.asarray(v, dtype=float) * scale for k, v in sums.items()}


class RiskSetNewton(FedNewton):
    """Federated Newton for a Cox model with a baseline hazard shared across sites.

    Parameters
    ----------
    grid : dict, default=None
        ``{stratum code: increasing event times}``: the pooled event times
        (or the intervals of a coarsened time grid) at which the sites send
        their risk-set sums. Public: it is broadcast with the model.
    subproblem_tol, max_subproblem_iter :
        As :class:`FedNewton` (the L1 sub-problem).

    Notes
    -----
    Each round costs every site ``K (2 + 2p + p (p + 1))`` floats for ``K``
    event times and ``p`` coefficients. The monitor reads the pooled loss
    and gradient from the same sums (no extra pass). Full participation
    only; the Hessian is always the exact one. Under secure aggregation the
    sites' sums are masked (each times the public inverse of the total
    weight, which a site service checks) and only their totals are decoded.
    """

    name = "newton-risk-sets"
    _wire_attributes = ("scale_",)  # see FederatedSolver
    replies_as = "fit.risk_sets"  # per-time sums under the event-time rule

    def check_at_site(self, client, rules):
        """A site's rule on the sums each round carries: the risk-set rule at the grid."""
        check_client_risk_sets(client, self.grid, rules)

    def __init__(self, grid=None, *, subproblem_tol="auto", max_subproblem_iter=10000):
        self.grid = grid
        self.subproblem_tol = subproblem_tol
        self.max_subproblem_iter = max_subproblem_iter
        self.hessian = "full"
        self.max_message_bytes = 2 ** 62  # always the exact Hessian
        self.memory = 20

    def check_problem(self, problem, participation):
        if not hasattr(problem.datafit, "design_terms") or self.grid is None:
            raise ValueError("RiskSetNewton fits a Cox model (FedCoxPH) on the grid of its "
                             "pooled event times; use FedNewton for other losses.")
        super().check_problem(problem, participation)

    def setup(self, problem, participation=1.0):
        super().setup(problem, participation)
        self.scale_ = 1.0 / max(float(problem.weight_total), 1.0)
        K = sum(len(t) for t in self.grid.values())
        p = problem.layout.size
        self.message_bytes_ = 8 * (K * (4 + 2 * p + p * (p + 1)) + p + 1)
        return self

    def _pooled(self, scaled, order):
        """The pooled mean loss, gradient and Hessian from the sums the sites sent
        (each times ``scale``: the inverse of the total weight)."""
        W = float(self.problem_.weight_total)
        return self._pooled_totals({k: np.asarray(v, dtype=float) * W
                                    for k, v in scaled.items()}, order)

    def _pooled_totals(self, sums, order):
        """The pooled mean loss, gradient and Hessian from the sites' summed risk sets."""
        W = float(self.problem_.weight_total)
        value, grad, H = cox_terms(sums, self.problem_.datafit.ties, order=order)
        return value / W, None if grad is None else grad / W, None if H is None else H / W

    def broadcast(self, server, rnd):
        # the public scale travels with the model (a site service checks it against
        # the weight sums the sites signed: one scale for every site)
        return dict(super().broadcast(server, rnd), sum_scale=self.scale_)

    def client_update(self, client, state, message, rng):
        return client_risk_set_sums(client, message["theta"], self.grid, 2,
                                    float(message["sum_scale"])), state

    # -- the monitor: the pooled loss and gradient from sums (also when masked) --
    def monitor_from_sums(self, sums):
        value, grad, _ = self._pooled(sums, 1)
        return value, grad

    def summed_fields(self, server):
        return {k: "sum" for k in ("s0", "t0", "d", "w", "lin", "s1", "t1", "ex", "s2", "t2")}

    def aggregate_sums(self, server, sums, participants):
        value, grad, H = self._pooled(sums, 2)
        return super().aggregate_sums(
            server, {"value": value, "grad": grad, "hessian": pack_upper(H)}, participants)

    def monitor_sums_in_replies(self, replies, weights):
        return self.monitor_from_sums(add_fields(replies))

    def monitor_sums(self, session, theta):
        """The pooled loss and gradient at ``theta`` from a pass of risk-set sums (each
        site's times the public scale: the inverse of the total weight)."""
        sums = session.sum(client_risk_set_sums, theta, self.grid, 1, 1.0,
                           phase="monitor", scale=self.scale_)
        value, grad, _ = self._pooled_totals(sums, 1)
        return value, grad
