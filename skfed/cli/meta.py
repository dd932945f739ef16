"""``skfed meta``: a fixed- and random-effects meta-analysis from the command line.

Two inputs. A file of per-site estimates (``skfed meta estimates.csv
--estimate COL --se COL``, or ``--variance COL``; ``--name COL`` names the
rows): what each site reported of its own analysis, pooled by
:func:`skfed.stats.meta_analysis`. Or a two-stage analysis of the sites' rows
(``skfed meta data.csv --clients hospital --formula "y ~ age + C(sex)"``, or
``--site-service ... --formula``): each site fits its own least-squares
model of the formula (stage one, at the site), and every coefficient is
pooled by the same meta-analysis (:func:`skfed.formula.two_stage`;
DataSHIELD's ``ds.lmerSLMA``). The output is the meta-analysis' summary (the
sites, the fixed- and random-effects estimates, ``tau2``, ``I2``, ``H2`` and
Cochran's Q), ``--json`` every number and ``--report`` a page with the
forest plot of each pooled estimate.
"""

import html

import numpy as np

from .analyses import (add_output_options, add_rows_options, frame_json, library_errors,
                       open_rows, page_head, summary_html, write_outputs)
from .errors import CLIError

#: ``--method`` -> what the output calls it
METHODS = {"reml": "REML", "ml": "ML", "dl": "DerSimonian-Laird", "pm": "Paule-Mandel"}


def add_meta_parser(sub):
    """Add ``skfed meta`` and its options to the subcommands ``sub``."""
    m = sub.add_parser(
        "meta", help="fixed- and random-effects meta-analysis of per-site estimates, or a "
                     "two-stage analysis of the sites' rows",
        description="Pool one estimate per site: the fixed-effect (inverse-variance) and "
                    "random-effects estimates, the between-site variance tau2, I2, H2 and "
                    "Cochran's Q (metafor's rma, statsmodels' combine_effects). The "
                    "estimates come from a file (--estimate, --se or --variance), or from "
                    "the sites' rows in a two-stage analysis (--formula: each site's own "
                    "least-squares fit of the formula, every coefficient pooled; useful "
                    "beside skfed mixed, the one-stage model, to show how the sites differ "
                    "and that the pooled effects agree).")
    add_rows_options(m, "a CSV file of per-site estimates (one row each), or with --formula "
                        "one with every site's rows and a site column (--clients)")
    given = m.add_argument_group("a file of per-site estimates")
    given.add_argument("--estimate", metavar="COLUMN", help="the column of the estimates")
    given.add_argument("--se", metavar="COLUMN", help="the column of their standard errors")
    given.add_argument("--variance", metavar="COLUMN",
                       help="the column of their variances (instead of --se)")
    given.add_argument("--name", metavar="COLUMN",
                       help="the column naming each row (a site or a study; default: the "
                            "rows' numbers)")
    stages = m.add_argument_group("a two-stage analysis of the sites' rows")
    stages.add_argument("--formula", metavar="FORMULA",
                        help='"y ~ age + C(sex)": each site\'s own least-squares fit (a '
                             "numeric response), each coefficient pooled over the sites")
    stages.add_argument("--coefficient", nargs="+", metavar="NAME",
                        help="the coefficients to show (statsmodels' names, such as "
                             "C(sex)[T.m]; default: all but the Intercept)")
    m.add_argument("--method", choices=sorted(METHODS), default="reml",
                   help="the between-site variance tau2: REML (default; metafor's), ML, "
                        "DerSimonian-Laird (dl) or Paule-Mandel (pm; statsmodels' default)")
    m.add_argument("--level", type=float, default=0.95,
                   help="the intervals' confidence level (default 0.95)")
    m.add_argument("--exponentiate", action="store_true",
                   help="show exp of the estimates and intervals (log odds, rate or hazard "
                        "ratios pooled as ratios)")
    add_output_options(m)
    return m


def run_meta(args, out):
    """``skfed meta``: prints the summary, writes ``--json`` and ``--report``; returns
    ``(source, {name: MetaAnalysisResult})``."""
    if not 0 < args.level < 1:
        raise CLIError(f"--level is a confidence level in (0, 1); got {args.level}.")
    if args.formula:
        source, results = _two_stage(args)
    else:
        source, results = _from_file(args)
    print(format_text(source, results, args), end="", file=out)
    write_outputs(args, lambda: meta_json(source, results, args),
                  lambda path: meta_page(source, results, args, path), out)
    return source, results


def _from_file(args):
    """The estimates file's meta-analysis: ``(source, {"": result})``."""
    from ..stats import meta_analysis

    for option in ("clients", "coefficient", "site_service"):
        if getattr(args, option):
            raise CLIError(f"--{option.replace('_', '-')} goes with --formula (a two-stage "
                           "analysis of the sites' rows), not with a file of estimates.")
    if not args.data:
        raise CLIError("give a CSV file of per-site estimates (--estimate, --se), or "
                       "--formula with the sites' rows.")
    if not args.estimate or (args.se is None) == (args.variance is None):
        raise CLIError("a file of estimates needs --estimate COLUMN and one of --se COLUMN "
                       "or --variance COLUMN.")
    frame = _read_estimates(args)
    names = None if args.name is None else [str(v) for v in frame[args.name]]
    spread = {"variances" if args.se is None else "standard_errors":
              frame[args.variance or args.se].to_numpy(dtype=float)}
    try:
        result = meta_analysis(frame[args.estimate].to_numpy(dtype=float), names=names,
                               method=args.method, alpha=1 - args.level, **spread)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    return str(args.data), {"": result}


