"""The count cells of a Table 1 and the additive relations among them.

One naming for every table set :mod:`skfed.stats._audit` audits: a cell is
``(row, (group, site))`` with ``row`` a Table 1 row ``(variable, level,
statistic)``; the row ``("N", "", "count")`` holds each group's rows. A site's own
table (:func:`skfed.stats._suppress.hide_summary`) and the released table
(pooled, per-site and by-group columns, :func:`skfed.stats.describe`) are the same
cells, and a cross-table is the Table 1 of its column by its row
(:func:`skfed.stats.crosstab`).
"""

#: the row of each group's row count
N_ROW = ("N", "", "count")


def relations(column_rows, groups, total, sites, pooled=None):
    """The relations ``total = sum(parts)`` of a Table 1's count cells.

    Parameters
    ----------
    column_rows : dict
        ``{variable: [row, ...]}``: the count rows of each variable, which add up to
        the group's rows (a categorical column's levels and missing count; a numeric
        column's non-missing and missing counts).
    groups : list
        The strata (without their margin); empty without ``by``.
    total : object
        The label of the margin over the strata (all rows).
    sites : list
        The site columns whose cells are released.
    pooled : object, default=None
        The label of the column that adds the sites up, if released.

    Returns
    -------
    relations : list of (cell, list of cells)
    """
    rows = [N_ROW] + [r for rs in column_rows.values() for r in rs]
    columns = list(sites) + ([pooled] if pooled is not None else [])
    every_group = list(groups) + [total]
    out = []
    for s in columns:
        for g in every_group:  # the levels (and missing) add up to the group's rows
            out += [((N_ROW, (g, s)), [(r, (g, s)) for r in rs])
                    for rs in column_rows.values()]
        if groups:  # the strata add up to all rows
            out += [((r, (total, s)), [(r, (g, s)) for g in groups]) for r in rows]
    if pooled is not None and sites:  # the sites add up to the pooled cell
        out += [((r, (g, pooled)), [(r, (g, s)) for s in sites])
                for g in every_group for r in rows]
    return out


def relation_kind(relation, total_group, pooled=None):
    """What a relation adds up, for a reason: ``"levels"``, ``"strata"`` or
    ``"sites"``."""
    (row, (g, s)), parts = relation
    if pooled is not None and s == pooled and parts and parts[0][1][1] != s:
        return "sites"
    if row == N_ROW and parts and parts[0][0] != N_ROW:
        return "levels"
    return "strata" if g == total_group else "levels"


#: how a complementary cell's reason names the relation it would complete
RELATION_TEXT = {"levels": "a column's levels and missing count add up to its group's rows",
                 "strata": "the groups add up to all rows",
                 "sites": "the sites add up to the pooled count"}
