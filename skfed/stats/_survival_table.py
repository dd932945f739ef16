"""Survival tables from pooled counts: the Kaplan-Meier and Nelson-Aalen estimates at
exact times, and the actuarial life table on cut points.

:class:`SurvivalTable` is what :func:`skfed.stats.kaplan_meier` returns: a
DataFrame indexed by time that says whether it is exact (``approximate``), on
which grid (``time_grid``) and why (``note``).
"""

import numpy as np
import pandas as pd
from scipy import special, stats


class SurvivalTable(pd.DataFrame):
    """A survival table: one row per time, one curve (or one per level of ``by``).

    A DataFrame (every pandas operation works on it) with what the table is:

    Attributes
    ----------
    approximate : bool
        ``False``: the Kaplan-Meier and Nelson-Aalen estimates at the pooled
        event times, equal to lifelines' on the pooled rows. ``True``: an
        actuarial life table on the cut points ``time_grid`` (the sites
        released counts per interval, not event times).
    time_grid : ndarray or None
        The cut points of a life table.
    at_risk_times : ndarray or None
        The times, besides the event times, at which an exact table gives the
        number at risk (the figure's ticks).
    alpha : float
        The intervals have level ``1 - alpha``.
    note : str
        What the table is, in a sentence (empty for an exact table); shown
        under the table's repr and the figure.
    """

    _metadata = ["approximate", "time_grid", "at_risk_times", "alpha", "note"]
    approximate, time_grid, at_risk_times, alpha, note = False, None, None, 0.05, ""

    @property
    def _constructor(self):
        return SurvivalTable

    def describe_as(self, *, approximate, time_grid, at_risk_times, alpha, note):
        """Set what the table is (see the class); returns the table."""
        for name, value in zip(self._metadata, (approximate, time_grid, at_risk_times, alpha,
                                                note)):
            object.__setattr__(self, name, value)
        return self

    def __repr__(self):
        text = super().__repr__()
        return f"{text}\n{self.note}" if self.note else text

    def _repr_html_(self):
        html = super()._repr_html_()
        return f"{html}<p>{self.note}</p>" if self.note and html else html


