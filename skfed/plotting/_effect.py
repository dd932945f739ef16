"""The effect plot of a numeric or spline term: its curve against a reference value, with
its Wald band, on a log axis for ratios (what a spline term shows instead of basis odds)."""

from ._forest import _ratio_axis
from ._style import COLORS, journal_style, new_figure


def plot_effect(results, term, *, values=None, reference=None, alpha=0.05, xlabel=None,
                title=None, ax=None):
    """Draw a term's effect over its variable (a formula result's ``term_effect``).

    Parameters
    ----------
    results : FormulaResults
        A fitted :func:`skfed.formula.glm` or :func:`skfed.formula.coxph`.
    term : str
        The term (``"bs(age, df=4)"``) or its variable (``"age"``).
    values : array-like, default=None
        Where to evaluate (default: between a spline's boundary knots).
    reference : float, default=None
        The value whose effect is 0 (ratio 1); see ``term_effect``.
    alpha : float, default=0.05
        The band's level is ``1 - alpha``.
    xlabel, title : str, default=None
        ``xlabel`` defaults to the variable's name.
    ax : matplotlib.axes.Axes, default=None

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    table = results.term_effect(term, values, reference=reference, alpha=alpha)
    measure, ref = table.attrs["measure"], table.attrs["reference"]
    ratio = measure != "difference"
    x = table.index.to_numpy(dtype=float)
    with journal_style():
        if ax is None:
            fig, (ax,) = new_figure(4.5, 3.2)
        fig = ax.figure
        ax.fill_between(x, table["lower"], table["upper"], color=COLORS[0], alpha=0.2, lw=0,
                        label=f"{100 * (1 - alpha):g}% CI")
        ax.plot(x, table["estimate"], color=COLORS[0])
        ax.axhline(1.0 if ratio else 0.0, color="0.5", lw=0.8, ls="--", zorder=0)
        ax.plot([ref], [1.0 if ratio else 0.0], marker="o", ms=4, color="black", ls="none",
                label=f"reference ({ref:.3g})")
        if ratio:
            ax.set_yscale("log")
            lo, hi = float(table["lower"].min()), float(table["upper"].max())
            _ratio_axis(ax.yaxis, min(lo, 1.0), max(hi, 1.0))
        ax.set(xlabel=xlabel or table.attrs["variable"],
               ylabel=(measure if ratio else "effect") + f" vs {ref:.3g}")
        ax.legend(loc="best")
        if title:
            ax.set_title(title, loc="left")
    return fig
