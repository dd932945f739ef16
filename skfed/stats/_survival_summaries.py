"""Summaries of a survival table: the median survival time with its interval, and the
restricted mean survival time.

They read a :class:`~skfed.stats._survival_table.SurvivalTable` only (no site is
asked anything): exact tables give lifelines' numbers, life tables the
actuarial ones (the curve straight between cut points).
"""

import numpy as np
import pandas as pd

from .._messages import show
from ._survival_table import SurvivalTable


def _check_table(km, caller):
    if not isinstance(km, SurvivalTable):
        raise TypeError(f"{caller} takes the table skfed.stats.kaplan_meier returns; got "
                        f"{type(km).__name__}.")


def _curves(km):
    """``{level: curve}`` (``{None: km}`` without ``by``)."""
    if km.index.nlevels == 1:
        return {None: km}
    return {level: km.xs(level, level=0) for level in km.index.unique(level=0)}


def _crossing(times, values, linear, q=0.5):
    """The first time a curve is at or below ``q``: lifelines' rule on a step function
    (the first time of the table); on a life table the straight line between the cut
    points around it. ``inf`` when it never is."""
    below = np.flatnonzero(values <= q)
    if below.size == 0:
        return np.inf
    k = int(below[0])
    if not linear or k == 0 or values[k] == q:
        return float(times[k])
    a, b = values[k - 1], values[k]
    return float(times[k - 1] + (a - q) / (a - b) * (times[k] - times[k - 1]))


def median_survival(km):
    """The median survival time and its confidence interval, per curve.

    Exact tables: lifelines' ``median_survival_time_`` (the first time the
    curve is at or below 0.5) and its interval
    ``lifelines.utils.median_survival_times(kmf.confidence_interval_)`` (the
    first times the interval's upper and lower bounds are): ``inf`` where a
    curve stays above 0.5. A life table: the time its curve, straight between
    cut points, crosses 0.5 (and its bounds'), as actuarial tables report it;
    ``inf`` when it does not by the last cut point.

    Parameters
    ----------
    km : SurvivalTable
        What :func:`kaplan_meier` returns.

    Returns
    -------
    medians : pandas.DataFrame
        One row per curve (indexed by the levels of ``by``, or ``"all"``):
        ``median``, ``median_lower``, ``median_upper``; its ``attrs["alpha"]``
        the intervals' level (``1 - alpha``).

    Raises
    ------
    TypeError
        ``km`` is not a table of :func:`kaplan_meier`.
    """
    _check_table(km, "median_survival")
    rows = {}
    for level, curve in _curves(km).items():
        t = curve.index.to_numpy(dtype=float)
        rows["all" if level is None else level] = [
            _crossing(t, curve[column].to_numpy(), km.approximate)
            for column in ("survival", "survival_lower", "survival_upper")]
    out = pd.DataFrame.from_dict(rows, orient="index",
                                 columns=["median", "median_lower", "median_upper"])
    out.index.name = km.index.names[0] if km.index.nlevels > 1 else None
    out.attrs["alpha"] = km.alpha
    return out


def _step_moments(times, survival, t):
    """``int_0^t S`` and ``2 int_0^t u S(u) du`` of a right-continuous step function."""
    keep = times <= t
    edges = np.append(times[keep], t)
    s = survival[keep]
    return float(np.sum(np.diff(edges) * s)), float(np.sum(np.diff(edges ** 2) * s))


def _linear_moments(times, survival, t):
    """The same of the curve straight between the table's times (up to ``t``)."""
    s_t = np.interp(t, times, survival)
    keep = times < t
    x, y = np.append(times[keep], t), np.append(survival[keep], s_t)
    a, b, sa, sb = x[:-1], x[1:], y[:-1], y[1:]
    mean = float(np.sum((b - a) * (sa + sb) / 2))
    second = float(np.sum((b - a) / 3 * (sa * (2 * a + b) + sb * (a + 2 * b))))
    return mean, second


def restricted_mean_survival_time(km, t, return_variance=False):
    """The restricted mean survival time ``int_0^t S(u) du``, per curve.

    Exact tables: lifelines' ``restricted_mean_survival_time(kmf, t=t)``
    (the step function integrated exactly, constant after its last time);
    with ``return_variance``, lifelines' variance of ``min(T, t)``,
    ``2 int_0^t u S(u) du - RMST**2`` (lifelines integrates it numerically,
    here exactly). A life table: the integrals of its curve straight between
    cut points, up to at most its last cut point.

    Parameters
    ----------
    km : SurvivalTable
        What :func:`kaplan_meier` returns.
    t : float
        The time up to which the mean is taken (positive).
    return_variance : bool, default=False

    Returns
    -------
    rmst : float, tuple of float or pandas.DataFrame
        One curve: the RMST, or ``(rmst, variance)`` as lifelines. With
        ``by``: a DataFrame indexed by its levels, column ``rmst`` (and
        ``variance``).

    Raises
    ------
    TypeError
        ``km`` is not a table of :func:`kaplan_meier`.
    ValueError
        ``t`` not positive and finite, or past a life table's last cut point.
    """
    _check_table(km, "restricted_mean_survival_time")
    if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)) or \
            not np.isfinite(t) or t <= 0:
        raise ValueError(f"t must be a positive, finite time; got {show(t)}.")
    t = float(t)
    rows = {}
    for level, curve in _curves(km).items():
        times = curve.index.to_numpy(dtype=float)
        if km.approximate and t > times[-1]:
            raise ValueError(f"t={t:g} is past the life table's last cut point "
                             f"{times[-1]:g}: its curve is not estimated beyond it.")
        moments = (_linear_moments if km.approximate else _step_moments)(
            times, curve["survival"].to_numpy(), t)
        rows[level] = (moments[0], moments[1] - moments[0] ** 2)
    if km.index.nlevels == 1:
        mean, variance = rows[None]
        return (mean, variance) if return_variance else mean
    out = pd.DataFrame.from_dict(rows, orient="index", columns=["rmst", "variance"])
    out.index.name = km.index.names[0]
    return out if return_variance else out[["rmst"]]
