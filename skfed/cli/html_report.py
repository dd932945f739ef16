"""The self-contained HTML reports of ``skfed fit --report`` and ``skfed describe --html``.

Tables have fixed decimals chosen per variable (or per column), p-values as
``<0.001`` or three decimals, proportional type, and sit in boxes that
scroll sideways rather than widen the page. Each figure is inline SVG in the
page and is also written next to it as ``NAME-figure.svg`` and
``NAME-figure.pdf`` (vector files a journal takes, :mod:`skfed.plotting`).
"""

import html
import math
from pathlib import Path

import numpy as np

from .._messages import count
from .._format import decimals_for, fixed, format_p
from .fit import GLM_MODELS, coefficient_headers, coefficient_rows, intercept_row, \
    penalty_text, privacy_lines, scaling_text, survival_text, traffic
from .summary import fit_statistics, hazard_ratio_notes, summary_lines
from .table1 import Footnotes, chi2_text, comparison_text, crosstab_grid, grid, \
    header_rows, rule_text

_STYLE = """
body { font-family: "Helvetica Neue", Helvetica, Arial, "Liberation Sans", "DejaVu Sans",
       sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 60em; color: #222;
       line-height: 1.4; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
.box { max-width: 100%; overflow-x: auto; margin: 0.5em 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums;
        border-top: 2px solid #333; border-bottom: 2px solid #333; }
th, td { padding: 0.25em 0.8em; text-align: right; white-space: nowrap; }
th { border-bottom: 1px solid #333; font-weight: 600; vertical-align: bottom; }
td.name, th.name { text-align: left; white-space: normal; min-width: 6em; }
tr.zero td { color: #999; } .bad { color: #b00020; font-weight: bold; }
figure { margin: 1em 0; } figure svg { display: block; width: 100%; height: auto; }
#figure-convergence { max-width: 42em; }
figcaption { font-size: 0.9em; color: #444; }
"""


def _table(headers, rows, row_class=None, formats=None):
    """An HTML table in a box that scrolls sideways; ``formats``: one function per column
    after the first turning a value into text (default :func:`_plain`)."""
    formats = formats or [_plain] * (len(headers) - 1)
    out = ['<div class="box"><table><tr><th class="name">' + html.escape(headers[0]) + "</th>"
           + "".join(f"<th>{html.escape(h)}</th>" for h in headers[1:]) + "</tr>"]
    for row in rows:
        cls = f' class="{row_class(row)}"' if row_class and row_class(row) else ""
        cells = [f'<td class="name">{html.escape(str(row[0]))}</td>'] + [
            f"<td>{html.escape(fmt(v))}</td>" for fmt, v in zip(formats, row[1:])]
        out.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    return "\n".join(out) + "</table></div>"


def _plain(v):
    """Counts with thousands separators; other numbers with three decimals."""
    if isinstance(v, (int, np.integer)):
        return f"{v:,}"
    if isinstance(v, (float, np.floating)):
        return "n/a" if math.isnan(v) else fixed(float(v), 3)
    return str(v)


def _statistic(v):
    """A fit statistic: a whole number as one, else two decimals."""
    if not math.isfinite(v):
        return "n/a"
    return f"{int(v):,}" if v == int(v) else f"{v:,.2f}"


def _decimals(d):
    """A formatter with ``d`` decimals (``n/a`` for NaN)."""
    return lambda v: "n/a" if isinstance(v, float) and math.isnan(v) else fixed(float(v), d)


def _column_formats(rows):
    """One formatter per numeric column of ``rows``: four significant digits of the
    column's largest value, as fixed decimals from 2 to 6."""
    formats = []
    for k in range(1, len(rows[0]) if rows else 1):
        values = np.abs([float(r[k]) for r in rows])
        largest = np.nanmax(values) if np.isfinite(values).any() else 0.0
        formats.append(_decimals(decimals_for(largest / 100, lowest=2, highest=6)))
    return formats


