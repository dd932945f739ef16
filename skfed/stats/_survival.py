"""Kaplan-Meier, Nelson-Aalen and the log-rank test from the sites' per-time counts.

Each site sends, per distinct time (and per group), its number of events and
of censorings (:func:`~skfed.stats._site.site_event_table`); the server adds
them up, forms the risk sets and computes the estimates with lifelines'
formulas, so the numbers equal lifelines' on the pooled rows.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ..federation.session import FederationSession
from .._messages import show
from ..data.dataset import as_dataset
from ._site import site_event_table


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


def _pool(tables):
    """Sum the sites' (times, events, censored) into one table on the union of times."""
    times = np.unique(np.concatenate([t for t, _, _ in tables]))
    events = np.zeros(times.size, dtype=np.int64)
    censored = np.zeros(times.size, dtype=np.int64)
    for t, d, c in tables:
        k = np.searchsorted(times, t)
        np.add.at(events, k, d)
        np.add.at(censored, k, c)
    return times, events, censored


def _pooled_tables(data, time, event, group, min_count):
    replies = FederationSession.for_dataset(data).per_site(
        site_event_table, time, event, group, min_count, phase="analysis")
    levels = []
    for reply in replies:
        for level in reply:
            if level not in levels:
                levels.append(level)
    try:
        levels = sorted(levels)
    except TypeError:
        pass
    return {level: _pool([r[level] for r in replies if level in r]) for level in levels}


