"""The count cells a Table 1 or a cross-table releases: per site and pooled, hidden where
a site or the pooled rule hid them, audited together before they are shown.

:class:`CountCells` gathers each cell ``(row, (group, site))`` (the naming of
:mod:`skfed.stats._table_cells`) from either source of the pooled cells:

- **released parts** (no secure aggregation): each site's reply in the clear,
  suppressed at the site; a pooled cell is their sum, or hidden when a site hid
  its part (:func:`skfed.stats._suppress.pool`);
- **masked sums** (secure aggregation): the pooled cells decoded from the sites'
  masked replies; the pooled rule hides ``0 < count < min_count``.

:meth:`CountCells.audit` then hides more cells, if needed, so that no hidden cell
of the released set (the pooled column, the per-site columns when shown, every
group and margin) follows from the shown ones (:func:`skfed.stats._audit.protect`).
"""

import numpy as np

from ._audit import protect
from ._suppress import pool
from ._table_cells import N_ROW, RELATION_TEXT, relation_kind, relations

#: the column label of the pooled sites and of all strata
POOLED, ALL = "pooled", "all"


def pooled_below(min_count):
    """The reason of a pooled cell hidden by the pooled rule."""
    return f"fewer than {min_count} rows over all sites"


class CountCells:
    """The count cells of one released table set (see the module docstring).

    Parameters
    ----------
    sites : list
        Every site's label, in order.
    groups : list
        The strata (without their margin ``ALL``; empty without ``by``).
    per_site : bool
        The sites' columns are released too (else the pooled column only).
    """

    def __init__(self, sites, groups, per_site):
        self.site_names = list(sites)
        self.sites = list(sites) if per_site else []
        self.groups = list(groups)
        self.values, self.hidden, self.reasons = {}, set(), {}
        self.column_rows = {}  # variable -> its count rows (adding up to N_ROW)

    def add_rows(self, variable, rows):
        self.column_rows[variable] = list(rows)

    def put(self, row, g, s, value, reason=None):
        """Cell ``(row, (g, s))``: ``value`` (NaN where unknown); ``reason``: hidden."""
        cell = (row, (g, s))
        self.values[cell] = float(value) if value is not None else np.nan
        if reason is not None:
            self.hidden.add(cell)
            self.reasons[cell] = reason

    def put_parts(self, row, g, parts, why):
        """Each site's released count (``None``: hidden, ``why(j)`` says why) and their
        pooled sum (hidden when a part is)."""
        for j, n in enumerate(parts):
            if self.sites:
                self.put(row, g, self.sites[j], n, None if n is not None else why(j))
        total, reason = pool(parts, self.site_names)
        self.put(row, g, POOLED, total, reason)

    def put_pooled(self, row, g, value, min_count, exempt=False):
        """A pooled count decoded from masked sums, hidden by the pooled rule."""
        small = 0 < value < min_count and not exempt
        self.put(row, g, POOLED, value, pooled_below(min_count) if small else None)

    def audit(self):
        """Secondary suppression over every released cell; returns the cells it hid."""
        released = set(self.sites)
        shown = {cell: v for cell, v in self.values.items()
                 if cell not in self.hidden and (cell[1][1] in released
                                                 or cell[1][1] == POOLED)}
        rels = relations(self.column_rows, self.groups, ALL, self.sites, POOLED)

        def cost(cell):  # a site's cell before a pooled one; inner cells before margins
            v = shown[cell]
            return (cell[1][1] == POOLED, cell[0] == N_ROW or cell[1][0] == ALL, v == 0, v)

        def reason(cell, relation):
            kind = relation_kind(relation, ALL, POOLED)
            return (f"complementary: {RELATION_TEXT[kind]}, which would give back a "
                    "suppressed count")

        added = protect(shown, self.hidden, rels, cost, reason)
        self.reasons.update(added)
        return added

    def is_hidden(self, row, g, s):
        return (row, (g, s)) in self.hidden

    def value(self, row, g, s):
        return self.values.get((row, (g, s)), np.nan)
