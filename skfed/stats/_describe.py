"""The federated Table 1 (:func:`describe`) and cross-table (:func:`crosstab`), with
small-cell suppression.

Sites send counts, per-site moments (count, mean, sum of squared deviations)
and, for the exact pooled quantiles, a few rounds of counts below thresholds
(the bisection of :func:`skfed.preprocessing._imputer.federated_median`,
generalized to any order statistic). The server pools them: means and
standard deviations with Chan's pairwise formula
(:func:`skfed.preprocessing._summaries.merge_moments`), quantiles as pandas'
default (linear interpolation between the two order statistics around
``(n - 1) q``). Each site hides its own small cells before it replies, and
the server pools only released numbers (:mod:`skfed.stats._suppress`), so
every path (in process, Dask, site services) gives the same table.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ..federation.session import FederationSession
from .._messages import show
from ..preprocessing._imputer import _midpoint
from ..preprocessing._summaries import merge_moments
from ._compare import compare_groups
from ._levels import MISSING, sorted_levels
from ._site import site_count_below, site_crosstab, site_describe
from ._suppress import SIZE, pool
from ._survival import _check_columns, _dataset

#: the column label of the pooled sites and of all strata
POOLED, ALL = "pooled", "all"

_MAX_ROUNDS = 200


def suppression_note(n_hidden, min_count, statistics=True):
    """The note under a table: how many count cells are suppressed, and the rule."""
    if not n_hidden:
        return f"No cell below min_level_count={min_count}."
    return (f"{n_hidden} count cell(s) suppressed: each site hides its counts from 1 to "
            f"{min_count - 1} (min_level_count={min_count}, or its own larger threshold) and "
            "the complementary cells that would give them back through a total; a pooled "
            "cell is suppressed when a site suppressed its part"
            + ("; the mean, std and quantiles of a suppressed count are suppressed with it "
               "(a numeric column's missing count, N minus its count, is hidden only with "
               "a suppressed count)."
               if statistics else "."))


def _moments(parts):
    """The mean and standard deviation (ddof=1) of the sites' cells ``parts`` (Chan's
    pairwise merge of their counts, means and sums of squared deviations)."""
    if not parts:
        return np.nan, np.nan
    pooled = merge_moments([{"weight": np.array([p["count"]], dtype=float),
                             "count": np.array([p["count"]]), "mean": np.array([p["mean"]]),
                             "mean_lo": np.array([p["mean_lo"]]), "m2": np.array([p["m2"]])}
                            for p in parts])
    n = int(pooled["count"][0])
    std = float(np.sqrt(pooled["m2"][0] / (n - 1))) if n > 1 else np.nan
    return float(pooled["mean"][0]), std


def _quantile_name(q):
    return f"{100 * q:g}%"


def _order_statistics(data, by, queries, ranks, lo, hi):
    """The ``ranks[i]``-th smallest value of each query's pooled values, by bisection.

    ``lo``/``hi``: the pooled minimum and maximum of each query. Each round
    every site answers, per open query, its count ``<= t``, its largest value
    ``<= t`` and smallest ``> t`` (:func:`site_count_below`); the bracket of
    data values holding the order statistic shrinks until it is one value.
    """
    lo, hi = np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)
    ranks = np.asarray(ranks)
    done = lo == hi
    rounds = 0
    while not done.all():
        rounds += 1
        if rounds > _MAX_ROUNDS:  # pragma: no cover - the bisection halves 64-bit ranges
            raise RuntimeError("the federated quantile bisection did not converge.")
        active = np.flatnonzero(~done)
        t = _midpoint(lo[active], hi[active])
        replies = FederationSession.for_dataset(data).per_site(
            site_count_below, by, [queries[i] for i in active], t, phase="analysis")
        c = np.sum([r["count"] for r in replies], axis=0)
        below = np.fmax.reduce([r["below"] for r in replies], axis=0)
        above = np.fmin.reduce([r["above"] for r in replies], axis=0)
        k = ranks[active]
        ge, lt = c >= k, c < k
        hi[active[ge]] = np.minimum(hi[active[ge]], below[ge])
        lo[active[lt]] = np.maximum(lo[active[lt]], above[lt])
        at_below, at_above = c == k, c == k - 1
        lo[active[at_below]] = hi[active[at_below]] = below[at_below]
        lo[active[at_above]] = hi[active[at_above]] = above[at_above]
        done = lo == hi
    return lo


def _lerp(a, b, g):
    """numpy's linear interpolation (``np.quantile``'s ``_lerp``), digit for digit."""
    diff = b - a
    return np.where(g >= 0.5, b - diff * (1 - g), a + diff * g)


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
    """

    table: pd.DataFrame
    mask: pd.DataFrame = field(repr=False)
    suppressed: pd.DataFrame = field(repr=False)
    note: str = ""
    comparison: pd.DataFrame = field(default=None, repr=False)

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


