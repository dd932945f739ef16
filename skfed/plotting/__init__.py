"""Figures for the paper: forest plots, a spline term's effect, Kaplan-Meier curves, a Cox
model's adjusted survival curves, cumulative incidence curves, a weighting analysis's
love plot and overlap histograms, in one journal style.

Each function returns a matplotlib Figure (``fig.savefig("forest.pdf")``);
:func:`save_figure` writes it as SVG and PDF with text kept as text and fonts
embedded as TrueType. matplotlib is the ``plot`` extra (``pip install
'skfed[plot]'``) and is imported only when a figure is drawn. See
``docs/figures.md``.
"""

from .._format import decimals_for, format_p, mean_decimals
from ._balance import plot_love, plot_overlap
from ._effect import plot_effect
from ._forest import forest_table, plot_forest
from ._incidence import plot_cumulative_incidence
from ._style import journal_style, save_figure
from ._survival import number_at_risk, plot_kaplan_meier, plot_survival

__all__ = ["plot_forest", "forest_table", "plot_effect", "plot_kaplan_meier", "number_at_risk",
           "plot_survival", "save_figure", "journal_style", "format_p", "decimals_for",
           "mean_decimals", "plot_cumulative_incidence", "plot_love", "plot_overlap"]
