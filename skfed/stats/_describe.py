"""The federated Table 1 (:func:`describe`), with small-cell suppression.

Without secure aggregation each site sends its counts, moments (count, mean,
sum of squared deviations) and own quantiles in the clear, its small cells
hidden at the site; the pooled cells are the sums of the released parts
(:func:`skfed.stats._table1.from_parts`). With ``privacy=SecureAggregation()``
the pooled counts and sums are masked sums over the sites, decoded only as
totals, and small-cell suppression applies to the pooled cells
(:func:`skfed.stats._table1.from_masked`). Either way every cell released
together (pooled, per-site and by-group columns, margins) is audited so that no
hidden count follows from the shown ones (:mod:`skfed.stats._audit`), and the
exact pooled quantiles come from a federated bisection
(:mod:`skfed.stats._moments`). Every path (in process, Dask, site services)
gives the same table.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._messages import show
from . import _export
from ._cells import ALL, POOLED
from ._compare import compare_groups
from ._levels import MISSING
from ._survival import _check_columns, _dataset
from ._table1 import from_masked, from_parts


def suppression_note(n_hidden, min_count, masked, statistics=True):
    """The note under a table: how many count cells are suppressed, and the rule."""
    if not n_hidden:
        return f"No cell below min_level_count={min_count}."
    source = ("the pooled cells are masked sums over the sites (secure aggregation): "
              f"each pooled count from 1 to {min_count - 1} is hidden" if masked else
              f"each site hides its counts from 1 to {min_count - 1} (or below its own "
              "larger threshold) before they leave it, and a pooled cell is hidden when "
              "a site hid its part (privacy=SecureAggregation() pools the cells first, "
              "as masked sums, and hides only the small pooled ones)")
    return (f"{n_hidden} count cell(s) suppressed (min_level_count={min_count}): {source}; "
            "then every cell that would give back a hidden one through the totals shown "
            "(levels, groups, sites) is hidden too"
            + ("; the mean, SD and quantiles of a suppressed count are suppressed with it "
               "(a numeric column's missing count, N minus its count, is hidden only as a "
               "complement)." if statistics else "."))


@dataclass
class DescribeResult:
    """A federated Table 1.

    Attributes
    ----------
    table : pandas.DataFrame
        Rows ``(variable, level, statistic)``; columns ``(group, site)``
        (group ``"all"`` and the levels of ``by``; the sites and
        ``"pooled"``). Hidden cells are NaN.
    mask : pandas.DataFrame of bool
        Where ``table`` is hidden.
    suppressed : pandas.DataFrame
        One row per hidden count cell: ``variable``, ``level``,
        ``statistic``, ``group``, ``site``, ``reason``.
    note : str
        What was suppressed and the rule.
    comparison : pandas.DataFrame or None
        With ``by`` of two or more levels: per variable, the test comparing
        the groups (``test``, ``statistic``, ``df``, ``df_denom``,
        ``p_value``), the standardized mean difference ``smd`` and a
        ``note`` (why a value is NaN: a suppressed pooled cell and its
        reason); see :func:`describe`. ``None`` without ``by``.
    by : str or None
        The grouping column.
    labels : dict
        ``{column: label}``: the variables' names as a report shows them
        (their units), from ``describe(labels=...)``; a column without one
        shows its name.
    masked : bool
        Whether the pooled cells are masked sums (secure aggregation) rather
        than sums of the sites' released parts.
    """

    table: pd.DataFrame
    mask: pd.DataFrame = field(repr=False)
    suppressed: pd.DataFrame = field(repr=False)
    note: str = ""
    comparison: pd.DataFrame = field(default=None, repr=False)
    by: str = None
    labels: dict = field(default_factory=dict, repr=False)
    masked: bool = False

    @property
    def sites(self):
        """The sites whose columns the table shows (empty: the pooled column only)."""
        return [s for s in self.table.columns.get_level_values("site").unique()
                if s != POOLED]

    def label(self, variable):
        """The name a report shows for ``variable`` (its label, else itself)."""
        return str(self.labels.get(variable, variable))

    def to_frame(self, per_site=None):
        """Table 1 as a journal prints it, as a DataFrame of text.

        One column per group with its ``n`` in the header (and per site, with
        ``per_site``); per variable its label, then mean (SD) and median [Q1,
        Q3], or n (%) per level (a binary column on one row); ``missing`` only
        where a value is missing; suppressed cells ``<5`` or ``suppressed``
        with their footnote number; the p-value and SMD with ``by``.

        Parameters
        ----------
        per_site : bool, default=None
            Show the sites' columns (default: when the result holds them).

        Returns
        -------
        frame : pandas.DataFrame
            ``frame.attrs["footnotes"]``: the numbered reasons.
        """
        return _export.to_frame(self, per_site)

    def to_csv(self, path=None, per_site=None):
        """Table 1 as laid out by :meth:`to_frame`, in CSV (footnotes in the last rows).

        Parameters
        ----------
        path : str or path-like, default=None
            Where to write it; ``None``: return the text.
        per_site : bool, default=None

        Returns
        -------
        text : str or None
        """
        return _export.to_csv(self, path, per_site)

    def to_latex(self, path=None, per_site=None, caption="Table 1"):
        """Table 1 as laid out by :meth:`to_frame`, as a LaTeX table (booktabs).

        Parameters
        ----------
        path : str or path-like, default=None
            Where to write it; ``None``: return the text.
        per_site : bool, default=None
        caption : str, default="Table 1"

        Returns
        -------
        text : str or None
        """
        return _export.to_latex(self, path, per_site, caption)

    def to_docx(self, path, per_site=None, title="Table 1"):
        """Table 1 as laid out by :meth:`to_frame`, as a Word document.

        Parameters
        ----------
        path : str or path-like
        per_site : bool, default=None
        title : str, default="Table 1"

        Raises
        ------
        ImportError
            Without python-docx (``pip install 'skfed[word]'``).
        """
        _export.to_docx(self, path, per_site, title)

    def to_html(self, **kwargs):
        """The table as HTML, hidden cells shown as ``suppressed``, the comparison of the
        groups (with ``by``) and the note below.

        Parameters
        ----------
        **kwargs
            Passed to :meth:`pandas.DataFrame.to_html`.

        Returns
        -------
        html : str
        """
        shown = self.table.astype(object).where(~self.mask, "suppressed")
        comparison = "" if self.comparison is None else self.comparison.to_html(na_rep="")
        return shown.to_html(na_rep="", **kwargs) + comparison + f"<p>{self.note}</p>"


def _check_common(data, columns, by, min_level_count):
    if not isinstance(min_level_count, (int, np.integer)) or min_level_count < 1:
        raise ValueError(f"min_level_count must be a positive int; got {show(min_level_count)}.")
    _check_columns(data, by=by)
    if columns is None:
        columns = [c for c in data.columns if c != by]
    columns = list(columns)
    for c in columns:
        if c not in data.columns:
            raise ValueError(f"column {show(c)} is not in the dataset's columns {data.columns}.")
        if c == by:
            raise ValueError(f"column {show(c)} is also by=; it cannot be described by itself.")
    if not columns:
        raise ValueError("no columns to describe.")
    return columns




def _check_labels(labels, columns, by):
    """``labels``: a mapping of described columns (or ``by``) to non-empty text."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise ValueError(f"labels must be a dict {{column: label}}; got {show(labels)}.")
    for name, text in labels.items():
        if name not in columns and name != by:
            raise ValueError(f"labels names {show(name)}, which is not a described column "
                             "nor by.")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"the label of {show(name)} must be non-empty text; got "
                             f"{show(text)}.")
    return dict(labels)