def _strata(replies, by):
    """The levels of ``by`` the sites hold (missing values last), or none."""
    if by is None:
        return []
    strata = sorted_levels([g for r in replies for g in r["sizes"] if g is not None])
    if any(MISSING in r["sizes"] for r in replies):
        strata.append(MISSING)
    if ALL in strata:
        raise ValueError(f"by column {show(by)} has a level {ALL!r}, the label of all strata.")
    return strata


def describe(data, by=None, *, columns=None, min_level_count=5, quantiles=(0.25, 0.5, 0.75),
             clients=None):
    """The descriptive "Table 1" over all sites, per site and pooled, with small cells hidden.

    Numeric columns: ``count`` (non-missing), ``missing``, ``mean``,
    ``std`` (ddof=1, as pandas) and the ``quantiles`` (named as pandas'
    ``describe``: ``"25%"``, ``"50%"``, ...). Categorical columns (text,
    bool, category): the ``count`` of every level and ``missing``. Every
    table also has the row ``("N", "", "count")``: the rows per site and
    stratum.

    The pooled mean and standard deviation come from the sites' counts,
    means and sums of squared deviations (Chan's pairwise merge). The pooled
    quantiles are exact and equal pandas' default (linear interpolation
    between the order statistics around ``(n - 1) q``): the two order
    statistics are found by a federated bisection in which each site answers
    with its count of values below a threshold and its values next to it
    (single rows' values, as the imputer's exact median). Each site's own
    quantiles are computed at the site (again as pandas).

    **Suppression, at each site**: a site hides its counts
    ``0 < c < min_level_count`` (a level count, a stratum size, a
    non-missing or missing count) and complementary cells, so that no hidden
    cell follows from the others and a total by one subtraction, and sends
    only what is left, saying which cells it hid and why
    (:mod:`skfed.stats._suppress`; a site service applies its own
    ``min_level_count`` when larger). A pooled cell is the sum of the
    released parts, or hidden when a site hid its part (never a partial
    sum). The mean, standard deviation and quantiles of a hidden count are
    hidden with it. Zero counts are shown. A numeric column's missing count
    is not hidden for being small (it is ``N - count``: hiding it would hide
    the column's statistics for a few missing values); it is hidden with a
    small non-missing count, as its complement.

    **Comparison of the groups** (``by`` with two or more levels, rows
    with a missing ``by`` left out): ``comparison`` holds, per variable, a
    p-value and the standardized mean difference, computed from the pooled
    cells (no more site traffic), as tableone's defaults: Welch's t-test for
    a numeric variable and two groups, the one-way ANOVA F test for three or
    more, Pearson's chi-square test (no continuity correction) of the levels
    x groups counts for a categorical one; the SMD is R tableone's (Cohen's
    d with the mean of the two variances; Yang and Dalton's for levels; the
    mean over pairs for three or more groups). Each equals scipy's on the
    pooled rows. A suppressed cell it needs makes them NaN, and ``note``
    says which and why (:mod:`skfed.stats._compare`).

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
    clients : str or array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame: a column name (not
        described by default, as pandas' ``groupby`` key) or one label per row.

    Returns
    -------
    result : DescribeResult
        ``table`` (rows ``(variable, level, statistic)``, columns
        ``(group, site)``, hidden cells NaN), ``mask``, ``suppressed`` (one
        row per hidden count, with the reason), ``note``, ``comparison``
        (with ``by``) and ``to_html()``.

    Raises
    ------
    ValueError
        A missing column, a column numeric at some sites and not at others,
        no rows, a bad argument.
    """
    data = _dataset(data, clients)
    if columns is None and isinstance(clients, str):  # as pandas' groupby: not the key
        columns = [c for c in data.columns if c not in (by, clients)]
    columns = _check_common(data, columns, by, min_level_count)
    quantiles = [float(q) for q in np.atleast_1d(quantiles)]
    if any(not 0 <= q <= 1 for q in quantiles):
        raise ValueError(f"quantiles must be in [0, 1]; got {show(quantiles)}.")
    k = int(min_level_count)
    sites = list(data.sites)
    if POOLED in sites:
        raise ValueError(f"a site is named {POOLED!r}, the label of the pooled column.")
    replies = FederationSession.for_dataset(data).per_site(
        site_describe, columns, by, quantiles, k, phase="analysis")
    kinds = _column_kinds(replies, columns)
    strata = _strata(replies, by)
    table = _Table1(replies, sites, strata + [None])  # the strata, then all rows
    for g in table.groups:
        table.released([r["sizes"].get(g, 0) for r in replies], g, None, SIZE,
                       ("N", "", "count"))
    for c in columns:
        if kinds[c] == "categorical":
            table.add_categorical(c)
        else:
            table.add_numeric(c, quantiles)
    table.add_pooled_quantiles(data, by)
    result = table.result(by, strata, k)
    compared = [g for g in strata if g != MISSING]
    if len(compared) >= 2:  # from the pooled cells: nothing more is asked of the sites
        result.comparison = compare_groups(result, kinds, compared)
    return result


