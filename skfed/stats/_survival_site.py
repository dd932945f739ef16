"""What runs at a site for Kaplan-Meier, Nelson-Aalen and the log-rank test.

Three site operations, each a pure function of one site's rows (its ``X`` a
DataFrame with the time, event and group columns):

- ``stats.survival_grid``: the levels of the group column the site holds and,
  only where the site allows event times, its distinct event times (no count):
  the union over sites is the public grid of the exact curves;
- ``stats.survival_counts``: at each time of a public grid, per level, the
  number of rows at risk (time >= t) and of events at t;
- ``stats.life_table``: per interval ``(c_{k-1}, c_k]`` of public cut points,
  per level, the number of events and of rows leaving (events and censorings).

The two count operations are maskable: under secure aggregation each site's
counts leave only inside a masked sum, and only the pooled counts are decoded.

Their rules are those of a Cox model's shared baseline
(:func:`skfed.solvers.risk_sets.check_risk_sets` for the counts at grid times,
:func:`skfed.survival._grid.intervals_pass` for cut points; written here again,
as :mod:`skfed.stats` sits beneath :mod:`skfed.survival`): without
``allow_event_times`` every released count of events, and every group of rows
the counts set apart, holds 0 or at least ``min_level_count`` rows at the site.
At a site that requires protection, ``allow_event_times`` lifts that rule only
inside masked sums.
"""

import functools

import numpy as np
import pandas as pd

from .._messages import show
from ..data.site import SiteError
from ..federation.combine import Combine, add_counts, tree_combine
from ..federation.operations import COUNTS, Arg, Refused, site_operation

#: the most levels (curves) and grid times one request may ask for
MAX_LEVELS, MAX_TIMES = 64, 1 << 16


def _level_list(value):
    """Public group levels: a list of at most MAX_LEVELS names or finite numbers."""
    if not isinstance(value, (list, tuple)) or len(value) > MAX_LEVELS or not all(
            isinstance(v, str) and 0 < len(v) <= 256
            or isinstance(v, (bool, np.bool_, int, float, np.integer, np.floating))
            and np.isfinite(v) for v in value):
        return f"levels are at most {MAX_LEVELS} names or finite numbers"
    return None


def _increasing(value):
    values = np.asarray(value, dtype=np.float64)
    if values.ndim != 1 or np.any(np.diff(values) <= 0):
        return "times are increasing"
    return None


_TIME, _EVENT = Arg("time", "name"), Arg("event", "name")
_GROUP = Arg("group", "name", nullable=True)
_LEVELS = Arg("levels", "value", nullable=True, check=_level_list, convert=list)


def _column(site, name, role):
    X = site.X
    if not hasattr(X, "columns"):
        raise SiteError(site.site, "skfed.stats needs named columns: pass a DataFrame.")
    if name not in X.columns:
        raise SiteError(site.site, f"no {role} column {show(name)}; it has "
                                   f"{list(map(str, X.columns))}.")
    return X[name]


def checked_times(site, time, event):
    """The site's follow-up times (finite, non-negative) and its event column (no missing
    value, its codes left to the caller): the checks every survival operation shares."""
    if site.n_samples == 0:
        raise SiteError(site.site, "no rows.")
    t, e = _column(site, time, "time"), _column(site, event, "event")
    if not pd.api.types.is_numeric_dtype(t.dtype) or pd.api.types.is_bool_dtype(t.dtype):
        raise SiteError(site.site, f"time column {show(time)} is not numeric (dtype {t.dtype}).")
    tv = t.to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isnan(tv).any():
        raise SiteError(site.site, f"time column {show(time)} has missing values.")
    if not np.isfinite(tv).all() or (tv < 0).any():
        raise SiteError(site.site, f"time column {show(time)} has negative or infinite times.")
    if e.isna().any():
        raise SiteError(site.site, f"event column {show(event)} has missing values.")
    return tv, e


def survival_rows(site, time, event, group):
    """The site's times, 0/1 events and group values, checked.

    Returns
    -------
    times : ndarray of float
        Finite, non-negative.
    events : ndarray of bool
    groups : pandas.Series or None
        The group column (no missing value), ``None`` without ``group``.
    """
    tv, e = checked_times(site, time, event)
    try:
        ev = e.to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise SiteError(site.site, f"event column {show(event)} is not 0/1.") from None
    if not np.isin(ev, (0.0, 1.0)).all():
        raise SiteError(site.site, f"event column {show(event)} is not 0/1 (it has "
                                   f"{show(sorted(set(np.unique(ev)) - {0.0, 1.0})[:3])}).")
    g = None
    if group is not None:
        g = _column(site, group, "group")
        if g.isna().any():
            raise SiteError(site.site, f"group column {show(group)} has missing values.")
    return tv, ev > 0, g


def _plain(level):
    return level.item() if isinstance(level, np.generic) else level


