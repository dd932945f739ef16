"""``skfed km``: Kaplan-Meier curves, the median survival and the log-rank test.

``skfed km data.csv --clients hospital --time time --event cens --by horTh``
runs :func:`skfed.stats.kaplan_meier` (one curve per level of ``--by``),
:func:`~skfed.stats.median_survival` (the median with its interval),
:func:`~skfed.stats.restricted_mean_survival_time` (``--rmst-at T``) and, with
``--by``, :func:`~skfed.stats.logrank_test`, on one CSV with a site column or
through site services (``--site-service``). Exact where the sites release
their event times (every row in a file; a site service with
``allow_event_times``): lifelines' numbers on the pooled rows. With
``--time-grid T1,T2,...`` the sites release counts per interval only, and the
curves are the actuarial life table and the log-rank test that of the grouped
times: the text, the JSON and the report say that they are approximate, and
on which cut points. The report draws the curves with the number at risk
beneath (:func:`skfed.plotting.plot_kaplan_meier`).
"""

import html
import math
from dataclasses import dataclass

import numpy as np

from .analyses import (add_label_option, add_output_options, add_rows_options, check_column,
                       json_value, library_errors, open_rows, page_head, parse_labels,
                       write_outputs)
from .errors import CLIError


def add_km_parser(sub):
    """Add ``skfed km`` and its options to the subcommands ``sub``."""
    k = sub.add_parser(
        "km", help="Kaplan-Meier curves with the number at risk, the median survival and "
                   "the log-rank test",
        description="Kaplan-Meier curves over the sites' rows (one per level of --by), the "
                    "median survival with its interval, the restricted mean survival time "
                    "(--rmst-at) and the log-rank test between the --by groups: lifelines' "
                    "numbers on the pooled rows where the sites release their event times "
                    "(site services: allow_event_times); with --time-grid the actuarial "
                    "life table on cut points, marked approximate.")
    add_rows_options(k)
    k.add_argument("--time", metavar="COLUMN", help="the column of follow-up times")
    k.add_argument("--event", metavar="COLUMN",
                   help="the column of event indicators: 1 the event, 0 censored")
    k.add_argument("--by", metavar="COLUMN",
                   help="a column whose levels get their own curves, compared by the "
                        "log-rank test")
    k.add_argument("--time-grid", metavar="T1,T2,...",
                   help="cut points: the actuarial life table on their intervals and the "
                        "log-rank test of the grouped times, both approximate (no event "
                        "time leaves a site; what site services without allow_event_times "
                        "answer)")
    k.add_argument("--times", metavar="T1,T2,...",
                   help="the times of the survival table and of the number at risk "
                        "(default: about six round times; with --time-grid its cut points)")
    k.add_argument("--rmst-at", type=float, metavar="T",
                   help="the restricted mean survival time up to T (lifelines')")
    k.add_argument("--level", type=float, default=0.95,
                   help="the intervals' confidence level (default 0.95)")
    k.add_argument("--secure-aggregation", action="store_true",
                   help="each site's counts leave it masked; only their sums are decoded")
    add_label_option(k)
    add_output_options(k)
    return k


@dataclass
class KMReport:
    """What ``skfed km`` computed, for the text, JSON and report."""

    km: object          # the SurvivalTable
    medians: object     # median_survival's DataFrame
    rmst: dict          # {group: (rmst, variance)} or None
    logrank: object     # LogrankResult or None
    times: np.ndarray   # the survival table's times
    source: str
    time: str
    event: str
    by: str
    labels: dict
    level: float
    rmst_at: float = None


def _numbers(text, option):
    """``"365,730"`` -> increasing positive floats, else a clear error."""
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not math.isfinite(v) or v <= 0 for v in values) or \
            any(b <= a for a, b in zip(values, values[1:])):
        raise CLIError(f"{option} takes increasing positive times separated by commas "
                       f"(365,730,1095); got {text!r}.")
    return np.array(values)


def _check_options(args):
    if not args.time or not args.event:
        raise CLIError("name the follow-up time and the event columns: --time COLUMN "
                       "--event COLUMN.")
    if not 0 < args.level < 1:
        raise CLIError(f"--level is a confidence level in (0, 1); got {args.level}.")
    if args.rmst_at is not None and not (math.isfinite(args.rmst_at) and args.rmst_at > 0):
        raise CLIError(f"--rmst-at takes a positive time; got {args.rmst_at}.")
    grid, times = _numbers(args.time_grid, "--time-grid"), _numbers(args.times, "--times")
    if grid is not None and times is not None:
        raise CLIError("--times is for exact curves; a life table (--time-grid) gives its "
                       "survival at its cut points.")
    return grid, times


