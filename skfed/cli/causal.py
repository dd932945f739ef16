"""``skfed causal``: a treatment's effect by IPW or AIPW over the sites' rows, with balance.

``skfed causal data.csv --clients hospital --treatment qsmk --outcome wt82_71
--covariates age,sex,wt71 --estimand ATE --method ipw --report out.html`` runs
:class:`skfed.causal.FedIPW` (``--method aipw``: :class:`~skfed.causal.FedAIPW`)
on one CSV with a site column or through site services (``--site-service``),
prints the effect (difference, and ratio and odds ratio where the means allow)
with its M-estimation interval, the potential-outcome means, the balance table
(standardised mean differences before and after weighting) and the effective
sample sizes; ``--json`` writes every number and ``--report`` a page with the
effect table, the balance table, the love plot and the overlap figure.
"""

import html

import numpy as np

from .analyses import (add_label_option, add_output_options, add_rows_options, check_column,
                       frame_json, library_errors, open_rows, page_head, parse_labels,
                       write_outputs)
from .errors import CLIError

ESTIMANDS = ("ATE", "ATT", "ATC", "ATO")


def add_causal_parser(sub):
    """Add ``skfed causal`` and its options to the subcommands ``sub``."""
    c = sub.add_parser(
        "causal", help="a treatment's effect by inverse probability weighting (or AIPW), "
                       "with balance and overlap",
        description="The effect of a 0/1 treatment on an outcome over the sites' rows: one "
                    "logistic propensity model over every site, the weighted outcome means "
                    "and the M-estimation sandwich (delicatessen's numbers on the pooled "
                    "rows), the balance table before and after weighting and the overlap "
                    "of the propensity scores.")
    add_rows_options(c)
    c.add_argument("--treatment", metavar="COLUMN", help="the treatment column, coded 0/1")
    c.add_argument("--outcome", metavar="COLUMN", help="the outcome column")
    c.add_argument("--covariates", metavar="C1,C2,...",
                   help="the propensity model's covariates (numeric columns; default: every "
                        "other numeric column)")
    c.add_argument("--estimand", choices=ESTIMANDS, default="ATE",
                   help="the population: everyone, the treated, the controls, or the overlap "
                        "population (ATO: IPW only; default ATE)")
    c.add_argument("--method", choices=("ipw", "aipw"), default="ipw",
                   help="Hajek IPW, or augmented IPW (doubly robust: ATE, ATT or ATC; "
                        "default ipw)")
    c.add_argument("--outcome-covariates", metavar="C1,C2,...",
                   help="AIPW's outcome models' own covariates (default: the propensity "
                        "model's)")
    c.add_argument("--outcome-family", choices=("gaussian", "binomial", "poisson"),
                   default="gaussian", help="AIPW's outcome models (default gaussian)")
    c.add_argument("--truncate", metavar="LO,HI",
                   help="clip the propensity scores into [LO, HI]")
    c.add_argument("--truncate-by", choices=("score", "percentile"), default="score",
                   help="what --truncate holds: score bounds (default), or percentiles "
                        "in [0, 100] of the pooled scores (site services serve their "
                        "exact percentiles only with allow_exact_quantiles)")
    c.add_argument("--trim", metavar="LO,HI",
                   help="give rows with a score outside [LO, HI] no weight (IPW)")
    c.add_argument("--level", type=float, default=0.95,
                   help="the intervals' confidence level (default 0.95)")
    c.add_argument("--secure-aggregation", action="store_true",
                   help="each site's sums leave it masked; only their sums are decoded")
    add_label_option(c)
    add_output_options(c)
    return c


def _bounds(text, option):
    if text is None:
        return None
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise CLIError(f"{option} takes two scores LO,HI (0.05,0.95); got {text!r}.") from None
    if not 0 <= lo < hi <= 1:
        raise CLIError(f"{option} takes two increasing scores in [0, 1]; got {text!r}.")
    return (lo, hi)