def _column_kinds(replies, columns):
    """``{column: "numeric" | "categorical"}``, the same at every site (else an error)."""
    kinds = {}
    for c in columns:
        found = {r["kinds"][c] for r in replies}
        if len(found) > 1:
            raise ValueError(f"column {show(c)} is numeric at some sites and not at others.")
        kinds[c] = found.pop()
    return kinds


class _Table1:
    """The cells of a Table 1 as :func:`describe` pools them from the sites' replies:
    per site and pooled, hidden where a site hid its part, with each hidden count's
    reason."""

    def __init__(self, replies, sites, groups):
        self.replies, self.sites, self.groups = replies, sites, groups
        self.site_labels = sites + [POOLED]
        # why each site hid a cell: {(stratum, column, cell): reason}
        self.why = [{(x["stratum"], x["column"], x["cell"]): x["reason"]
                     for x in r["suppressed"]} for r in replies]
        self.values, self.hidden, self.records = {}, {}, []
        #: (row key, stratum, column, n, q, min, max): the pooled quantiles to find
        self.pooled_queries = []

    def put(self, row, g, s, value, reason=None, count=True):
        """Cell ``row`` of group ``g`` at site ``s`` (``len(sites)``: pooled); ``reason``:
        hidden, and why (recorded for counts)."""
        key = (ALL if g is None else g, self.site_labels[s])
        self.values.setdefault(row, {})[key] = value
        self.hidden.setdefault(row, {})[key] = reason is not None
        if reason is not None and count:
            self.records.append((*row, *key, reason))

    def released(self, parts, g, column, name, row):
        """``parts``: each site's count (``None``: hidden there); puts them and the pooled
        count; returns the pooled count (``None``: hidden) and its reason."""
        for s, n in enumerate(parts):
            self.put(row, g, s, np.nan if n is None else float(n),
                     None if n is not None else self.why[s][g, column, name])
        total, reason = pool(parts, self.sites)
        self.put(row, g, len(self.sites), np.nan if total is None else float(total), reason)
        return total, reason

    def cell(self, s, g, c):
        return self.replies[s]["cells"].get((g, c))

    def add_categorical(self, c):
        """Each level's count and the missing count, per group, site and pooled."""
        n_sites = len(self.sites)
        levels = sorted_levels([lv for r in self.replies for (g, col), x in r["cells"].items()
                                if col == c for lv in x["levels"]])
        for g in self.groups:
            for lv in levels:
                self.released([(self.cell(s, g, c) or {"levels": {}})["levels"].get(lv, 0)
                               for s in range(n_sites)], g, c, lv, (c, lv, "count"))
            self.released([(self.cell(s, g, c) or {"missing": 0})["missing"]
                           for s in range(n_sites)], g, c, MISSING, (c, "", "missing"))

    def add_numeric(self, c, quantiles):
        """Counts, mean, standard deviation and quantiles, per group, site and pooled
        (the pooled quantiles queued for one bisection)."""
        n_sites = len(self.sites)
        stats_rows = [(c, "", "mean"), (c, "", "std")] + [
            (c, "", _quantile_name(q)) for q in quantiles]
        for g in self.groups:
            empty = {"count": 0, "missing": 0}
            parts = [self.cell(s, g, c) or empty for s in range(n_sites)]
            n_pooled, why_pooled = self.released([p["count"] for p in parts], g, c, "count",
                                                 (c, "", "count"))
            self.released([p["missing"] for p in parts], g, c, "missing", (c, "", "missing"))
            for s in range(n_sites + 1):
                reason = why_pooled if s == n_sites else (
                    None if parts[s]["count"] is not None else self.why[s][g, c, "count"])
                if reason is not None:  # the statistics of a hidden count are hidden with it
                    for row in stats_rows:
                        self.put(row, g, s, np.nan, reason, count=False)
                    continue
                mine = [p for p in (parts if s == n_sites else [parts[s]]) if p["count"] > 0]
                self._put_statistics(stats_rows, g, s, c, mine, n_pooled, quantiles)

    def _put_statistics(self, stats_rows, g, s, c, mine, n_pooled, quantiles):
        mean, std = _moments(mine)
        self.put(stats_rows[0], g, s, mean)
        self.put(stats_rows[1], g, s, std)
        for qi, q in enumerate(quantiles):
            row = stats_rows[2 + qi]
            if s < len(self.sites):
                self.put(row, g, s, float(mine[0]["quantiles"][qi]) if mine else np.nan)
                continue
            self.put(row, g, s, np.nan)
            if mine:
                self.pooled_queries.append((row, g, c, n_pooled, q,
                                            min(p["min"] for p in mine),
                                            max(p["max"] for p in mine)))

    def add_pooled_quantiles(self, data, by):
        """The exact pooled quantiles, all in one federated bisection."""
        if not self.pooled_queries:
            return
        queries, ranks, lo, hi = [], [], [], []
        for _, g, c, n, q, vmin, vmax in self.pooled_queries:
            low = int(np.floor((n - 1) * q))
            for rank in (low + 1, min(low + 2, n)):
                queries.append((g, c))
                ranks.append(rank)
                lo.append(vmin)
                hi.append(vmax)
        found = _order_statistics(data, by, queries, ranks, lo, hi)
        for i, (row, g, _, n, q, _, _) in enumerate(self.pooled_queries):
            h = (n - 1) * q
            self.put(row, g, len(self.sites),
                     float(_lerp(found[2 * i], found[2 * i + 1], h - np.floor(h))))

    def result(self, by, strata, k):
        """The :class:`DescribeResult`: the table, its mask and the hidden counts."""
        values, hidden = self.values, self.hidden
        rows = pd.MultiIndex.from_tuples(list(values),
                                         names=["variable", "level", "statistic"])
        cols = pd.MultiIndex.from_tuples(
            [(g, s) for g in ([ALL] if by is None else [ALL] + strata)
             for s in self.site_labels], names=["group", "site"])
        table = pd.DataFrame([[values[r].get(col, np.nan) for col in cols] for r in values],
                             index=rows, columns=cols)
        mask = pd.DataFrame([[hidden[r].get(col, False) for col in cols] for r in values],
                            index=rows, columns=cols)
        suppressed = pd.DataFrame(self.records, columns=["variable", "level", "statistic",
                                                         "group", "site", "reason"])
        return DescribeResult(table.mask(mask), mask, suppressed,
                              suppression_note(len(suppressed), k))


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
        Per site and pooled (index ``(site, row level)``), the missing
        values as a level ``"<missing>"`` (when there are any), with the
        margins ``"All"`` (which count them); hidden cells NaN.
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


