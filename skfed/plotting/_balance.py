"""A weighting analysis's balance figures: the love plot (standardised mean differences
before and after weighting) and the propensity-score overlap histograms per arm (pooled
counts on fixed bins; a hidden bin is drawn as a gap)."""

import numpy as np

from ._style import COLORS, journal_style, new_figure


def _fitted_balance(estimator, attribute):
    value = getattr(estimator, attribute, None)
    if value is None:
        raise ValueError(f"{type(estimator).__name__} has no {attribute}: fit a "
                         "skfed.causal estimator with balance=True first.")
    return value


def plot_love(estimator, *, threshold=0.1, absolute=True, labels=None, title=None, ax=None):
    """Draw the love plot of a fitted :mod:`skfed.causal` estimator.

    Parameters
    ----------
    estimator : FedIPW or FedAIPW
        Fitted with ``balance=True``.
    threshold : float or None, default=0.1
        A dashed line at this standardised mean difference (``None``: none).
    absolute : bool, default=True
        Plot the absolute differences.
    labels : dict, default=None
        ``{covariate: label}`` for the rows.
    title : str, default=None
    ax : matplotlib.axes.Axes, default=None

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    table = _fitted_balance(estimator, "balance_")
    before, after = table["SMD before"].to_numpy(), table["SMD after"].to_numpy()
    if absolute:
        before, after = np.abs(before), np.abs(after)
    names = [(labels or {}).get(c, c) for c in table.index]
    y = np.arange(len(names))[::-1]
    with journal_style():
        if ax is None:
            fig, (ax,) = new_figure(4.5, 0.8 + 0.22 * len(names))
        fig = ax.figure
        ax.plot(before, y, "o", mfc="white", color=COLORS[1], label="unweighted")
        ax.plot(after, y, "o", color=COLORS[0], label="weighted")
        ax.axvline(0.0, color="0.5", lw=0.8, zorder=0)
        if threshold is not None:
            for x in ([threshold] if absolute else [-threshold, threshold]):
                ax.axvline(x, color="0.5", lw=0.8, ls="--", zorder=0)
        ax.set_yticks(y, names)
        ax.set_xlabel(("absolute " if absolute else "") + "standardised mean difference")
        ax.legend(loc="best")
        if title:
            ax.set_title(title, loc="left")
    return fig


def plot_overlap(estimator, *, title=None, ax=None):
    """Draw the propensity-score histograms of the two arms (treated up, controls down).

    Parameters
    ----------
    estimator : FedIPW or FedAIPW
        Fitted with ``balance=True``; its ``overlap_`` pooled counts (a bin hidden by
        the counts rule is left out: a gap, marked below the axis).
    title : str, default=None
    ax : matplotlib.axes.Axes, default=None

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    overlap = _fitted_balance(estimator, "overlap_")
    edges = np.asarray(overlap["edges"])
    width, left = np.diff(edges), edges[:-1]
    treated, control = np.asarray(overlap["treated"]), np.asarray(overlap["control"])
    with journal_style():
        if ax is None:
            fig, (ax,) = new_figure(4.5, 3.2)
        fig = ax.figure
        ax.bar(left, np.nan_to_num(treated), width, align="edge", color=COLORS[0],
               label="treated")
        ax.bar(left, -np.nan_to_num(control), width, align="edge", color=COLORS[1],
               label="control")
        hidden = np.isnan(treated) | np.isnan(control)
        if hidden.any():
            ax.plot(left[hidden] + width[hidden] / 2, np.zeros(hidden.sum()), "x",
                    color="0.3", ms=4, label="hidden (small count)")
        ax.axhline(0.0, color="black", lw=0.8)
        ticks = ax.get_yticks()
        ax.set_yticks(ticks, [f"{abs(t):g}" for t in ticks])
        ax.set(xlim=(edges[0], edges[-1]), xlabel="propensity score", ylabel="rows")
        ax.legend(loc="best")
        if title:
            ax.set_title(title, loc="left")
    return fig
