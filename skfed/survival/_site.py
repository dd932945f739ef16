"""What runs at a site for :class:`~skfed.survival.FedCoxPH`: module-level functions.

On a site's rows (:class:`~skfed.data.SiteData`, its target ``(event, time[,
stratum code])``) or on the client objective a fit session keeps there. Each
returns counts or sums, never a row; each is declared as a site operation, with
the rules a site service applies to it (:mod:`skfed.federation.operations`).

Without ``allow_event_times`` a site releases nothing at a time (or an interval
of a time grid) that holds 1 to ``min_level_count - 1`` of its events, or of its
rows leaving the risk set after it (:func:`check_risk_sets`): differences of
risk-set sums are sums over those rows.
"""

import numpy as np

from ..data.site import SiteError, Targets, survival_array
from ..datafits.cox import (_expand, baseline_increments, cox_terms, event_grid,
                            risk_set_sums, score_residuals)
from ..federation import dominance
from ..federation.operations import COUNTS, SUMS, Arg, Refused, row_step, site_operation
from ..solvers.newton import pack_upper
from ..federation.combine import Combine
from ..solvers.risk_sets import check_client_risk_sets, check_risk_sets, grid_problem
from ..stats._site import _coarsen
from ._grid import intervals_pass, passing_cut_points
from ._pairs import concordance_counts
from ._zph import per_time_terms

#: what per-time sums reveal, for the declarations that release them
PER_TIME = ("per-time sums at each time or interval of a public grid: a time holding 0 "
            "or >= min_level_count of the site's events and of its rows leaving the risk "
            "set, unless allow_event_times")


def _cut_points(value):
    """A time grid's cut points: finite and increasing (an unsorted grid would place the
    small-count rule's intervals elsewhere than the times it releases)."""
    values = np.asarray(value, dtype=np.float64) if isinstance(value, (list, tuple,
                                                                        np.ndarray)) else None
    if values is None or values.ndim != 1 or values.size > 1 << 16 or not np.all(
            np.isfinite(values)) or np.any(np.diff(values) <= 0):
        return "a time grid's cut points are at most 65,536 finite, increasing numbers"
    return None


def check_cut_points(Y, cuts, rules):
    """The analyst's cut points: every interval holds 0 or ``min_level_count`` events and
    rows in each stratum here, else refused (rule ``min_level_count``)."""
    floor = rules.min_level_count
    if not all(intervals_pass(Y[Y[:, 2] == code, 0], Y[Y[:, 2] == code, 1] > 0, cuts, floor)
               for code in np.unique(Y[:, 2])):
        raise Refused("min_level_count", "an interval of the time grid holds fewer than "
                                         f"{floor} events or rows here")


def _event_times_rules(site, values, rules):
    """Without ``allow_event_times``: a time grid, or the site's coarsening (its floor)."""
    if rules.allow_event_times:
        return
    if values["time_grid"] is None and values["min_count"] is None:
        raise Refused("allow_event_times", "a Cox baseline shared across sites at exact "
                      "event times makes the sites' event times public; fit on a time grid "
                      "(time_grid=) or with strata='site'", public=True)
    if values["min_count"] is not None:
        values["min_count"] = max(int(values["min_count"]), rules.min_level_count)


def _event_times_reply(site, values, out, rules):
    if not rules.allow_event_times and np.any(out["events"] < rules.min_level_count):
        if values["time_grid"] is not None:
            _check_grid_rows(site, values["time_grid"], rules)
        raise Refused("min_level_count", "an interval of the time grid holds fewer than "
                      f"{rules.min_level_count} events here")
    return out


def _check_grid_rows(site, cuts, rules):
    """:func:`check_cut_points` on the site's rows; on an engine's partitions, on their
    counts per stratum and interval added (decided on the whole dataset)."""
    if not hasattr(site, "map_parts"):
        Y, _ = Targets("survival").encode(site.y, site.weights())
        return check_cut_points(Y, cuts, rules)
    whole = {}
    for part in site.map_parts(_interval_counts, cuts):
        for code, counts in part.items():
            whole[code] = counts + whole.get(code, 0)
    if any(np.any((c > 0) & (c < rules.min_level_count)) for c in whole.values()):
        raise Refused("min_level_count", "an interval of the time grid holds fewer than "
                                         f"{rules.min_level_count} events or rows here")