def run_km(args, out):
    """``skfed km``: prints the medians, the log-rank test and the survival table, writes
    ``--json`` and ``--report``; returns the :class:`KMReport`."""
    grid, times = _check_options(args)
    with open_rows(args) as rows:
        check_column(rows, args.time, "--time", numeric=True)
        check_column(rows, args.event, "--event", numeric=True)
        if args.by:
            check_column(rows, args.by, "--by")
        labels = parse_labels(args.label, rows.columns)
        report = _estimate(args, rows, grid, times, labels)
    print(format_text(report), end="", file=out)
    write_outputs(args, lambda: km_json(report), lambda path: km_page(report, path), out)
    return report


def _estimate(args, rows, grid, times, labels):
    from ..stats import kaplan_meier, logrank_test, median_survival

    privacy = None
    if args.secure_aggregation:
        from ..privacy import SecureAggregation

        privacy = SecureAggregation()
    columns = {"time": args.time, "event": args.event}
    try:
        km = kaplan_meier(rows.data, by=args.by, time_grid=grid, at_risk_times=times,
                          alpha=1 - args.level, privacy=privacy, **columns)
        logrank = None if not args.by else logrank_test(
            rows.data, group=args.by, time_grid=grid, privacy=privacy, **columns)
        rmst = None if args.rmst_at is None else _rmst(km, args.rmst_at)
    except library_errors() as exc:
        raise CLIError(str(exc) + _refusal_hint(exc)) from exc
    shown = km.time_grid if km.approximate else km.at_risk_times
    return KMReport(km, median_survival(km), rmst, logrank,
                    np.unique(np.append(0.0, shown)), rows.source, args.time, args.event,
                    args.by, labels, args.level, args.rmst_at)


def _rmst(km, t):
    from ..stats import restricted_mean_survival_time

    value = restricted_mean_survival_time(km, t, return_variance=True)
    if isinstance(value, tuple):
        return {"all": value}
    return {level: (row["rmst"], row["variance"]) for level, row in value.iterrows()}


def _refusal_hint(exc):
    """What the command line can do about a site's refusal of event times or of small
    intervals (its message names the Python parameter)."""
    rule = getattr(exc, "rule", None)
    if rule == "allow_event_times":
        return ("\n  on the command line: --time-grid T1,T2,... (the actuarial life table "
                "on cut points, approximate), unless the sites set allow_event_times = true")
    if rule == "min_level_count":
        return "\n  on the command line: fewer, wider intervals in --time-grid"
    return ""


def _curves(km):
    if km.index.nlevels == 1:
        return {"all": km}
    return {level: km.xs(level, level=0) for level in km.index.unique(level=0)}


def _time(value, km):
    """A median's time; one never reached: past a life table's last cut point."""
    if math.isfinite(value):
        return f"{value:g}"
    return f"> {km.time_grid[-1]:g}" if km.approximate else "not reached"


def group_rows(report):
    """Per curve: ``(group, rows, events, median, lower, upper, rmst, rmst variance)``."""
    out = []
    for level, curve in _curves(report.km).items():
        key = "all" if report.by is None else level
        median = report.medians.loc[key]
        rmst = (np.nan, np.nan) if report.rmst is None else report.rmst[key]
        out.append((str(level), int(curve["at_risk"].iloc[0]), int(curve["events"].sum()),
                    float(median["median"]), float(median["median_lower"]),
                    float(median["median_upper"]), *map(float, rmst)))
    return out


def time_rows(report):
    """Per curve and time of the survival table: ``(group, time, at risk, survival, lower,
    upper)`` (the curve's value at the time: its last row at or before it)."""
    from ..plotting import number_at_risk

    out = []
    for level, curve in _curves(report.km).items():
        t = curve.index.to_numpy(dtype=float)
        for time, n in zip(report.times, number_at_risk(curve, report.times)):
            row = curve.iloc[np.searchsorted(t, time, side="right") - 1]
            out.append((str(level), float(time), int(n), float(row["survival"]),
                        float(row["survival_lower"]), float(row["survival_upper"])))
    return out


def _by_label(report):
    return "" if report.by is None else report.labels.get(report.by, report.by)


def _what(report):
    """The first lines: the columns, the curves, whether exact."""
    km, by = report.km, report.by
    curves = "one curve" if by is None else f"one curve per level of {by}"
    kind = ("actuarial life table (approximate)" if km.approximate else
            "Kaplan-Meier, exact (lifelines' numbers on the pooled rows)")
    return [f"skfed km: {report.source}",
            f"{kind}: follow-up {report.time}, event {report.event}, {curves}"]


def _aligned(rows):
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    return ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])])
            .rstrip() for r in rows]


