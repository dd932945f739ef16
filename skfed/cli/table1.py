"""Table 1 of ``skfed describe`` as cells of text, shared by its two outputs.

The text output (:mod:`~skfed.cli.describe`) and the HTML report
(:mod:`~skfed.cli.html_report`) both lay out the same cells; they live here,
beneath both, so that neither imports the other for them.
"""

import math

from .._format import format_p
from ..stats._layout import COMPARISON_HEADERS, Footnotes, header_lines, hidden_text, layout

__all__ = ["COMPARISON_HEADERS", "Footnotes", "grid", "comparison_text", "crosstab_grid",
           "chi2_text", "rule_text", "group_labels", "header_rows"]


def grid(report, per_site=None):
    """Table 1 as text cells: ``(headers, rows, footnotes)``
    (:func:`skfed.stats._layout.layout` of the report's result).

    Parameters
    ----------
    report : skfed.cli.describe.Table1
    per_site : bool, optional
        Show each site's column too (default: ``report.per_site``).

    Returns
    -------
    headers : list of (group, site)
    rows : list of (label, depth, cells)
    footnotes : list of str
    """
    return layout(report.result, report.per_site if per_site is None else per_site)


def header_rows(report, headers):
    """The header rows over :func:`grid`'s columns: each group with its ``n`` (and, per
    site, each site with its ``n``)."""
    return header_lines(report.result, headers)


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
                cells.append((hidden_text(r), notes.mark(r)))
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
