"""What runs at a site for a pooled Table 1: level names, then counts and sums of fixed
shape that a masked sum adds over the sites.

The pooled Table 1 (:func:`skfed.stats.describe` with ``privacy=``) asks each site
for the names of its levels (:func:`site_levels`, no count), makes their union the
public *layout* (the strata of ``by`` and their missing stratum, each categorical
column's levels and its missing count), and then sums over the sites, masked, one
array per column in that layout: every site's reply has the same shape, so only
the pooled counts and sums are decoded (:func:`site_table_counts`,
:func:`site_table_sums`). These replies are finer than a site releases in the clear
(a level held by 2 rows is counted), so a site serves them only inside masked sums
(or where its policy names them in ``finer_sums``); small-cell suppression then
applies to the pooled cells.
"""

from fractions import Fraction

import numpy as np
import pandas as pd

from .._messages import show
from ..data.site import SiteError
from ..federation.combine import Combine
from ..federation.operations import COUNTS, SUMS, Arg, site_operation
from ._levels import MISSING, sorted_levels
from ._site import MAX_COLUMNS, _column, _table, check_level_names, is_numeric

#: the most levels of one column, and strata, a layout may hold
MAX_LEVELS = 4096
#: what the pooled cells reveal of a site in the clear: why they are masked
FINER = ("each level's, stratum's and column's count and sum over any number of the "
         "site's rows, small ones included (a Table 1's pooled cells)")


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _categorical_columns(site, values):
    if hasattr(site, "map_parts"):  # an engine's partitions: text in one is text in all
        parts = site.map_parts(_categorical_columns, values)
        return [c for c in values["columns"] if any(c in part for part in parts)]
    forced = set(values.get("categorical") or ())
    return [c for c in values["columns"] if c in forced or not is_numeric(_column(site, c))]


def _level_names(site, values, rules):
    """The columns counted by level (those of the layout, else the non-numeric ones) and
    ``by`` each have their level names released: refused for an identifier-like one."""
    by, layout = values["by"], values.get("layout")
    counted = (list(layout["levels"]) if layout is not None
               else _categorical_columns(site, values))
    check_level_names(site, counted + ([by] if by is not None else []), rules)


@site_operation(
    "stats.levels", releases=COUNTS,
    describes="per column whether it is numeric, and the names of the levels of each "
              "categorical column and of by held here (no count); a column whose values "
              "are mostly in levels held by fewer than min_level_count rows refused",
    arguments=(Arg("columns", "names", most=MAX_COLUMNS), Arg("by", "name", nullable=True),
               Arg("categorical", "names", most=MAX_COLUMNS, optional=True, default=())),
    checks=(_level_names,), counts=lambda reply: [], combine=Combine(
        lambda parts, args: _union_levels(parts)))
def site_levels(site, columns, by, categorical=()):
    """A site's column kinds and level names, for the public layout of a pooled Table 1.

    Parameters
    ----------
    site : SiteData
    columns : list of str
    by : str or None
    categorical : sequence of str, default=()
        Columns counted by level whatever their type (numeric codes: 0/1).

    Returns
    -------
    reply : dict
        ``{"kinds": {column: "numeric" | "categorical"}, "levels": {column: {level:
        True, ...}}, "strata": {level of by: True, ...}}``: the levels held here
        (missing values left out), sorted, as names (keys) only.
    """
    _table(site)
    kinds = {c: "numeric" if is_numeric(_column(site, c)) and c not in set(categorical or ())
             else "categorical" for c in columns}
    levels = {c: _names(_column(site, c)) for c in columns if kinds[c] == "categorical"}
    strata = _names(_column(site, by)) if by is not None else {}
    return {"kinds": kinds, "levels": levels, "strata": strata}


def _union_levels(parts):
    """The partitions' level names as one site's: the union, sorted (the kinds of a
    column the same in every partition)."""
    kinds = parts[0]["kinds"]
    if any(p["kinds"] != kinds for p in parts):
        raise ValueError("partitions differ in a column's kind (numeric or not)")
    return {"kinds": kinds,
            "levels": {c: _union([p["levels"][c] for p in parts]) for c in parts[0]["levels"]},
            "strata": _union([p["strata"] for p in parts])}


def _union(names):
    return dict.fromkeys(sorted_levels(v for part in names for v in part), True)


