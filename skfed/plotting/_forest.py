"""The forest plot of a regression: odds, rate or hazard ratios with their intervals."""

import numpy as np
import pandas as pd

from ..datafits.links import ratio_measure
from ..stats._results import ModelResults
from ..stats._journal import INTERCEPT_NAMES
from .._format import decimals_for, interval_text
from ._style import COLORS, journal_style, new_figure


def _link_and_family(results):
    """``(link, family name)`` of a fitted model, ``("cox", None)`` for a Cox model,
    ``(None, None)`` when it says nothing."""
    if hasattr(results, "hazard_ratios_"):  # FedCoxPH, skfed.formula.coxph, lifelines
        return "cox", None
    link = getattr(results, "link", None)  # skfed.formula.glm results
    family = getattr(results, "family", None)
    if link is None and hasattr(results, "family_"):  # a fitted skfed GLM
        link, family = results.family_.link, results.family_.name
    if link is None and hasattr(getattr(results, "model", None), "family"):  # statsmodels
        fam = results.model.family
        link, family = type(fam.link).__name__.lower(), type(fam).__name__.lower()
    return link, family if isinstance(family, str) else None


def _estimates(results, alpha, labels=None):
    """``(names, estimates, lower, upper)`` on the model's scale (log for ratios)."""
    if isinstance(results, ModelResults):  # skfed's: readable rows, no spline basis
        return results._forest_rows(alpha, labels)
    if isinstance(results, pd.DataFrame):
        missing = {"estimate", "lower", "upper"} - set(results.columns)
        if missing:
            raise ValueError(f"a table for plot_forest needs the columns estimate, lower and "
                             f"upper; it lacks {sorted(missing)}.")
        return (list(map(str, results.index)), *(results[c].to_numpy(dtype=float)
                                                 for c in ("estimate", "lower", "upper")))
    if isinstance(getattr(results, "params", None), pd.Series):  # statsmodels' interface
        bounds = np.asarray(results.conf_int(alpha), dtype=float)
        return (list(map(str, results.params.index)), results.params.to_numpy(dtype=float),
                bounds[:, 0], bounds[:, 1])
    if hasattr(results, "params_") and hasattr(results, "conf_int"):  # a fitted estimator
        bounds = np.asarray(results.conf_int(alpha), dtype=float)
        return (list(map(str, results.param_names_)), np.asarray(results.params_, dtype=float),
                bounds[:, 0], bounds[:, 1])
    raise TypeError(f"plot_forest takes a fitted skfed GLM, logistic or Cox model, a formula "
                    f"(or statsmodels) result, or a DataFrame of estimate, lower, upper; got "
                    f"{type(results).__name__}.")


def forest_table(results, *, alpha=0.05, exponentiate=None, drop_intercept=True,
                 labels=None):
    """The rows a forest plot draws: each parameter's estimate and interval.

    Parameters
    ----------
    results : fitted estimator, formula result or DataFrame
        A fitted skfed GLM (``FedPoissonRegressor``...), ``FedLogisticRegression``
        or ``FedCoxPH`` with inference; a result of :mod:`skfed.formula` (or
        of statsmodels: ``params``, ``conf_int()``); or a DataFrame with the
        columns ``estimate``, ``lower`` and ``upper`` on the model's scale
        (its ``attrs`` may name the ``link``, ``"log"``, ``"logit"`` or
        ``"cox"``, and the ``family``).
    alpha : float, default=0.05
        The intervals' level is ``1 - alpha`` (not used for a DataFrame).
    exponentiate : bool, default=None
        Show ``exp`` of the estimates (odds, rate, hazard ratios). ``None``:
        for log and logit links and Cox models (for a DataFrame: as its
        ``attrs["link"]`` says; none: no).
    drop_intercept : bool, default=True
        Leave out the intercept (its exponential is no ratio).
    labels : dict, default=None
        Readable names of a skfed result's variables (``{"horTh": "Hormone
        therapy"}``): its rows then read ``Hormone therapy: yes vs no``.

    Returns
    -------
    table : pandas.DataFrame
        Index: the parameters; columns ``estimate``, ``lower``, ``upper`` on
        the scale shown. ``table.attrs``: ``ratio`` (exponentiated) and
        ``measure`` (``"odds ratio"``, ``"rate ratio"``, ``"ratio of means"``,
        ``"hazard ratio"``, ``"ratio"`` or ``"coefficient"``).
    """
    names, estimate, lower, upper = _estimates(results, alpha, labels)
    if isinstance(results, ModelResults):
        measure = results._measure()
    else:
        link, family = ((results.attrs.get("link"), results.attrs.get("family"))
                        if isinstance(results, pd.DataFrame) else _link_and_family(results))
        measure = ratio_measure(link, family)
    ratio = measure is not None if exponentiate is None else bool(exponentiate)
    table = pd.DataFrame({"estimate": estimate, "lower": lower, "upper": upper},
                         index=pd.Index(names, name="parameter"))
    if drop_intercept:
        table = table.loc[[n not in INTERCEPT_NAMES for n in table.index]]
    if ratio:
        table = np.exp(table)
    table.attrs = {"ratio": ratio,
                   "measure": (measure or "ratio") if ratio else "coefficient"}
    return table


