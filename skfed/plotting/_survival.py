"""Kaplan-Meier curves with the number at risk beneath, and a Cox model's adjusted
survival curves."""

import numpy as np
import pandas as pd

from ..stats._survival_table import SurvivalTable
from ._style import COLORS, journal_style, new_figure


def _curves(km):
    """``{label: frame indexed by time}`` of a :func:`skfed.stats.kaplan_meier` table
    (one curve, or one per level of its ``by`` column)."""
    if not isinstance(km, SurvivalTable):
        raise TypeError("plot_kaplan_meier takes the table skfed.stats.kaplan_meier returns "
                        f"(a SurvivalTable); got {type(km).__name__}.")
    if km.index.nlevels == 1:
        return {"all": km}, None
    by = km.index.names[0]
    return {level: km.xs(level, level=0) for level in km.index.unique(level=0)}, by


def number_at_risk(curve, times):
    """The number at risk at each of ``times``, read from a Kaplan-Meier table.

    At time ``t`` it is the ``at_risk`` of the first time of the table at or
    after ``t``, 0 after the last one: the rows followed at ``t`` wherever
    ``t`` is a time of the table (an exact table holds the event times and its
    ``at_risk_times``, where :func:`plot_kaplan_meier` puts its ticks; a life
    table its cut points, where ``at_risk`` is the rows followed beyond them).
    Between two times of the table it is the number at the later one: rows
    censored in between are not seen. Every number shown is one the table holds.

    Parameters
    ----------
    curve : pandas.DataFrame
        One curve of :func:`skfed.stats.kaplan_meier` (indexed by ``time``).
    times : array-like of float

    Returns
    -------
    at_risk : ndarray of int
    """
    table_times = curve.index.to_numpy(dtype=float)
    at_risk = curve["at_risk"].to_numpy()
    k = np.searchsorted(table_times, np.asarray(times, dtype=float), side="left")
    padded = np.append(at_risk, 0)
    return padded[np.minimum(k, len(at_risk))].astype(int)


def _censor_marks(ax, curve, color):
    """A tick where rows were censored before the next time of the table (the table
    holds no censoring time: the tick is at the start of the gap they fell in)."""
    censored = curve["censored"].to_numpy() > 0
    ax.plot(curve.index.to_numpy(dtype=float)[censored], curve["survival"].to_numpy()[censored],
            ls="none", marker="|", ms=5, mew=0.9, color=color)


def _at_risk_table(ax, curves, names, ticks, colors):
    """The numbers at risk under the curves, one row per group, at the axis' ticks."""
    ax.set_ylim(-0.5, len(curves) - 0.5)
    widest = 1
    for row, (curve, color) in enumerate(zip(curves.values(), colors)):
        y = len(curves) - 1 - row
        for t, n in zip(ticks, number_at_risk(curve, ticks)):
            ax.text(t, y, f"{n}", ha="center", va="center", fontsize=8, color=color)
            widest = max(widest, len(str(n)))
    ax.set_yticks(range(len(curves))[::-1], names)
    # the group names clear the half of the first column's numbers that is left of 0
    ax.tick_params(axis="both", length=0)
    ax.tick_params(axis="y", pad=4 + 2.6 * widest)
    ax.tick_params(axis="x", labelbottom=False)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title("Number at risk", loc="left", fontsize=8)


def _ticks(km, last):
    """Where the number at risk is known exactly: a life table's cut points (at most
    about 12 of them), an exact table's ``at_risk_times``; else ``None``."""
    grid = km.time_grid if km.approximate else km.at_risk_times
    if grid is None:
        return None
    ticks = np.concatenate([[0.0], np.asarray(grid, dtype=float)])
    ticks = np.unique(ticks[ticks <= last])
    step = max(1, int(np.ceil((ticks.size - 1) / 12)))
    return ticks[::step] if ticks.size > 1 else None


def _draw_curve(ax, curve, name, color, *, linear, confidence, censor_marks):
    """One curve: a step function, or a life table's points joined by straight lines."""
    t = curve.index.to_numpy(dtype=float)
    if linear:
        ax.plot(t, curve["survival"], color=color, marker="o", ms=3, label=name)
    else:
        ax.step(t, curve["survival"], where="post", color=color, label=name)
    if confidence and {"survival_lower", "survival_upper"} <= set(curve.columns):
        ax.fill_between(t, curve["survival_lower"], curve["survival_upper"],
                        step=None if linear else "post", color=color, alpha=0.15, lw=0)
    if censor_marks and not linear and "censored" in curve.columns:
        _censor_marks(ax, curve, color)


def _caption(fig, km):
    """A life table says under the figure that it is approximate, and on which grid."""
    if not km.approximate:
        return
    import textwrap

    fig.text(0.0, 0.0, textwrap.fill(km.note, 110), ha="left", va="top", fontsize=7,
             color="#333333")