def crosstab(data, row, col, *, min_level_count=5, clients=None):
    """Pooled counts of two categorical columns over all sites, with the chi-square test.

    Each site sends its count of every pair of levels that occurs (missing
    values as a level) and its margins, after hiding its cells
    ``0 < c < min_level_count`` (margins included) and their complementary
    cells; the server adds the released counts, and a pooled cell is hidden
    when a site hid its part (see :func:`describe`).

    Parameters
    ----------
    data : FederatedDataset or DataFrame
    row, col : str
        The two columns (any values; missing values are left out of
        ``table`` and the test).
    min_level_count : int, default=5
    clients : str or array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame (a column name or one
        label per row).

    Returns
    -------
    result : CrosstabResult

    Raises
    ------
    ValueError
        A missing column, fewer than two levels in a column, no rows.
    """
    data = _dataset(data, clients)
    if not isinstance(min_level_count, (int, np.integer)) or min_level_count < 1:
        raise ValueError(f"min_level_count must be a positive int; got {show(min_level_count)}.")
    _check_columns(data, row=row, col=col)
    if row == col:
        raise ValueError("row and col must be two different columns.")
    k = int(min_level_count)
    replies = FederationSession.for_dataset(data).per_site(site_crosstab, row, col, k,
                                                        phase="analysis")
    sites = list(data.sites)
    counts = [r["counts"] for r in replies]
    rows, cols = _crosstab_levels(counts, row, col)
    by_site, records = _crosstab_by_site(replies, sites, rows, cols, row, col)
    mask = by_site.isna()
    table = _pooled_crosstab(by_site, rows, cols, row, col)
    n_missing = float(by_site.loc[(POOLED, "All"), "All"] - table.to_numpy().sum())
    chi2, p, dof, expected = _chi_square(table)
    suppressed = pd.DataFrame(records, columns=["site", "row", "col", "reason"])
    note = suppression_note(len(suppressed), k, statistics=False)
    if np.isnan(chi2):
        note += (" The chi-square test needs every pooled cell of the table: not computed "
                 "(merge the rare levels first).")
    return CrosstabResult(
        table=table, by_site=by_site, mask=mask, chi2=float(chi2), p_value=float(p),
        dof=int(dof), expected=expected, n_missing=n_missing, suppressed=suppressed,
        note=note)


