"""The cells of a federated Table 1 as :func:`~skfed.stats.describe` gathers them.

Two sources of the pooled cells (:mod:`skfed.stats._cells`):

- :func:`from_parts`: each site's summary in the clear
  (:func:`~skfed.stats._site.site_describe`, its small counts hidden at the site);
  the pooled counts are the sums of the released parts, the pooled moments
  Chan's merge of the sites' moments;
- :func:`from_masked`: the sites' level names (:func:`~skfed.stats._site_cells.site_levels`)
  make a public layout; the counts, then the sums of the numeric columns, then
  their squared deviations about the pooled means are summed masked over the
  sites (:mod:`skfed.stats._site_cells`), so that only the pooled cells are
  decoded, and the pooled rule hides the small ones. Per-site columns, when asked,
  are each site's summary in the clear as above.

Either way the released cells are then audited together
(:meth:`~skfed.stats._cells.CountCells.audit`) before any statistic is computed,
so that a hidden count's mean, SD and quantiles are never asked for.
"""

import numpy as np
import pandas as pd

from ..federation.session import FederationSession
from .._messages import show
from ._cells import ALL, POOLED, CountCells
from ._levels import MISSING, sorted_levels
from ._moments import chan_moments, pooled_quantiles, quantile_name
from ._site import site_describe
from ._site_cells import site_levels, site_table_counts, site_table_sums
from ._suppress import SIZE
from ._table_cells import N_ROW


def _stratum(g):
    """A table group as the sites name it (all rows: ``None``)."""
    return None if g == ALL else g


def count_rows(c, numeric, levels=()):
    """The count rows of column ``c``: each level and missing, or non-missing and
    missing; with each row's cell name at a site."""
    if numeric:
        return [((c, "", "count"), "count"), ((c, "", "missing"), "missing")]
    return [((c, lv, "count"), lv) for lv in levels] + [((c, "", "missing"), MISSING)]


class Table1:
    """The cells of one Table 1: the counts (:class:`~skfed.stats._cells.CountCells`)
    and the statistics of the numeric columns, per group and shown site."""

    def __init__(self, sites, strata, columns, kinds, per_site, quantiles):
        self.cells = CountCells(sites, strata, per_site)
        self.strata, self.columns, self.kinds = list(strata), list(columns), kinds
        self.quantiles = list(quantiles)
        self.levels = {}
        self.stats = {}  # (row, (group, site)) -> a mean, SD or quantile
        self.queries = []  # (row, group, column, n, q): the pooled quantiles to find

    @property
    def groups(self):
        return self.strata + [ALL]

    @property
    def shown(self):
        return self.cells.sites + [POOLED]

    def stat_rows(self, c):
        return [(c, "", "mean"), (c, "", "std")] + [(c, "", quantile_name(q))
                                                    for q in self.quantiles]

    def rows(self, c):
        return count_rows(c, self.kinds[c] == "numeric", self.levels.get(c, ()))

    def count_hidden(self, c, g, s):
        return self.cells.is_hidden((c, "", "count"), g, s)

    def put_site_statistics(self, replies):
        """Each shown site's mean, SD and own quantiles (from its summary)."""
        for j, s in enumerate(self.cells.sites):
            for c in self.columns:
                if self.kinds[c] != "numeric":
                    continue
                for g in self.groups:
                    part = replies[j]["cells"].get((_stratum(g), c)) or {"count": 0}
                    if self.count_hidden(c, g, s) or not part["count"]:
                        continue
                    mean, std = chan_moments([part])
                    values = [mean, std] + [float(v) for v in part["quantiles"]]
                    for row, v in zip(self.stat_rows(c), values):
                        self.stats[row, (g, s)] = v

    def queue_quantiles(self, c, g, n):
        for q, row in zip(self.quantiles, self.stat_rows(c)[2:]):
            self.queries.append((row, g, c, int(n), q))

    def find_quantiles(self, data, by):
        """The pooled quantiles queued, in one federated bisection."""
        found = pooled_quantiles(data, by, [(_stratum(g), c, n, q)
                                            for _, g, c, n, q in self.queries])
        for (row, g, _, _, _), v in zip(self.queries, found):
            self.stats[row, (g, POOLED)] = v

    # -- the result ---------------------------------------------------------
    def frames(self):
        """``(table, mask, records)``: the table (hidden cells NaN), where it is hidden,
        and one ``(variable, level, statistic, group, site, reason)`` per hidden count."""
        cells = self.cells
        columns = [(g, s) for g in [ALL] + self.strata for s in self.shown]
        rows = [N_ROW]
        for c in self.columns:
            rows += [row for row, _ in self.rows(c)]
            rows += self.stat_rows(c) if self.kinds[c] == "numeric" else []
        values, mask, records = [], [], []
        for row in rows:
            is_count = row == N_ROW or row[2] in ("count", "missing")
            v_row, m_row = [], []
            for col in columns:
                hidden = (row, col) in cells.hidden if is_count else \
                    self.count_hidden(row[0], *col)
                value = cells.values.get((row, col), np.nan) if is_count else \
                    self.stats.get((row, col), np.nan)
                v_row.append(np.nan if hidden else value)
                m_row.append(hidden)
                if hidden and is_count:
                    records.append((*row, *col, cells.reasons[row, col]))
            values.append(v_row)
            mask.append(m_row)
        index = pd.MultiIndex.from_tuples(rows, names=["variable", "level", "statistic"])
        header = pd.MultiIndex.from_tuples(columns, names=["group", "site"])
        return (pd.DataFrame(values, index=index, columns=header),
                pd.DataFrame(mask, index=index, columns=header), records)