def _names(series):
    """A column's levels as names: ``{level: True}``, sorted."""
    return dict.fromkeys(sorted_levels(_plain(v) for v in pd.unique(series[series.notna()])),
                         True)


def _level_list(value):
    return (isinstance(value, (list, tuple)) and len(value) <= MAX_LEVELS and all(
        isinstance(v, (str, bool, int, float, np.generic)) for v in value))


def _layout(value):
    """The form of a layout: ``{"strata": [...], "levels": {column: [...]}}``."""
    if not isinstance(value, dict) or set(value) != {"strata", "levels"}:
        return "a layout is {'strata': [...], 'levels': {column: [...]}}"
    levels = value["levels"]
    if not _level_list(value["strata"]) or not isinstance(levels, dict) or \
            len(levels) > MAX_COLUMNS or not all(
                isinstance(c, str) and _level_list(v) for c, v in levels.items()):
        return f"a layout holds at most {MAX_LEVELS} levels per column and of by"
    return None


def _strata_masks(site, by, strata):
    """One boolean mask of the site's rows per stratum of the layout: its levels of
    ``by``, the rows whose ``by`` is missing, then all rows."""
    n = site.n_samples
    if by is None:
        return [np.ones(n, dtype=bool)]
    column = _column(site, by)
    missing = column.isna().to_numpy()
    values = column.astype(object).where(~missing, MISSING).map(_plain).to_numpy()
    unknown = set(pd.unique(values[~missing])) - set(strata)
    if unknown:
        raise SiteError(site.site, f"a level of by column {show(by)} is not among the "
                                   "pooled levels.")
    return [values == g for g in strata] + [missing, np.ones(n, dtype=bool)]


def _counts(site, columns, by, layout):
    """The checks and the rows' masks shared by :func:`site_table_counts` and
    :func:`site_table_sums`."""
    X = _table(site)
    for c in list(columns) + list(layout["levels"]):
        _column(site, c)
        if c not in layout["levels"] and not is_numeric(X[c]):
            raise SiteError(site.site, f"column {show(c)} is not numeric here.")
    return X, _strata_masks(site, by, list(layout["strata"]))


@site_operation(
    "stats.table_counts", releases=SUMS, maskable=True, finer=FINER,
    describes="in the public layout (the strata of by, each categorical column's pooled "
              "levels): the row count of each stratum, each level's and the missing "
              "count per stratum, a numeric column's non-missing and missing counts per "
              "stratum; summed masked over the sites (only the pooled cells decoded)",
    arguments=(Arg("columns", "names", most=MAX_COLUMNS), Arg("by", "name", nullable=True),
               Arg("layout", "value", check=_layout)),
    checks=(_level_names,), combine="sum")
def site_table_counts(site, columns, by, layout):
    """A site's counts of a Table 1 in a public layout (a masked sum's reply).

    Parameters
    ----------
    site : SiteData
    columns : list of str
    by : str or None
    layout : dict
        ``{"strata": [levels of by], "levels": {categorical column: [levels]}}``.

    Returns
    -------
    reply : dict
        ``"sizes"``: int array of shape ``(n_strata,)``, the rows per stratum
        (the layout's strata, the missing stratum, all rows; without ``by``
        all rows only); ``"c{j}"`` for the ``j``-th column: int array of shape
        ``(n_strata, n_levels + 1)`` (each level, then missing), or for a
        numeric column ``(n_strata, 2)`` (non-missing, missing).
    """
    X, masks = _counts(site, columns, by, layout)
    out = {"sizes": np.array([m.sum() for m in masks], dtype=np.int64)}
    for j, c in enumerate(columns):
        values = X[c]
        missing = values.isna().to_numpy()
        if c not in layout["levels"]:
            out[f"c{j}"] = np.array([[(~missing & m).sum(), (missing & m).sum()]
                                     for m in masks], dtype=np.int64).reshape(len(masks), 2)
            continue
        levels = list(layout["levels"][c])
        codes = values.astype(object).where(~missing, MISSING).map(_plain).to_numpy()
        found = set(pd.unique(codes[~missing])) - set(levels)
        if found:
            raise SiteError(site.site, f"a level of column {show(c)} is not among the "
                                       "pooled levels.")
        out[f"c{j}"] = np.array([[(codes[m] == lv).sum() for lv in levels]
                                 + [(missing & m).sum()] for m in masks], dtype=np.int64)
    return out


