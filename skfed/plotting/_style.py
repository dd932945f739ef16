"""One journal style for every figure of :mod:`skfed.plotting`, and saving as vector files.

matplotlib is imported inside the functions only: it is the ``plot`` extra,
and ``import skfed`` works without it.
"""

import contextlib

#: proportional sans-serif fonts, the first one installed wins
FONTS = ["DejaVu Sans", "Arial", "Helvetica", "Liberation Sans", "sans-serif"]

#: matplotlib settings of the style: small proportional type, thin lines, no top and right
#: spines, text kept as text (SVG) and as embedded TrueType (PDF: no Type 3 fonts, which
#: journals' submission checks refuse)
RC = {
    "font.family": "sans-serif",
    "font.sans-serif": FONTS,
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.linewidth": 0.8,
    "lines.linewidth": 1.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",
    "svg.hashsalt": "skfed",  # the same figure gives the same file
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.05,
}

#: colours that stay apart in grey print and for colour-blind readers (Okabe-Ito)
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]


def _matplotlib():
    try:
        import matplotlib
    except ImportError:  # an optional extra
        raise ImportError("skfed.plotting draws with matplotlib: pip install 'skfed[plot]'.") \
            from None
    return matplotlib


@contextlib.contextmanager
def journal_style():
    """A context in which figures are drawn and saved in the journal style.

    Yields
    ------
    None
    """
    matplotlib = _matplotlib()
    with matplotlib.rc_context({**RC, "axes.prop_cycle": matplotlib.cycler(color=COLORS)}):
        yield


def new_figure(width, height, **gridspec):
    """A matplotlib Figure not attached to pyplot (no global state, no GUI backend).

    Parameters
    ----------
    width, height : float
        Inches.
    **gridspec
        Passed to :meth:`~matplotlib.figure.Figure.add_gridspec` (``nrows``,
        ``height_ratios``...); without it one axes fills the figure.

    Returns
    -------
    fig : matplotlib.figure.Figure
    axes : list of matplotlib.axes.Axes
    """
    _matplotlib()
    from matplotlib.figure import Figure

    # constrained layout keeps every label inside the figure, also for a plain
    # fig.savefig (matplotlib's default bbox, "standard", clips what sticks out)
    fig = Figure(figsize=(width, height), layout="constrained")
    if not gridspec:
        return fig, [fig.add_subplot()]
    # the layout spaces the axes by their labels itself: a gridspec's hspace or wspace (a
    # fraction of the axes' mean size) would only add a gap
    gridspec = {k: v for k, v in gridspec.items() if k not in ("hspace", "wspace")}
    grid = fig.add_gridspec(**gridspec)
    return fig, [fig.add_subplot(grid[k]) for k in range(grid.nrows * grid.ncols)]


def save_figure(fig, *paths):
    """Write ``fig`` to each path (the format from its suffix: ``.svg``, ``.pdf``, ``.png``)
    in the journal style: SVG text kept as text, PDF fonts embedded as TrueType.

    ``fig.savefig(path)`` works too, with matplotlib's settings of the moment
    (by default SVG text as paths and PDF fonts as Type 3).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    *paths : str or path-like

    Returns
    -------
    paths : list of str
    """
    with journal_style():
        for path in paths:
            fig.savefig(path)
    return [str(p) for p in paths]


def svg_text(fig):
    """``fig`` as an SVG element to put inside an HTML page, in the journal style.

    The XML declaration, the DOCTYPE, the RDF metadata and the namespace
    declarations are left out: an HTML page's parser puts an ``<svg>``
    element and its ``xlink:href`` attributes in their namespaces itself, and
    the page then names no address at all.

    Parameters
    ----------
    fig : matplotlib.figure.Figure

    Returns
    -------
    svg : str
    """
    import io
    import re

    buffer = io.StringIO()
    with journal_style():
        fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.DOTALL)
    return re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text)