# -- released parts ---------------------------------------------------------------------
def column_kinds(replies, columns):
    """``{column: "numeric" | "categorical"}``, the same at every site (else an error)."""
    kinds = {}
    for c in columns:
        found = {r["kinds"][c] for r in replies}
        if len(found) > 1:
            raise ValueError(f"column {show(c)} is numeric at some sites and not at others.")
        kinds[c] = found.pop()
    return kinds


def _reply_strata(replies, by):
    """The levels of ``by`` the sites hold (missing values last), or none."""
    if by is None:
        return []
    strata = sorted_levels([g for r in replies for g in r["sizes"] if g is not None])
    if any(MISSING in r["sizes"] for r in replies):
        strata.append(MISSING)
    return strata


def _part(reply, g, c, name, numeric):
    """A site's count of cell ``name`` of column ``c`` in group ``g`` (0 if absent)."""
    x = reply["cells"].get((_stratum(g), c))
    if x is None:
        return 0
    if numeric or name == MISSING:
        return x["missing" if name == MISSING else name]
    return x["levels"].get(name, 0)


def site_summaries(data, columns, by, quantiles, k, categorical=()):
    """Each site's summary in the clear, its small counts hidden at the site."""
    return FederationSession.for_dataset(data).per_site(
        site_describe, columns, by, quantiles, k, list(categorical), phase="analysis")


def _put_site_counts(table, replies, pooled):
    """The sites' released counts (and, with ``pooled``, their sums as the pooled
    cells)."""
    cells = table.cells
    why = [{(x["stratum"], x["column"], x["cell"]): x["reason"] for x in r["suppressed"]}
           for r in replies]
    todo = [(N_ROW, None, SIZE, None)] + [(row, c, name, c) for c in table.columns
                                          for row, name in table.rows(c)]
    for row, column, name, c in todo:
        for g in table.groups:
            if c is None:
                parts = [r["sizes"].get(_stratum(g), 0) for r in replies]
            else:
                parts = [_part(r, g, c, name, table.kinds[c] == "numeric") for r in replies]

            def reason(j, g=g, column=column, name=name):
                return why[j][_stratum(g), column, name]
            if pooled:
                cells.put_parts(row, g, parts, reason)
            else:
                for j, (s, n) in enumerate(zip(cells.sites, parts)):
                    cells.put(row, g, s, n, None if n is not None else reason(j))


def from_parts(data, columns, by, quantiles, k, per_site, categorical=()):
    """A Table 1 pooled from the sites' released summaries (see the module)."""
    replies = site_summaries(data, columns, by, quantiles, k, categorical)
    kinds = column_kinds(replies, columns)
    table = Table1(list(data.sites), _reply_strata(replies, by), columns, kinds, per_site,
                   quantiles)
    for c in columns:
        if kinds[c] == "categorical":
            table.levels[c] = sorted_levels([lv for r in replies for (_, col), x in
                                             r["cells"].items() if col == c
                                             for lv in x["levels"]])
        table.cells.add_rows(c, [row for row, _ in table.rows(c)])
    _put_site_counts(table, replies, pooled=True)
    table.cells.audit()
    table.put_site_statistics(replies)
    for c in columns:
        if kinds[c] != "numeric":
            continue
        for g in table.groups:
            if table.count_hidden(c, g, POOLED):
                continue
            parts = [x for r in replies for x in [r["cells"].get((_stratum(g), c))]
                     if x is not None and x["count"]]
            mean, std = chan_moments(parts)
            table.stats[(c, "", "mean"), (g, POOLED)] = mean
            table.stats[(c, "", "std"), (g, POOLED)] = std
            if parts:
                table.queue_quantiles(c, g, sum(x["count"] for x in parts))
    table.find_quantiles(data, by)
    return table