def _interval_counts(site, cuts):
    """Per stratum code: the events and the rows in each interval of ``cuts``."""
    Y, _ = Targets("survival").encode(site.y, site.weights())
    out = {}
    for code in np.unique(Y[:, 2]):
        rows = Y[:, 2] == code
        k = np.searchsorted(np.asarray(cuts, dtype=float), Y[rows, 0], side="left")
        out[float(code)] = np.stack([np.bincount(k[Y[rows, 1] > 0], minlength=len(cuts) + 1),
                                     np.bincount(k, minlength=len(cuts) + 1)])
    return out


def _grid_of_events(client, values, rules):
    """A shared baseline's rounds carry risk-set sums at a public grid: its rule."""
    check_client_risk_sets(client, values["grid"], rules)


def _cox_audit(client, theta, meat=None):
    """The dominance rule on a site's own partial likelihood (its strata's): the rows'
    terms of its value, gradient and the diagonal part of its information, and the
    sandwich's per-row scores."""
    if dominance.active() is None:
        return
    Z = client.raw(theta)
    client._audit(client.X, Z, client.Y, client.sample_weight, None, True,
                  client.datafit.audited_hessian(Z, client.Y, client.sample_weight))
    if meat is not None:
        dominance.check_products(meat, meat, what="a sandwich's meat")


@site_operation(
    "survival.event_times", releases=COUNTS,
    describes="per stratum, the distinct event times (or the time grid's interval "
              "indices) with the number of events at each; without allow_event_times "
              "each must hold >= min_level_count events (times coarsened so for the "
              "quantiles of time_grid=k: each bin reported at its last time)",
    arguments=(Arg("time_grid", "value", nullable=True, check=_cut_points,
                   convert=lambda c: np.asarray(c, dtype=np.float64)),
               Arg("min_count", "int", low=1, high=1 << 30, nullable=True)),
    checks=(_event_times_rules,), reply=_event_times_reply,
    counts=lambda out: [out["events"]],
    # an engine's partitions' times and events (none merged), added; coarsened on the whole
    combine=Combine(lambda parts, args: _add_event_times(parts),
                    part=lambda *a: _raw_event_times(*a),
                    finish=lambda out, args, site: _coarsened(out, args, site)))
def site_event_times(site, time_grid, min_count):
    """The site's distinct event times per stratum, with their numbers of events.

    ``time_grid`` (cut points): times are first replaced by their interval's
    index. ``min_count``: adjacent times are merged (from the earliest on)
    until each bin holds at least that many events, all reported at the
    bin's last time (the Kaplan-Meier operation's rule, for the quantiles of
    ``time_grid=k``). Returns ``{"strata", "times", "events"}``: the stratum
    code of each entry, its time and its number of events.
    """
    return _coarsened(_raw_event_times(site, time_grid), (time_grid, min_count), site.site)


def _raw_event_times(site, time_grid, min_count=None):
    """Per stratum, the distinct event times and their events, none merged (a part's)."""
    y = survival_array(site.y)
    Y, _ = Targets("survival", time_grid=time_grid).encode(y, site.weights())
    strata, times, events = [], [], []
    for code in np.unique(Y[:, 2]):
        rows = (Y[:, 2] == code) & (Y[:, 1] > 0)
        t, counts = np.unique(Y[rows, 0], return_counts=True)
        strata += [code] * t.size
        times += list(t)
        events += list(counts)
    return {"strata": np.asarray(strata, dtype=float), "times": np.asarray(times, dtype=float),
            "events": np.asarray(events, dtype=float)}


def _add_event_times(parts):
    """The partitions' (stratum, time) pairs' union, their events added, in order."""
    pairs = np.concatenate([np.column_stack([p["strata"], p["times"]]) for p in parts])
    events = np.concatenate([p["events"] for p in parts])
    keys, index = np.unique(pairs, axis=0, return_inverse=True)
    return {"strata": keys[:, 0].copy(), "times": keys[:, 1].copy(),
            "events": np.bincount(index.ravel(), weights=events, minlength=len(keys))}