def plot_kaplan_meier(km, *, confidence=True, at_risk=True, censor_marks=True, xlabel="time",
                      ylabel="survival probability", title=None, xmax=None):
    """Kaplan-Meier curves (one per group) with their intervals and the number at risk
    beneath.

    An exact table is drawn as step functions, its ticks at the table's
    ``at_risk_times`` (where the number at risk is exact). A life table
    (``kaplan_meier(..., time_grid=...)``, ``approximate``) is drawn as its
    points at the cut points joined by straight lines (the actuarial
    assumption), its ticks at the cut points, and a caption under the figure
    says that it is approximate and on which grid.

    Parameters
    ----------
    km : SurvivalTable
        What :func:`skfed.stats.kaplan_meier` returns: one curve, or one per
        level of its ``by`` column.
    confidence : bool, default=True
        Shade the pointwise interval (``survival_lower`` to
        ``survival_upper``: lifelines' log(-log) interval).
    at_risk : bool, default=True
        The table of the number at risk at the time axis' ticks
        (:func:`number_at_risk`).
    censor_marks : bool, default=True
        A tick where rows were censored, at the time of the table after which
        they were (an exact table holds no censoring time); none on a life table.
    xlabel, ylabel : str
    title : str, default=None
    xmax : float, default=None
        The last time shown (default: the last time of the table).

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    curves, by = _curves(km)
    last = max(float(c.index.max()) for c in curves.values()) if xmax is None else xmax
    with journal_style():
        if at_risk:
            fig, (ax, table_ax) = new_figure(
                6.0, 4.0 + 0.22 * len(curves), nrows=2, hspace=0.35,
                height_ratios=[4.0, 0.35 + 0.22 * len(curves)])
        else:
            fig, (ax,) = new_figure(6.0, 4.0)
        colors = [COLORS[k % len(COLORS)] for k in range(len(curves))]
        names = [str(label) if by is None else f"{by} = {label}" for label in curves]
        for curve, name, color in zip(curves.values(), names, colors):
            _draw_curve(ax, curve, None if by is None else name, color, linear=km.approximate,
                        confidence=confidence, censor_marks=censor_marks)
        ax.set(xlim=(0, last), ylim=(0, 1.02), xlabel=xlabel, ylabel=ylabel)
        ticks = _ticks(km, last)
        if ticks is not None:
            ax.set_xticks(ticks)
        if by is not None:
            ax.legend(loc="lower left")
        if title:
            ax.set_title(title, loc="left")
        if at_risk:
            ticks = [t for t in ax.get_xticks() if 0 <= t <= last]
            ax.set_xticks(ticks)
            table_ax.set_xlim(ax.get_xlim())
            _at_risk_table(table_ax, curves, names, ticks, colors)
        _caption(fig, km)
    return fig


def _times(cox, times):
    """The times of the curves: ``times``, or every time of the baseline hazard (all
    strata), finite ones only, with 0 first."""
    if times is None:
        base = cox.baseline_times_
        times = np.unique(np.concatenate(list(base.values())) if isinstance(base, dict)
                          else base)
    times = np.asarray(times, dtype=float)
    times = np.unique(times[np.isfinite(times)])
    return times if times.size and times[0] <= 0 else np.concatenate([[0.0], times])


def plot_survival(cox, X_profiles, *, times=None, strata=None, labels=None, xlabel="time",
                  ylabel="survival probability", title=None):
    """Adjusted survival curves of a fitted Cox model, one per covariate profile.

    Each curve is ``exp(-exp(x'b) H0(t))`` for one profile ``x``
    (:meth:`skfed.survival.FedCoxPH.predict_survival_function`), Breslow's
    baseline ``H0`` from the sites' sums: the survival of a person with
    those covariates (no interval: the baseline's variance is not
    computed).

    Parameters
    ----------
    cox : skfed.survival.FedCoxPH
        Fitted (any object with ``predict_survival_function(X, times,
        strata)`` and ``baseline_times_``).
    X_profiles : array-like or DataFrame of shape (n_profiles, n_features)
        The covariate profiles, in the columns the model was fitted on.
    times : array-like, default=None
        Default: the times of the baseline hazard.
    strata : array-like of shape (n_profiles,), default=None
        Each profile's stratum, for a model with several baselines (the
        site with ``strata="site"``).
    labels : list of str, default=None
        The legend; default: the index of a DataFrame, else ``profile 1``...
    xlabel, ylabel : str
    title : str, default=None

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    grid = _times(cox, times)
    survival = np.atleast_2d(cox.predict_survival_function(X_profiles, times=grid,
                                                           strata=strata))
    if labels is None:
        labels = (list(map(str, X_profiles.index)) if isinstance(X_profiles, pd.DataFrame)
                  else [f"profile {k + 1}" for k in range(len(survival))])
    if len(labels) != len(survival):
        raise ValueError(f"{len(labels)} labels for {len(survival)} profiles.")
    with journal_style():
        fig, (ax,) = new_figure(6.0, 4.0)
        for label, curve in zip(labels, survival):
            ax.step(grid, curve, where="post", label=str(label))
        ax.set(xlim=(0, grid[-1]), ylim=(0, 1.02), xlabel=xlabel, ylabel=ylabel)
        if len(labels) > 1:
            ax.legend(loc="lower left")
        if title:
            ax.set_title(title, loc="left")
    return fig