# -- masked sums ------------------------------------------------------------------------
def _layout(replies, columns, by):
    """The public layout from the sites' level names: ``(kinds, layout)``."""
    kinds = column_kinds(replies, columns)
    levels = {c: sorted_levels([lv for r in replies for lv in r["levels"][c]])
              for c in columns if kinds[c] == "categorical"}
    strata = sorted_levels([g for r in replies for g in r["strata"]]) if by else []
    if ALL in strata:
        raise ValueError(f"by column {show(by)} has a level {ALL!r}, the label of all strata.")
    return kinds, {"strata": strata, "levels": levels}


def from_masked(data, privacy, columns, by, quantiles, k, per_site, categorical=()):
    """A Table 1 whose pooled cells are masked sums over the sites (see the module)."""
    from ..privacy.masked_sums import masked_session

    session = FederationSession.for_dataset(data)
    kinds, layout = _layout(session.per_site(site_levels, columns, by, list(categorical),
                                             phase="analysis"), columns, by)
    replies = site_summaries(data, columns, by, quantiles, k, categorical) if per_site \
        else None
    with masked_session(data, privacy) as masked:
        counts = masked.sum(site_table_counts, columns, by, layout, phase="analysis")
        strata = layout["strata"] + ([MISSING] if by and counts["sizes"][-2] > 0 else [])
        index = ({g: i for i, g in enumerate(layout["strata"] + [MISSING, ALL])} if by
                 else {ALL: 0})
        table = Table1(list(data.sites), strata, columns, kinds, per_site, quantiles)
        table.levels = layout["levels"]
        _put_pooled_counts(table, counts, index, k)
        if per_site:
            _put_site_counts(table, replies, pooled=False)
        table.cells.audit()
        if per_site:
            table.put_site_statistics(replies)
        _pooled_moments(table, masked, counts, index, layout, by)
    table.find_quantiles(data, by)
    return table


def _put_pooled_counts(table, counts, index, k):
    """The pooled counts decoded from the masked sums, the pooled rule applied."""
    cells = table.cells
    for g in table.groups:
        cells.put_pooled(N_ROW, g, int(counts["sizes"][index[g]]), k)
    for j, c in enumerate(table.columns):
        rows = table.rows(c)
        cells.add_rows(c, [row for row, _ in rows])
        numeric = table.kinds[c] == "numeric"
        for g in table.groups:
            for i, (row, name) in enumerate(rows):
                # a numeric column's missing count is N minus its count: shown (see
                # skfed.stats._suppress.hide_summary)
                cells.put_pooled(row, g, int(counts[f"c{j}"][index[g], i]), k,
                                 exempt=numeric and name == "missing")


def _pooled_moments(table, masked, counts, index, layout, by):
    """The pooled means (masked sums over the pooled counts) and SDs (masked sums of
    squared deviations about them) of the shown non-missing counts; their quantiles
    queued."""
    numeric = [c for c in table.columns if table.kinds[c] == "numeric"]
    if not numeric:
        return
    n = {c: counts[f"c{table.columns.index(c)}"][:, 0].astype(float) for c in numeric}
    order = sorted(index, key=index.get)
    asked = {c: np.array([0.0 if g in table.groups and not table.count_hidden(c, g, POOLED)
                          and n[c][index[g]] > 0 else np.nan for g in order])
             for c in numeric}
    sums = masked.sum(site_table_sums, numeric, by, layout, [asked[c] for c in numeric], 1,
                      phase="analysis")
    means = {c: sums[f"s{j}"] / np.where(np.isnan(asked[c]), 1.0, n[c])
             + asked[c] for j, c in enumerate(numeric)}
    squares = masked.sum(site_table_sums, numeric, by, layout, [means[c] for c in numeric],
                         2, phase="analysis")
    for j, c in enumerate(numeric):
        for g in table.groups:
            i = index[g]
            if np.isnan(asked[c][i]):
                continue
            count = n[c][i]
            std = float(np.sqrt(squares[f"s{j}"][i] / (count - 1))) if count > 1 else np.nan
            table.stats[(c, "", "mean"), (g, POOLED)] = float(means[c][i])
            table.stats[(c, "", "std"), (g, POOLED)] = std
            table.queue_quantiles(c, g, count)