def _crosstab_levels(counts, row, col):
    """The levels of ``row`` and of ``col`` in the sites' ``counts``, missing values left
    out; an error unless each has two or more."""
    rows = sorted_levels([a for c in counts for a, _ in c if a is not None])
    cols = sorted_levels([b for c in counts for _, b in c if b is not None])
    if len(rows) < 2 or len(cols) < 2:
        raise ValueError(f"crosstab needs at least two levels in each column; {show(row)} has "
                         f"{len(rows)}, {show(col)} has {len(cols)}.")
    return rows, cols


def _crosstab_by_site(replies, sites, rows, cols, row, col):
    """The cross-table per site and pooled (:attr:`CrosstabResult.by_site`: the missing
    values as a level, the margins ``"All"``, hidden cells NaN) and one record
    ``(site, row, col, reason)`` per hidden cell."""
    counts = [r["counts"] for r in replies]
    all_rows = rows + ([MISSING] if any((MISSING, None) in c for c in counts) else [])
    all_cols = cols + ([MISSING] if any((None, MISSING) in c for c in counts) else [])
    why = [{(x["row"], x["col"]): x["reason"] for x in r["suppressed"]} for r in replies]
    site_labels = sites + [POOLED]
    keys_r, keys_c = all_rows + [None], all_cols + [None]
    values = np.full((len(site_labels), len(keys_r), len(keys_c)), np.nan)
    records = []
    for i, a in enumerate(keys_r):
        for j, b in enumerate(keys_c):
            parts = [c.get((a, b), 0) for c in counts]
            total, reason = pool(parts, sites)
            for s, n in enumerate(parts + [total]):
                if n is not None:
                    values[s, i, j] = n
                    continue
                why_s = reason if s == len(sites) else why[s][a, b]
                records.append((site_labels[s], "All" if a is None else a,
                                "All" if b is None else b, why_s))
    index = pd.MultiIndex.from_product([site_labels, all_rows + ["All"]], names=["site", row])
    columns = pd.Index(all_cols + ["All"], name=col)
    return pd.DataFrame(values.reshape(-1, len(keys_c)), index=index, columns=columns), records


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
