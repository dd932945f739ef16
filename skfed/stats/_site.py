"""What runs at a site for :mod:`skfed.stats`: module-level pure functions of one site's rows.

Every function takes one site's :class:`~skfed.data.SiteData` (its ``X`` a
DataFrame with named columns) plus small arguments sent by the server, and
returns a small summary: counts, sums, a site's own moments (Kaplan-Meier's
counts: :mod:`skfed.stats._survival_site`). None returns a row. They are written
so that they can be declared as site operations beside them
(:mod:`skfed.federation.operations`): a site service runs them under its rules,
with the checks declared here.
"""

import functools

import numpy as np
import pandas as pd

from .._messages import show
from ..data.site import SiteError
from ..federation import dominance
from ..federation.combine import Combine, add_counts, tree_combine
from ..federation.operations import COUNTS, SUMS, Arg, Refused, site_operation
from ..preprocessing._summaries import moments_summary
from ._levels import MISSING
from ._suppress import hide_crosstab, hide_summary

#: the most columns and quantiles one request may ask for
MAX_COLUMNS, MAX_QUANTILES = 1024, 64


def _quantile_list(values):
    """Quantile probabilities: a list of numbers in [0, 1]."""
    if not isinstance(values, (list, tuple, np.ndarray)) or len(values) > MAX_QUANTILES or \
            not all(isinstance(q, (int, float, np.floating)) and not isinstance(q, bool)
                    and 0 <= q <= 1 for q in values):
        return f"quantiles are at most {MAX_QUANTILES} numbers in [0, 1]"
    return None


def check_level_names(site, columns, rules):
    """A level's name is released when its count is (a table has its row): refuse a
    column tabulated by level whose rows are mostly in levels held by fewer than
    ``min_level_count`` rows (an identifier, a continuous measurement)."""
    k = rules.min_level_count
    for name, counts in zip(columns, level_counts(site, columns)):
        counts = np.asarray(counts, dtype=np.int64)
        rare = int(counts[counts < k].sum())
        if rare and 2 * rare > counts.sum():  # the refusal says no count
            raise Refused("min_level_count", f"column {str(name)[:64]!r}: most of its values "
                          f"here are levels held by fewer than {k} rows (an identifier-like "
                          "column); their names are not released", columns=[name], public=True)


def level_counts(site, columns):
    """Each column's count per level (missing values left out) over the site's rows; on
    an engine's partitions, added over them (the rules decide on the whole dataset)."""
    if hasattr(site, "map_parts"):
        parts = site.map_parts(_level_dicts, list(columns))
        return [list(functools.reduce(add_counts, [p[j] for p in parts], {}).values())
                for j in range(len(columns))]
    return [list(counts.values()) for counts in _level_dicts(site, columns)]


def _level_dicts(site, columns):
    return [{(k.item() if isinstance(k, np.generic) else k): int(v) for k, v in
             _column(site, name).value_counts(dropna=True).items()} for name in columns]


def _describe_levels(site, values, rules):
    columns, by = values["columns"], values["by"]
    forced = set(values.get("categorical") or ())
    check_level_names(site, [c for c in columns if c in forced
                             or not is_numeric(_column(site, c))]
                      + ([by] if by is not None else []), rules)


def _describe_reply(site, values, out, rules):
    """Without ``allow_exact_quantiles`` the site's own quantiles and extremes are
    single rows' values: blanked."""
    if not rules.allow_exact_quantiles:
        for cell in out["cells"].values():
            if "quantiles" in cell:
                cell.update(min=np.nan, max=np.nan,
                            quantiles=np.full(len(cell["quantiles"]), np.nan))
    return out


def _crosstab_levels(site, values, rules):
    check_level_names(site, [values["row"], values["col"]], rules)


def _table(site):
    X = site.X
    if not hasattr(X, "columns"):
        raise SiteError(site.site, "skfed.stats needs named columns: pass a DataFrame.")
    return X


def _column(site, name):
    X = _table(site)
    if name not in X.columns:
        raise SiteError(site.site, f"no column {show(name)}; it has {list(map(str, X.columns))}.")
    return X[name]


