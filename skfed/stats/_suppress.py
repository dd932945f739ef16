"""Small-cell suppression: at each site (primary and complementary), then when pooling.

**At a site.** A site's table of counts has one axis per dimension (stratum,
level; or the row and column levels of a cross-table), and every axis gets a
margin (the sum over it: all strata, the column's total). **Primary**
suppression hides every cell, margins included, with
``0 < count < min_count`` (but the missing count of a numeric column: see
:func:`hide_summary`). **Complementary** suppression then looks at every
line of the table (the cells along one axis with their margin, which is
their sum): a line with exactly one hidden cell would give it back by
subtraction, so one more cell of that line is hidden -- the smallest
positive one that is not a margin (else the smallest cell that is not a
margin, else the margin) -- and the lines are checked again until no line has
exactly one hidden cell. The site releases only the cells left and says
which it hid and why (:func:`hide_summary`, :func:`hide_crosstab`, called by
the site functions of :mod:`skfed.stats._site`, so the in-process, Dask and
site-service paths hide the same cells).

**When pooling.** The server adds only released numbers: a pooled cell one
of whose sites hid its part is hidden too (:func:`pool`), never a sum of the
parts it has. A pooled line then has no single hidden cell either (each of
its hidden cells is hidden in some site's line, which hides a second one),
and along the sites a hidden site cell always comes with its hidden pooled
cell.

This closes recovery by one subtraction along any line; like every simple
heuristic (and unlike a linear-programming audit such as tau-argus) it does
not prove that no combination of several lines recovers a hidden cell.
Zero cells are shown (they count no person).
"""

import itertools

import numpy as np

from ._levels import MISSING, sorted_levels

#: the cell name of a stratum's row count in :func:`hide_summary`'s records
SIZE = "N"


def with_margins(inner):
    """``inner`` with one more index on every axis holding the sum over that axis."""
    out = np.asarray(inner, dtype=np.int64)
    for axis in range(out.ndim):
        out = np.concatenate([out, out.sum(axis=axis, keepdims=True)], axis=axis)
    return out


def below(min_count, site):
    """The reason of a primary suppression."""
    return f"fewer than {min_count} rows at site {site!r}"


def suppress(table, min_count, seed=None, axis_names=None, site=None,
             seed_reason="its stratum's size is suppressed", exempt=None):
    """Suppression mask of a table with margins (see the module docstring).

    Parameters
    ----------
    table : ndarray of int
        Counts with margins (:func:`with_margins`): the last index of every
        axis is the sum over that axis.
    min_count : int
        Cells with ``0 < count < min_count`` are hidden.
    seed : ndarray of bool, default=None
        Cells already hidden (e.g. a stratum size hidden in another table).
    axis_names : list of str, default=None
        For the reasons.
    site : str, default=None
        The site whose table it is, for the reasons.
    seed_reason : str, default="its stratum's size is suppressed"
        The reason of the ``seed`` cells.
    exempt : ndarray of bool, default=None
        Cells that are never hidden for being small (no primary
        suppression); they may still be hidden as a complement.

    Returns
    -------
    mask : ndarray of bool
        Hidden cells.
    reasons : dict
        ``{cell index: reason}`` for every hidden cell.
    """
    table = np.asarray(table)
    axis_names = axis_names or [f"axis {a}" for a in range(table.ndim)]
    at = "" if site is None else f" at site {site!r}"
    primary = (table > 0) & (table < min_count)
    if exempt is not None:
        primary &= ~exempt
    mask = primary.copy()
    reasons = {idx: (below(min_count, site) if site is not None
                     else f"fewer than {min_count} rows") for idx in zip(*np.nonzero(primary))}
    if seed is not None:
        for idx in zip(*np.nonzero(seed & ~mask)):
            reasons[idx] = seed_reason + at
        mask |= seed
    changed = True
    while changed:
        changed = False
        for axis in range(table.ndim):
            others = [range(s) for k, s in enumerate(table.shape) if k != axis]
            for rest in itertools.product(*others):
                cells = [rest[:axis] + (i,) + rest[axis:] for i in range(table.shape[axis])]
                hidden = [c for c in cells if mask[c]]
                if len(hidden) != 1:
                    continue
                inner = cells[:-1]
                candidates = ([c for c in inner if not mask[c] and table[c] > 0]
                              or [c for c in inner if not mask[c]] or [cells[-1]])
                pick = min(candidates, key=lambda c: table[c])
                mask[pick] = True
                reasons[pick] = (f"complementary{at}: with the total over {axis_names[axis]} "
                                 "it would give back a suppressed count")
                changed = True
    return mask, {tuple(int(i) for i in k): v for k, v in reasons.items()}


