"""What runs at a site for the Aalen-Johansen cumulative incidence (competing risks).

Two site operations, each a pure function of one site's rows (its ``X`` a
DataFrame with a time column and a column of event codes: 0 censored, 1, 2,
... the causes):

- ``stats.competing_grid``: the site's distinct event times of any cause,
  without their counts or causes (only where the site allows event times):
  their union over sites is the public grid of the exact estimate;
- ``stats.competing_counts``: at each time of a public grid, the rows at risk,
  the events of any cause and those of the cause of interest; or, on public cut
  points, the same counts of the times rounded up to their cut point.

The counts are maskable (under secure aggregation only their sum over the
sites is decoded) and follow the rules of the Kaplan-Meier counts
(:mod:`skfed.stats._survival_site`): without ``allow_event_times`` every
released count of events (of any cause, of the cause) and of rows leaving the
risk set between two grid times holds 0 or at least ``min_level_count`` rows.
"""

import numpy as np

from .._messages import show
from ..data.site import SiteError
from ..federation.combine import Combine
from ..federation.operations import COUNTS, Arg, Refused, site_operation
from ._survival_site import (_EVENT, _TIME, MAX_TIMES, _increasing, _is_small, _rule_lifted,
                             checked_times, summed)


def competing_rows(site, time, event):
    """The site's times and event codes, checked.

    Returns
    -------
    times : ndarray of float
        Finite, non-negative.
    codes : ndarray of int64
        0 censored, a positive integer the cause of the event.
    """
    tv, e = checked_times(site, time, event)
    try:
        ev = e.to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise SiteError(site.site, f"event column {show(event)} is not a column of event "
                                   "codes (0 censored, 1, 2, ... the causes).") from None
    if not (np.isfinite(ev).all() and (ev >= 0).all() and (ev == np.round(ev)).all()):
        raise SiteError(site.site, f"event column {show(event)} holds codes other than 0 "
                                   "(censored) and positive integers (the causes).")
    return tv, ev.astype(np.int64)


def _grid_rule(site, values, rules):
    if not rules.allow_event_times:
        raise Refused("allow_event_times", "exact competing-risks estimates make the sites' "
                      "event times public; ask the sites to set allow_event_times",
                      public=True)


@site_operation(
    "stats.competing_grid", releases=COUNTS,
    describes="the site's distinct event times of any cause and, with censorings, its "
              "distinct censoring times, without their counts or causes (only with "
              "allow_event_times): the public grid of the Aalen-Johansen cumulative "
              "incidence and of a Fine-Gray model's censoring curve",
    arguments=(_TIME, _EVENT, Arg("censorings", "bool", optional=True, default=False)),
    checks=(_grid_rule,), counts=lambda reply: [],
    combine=Combine(lambda parts, args: {  # the partitions' times' sorted union
        key: np.unique(np.concatenate([p[key] for p in parts])) for key in parts[0]}))
def site_competing_grid(site, time, event, censorings=False):
    """The site's distinct event times (any cause), and censoring times if asked.

    Parameters
    ----------
    site : SiteData
    time, event : str
        Columns of follow-up times and of event codes (0 censored).
    censorings : bool, default=False
        Also the distinct censoring times (a Fine-Gray model's censoring curve).

    Returns
    -------
    reply : dict
        ``{"times": ndarray}`` (and ``"censorings"``), increasing.
    """
    tv, codes = competing_rows(site, time, event)
    reply = {"times": np.unique(tv[codes > 0])}
    if censorings:
        reply["censorings"] = np.unique(tv[codes == 0])
    return reply


def _positions(tv, grid, intervals):
    """Per row: the index of the grid time it reaches last (exact: the last grid time
    ``<= t``, -1 before the first; cut points: its interval's, ``len(grid)`` beyond the
    last), and whether it sits at that time (an event there counts)."""
    if intervals:
        k = np.searchsorted(grid, tv, side="left")
        return k, np.ones(tv.size, dtype=bool)
    k = np.searchsorted(grid, tv, side="right") - 1
    return k, (k >= 0) & (tv == grid[np.maximum(k, 0)])


def _counts_rule(site, values, rules):
    """Without the rule lifted: rows leaving between two grid times (per interval), the
    events of any cause and those of the cause, each 0 or >= ``min_level_count``."""
    if _rule_lifted(rules):
        return
    for counts in summed(site, _rule_counts, values):
        if _is_small(counts, rules.min_level_count):
            raise Refused("min_level_count", "a time of the grid has fewer than "
                          f"{rules.min_level_count} events, events of the cause, or rows "
                          "leaving the risk set here")


def _rule_counts(site, values):
    """Per grid time: the rows leaving, the events of any cause and of the cause."""
    tv, codes = competing_rows(site, values["time"], values["event"])
    grid = np.asarray(values["times"], dtype=float)
    k, at = _positions(tv, grid, values["intervals"])
    k = k + 1  # >= 0 for bincount
    return [np.bincount(k[rows], minlength=grid.size + 2)
            for rows in (np.ones(tv.size, dtype=bool), at & (codes > 0),
                         at & (codes == values["cause"]))]


@site_operation(
    "stats.competing_counts", releases=COUNTS, maskable=True,
    describes="at each time of a public grid (or cut point, the times rounded up to it): "
              "the rows at risk, the events of any cause and the events of one cause; "
              "without allow_event_times only where each count of events and the rows "
              "between two grid times number 0 or >= min_level_count (at a site that "
              "requires protection, allow_event_times lifts that only inside masked sums)",
    arguments=(_TIME, _EVENT, Arg("cause", "int", low=1, high=1 << 30),
               Arg("times", "floats", most=MAX_TIMES, check=_increasing),
               Arg("intervals", "bool")),
    checks=(_counts_rule,), combine="sum")  # counts per grid time: they add up
def site_competing_counts(site, time, event, cause, times, intervals):
    """A site's numbers at risk and of events (any cause, the cause) at public times.

    Parameters
    ----------
    site : SiteData
    time, event : str
    cause : int
        The code of the cause of interest.
    times : ndarray of shape (n_times,)
        Increasing public times: event times, or positive cut points.
    intervals : bool
        ``True``: ``times`` are cut points, and each row counts at the cut point
        ending its interval ``(c_{k-1}, c_k]`` (rows beyond the last are left out
        of every count but the numbers at risk before).

    Returns
    -------
    counts : dict
        ``{"at_risk", "events", "cause_events"}``, each int64 of shape (n_times,).
    """
    tv, codes = competing_rows(site, time, event)
    grid = np.asarray(times, dtype=float)
    k, at = _positions(tv, grid, intervals)
    # at risk at a grid time: rows at or after it (on cut points: whose interval is its
    # or a later one)
    reached = np.sort(k) if intervals else np.sort(tv)
    at_risk = tv.size - np.searchsorted(reached, np.arange(grid.size) if intervals else grid,
                                        side="left")
    inside = (k >= 0) & (k < grid.size) & at
    events = np.bincount(k[inside & (codes > 0)], minlength=grid.size)[:grid.size]
    cause_events = np.bincount(k[inside & (codes == cause)], minlength=grid.size)[:grid.size]
    return {"at_risk": at_risk.astype(np.int64), "events": events.astype(np.int64),
            "cause_events": cause_events.astype(np.int64)}
