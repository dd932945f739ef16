"""Kaplan-Meier, Nelson-Aalen and the log-rank test from the sites' pooled counts.

Exact where the sites allow event times: the counts at the pooled event times
(:mod:`skfed.stats._survival_exchange`), summed over sites (masked under secure
aggregation), give lifelines' numbers on the pooled rows. On cut points
(``time_grid=``): the actuarial life table and the log-rank test of the grouped
times, each saying it is approximate.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from .._messages import show
from ..data.dataset import as_dataset
from ._survival_exchange import check_privacy, cut_points, pooled_counts
from ._survival_table import SurvivalTable, exact_table, life_table


def _dataset(data, clients):
    if isinstance(clients, str):  # a column name, as the formula functions take it
        if not isinstance(data, pd.DataFrame):
            raise ValueError(f"clients={clients!r} names a column: pass a DataFrame (a "
                             "FederatedDataset carries its sites).")
        if clients not in data.columns:
            raise ValueError(f"clients={clients!r} is not a column of the data.")
        clients = data[clients].to_numpy()
    if clients is None and not hasattr(data, "map"):
        raise ValueError("pass a FederatedDataset, or a DataFrame with clients=.")
    data = as_dataset(data, clients=clients)
    if len(data) == 0 or int(data.n_samples.sum()) == 0:
        raise ValueError("the dataset has no rows.")
    if data.columns is None:
        raise ValueError("skfed.stats needs named columns: build the dataset from a DataFrame.")
    return data


def _check_columns(data, **named):
    for role, name in named.items():
        if name is not None and name not in data.columns:
            raise ValueError(f"{role} column {show(name)} is not in the dataset's columns "
                             f"{data.columns}.")


def _shown(cuts):
    return ", ".join(f"{c:g}" for c in cuts[:12]) + (", ..." if cuts.size > 12 else "")


def _note(cuts):
    if cuts is None:
        return ""
    return (f"Approximate: an actuarial life table on the cut points {_shown(cuts)} (the "
            "sites released counts per interval, not event times); the survival at each cut "
            "point assumes censorings spread evenly within an interval, and the curve is "
            "drawn straight between cut points.")


def _curves(counts, cuts, alpha):
    """``{level: frame}`` from the pooled counts: a life table on ``cuts``, else the
    exact estimates at time 0, the level's event times and the report times (while it
    has rows at risk)."""
    frames = {}
    for j, level in enumerate(counts["levels"]):
        events = counts["events"][j]
        if cuts is not None:
            frames[level] = life_table(cuts, events, counts["removed"][j], alpha)
            continue
        times, at_risk = counts["times"], counts["at_risk"][j]
        keep = (events > 0) | (times == 0) | (np.isin(times, counts["report_times"])
                                              & (at_risk > 0))
        frames[level] = exact_table(times[keep], at_risk[keep], events[keep], alpha)
    return frames


def kaplan_meier(data, *, time, event, by=None, time_grid=None, at_risk_times=None,
                 alpha=0.05, privacy=None, clients=None, min_count=None):
    """The Kaplan-Meier and Nelson-Aalen estimates over all sites' rows, or where the
    sites release no event times, the actuarial life table on cut points.

    Exact (``time_grid=None``): each site releases its distinct event times
    (without counts; a site service only with ``allow_event_times``); on
    their union (with 0 and ``at_risk_times``) each site counts its rows at
    risk and its events, and the server needs only their sums. The survival
    function, its Greenwood variance and its interval (the log(-log)
    transform, lifelines' ``KaplanMeierFitter`` default) and the Nelson-Aalen
    cumulative hazard with its interval (lifelines' ``NelsonAalenFitter``,
    tie-smoothed) equal lifelines' on the pooled rows at every time of the
    table.

    On cut points (``time_grid=[c_1, ..., c_m]``): each site counts its events
    and rows leaving per interval ``[0, c_1], (c_1, c_2], ..., (c_m, inf)``
    (a site service: each interval 0 or at least ``min_level_count`` events
    and rows), and the table is the actuarial life table
    (:func:`skfed.stats._survival_table.life_table`: the estimator for times
    known to their interval only), which says it is approximate
    (``approximate``, ``time_grid``, ``note``).

    Parameters
    ----------
    data : FederatedDataset or DataFrame
        The sites' rows (a DataFrame needs ``clients``).
    time : str
        Column of follow-up times: finite, non-negative, never missing.
    event : str
        Column of event indicators, 0/1 (or bool): 1 the event, 0 censored.
    by : str, default=None
        A column whose levels get separate curves (at a site service each
        level it holds has at least ``min_level_count`` rows).
    time_grid : array-like of float, default=None
        ``None``: exact curves. Positive increasing cut points: the
        actuarial life table on their intervals (no time leaves a site).
    at_risk_times : array-like of float, default=None
        Exact curves only: times at which the table also gives the number at
        risk (a figure's ticks). ``None``: about six round times from 0 to
        the last event time (:func:`plot_kaplan_meier
        <skfed.plotting.plot_kaplan_meier>` puts its ticks there); ``()``:
        none.
    alpha : float, default=0.05
        The intervals have level ``1 - alpha``.
    privacy : SecureAggregation or None, default=None
        ``SecureAggregation()``: each site's counts leave it masked, and
        only their sums over the sites are decoded (at least two sites).
        The event times of the grid are exchanged site by site, as a Cox
        model's.
    clients : str or array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame (a column name or one
        label per row).
    min_count : None
        Gone (each site coarsened its own table to bins of ``min_count`` rows,
        which biased the curve); a value is refused with the way to a life
        table (``time_grid=``).

    Returns
    -------
    table : SurvivalTable
        A DataFrame indexed by ``time`` (by ``(by level, time)`` with ``by``),
        from time 0: ``at_risk`` (rows with time ``>= t``), ``events``,
        ``censored`` (rows censored from ``t`` until the next time of the
        table: the table holds no censoring time), ``survival``,
        ``survival_lower``, ``survival_upper``, ``greenwood_variance``,
        ``cumulative_hazard``, ``cumulative_hazard_lower`` and
        ``cumulative_hazard_upper``; a life table is indexed by each
        interval's start, its counts are the interval's (``at_risk`` the rows
        entering it), and it has ``interval_end`` and ``effective_at_risk``.
        Its ``approximate``, ``time_grid`` and ``note`` say what it is.

    Raises
    ------
    ValueError
        A column missing, negative or missing times, an event indicator that
        is not 0/1, a site without rows (the message names the site), bad
        cut points.
    SiteRefusal
        A site service's rule: exact curves without ``allow_event_times``
        (the message says to pass ``time_grid=``), an interval or level with
        fewer than ``min_level_count`` rows or events.
    """
    if min_count is not None:
        raise TypeError("kaplan_meier no longer takes min_count= (per-site bins biased the "
                        "curve): give time_grid=[cut points] for the actuarial life table, "
                        "or let the sites release their event times (allow_event_times).")
    data = _dataset(data, clients)
    _check_columns(data, time=time, event=event, by=by)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {show(alpha)}.")
    cuts = cut_points(time_grid)
    if cuts is not None and at_risk_times is not None:
        raise ValueError("at_risk_times is for exact curves; a life table gives the number "
                         "at risk at its cut points.")
    check_privacy(privacy)
    counts = pooled_counts(data, time, event, by, cuts, at_risk_times, privacy)
    frames = _curves(counts, cuts, alpha)
    table = SurvivalTable(frames[None] if by is None else pd.concat(frames, names=[by, "time"]))
    return table.describe_as(approximate=cuts is not None, time_grid=cuts,
                             at_risk_times=counts.get("report_times"), alpha=alpha,
                             note=_note(cuts))


@dataclass
class LogrankResult:
    """The log-rank test between groups.

    Attributes
    ----------
    statistic : float
        The chi-square statistic.
    p_value : float
    degrees_of_freedom : int
        Number of groups minus one.
    observed, expected : pandas.Series
        Events per group, observed and expected under equal hazards.
    approximate : bool
        ``True``: the test of the times grouped into the intervals of
        ``time_grid`` (see :func:`logrank_test`).
    time_grid : ndarray or None
    note : str
        What the test is, when it is approximate.
    """

    statistic: float
    p_value: float
    degrees_of_freedom: int
    observed: pd.Series = field(repr=False)
    expected: pd.Series = field(repr=False)
    approximate: bool = False
    time_grid: np.ndarray = field(default=None, repr=False)
    note: str = ""


def _logrank(n_ij, d):
    """``(statistic, expected)``: the log-rank chi-square from the numbers at risk and of
    events, one row per time and one column per group (lifelines'
    ``multivariate_logrank_test``)."""
    rows = d.sum(1) > 0
    n_ij, d = n_ij[rows].astype(np.float64), d[rows].astype(np.float64)
    n_i, d_i = n_ij.sum(1), d.sum(1)
    expected = n_ij * (d_i / n_i)[:, None]
    z = d.sum(0) - expected.sum(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (n_i - d_i) / (n_i - 1)
    ratio[~np.isfinite(ratio)] = 1.0
    factor = ratio * d_i / n_i ** 2
    full = np.column_stack([n_ij, n_i]) * np.sqrt(factor)[:, None]
    V = -full.T @ full
    ix = np.arange(n_ij.shape[1])
    V[ix, ix] = V[ix, ix] - V[-1, ix]
    V = V[:-2, :-2]  # the groups' covariance, less the last group's row and column
    return float(z[:-1] @ np.linalg.pinv(V) @ z[:-1]), expected.sum(0)


def logrank_test(data, *, time, event, group, time_grid=None, privacy=None, clients=None):
    """The log-rank test of equal hazards between the levels of ``group``, over all sites.

    Exact (``time_grid=None``): the numbers at risk and of events per group
    at the pooled event times (as :func:`kaplan_meier`: the sites release
    their event times, a site service only with ``allow_event_times``); the
    statistic and p-value equal lifelines' ``multivariate_logrank_test`` (and
    ``logrank_test`` for two groups) on the pooled rows.

    On cut points: the Mantel-Haenszel test over the intervals, each a 2 x
    groups table of the rows entering it and its events; that is lifelines'
    log-rank test of the times rounded to their interval (every number it
    uses is a count the grid releases, and its hypergeometric variance needs
    the whole numbers entering, not the life table's ``n - c / 2``). The
    result says it is approximate.

    Parameters
    ----------
    data : FederatedDataset or DataFrame
    time : str
        Column of follow-up times (finite, non-negative, never missing).
    event : str
        Column of 0/1 event indicators.
    group : str
        Column of the groups compared (at least two levels, never missing).
    time_grid : array-like of float, default=None
        ``None``: exact. Positive increasing cut points: the test of the
        grouped times.
    privacy : SecureAggregation or None, default=None
        As :func:`kaplan_meier`: each site's counts masked.
    clients : str or array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame (a column name or one
        label per row).

    Returns
    -------
    result : LogrankResult

    Raises
    ------
    ValueError
        Bad columns as in :func:`kaplan_meier`, or fewer than two groups.
    SiteRefusal
        As :func:`kaplan_meier`.
    """
    data = _dataset(data, clients)
    if group is None:
        raise ValueError("group must name a column.")
    _check_columns(data, time=time, event=event, group=group)
    cuts = cut_points(time_grid)
    check_privacy(privacy)
    counts = pooled_counts(data, time, event, group, cuts, (), privacy)
    levels = counts["levels"]
    if len(levels) < 2:
        raise ValueError(f"group column {show(group)} has {len(levels)} level(s); the log-rank "
                         "test compares at least two.")
    d = counts["events"].T
    if cuts is None:
        n_ij = counts["at_risk"].T
    else:
        removed = counts["removed"].T
        n_ij = removed.sum(0) - np.vstack([np.zeros(len(levels)), np.cumsum(removed, 0)[:-1]])
    statistic, expected = _logrank(n_ij, d)
    dof = len(levels) - 1
    note = "" if cuts is None else ("Approximate: the log-rank test of the times grouped "
                                    f"into the intervals of the cut points {_shown(cuts)}.")
    return LogrankResult(statistic, float(stats.chi2.sf(statistic, dof)), dof,
                         pd.Series(d.sum(0), index=levels, name="observed"),
                         pd.Series(expected, index=levels, name="expected"),
                         approximate=cuts is not None, time_grid=cuts, note=note)
