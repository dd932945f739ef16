"""Table 1 as a journal prints it: text cells laid out from a
:class:`~skfed.stats.DescribeResult`, for its exports and the command line's outputs.

The layout is tableone's and gtsummary's: one column per group, its ``n`` in the
header (``"yes (n = 246)"``); per variable a heading row (its label, with its
unit) and beneath it mean (SD) and median [Q1, Q3] of a numeric column, or n (%)
per level of a categorical one; a binary column (``0/1``, ``False/True``,
``no/yes``) as one row, the n (%) of its ``1``/``True``/``yes`` level; a
``missing`` row only where a value is missing. Suppressed cells show ``<5`` (a
count below the threshold) or ``suppressed`` with a numbered footnote giving the
reason. With ``by``, the p-value and the SMD of each variable sit on its heading
row.
"""

import math
import re

import numpy as np

from .._format import fixed, format_p, mean_decimals
from ._cells import ALL, POOLED

#: the decimals of a standardized mean difference
SMD_DECIMALS = 3
#: the columns :func:`layout` adds when the groups of ``by`` are compared
COMPARISON_HEADERS = [("", "p-value"), ("", "SMD")]
#: the levels of a binary column whose "yes" one is shown alone (gtsummary's rule), in
#: lower case (a code read as text: "0"/"1")
BINARY = ({0, 1}, {False, True}, {"no", "yes"}, {"0", "1"}, {"false", "true"})
YES = (1, True, "yes", "1", "true")


class Footnotes:
    """Numbered reasons: the same reason always gets the same number."""

    def __init__(self):
        self.reasons = []

    def mark(self, reason):
        """The footnote number of ``reason``, a new one the first time it is seen."""
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self.reasons.index(reason) + 1


def hidden_text(reason):
    """``<5`` for a count below the threshold, ``suppressed`` for any other reason."""
    m = re.match(r"fewer than (\d+) rows", reason)
    return f"<{m.group(1)}" if m else "suppressed"


def binary_level(levels):
    """The level a binary column shows alone (``1``, ``True``, ``"yes"``), or ``None``."""
    if len(levels) != 2:
        return None
    folded = {lv.lower() if isinstance(lv, str) else lv for lv in levels}
    if folded not in BINARY:
        return None
    return next(lv for lv in levels if (lv.lower() if isinstance(lv, str) else lv) in YES)


def group_name(group):
    return "Overall" if group == ALL else str(group)


class _Cells:
    """The rows of Table 1 being laid out: values, suppression marks, footnotes."""

    def __init__(self, result, headers):
        self.result = result
        self.table, self.mask = result.table, result.mask
        self.why = {(r.variable, r.level, r.statistic, r.group, r.site): r.reason
                    for r in result.suppressed.itertuples()}
        self.headers = headers
        self.notes = Footnotes()
        self.rows = []
        self.headings = {}  # row index -> the variable whose name the row shows
        self.decimals = {}  # variable -> the decimals of its mean, SD and quantiles

    def add(self, label, depth, cell, *args):
        """A row: ``cell(*args, col)`` for each shown column."""
        self.rows.append((label, depth, [cell(*args, col) for col in self.headers]))

    def heading(self, label, var, cell=None, *args):
        """A variable's name on a row of its own (or with its one value: a binary
        column)."""
        self.headings[len(self.rows)] = var
        if cell is None:
            self.rows.append((label, 0, [("", None)] * len(self.headers)))
        else:
            self.add(label, 0, cell, *args)

    def choose_decimals(self, var):
        """One number of decimals for every column of ``var``, from its SD (the pooled
        one of all rows when shown, else the largest shown)."""
        sds = self.table.loc[(var, "", "std")].where(~self.mask.loc[(var, "", "std")])
        pooled = sds.get((ALL, POOLED), np.nan)
        sd = pooled if not math.isnan(pooled) else sds.max()
        self.decimals[var] = mean_decimals(float(sd))

    def _num(self, var, v):
        return fixed(v, self.decimals.get(var, 1))

    def value(self, var, level, stat, col):
        return self.table.loc[(var, level, stat), col], self.mask.loc[(var, level, stat), col]

    def hidden(self, var, level, stat, col):
        """A suppressed cell: ``<5`` for a small count, else ``suppressed``; footnoted."""
        r = (self.why.get((var, level, stat, *col))
             or self.why.get((var, "", "count", *col)))
        if stat in ("count", "missing") or var == "N":
            return (hidden_text(r), self.notes.mark(r))
        return ("suppressed", self.notes.mark(r))

    def mean_sd(self, var, col):
        (m, h), (s, _) = self.value(var, "", "mean", col), self.value(var, "", "std", col)
        if h:
            return self.hidden(var, "", "mean", col)
        if math.isnan(m):
            return ("", None)
        text = self._num(var, m)
        return (f"{text} ({self._num(var, s)})" if not math.isnan(s) else text, None)

    def median_iqr(self, var, col):
        vals = [self.value(var, "", q, col) for q in ("50%", "25%", "75%")]
        if vals[0][1]:
            return self.hidden(var, "", "50%", col)
        if any(math.isnan(v) for v, _ in vals):
            return ("", None)
        median, q1, q3 = (self._num(var, v) for v, _ in vals)
        return (f"{median} [{q1}, {q3}]", None)

    def quantile(self, var, q, col):
        v, h = self.value(var, "", q, col)
        if h:
            return self.hidden(var, "", q, col)
        return ("", None) if math.isnan(v) else (self._num(var, v), None)

    def count(self, var, level, stat, col):
        """A count with its share of the column's rows (no share when N is suppressed)."""
        v, h = self.value(var, level, stat, col)
        if h:
            return self.hidden(var, level, stat, col)
        n_total, n_hidden = self.value("N", "", "count", col)
        if stat == "count" and level == "" or n_hidden or not n_total:
            return (f"{int(v)}", None)
        return (f"{int(v)} ({100 * v / n_total:.1f}%)", None)

    def present(self, var, level, stat):
        """A missing-count row is laid out only where some value is missing (its pooled
        count of all rows is not a shown 0)."""
        v, h = self.value(var, level, stat, (ALL, POOLED))
        return h or v != 0