def is_numeric(series):
    """Whether a column is summarized as numbers (bool and text are categorical)."""
    return (pd.api.types.is_numeric_dtype(series.dtype)
            and not pd.api.types.is_bool_dtype(series.dtype))


def _strata(site, by):
    """``{level: boolean mask}`` of the site's rows: ``None`` (all rows) first, then one
    per level of ``by`` (missing last)."""
    out = {None: np.ones(site.n_samples, dtype=bool)}
    if by is None:
        return out
    column = _column(site, by)
    missing = column.isna().to_numpy()
    out.update({(level.item() if isinstance(level, np.generic) else level):
                (column == level).to_numpy() & ~missing
                for level in pd.unique(column[~missing])})
    if missing.any():
        out[MISSING] = missing
    return out


def _levels(values):
    missing = values.isna().to_numpy()
    counts = values[~missing].value_counts(sort=False)
    out = {level.item() if isinstance(level, np.generic) else level: int(c)
           for level, c in counts.items()}
    return out, int(missing.sum())


@site_operation(
    "stats.describe", releases=SUMS, reads_design=True,
    describes="per column and stratum: row counts, counts, missing counts, mean and sum "
              "of squares; level counts and names; every count from 1 to min_level_count "
              "- 1 blanked, with the complementary counts that would give it back through "
              "a total (and the statistics of a blanked count), each listed with the "
              "reason; a column's moments blanked at every stratum where one of them is "
              "dominated by a few rows; the site's quantiles and extremes only with "
              "allow_exact_quantiles; a column tabulated by level whose values are mostly "
              "in small levels refused",
    arguments=(Arg("columns", "names", most=MAX_COLUMNS), Arg("by", "name", nullable=True),
               Arg("quantiles", "value", check=_quantile_list, convert=list),
               Arg("min_count", "int", low=1, high=1 << 30, floor="min_level_count"),
               Arg("categorical", "names", most=MAX_COLUMNS, optional=True, default=())),
    checks=(_describe_levels,), reply=_describe_reply)
def site_describe(site, columns, by, quantiles, min_count=1, categorical=()):
    """A site's summary of each column, per stratum of ``by``, its small counts hidden.

    Parameters
    ----------
    site : SiteData
    columns : list of str
    by : str or None
    quantiles : sequence of float
    min_count : int, default=1
        Counts ``0 < c < min_count`` are hidden at the site, with their
        complementary cells (:func:`skfed.stats._suppress.hide_summary`); a
        hidden non-missing count hides the cell's moments, quantiles and
        extremes. 1 hides nothing.
    categorical : sequence of str, default=()
        Columns counted by level whatever their type (numeric codes: 0/1).

    Returns
    -------
    summary : dict
        ``{"n": rows, "kinds": {column: "numeric" | "categorical"},
        "sizes": {stratum: rows}, "cells": {(stratum, column): cell},
        "suppressed": [...]}``. A numeric cell holds the non-missing
        ``count``, ``missing``, ``mean``, ``mean_lo`` and ``m2``
        (:func:`skfed.preprocessing._summaries.moments_summary`: the mean as
        two doubles and the sum of squared deviations about it), the site's own
        ``quantiles`` (linear interpolation, as pandas), ``min`` and ``max``;
        a categorical cell holds ``levels`` (``{level: count}``) and
        ``missing``. Strata are ``None`` (all the site's rows) and the levels
        ``by`` takes at the site. Hidden counts are ``None``; ``suppressed``
        lists them with the reason.
    """
    X = _table(site)
    for name in list(columns) + ([by] if by is not None else []):
        _column(site, name)
    kinds = {c: "numeric" if is_numeric(X[c]) and c not in set(categorical or ())
             else "categorical" for c in columns}
    cells, sizes = {}, {}
    for stratum, mask in _strata(site, by).items():
        rows = X.loc[mask]
        sizes[stratum] = int(mask.sum())
        for c in columns:
            values = rows[c]
            if kinds[c] == "numeric":
                v = values.to_numpy(dtype=np.float64, na_value=np.nan)
                if np.isinf(v).any():
                    raise SiteError(site.site, f"column {show(c)} contains infinity.")
                present = v[~np.isnan(v)]
                n = present.size
                with dominance.suspended():  # audited once released (_audit_moments)
                    moments = moments_summary(present[:, None])
                cells[stratum, c] = {
                    "count": int(n), "missing": int(v.size - n),
                    "mean": float(moments["mean"][0]) if n else np.nan,
                    "mean_lo": float(moments["mean_lo"][0]), "m2": float(moments["m2"][0]),
                    "quantiles": (np.quantile(present, list(quantiles)) if n >= max(min_count, 1)
                                  else np.full(len(quantiles), np.nan)),
                    "min": float(present.min()) if n else np.nan,
                    "max": float(present.max()) if n else np.nan}
            else:
                levels, missing = _levels(values)
                cells[stratum, c] = {"levels": levels, "missing": missing}
    summary = {"n": int(site.n_samples), "kinds": kinds, "sizes": sizes, "cells": cells}
    return _audit_moments(site, X, by, hide_summary(summary, by, int(min_count), site.site))