def _confidence(survival, variance, alpha):
    """lifelines' interval of a survival curve: the log(-log) transform."""
    z = stats.norm.ppf(1 - alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.log(survival)
        lower = np.exp(-np.exp(np.log(-v) - z * np.sqrt(variance) / v))
        upper = np.exp(-np.exp(np.log(-v) + z * np.sqrt(variance) / v))
    lower[np.isnan(lower)] = 1.0
    upper[np.isnan(upper)] = 1.0
    return lower, upper


def _hazard_bounds(hazard, variance, alpha):
    """lifelines' interval of a cumulative hazard: ``H exp(+- z sqrt(V) / H)``."""
    z = stats.norm.ppf(1 - alpha / 2)
    safe = np.where(hazard == 0, 1, hazard)
    return (hazard * np.exp(-z * np.sqrt(variance) / safe),
            hazard * np.exp(z * np.sqrt(variance) / safe))


def exact_table(times, at_risk, events, alpha):
    """lifelines' KaplanMeierFitter and NelsonAalenFitter (defaults) from the numbers at
    risk and of events at each time.

    Parameters
    ----------
    times : ndarray of shape (n_times,)
        Increasing: 0, the event times and any other times wanted.
    at_risk, events : ndarray of int of shape (n_times,)
        Rows with time ``>= t``; events at ``t``.
    alpha : float

    Returns
    -------
    pandas.DataFrame
        Indexed by ``time``; ``censored`` is the rows censored from each time
        until the next of the table (the table holds no censoring time).
    """
    n, d = at_risk.astype(np.float64), events.astype(np.float64)
    has = d > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        log_s = np.cumsum(np.where(has, np.log(n - d) - np.log(n), 0.0))
        greenwood = np.where(has, d / (n * (n - d)), 0.0)
    greenwood[np.isinf(greenwood)] = 0.0
    variance = np.cumsum(greenwood)
    survival = np.exp(log_s)
    lower, upper = _confidence(survival, variance, alpha)
    # Nelson-Aalen with lifelines' tie smoothing: sum_{i<d} 1/(n-i) and 1/(n-i)^2
    ni, di = at_risk.astype(np.int64), events.astype(np.int64)
    top = max(int(ni.max()), 1)
    harmonic = np.cumsum(1.0 / np.arange(1, top + 1))
    harmonic2 = np.cumsum(1.0 / np.arange(1, top + 1) ** 2)
    first, rest = np.maximum(ni - 1, 0), np.maximum(ni - di - 1, 0)
    terms = np.where(has, harmonic[first] - np.where(ni - di >= 1, harmonic[rest], 0), 0.0)
    terms2 = np.where(has, harmonic2[first] - np.where(ni - di >= 1, harmonic2[rest], 0), 0.0)
    hazard, hvar = np.cumsum(terms), np.cumsum(terms2)
    h_lower, h_upper = _hazard_bounds(hazard, hvar, alpha)
    censored = at_risk - np.append(at_risk[1:], 0) - events
    return pd.DataFrame({
        "at_risk": at_risk, "events": events, "censored": censored, "survival": survival,
        "survival_lower": lower, "survival_upper": upper, "greenwood_variance": variance,
        "cumulative_hazard": hazard, "cumulative_hazard_lower": h_lower,
        "cumulative_hazard_upper": h_upper}, index=pd.Index(times, name="time"))


def life_table(cuts, events, removed, alpha):
    """The actuarial life table (Cutler and Ederer, 1958) on the intervals of ``cuts``.

    The intervals are ``[0, c_1]``, ``(c_1, c_2]``, ..., ``(c_m, inf)``; one row
    per interval, indexed by its start. A row censored within an interval is
    counted as at risk for half of it: with ``n`` rows entering, ``d`` events
    and ``c`` censorings, the effective number at risk is ``n' = n - c / 2``,
    the interval's conditional probability of death ``d / n'``, and the
    survival at the start of interval ``k`` is ``prod_{j<k} (1 - d_j / n'_j)``.

    Why this estimator, and not the Kaplan-Meier estimate of the grouped times
    (each interval's events and censorings at its start, or its end): with
    times known only to their interval, that one uses ``d / n``, counting every
    row censored within the interval as at risk for all of its events (or,
    censorings first, ``d / (n - c)``: for none), and overestimates (under-
    estimates) survival by up to the interval's censoring; reported at the
    interval's start it also moves every drop earlier. The actuarial table
    assumes censorings spread evenly within the interval, and estimates the
    survival at the cut points themselves. On lifelines' gbsg2 at yearly cut
    points to 4 years its largest error against the Kaplan-Meier curve at the
    cut points is 0.0011, against 0.019 for ``d / n`` and 0.023 for
    ``d / (n - c)`` (docs/statistics.md). The variance is Greenwood's with
    ``n'``, the interval lifelines'; the cumulative hazard sums
    ``1 / (n' - i)`` over an interval's events (lifelines' tie smoothing: the
    risk set shrinks as they occur).

    Parameters
    ----------
    cuts : ndarray of shape (n_cuts,)
    events, removed : ndarray of int of shape (n_cuts + 1,)
        Per interval: events, and rows leaving (events and censorings).
    alpha : float

    Returns
    -------
    pandas.DataFrame
        Indexed by ``time`` (0 and the cut points: each interval's start):
        ``interval_end``, ``at_risk`` (rows entering: time ``> start``, all at
        0), ``events``, ``censored``, ``effective_at_risk``, and at the start
        ``survival`` with its bounds and variance and the cumulative hazard
        with its bounds.
    """
    starts = np.concatenate([[0.0], cuts])
    entering = removed.sum() - np.concatenate([[0], np.cumsum(removed)[:-1]])
    censored = removed - events
    n = entering - censored / 2.0
    d = events.astype(np.float64)
    has = d > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(has, d / n, 0.0)
        greenwood = np.where(has, d / (n * (n - d)), 0.0)
        hazard_terms = np.where(has, special.digamma(n + 1) - special.digamma(n - d + 1), 0.0)
        hazard_var = np.where(has, special.polygamma(1, n - d + 1)
                              - special.polygamma(1, n + 1), 0.0)
    greenwood[~np.isfinite(greenwood)] = 0.0

    def at_start(terms, op):  # each interval's start: the terms of the ones before it
        return np.concatenate([[op.identity], op.accumulate(terms)[:-1]])

    survival = at_start(1.0 - q, np.multiply)
    variance = at_start(greenwood, np.add)
    lower, upper = _confidence(survival, variance, alpha)
    hazard, hvar = at_start(hazard_terms, np.add), at_start(hazard_var, np.add)
    h_lower, h_upper = _hazard_bounds(hazard, hvar, alpha)
    return pd.DataFrame({
        "interval_end": np.append(cuts, np.inf), "at_risk": entering, "events": events,
        "censored": censored, "effective_at_risk": n, "survival": survival,
        "survival_lower": lower, "survival_upper": upper, "greenwood_variance": variance,
        "cumulative_hazard": hazard, "cumulative_hazard_lower": h_lower,
        "cumulative_hazard_upper": h_upper}, index=pd.Index(starts, name="time"))