def _truncate(args):
    """``--truncate`` as ``--truncate-by`` reads it: scores in [0, 1] or percentiles."""
    if args.truncate_by == "score" or args.truncate is None:
        return _bounds(args.truncate, "--truncate")
    try:
        lo, hi = (float(v) for v in args.truncate.split(","))
    except ValueError:
        raise CLIError("--truncate takes two percentiles LO,HI (1,99) with --truncate-by "
                       f"percentile; got {args.truncate!r}.") from None
    if not 0 <= lo < hi <= 100:
        raise CLIError("--truncate takes two increasing percentiles in [0, 100] with "
                       f"--truncate-by percentile; got {args.truncate!r}.")
    return (lo, hi)


def _estimator(args):
    from ..causal import FedAIPW, FedIPW

    privacy = None
    if args.secure_aggregation:
        from ..privacy import SecureAggregation

        privacy = SecureAggregation()
    truncate = _truncate(args)
    if args.method == "aipw":
        if args.estimand == "ATO" or args.trim is not None:
            raise CLIError("--method aipw estimates the ATE, ATT or ATC and does not trim: "
                           "use --estimand ATO or --trim with --method ipw.")
        outcome = None if not args.outcome_covariates else [
            c.strip() for c in args.outcome_covariates.split(",") if c.strip()]
        return FedAIPW(args.estimand, outcome_family=args.outcome_family,
                       outcome_covariates=outcome, truncate=truncate,
                       truncate_by=args.truncate_by, privacy=privacy)
    if args.outcome_covariates:
        raise CLIError("--outcome-covariates are AIPW's outcome models': add --method aipw.")
    return FedIPW(args.estimand, truncate=truncate, truncate_by=args.truncate_by,
                  trim=_bounds(args.trim, "--trim"), privacy=privacy)


def _covariates(args, rows):
    if args.covariates:
        names = [c.strip() for c in args.covariates.split(",") if c.strip()]
    else:
        names = [c for c, kind in rows.kinds.items() if kind != "text" and c not in (
            args.treatment, args.outcome, args.clients)]
    if not names:
        raise CLIError("no covariates: name them with --covariates C1,C2,...")
    for name in names:
        check_column(rows, name, "--covariates", numeric=True)
    return names


def run_causal(args, out):
    """``skfed causal``: prints the effect and the balance table, writes ``--json`` and
    ``--report``; returns the fitted estimator."""
    import warnings

    if not args.treatment or not args.outcome:
        raise CLIError("name the treatment and the outcome: --treatment COLUMN --outcome "
                       "COLUMN.")
    if not 0 < args.level < 1:
        raise CLIError(f"--level is a confidence level in (0, 1); got {args.level}.")
    with open_rows(args) as rows:
        check_column(rows, args.treatment, "--treatment", numeric=True)
        check_column(rows, args.outcome, "--outcome", numeric=True)
        names = _covariates(args, rows)
        labels = parse_labels(args.label, rows.columns)
        estimator = _estimator(args)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", UserWarning)
                est = estimator.fit(rows.data, treatment=args.treatment,
                                    outcome=args.outcome, covariates=names)
        except library_errors() as exc:
            raise CLIError(str(exc)) from exc
        source = rows.source
    notes = [str(w.message) for w in caught]
    report = {"est": est, "source": source, "labels": labels, "level": args.level,
              "args": args, "notes": notes}
    print(format_text(report), end="", file=out)
    write_outputs(args, lambda: causal_json(report), lambda path: causal_page(report, path),
                  out)
    return est


def effect_rows(report):
    """``(scale, estimate, lower, upper)`` at the report's level (ratios back-transformed
    from their log-scale intervals)."""
    from scipy import stats

    z = stats.norm.isf((1 - report["level"]) / 2)
    rows = []
    for scale, row in report["est"].effects_.iterrows():
        value, se = float(row["estimate"]), float(row["std_err"])
        if row["log_scale"]:
            lo, hi = np.exp(np.log(value) - z * se), np.exp(np.log(value) + z * se)
        else:
            lo, hi = value - z * se, value + z * se
        rows.append((str(scale), value, float(lo), float(hi)))
    return rows


def _what(report):
    est, args = report["est"], report["args"]
    kind = "AIPW (doubly robust)" if args.method == "aipw" else "IPW (Hajek)"
    return [f"skfed causal: {report['source']}",
            f"{kind}, {est.spec_['estimand']}: treatment {args.treatment}, outcome "
            f"{args.outcome}; {est.n_samples_:,} rows at {est.n_clients_} sites, "
            f"{est.n_treated_:,} treated",
            "Variance: the M-estimation sandwich of the stacked estimating equations "
            "(the propensity model's estimation accounted for)"]