def _check_privacy(privacy, data):
    """``None`` (released parts) or a secure aggregation (masked sums); ``"auto"``: masked
    sums over two sites or more where ``cryptography`` (the ``privacy`` or ``site``
    extra) is installed, so that the suppression rule applies to the pooled cells."""
    if isinstance(privacy, str) and privacy == "auto":
        if len(data) < 2:  # one site: the pooled cells are its own release
            return None
        from importlib.util import find_spec

        if find_spec("cryptography") is None:  # a bare install: the sites' released parts
            return None
        from ..privacy import SecureAggregation

        return SecureAggregation()
    if privacy is None:
        return None
    from ..privacy import DifferentialPrivacy, SecureAggregation

    # DifferentialPrivacy is a SecureAggregation (masked and noised rounds): refused here
    if not isinstance(privacy, SecureAggregation) or isinstance(privacy, DifferentialPrivacy):
        raise ValueError("describe and crosstab take privacy='auto', SecureAggregation() "
                         "(the pooled cells as masked sums) or None (the sites' released "
                         "parts); got "
                         f"{type(privacy).__name__}: differential privacy would noise "
                         "every count.")
    if len(data) < 2:
        raise ValueError("secure aggregation needs at least two sites: with one, the pooled "
                         "cells are that site's own.")
    return privacy


