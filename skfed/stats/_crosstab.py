"""The federated cross-table (:func:`crosstab`) with Pearson's chi-square test.

A cross-table of ``row`` by ``col`` is the Table 1 of ``col`` by ``row``: the
same cells (:mod:`skfed.stats._table_cells`: each level of ``col`` and its
missing count per level of ``row``, the row margins as the groups' rows), pooled
from the sites' released parts or from masked sums, and audited together
(:mod:`skfed.stats._cells`), as :func:`~skfed.stats.describe` does.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ..federation.session import FederationSession
from .._messages import show
from ._cells import ALL, POOLED, CountCells
from ._describe import _check_privacy, suppression_note
from ._levels import MISSING, sorted_levels
from ._site import site_crosstab
from ._site_cells import site_levels, site_table_counts
from ._survival import _check_columns, _dataset
from ._table1 import count_rows
from ._table_cells import N_ROW


@dataclass
class CrosstabResult:
    """A federated cross-table with Pearson's chi-square test.

    Attributes
    ----------
    table : pandas.DataFrame
        Pooled counts (rows: levels of ``row``; columns: levels of ``col``),
        hidden cells NaN; rows with a missing value are left out (as
        ``pandas.crosstab``).
    by_site : pandas.DataFrame
        Pooled, and per site with ``per_site=True`` (index ``(site, row
        level)``), the missing values as a level ``"<missing>"`` (where there
        are any), with the margins ``"All"`` (which count them); hidden cells
        NaN.
    mask : pandas.DataFrame of bool
        Hidden cells of ``by_site``.
    chi2, p_value : float
        Pearson's chi-square test of independence on the pooled ``table``
        (``scipy.stats.chi2_contingency(..., correction=False)``); NaN when a
        cell of ``table`` is suppressed (the test needs them all).
    dof : int
    expected : pandas.DataFrame
        Expected pooled counts under independence (NaN without the test).
    n_missing : float
        Rows left out for a missing value (NaN if it would need a
        suppressed cell).
    suppressed : pandas.DataFrame
        One row per hidden cell: ``site``, ``row``, ``col``, ``reason``.
    note : str
    masked : bool
        Whether the pooled cells are masked sums (secure aggregation).
    """

    table: pd.DataFrame
    by_site: pd.DataFrame = field(repr=False)
    mask: pd.DataFrame = field(repr=False)
    chi2: float = np.nan
    p_value: float = np.nan
    dof: int = 0
    expected: pd.DataFrame = field(default=None, repr=False)
    n_missing: float = 0
    suppressed: pd.DataFrame = field(default=None, repr=False)
    note: str = ""
    masked: bool = False


def crosstab(data, row, col, *, min_level_count=5, per_site=False, privacy="auto",
             clients=None):
    """Pooled counts of two categorical columns over all sites, with the chi-square test.

    By default (``privacy="auto"``) the pooled cells are masked sums over two
    sites or more (below). With ``privacy=None``, each site sends its count of
    every pair of levels
    that occurs (missing values as a level) and its margins, after hiding its
    cells ``0 < c < min_level_count`` and the cells that would give them back;
    a pooled cell is the sum of the released parts, or hidden when a site hid
    its part. With ``privacy=SecureAggregation()`` the sites name their
    levels, the counts are summed masked over the sites (only the pooled
    cells decoded) and the pooled counts ``0 < c < min_level_count`` are
    hidden. Either way every released cell (pooled, per site, margins) is
    audited so that no hidden one follows from the shown ones (see
    :func:`describe`).

    Parameters
    ----------
    data : FederatedDataset or DataFrame
    row, col : str
        The two columns (any values; missing values are left out of
        ``table`` and the test).
    min_level_count : int, default=5
    per_site : bool, default=False
        Also release each site's cross-table (in the clear, suppressed at the
        site), audited with the pooled one.
    privacy : "auto", SecureAggregation or None, default="auto"
        The pooled cells as masked sums over the sites (at least two);
        ``None``: sums of the sites' released parts; ``"auto"``: masked sums
        where there are two sites and ``cryptography`` is installed (as
        :func:`describe`).
    clients : str or array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame (a column name or one
        label per row).

    Returns
    -------
    result : CrosstabResult

    Raises
    ------
    ValueError
        A missing column, fewer than two levels in a column, no rows, a
        privacy other than secure aggregation.
    """
    data = _dataset(data, clients)
    if not isinstance(min_level_count, (int, np.integer)) or min_level_count < 1:
        raise ValueError(f"min_level_count must be a positive int; got {show(min_level_count)}.")
    _check_columns(data, row=row, col=col)
    if row == col:
        raise ValueError("row and col must be two different columns.")
    privacy = _check_privacy(privacy, data)
    k = int(min_level_count)
    sites = list(data.sites)
    if privacy is None:
        cells, rows, cols = _from_parts(data, row, col, k, sites, bool(per_site))
    else:
        cells, rows, cols = _from_masked(data, privacy, row, col, k, sites, bool(per_site))
    cells.audit()
    by_site, mask, records = _by_site(cells, rows, cols, row, col)
    table = _pooled_crosstab(by_site, [a for a in rows if a != MISSING],
                             [b for b in cols if b != MISSING], row, col)
    n_missing = float(by_site.loc[(POOLED, "All"), "All"] - table.to_numpy().sum())
    chi2, p, dof, expected = _chi_square(table)
    suppressed = pd.DataFrame(records, columns=["site", "row", "col", "reason"])
    note = suppression_note(len(suppressed), k, privacy is not None, statistics=False)
    if np.isnan(chi2):
        note += (" The chi-square test needs every pooled cell of the table: not computed "
                 "(merge the rare levels first).")
    return CrosstabResult(
        table=table, by_site=by_site, mask=mask, chi2=float(chi2), p_value=float(p),
        dof=int(dof), expected=expected, n_missing=n_missing, suppressed=suppressed,
        note=note, masked=privacy is not None)


def _levels(rows, cols, row, col):
    """The levels of ``row`` and ``col`` (missing values left out); an error unless each
    has two or more."""
    rows, cols = [a for a in rows if a != MISSING], [b for b in cols if b != MISSING]
    if len(rows) < 2 or len(cols) < 2:
        raise ValueError(f"crosstab needs at least two levels in each column; {show(row)} has "
                         f"{len(rows)}, {show(col)} has {len(cols)}.")


def _cell(col, a, b):
    """The Table 1 cell of pair ``(a, b)`` (``None``: a margin)."""
    group = ALL if a is None else a
    if b is None:
        return N_ROW, group
    return ((col, "", "missing") if b == MISSING else (col, b, "count")), group


def _put_sites(cells, replies, col, pooled):
    """Each site's released counts (and with ``pooled`` their sums as the pooled cells)."""
    why = [{(x["row"], x["col"]): x["reason"] for x in r["suppressed"]} for r in replies]
    keys = list(dict.fromkeys(key for r in replies for key in r["counts"]))
    for a, b in keys:
        parts = [r["counts"].get((a, b), 0) for r in replies]
        cell, group = _cell(col, a, b)
        if pooled:
            cells.put_parts(cell, group, parts, lambda j, a=a, b=b: why[j][a, b])
            continue
        for j, (s, n) in enumerate(zip(cells.sites, parts)):
            cells.put(cell, group, s, n, None if n is not None else why[j][a, b])