def _read_estimates(args):
    """The estimates file as a DataFrame, its named columns checked: present, the numbers
    numeric and complete."""
    from pathlib import Path

    import pandas as pd

    from .missing_values import missing_tokens, pandas_options

    if not Path(args.data).is_file():
        raise CLIError(f"cannot read {args.data}: no such file.")
    try:
        frame = pd.read_csv(args.data, skipinitialspace=True, encoding="utf-8-sig",
                            float_precision="round_trip", **pandas_options(missing_tokens(args)))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read {args.data}: {exc}") from exc
    frame = frame.rename(columns=lambda c: str(c).strip())
    for option in ("estimate", "se", "variance", "name"):
        column = getattr(args, option)
        if column is None:
            continue
        if column not in frame.columns:
            raise CLIError(f"--{option} {column!r}: no such column; the columns are: "
                           + ", ".join(map(str, frame.columns)) + ".")
        if option == "name":
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = np.flatnonzero(values.isna().to_numpy())
        if bad.size:
            raise CLIError(f"--{option} {column!r}: row {bad[0] + 1} holds "
                           f"{frame[column].iloc[bad[0]]!r}, not a number; every row needs "
                           "one.")
        frame[column] = values
    return frame


def _two_stage(args):
    """The two-stage analysis of the sites' rows: ``(source, {name: result})``."""
    from ..formula import two_stage

    for option in ("estimate", "se", "variance", "name"):
        if getattr(args, option):
            raise CLIError(f"--{option} is for a file of per-site estimates; with --formula "
                           "each site's estimate comes from its own fit.")
    with open_rows(args) as rows:
        try:
            results = two_stage(args.formula, rows.data, method=args.method,
                                alpha=1 - args.level)
        except library_errors() as exc:
            raise CLIError(str(exc)) from exc
        source = rows.source
    shown = args.coefficient or [n for n in results if n != "Intercept"] or list(results)
    unknown = [n for n in shown if n not in results]
    if unknown:
        raise CLIError(f"--coefficient {unknown[0]!r}: the formula's coefficients are "
                       + ", ".join(results) + ".")
    rows_text = ", ".join(f"{s} ({n} rows)" for s, n in results.rows_by_site.items())
    return (f"{source}; two-stage: each site's least-squares fit of {args.formula} "
            f"({rows_text})", {name: results[name] for name in shown})


def _summary(result, args):
    return result.summary(alpha=1 - args.level, exponentiate=args.exponentiate)


def format_text(source, results, args):
    """The printed output: where the estimates come from, then each summary."""
    lines = [f"skfed meta: {source}", f"tau2 by {METHODS[args.method]}"
             + ("; estimates and intervals exponentiated" if args.exponentiate else ""), ""]
    for name, result in results.items():
        if name:
            lines.append(f"Coefficient {name}")
        lines += [str(_summary(result, args)).rstrip(), ""]
    return "\n".join(lines)


def _result_json(result, args):
    summary = _summary(result, args)
    return {"k": result.k, "method": result.method, "tau2": result.tau2, "i2": result.i2,
            "h2": result.h2, "q": result.q, "q_pvalue": result.q_pvalue,
            "fixed_effect": {"estimate": result.mean_effect_fe, "se": result.sd_eff_w_fe},
            "random_effect": {"estimate": result.mean_effect_re, "se": result.sd_eff_w_re},
            "table": frame_json(summary.table)}


def meta_json(source, results, args):
    """Every number: per coefficient (``""`` for a file of estimates) the pooled
    estimates, the heterogeneity and the table of sites and pooled rows (estimates and
    intervals exponentiated with ``--exponentiate``; ``tau2`` and the standard errors on
    the estimates' own scale)."""
    return {"source": source, "method": args.method, "level": args.level,
            "exponentiated": bool(args.exponentiate), "formula": args.formula,
            "results": {name: _result_json(r, args) for name, r in results.items()}}


def meta_page(source, results, args, path):
    """The ``--report`` page: per coefficient its summary and forest plot."""
    from .html_report import _figure

    parts = page_head("skfed meta: meta-analysis") + [
        f"<p>{html.escape(source)}. Between-site variance tau2 by "
        f"{METHODS[args.method]}; {100 * args.level:g}% intervals"
        + (", estimates exponentiated" if args.exponentiate else "") + ".</p>"]
    for k, (name, result) in enumerate(results.items()):
        title = f"Coefficient {name}" if name else "Pooled estimate"
        ax = result.plot_forest(alpha=1 - args.level)
        if args.exponentiate:  # the axis in ratios: exp of the estimate's scale
            _ratio_labels(ax)
        parts += [f"<h2>{html.escape(title)}</h2>", *summary_html(_summary(result, args)),
                  _figure(ax.figure, path, f"forest-{k + 1}",
                          f"Forest plot of {name or 'the estimates'}: each site's estimate "
                          "and interval (marker by its random-effects weight) and the fixed- "
                          "and random-effects estimates")]
    return parts + ["</body></html>"]


def _ratio_labels(ax):
    """Label a forest plot's axis of log ratios with plain ratios (0.8, 1, 1.25...)."""
    from ..plotting._forest import ratio_ticks

    lo, hi = np.exp(ax.get_xlim())
    ticks = ratio_ticks(lo, hi)
    ax.set_xticks(np.log(ticks))
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.set_xlabel("ratio (log scale)")
