"""What an IPW survival analysis asks of a site: weighted counts per arm, never a row.

The weights are each row's IPW weight, computed at the site from the broadcast
propensity model (the fitted ``theta`` of :class:`~skfed.causal.FedIPW`):

- :func:`site_weighted_survival_counts`: at each time of a public grid, per arm,
  the weighted number at risk (time ``>= t``) and of events at ``t``, and the
  unweighted ones (the weighted Kaplan-Meier curves);
- :func:`site_weighted_life_table`: per interval of public cut points, per arm,
  the weighted events and rows leaving (an approximate weighted life table);
- :func:`ipw_survival_rows`: a row step that makes the treatment the only
  covariate, ``(event, time)`` the target and the IPW weight the sample weight
  (the weighted Cox model is fitted by :class:`~skfed.survival.FedCoxPH`).

The site's event-time rule is that of :func:`skfed.stats.kaplan_meier`, with the
arms as the groups: without ``allow_event_times`` each arm's events at a grid
time (or in an interval) and the rows leaving between two grid times number 0 or
at least ``min_level_count``.
"""

import numpy as np

from ..data.site import SiteError
from ..federation import dominance
from ..federation.operations import SUMS, Arg, row_step, site_operation
from ..stats._survival_site import (MAX_TIMES, _cut_points, _increasing, _intervals_rule,
                                    _times_rule, survival_rows)
from ._site import MAX_COVARIATES, _check_theta, _numeric, ipw_weights, spec_problem


def _ipw_spec(value):
    problem = spec_problem(value)
    if problem is None and (value["method"] != "ipw" or value["scores"] != "logistic"):
        problem = "survival effects take an IPW analysis with the logistic propensity model"
    return problem


_SPEC = Arg("spec", "value", check=_ipw_spec)
_THETA = Arg("theta", "floats", most=MAX_COVARIATES + 16)
_TIME, _EVENT = Arg("time", "name"), Arg("event", "name")


def site_weights(site, spec, theta):
    """``(A, w)``: the site's treatment and each row's IPW weight in its own arm."""
    X = site.X
    if not hasattr(X, "columns"):
        raise SiteError(site.site, "a causal analysis needs named columns: pass a DataFrame.")
    if site.n_samples == 0:
        raise SiteError(site.site, "no rows.")
    Z = np.ones((site.n_samples, 1 + len(spec["covariates"])))
    for j, name in enumerate(spec["covariates"]):
        Z[:, 1 + j] = _numeric(site, X, name, "covariate")
    A = _numeric(site, X, spec["treatment"], "treatment")
    if not np.all((A == 0) | (A == 1)):
        raise SiteError(site.site, "the treatment holds values other than 0 and 1.")
    theta = np.asarray(theta, dtype=np.float64)
    _check_theta(site, theta, spec, Z.shape[1])
    w, _ = ipw_weights(Z, A, theta, spec)
    return A, w


def _as_arms(values):
    """A check's arguments with the arms as the groups of a survival curve."""
    return {**values, "group": values["spec"]["treatment"], "levels": [1.0, 0.0]}


def _arm_times_rule(site, values, rules):
    _times_rule(site, _as_arms(values), rules)


def _arm_intervals_rule(site, values, rules):
    _intervals_rule(site, _as_arms(values), rules)


def _audit(A, w, ev):
    """Each arm's weighted totals and weighted events pass the dominance rule."""
    if dominance.active() is None:
        return
    for arm in (1, 0):
        rows = A == arm  # an arm without rows checks nothing, but counts as a check:
        # an engine's partitions then form the same checks whatever arms they hold
        dominance.check_rows(np.column_stack([w[rows], w[rows] * ev[rows]]),
                             "an arm's weighted survival counts")


@site_operation(
    "causal.weighted_survival_counts", releases=SUMS, maskable=True,
    describes="per arm and time of a public grid, at a broadcast propensity model: the "
              "IPW-weighted and unweighted numbers at risk (time >= t) and of events at t; "
              "every weighted number (each time's, and the arms' totals) under the "
              "dominance rule; without "
              "allow_event_times only where each time's events and the rows between two "
              "grid times number 0 or >= min_level_count per arm",
    arguments=(_SPEC, _THETA, _TIME, _EVENT,
               Arg("times", "floats", most=MAX_TIMES, check=_increasing)),
    checks=(_arm_times_rule,),
    combine="sum")  # per arm and time: weighted and plain counts add over partitions
