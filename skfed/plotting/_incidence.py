"""Cumulative incidence curves of competing risks (Aalen-Johansen), one per cause."""

import textwrap

import numpy as np

from ._style import COLORS, journal_style, new_figure


def _fitted(curves):
    """A list of fitted Aalen-Johansen estimates (duck-typed: their
    ``cumulative_density_`` and ``confidence_interval_``)."""
    curves = list(curves) if isinstance(curves, (list, tuple)) else [curves]
    for curve in curves:
        if not hasattr(curve, "cumulative_density_"):
            raise TypeError("plot_cumulative_incidence takes fitted FedAalenJohansen "
                            f"estimates (or a list of them); got {type(curve).__name__}.")
    if not curves:
        raise ValueError("no curve to draw.")
    return curves


def plot_cumulative_incidence(curves, *, confidence=True, labels=None, xlabel="time",
                              ylabel="cumulative incidence", title=None, xmax=None):
    """Cumulative incidence curves, one per cause, with their intervals.

    An exact estimate is drawn as a step function; one on cut points
    (``approximate_``) as its points joined by straight lines, with a caption
    under the figure saying that it is approximate and on which grid.

    Parameters
    ----------
    curves : FedAalenJohansen or list of FedAalenJohansen
        Fitted estimates (:class:`skfed.stats.FedAalenJohansen`), e.g. one per
        cause of the same rows.
    confidence : bool, default=True
        Shade each estimate's pointwise interval (``confidence_interval_``).
    labels : list of str, default=None
        One per curve; default ``cause <code>``.
    xlabel, ylabel : str
    title : str, default=None
    xmax : float, default=None
        The last time shown (default: the last time of the curves).

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    curves = _fitted(curves)
    if labels is None:
        labels = [f"cause {c.event_of_interest_}" for c in curves]
    if len(labels) != len(curves):
        raise ValueError(f"{len(labels)} labels for {len(curves)} curves.")
    last = max(float(c.cumulative_density_.index.max()) for c in curves) if xmax is None \
        else float(xmax)
    with journal_style():
        fig, (ax,) = new_figure(6.0, 4.0)
        for k, (curve, label) in enumerate(zip(curves, labels)):
            color = COLORS[k % len(COLORS)]
            t = curve.cumulative_density_.index.to_numpy(dtype=float)
            F = curve.cumulative_density_.iloc[:, 0].to_numpy()
            linear = bool(curve.approximate_)
            if linear:
                ax.plot(t, F, color=color, marker="o", ms=3, label=label)
            else:
                ax.step(t, F, where="post", color=color, label=label)
            if confidence:
                lower, upper = (np.nan_to_num(curve.confidence_interval_.iloc[:, j]
                                              .to_numpy(), nan=0.0) for j in (0, 1))
                ax.fill_between(t, lower, upper, step=None if linear else "post",
                                color=color, alpha=0.15, lw=0)
        ax.set(xlim=(0, last), ylim=(0, 1.02), xlabel=xlabel, ylabel=ylabel)
        ax.legend(loc="upper left")
        if title:
            ax.set_title(title, loc="left")
        notes = sorted({c.note_ for c in curves if c.note_})
        if notes:
            fig.text(0.0, 0.0, textwrap.fill(" ".join(notes), 110), ha="left", va="top",
                     fontsize=7, color="#333333")
    return fig
