"""The federated Table 1 (:func:`describe`) and cross-table (:func:`crosstab`), with
small-cell suppression.

Sites send counts, per-site moments (count, mean, sum of squared deviations)
and, for the exact pooled quantiles, a few rounds of counts below thresholds
(the bisection of :func:`skfed.preprocessing._imputer.federated_median`,
generalized to any order statistic). The server pools them: means and
standard deviations with Chan's pairwise formula
(:func:`skfed.preprocessing._summaries.merge_moments`), quantiles as pandas'
default (linear interpolation between the two order statistics around
``(n - 1) q``), then hides the small cells (:mod:`skfed.stats._suppress`).
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from .._messages import show
from ..preprocessing._imputer import _midpoint
from ..preprocessing._summaries import merge_moments
from ._site import MISSING, site_count_below, site_crosstab, site_describe
from ._suppress import suppress, with_margins
from ._survival import _check_columns, _dataset

#: the column label of the pooled sites and of all strata
POOLED, ALL = "pooled", "all"

_MAX_ROUNDS = 200


def _sorted_levels(levels):
    levels = [lv for lv in dict.fromkeys(levels) if lv != MISSING]
    try:
        return sorted(levels)
    except TypeError:
        return sorted(levels, key=lambda x: (str(type(x)), str(x)))


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
        replies = data.map(site_count_below, by, [queries[i] for i in active], t)
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
    """

    table: pd.DataFrame
    mask: pd.DataFrame = field(repr=False)
    suppressed: pd.DataFrame = field(repr=False)
    note: str = ""

    def to_html(self, **kwargs):
        """The table as HTML, hidden cells shown as ``suppressed``, the note below.

        Parameters
        ----------
        **kwargs
            Passed to :meth:`pandas.DataFrame.to_html`.

        Returns
        -------
        html : str
        """
        shown = self.table.astype(object).where(~self.mask, "suppressed")
        return shown.to_html(na_rep="", **kwargs) + f"<p>{self.note}</p>"


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

    **Suppression**: a count ``0 < c < min_level_count`` (a level count, a
    stratum size, a non-missing or missing count, per site or pooled) is
    hidden, and so are complementary cells, so that no hidden cell follows
    from the others and a total by one subtraction (:mod:`skfed.stats._suppress`);
    the mean, standard deviation and quantiles of a hidden count are hidden
    with it. Zero counts are shown.

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
    clients : array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame.

    Returns
    -------
    result : DescribeResult
        ``table`` (rows ``(variable, level, statistic)``, columns
        ``(group, site)``, hidden cells NaN), ``mask``, ``suppressed`` (one
        row per hidden count, with the reason), ``note`` and ``to_html()``.

    Raises
    ------
    ValueError
        A missing column, a column numeric at some sites and not at others,
        no rows, a bad argument.
    """
    data = _dataset(data, clients)
    columns = _check_common(data, columns, by, min_level_count)
    quantiles = [float(q) for q in np.atleast_1d(quantiles)]
    if any(not 0 <= q <= 1 for q in quantiles):
        raise ValueError(f"quantiles must be in [0, 1]; got {show(quantiles)}.")
    k = int(min_level_count)
    replies = data.map(site_describe, columns, by, quantiles, k)
    sites = list(data.sites)
    if POOLED in sites:
        raise ValueError(f"a site is named {POOLED!r}, the label of the pooled column.")
    kinds = {}
    for c in columns:
        found = {r["kinds"][c] for r in replies}
        if len(found) > 1:
            raise ValueError(f"column {show(c)} is numeric at some sites and not at others.")
        kinds[c] = found.pop()
    strata = [] if by is None else _sorted_levels(
        [g for r in replies for (g, _) in r["cells"] if g is not None])
    if by is not None and any((MISSING, c) in r["cells"] for r in replies for c in columns):
        strata.append(MISSING)
    if by is not None and ALL in strata:
        raise ValueError(f"by column {show(by)} has a level {ALL!r}, the label of all strata.")
    groups = strata + [None]  # inner strata, then their margin (all rows)
    group_labels = [ALL if g is None else g for g in groups]
    site_labels = sites + [POOLED]
    S = len(sites)

    def cell(s, g, c):
        return replies[s]["cells"].get((g, c))

    # stratum sizes: (site, stratum) with margins; one column's counts give them
    def sizes(c):
        out = np.zeros((S, len(strata))) if by is not None else np.zeros(S)
        for s in range(S):
            for j, g in enumerate(strata if by is not None else [None]):
                x = cell(s, g, c)
                n = 0 if x is None else (sum(x["levels"].values()) + x["missing"]
                                         if "levels" in x else x["count"] + x["missing"])
                if by is not None:
                    out[s, j] = n
                else:
                    out[s] = n
        return out

    axis_names = ["sites", "strata", "levels"] if by is not None else ["sites", "levels"]
    n_table = with_margins(sizes(columns[0]))
    n_mask, n_reasons = suppress(n_table, k, axis_names=axis_names[:-1])

    values, hidden, records = {}, {}, []

    def index(s, j):  # ext indices -> table keys
        return (group_labels[j] if by is not None else ALL, site_labels[s])

    def put(row, s, j, value, is_hidden):
        values.setdefault(row, {})[index(s, j)] = value
        hidden.setdefault(row, {})[index(s, j)] = bool(is_hidden)

    def ext_cells(shape):
        return np.ndindex(*shape) if by is not None else ((s, 0) for s in range(shape[0]))

    def at(arr, s, j):
        return arr[s, j] if by is not None else arr[s]

    for s, j in ext_cells(n_table.shape):
        put(("N", "", "count"), s, j, float(at(n_table, s, j)), at(n_mask, s, j))
        if at(n_mask, s, j):
            idx = (s, j) if by is not None else (s,)
            records.append(("N", "", "count", *index(s, j), n_reasons[idx]))

    pooled_queries = []  # (row key, (s, j), stratum, column, n, q)
    for c in columns:
        if kinds[c] == "categorical":
            levels = _sorted_levels([lv for r in replies for g in groups
                                     for lv in (r["cells"].get((g, c)) or {"levels": {}})
                                     ["levels"]])
            names = levels + [MISSING]
        else:
            names = ["present", MISSING]
        inner = np.zeros((S, len(strata), len(names)) if by is not None else (S, len(names)))
        for s in range(S):
            for j, g in enumerate(strata if by is not None else [None]):
                x = cell(s, g, c)
                if x is None:
                    continue
                row = ([x["levels"].get(lv, 0) for lv in levels] + [x["missing"]]
                       if kinds[c] == "categorical" else [x["count"], x["missing"]])
                if by is not None:
                    inner[s, j] = row
                else:
                    inner[s] = row
        table = with_margins(inner)
        seed = np.zeros(table.shape, dtype=bool)
        seed[..., -1] = n_mask
        mask, reasons = suppress(table, k, seed=seed, axis_names=axis_names)
        for s, j in ext_cells(table.shape[:-1]):
            sl = (s, j) if by is not None else (s,)
            for li, name in enumerate(names):
                if kinds[c] == "categorical":
                    row = (c, "", "missing") if name == MISSING else (c, name, "count")
                else:
                    row = (c, "", "count" if name == "present" else "missing")
                put(row, s, j, float(table[sl + (li,)]), mask[sl + (li,)])
                if mask[sl + (li,)]:
                    records.append((*row, *index(s, j), reasons[sl + (li,)]))
            if kinds[c] != "numeric":
                continue
            stratum = groups[j] if by is not None else None
            present_hidden = mask[sl + (0,)]
            parts = [cell(t, stratum, c) for t in range(S)] if s == S else [cell(s, stratum, c)]
            parts = [p for p in parts if p is not None and p["count"] > 0]
            if parts:
                pooled = merge_moments([{"weight": np.array([p["count"]], dtype=float),
                                         "count": np.array([p["count"]]),
                                         "mean": np.array([p["mean"]]),
                                         "mean_lo": np.array([p["mean_lo"]]),
                                         "m2": np.array([p["m2"]])}
                                        for p in parts])
                n = int(pooled["count"][0])
                mean = float(pooled["mean"][0])
                std = float(np.sqrt(pooled["m2"][0] / (n - 1))) if n > 1 else np.nan
            else:
                n, mean, std = 0, np.nan, np.nan
            put((c, "", "mean"), s, j, mean, present_hidden)
            put((c, "", "std"), s, j, std, present_hidden)
            for qi, q in enumerate(quantiles):
                row = (c, "", _quantile_name(q))
                if s < S:
                    put(row, s, j, float(parts[0]["quantiles"][qi]) if parts else np.nan,
                        present_hidden)
                elif present_hidden or n == 0:
                    put(row, s, j, np.nan, present_hidden)
                else:
                    put(row, s, j, np.nan, False)
                    pooled_queries.append((row, (s, j), stratum, c, n, q,
                                           min(p["min"] for p in parts),
                                           max(p["max"] for p in parts)))

    if pooled_queries:  # the exact pooled quantiles, all in one bisection
        queries, ranks, lo, hi = [], [], [], []
        for _, _, stratum, c, n, q, vmin, vmax in pooled_queries:
            h = (n - 1) * q
            below = int(np.floor(h))
            for rank in (below + 1, min(below + 2, n)):
                queries.append((stratum, c))
                ranks.append(rank)
                lo.append(vmin)
                hi.append(vmax)
        found = _order_statistics(data, by, queries, ranks, lo, hi)
        for i, (row, (s, j), _, _, n, q, _, _) in enumerate(pooled_queries):
            h = (n - 1) * q
            put(row, s, j, float(_lerp(found[2 * i], found[2 * i + 1], h - np.floor(h))), False)

    rows = pd.MultiIndex.from_tuples(list(values), names=["variable", "level", "statistic"])
    cols = pd.MultiIndex.from_tuples([(g, s) for g in ([ALL] if by is None else
                                                       [ALL] + strata) for s in site_labels],
                                     names=["group", "site"])
    table = pd.DataFrame([[values[r].get(col, np.nan) for col in cols] for r in values],
                         index=rows, columns=cols)
    mask = pd.DataFrame([[hidden[r].get(col, False) for col in cols] for r in values],
                        index=rows, columns=cols)
    table = table.mask(mask)
    suppressed = pd.DataFrame(records, columns=["variable", "level", "statistic", "group",
                                                "site", "reason"])
    note = (f"{len(suppressed)} count cell(s) hidden: counts from 1 to {k - 1} "
            f"(min_level_count={k}) and the complementary cells that would reveal them "
            "through a total; the mean, std and quantiles of a hidden count are hidden too."
            if len(suppressed) else f"No cell below min_level_count={k}.")
    return DescribeResult(table, mask, suppressed, note)


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
        The same per site and pooled (index ``(site, row level)``), with the
        margins ``"All"``; hidden cells NaN.
    mask : pandas.DataFrame of bool
        Hidden cells of ``by_site``.
    chi2, p_value : float
        Pearson's chi-square test of independence on the pooled table
        (``scipy.stats.chi2_contingency(..., correction=False)``), computed
        from the exact counts.
    dof : int
    expected : pandas.DataFrame
        Expected pooled counts under independence.
    n_missing : int or float
        Rows left out for a missing value (NaN if hidden).
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

    Each site sends its count of every pair of levels that occurs; the
    server adds them. Cells ``0 < c < min_level_count`` (per site or pooled,
    margins included) are hidden, with complementary cells (see
    :func:`describe`).

    Parameters
    ----------
    data : FederatedDataset or DataFrame
    row, col : str
        The two columns (any values; missing values are left out).
    min_level_count : int, default=5
    clients : array-like of shape (n_samples,), default=None
        The site of each row when ``data`` is a DataFrame.

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
    replies = data.map(site_crosstab, row, col)
    sites = list(data.sites)
    rows = _sorted_levels([a for r in replies for a, _ in r])
    cols = _sorted_levels([b for r in replies for _, b in r])
    if len(rows) < 2 or len(cols) < 2:
        raise ValueError(f"crosstab needs at least two levels in each column; {show(row)} has "
                         f"{len(rows)}, {show(col)} has {len(cols)}.")
    inner = np.zeros((len(sites), len(rows), len(cols)), dtype=np.int64)
    missing = 0
    for s, r in enumerate(replies):
        for (a, b), n in r.items():
            if a == MISSING or b == MISSING:
                missing += n
            else:
                inner[s, rows.index(a), cols.index(b)] = n
    table = with_margins(inner)
    mask, reasons = suppress(table, k, axis_names=["sites", row, col])
    site_labels = sites + [POOLED]
    index = pd.MultiIndex.from_product([site_labels, rows + ["All"]], names=["site", row])
    columns = pd.Index(cols + ["All"], name=col)
    flat = table.reshape(-1, table.shape[-1]).astype(float)
    by_site = pd.DataFrame(flat, index=index, columns=columns)
    mask_frame = pd.DataFrame(mask.reshape(-1, mask.shape[-1]), index=index, columns=columns)
    by_site = by_site.mask(mask_frame)
    pooled = inner.sum(axis=0)
    chi2, p, dof, expected = stats.chi2_contingency(pooled, correction=False)
    records = [(site_labels[s], (rows + ["All"])[a], (cols + ["All"])[b], reasons[(s, a, b)])
               for s, a, b in zip(*np.nonzero(mask))]
    suppressed = pd.DataFrame(records, columns=["site", "row", "col", "reason"])
    note = (f"{len(suppressed)} cell(s) hidden: counts from 1 to {k - 1} and their complements."
            if records else f"No cell below min_level_count={k}.")
    return CrosstabResult(
        table=by_site.loc[POOLED].iloc[:-1, :-1].rename_axis(row), by_site=by_site,
        mask=mask_frame, chi2=float(chi2), p_value=float(p), dof=int(dof),
        expected=pd.DataFrame(expected, index=pd.Index(rows, name=row), columns=cols[:]),
        n_missing=float(missing) if not 0 < missing < k else np.nan, suppressed=suppressed,
        note=note)