def _numeric_rows(cells, var, stats):
    """A numeric column: mean (SD), median [Q1, Q3] when all three are there, then any
    other quantile on a row of its own; its missing count to lay out."""
    cells.heading(cells.result.label(var), var)
    cells.choose_decimals(var)
    cells.add("mean (SD)", 1, cells.mean_sd, var)
    qs = [q for q in stats if q.endswith("%")]
    if {"25%", "50%", "75%"} <= set(qs):
        cells.add("median [Q1, Q3]", 1, cells.median_iqr, var)
        qs = [q for q in qs if q not in ("25%", "50%", "75%")]
    for q in qs:
        cells.add(q, 1, cells.quantile, var, q)
    return [("missing", "", "missing")]  # the non-missing: the group's n less these


def _categorical_rows(cells, var, part):
    """A categorical column's heading (a binary one's count on it); its levels (and
    missing) to lay out."""
    levels = [lv for lv in part.index.get_level_values("level") if lv != ""]
    label = cells.result.label(var)
    one = binary_level(levels)
    if one is not None:
        cells.heading(f"{label}, n (%)", var, cells.count, var, one, "count")
        return [("missing", "", "missing")]
    cells.heading(f"{label}, n (%)", var)
    return [(str(lv), lv, "count") for lv in levels] + [("missing", "", "missing")]


def layout(result, per_site=None):
    """Table 1 as text cells: ``(headers, rows, footnotes)``.

    Parameters
    ----------
    result : DescribeResult
    per_site : bool, optional
        Each site's column too (default: when the result holds them).

    Returns
    -------
    headers : list of (group, site)
        One per column (then ``("", "p-value")`` and ``("", "SMD")`` with a
        comparison of the groups).
    rows : list of (label, depth, cells)
        Each cell a ``(text, footnote number or None)``.
    footnotes : list of str
        The reasons, footnote ``k`` at index ``k - 1``.
    """
    table = result.table
    sites = result.sites if per_site is None or per_site else []
    groups = list(table.columns.get_level_values("group").unique())
    cells = _Cells(result, [(g, s) for g in groups for s in [POOLED] + sites])
    variables = list(dict.fromkeys(table.index.get_level_values("variable")))[1:]
    for var in variables:
        part = table.loc[var]
        stats = list(dict.fromkeys(part.index.get_level_values("statistic")))
        if "mean" in stats:
            levels = _numeric_rows(cells, var, stats)
        else:
            levels = _categorical_rows(cells, var, part)
        for label, level, stat in levels:
            if stat == "missing" and not cells.present(var, level, stat):
                continue
            cells.add(label, 1, cells.count, var, level, stat)
    if result.comparison is None:
        return cells.headers, cells.rows, cells.notes.reasons
    return (cells.headers + COMPARISON_HEADERS, _with_comparison(cells, result.comparison),
            cells.notes.reasons)


def _with_comparison(cells, comparison):
    """The rows with the p-value and the SMD on each variable's heading row (tableone's
    layout); a p-value not computed is ``n/a`` with a footnote saying why."""
    rows = []
    for k, (label, depth, row_cells) in enumerate(cells.rows):
        var = cells.headings.get(k)
        extra = [("", None), ("", None)]
        if var is not None:
            p, smd, note = comparison.loc[var, ["p_value", "smd", "note"]]
            extra = [("n/a", cells.notes.mark(note)) if math.isnan(p) else (format_p(p), None),
                     ("n/a", None) if math.isnan(smd) else (fixed(smd, SMD_DECIMALS), None)]
        rows.append((label, depth, row_cells + extra))
    return rows


def header_lines(result, headers):
    """The header rows: each group's name and ``n`` over its first column, and, with
    per-site columns, each column's site and its ``n``."""
    def n_text(col):
        if col[0] == "" or ("N", "", "count") not in result.table.index:
            return ""
        n, hidden = (result.table.loc[("N", "", "count"), col],
                     result.mask.loc[("N", "", "count"), col])
        return "n suppressed" if hidden else f"n = {int(n)}"

    groups = []
    for k, (g, s) in enumerate(headers):
        first = k == 0 or headers[k - 1][0] != g
        groups.append(s if g == "" else "" if not first else
                      f"{group_name(g)} ({n_text((g, POOLED))})")
    if not result.sites or all(s in (POOLED, "p-value", "SMD") for _, s in headers):
        return [groups]
    return [groups, ["" if g == "" else "pooled" if s == POOLED else f"{s} ({n_text((g, s))})"
                     for g, s in headers]]
