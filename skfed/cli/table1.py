"""Table 1 of ``skfed describe`` as cells of text, shared by its two outputs.

The text output (:mod:`~skfed.cli.describe`) and the HTML report
(:mod:`~skfed.cli.html_report`) both lay out the same cells; they live here,
beneath both, so that neither imports the other for them.
"""

import math
import re

import numpy as np

from .._format import fixed, format_p, mean_decimals

#: the decimals of a standardized mean difference
SMD_DECIMALS = 3


class Footnotes:
    """Numbered reasons: the same reason always gets the same number."""

    def __init__(self):
        self.reasons = []

    def mark(self, reason):
        """The footnote number of ``reason``, a new one the first time it is seen."""
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self.reasons.index(reason) + 1


def _hidden_text(reason):
    """``<5`` for a count below the threshold, ``suppressed`` for any other reason."""
    m = re.match(r"fewer than (\d+) rows", reason)
    return f"<{m.group(1)}" if m else "suppressed"


class _Cells:
    """The rows of Table 1 being laid out: values, suppression marks, footnotes.

    Parameters
    ----------
    result : skfed.stats.DescribeResult
    headers : list of (group, site)
        The columns shown.
    """

    def __init__(self, result, headers):
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

    def heading(self, label, var):
        """A variable's name on a row of its own, its statistics beneath it."""
        self.headings[len(self.rows)] = var
        self.rows.append((label, 0, [("", None)] * len(self.headers)))

    def choose_decimals(self, var):
        """One number of decimals for every column of ``var``, from its SD (the pooled
        one of all rows when shown, else the largest shown): fixed, never significant
        figures."""
        sds = self.table.loc[(var, "", "std")].where(~self.mask.loc[(var, "", "std")])
        pooled = sds.get(("all", "pooled"), np.nan)
        sd = pooled if not math.isnan(pooled) else sds.max()
        self.decimals[var] = mean_decimals(float(sd))

    def _num(self, var, v):
        return fixed(v, self.decimals.get(var, 1))

    def value(self, var, level, stat, col):
        return self.table.loc[(var, level, stat), col], self.mask.loc[(var, level, stat), col]

    def hidden(self, var, level, stat, col):
        """A suppressed cell: ``<5`` for a small count, else ``suppressed``; footnoted."""
        # a statistic suppressed with its count has no reason of its own: the count's
        r = (self.why.get((var, level, stat, *col))
             or self.why.get((var, "", "count", *col)))
        if stat in ("count", "missing") or var == "N":
            return (_hidden_text(r), self.notes.mark(r))
        return ("suppressed", self.notes.mark(r))

    def n_rows(self, col):
        v, h = self.value("N", "", "count", col)
        return self.hidden("N", "", "count", col) if h else (f"{int(v)}", None)

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


def _numeric_rows(cells, var, stats):
    """A numeric column: mean (SD), median [Q1, Q3] when all three are there, then any
    other quantile on a row of its own."""
    cells.heading(var, var)
    cells.choose_decimals(var)
    cells.add("mean (SD)", 1, cells.mean_sd, var)
    qs = [q for q in stats if q.endswith("%")]
    if {"25%", "50%", "75%"} <= set(qs):
        cells.add("median [Q1, Q3]", 1, cells.median_iqr, var)
        qs = [q for q in qs if q not in ("25%", "50%", "75%")]
    for q in qs:
        cells.add(q, 1, cells.quantile, var, q)
    return [("non-missing", "", "count"), ("missing", "", "missing")]


def _categorical_rows(cells, var, part):
    """A categorical column's heading; returns its levels (and missing) to count."""
    cells.heading(var + ", n (%)", var)
    return [(str(lv), lv, "count") for lv in part.index.get_level_values("level")
            if lv != ""] + [("missing", "", "missing")]


def grid(report, per_site=None):
    """Table 1 as text cells: ``(headers, rows, footnotes)``.

    Parameters
    ----------
    report : skfed.cli.describe.Table1
    per_site : bool, optional
        Show each site's column too (default: ``report.per_site``).

    Returns
    -------
    headers : list of (group, site)
        One per column.
    rows : list of (label, depth, cells)
        Each cell a ``(text, footnote number or None)``.
    footnotes : list of str
        The reasons, footnote ``k`` at index ``k - 1``.
    """
    result = report.result
    per_site = report.per_site if per_site is None else per_site
    table = result.table
    groups = list(table.columns.get_level_values("group").unique())
    shown_sites = ["pooled"] + (list(report.sites) if per_site else [])
    cells = _Cells(result, [(g, s) for g in groups for s in shown_sites])
    cells.add("N (rows)", 0, cells.n_rows)
    variables = list(dict.fromkeys(table.index.get_level_values("variable")))[1:]
    for var in variables:
        part = table.loc[var]
        stats = list(dict.fromkeys(part.index.get_level_values("statistic")))
        if "mean" in stats:
            levels = _numeric_rows(cells, var, stats)
        else:
            levels = _categorical_rows(cells, var, part)
        for label, level, stat in levels:
            cells.add(label, 1, cells.count, var, level, stat)
    if result.comparison is None:
        return cells.headers, cells.rows, cells.notes.reasons
    return (cells.headers + COMPARISON_HEADERS, _with_comparison(cells, result.comparison),
            cells.notes.reasons)