def _balance_rows(report):
    labels = report["labels"]
    return [(labels.get(name, name), float(row["SMD before"]), float(row["SMD after"]))
            for name, row in report["est"].balance_.iterrows()]


def format_text(report):
    """The printed output."""
    est = report["est"]
    level = f"{100 * report['level']:g}% CI"
    lines = _what(report) + ["", f"Effect ({level})"]
    lines += [f"  {scale:<12} {v:10.4f}  ({lo:.4f} to {hi:.4f})"
              for scale, v, lo, hi in effect_rows(report)]
    lines += ["", "Potential-outcome means", f"  E[Y(1)] {est.potential_outcomes_[1]:.4f}",
              f"  E[Y(0)] {est.potential_outcomes_[0]:.4f}", "",
              "Balance (standardised mean differences)",
              f"  {'covariate':<20} {'before':>8} {'after':>8}"]
    lines += [f"  {name:<20} {b:8.3f} {a:8.3f}" for name, b, a in _balance_rows(report)]
    ess = est.effective_sample_size_
    lines += ["", f"Effective sample size: treated {ess['treated']:.1f}, controls "
                  f"{ess['control']:.1f}"]
    lines += [f"Note: {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def causal_json(report):
    """Every number: the effects, the means, the stacked parameters, balance and overlap."""
    est, args = report["est"], report["args"]
    return {"source": report["source"], "method": args.method,
            "estimand": est.spec_["estimand"], "treatment": args.treatment,
            "outcome": args.outcome, "covariates": list(est.feature_names_in_),
            "level": report["level"], "rows": est.n_samples_, "treated": est.n_treated_,
            "sites": est.n_clients_, "effect": est.effect_, "std_err": est.std_err_,
            "effects": [dict(zip(("scale", "estimate", "lower", "upper"), r))
                        for r in effect_rows(report)],
            "potential_outcomes": {"1": est.potential_outcomes_[1],
                                   "0": est.potential_outcomes_[0]},
            "params": dict(zip(est.param_names_, map(float, est.params_))),
            "balance": frame_json(est.balance_),
            "effective_sample_size": est.effective_sample_size_,
            "overlap": {k: np.asarray(v).tolist() for k, v in est.overlap_.items()
                        if k != "extreme"}, "notes": report["notes"]}


def causal_page(report, path):
    """The ``--report`` page: the effect table, the balance table, the love plot and the
    overlap figure."""
    from ..plotting import plot_love, plot_overlap
    from .html_report import _figure, _table

    est = report["est"]
    level = f"{100 * report['level']:g}% CI"
    fmt = [lambda v: f"{v:.4f}"] * 3
    parts = page_head("skfed causal: the treatment's effect") + [
        "".join(f"<p>{html.escape(line)}</p>" for line in _what(report)[1:]),
        f"<p>{html.escape(report['source'])}.</p>", "<h2>Effect</h2>",
        _table(["scale", "estimate", f"lower ({level})", f"upper ({level})"],
               effect_rows(report), formats=fmt),
        _table(["potential outcome", "mean"],
               [("E[Y(1)]", est.potential_outcomes_[1]),
                ("E[Y(0)]", est.potential_outcomes_[0])], formats=fmt[:1]),
        "<h2>Balance</h2>",
        _table(["covariate", "SMD before", "SMD after"], _balance_rows(report),
               formats=[lambda v: f"{v:.3f}"] * 2),
        _figure(plot_love(est, labels=report["labels"] or None), path, "love",
                "Absolute standardised mean differences before and after weighting "
                "(dashed: 0.1)"),
        "<h2>Overlap</h2>",
        _figure(plot_overlap(est), path, "overlap",
                "Propensity scores of the treated (up) and the controls (down), pooled "
                "counts on fixed bins; a hidden bin (fewer than min_level_count rows at "
                "a site) is a gap")]
    parts += [f"<p><b>Note.</b> {html.escape(n)}</p>" for n in report["notes"]]
    return parts + ["</body></html>"]