def _coarsened(raw, args, site):
    """The reply from the distinct times' events: with ``min_count``, adjacent times
    merged in each stratum until each bin holds that many events."""
    min_count = args[1]
    if min_count is None:
        return raw
    strata, times, events = [], [], []
    for code in np.unique(raw["strata"]):
        rows = raw["strata"] == code
        t, counts = raw["times"][rows], raw["events"][rows]
        if t.size:
            if counts.sum() < min_count:
                raise SiteError(site, f"{int(counts.sum())} events in a stratum: fewer "
                                      f"than {int(min_count)}, so no event time is sent.")
            t, counts = _merge(t, counts, int(min_count))
        strata += [code] * t.size
        times += list(t)
        events += list(counts)
    return {"strata": np.asarray(strata, dtype=float), "times": np.asarray(times, dtype=float),
            "events": np.asarray(events, dtype=float)}


def _merge(times, counts, min_count):
    """The Kaplan-Meier table's coarsening, on event counts."""
    ends, index = np.unique(_coarsen(times, counts, min_count), return_inverse=True)
    return ends, np.bincount(index, weights=counts)


@site_operation(
    "fit.cox_inference", releases=SUMS, target="fit", maskable=True,
    describes="at the fitted Cox model (each site its own stratum): the p x p information, "
              "the log partial likelihoods at the fit and at zero, and the sandwich's p x p "
              "meat, under the dominance rule",
    arguments=(Arg("theta", "floats", most=1 << 20),
               Arg("cov_type", "choice", choices=("nonrobust", "robust", "cluster"))))
def client_cox_inference(client, theta, cov_type):
    """At a site whose rows are their own strata (``strata="site"``): its
    information, log partial likelihoods (at ``theta`` and at zero) and the
    sandwich's meat from its own score residuals (``"robust"``: their
    outer products summed; ``"cluster"``: the outer product of their sum)."""
    X, Y, sw = client.X, client.Y, client.sample_weight
    eta = client.raw(theta)[:, 0]
    grid = event_grid(Y)
    sums = risk_set_sums(X, eta, Y, sw, grid, order=2)
    value, grad, H = cox_terms(sums, client.datafit.ties)
    null = cox_terms(risk_set_sums(X, np.zeros_like(eta), Y, sw, grid, order=0),
                     client.datafit.ties, order=0)[0]
    out = {"information": pack_upper(H), "loglike": -value, "loglike_null": -null}
    if cov_type != "nonrobust":
        h, xbar = baseline_increments(sums)
        r = score_residuals(X, eta, Y, sw, grid, h, xbar)
        _cox_audit(client, theta, r)
        s = r.sum(axis=0)
        out["meat"] = pack_upper(np.outer(s, s) if cov_type == "cluster" else r.T @ r)
    else:
        _cox_audit(client, theta)
    return out


def _baseline_rules(client, values, rules):
    """The site's own event times only with ``allow_event_times``; else at the analyst's
    cut points (each interval 0 or ``min_level_count`` events and rows) or at cut points
    the site chooses so."""
    if rules.allow_event_times:
        return
    Y, floor = client.Y, rules.min_level_count
    if values["cuts"] is None:
        values["min_count"] = max(int(values["min_count"] or 0), floor)
        for code in np.unique(Y[Y[:, 1] > 0, 2]):
            rows = Y[:, 2] == code
            if passing_cut_points(Y[rows, 0], Y[rows, 1] > 0, values["min_count"]) is None:
                raise Refused("min_level_count", "no time grid here has each interval "
                              f"holding 0 or at least {floor} events and rows")
    else:
        check_cut_points(Y, values["cuts"], rules)


def _baseline_reply(client, values, out, rules):
    """Whatever chose the cut points, every interval of each stratum's grid in the reply
    holds 0 or ``min_level_count`` events and rows here."""
    if not rules.allow_event_times:
        Y = client.Y
        for code in np.unique(out["strata"]):
            rows = Y[:, 2] == code
            if not intervals_pass(Y[rows, 0], Y[rows, 1] > 0, out["times"][out["strata"] == code],
                                  rules.min_level_count):
                raise Refused("min_level_count", "an interval of the baseline's time grid "
                                                 "holds too few events or rows here")
    return out


