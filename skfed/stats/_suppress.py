"""Small-cell suppression: at each site (primary and complementary), then when pooling.

**At a site.** A site's table of counts has one axis per dimension (stratum,
level; or the row and column levels of a cross-table), and every axis gets a
margin (the sum over it: all strata, the column's total). **Primary**
suppression hides every cell, margins included, with
``0 < count < min_count`` (but the missing count of a numeric column: see
:func:`hide_summary`). **Complementary** suppression then hides more cells
until no hidden cell follows from the shown ones through the table's additive
relations, however many it takes (the interval audit of
:mod:`skfed.stats._audit`: each hidden count keeps at least two possible
values), choosing the smallest positive cell that is not a margin next to a
pinned one. The site releases only the cells left and says which it hid and
why (:func:`hide_summary`, :func:`hide_crosstab`, called by the site functions
of :mod:`skfed.stats._site`, so the in-process, Dask and site-service paths
hide the same cells).

**When pooling** released parts (no secure aggregation), the server adds only
released numbers: a pooled cell one of whose sites hid its part is hidden too
(:func:`pool`), never a sum of the parts it has. The released table set as a
whole is then audited again (:func:`skfed.stats._audit.protect`).

Zero cells are shown (they count no person).
"""

import itertools

import numpy as np

from ._audit import protect
from ._levels import MISSING, sorted_levels
from ._table_cells import N_ROW, RELATION_TEXT, relation_kind, relations

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
    reasons = {idx: (below(min_count, site) if site is not None
                     else f"fewer than {min_count} rows") for idx in zip(*np.nonzero(primary))}
    hidden = set(reasons)
    if seed is not None:
        for idx in zip(*np.nonzero(seed)):
            reasons.setdefault(idx, seed_reason + at)
            hidden.add(idx)
    lines = []  # (margin, inner cells, axis) of every line
    for axis in range(table.ndim):
        others = [range(n) for k, n in enumerate(table.shape) if k != axis]
        for rest in itertools.product(*others):
            cells = [rest[:axis] + (i,) + rest[axis:] for i in range(table.shape[axis])]
            lines.append((cells[-1], cells[:-1], axis))
    values = {idx: int(table[idx]) for idx in np.ndindex(table.shape)}
    last = [n - 1 for n in table.shape]
    axis_of = {(total, tuple(parts)): axis for total, parts, axis in lines}

    def cost(idx):  # the smallest positive inner cell first, margins last
        return (any(i == m for i, m in zip(idx, last)), values[idx] == 0, values[idx])

    def reason(idx, relation):
        name = axis_names[axis_of[relation[0], tuple(relation[1])]]
        return f"complementary{at}: with the total over {name} it would give back a " \
               "suppressed count"

    reasons.update(protect(values, hidden, [(t, p) for t, p, _ in lines], cost, reason))
    mask = np.zeros(table.shape, dtype=bool)
    for idx in hidden:
        mask[idx] = True
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
    groups = sorted_levels([g for g in sizes if g is not None]) if by is not None else []
    if by is not None and MISSING in sizes:
        groups.append(MISSING)
    values, names, column_rows = _site_cells(summary, groups, site)
    hidden = {cell for cell, v in values.items() if 0 < v < min_count
              and not (cell[0][2] == "missing" and summary["kinds"][cell[0][0]] == "numeric")}
    reasons = dict.fromkeys(hidden, below(min_count, site))

    def cost(cell):  # the smallest positive inner cell first; stratum sizes and totals last
        return (cell[0] == N_ROW or cell[1][0] is None, values[cell] == 0, values[cell])

    def reason(cell, relation):
        return (f"complementary at site {site!r}: {RELATION_TEXT[relation_kind(relation, None)]}"
                ", which would give back a suppressed count")

    reasons.update(protect(values, hidden, relations(column_rows, groups, None, [site]),
                           cost, reason))
    for g in groups + [None]:
        if (N_ROW, (g, site)) in hidden:
            sizes[g] = None
            _record(records, g, None, SIZE, reasons[N_ROW, (g, site)])
    for c, kind in summary["kinds"].items():
        for g in groups + [None]:
            for name, row in zip(names[c], column_rows[c]):
                if (row, (g, site)) in hidden:
                    _record(records, g, c, name, reasons[row, (g, site)])
                    _hide_cell(cells[g, c], name, kind == "numeric")
    return summary


def _record(records, stratum, column, cell, reason):
    """One hidden cell of :func:`hide_summary` in its ``suppressed`` list."""
    records.append({"stratum": stratum, "column": column, "cell": cell, "reason": reason})


def _site_cells(summary, groups, site):
    """A site's counts as Table 1 cells (:mod:`skfed.stats._table_cells`): ``values``
    ``{cell: count}``, each column's cell ``names`` and its Table 1 ``rows``."""
    sizes, cells = summary["sizes"], summary["cells"]
    values = {(N_ROW, (g, site)): int(sizes[g]) for g in groups + [None]}
    names, column_rows = {}, {}
    for c, kind in summary["kinds"].items():
        numeric = kind == "numeric"
        names[c] = _cell_names(cells, groups + [None], c, numeric)
        column_rows[c] = [(c, "", name) if numeric else
                          (c, "", "missing") if name == MISSING else (c, name, "count")
                          for name in names[c]]
        for g in groups + [None]:
            for name, row in zip(names[c], column_rows[c]):
                values[row, (g, site)] = int(_cell_count(cells[g, c], name, numeric))
    return values, names, column_rows


def _cell_names(cells, keys, c, numeric):
    """The cells of column ``c`` in each stratum: ``count`` and ``missing`` of a numeric
    column, else the levels seen in any stratum, then the missing marker."""
    if numeric:
        return ["count", "missing"]
    names = sorted_levels([lv for g in keys for lv in cells[g, c]["levels"]])
    names.append(MISSING)
    return names


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