def _site_replies(data, row, col, k):
    return FederationSession.for_dataset(data).per_site(site_crosstab, row, col, k,
                                                        phase="analysis")


def _from_parts(data, row, col, k, sites, per_site):
    """The cells from each site's released cross-table."""
    replies = _site_replies(data, row, col, k)
    pairs = [key for r in replies for key in r["counts"]]
    rows = sorted_levels([a for a, _ in pairs if a is not None])
    cols = sorted_levels([b for _, b in pairs if b is not None])
    _levels(rows, cols, row, col)
    rows += [MISSING] if any(a == MISSING for a, _ in pairs) else []
    cols += [MISSING] if any(b == MISSING for _, b in pairs) else []
    cells = CountCells(sites, rows, per_site)
    cells.add_rows(col, [r for r, _ in count_rows(col, False, [b for b in cols
                                                               if b != MISSING])])
    for a in rows + [None]:  # every cell of the grid: a pair no site has is 0
        for b in [b for b in cols if b != MISSING] + [MISSING, None]:
            cell, group = _cell(col, a, b)
            cells.put_parts(cell, group, [0] * len(sites), None)
    _put_sites(cells, replies, col, pooled=True)
    return cells, rows, cols


def _from_masked(data, privacy, row, col, k, sites, per_site):
    """The cells from masked sums of each site's counts in the public layout."""
    from ..privacy.masked_sums import masked_session

    session = FederationSession.for_dataset(data)
    names = [session.per_site(site_levels, [], name, phase="analysis") for name in (row, col)]
    rows, cols = ([sorted_levels([v for r in replies for v in r["strata"]])
                   for replies in names])
    _levels(rows, cols, row, col)
    layout = {"strata": rows, "levels": {col: cols}}
    with masked_session(data, privacy) as masked:
        counts = masked.sum(site_table_counts, [col], row, layout, phase="analysis")
    sizes, grid = counts["sizes"].astype(int), counts["c0"].astype(int)
    strata = rows + ([MISSING] if sizes[-2] > 0 else [])
    levels = cols + ([MISSING] if grid[-1, -1] > 0 else [])
    cells = CountCells(sites, strata, per_site)
    cells.add_rows(col, [r for r, _ in count_rows(col, False, cols)])
    for i, a in enumerate(rows + [MISSING, None]):
        if a == MISSING and MISSING not in strata:
            continue
        for j, b in enumerate(cols + [MISSING, None]):
            n = sizes[i] if b is None else grid[i, j]
            cell, group = _cell(col, a, b)
            cells.put_pooled(cell, group, int(n), k)
    if per_site:
        replies = _site_replies(data, row, col, k)
        for s in cells.sites:
            for a in strata + [None]:
                for b in cols + [MISSING, None]:
                    cell, group = _cell(col, a, b)
                    cells.put(cell, group, s, 0)
        _put_sites(cells, replies, col, pooled=False)
    return cells, strata, levels