@site_operation(
    "fit.cox_baseline", releases=SUMS, target="fit", finer=PER_TIME,
    describes="Breslow's cumulative baseline hazard per stratum (each site its own "
              "stratum): at the site's event times only with allow_event_times; else at "
              "the analyst's cut points or at cut points the site chooses (released with "
              "it), every interval holding 0 or >= min_level_count events and rows",
    arguments=(Arg("theta", "floats", most=1 << 20),
               Arg("cuts", "value", nullable=True, check=_cut_points,
                   convert=lambda c: np.asarray(c, dtype=np.float64)),
               Arg("min_count", "int", low=1, high=1 << 30, nullable=True, optional=True)),
    checks=(_baseline_rules,), reply=_baseline_reply)
def client_cox_baseline(client, theta, cuts, min_count=None):
    """At a site whose rows are their own strata: Breslow's cumulative baseline
    hazard per stratum, at its own event times (``cuts=None``), only at the
    grid's cut points, or (``cuts=None`` with ``min_count``) only at cut points
    the site chooses in each stratum, every interval holding 0 or at least
    ``min_count`` of its events and rows (:func:`~skfed.survival._grid.
    passing_cut_points`; a stratum without such a grid raises a
    :class:`~skfed.data.SiteError`)."""
    Y = client.Y
    grid = event_grid(Y)
    sums = risk_set_sums(client.X, client.raw(theta)[:, 0], Y, client.sample_weight, grid,
                         order=0)
    h, _ = baseline_increments(sums)
    strata, times, cumhaz = [], [], []
    start = 0
    for code in sorted(grid):
        t = grid[code]
        H = np.cumsum(h[start:start + len(t)])
        start += len(t)
        at = cuts
        if cuts is None and min_count is not None:  # the site's own coarsened grid
            rows = Y[:, 2] == code
            at = passing_cut_points(Y[rows, 0], Y[rows, 1] > 0, int(min_count))
            if at is None:
                raise SiteError(getattr(client, "site", "this site"),
                                f"no time grid with each interval holding 0 or at least "
                                f"{int(min_count)} events and rows in a stratum here.")
        if at is not None:  # the step function at the cut points only
            k = np.searchsorted(t, at, side="right") - 1
            t, H = np.asarray(at, dtype=float), np.where(k >= 0, H[np.maximum(k, 0)], 0.0)
        strata += [code] * len(t)
        times += list(t)
        cumhaz += list(H)
    return {"strata": np.asarray(strata, dtype=float), "times": np.asarray(times, dtype=float),
            "cumhaz": np.asarray(cumhaz, dtype=float)}


@site_operation(
    "fit.cox_residuals", releases=SUMS, target="fit", maskable=True,
    describes="the sandwich's p x p meat from the site's score residuals at a broadcast "
              "baseline, under the dominance rule",
    arguments=(Arg("theta", "floats", most=1 << 20), Arg("grid", "value", check=grid_problem),
               Arg("h", "floats", most=1 << 24), Arg("xbar", "array", most=1 << 24),
               Arg("cov_type", "choice", choices=("nonrobust", "robust", "cluster"))),
    checks=(_grid_of_events,),
    # an engine's partitions' r'r and sum of r added; the cluster's outer product on the
    # whole site's sum
    combine=Combine("sum", part=lambda *a: _residual_sums(*a),
                    finish=lambda sums, args, site: _residual_meat(sums, args, site)))
def client_cox_residual_meat(client, theta, grid, h, xbar, cov_type):
    """At a site, under a shared baseline: the sandwich's meat from its rows'
    score residuals at the broadcast baseline increments ``h`` and risk-set
    means ``xbar`` (sums over its rows; ``"cluster"``: the outer product of
    their sum, the site being the cluster)."""
    return _residual_meat(_residual_sums(client, theta, grid, h, xbar, cov_type),
                          (theta, grid, h, xbar, cov_type), None)


def _residual_sums(client, theta, grid, h, xbar, cov_type):
    eta = client.raw(theta)[:, 0]
    r = score_residuals(client.X, eta, client.Y, client.sample_weight, grid, np.asarray(h),
                        np.asarray(xbar))
    dominance.check_products(r, r, what="a sandwich's meat")
    return {"rr": r.T @ r, "s": r.sum(axis=0)}