def _audit_moments(site, X, by, summary):
    """The dominance rule on each released mean and sum of squares (at a site service):
    a column whose means (or sums of squares) one stratum's few rows dominate has its
    means (or sums of squares) blanked in every stratum (one stratum's alone would follow
    from the others and the total)."""
    audit = dominance.active()
    if audit is None:
        return summary
    strata = _strata(site, by)
    for c, kind in summary["kinds"].items():
        if kind != "numeric":
            continue
        cells = [(cell, X.loc[mask, c].to_numpy(dtype=np.float64, na_value=np.nan))
                 for stratum, mask in strata.items()
                 for cell in [summary["cells"].get((stratum, c))]
                 if cell is not None and cell.get("count")]
        for what, fields, terms in (
                ("means", ("mean", "mean_lo", "m2"), lambda v, cell: v),
                ("sums of squares", ("m2",), lambda v, cell: (v - cell["mean"]) ** 2)):
            try:
                for cell, v in cells:
                    v = v[~np.isnan(v)]
                    if np.isfinite(cell[fields[0]]):
                        dominance.check_rows(terms(v, cell)[:, None], f"the {what} of {c!r}")
            except Refused:
                for (_, column), cell in summary["cells"].items():
                    if column == c:
                        cell.update(dict.fromkeys(fields, np.nan))
                summary["suppressed"].append({
                    "stratum": None, "column": c, "cell": what,
                    "reason": f"dominated by fewer than {audit.min_rows} rows at site "
                              f"{site.site!r}"})
    return summary


def _queries(value):
    if not isinstance(value, (list, tuple)) or len(value) > 1 << 16 or not all(
            isinstance(q, (list, tuple)) and len(q) == 2 and isinstance(q[1], str)
            for q in value):
        return "queries are at most 65,536 (stratum, column) pairs"
    return None


@site_operation(
    "stats.count_below", releases=SUMS,
    requires="allow_exact_quantiles: exact quantiles release single rows' values (the "
             "values next to each threshold)",
    describes="one step of the exact quantiles' bisection: a count and the site's values "
              "next to the threshold (single rows' values: only with allow_exact_quantiles)",
    arguments=(Arg("by", "name", nullable=True), Arg("queries", "value", check=_queries),
               Arg("thresholds", "floats", most=1 << 16, finite=False)),
    # a count, the largest value below and the smallest above: each partition's combined
    combine=Combine(lambda parts, args: {
        "count": tree_combine("sum", [p["count"] for p in parts]),
        "below": np.fmax.reduce([p["below"] for p in parts], axis=0),
        "above": np.fmin.reduce([p["above"] for p in parts], axis=0)}))