def _regression_formats(table):
    """Per row of a regression table, the formatters of its columns: the coefficient's
    scale with two significant digits of its standard error, the ratio's with two of its
    interval's width (2 to 4 decimals), z with two, p-values as ``<0.001``."""
    se_column = "std err" if "std err" in table.columns else "se(coef)"
    ratio = [c for c in table.columns if "exp" in c]
    lower, upper = (ratio[1], ratio[2]) if len(ratio) == 3 else (None, None)
    per_row = []
    for _, row in table.iterrows():
        d = decimals_for(float(row[se_column]), lowest=2, highest=6)
        d_ratio = decimals_for(float(row[upper] - row[lower]), 2, 4) if lower else d
        formats = []
        for c in table.columns:
            if c.startswith("P>") or c == "p":
                formats.append(format_p)
            elif c in ("z", "t"):
                formats.append(_decimals(2))
            else:
                formats.append(_decimals(d_ratio if c in ratio else d))
        per_row.append(formats)
    return per_row


def _regression_table(table):
    """The regression table with fixed decimals chosen per row (its variable)."""
    headers = ["", *table.columns]
    out = ['<div class="box"><table><tr><th class="name"></th>'
           + "".join(f"<th>{html.escape(h)}</th>" for h in headers[1:]) + "</tr>"]
    for (name, row), formats in zip(table.iterrows(), _regression_formats(table)):
        out.append(f'<tr><td class="name">{html.escape(str(name))}</td>'
                   + "".join(f"<td>{html.escape(f(v))}</td>" for f, v in zip(formats, row))
                   + "</tr>")
    return "\n".join(out) + "</table></div>"


def _figure(fig, path, name, caption):
    """``fig`` inline as SVG, and written next to the report as SVG and PDF."""
    from ..plotting._style import save_figure, svg_text

    stem = Path(path)
    files = [stem.with_name(f"{stem.stem}-{name}.{ext}") for ext in ("svg", "pdf")]
    save_figure(fig, *files)
    inline = svg_text(fig)
    return (f'<figure id="figure-{name}">{inline}<figcaption>{html.escape(caption)} '
            f"(also {html.escape(files[0].name)} and {html.escape(files[1].name)}).</figcaption>"
            "</figure>")