def _km_frame(times, events, censored, alpha):
    """lifelines' KaplanMeierFitter and NelsonAalenFitter (defaults) on one event table."""
    if times.size == 0 or times[0] > 0:  # lifelines' timeline starts at 0
        times = np.concatenate([[0.0], times])
        events = np.concatenate([[0], events])
        censored = np.concatenate([[0], censored])
    removed = events + censored
    at_risk = removed.sum() - np.concatenate([[0], np.cumsum(removed)[:-1]])
    n, d = at_risk.astype(np.float64), events.astype(np.float64)
    z = stats.norm.ppf(1 - alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_s = np.cumsum(np.log(n - d) - np.log(n))
        greenwood = d / (n * (n - d))
        greenwood[np.isinf(greenwood)] = 0.0
        var = np.cumsum(greenwood)
        survival = np.exp(log_s)
        v = np.log(survival)
        lower = np.exp(-np.exp(np.log(-v) - z * np.sqrt(var) / v))
        upper = np.exp(-np.exp(np.log(-v) + z * np.sqrt(var) / v))
    lower[np.isnan(lower)] = 1.0
    upper[np.isnan(upper)] = 1.0
    # Nelson-Aalen with lifelines' tie smoothing: sum_{i<d} 1/(n-i) and 1/(n-i)^2
    ni = at_risk.astype(np.int64)
    harmonic = np.cumsum(1.0 / np.arange(1, ni.max() + 1))
    harmonic2 = np.cumsum(1.0 / np.arange(1, ni.max() + 1) ** 2)
    rest = ni - events - 1
    hazard = np.cumsum(harmonic[ni - 1] - np.where(rest >= 0, harmonic[np.maximum(rest, 0)], 0))
    hvar = np.cumsum(harmonic2[ni - 1] - np.where(rest >= 0, harmonic2[np.maximum(rest, 0)], 0))
    safe = np.where(hazard == 0, 1, hazard)
    return pd.DataFrame({
        "at_risk": at_risk, "events": events, "censored": censored, "survival": survival,
        "survival_lower": lower, "survival_upper": upper, "greenwood_variance": var,
        "cumulative_hazard": hazard,
        "cumulative_hazard_lower": hazard * np.exp(-z * np.sqrt(hvar) / safe),
        "cumulative_hazard_upper": hazard * np.exp(z * np.sqrt(hvar) / safe)},
        index=pd.Index(times, name="time"))


def kaplan_meier(data, *, time, event, by=None, min_count=None, alpha=0.05, clients=None):
    """The Kaplan-Meier and Nelson-Aalen estimates over all sites' rows.

    Each site sends, per distinct time (and per level of ``by``), its number
    of events and of censorings; the server adds them up and forms the risk
    sets. The survival function, its Greenwood variance and its confidence
    interval (the log(-log) transform, lifelines' ``KaplanMeierFitter``
    default) and the Nelson-Aalen cumulative hazard with its interval
    (lifelines' ``NelsonAalenFitter`` default, tie-smoothed) equal lifelines'
    on the pooled rows.

    Parameters
    ----------
    data : FederatedDataset or DataFrame
        The sites' rows (a DataFrame needs ``clients``).
    time : str
        Column of follow-up times: finite, non-negative, never missing.
    event : str
        Column of event indicators, 0/1 (or bool): 1 the event, 0 censored.
    by : str, default=None
        A column whose levels get separate curves.
    min_count : int, default=None
        ``None``: exact (each site sends its distinct times). An int: each
        site merges adjacent distinct times (from the earliest) into bins of
        at least ``min_count`` rows and reports a bin's events and
        censorings at its last time, so no released time is shared by fewer
        rows; the estimate is then the exact one of the data with times
        rounded up to their bin's end (an approximation that delays events
        within a bin).
    alpha : float, default=0.05
        The intervals have level ``1 - alpha``.
    clients : str or array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame (a column name or one
        label per row).

    Returns
    -------
    table : pandas.DataFrame
        Indexed by ``time`` (by ``(by level, time)`` with ``by``), from time
        0 (lifelines' timeline): ``at_risk``, ``events``, ``censored``,
        ``survival``, ``survival_lower``, ``survival_upper``,
        ``greenwood_variance`` (the sum of ``d / (n (n - d))``),
        ``cumulative_hazard``, ``cumulative_hazard_lower`` and
        ``cumulative_hazard_upper``.

    Raises
    ------
    ValueError
        A column missing, negative or missing times, an event indicator that
        is not 0/1, a site without rows (the message names the site).
    """
    data = _dataset(data, clients)
    _check_columns(data, time=time, event=event, by=by)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {show(alpha)}.")
    if min_count is not None and (not isinstance(min_count, (int, np.integer)) or min_count < 1):
        raise ValueError(f"min_count must be a positive int or None; got {show(min_count)}.")
    tables = _pooled_tables(data, time, event, by, min_count)
    if by is None:
        return _km_frame(*tables[None], alpha)
    frames = {level: _km_frame(*t, alpha) for level, t in tables.items()}
    return pd.concat(frames, names=[by, "time"])


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
    """

    statistic: float
    p_value: float
    degrees_of_freedom: int
    observed: pd.Series = field(repr=False)
    expected: pd.Series = field(repr=False)


def logrank_test(data, *, time, event, group, clients=None):
    """The log-rank test of equal hazards between the levels of ``group``, over all sites.

    Each site sends, per level of ``group`` and distinct time, its number of
    events and of censorings; the server forms each group's risk sets on the
    union of times. The statistic and p-value equal lifelines'
    ``multivariate_logrank_test`` (and ``logrank_test`` for two groups) on the
    pooled rows.

    Parameters
    ----------
    data : FederatedDataset or DataFrame
    time : str
        Column of follow-up times (finite, non-negative, never missing).
    event : str
        Column of 0/1 event indicators.
    group : str
        Column of the groups compared (at least two levels, never missing).
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
    """
    data = _dataset(data, clients)
    if group is None:
        raise ValueError("group must name a column.")
    _check_columns(data, time=time, event=event, group=group)
    tables = _pooled_tables(data, time, event, group, None)
    levels = list(tables)
    if len(levels) < 2:
        raise ValueError(f"group column {show(group)} has {len(levels)} level(s); the log-rank "
                         "test compares at least two.")
    times = np.unique(np.concatenate([tables[g][0] for g in levels]))
    d = np.zeros((times.size, len(levels)))
    removed = np.zeros((times.size, len(levels)))
    for j, g in enumerate(levels):
        t, e, c = tables[g]
        k = np.searchsorted(times, t)
        d[k, j] = e
        removed[k, j] = e + c
    n_ij = removed.sum(0) - np.vstack([np.zeros(len(levels)), np.cumsum(removed, 0)[:-1]])
    n_i = n_ij.sum(1)
    d_i = d.sum(1)
    expected = n_ij * (d_i / n_i)[:, None]
    z = d.sum(0) - expected.sum(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (n_i - d_i) / (n_i - 1)
    ratio[~np.isfinite(ratio)] = 1.0
    factor = ratio * d_i / n_i ** 2
    full = np.column_stack([n_ij, n_i]) * np.sqrt(factor)[:, None]
    V = -full.T @ full
    ix = np.arange(len(levels))
    V[ix, ix] = V[ix, ix] - V[-1, ix]
    V = V[:-1, :-1]
    statistic = float(z[:-1] @ np.linalg.pinv(V[:-1, :-1]) @ z[:-1])
    dof = len(levels) - 1
    return LogrankResult(statistic, float(stats.chi2.sf(statistic, dof)), dof,
                         pd.Series(d.sum(0), index=levels, name="observed"),
                         pd.Series(expected.sum(0), index=levels, name="expected"))
