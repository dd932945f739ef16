"""The self-contained HTML report of ``skfed fit --report``: tables and plots inline."""

import base64
import html
import io
import math

import numpy as np

from .._messages import count
from ..history import integer_round_ticks
from .fit import coefficient_headers, coefficient_rows, intercept_row, penalty_text, \
    privacy_lines, scaling_text, survival_text, traffic
from .summary import hazard_ratio_notes, summary_lines
from .table1 import Footnotes, chi2_text, crosstab_grid, grid, group_labels, rule_text

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.7em; text-align: right; }
th { background: #eef2f7; } td.name { text-align: left; font-family: monospace; }
tr.zero td { color: #999; } .bad { color: #b00020; font-weight: bold; }
img { max-width: 100%; border: 1px solid #ddd; }
"""


def _cell(v):
    if isinstance(v, (float, np.floating)):
        return "n/a" if math.isnan(v) else f"{v:.4g}"
    if isinstance(v, (int, np.integer)):
        return f"{v:,}"
    return html.escape(str(v))


def _table(headers, rows, row_class=None):
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr>"]
    for i, row in enumerate(rows):
        cls = f' class="{row_class(row)}"' if row_class and row_class(row) else ""
        cells = [f'<td class="name">{_cell(row[0])}</td>'] + [f"<td>{_cell(v)}</td>"
                                                              for v in row[1:]]
        out.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    return "\n".join(out) + "</table>"


def _convergence_png(history):
    """Objective, stationarity and cumulative traffic against rounds, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = history["round"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    # the objective's distance to its final value spans decades: a log scale
    objective = np.asarray(history["objective"], dtype=float)
    gap = objective - np.nanmin(objective)
    axes[0].semilogy(rounds, np.maximum(gap, max(1e-16 * abs(np.nanmin(objective)), 1e-300)),
                     color="tab:blue")
    axes[0].set(title="objective - best objective", xlabel="round")
    axes[1].semilogy(rounds, np.maximum(history["stationarity"], 1e-300), color="tab:red")
    axes[1].set(title="stationarity (0 at the optimum)", xlabel="round")
    sent = np.cumsum(history["bytes_up"] + history["bytes_down"]) / 1e3
    axes[2].plot(rounds, sent, color="tab:green")
    axes[2].set(title="algorithm traffic (KB, cumulative)", xlabel="round")
    for ax in axes:
        ax.grid(alpha=0.3)
        integer_round_ticks(ax)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def write_html_report(report, path):
    """Write the report to ``path`` (one file; the plot is embedded as base64)."""
    try:
        png = _convergence_png(report.estimator.history_)
    except ImportError as exc:
        from .fit import CLIError

        raise CLIError("--report draws plots with matplotlib: pip install 'skfed[plot]'.") \
            from exc
    est, t = report.estimator, traffic(report)
    coef_rows = coefficient_rows(report)
    if not report.survival:  # a Cox model has no intercept (its baseline hazard)
        coef_rows.append(intercept_row(report))
    n_tr, n_te, fed, _, pool = report.overall
    site_rows = list(report.site_rows) + [("overall", n_tr, n_te, fed, float("nan"), pool)]
    state = ("converged" if report.converged
             else '<span class="bad">did not converge: raise --max-rounds</span>')
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>skfed fit: {html.escape(type(est).__name__)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>skfed fit: {html.escape(type(est).__name__)} ({html.escape(report.model)})</h1>",
        f"<p>Penalty <b>{html.escape(penalty_text(report))}</b>, solver "
        f"<b>{html.escape(est.solver_.name)}</b>, {len(report.site_rows)} sites, "
        f"{n_tr} training rows, {n_te} held out. {count(t['rounds'], 'round')}, {state}.</p>",
        f"<p>{html.escape(scaling_text(report).replace(chr(10), ' '))}.</p>",
    ]
    if report.survival:
        parts.append(f"<p>{html.escape(survival_text(report))}.</p>")
    if report.held_out:
        parts += [
            f"<h2>Held-out {html.escape(report.metric)} by site</h2>",
            "<p>Federated: fitted on every site's training rows without pooling them. "
            "Local-only: fitted on that site's rows alone. Pooled: fitted on all training "
            "rows at once (what federated learning reaches without moving the data).</p>",
            _table(["site", "train rows", "test rows", "federated", "local-only", "pooled"],
                   site_rows)]
    else:
        parts += ["<h2>No held-out score</h2>",
                  "<p>--test-size 0 (--final): the final model, fitted on every row; no row "
                  "was held out to score it (run with --test-size 0.2 to estimate how well "
                  "it predicts).</p>",
                  _table(["site", "rows"], [(r[0], r[1]) for r in report.site_rows])]
    privacy = getattr(est.history_, "privacy", None)
    if privacy:
        parts += ["<h2>Privacy</h2>"] + [f"<p>{html.escape(line.strip())}</p>"
                                         for line in privacy_lines(privacy)]
    parts += [f"<p>Note: {html.escape(n)}</p>" for n in report.notes]
    parts += [
        "<h2>Coefficients (non-zeros first)</h2>",
        "" if report.scaler is None else
        "<p>Standardized: as fitted, per standard deviation of the feature (one-hot columns "
        "per unit). Original units: the same model per unit of each column "
        "(coef / sd; intercept - sum(coef * mean / sd)).</p>",
        _table(["feature"] + coefficient_headers(report), coef_rows,
               row_class=lambda r: "zero" if r[0] != "(intercept)" and not any(r[1:]) else ""),
    ]
    if report.summary is not None:  # --summary
        table, text = report.summary, summary_lines(report)
        title = "Hazard ratios" if report.survival else "Regression table"
        parts += [f"<h2>{title} (original columns)</h2>",
                  f"<p>{html.escape(text[0])}</p>",
                  _table(["", *table.columns],
                         [(str(name), *row) for name, row in table.iterrows()])]
        if report.survival:  # the likelihoods (and the penalty's caveat)
            parts += [f"<p>{html.escape(note)}</p>" for note in hazard_ratio_notes(report)]
    parts += [
        "<h2>Convergence and traffic</h2>",
        f'<img alt="convergence" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode()}">',
        _table(["traffic", "bytes"], [("sent up (clients to server)", t["bytes_up"]),
                                      ("sent down (server to clients)", t["bytes_down"]),
                                      ("monitoring", t["monitor_bytes"]),
                                      ("one-time setup", t["setup_bytes"])]),
        "</body></html>",
    ]
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
    out = ["<table>"]
    for label, texts in header_lines:
        out.append(f"<tr><th>{html.escape(label)}</th>"
                   + "".join(f"<th>{html.escape(t)}</th>" for t in texts) + "</tr>")
    for label, depth, cells in rows:
        style = f' style="padding-left: {0.7 + 1.5 * depth}em"' if depth else ""
        out.append(f'<tr><td class="name"{style}>{html.escape(label)}</td>'
                   + "".join(_marked(c) for c in cells) + "</tr>")
    return "\n".join(out) + "</table>"


def write_table1_html(report, path):
    """Write ``skfed describe --html``: Table 1, the cross-tables with their chi-square
    tests, the sites and their row counts, the suppression rule and every suppressed
    cell's footnote, in one self-contained file."""
    headers, rows, reasons = grid(report)
    header_lines = []
    if report.by:
        header_lines.append((f"by {report.by}", group_labels(headers)))
    header_lines.append(("", [str(s) for _, s in headers]))
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<title>skfed describe: Table 1</title>",
        f"<style>{_STYLE} td.hidden {{ color: #b00020; }} sup a {{ color: inherit; }}"
        "</style></head><body>",
        "<h1>Table 1</h1>",
        f"<p>{html.escape(report.source)}.</p>",
        "<h2>Sites</h2>",
        _table(["site", "rows"], list(zip(report.sites, report.rows))
               + [("all sites", int(sum(report.rows)))]),
        "<h2>Descriptive statistics" + ("" if report.per_site else " (pooled)") + "</h2>",
        "<p>Numeric columns: mean (SD) and median [Q1, Q3] of the non-missing values; "
        "categories: n (% of the rows of the column's group and site).</p>",
        _grid_table(header_lines, rows),
    ]
    notes = Footnotes()
    notes.reasons = list(reasons)
    for row, col, ct in report.crosstabs:
        parts.append(f"<h2>Cross-table {html.escape(row)} &times; {html.escape(col)}</h2>")
        for site in ["pooled"] + (list(report.sites) if report.per_site else []):
            hdr, cells = crosstab_grid(row, col, ct, site, notes)
            parts += [f"<p><b>{html.escape(str(site))}</b></p>",
                      _grid_table([(f"{row} \\ {col}", hdr)],
                                  [(label, 0, cs) for label, cs in cells])]
        parts.append(f"<p>{html.escape(chi2_text(ct))}.</p>")
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