def _level_masks(site, groups, levels):
    """One boolean mask of the site's rows per public level (all rows without a group);
    a level the site holds that the list lacks is an error (its rows would be left out)."""
    if groups is None:
        return [np.ones(site.n_samples, dtype=bool)]
    masks = [(groups == level).to_numpy() for level in levels or ()]
    covered = np.any(masks, axis=0) if masks else np.zeros(site.n_samples, dtype=bool)
    if not covered.all():
        raise SiteError(site.site, "a level of the group column here is not among the "
                                   "pooled levels.")
    return masks


def _is_small(counts, floor):
    return bool(np.any((counts > 0) & (counts < floor)))


def summed(site, counts, *args):
    """``counts(site, *args)`` over the site's rows: on an engine's partitions, their
    counts added (dicts by key), so that a rule decides on the whole dataset."""
    if not hasattr(site, "map_parts"):
        return counts(site, *args)
    parts = site.map_parts(counts, *args)
    if isinstance(parts[0], dict):
        return functools.reduce(add_counts, parts)
    return tree_combine("sum", parts)


def _group_counts(site, group):
    return {_plain(k): int(v) for k, v in
            _column(site, group, "group").value_counts(dropna=True).items()}


def _levels_rule(site, values, rules):
    """Each level of the group column at the site (a name released, and a curve of its
    own) holds at least ``min_level_count`` rows."""
    if values["group"] is None:
        return
    counts = np.asarray(list(summed(site, _group_counts, values["group"]).values()))
    if _is_small(counts, rules.min_level_count):
        raise Refused("min_level_count", f"a level of group column {values['group']!r} is "
                      f"held by fewer than {rules.min_level_count} rows here",
                      columns=[values["group"]])


def _rule_lifted(rules):
    """``allow_event_times`` lifts the small-count rule: in the clear only at a site that
    requires no protection, else inside masked sums only."""
    return rules.allow_event_times and (rules.masked or not rules.require)


def _grid_rules(site, values, rules):
    _levels_rule(site, values, rules)
    if values["event_times"] and not rules.allow_event_times:
        raise Refused("allow_event_times", "exact Kaplan-Meier curves make the sites' event "
                      "times public; pass time_grid= cut points (a life table), or ask the "
                      "sites to set allow_event_times", public=True)


def _union_grid(parts):
    """The partitions' levels (first seen first, as ``pd.unique`` on all the rows) and
    event times (their sorted union)."""
    return {"levels": list(dict.fromkeys(v for p in parts for v in p["levels"])),
            "times": np.unique(np.concatenate([p["times"] for p in parts]))}


@site_operation(
    "stats.survival_grid", releases=COUNTS,
    describes="the levels of a group column the site holds (each >= min_level_count rows) "
              "and, with event_times, the site's distinct event times without their "
              "counts or levels (only with allow_event_times): the public grid of "
              "Kaplan-Meier curves, Nelson-Aalen and the log-rank test",
    arguments=(_TIME, _EVENT, _GROUP, Arg("event_times", "bool")),
    checks=(_grid_rules,), counts=lambda reply: [],
    combine=Combine(lambda parts, args: _union_grid(parts)))
def site_survival_grid(site, time, event, group, event_times):
    """The site's group levels and, with ``event_times``, its distinct event times.

    Parameters
    ----------
    site : SiteData
    time, event : str
        Columns of follow-up times (finite, non-negative) and 0/1 event indicators.
    group : str or None
    event_times : bool

    Returns
    -------
    reply : dict
        ``{"levels": [...], "times": ndarray}``: the levels (``[]`` without
        ``group``) and the increasing distinct times of the site's events over
        all levels (empty without ``event_times``).
    """
    tv, ev, g = survival_rows(site, time, event, group)
    levels = [] if g is None else [_plain(v) for v in pd.unique(g)]
    times = np.unique(tv[ev]) if event_times else np.zeros(0)
    return {"levels": levels, "times": times}


def _times_rule(site, values, rules):
    """Without the rule lifted: at each grid time the events there, and the rows between
    it and the next (those leaving the risk set; before the first: the rows not at risk),
    number 0 or at least ``min_level_count``, per level (Cox's risk-set rule)."""
    _levels_rule(site, values, rules)
    if _rule_lifted(rules):
        return
    for leaving, events in summed(site, _grid_counts, values):
        if _is_small(leaving, rules.min_level_count) or \
                _is_small(events, rules.min_level_count):
            raise Refused("min_level_count", f"a time of the grid has fewer than "
                          f"{rules.min_level_count} events or rows leaving the risk set here")


def _grid_counts(site, values):
    """Per level: the rows between two grid times (before the first: not at risk) and
    the events at each grid time."""
    tv, ev, g = survival_rows(site, values["time"], values["event"], values["group"])
    grid = np.asarray(values["times"], dtype=float)
    out = []
    for mask in _level_masks(site, g, values["levels"]):
        k = np.searchsorted(grid, tv[mask], side="right")  # 0: before the first time
        at = (k > 0) & (tv[mask] == grid[np.maximum(k - 1, 0)])
        out.append((np.bincount(k, minlength=grid.size + 1),
                    np.bincount(k[at & ev[mask]], minlength=grid.size + 1)))
    return out