def _residual_meat(sums, args, site):
    s = sums["s"]
    return {"meat": pack_upper(np.outer(s, s) if args[-1] == "cluster" else sums["rr"])}


def risk_set_means(sums, ties):
    """The risk-set means the Schoenfeld residuals subtract, at each grid time:
    Efron's average over the ``d`` tie terms of ``(S1 - f_l T1) / (S0 - f_l T0)``
    (lifelines' ``_compute_schoenfeld_within_strata``), Breslow's ``S1 / S0``;
    zero where the time has no event."""
    rep, f, _, den = _expand(sums, ties)
    K, p = sums["s1"].shape
    terms = np.bincount(rep, minlength=K)
    out = np.zeros((K, p))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.add.at(out, rep, (sums["s1"][rep] - f[:, None] * sums["t1"][rep]) / den[:, None])
    has = terms > 0
    out[has] /= terms[has, None]
    return out


def _schoenfeld_design(site, coef, time_grid):
    """The site's covariates, encoded target (interval indices on a time grid) and
    weights, as the fit's client objective holds them."""
    from ..data.site import numeric_matrix

    X = numeric_matrix(site)
    coef = np.asarray(coef, dtype=float)
    if coef.shape != (X.shape[1],):
        raise SiteError(site.site, f"{X.shape[1]} covariates here, {coef.size} coefficients.")
    Y, sw = Targets("survival", time_grid=time_grid).encode(site.y, site.weights())
    return X, np.asarray(X @ coef).ravel(), Y, sw


def _event_covariate_sums(X, Y, grid):
    """At each grid time: the number of events and the (unweighted) sum of their
    covariates (lifelines' residuals are per event row, not weighted)."""
    ones = np.ones(len(Y))
    sums = risk_set_sums(X, np.zeros(len(Y)), Y, ones, grid, order=1)
    return sums["d"], sums["t1"]