def hide_summary(summary, by, min_count, site):
    """Hide the small counts of one site's :func:`~skfed.stats._site.site_describe` reply.

    The site's tables: the stratum sizes (strata with their margin, all
    rows; without ``by`` the one row count) and, per column, strata x
    (levels and missing, or non-missing and missing) with margins, whose
    total column is the stratum sizes (hidden where they are). A hidden
    count becomes ``None``; a hidden non-missing count takes the cell's
    mean, sum of squares, quantiles, minimum and maximum with it (NaN).

    The missing count of a numeric column is not hidden for being small:
    with the stratum's (released) row count it equals ``N - count``, so
    hiding it would hide the non-missing count too, and with it the
    column's mean, SD and quantiles at this site and pooled, for a few
    missing values. It is hidden as the complement of a small non-missing
    count (fewer values than ``min_count``: too few for a mean), as
    DataSHIELD releases its ``Nmissing`` beside a mean of enough values.

    Parameters
    ----------
    summary : dict
        The reply, changed in place: ``sizes`` and ``cells`` get their
        hidden counts as ``None``, and ``suppressed`` lists every hidden cell
        as ``{"stratum", "column", "cell", "reason"}`` (``column`` ``None``
        and ``cell`` ``"N"`` for a stratum size; ``cell`` a level, the
        missing marker, or ``"count"``/``"missing"`` of a numeric column).
    by : str or None
    min_count : int
    site : str
        The site's name, for the reasons.

    Returns
    -------
    summary : dict
    """
    records = summary["suppressed"] = []
    if min_count <= 1:
        return summary
    sizes, cells = summary["sizes"], summary["cells"]
    strata = sorted_levels([g for g in sizes if g is not None])
    if MISSING in sizes:
        strata.append(MISSING)
    n_mask = _hide_sizes(sizes, strata, by, min_count, site, records)
    for c, kind in summary["kinds"].items():
        _hide_column(cells, c, kind == "numeric", strata, by, n_mask, min_count, site,
                     records)
    return summary


def _record(records, stratum, column, cell, reason):
    """One hidden cell of :func:`hide_summary` in its ``suppressed`` list."""
    records.append({"stratum": stratum, "column": column, "cell": cell, "reason": reason})


def _hide_sizes(sizes, strata, by, min_count, site, records):
    """Hide the small stratum sizes in ``sizes`` (and their complements); returns the mask
    over ``strata`` then all rows (without ``by``: all rows only)."""
    keys = strata + [None]  # inner strata, then their margin (all rows)
    if by is not None:
        n_mask, n_reasons = suppress(with_margins(np.array([sizes[g] for g in strata],
                                                           dtype=np.int64)), min_count,
                                     axis_names=["strata"], site=site)
    else:
        n_mask = np.array([0 < sizes[None] < min_count])
        n_reasons = {(0,): below(min_count, site)}
    for j, g in enumerate(keys):
        if n_mask[j]:
            sizes[g] = None
            _record(records, g, None, SIZE, n_reasons[(j,)])
    return n_mask


def _hide_column(cells, c, numeric, strata, by, n_mask, min_count, site, records):
    """Hide the small counts of column ``c`` in ``cells``: its table strata x cells with
    margins, whose total column is the stratum sizes (hidden where ``n_mask`` is)."""
    keys = strata + [None]
    names = _cell_names(cells, keys, c, numeric)
    table = with_margins(_column_counts(cells, strata, c, names, numeric, by))
    seed = np.zeros(table.shape, dtype=bool)
    seed[..., -1] = n_mask
    axes = ["strata", "levels"] if by is not None else ["levels"]
    # a numeric column's missing count is N - count: hiding a small one would hide the
    # non-missing count with it, and so the column's mean, SD and quantiles (it is hidden
    # only as the complement of a small non-missing count)
    exempt = np.zeros(table.shape, dtype=bool)
    if numeric:
        exempt[..., names.index("missing")] = True
    mask, reasons = suppress(table, min_count, seed=seed, axis_names=axes, site=site,
                             exempt=exempt)
    for j, g in enumerate(keys if by is not None else [None]):
        x = cells[g, c]
        for i, name in enumerate(names):
            idx = (j, i) if by is not None else (i,)
            if not mask[idx]:
                continue
            _record(records, g, c, name, reasons[idx])
            _hide_cell(x, name, numeric)