def site_count_below(site, by, queries, thresholds):
    """One step of the federated bisection for order statistics, for many queries at once.

    Parameters
    ----------
    site : SiteData
    by : str or None
    queries : list of (stratum, column)
        ``stratum`` is a level of ``by`` or ``None`` for all rows.
    thresholds : ndarray of shape (n_queries,)

    Returns
    -------
    summary : dict
        Per query, as :func:`skfed.preprocessing._summaries.count_below_summary`:
        ``count`` (non-missing values ``<= t``), ``below`` (the largest value
        ``<= t``, NaN if none) and ``above`` (the smallest value ``> t``, NaN if
        none): two of the three numbers are data values of the site.
    """
    X = _table(site)
    strata = _strata(site, by)
    count = np.zeros(len(queries), dtype=np.int64)
    below = np.full(len(queries), np.nan)
    above = np.full(len(queries), np.nan)
    cache = {}
    for q, ((stratum, column), t) in enumerate(zip(queries, thresholds)):
        if (stratum, column) not in cache:
            values = (X[column].loc[strata[stratum]] if stratum in strata
                      else X[column].iloc[:0])
            v = values.to_numpy(dtype=np.float64, na_value=np.nan)
            cache[stratum, column] = np.sort(v[~np.isnan(v)])
        v = cache[stratum, column]
        k = int(np.searchsorted(v, t, side="right"))
        count[q] = k
        if k > 0:
            below[q] = v[k - 1]
        if k < v.size:
            above[q] = v[k]
    return {"count": count, "below": below, "above": above}


def _crosstab_cells(site, row, col, min_count=1):
    """The counts of the pairs that occur, none hidden (a partition's part: its cells
    added over the partitions before any is hidden)."""
    r, c = _column(site, row), _column(site, col)
    r = r.astype(object).where(r.notna(), MISSING)
    c = c.astype(object).where(c.notna(), MISSING)
    table = pd.crosstab(r, c)
    return {(a.item() if isinstance(a, np.generic) else a,
             b.item() if isinstance(b, np.generic) else b): int(table.loc[a, b])
            for a in table.index for b in table.columns if table.loc[a, b] > 0}


def _hide_cells(counts, args, site):
    row, col, min_count = args
    released, suppressed = hide_crosstab(counts, int(min_count), site, (row, col))
    return {"counts": released, "suppressed": suppressed}


@site_operation(
    "stats.crosstab", releases=COUNTS,
    describes="the count of every pair of levels (missing values as a level) and the "
              "margins; counts from 1 to min_level_count - 1 blanked with their "
              "complementary cells along their row and column, each listed with the "
              "reason; a column mostly in such levels refused",
    arguments=(Arg("row", "name"), Arg("col", "name"),
               Arg("min_count", "int", low=1, high=1 << 30, floor="min_level_count")),
    checks=(_crosstab_levels,),
    # the cells added over an engine's partitions, then hidden on the whole table
    combine=Combine(lambda parts, args: functools.reduce(add_counts, parts, {}),
                    part=_crosstab_cells, finish=_hide_cells))
def site_crosstab(site, row, col, min_count=1):
    """A site's counts of every (row level, column level) pair, missing values as a level,
    its small cells hidden.

    Parameters
    ----------
    site : SiteData
    row, col : str
    min_count : int, default=1
        Cells ``0 < c < min_count`` (margins included) are hidden at the
        site, with their complementary cells
        (:func:`skfed.stats._suppress.hide_crosstab`). 1 hides nothing.

    Returns
    -------
    reply : dict
        ``{"counts": {(row level, column level): count or None},
        "suppressed": [{"row", "col", "reason"}, ...]}``: the pairs that
        occur, the margins under ``None`` keys (``(a, None)``, ``(None, b)``,
        ``(None, None)``) and hidden cells ``None``.
    """
    return _hide_cells(_crosstab_cells(site, row, col), (row, col, min_count), site.site)


def _coarsen(times, total, min_count):
    """Bins of adjacent distinct times holding >= min_count rows each: the bin end per time
    (the coarsened event times of a Cox model's quantile grid, skfed.survival._site)."""
    ends = np.empty(times.size)
    start, acc, bins = 0, 0, []
    for i in range(times.size):
        acc += total[i]
        if acc >= min_count:
            bins.append((start, i))
            start, acc = i + 1, 0
    if start < times.size:  # the short last run joins the previous bin
        if bins:
            bins[-1] = (bins[-1][0], times.size - 1)
        else:
            bins.append((start, times.size - 1))
    for a, b in bins:
        ends[a:b + 1] = times[b]
    return ends