def _coefficients(value):
    value = np.asarray(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if value is None or value.ndim != 1 or value.size > 1 << 16 or value.dtype.kind not in \
            "iuf" or not np.all(np.isfinite(value)):
        return "coefficients are a finite vector"
    return None


_COEF = Arg("coef", "value", check=_coefficients,
            convert=lambda c: np.asarray(c, dtype=np.float64))


def _schoenfeld_rules(site, values, rules):
    """The fit's risk-set rule, by stratum and with the strata merged (the Kaplan-Meier at
    the union of the grid's times)."""
    grid = values["grid"]
    Y, _ = Targets("survival", time_grid=values["time_grid"]).encode(site.y, site.weights())
    check_risk_sets(Y, grid, rules)
    union = np.unique(np.concatenate([np.asarray(t, dtype=float) for t in grid.values()]
                                     or [np.zeros(0)]))
    check_risk_sets(np.column_stack([Y[:, :2], np.zeros(len(Y))]), {0.0: union}, rules)
    if values.get("ranks") and not rules.allow_event_times:
        at = _rows_at(Y[:, 0], union)
        if np.any((at > 0) & (at < rules.min_level_count)):
            raise Refused("min_level_count", "a time of the grid is the time of fewer than "
                          f"{rules.min_level_count} rows here (events and censorings); use a "
                          "coarser time_grid or another transform than rank")


def _rows_at(time, times):
    """The number of rows whose (encoded) time is each of ``times``."""
    ordered = np.sort(time)
    return (np.searchsorted(ordered, times, side="right")
            - np.searchsorted(ordered, times, side="left")).astype(float)


@site_operation(
    "survival.schoenfeld_sums", releases=SUMS, finer=PER_TIME, reads_design=True,
    describes="a proportional-hazards test's sums at the fitted Cox model, at each public "
              "grid time: the risk-set sums of order 1, the event counts and weights and "
              "the events' covariate sums, and the pooled Kaplan-Meier's events and rows at "
              "risk; for R's score test (information) also the risk-set sums of order 2, "
              "the events' weighted covariate sums, the unweighted events and rows at risk "
              "and the row count, and (ranks) the rows at each time; without "
              "allow_event_times only where each time holds 0 or >= min_level_count events "
              "and rows leaving the risk set (and, with ranks, rows at the time)",
    arguments=(_COEF, Arg("grid", "value", check=grid_problem),
               Arg("time_grid", "value", nullable=True, check=_cut_points,
                   convert=lambda c: np.asarray(c, dtype=np.float64)),
               Arg("information", "bool", optional=True, default=False),
               Arg("ranks", "bool", optional=True, default=False)),
    checks=(_schoenfeld_rules,))
def site_schoenfeld_sums(site, coef, grid, time_grid, information=False, ranks=False):
    """The sums a proportional-hazards test needs from a site, under a baseline shared
    across sites (see :func:`~skfed.survival.proportional_hazard_test`).

    At each time of the public ``grid`` (the fit's pooled event times, or its
    time grid's intervals, per stratum): the risk-set sums of the fit at
    ``coef`` (``s0, s1`` over the rows at risk, ``t0, t1`` over the events,
    ``d`` their number: what every Newton round of the fit sent) and the
    plain sum of the events' covariates ``event_x``; and at the union of the
    grid's times over strata, the weighted rows at risk and weighted events
    (``km_at_risk``, ``km_events``: the pooled Kaplan-Meier). Sums over rows
    only.

    ``information`` (R survival 3's score test, :mod:`skfed.survival._zph`):
    also ``s2, t2`` (the information's sums, as the fit's Newton rounds),
    the events' weighted covariate sums ``event_wx``, and at the union the
    unweighted rows at risk and events (``rows_at_risk``, ``row_events``: R's
    unweighted Kaplan-Meier) and the row count ``n_rows``; ``ranks``: the
    rows (events and censorings) at each union time, ``rows_at`` (R's rank of
    the times over all rows).
    """
    X, eta, Y, sw = _schoenfeld_design(site, coef, time_grid)
    sums = risk_set_sums(X, eta, Y, sw, grid, order=2 if information else 1)
    _, event_x = _event_covariate_sums(X, Y, grid)
    union = {0.0: np.unique(np.concatenate([np.asarray(t, dtype=float)
                                            for t in grid.values()]))}
    pooled = np.column_stack([Y[:, :2], np.zeros(len(Y))])  # the strata merged
    km = risk_set_sums(None, np.zeros(len(Y)), pooled, sw, union, order=0)
    out = {k: sums[k] for k in ("s0", "s1", "t0", "t1", "d", "w")}
    out.update(event_x=event_x, km_at_risk=km["s0"], km_events=km["w"])
    if information:
        rows = risk_set_sums(None, np.zeros(len(Y)), pooled, np.ones(len(Y)), union, order=0)
        weighted = risk_set_sums(X, np.zeros(len(Y)), Y, sw, grid, order=1)
        out.update(s2=sums["s2"], t2=sums["t2"], event_wx=weighted["t1"],
                   rows_at_risk=rows["s0"], row_events=rows["d"], n_rows=float(len(Y)))
    if ranks:
        out["rows_at"] = _rows_at(Y[:, 0], union[0.0])
    return out


def _enough_events(site, values, rules):
    Y, _ = Targets("survival").encode(site.y, site.weights())
    if np.sum(Y[:, 1] > 0) < rules.min_level_count:
        raise Refused("min_level_count", f"fewer than {rules.min_level_count} events here "
                      "(the moments of the event times would describe single rows)")


@site_operation(
    "survival.schoenfeld_moments", releases=SUMS, reads_design=True,
    describes="a proportional-hazards test's sums at the fitted Cox model (each site its "
              "own stratum): the event count, the summed Schoenfeld residuals, times t and "
              "times log t, and the sums and sums of squares of the event times and their "
              "logs, under the dominance rule; for R's score test (information) also the "
              "p x p information and the weighted residuals' sums, plain, times t and "
              "log t (and t^2, log^2 t for the information); only with >= "
              "min_level_count events",
    arguments=(_COEF, Arg("ties", "choice", choices=("efron", "breslow")),
               Arg("information", "bool", optional=True, default=False)),
    checks=(_enough_events,))
def site_schoenfeld_moments(site, coef, ties, information=False):
    """The sums a proportional-hazards test needs from a site that is its own
    stratum (``strata="site"``): its Schoenfeld residuals at its own event
    times, summed over its events, plain and times ``g(t)`` for the
    transforms ``identity`` and ``log``, with ``sum g`` and ``sum g^2`` over
    its events and their number. No event time leaves the site.

    ``information`` (R survival 3's score test, :mod:`skfed.survival._zph`):
    also the fit's information summed over the site's event times, plain and
    times ``g`` and ``g^2`` (packed), and its weighted residuals summed, plain
    and times ``g``."""
    X, eta, Y, sw = _schoenfeld_design(site, coef, None)
    grid = event_grid(Y)
    sums = risk_set_sums(X, eta, Y, sw, grid, order=1)
    d, event_x = _event_covariate_sums(X, Y, grid)
    resid = event_x - d[:, None] * risk_set_means(sums, ties)
    times = np.concatenate([grid[code] for code in sorted(grid)]) if grid else np.zeros(0)
    if dominance.active() is not None:  # per event time: its residuals and moments
        with np.errstate(divide="ignore"):
            logs = np.log(times)
        dominance.check_rows(np.column_stack([resid, times[:, None] * resid,
                                              logs[:, None] * resid, d * times,
                                              d * times ** 2, d * logs, d * logs ** 2]),
                             "a proportional-hazards test's sum")
    out = {"n_events": float(d.sum()), "resid": resid.sum(axis=0)}
    with np.errstate(divide="ignore"):
        for name, g in (("identity", times), ("log", np.log(times))):
            out[f"{name}_resid"] = g @ resid
            out[f"{name}_sum"] = float(d @ g)
            out[f"{name}_sq"] = float(d @ (g * g))
    if information:
        out.update(_information_moments(X, eta, Y, sw, grid, ties, times))
    return out


def _information_moments(X, eta, Y, sw, grid, ties, times):
    """The score test's sums at a site that is its own stratum: the information and
    the weighted residuals at its event times, summed plain and times ``g``."""
    sums = risk_set_sums(X, eta, Y, sw, grid, order=2)
    sums["event_wx"] = risk_set_sums(X, np.zeros(len(Y)), Y, sw, grid, order=1)["t1"]
    V, resid = per_time_terms(sums, ties)
    with np.errstate(divide="ignore"):
        gs = {"identity": times, "log": np.log(times)}
    if dominance.active() is not None:  # per event time, as the residuals' moments
        dominance.check_rows(np.column_stack(
            [V, resid] + [np.column_stack([g[:, None] * V, (g * g)[:, None] * V,
                                           g[:, None] * resid]) for g in gs.values()]),
            "a proportional-hazards test's sum")
    out = {"information": V.sum(axis=0), "wresid": resid.sum(axis=0)}
    for name, g in gs.items():
        out.update({f"{name}_information": g @ V, f"{name}_information_sq": (g * g) @ V,
                    f"{name}_wresid": g @ resid})
    return out


def _edges(value):
    if not isinstance(value, dict) or set(value) != {"time", "risk"} or any(
            _coefficients(v) or len(v) > 4096 for v in value.values()):
        return "bin edges are {'time': [...], 'risk': [...]} (at most 4,096 each)"
    return None


def _concordance_class(site, args):
    """The first pass releases the risk scores' and times' moments (sums); the second,
    histograms of rows (counts)."""
    return SUMS if args.get("edges") is None else COUNTS


def _concordance_reply(site, values, out, rules):
    """A histogram cell of 1 to ``min_level_count - 1`` rows places those rows' times and
    risk scores in a small box: without ``allow_event_times`` the histograms are left
    out then (the pairs across sites are not counted)."""
    if "rows" in out and not rules.allow_event_times:
        floor = rules.min_level_count
        if any(np.any((h > 0) & (h < floor)) for h in (out["rows"], out["events"])):
            del out["rows"], out["events"]
    return out


@site_operation(
    "evaluate.concordance", releases=_concordance_class,
    describes="Harrell's concordance: four counts of pairs of the site's rows and the sums "
              "and sums of squares of its risk scores and log times (under the dominance "
              "rule); with public bin edges, histograms of its rows and events (left out "
              "where a cell holds 1 to min_level_count - 1 rows)",
    arguments=(_COEF, Arg("edges", "value", nullable=True, check=_edges)),
    reply=_concordance_reply)
def site_concordance(site, coef, edges=None):
    """Harrell's concordance counts of the risk scores ``X @ coef`` on the site's rows.

    Without ``edges``: the counts of concordant, discordant, tied-risk and
    comparable pairs among its own rows, and the moments of its risk scores
    and log follow-up times (``n``, sums and sums of squares). With
    ``edges`` (bin edges ``{"time": ..., "risk": ...}``, public, from those
    moments): only the histograms of its rows and of its events over (time
    bin, risk bin), from which the server counts the pairs of rows at two
    different sites, to within the pairs that share a bin.
    """
    from ..data.site import numeric_matrix

    y = survival_array(site.y)
    X = numeric_matrix(site)
    coef = np.asarray(coef, dtype=float)
    if coef.shape != (X.shape[1],):
        raise SiteError(site.site, f"{X.shape[1]} covariates here, {coef.size} coefficients.")
    event, time = y[:, 0] > 0, y[:, 1]
    risk = np.asarray(X @ coef).ravel()
    lt = np.log1p(time)
    if edges is None:  # the first pass: the site's own pairs and the pooled moments' parts
        dominance.check_rows(np.column_stack([risk, risk * risk, lt, lt * lt]),
                             "the moments of risk scores and times")
        out = {k: float(v) for k, v in concordance_counts(event, time, risk).items()}
        out.update(n=float(len(risk)), risk_sum=float(risk.sum()), risk_sq=float(risk @ risk),
                   time_sum=float(lt.sum()), time_sq=float(lt @ lt))
        return out
    a = np.searchsorted(np.asarray(edges["time"], dtype=float), lt, side="right")
    b = np.searchsorted(np.asarray(edges["risk"], dtype=float), risk, side="right")
    shape = (len(edges["time"]) + 1, len(edges["risk"]) + 1)
    rows = np.zeros(shape)
    np.add.at(rows, (a, b), 1.0)
    events = np.zeros(shape)
    np.add.at(events, (a[event], b[event]), 1.0)
    return {"rows": rows, "events": events}


def _strata_column(site, column):
    X = site.X
    if not hasattr(X, "columns") or column not in X.columns:
        raise SiteError(site.site, f"no strata column {column!r} among the site's columns.")
    values = X[column]
    if values.isna().any():
        raise SiteError(site.site, f"strata column {column!r} has {int(values.isna().sum())} "
                                   "missing value(s); give them a level or drop the rows.")
    return values.astype(str).to_numpy()


def _strata_reply(site, values, out, rules):
    if np.any(out["counts"] < rules.min_level_count):
        raise Refused("min_level_count", f"a level of strata column {values['column']!r} is "
                      f"held by fewer than {rules.min_level_count} rows here",
                      columns=[values["column"]])
    return out


@site_operation(
    "survival.strata_levels", releases=COUNTS,
    describes="the levels of a Cox model's strata column with their row counts (each "
              ">= min_level_count)",
    arguments=(Arg("column", "name"),), reply=_strata_reply,
    counts=lambda out: [out["counts"]])
def site_stratum_levels(site, column):
    """The levels of the strata column at the site, with their row counts."""
    levels, counts = np.unique(_strata_column(site, column), return_counts=True)
    return {"levels": levels.astype(str), "counts": counts.astype(float)}


@row_step("strata_to_target", arguments=(Arg("column", "name"),
                                         Arg("levels", "names", most=4096)),
          reads=lambda column, levels: [column])
def move_strata_to_target(site, column, levels):
    """A row step: the strata column leaves the covariates, and each row's level (its
    index in the public, sorted ``levels``) becomes the target's third column."""
    values = _strata_column(site, column)
    levels = np.asarray(levels, dtype=str)
    codes = np.searchsorted(levels, values)
    if np.any(codes >= levels.size) or np.any(levels[np.minimum(codes, levels.size - 1)]
                                               != values):
        raise SiteError(site.site, f"a level of strata column {column!r} is not among the "
                                   "pooled levels.")
    y = survival_array(site.y)[:, :2]
    return site.replace(X=site.X.drop(columns=[column]),
                        y=np.column_stack([y, codes.astype(float)]))