def _centers(value):
    if not isinstance(value, (list, tuple)) or len(value) > MAX_COLUMNS or not all(
            isinstance(v, (list, tuple, np.ndarray)) and len(v) <= MAX_LEVELS + 2
            for v in value):
        return f"centers are at most {MAX_COLUMNS} lists of numbers, one per stratum"
    return None


@site_operation(
    "stats.table_sums", releases=SUMS, maskable=True, finer=FINER,
    describes="in the public layout, per numeric column and stratum: the sum of its "
              "values, or of their squared deviations from a broadcast centre; summed "
              "masked over the sites (only the pooled sums decoded)",
    arguments=(Arg("columns", "names", most=MAX_COLUMNS), Arg("by", "name", nullable=True),
               Arg("layout", "value", check=_layout),
               Arg("centers", "value", check=_centers),
               Arg("power", "int", low=1, high=2)),
    # exact sums added over an engine's partitions, rounded once: the same bits in any
    # partitioning (a masked Table 1 decodes the same numbers)
    combine=Combine(lambda parts, args: _add_exact(parts, args),
                    part=lambda *a: _exact_table_sums(*a),
                    finish=lambda sums, args, site: _rounded(sums)))
def site_table_sums(site, columns, by, layout, centers, power):
    """A site's sums of its numeric columns per stratum (a masked sum's reply).

    Parameters
    ----------
    site : SiteData
    columns : list of str
        The numeric columns.
    by : str or None
    layout : dict
        As :func:`site_table_counts`'s.
    centers : list of list of float
        Per column, one centre per stratum (NaN: that sum is not asked, 0 sent).
    power : {1, 2}
        Sums of ``x - centre`` (1) or of ``(x - centre) ** 2`` (2).

    Returns
    -------
    reply : dict
        ``"s{j}"``: float array of shape ``(n_strata,)`` for the ``j``-th column:
        each the exact sum of the rows' terms, rounded once (the same bits however
        the rows are split: an engine's partitions, in any number).
    """
    return _rounded(_exact_table_sums(site, columns, by, layout, centers, power))


def _exact_table_sums(site, columns, by, layout, centers, power):
    """:func:`site_table_sums`'s sums, exact (``Fraction``; a partition's part)."""
    X, masks = _counts(site, columns, by, layout)
    if len(centers) != len(columns) or any(len(c) != len(masks) for c in centers):
        raise SiteError(site.site, "one centre per column and stratum is needed.")
    out = {}
    for j, c in enumerate(columns):
        if c in layout["levels"]:
            raise SiteError(site.site, f"column {show(c)} is not numeric.")
        v = X[c].to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isinf(v).any():
            raise SiteError(site.site, f"column {show(c)} contains infinity.")
        sums = [Fraction(0)] * len(masks)
        for k, (m, center) in enumerate(zip(masks, centers[j])):
            center = float(center)
            if np.isnan(center):
                continue
            x = v[m & ~np.isnan(v)] - center
            sums[k] = exact_sum(x if power == 1 else x * x)
        out[f"s{j}"] = sums
    return out


def _rounded(sums):
    return {key: np.array([float(s) for s in values]) for key, values in sums.items()}


def _add_exact(parts, args):
    return {key: [sum(p[key][k] for p in parts) for k in range(len(parts[0][key]))]
            for key in parts[0]}


def exact_sum(values):
    """The exact sum of float64 values, as a :class:`~fractions.Fraction`: each value
    is an integer mantissa times a power of two, and the mantissas add exactly per
    exponent (in halves of 26 bits: no int64 overflow below 2^36 values)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[v != 0]
    if v.size == 0:
        return Fraction(0)
    m, e = np.frexp(v)
    mant, e = (m * 2.0 ** 53).astype(np.int64), e.astype(np.int64) - 53  # v = mant 2^e
    order = np.argsort((e - e.min()).astype(np.int16), kind="stable")  # a radix sort
    mant, e = mant[order], e[order]
    starts = np.flatnonzero(np.r_[True, np.diff(e) != 0])
    hi = np.add.reduceat(mant >> 26, starts)
    lo = np.add.reduceat(mant & ((1 << 26) - 1), starts)
    low = int(e[0])
    total = sum((int(h) * (1 << 26) + int(s)) << (int(x) - low)
                for h, s, x in zip(hi, lo, e[starts]))
    return Fraction(total) * (Fraction(1, 1 << -low) if low < 0 else 1 << low)