def _bounded_log(values, decades=12):
    """Positive values for a log axis: at most ``decades`` below the largest (zeros and
    underflow drawn at that floor, not at 1e-314)."""
    values = np.asarray(values, dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    if positive.size == 0:
        return np.ones_like(values), (0.5, 2.0)
    floor = max(positive.min(), positive.max() * 10.0 ** -decades)
    return np.clip(values, floor, None), (floor / 2, positive.max() * 2)


def _convergence_figure(history):
    """Objective, stationarity and cumulative traffic against the rounds."""
    from ..history import integer_round_ticks
    from ..plotting._style import journal_style, new_figure

    rounds = np.asarray(history["round"])
    objective = np.asarray(history["objective"], dtype=float)
    gap, gap_limits = _bounded_log(objective - np.nanmin(objective))
    stationarity, stat_limits = _bounded_log(history["stationarity"])
    sent = np.cumsum(history["bytes_up"] + history["bytes_down"]) / 1e3
    with journal_style():
        fig, axes = new_figure(9.0, 2.8, ncols=3, wspace=0.35)
        axes[0].semilogy(rounds, gap)
        axes[0].set(title="objective - best objective", xlabel="round", ylim=gap_limits)
        axes[1].semilogy(rounds, stationarity, color="#D55E00")
        axes[1].set(title="stationarity (0 at the optimum)", xlabel="round", ylim=stat_limits)
        axes[2].plot(rounds, sent, color="#009E73")
        axes[2].set(title="algorithm traffic (KB, cumulative)", xlabel="round")
        for ax in axes:
            ax.grid(alpha=0.3)
            integer_round_ticks(ax)
    return fig


def _forest_section(report, path):
    """The forest plot of the regression (its rows named as in the journal table)."""
    from ..plotting import forest_table, plot_forest
    from .summary import regression_results

    results = regression_results(report)
    table = forest_table(results)
    if table.empty:
        return []
    fig = plot_forest(results)
    what = table.attrs["measure"].capitalize() + "s"  # "Odds ratios"
    return [_figure(fig, path, "forest", f"{what} with their 95% confidence intervals, per "
                    "unit of each original column")]


def _survival_section(report, path, kaplan_meier):
    """Kaplan-Meier curves (when given) and the Cox model's curves at the mean covariates,
    one per stratum."""
    from ..plotting import plot_kaplan_meier, plot_survival

    parts = []
    if kaplan_meier is not None:
        fig = plot_kaplan_meier(kaplan_meier)
        caption = ("Kaplan-Meier curves of the training rows with 95% intervals and the "
                   "number at risk")
        if kaplan_meier.approximate:  # a life table: the grid, and that it is approximate
            caption = f"Survival of the training rows. {kaplan_meier.note}"
        parts.append(_figure(fig, path, "kaplan-meier", caption))
    est = report.estimator
    strata = est.strata_
    if report.formula is not None:  # its design's means are not computed
        return parts + ["<p>No adjusted survival curve: a formula's design column means "
                        "are not computed; draw the curves of chosen covariate profiles "
                        "with skfed.plotting.plot_survival(result, profiles).</p>"]
    if report.scaler is None:
        return parts + ["<p>No adjusted survival curve: with --no-scale the covariates' "
                        "means are not kept (the curve at 0 would be no one's).</p>"]
    if any(isinstance(s, tuple) for s in strata):
        return parts + ["<p>No adjusted survival curve: one per site and level of the strata "
                        "column is more than a figure shows.</p>"]
    profiles = np.zeros((len(strata), len(report.feature_names)))  # the training means
    labels = ["all rows" if s is None else str(s) for s in strata]
    fig = plot_survival(est, profiles, strata=None if strata == [None] else strata,
                        labels=labels)
    return parts + [_figure(fig, path, "survival", "Survival curves of the Cox model at the "
                            "training rows' mean covariates (Breslow's baseline"
                            + (", one per stratum)" if len(strata) > 1 else ")"))]


def _coefficient_section(report):
    """The coefficient table, with what its columns mean (a Cox model: hazard ratios, no
    intercept)."""
    coef_rows = coefficient_rows(report)
    if report.survival:
        scales = "" if report.scaler is None else (
            " Standardized: as fitted, per standard deviation of the column. Original units: "
            "the same model per unit of the column (coef / sd).")
        text = (f"<p>Log hazard ratios.{scales} Hazard ratio: exp(coef per unit of the "
                "column), the factor multiplying the hazard per unit of the column, the other "
                "columns fixed. A Cox model has no intercept: the baseline hazard takes its "
                "place.</p>")
    else:
        coef_rows.append(intercept_row(report))
        text = "" if report.scaler is None else (
            "<p>Standardized: as fitted, per standard deviation of the feature (one-hot "
            "columns per unit). Original units: the same model per unit of each column "
            "(coef / sd; intercept - sum(coef * mean / sd)).</p>")
    title = "Log hazard ratios" if report.survival else "Coefficients"
    return [f"<h2>{title} (non-zeros first)</h2>", text,
            _table(["feature"] + coefficient_headers(report), coef_rows,
                   row_class=lambda r: "zero" if r[0] != "(intercept)" and not any(r[1:])
                   else "", formats=_column_formats(coef_rows))]


def _journal_table(report):
    """The regression as a journal prints it: one "OR (95% CI)" column and p, reference
    rows, a joint p per multi-level term (:meth:`ModelResults.journal_table`)."""
    from .summary import regression_results

    table = regression_results(report).journal_table()
    rows = [(name, *row) for name, row in zip(table.index, table.to_numpy())]
    return _table(["", *table.columns], rows, formats=[str, str])


def _summary_section(report, path):
    """``--summary``: the journal table, the fit statistics and the forest plot (the
    full regression table is in the appendix)."""
    text = summary_lines(report)
    title = "Hazard ratios" if report.survival else "Regression table"
    parts = [f"<h2>{title} (original columns)</h2>", f"<p>{html.escape(text[0])}</p>",
             _journal_table(report)]
    if report.survival:  # the likelihoods (and the penalty's caveat)
        parts += ["<p>A Cox model has no intercept: the baseline hazard takes its place.</p>"]
        parts += [f"<p>{html.escape(note)}</p>" for note in hazard_ratio_notes(report)]
    else:
        stats = fit_statistics(report)
        parts += ["<h2>Fit statistics</h2>",
                  _table(["statistic", "value"], stats, formats=[_statistic])]
    from .ph_test import ph_test_html  # a Cox model's PH test, after its forest plot

    return parts + _forest_section(report, path) + ph_test_html(report.ph_test)


def _appendix(report, path, convergence):
    """What a reviewer checks and a reader skips: the full regression table,
    convergence and traffic."""
    t = traffic(report)
    parts = ["<h2>Appendix</h2>"]
    if report.summary is not None:  # the coefficients' scale: the ratios are above
        full = report.summary[[c for c in report.summary.columns if "exp" not in c]]
        parts += ["<h3>The regression table in full</h3>", _regression_table(full)]
    return parts + [
        "<h3>Convergence and traffic</h3>",
        _figure(convergence, path, "convergence", "Convergence of the federated fit and its "
                "traffic, round by round"),
        _table(["traffic", "bytes"], [("sent up (clients to server)", t["bytes_up"]),
                                      ("sent down (server to clients)", t["bytes_down"]),
                                      ("monitoring", t["monitor_bytes"]),
                                      ("one-time setup", t["setup_bytes"])])]


def _site_section(report, scores=_plain):
    """The held-out scores by site and overall; ``scores`` formats the three scores."""
    n_tr, n_te, fed, _, pool = report.overall
    # which rows were held out and why (skfed.cli.holdout), or why none were
    why = getattr(report, "holdout", None)
    if not report.held_out:
        return ["<h2>No held-out score</h2>",
                f"<p>{html.escape(why[0].upper() + why[1:])}.</p>" if why else
                f"<p>{html.escape(report.none_held_out.capitalize())}: no row was held out "
                "to score it (run with --test-size 0.2 to estimate how well it "
                "predicts).</p>",
                _table(["site", "rows"], [(r[0], r[1]) for r in report.site_rows])]
    rows = list(report.site_rows) + [("overall", n_tr, n_te, fed, float("nan"), pool)]
    return [f"<h2>Held-out {html.escape(report.metric)} by site</h2>",
            "<p>Federated: fitted on every site's training rows without pooling them. "
            "Local-only: fitted on that site's rows alone. Pooled: fitted on all training "
            "rows at once (what federated learning reaches without moving the data).</p>",
            _table(["site", "train rows", "test rows", "federated", "local-only", "pooled"],
                   rows, formats=[_plain, _plain, scores, scores, scores])] + (
        [f"<p>{html.escape(why[0].upper() + why[1:])}.</p>"] if why else [])


def _head(title):
    return ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{html.escape(title)}</title>"]


def write_html_report(report, path, kaplan_meier=None):
    """Write the report to ``path`` (one file, its figures inline as SVG) and each figure
    next to it as SVG and PDF.

    Parameters
    ----------
    report : skfed.cli.fit.FitReport
    path : str or path-like
    kaplan_meier : pandas.DataFrame, default=None
        A Cox model's Kaplan-Meier table (:func:`skfed.stats.kaplan_meier` of
        the training rows, as the sites' rules allow), drawn on its page.
    """
    try:
        convergence = _convergence_figure(report.estimator.history_)
    except ImportError as exc:
        from .fit import CLIError

        raise CLIError("--report draws plots with matplotlib: pip install 'skfed[plot]'.") \
            from exc
    est, t = report.estimator, traffic(report)
    state = ("converged" if report.converged
             else '<span class="bad">did not converge: raise --max-rounds</span>')
    name = html.escape(type(est).__name__)
    parts = _head(f"skfed fit: {type(est).__name__}") + [
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>skfed fit: {name} ({html.escape(report.model)})</h1>",
        f"<p>Penalty <b>{html.escape(penalty_text(report))}</b>, solver "
        f"<b>{html.escape(est.solver_.name)}</b>, {len(report.site_rows)} sites, "
        f"{report.overall[0]} training rows, {report.overall[1]} held out. "
        f"{count(t['rounds'], 'round')}, {state}.</p>",
        f"<p>{html.escape(scaling_text(report).replace(chr(10), ' '))}.</p>"]
    if report.survival:
        parts.append(f"<p>{html.escape(survival_text(report))}.</p>")
    parts += _site_section(report)
    privacy = getattr(est.history_, "privacy", None)
    if privacy:
        parts += ["<h2>Privacy</h2>"] + [f"<p>{html.escape(line.strip())}</p>"
                                         for line in privacy_lines(privacy)]
    parts += [f"<p>Note: {html.escape(n)}</p>" for n in report.notes]
    if report.summary is not None:  # --summary: the journal table (the full one: appendix)
        parts += _summary_section(report, path)
    else:  # the coefficients as fitted (penalized fits have no regression table)
        parts += _coefficient_section(report)
        if report.model in GLM_MODELS or report.survival:
            parts.append("<p>--summary adds the regression table (standard errors, "
                         "intervals, p-values, fit statistics) and its forest plot.</p>")
    if report.survival:
        parts += ["<h2>Survival curves</h2>"] + _survival_section(report, path, kaplan_meier)
    parts += _appendix(report, path, convergence) + ["</body></html>"]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts))