def describe(data, by=None, *, columns=None, min_level_count=5, quantiles=(0.25, 0.5, 0.75),
             per_site=False, privacy="auto", labels=None, categorical=None, clients=None):
    """The descriptive "Table 1" pooled over all sites (per site when asked), small cells
    hidden.

    Numeric columns: ``count`` (non-missing), ``missing``, ``mean``,
    ``std`` (ddof=1, as pandas) and the ``quantiles`` (named as pandas'
    ``describe``: ``"25%"``, ``"50%"``, ...). Categorical columns (text,
    bool, category): the ``count`` of every level and ``missing``. A
    ``missing`` row is left out where no row of the column is missing. Every
    table also has the row ``("N", "", "count")``: the rows per group.

    **Where the pooled cells come from.** By default (``privacy="auto"``) the
    pooled cells are masked sums over two sites or more (below), so that the
    suppression rule applies to the pooled cells; with one site, or without
    the ``cryptography`` package, and with ``privacy=None``, each site
    sends its counts, means and sums of squared deviations in the clear,
    having hidden its own counts ``0 < c < min_level_count`` and the cells
    that would give them back (a site service applies its own
    ``min_level_count`` when larger); a pooled cell is the sum of the
    released parts, or hidden when a site hid its part. With
    ``privacy=SecureAggregation()``, the sites first name the levels they
    hold (no count), and the counts, sums and squared deviations about the
    pooled means are then summed **masked** over the sites in that public
    layout: the server decodes only the pooled cells, and the pooled counts
    ``0 < c < min_level_count`` are hidden. A few missing values spread over
    the sites then no longer hide a variable. Pooled means and SDs equal
    pandas' on the pooled rows either way (Chan's merge of the sites' moments,
    or the exact masked sums).

    **Secondary suppression across the released cells.** The pooled column,
    the per-site columns (``per_site=True``), every group of ``by`` and all
    rows are audited together: every hidden count must keep at least two
    possible values under every additive relation among the shown cells
    (levels and missing add up to a group's rows, the groups to all rows, the
    sites to the pooled cell), an interval (linear programming) audit, and
    more cells are hidden until none is pinned (:mod:`skfed.stats._audit`).
    The mean, SD and quantiles of a hidden count are hidden with it. Zero
    counts are shown. A numeric column's missing count is not hidden for
    being small (it is ``N - count``), only as a complement.

    **Quantiles** are exact and equal pandas' default (linear interpolation
    between the order statistics around ``(n - 1) q``): a federated
    bisection in which each site answers with its count of values below a
    threshold and its values next to it (single rows' values: a site service
    serves it only with ``allow_exact_quantiles``).

    **Comparison of the groups** (``by`` with two or more levels, rows
    with a missing ``by`` left out): ``comparison`` holds, per variable, a
    p-value and the standardized mean difference, computed from the pooled
    cells, as tableone's defaults: Welch's t-test for a numeric variable and
    two groups, the one-way ANOVA for more, Pearson's chi-square test
    (no continuity correction) for a categorical one; the SMD is R
    tableone's. Each equals scipy's on the pooled rows; a suppressed cell it
    needs makes them NaN, with the reason in ``note``
    (:mod:`skfed.stats._compare`).

    Parameters
    ----------
    data : FederatedDataset or DataFrame
        The sites' rows (a DataFrame needs ``clients``).
    by : str, default=None
        A categorical column: every statistic is also given per level.
    columns : list of str, default=None
        The columns described (default: all but ``by``).
    min_level_count : int, default=5
        The smallest count shown.
    quantiles : sequence of float, default=(0.25, 0.5, 0.75)
    per_site : bool, default=False
        Also show each site's column (its own release in the clear, suppressed
        at the site), audited together with the pooled column.
    privacy : "auto", SecureAggregation or None, default="auto"
        The pooled cells as masked sums over the sites (at least two);
        ``None``: sums of the sites' released parts; ``"auto"``: masked sums
        where there are two sites and ``cryptography`` is installed.
    labels : dict, default=None
        ``{column: label}``: the names a report shows (with units, e.g.
        ``{"age": "Age (years)"}``).
    categorical : list of str, default=None
        Described columns counted by level whatever their type (numeric codes
        such as 0/1, which a site service reads as numbers): a binary one is
        then one n (%) row.
    clients : str or array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame: a column name (not
        described by default, as pandas' ``groupby`` key) or one label per row.

    Returns
    -------
    result : DescribeResult
        ``table`` (rows ``(variable, level, statistic)``, columns
        ``(group, site)``, hidden cells NaN), ``mask``, ``suppressed`` (one
        row per hidden count, with the reason), ``note``, ``comparison``
        (with ``by``), and its exports (``to_frame``, ``to_csv``,
        ``to_latex``, ``to_docx``, ``to_html``).

    Raises
    ------
    ValueError
        A missing column, a column numeric at some sites and not at others,
        no rows, a bad argument (a privacy other than secure aggregation, one
        site with secure aggregation, a label of an unknown column).
    """
    data = _dataset(data, clients)
    if columns is None and isinstance(clients, str):  # as pandas' groupby: not the key
        columns = [c for c in data.columns if c not in (by, clients)]
    columns = _check_common(data, columns, by, min_level_count)
    quantiles = [float(q) for q in np.atleast_1d(quantiles)]
    if any(not 0 <= q <= 1 for q in quantiles):
        raise ValueError(f"quantiles must be in [0, 1]; got {show(quantiles)}.")
    if POOLED in list(data.sites):
        raise ValueError(f"a site is named {POOLED!r}, the label of the pooled column.")
    labels = _check_labels(labels, columns, by)
    categorical = list(categorical or ())
    unknown = [c for c in categorical if c not in columns]
    if unknown:
        raise ValueError(f"categorical names {show(unknown[0])}, which is not a described "
                         "column.")
    privacy = _check_privacy(privacy, data)
    k = int(min_level_count)
    if privacy is None:
        table = from_parts(data, columns, by, quantiles, k, bool(per_site), categorical)
    else:
        table = from_masked(data, privacy, columns, by, quantiles, k, bool(per_site),
                            categorical)
    if ALL in table.strata:
        raise ValueError(f"by column {show(by)} has a level {ALL!r}, the label of all strata.")
    frame, mask, records = table.frames()
    suppressed = pd.DataFrame(records, columns=["variable", "level", "statistic", "group",
                                                "site", "reason"])
    result = DescribeResult(frame, mask, suppressed,
                            suppression_note(len(suppressed), k, privacy is not None),
                            by=by, labels=labels, masked=privacy is not None)
    compared = [g for g in table.strata if g != MISSING]
    if len(compared) >= 2:  # from the pooled cells: nothing more is asked of the sites
        result.comparison = compare_groups(result, table.kinds, compared)
    return result