@site_operation(
    "stats.survival_counts", releases=COUNTS, maskable=True,
    describes="per level of a group and time of a public grid: the rows at risk (time >= "
              "t) and the events at t; without allow_event_times only where each time's "
              "events and the rows between two grid times number 0 or >= min_level_count "
              "(at a site that requires protection, allow_event_times lifts that only "
              "inside masked sums)",
    arguments=(_TIME, _EVENT, _GROUP, _LEVELS,
               Arg("times", "floats", most=MAX_TIMES, check=_increasing)),
    checks=(_times_rule,), combine="sum")  # counts per grid time: they add up
def site_survival_counts(site, time, event, group, levels, times):
    """A site's numbers at risk and of events at each public time, per level.

    Parameters
    ----------
    site : SiteData
    time, event : str
    group : str or None
    levels : list or None
        The public levels of ``group`` (every level the site holds among them).
    times : ndarray of shape (n_times,)
        Increasing public times.

    Returns
    -------
    counts : dict
        ``{"at_risk": (n_levels, n_times), "events": (n_levels, n_times)}``, int64:
        the rows with time ``>= t`` and the events at ``t``.
    """
    tv, ev, g = survival_rows(site, time, event, group)
    times = np.asarray(times, dtype=float)
    masks = _level_masks(site, g, levels)
    at_risk = np.zeros((len(masks), times.size), dtype=np.int64)
    events = np.zeros_like(at_risk)
    for j, mask in enumerate(masks):
        t, te = np.sort(tv[mask]), np.sort(tv[mask & ev])
        at_risk[j] = t.size - np.searchsorted(t, times, side="left")
        events[j] = np.searchsorted(te, times, side="right") - np.searchsorted(te, times)
    return {"at_risk": at_risk, "events": events}


def _cut_points(value):
    values = np.asarray(value, dtype=np.float64)
    if values.ndim != 1 or values.size == 0 or np.any(values <= 0) or \
            np.any(np.diff(values) <= 0):
        return "cut points are positive and increasing"
    return None


def _intervals_rule(site, values, rules):
    """Without the rule lifted: every interval of the cut points holds 0 or at least
    ``min_level_count`` events and rows, per level (a Cox time grid's rule)."""
    _levels_rule(site, values, rules)
    if _rule_lifted(rules):
        return
    for removed, events in summed(site, _interval_counts, values):
        if _is_small(removed, rules.min_level_count) or \
                _is_small(events, rules.min_level_count):
            raise Refused("min_level_count", "an interval of the time grid holds fewer than "
                          f"{rules.min_level_count} events or rows here")


def _interval_counts(site, values):
    """Per level: the rows and the events in each interval of the cut points."""
    tv, ev, g = survival_rows(site, values["time"], values["event"], values["group"])
    cuts = np.asarray(values["cuts"], dtype=float)
    out = []
    for mask in _level_masks(site, g, values["levels"]):
        k = np.searchsorted(cuts, tv[mask], side="left")
        out.append((np.bincount(k, minlength=cuts.size + 1),
                    np.bincount(k[ev[mask]], minlength=cuts.size + 1)))
    return out


@site_operation(
    "stats.life_table", releases=COUNTS, maskable=True,
    describes="per level of a group and interval of public cut points: the events and "
              "the rows leaving (events and censorings); without allow_event_times only "
              "where every interval holds 0 or >= min_level_count events and rows (at a "
              "site that requires protection, allow_event_times lifts that only inside "
              "masked sums)",
    arguments=(_TIME, _EVENT, _GROUP, _LEVELS,
               Arg("cuts", "floats", most=MAX_TIMES, check=_cut_points,
                   convert=lambda c: np.asarray(c, dtype=np.float64))),
    checks=(_intervals_rule,), combine="sum")
def site_life_table(site, time, event, group, levels, cuts):
    """A site's events and rows leaving in each interval of public cut points, per level.

    Parameters
    ----------
    site : SiteData
    time, event : str
    group : str or None
    levels : list or None
    cuts : ndarray of shape (n_cuts,)
        Positive, increasing: the intervals are ``[0, c_1]``, ``(c_1, c_2]``,
        ..., ``(c_m, inf)``.

    Returns
    -------
    counts : dict
        ``{"events": (n_levels, n_cuts + 1), "removed": (n_levels, n_cuts + 1)}``,
        int64.
    """
    tv, ev, g = survival_rows(site, time, event, group)
    cuts = np.asarray(cuts, dtype=float)
    masks = _level_masks(site, g, levels)
    events = np.zeros((len(masks), cuts.size + 1), dtype=np.int64)
    removed = np.zeros_like(events)
    for j, mask in enumerate(masks):
        k = np.searchsorted(cuts, tv[mask], side="left")
        removed[j] = np.bincount(k, minlength=cuts.size + 1)
        events[j] = np.bincount(k[ev[mask]], minlength=cuts.size + 1)
    return {"events": events, "removed": removed}