def _marked(cell):
    """A Table 1 cell: its text, a suppressed one with its footnote's number."""
    text, note = cell
    if note is None:
        return f"<td>{html.escape(text)}</td>"
    return (f'<td class="hidden">{html.escape(text)}<sup><a href="#note-{note}">{note}</a>'
            "</sup></td>")


def _grid_table(header_lines, rows):
    """A table of text cells: ``header_lines`` ``(label, [texts])``, ``rows``
    ``(label, depth, [cells])``."""
    out = ['<div class="box"><table>']
    for label, texts in header_lines:
        out.append(f'<tr><th class="name">{html.escape(label)}</th>'
                   + "".join(f"<th>{html.escape(t)}</th>" for t in texts) + "</tr>")
    for label, depth, cells in rows:
        style = f' style="padding-left: {0.8 + 1.5 * depth}em"' if depth else ""
        out.append(f'<tr><td class="name"{style}>{html.escape(label)}</td>'
                   + "".join(_marked(c) for c in cells) + "</tr>")
    return "\n".join(out) + "</table></div>"


def _crosstab_sections(report, notes):
    parts = []
    for row, col, ct in report.crosstabs:
        parts.append(f"<h2>Cross-table {html.escape(row)} &times; {html.escape(col)}</h2>")
        for site in ["pooled"] + (list(report.sites) if report.per_site else []):
            hdr, cells = crosstab_grid(row, col, ct, site, notes)
            parts += [f"<p><b>{html.escape(str(site))}</b></p>",
                      _grid_table([(f"{row} \\ {col}", hdr)],
                                  [(label, 0, cs) for label, cs in cells])]
        parts.append(f"<p>{html.escape(chi2_text(ct))}.</p>")
    return parts