#: the columns :func:`grid` adds when the groups of ``by`` are compared
COMPARISON_HEADERS = [("", "p-value"), ("", "SMD")]


def _with_comparison(cells, comparison):
    """The rows with the p-value and the SMD on each variable's heading row (tableone's
    layout); a p-value not computed is ``n/a`` with a footnote saying why."""
    rows = []
    for k, (label, depth, row_cells) in enumerate(cells.rows):
        var = cells.headings.get(k)
        extra = [("", None), ("", None)]
        if var is not None:
            p, smd, note = comparison.loc[var, ["p_value", "smd", "note"]]
            # why not computed (a suppressed cell); a computed value's caveat stays in the
            # result and the JSON
            extra = [("n/a", cells.notes.mark(note)) if math.isnan(p) else (format_p(p), None),
                     ("n/a", None) if math.isnan(smd) else (fixed(smd, SMD_DECIMALS), None)]
        rows.append((label, depth, row_cells + extra))
    return rows


def comparison_text(report):
    """The sentence under Table 1 that says how its p-values and SMDs were computed."""
    if report.result.comparison is None:
        return ""
    return (f"p-value: the groups of {report.by} compared (rows with a missing {report.by} "
            "left out) from the pooled counts, means and SDs: Welch's t-test for two groups "
            "and the one-way ANOVA for more (numeric columns), Pearson's chi-square without "
            "continuity correction (categories). SMD: standardized mean difference, R "
            "tableone's (Cohen's d with the mean of the two variances; Yang and Dalton's for "
            "categories; the mean over pairs of groups for more than two).")


def crosstab_grid(row, col, ct, site, notes):
    """One site's (or the pooled) cross-table as text cells with margins.

    Parameters
    ----------
    row, col : str
        The cross-table's columns.
    ct : skfed.stats.CrosstabResult
    site : str
        A site's name, or ``"pooled"``.
    notes : Footnotes
        Numbers the suppressed cells' reasons (shared with Table 1).

    Returns
    -------
    headers : list of str
    rows : list of (label, cells)
    """
    part, hidden = ct.by_site.loc[site], ct.mask.loc[site]
    why = {(r.site, str(r.row), str(r.col)): r.reason for r in ct.suppressed.itertuples()}
    headers = [str(c) for c in part.columns]
    rows = []
    for level in part.index:
        cells = []
        for c in part.columns:
            if hidden.loc[level, c]:
                r = why[(site, str(level), str(c))]
                cells.append((_hidden_text(r), notes.mark(r)))
            else:
                cells.append((f"{int(part.loc[level, c])}", None))
        rows.append((str(level), cells))
    return headers, rows


def chi2_text(ct):
    """Pearson's chi-square test of a cross-table, as a sentence."""
    if math.isnan(ct.chi2):
        return ("Pearson's chi-square test: not computed (a pooled cell is suppressed; it "
                "needs every cell)")
    p = format_p(ct.p_value)
    return (f"Pearson's chi-square test: chi2 = {ct.chi2:.2f}, dof = {ct.dof}, "
            f"p {p if p.startswith('<') else '= ' + p}")


def rule_text(report):
    """The suppression rule, as the reader of the table is told it."""
    k = report.min_count
    if getattr(report, "secure", False):
        source = (f"the pooled cells are masked sums over the sites (secure aggregation: "
                  f"no site's own count is decoded), and pooled counts from 1 to {k - 1} are "
                  f"suppressed (--min-count {k})")
        if report.per_site:
            source += (f"; each site's column is its own release, in which it blanks its "
                       f"counts from 1 to {k - 1} (a site service: its own min_level_count "
                       "when larger)")
    else:
        source = (f"each site blanks its counts from 1 to {k - 1} (--min-count {k}; a site "
                  "service applies its own min_level_count when larger) and the "
                  "complementary cells that would give one back, and a pooled cell is "
                  "suppressed when a site suppressed its part (--secure-aggregation pools "
                  "the cells first)")
    return (f"Small cells suppressed: {source}. Then every cell that would give back a "
            "suppressed one through the totals shown (levels, groups, sites) is suppressed "
            "too, until none follows from the others. Means, SDs and quantiles of a "
            "suppressed count are suppressed with it. A numeric column's missing count is "
            "shown whatever its size (it is N minus the non-missing count), unless it is the "
            "complement of a suppressed one.")


def group_labels(headers):
    """Each group's name over its first column only."""
    return [str(g) if k == 0 or headers[k - 1][0] != g else ""
            for k, (g, _) in enumerate(headers)]
