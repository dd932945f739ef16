"""The exchange behind Kaplan-Meier, Nelson-Aalen and the log-rank test: a public grid,
then the sites' counts on it, summed (masked under secure aggregation).

1. **The grid.** Each site releases the levels of the group column it holds and,
   for exact curves, its distinct event times without their counts
   (``stats.survival_grid``: only where the site allows event times, as a Cox
   model's shared baseline). Their union, with 0 and the times at which the
   number at risk is wanted, is the public grid. For a life table the grid is
   the analyst's cut points, and no time leaves a site.
2. **The counts.** Each site counts, per level and grid time, its rows at risk
   and its events (``stats.survival_counts``), or per interval its events and
   rows leaving (``stats.life_table``); the server needs only their sum over
   sites. Under ``privacy=SecureAggregation()`` that sum is a masked sum
   (:mod:`skfed.privacy.masked_sums`): each site's counts leave it masked and
   only the pooled counts are decoded.
"""

from numbers import Integral

import numpy as np

from .._messages import show
from ..exceptions import SiteRefusal
from ..federation.session import FederationSession
from ._survival_site import (MAX_LEVELS, MAX_TIMES, site_life_table, site_survival_counts,
                             site_survival_grid)


def cut_points(time_grid):
    """The analyst's cut points (``None``: exact curves), checked."""
    if time_grid is None:
        return None
    if isinstance(time_grid, (Integral, np.integer)) and not isinstance(time_grid, bool):
        raise ValueError(f"time_grid={time_grid!r}: give the cut points themselves (e.g. "
                         "time_grid=[365, 730, 1095]); a number of intervals would need the "
                         "sites' event-time quantiles.")
    try:
        cuts = np.asarray(time_grid, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"time_grid must be increasing positive cut points; got "
                         f"{show(time_grid)}.") from None
    if cuts.ndim != 1 or cuts.size == 0 or cuts.size > MAX_TIMES or \
            not np.all(np.isfinite(cuts)) or np.any(cuts <= 0) or np.any(np.diff(cuts) <= 0):
        raise ValueError("time_grid must be 1 to 65,536 finite, positive, increasing cut "
                         f"points (0 starts the first interval); got {show(time_grid)}.")
    return cuts


def check_privacy(privacy):
    from ..privacy.dp_rounds import DifferentialPrivacy
    from ..privacy.secure_rounds import SecureAggregation

    # DifferentialPrivacy is a SecureAggregation (masked and noised rounds): these counts
    # would go masked but never noised, so it is refused rather than silently ignored
    if privacy is not None and (not isinstance(privacy, SecureAggregation)
                                or isinstance(privacy, DifferentialPrivacy)):
        raise ValueError("privacy must be None or SecureAggregation() (the counts are exact: "
                         f"no differential privacy); got {type(privacy).__name__}.")


def round_times(last, count=6):
    """About ``count`` round times from 0 to ``last``: steps of 1, 2, 2.5 or 5 times a
    power of ten (where a figure's axis puts its ticks)."""
    if not np.isfinite(last) or last <= 0:
        return np.zeros(1)
    raw = last / count
    power = 10.0 ** np.floor(np.log10(raw))
    step = next(f * power for f in (1, 2, 2.5, 5, 10) if f * power >= raw)
    return np.round(np.arange(int(np.floor(last / step + 1e-9)) + 1) * step, 12)


def _report_times(at_risk_times, event_times):
    if at_risk_times is None:
        return round_times(event_times.max() if event_times.size else 0.0)
    times = np.asarray(at_risk_times, dtype=np.float64).ravel()
    if times.size > 64 or not np.all(np.isfinite(times)) or np.any(times < 0):
        raise ValueError("at_risk_times must be at most 64 finite, non-negative times; got "
                         f"{show(at_risk_times)}.")
    return np.unique(times)


def _levels(replies, group):
    if group is None:
        return [None]
    levels = []
    for reply in replies:
        levels += [v for v in reply["levels"] if v not in levels]
    try:
        levels = sorted(levels)
    except TypeError:
        pass
    if len(levels) > MAX_LEVELS:
        raise ValueError(f"group column {show(group)} has {len(levels)} levels; at most "
                         f"{MAX_LEVELS} curves.")
    return levels


def _refusal_hint(exc, analysis="Kaplan-Meier curves and the log-rank test",
                  approximate="an actuarial life table: approximate", also=", or fewer groups,"):
    """A site's refusal with what the analyst can do about it (for ``analysis``, whose
    form on cut points is ``approximate``), or ``None``."""
    text = str(exc).rstrip(".")
    if exc.rule == "allow_event_times" and "time_grid=" not in text:
        return SiteRefusal(exc.site, exc.rule, f"{text}. For {analysis}: pass time_grid= "
                           f"cut points ({approximate}), or ask the sites to set "
                           "allow_event_times = true (docs/data-officers.md)")
    if exc.rule == "min_level_count":
        return SiteRefusal(exc.site, exc.rule, f"{text}. Fewer, wider intervals "
                           f"(time_grid=){also} may pass")
    return None


def _summed(session, privacy, fn, *args):
    if privacy is None:
        return session.sum(fn, *args, phase="analysis")
    from ..privacy.masked_sums import masked

    with masked(session, privacy):  # each site's counts masked: only their sum decoded
        return session.sum(fn, *args, phase="analysis")


def pooled_counts(data, time, event, group, cuts, at_risk_times, privacy):
    """The grid and the pooled counts on it (see the module).

    Returns
    -------
    counts : dict
        ``levels`` (``[None]`` without a group); exact: ``times``,
        ``report_times``, ``at_risk`` and ``events`` of shape (n_levels,
        n_times); life table: ``events`` and ``removed`` of shape (n_levels,
        n_cuts + 1).
    """
    session = FederationSession.for_dataset(data)
    try:
        replies = session.per_site(site_survival_grid, time, event, group, cuts is None,
                                   phase="analysis")
        levels = _levels(replies, group)
        sent = None if group is None else levels
        if cuts is not None:
            sums = _summed(session, privacy, site_life_table, time, event, group, sent, cuts)
            return {"levels": levels, "events": np.rint(sums["events"]).astype(np.int64),
                    "removed": np.rint(sums["removed"]).astype(np.int64)}
        event_times = np.unique(np.concatenate([np.asarray(r["times"], dtype=float)
                                                for r in replies]))
        report = _report_times(at_risk_times, event_times)
        times = np.unique(np.concatenate([[0.0], event_times, report]))
        if times.size > MAX_TIMES:
            raise ValueError(f"{times.size} pooled event times; at most {MAX_TIMES}.")
        sums = _summed(session, privacy, site_survival_counts, time, event, group, sent, times)
    except SiteRefusal as exc:
        hinted = _refusal_hint(exc)
        if hinted is None:
            raise
        raise hinted from exc
    return {"levels": levels, "times": times, "report_times": report,
            "at_risk": np.rint(sums["at_risk"]).astype(np.int64),
            "events": np.rint(sums["events"]).astype(np.int64)}