def _rows(pooled, sites):
    """``(label, estimate, lower, upper, kind)`` top to bottom: each parameter, then its
    estimate at each site (kind ``"site"``)."""
    rows = []
    for name, row in pooled.iterrows():
        rows.append((str(name), *row[["estimate", "lower", "upper"]], "pooled"))
        for site, table in sites.items():
            values = (table.loc[name, ["estimate", "lower", "upper"]] if name in table.index
                      else [np.nan] * 3)
            rows.append((str(site), *values, "site"))
    return rows


def _limits(rows, ratio):
    values = np.array([v for r in rows for v in r[1:4]], dtype=float)
    values = values[np.isfinite(values) & ((values > 0) if ratio else True)]
    if values.size == 0:
        return (0.5, 2.0) if ratio else (-1.0, 1.0)
    lo, hi = values.min(), values.max()
    if ratio:  # the reference line at 1 always shows
        lo, hi = min(lo, 1.0), max(hi, 1.0)
        pad = (hi / lo) ** 0.06
        return lo / pad, hi * pad
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    pad = 0.06 * (hi - lo or 1.0)
    return lo - pad, hi + pad


#: the mantissas of a log axis' ticks, coarse to fine
_TICK_MANTISSAS = [(1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
                   (1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0),
                   tuple(np.round(np.arange(1.0, 10.0, 0.1), 1))]


def ratio_ticks(lo, hi, most=7):
    """Ticks of a log axis from ``lo`` to ``hi`` at plain numbers (0.5, 1, 2; or 0.9, 1,
    1.1 on a narrow axis): the finest of :data:`_TICK_MANTISSAS` with at most ``most``
    ticks (and at least two when the finest allows it).

    Parameters
    ----------
    lo, hi : float
        Positive.
    most : int, default=7

    Returns
    -------
    ticks : list of float
    """
    decades = range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
    chosen = []
    for mantissas in _TICK_MANTISSAS:
        ticks = [float(f"{m * 10.0 ** d:.6g}") for d in decades for m in mantissas]
        ticks = [t for t in ticks if lo <= t <= hi]
        if len(ticks) > most and len(chosen) >= 2:
            break
        chosen = ticks
        if len(ticks) >= 3:
            break
    return chosen


def _ratio_axis(axis, lo, hi):
    """Plain numbers on a log axis (an ``ax.xaxis`` or ``ax.yaxis``): 0.5, 1, 2, not
    powers of ten."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    axis.set_major_locator(FixedLocator(ratio_ticks(lo, hi)))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def _draw(ax, rows, ratio, decimals):
    """The points, intervals, labels and the interval column of the forest."""
    y = np.arange(len(rows))[::-1]
    for k, (label, est, lo, hi, kind) in zip(y, rows):
        pooled = kind == "pooled"
        color = "black" if pooled else COLORS[0]
        if np.all(np.isfinite([est, lo, hi])) and (not ratio or min(est, lo, hi) > 0):
            ax.plot([lo, hi], [k, k], color=color, lw=1.4 if pooled else 1.0)
            ax.plot([est], [k], marker="s" if pooled else "o", ms=6 if pooled else 4,
                    color=color, ls="none")
            text = interval_text(est, lo, hi, decimals)
        else:
            text = "n/a"
        ax.annotate(text, xy=(1.0, k), xycoords=("axes fraction", "data"),
                    xytext=(8, 0), textcoords="offset points", va="center", fontsize=8,
                    fontweight="bold" if pooled and len({r[4] for r in rows}) > 1 else None)
    ax.set_yticks(y, [r[0].strip() for r in rows])
    for label, row in zip(ax.get_yticklabels(), rows):
        if row[4] == "site":  # a site under its parameter: smaller, in the sites' colour
            label.set(color=COLORS[0], fontsize=7, fontstyle="italic")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.tick_params(axis="y", length=0)
    ax.spines["left"].set_visible(False)


def plot_forest(results, *, alpha=0.05, exponentiate=None, sites=None, drop_intercept=True,
                decimals=None, title=None, ax=None, labels=None):
    """A forest plot: each parameter's estimate and interval, on a log axis for ratios.

    Odds ratios (logit link), rate ratios (log link, Poisson), ratios of
    means (other log links) and hazard ratios (Cox) are exponentiated and
    drawn on a log axis with the reference line at 1; other links show the
    coefficients on a linear axis with the line at 0. The estimate and its
    interval are written beside each row with the same fixed decimals.

    Parameters
    ----------
    results : fitted estimator, formula result or DataFrame
        See :func:`forest_table`.
    alpha : float, default=0.05
        The intervals' level is ``1 - alpha``.
    exponentiate : bool, default=None
        ``None``: for log and logit links and Cox models.
    sites : dict, default=None
        ``{site: results}``: each site's own fit (the same kinds as
        ``results``), drawn under the pooled estimate of each parameter.
    drop_intercept : bool, default=True
    decimals : int, default=None
        The decimals of the written estimates: by default two significant
        digits of the narrowest interval's width, from 2 to 4.
    title : str, default=None
    ax : matplotlib.axes.Axes, default=None
        Drawn on a new figure when ``None`` (needs ``skfed[plot]``).
    labels : dict, default=None
        Readable names of the variables (see :func:`forest_table`).

    Returns
    -------
    fig : matplotlib.figure.Figure
        :func:`skfed.plotting.save_figure` writes it (``fig.savefig`` too).
    """
    pooled = forest_table(results, alpha=alpha, exponentiate=exponentiate,
                          drop_intercept=drop_intercept, labels=labels)
    ratio = pooled.attrs["ratio"]
    site_tables = {str(s): forest_table(r, alpha=alpha, exponentiate=ratio,
                                        drop_intercept=drop_intercept, labels=labels)
                   for s, r in (sites or {}).items()}
    rows = _rows(pooled, site_tables)
    if not rows:
        raise ValueError("plot_forest: no parameter to draw (only an intercept?).")
    if decimals is None:
        widths = [hi - lo for _, _, lo, hi, _ in rows if np.isfinite(hi - lo) and hi > lo]
        decimals = decimals_for(min(widths), lowest=2, highest=4) if widths else 2
    with journal_style():
        if ax is None:
            fig, (ax,) = new_figure(6.5, 0.9 + 0.24 * len(rows))
        fig = ax.figure
        limits = _limits(rows, ratio)
        if ratio:
            ax.set_xscale("log")
            _ratio_axis(ax.xaxis, *limits)
        ax.axvline(1.0 if ratio else 0.0, color="0.5", lw=0.8, ls="--", zorder=0)
        _draw(ax, rows, ratio, decimals)
        ax.set_xlim(*limits)
        level = f"{100 * (1 - alpha):g}% CI"
        ax.set_xlabel(f"{pooled.attrs['measure']} ({level})")
        ax.annotate(f"{pooled.attrs['measure']} ({level})", xy=(1.0, 1.0),
                    xycoords="axes fraction", xytext=(8, 2), textcoords="offset points",
                    va="bottom", fontsize=8, fontweight="bold")
        if title:
            ax.set_title(title, loc="left")
    return fig