def write_table1_html(report, path):
    """Write ``skfed describe --html``: Table 1 (with the groups' comparison under
    ``--by``), the cross-tables with their chi-square tests, the sites and their row
    counts, the suppression rule and every suppressed cell's footnote, in one
    self-contained file."""
    headers, rows, reasons = grid(report)
    header_lines = [(f"by {report.by}" if report.by and k == 0 else "", texts)
                    for k, texts in enumerate(header_rows(report, headers))]
    parts = _head("skfed describe: Table 1") + [
        f"<style>{_STYLE} td.hidden {{ color: #b00020; }} sup a {{ color: inherit; }}"
        "</style></head><body>",
        "<h1>Table 1</h1>",
        f"<p>{html.escape(report.source)}.</p>",
        "<h2>Sites</h2>",
        _table(["site", "rows"], list(zip(report.sites, report.rows))
               + [("all sites", int(sum(report.rows)))]),
        "<h2>Descriptive statistics" + ("" if report.per_site else " (pooled)") + "</h2>",
        "<p>Numeric columns: mean (SD) and median [Q1, Q3] of the non-missing values, with "
        "the decimals of each column chosen from its SD; categories: n (% of the rows of "
        "the column's group and site).</p>",
        _grid_table(header_lines, rows),
    ]
    if report.result.comparison is not None:
        parts.append(f"<p>{html.escape(comparison_text(report))}</p>")
    notes = Footnotes()
    notes.reasons = list(reasons)
    parts += _crosstab_sections(report, notes)
    parts += ["<h2>Suppression</h2>", f"<p>{html.escape(rule_text(report))}</p>"]
    if notes.reasons:
        parts.append("<ol>" + "".join(f'<li id="note-{i}">{html.escape(r)}</li>'
                                      for i, r in enumerate(notes.reasons, start=1))
                     + "</ol>")
    else:
        parts.append("<p>No cell is suppressed.</p>")
    parts += [f"<p>Note: {html.escape(n)}</p>" for n in report.notes]
    parts.append("</body></html>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts))