def logrank_text(result):
    from .._format import format_p

    p = format_p(result.p_value)
    return (f"Log-rank test: chi-square {result.statistic:.2f} on "
            f"{result.degrees_of_freedom} df, p {p if p.startswith('<') else '= ' + p}")


def format_text(report):
    """The printed output."""
    headers, rows = _group_table(report)
    lines = _what(report) + ["", "Median survival"] + _aligned([headers] + rows)
    if report.logrank is not None:
        lines += ["", logrank_text(report.logrank)]
        if report.logrank.note:
            lines.append(report.logrank.note)
    level = f"{100 * report.level:g}% CI"
    lines += ["", "Survival"]
    rows = [[_by_label(report), "time", "at risk", f"survival ({level})"]]
    rows += [[g, f"{t:g}", str(n), f"{s:.3f} ({lo:.3f} to {hi:.3f})"]
             for g, t, n, s, lo, hi in time_rows(report)]
    lines += _aligned(rows)
    if report.km.approximate:
        lines += ["", report.km.note]
    return "\n".join(lines) + "\n"


def km_json(report):
    """Every number: the table, the medians, the RMST, the log-rank test, and whether
    (and on which cut points) the curves are approximate."""
    km = report.km
    table = km.reset_index().to_dict(orient="records")
    groups = [dict(zip(("group", "rows", "events", "median", "median_lower", "median_upper",
                        "rmst", "rmst_variance"), r)) for r in group_rows(report)]
    logrank = report.logrank
    return json_value({
        "source": report.source, "time": report.time, "event": report.event,
        "by": report.by, "level": report.level, "approximate": bool(km.approximate),
        "time_grid": km.time_grid, "note": km.note, "rmst_at": report.rmst_at,
        "groups": groups, "table": table,
        "logrank": None if logrank is None else {
            "statistic": logrank.statistic, "p_value": logrank.p_value,
            "degrees_of_freedom": logrank.degrees_of_freedom,
            "observed": dict(logrank.observed), "expected": dict(logrank.expected),
            "approximate": logrank.approximate, "note": logrank.note}})


def km_page(report, path):
    """The ``--report`` page: the curves with the number at risk, the medians, the
    log-rank test and the survival table."""
    from .._format import format_p
    from ..plotting import plot_kaplan_meier
    from .html_report import _figure, _table

    km, labels = report.km, report.labels
    shown = km if report.by is None else km.rename_axis(
        index={report.by: labels.get(report.by, report.by)})
    fig = plot_kaplan_meier(shown, xlabel=labels.get(report.time, report.time))
    caption = ("Kaplan-Meier curves with their pointwise intervals and the number at risk"
               if not km.approximate else f"Survival from the life table. {km.note}")
    if report.logrank is not None:  # the comparison a reader looks for under the curves
        p = format_p(report.logrank.p_value)
        caption += f"; log-rank test p {p if p.startswith('<') else '= ' + p}"
    parts = page_head("skfed km: survival curves") + [
        "".join(f"<p>{html.escape(line)}</p>" for line in _what(report)[1:]),
        f"<p>{html.escape(report.source)}.</p>",
        _figure(fig, path, "kaplan-meier", caption), "<h2>Median survival</h2>",
        _table(*_group_table(report), formats=[str] * (4 if report.rmst_at else 3))]
    if report.logrank is not None:
        parts.append(f"<p>{html.escape(logrank_text(report.logrank))}. "
                     f"{html.escape(report.logrank.note)}</p>")
    level = f"{100 * report.level:g}% CI"
    parts += ["<h2>Survival</h2>", _table(
        [_by_label(report), "time", "at risk", f"survival ({level})"],
        [(g, f"{t:g}", f"{n:,}", f"{s:.3f} ({lo:.3f} to {hi:.3f})")
         for g, t, n, s, lo, hi in time_rows(report)], formats=[str] * 3)]
    if km.approximate:
        parts.append(f"<p><b>Approximate.</b> {html.escape(km.note)}</p>")
    return parts + ["</body></html>"]


def _group_table(report):
    """The medians' table: ``(headers, rows of text)``."""
    level = f"{100 * report.level:g}% CI"
    headers = [_by_label(report), "rows", "events", f"median ({level})"]
    if report.rmst_at is not None:
        headers.append(f"RMST to {report.rmst_at:g}")
    rows = []
    for g, n, d, median, lo, hi, rmst, _ in group_rows(report):
        median, lo, hi = (_time(v, report.km) for v in (median, lo, hi))
        cells = [g, str(n), str(d), f"{median} ({lo} to {hi})"]
        rows.append(cells + ([f"{rmst:.1f}"] if report.rmst_at is not None else []))
    return headers, rows