def _by_site(cells, rows, cols, row, col):
    """:attr:`CrosstabResult.by_site` (the missing values as a level, the margins
    ``"All"``, hidden cells NaN), its mask and one ``(site, row, col, reason)`` per
    hidden cell."""
    labels = cells.sites + [POOLED]
    keys_r, keys_c = rows + [None], cols + [None]
    values = np.full((len(labels), len(keys_r), len(keys_c)), np.nan)
    mask = np.zeros(values.shape, dtype=bool)
    records = []
    for s_i, s in enumerate(labels):
        for i, a in enumerate(keys_r):
            for j, b in enumerate(keys_c):
                cell, group = _cell(col, a, b)
                key = (cell, (group, s))
                if key in cells.hidden:
                    mask[s_i, i, j] = True
                    records.append((s, "All" if a is None else a, "All" if b is None else b,
                                    cells.reasons[key]))
                else:
                    values[s_i, i, j] = cells.values.get(key, 0.0)
    index = pd.MultiIndex.from_product([labels, rows + ["All"]], names=["site", row])
    columns = pd.Index(cols + ["All"], name=col)
    return (pd.DataFrame(values.reshape(-1, len(keys_c)), index=index, columns=columns),
            pd.DataFrame(mask.reshape(-1, len(keys_c)), index=index, columns=columns),
            records)


def _pooled_crosstab(by_site, rows, cols, row, col):
    """:attr:`CrosstabResult.table`: the pooled counts of the levels ``rows`` x ``cols``."""
    pooled = by_site.loc[POOLED].loc[rows, cols]
    # as pandas.crosstab: levels seen only next to a missing value have no row or column
    pooled = pooled.loc[pooled.ne(0).any(axis=1), pooled.ne(0).any(axis=0)]
    return pooled.rename_axis(row).rename_axis(col, axis=1)


def _chi_square(table):
    """Pearson's chi-square test of independence on ``table``: ``(chi2, p, dof, expected)``,
    NaN (and ``expected`` NaN) when a cell is hidden."""
    chi2, p, dof = np.nan, np.nan, (table.shape[0] - 1) * (table.shape[1] - 1)
    expected = pd.DataFrame(np.nan, index=table.index, columns=table.columns)
    if not table.isna().to_numpy().any():
        chi2, p, dof, exp = stats.chi2_contingency(table.to_numpy(), correction=False)
        expected[:] = exp
    return chi2, p, dof, expected