def site_weighted_survival_counts(site, spec, theta, time, event, times):
    """Per arm (treated first), at each grid time: weighted and unweighted counts.

    Returns
    -------
    counts : dict
        ``w_at_risk``, ``w_events`` (float) and ``at_risk``, ``events`` (int64),
        each of shape (2, n_times).
    """
    tv, ev, _ = survival_rows(site, time, event, None)
    A, w = site_weights(site, spec, theta)
    _audit(A, w, ev)
    times = np.asarray(times, dtype=np.float64)
    out = {k: np.zeros((2, times.size)) for k in ("w_at_risk", "w_events", "at_risk",
                                                  "events")}
    for j, arm in enumerate((1, 0)):
        rows = A == arm
        last = np.searchsorted(times, tv[rows], side="right") - 1  # the last grid t <= time
        on = (last >= 0) & (times[np.maximum(last, 0)] == tv[rows]) & ev[rows]
        # each time's weighted events and at risk: one row's weight (its propensity
        # score) must not make up a released number
        dominance.check_groups(w[rows][on], last[on], times.size, "an arm's weighted events")
        dominance.check_groups(w[rows][last >= 0], last[last >= 0], times.size,
                               "an arm's weighted number at risk", at_or_after=True)
        for weight, at_key, ev_key in ((w[rows], "w_at_risk", "w_events"),
                                       (np.ones(int(rows.sum())), "at_risk", "events")):
            # at risk at t_j: the rows whose last grid time at or before their time is >= j
            entered = np.bincount(last + 1, weights=weight, minlength=times.size + 1)[1:]
            out[at_key][j] = np.cumsum(entered[::-1])[::-1]
            out[ev_key][j] = np.bincount(last[on], weights=weight[on], minlength=times.size)
    out["at_risk"] = np.rint(out["at_risk"]).astype(np.int64)
    out["events"] = np.rint(out["events"]).astype(np.int64)
    return out


@site_operation(
    "causal.weighted_life_table", releases=SUMS, maskable=True,
    describes="per arm and interval of public cut points, at a broadcast propensity "
              "model: the IPW-weighted events and rows leaving (events and censorings); "
              "every weighted number (each interval's, and the arms' totals) under the "
              "dominance rule; without "
              "allow_event_times only where every interval holds 0 or >= min_level_count "
              "events and rows per arm",
    arguments=(_SPEC, _THETA, _TIME, _EVENT,
               Arg("cuts", "floats", most=MAX_TIMES, check=_cut_points,
                   convert=lambda c: np.asarray(c, dtype=np.float64))),
    checks=(_arm_intervals_rule,),
    combine="sum")  # per arm and interval: weighted events and removals add up
def site_weighted_life_table(site, spec, theta, time, event, cuts):
    """Per arm (treated first) and interval ``[0, c_1], (c_1, c_2], ..., (c_m, inf)``:
    ``{"events": (2, n_cuts + 1), "removed": (2, n_cuts + 1)}``, weighted."""
    tv, ev, _ = survival_rows(site, time, event, None)
    A, w = site_weights(site, spec, theta)
    _audit(A, w, ev)
    cuts = np.asarray(cuts, dtype=np.float64)
    events, removed = np.zeros((2, cuts.size + 1)), np.zeros((2, cuts.size + 1))
    for j, arm in enumerate((1, 0)):
        rows = A == arm
        k = np.searchsorted(cuts, tv[rows], side="left")
        dominance.check_groups(w[rows], k, cuts.size + 1, "an interval's weighted removals")
        dominance.check_groups(w[rows][ev[rows]], k[ev[rows]], cuts.size + 1,
                               "an interval's weighted events")
        removed[j] = np.bincount(k, weights=w[rows], minlength=cuts.size + 1)
        events[j] = np.bincount(k[ev[rows]], weights=w[rows][ev[rows]],
                                minlength=cuts.size + 1)
    return {"events": events, "removed": removed}


@row_step("causal_ipw_survival_rows", arguments=(_SPEC, _THETA, _TIME, _EVENT),
          reads=lambda spec, theta, time, event: [spec["treatment"], *spec["covariates"],
                                                  time, event])
def ipw_survival_rows(site, spec, theta, time, event):
    """A row step: the treatment the only covariate, ``(event, time)`` the target and
    each row's IPW weight (from the broadcast propensity model) its sample weight."""
    tv, ev, _ = survival_rows(site, time, event, None)
    A, w = site_weights(site, spec, theta)
    X = site.X[[spec["treatment"]]].astype(np.float64)
    return site.replace(X=X, y=np.column_stack([ev.astype(np.float64), tv]),
                        sample_weight=w)