def _cell_names(cells, keys, c, numeric):
    """The cells of column ``c`` in each stratum: ``count`` and ``missing`` of a numeric
    column, else the levels seen in any stratum, then the missing marker."""
    if numeric:
        return ["count", "missing"]
    names = sorted_levels([lv for g in keys for lv in cells[g, c]["levels"]])
    names.append(MISSING)
    return names


def _column_counts(cells, strata, c, names, numeric, by):
    """The counts of column ``c``'s cells ``names``: strata x cells (without ``by``: the
    cells of all rows)."""
    if by is not None:
        inner = np.zeros((len(strata), len(names)), dtype=np.int64)
        for j, g in enumerate(strata):
            inner[j] = [_cell_count(cells[g, c], name, numeric) for name in names]
        return inner
    return np.array([_cell_count(cells[None, c], name, numeric) for name in names],
                    dtype=np.int64)


def _cell_count(x, name, numeric):
    """The count of cell ``name`` in ``x``, one stratum's summary of a column."""
    if numeric or name == MISSING:
        return x["missing" if name == MISSING else name]
    return x["levels"].get(name, 0)


def _hide_cell(x, name, numeric):
    """Hide cell ``name`` of ``x`` (``None``); a numeric column's statistics go with its
    non-missing count."""
    if numeric:
        x[name] = None
        if name == "count":  # its statistics go with it
            x.update(mean=np.nan, mean_lo=np.nan, m2=np.nan, min=np.nan,
                     max=np.nan, quantiles=np.full(len(x["quantiles"]), np.nan))
    elif name == MISSING:
        x["missing"] = None
    else:
        x["levels"][name] = None


def hide_crosstab(counts, min_count, site, names=("rows", "columns")):
    """Hide the small cells of one site's cross-table (levels, missing included, x levels).

    Parameters
    ----------
    counts : dict
        ``{(row level, column level): count}`` of the pairs that occur.
    min_count : int
    site : str
    names : tuple of str, default=("rows", "columns")
        The two columns' names, for the reasons.

    Returns
    -------
    released : dict
        ``{(row level, column level): count or None}`` with the margins
        under ``None`` keys (``(a, None)``: row ``a``'s total, ``(None, b)``,
        ``(None, None)``: every row); hidden cells ``None``.
    suppressed : list of dict
        ``{"row", "col", "reason"}`` per hidden cell (``None`` for a margin).
    """
    rows = sorted_levels([a for a, _ in counts])
    cols = sorted_levels([b for _, b in counts])
    rows += [MISSING] if any(a == MISSING for a, _ in counts) else []
    cols += [MISSING] if any(b == MISSING for _, b in counts) else []
    table = with_margins([[counts.get((a, b), 0) for b in cols] for a in rows])
    mask, reasons = suppress(table, max(int(min_count), 1), site=site,
                             axis_names=[f"the levels of {names[0]!r}",
                                         f"the levels of {names[1]!r}"])
    keys_r, keys_c = rows + [None], cols + [None]
    released, suppressed = {}, []
    for i, a in enumerate(keys_r):
        for j, b in enumerate(keys_c):
            n = int(table[i, j])
            if mask[i, j]:
                released[a, b] = None
                suppressed.append({"row": a, "col": b, "reason": reasons[(i, j)]})
            elif n or a is None or b is None:
                released[a, b] = n
    return released, suppressed


def pool(parts, sites):
    """A pooled count from the sites' released parts: their sum, or ``None`` and why.

    Parameters
    ----------
    parts : list of (int or None)
        Each site's released count (``None``: hidden there; a site without
        the cell sends 0).
    sites : list of str

    Returns
    -------
    total : int or None
    reason : str or None
        Which sites hid their part, when ``total`` is ``None``.
    """
    hidden = [s for s, p in zip(sites, parts) if p is None]
    if not hidden:
        return int(sum(parts)), None
    names = ", ".join(repr(s) for s in hidden)
    return None, (f"not pooled: site {names} suppressed its count" if len(hidden) == 1 else
                  f"not pooled: sites {names} suppressed their counts")
