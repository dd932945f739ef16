"""``skfed mixed``: a linear mixed model from a formula, on the command line.

``skfed mixed data.csv --clients hospital --formula "y ~ age + C(sex)"
--groups clinic --re-formula "~age"`` fits :func:`skfed.formula.mixedlm`
(statsmodels' ``MixedLM`` on the pooled rows, exactly) on one CSV with a site
column or on a dataset that site services serve (``--site-service``). The
groups of the random effects are ``--groups`` (each group at one site) or, by
default, the sites. It prints the results' summary (statsmodels' layout:
fixed effects, then the random effects' (co)variances) and the journal table
(one "Coefficient (95% CI)" column, a joint p per multi-level factor, the
reference levels; ``--label`` names the columns); ``--json`` writes every
number, ``--report`` a page with both tables and the fixed effects' forest
plot.
"""

import html
import warnings

from .analyses import (add_label_option, add_output_options, add_rows_options, check_column,
                       frame_json, library_errors, open_rows, page_head, parse_labels,
                       summary_html, table_rows_json, text_table_html, write_outputs)
from .errors import CLIError


def add_mixed_parser(sub):
    """Add ``skfed mixed`` and its options to the subcommands ``sub``."""
    m = sub.add_parser(
        "mixed", help="a linear mixed model (random effects by site or by groups within "
                      "sites) from a formula",
        description="Fit a linear mixed model from a formula: statsmodels' "
                    "mixedlm(formula, data, groups=..., re_formula=...) on the pooled rows, "
                    "exactly, from sums the sites send (no row leaves a site). Prints the "
                    "summary and the journal table; --report writes both and the forest "
                    "plot of the fixed effects.")
    add_rows_options(m)
    m.add_argument("--formula", metavar="FORMULA",
                   help='the fixed effects, "y ~ age + C(sex)" (statsmodels\' formula '
                        "syntax; docs/formulas.md)")
    m.add_argument("--groups", metavar="COLUMN",
                   help="the column of the random effects' groups, each group at one site "
                        "(patients, clinics); default: the sites are the groups")
    m.add_argument("--re-formula", metavar="FORMULA",
                   help='the random effects: "~age" (an intercept and a slope on age), '
                        '"0 + age" (the slope only); default: a random intercept')
    criterion = m.add_mutually_exclusive_group()
    criterion.add_argument("--reml", dest="reml", action="store_true", default=True,
                           help="restricted maximum likelihood (default; statsmodels' and "
                                "lme4's)")
    criterion.add_argument("--ml", dest="reml", action="store_false",
                           help="maximum likelihood (to compare fixed effects by likelihood "
                                "ratio)")
    m.add_argument("--min-group-size", type=int, default=2, metavar="N",
                   help="the fewest rows a group may hold (default 2; a site service "
                        "raises it to its min_rows)")
    m.add_argument("--level", type=float, default=0.95,
                   help="the intervals' confidence level (default 0.95)")
    add_label_option(m)
    add_output_options(m)
    return m


def run_mixed(args, out):
    """``skfed mixed``: prints the summary and the journal table, writes ``--json`` and
    ``--report``; returns the :class:`~skfed.mixed.MixedLMResults`."""
    if not args.formula:
        raise CLIError('give the model: --formula "y ~ age + C(sex)".')
    if not 0 < args.level < 1:
        raise CLIError(f"--level is a confidence level in (0, 1); got {args.level}.")
    if args.min_group_size < 1:
        raise CLIError(f"--min-group-size must be at least 1; got {args.min_group_size}.")
    with open_rows(args) as rows:
        if args.groups:
            check_column(rows, args.groups, "--groups")
        labels = parse_labels(args.label, rows.columns)
        results, notes = _fit(args, rows)
        source = rows.source
    alpha = 1 - args.level
    summary = results.summary(alpha=alpha)
    journal = results.journal_table(alpha, labels=labels)
    print(format_text(source, results, summary, journal, notes), end="", file=out)
    write_outputs(args, lambda: mixed_json(source, results, args, notes, labels),
                  lambda path: mixed_page(source, results, summary, journal, notes, labels,
                                          path, alpha), out)
    return results


def _fit(args, rows):
    """The formula's mixed model on ``rows``, and the fit's warnings as notes."""
    from ..formula import mixedlm

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            results = mixedlm(args.formula, rows.data, groups=args.groups,
                              re_formula=args.re_formula, reml=args.reml,
                              min_group_size=args.min_group_size)
        except library_errors() as exc:
            raise CLIError(str(exc)) from exc
    notes = list(dict.fromkeys(str(w.message) for w in caught
                               if not issubclass(w.category, DeprecationWarning)))
    return results, notes


def _groups_text(results):
    rows = ", ".join(f"{s} ({n} rows)" for s, n in results.rows_by_site.items())
    return f"{results.n_groups} groups, {results.nobs} complete rows at the sites {rows}"


def format_text(source, results, summary, journal, notes):
    """The printed output: the source, the summary, the journal table and the notes."""
    lines = [f"skfed mixed: {source}", _groups_text(results), "", str(summary).rstrip(), "",
             "Journal table (fixed effects)", journal.rename_axis(None).to_string(), ""]
    lines += [f"Note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def mixed_json(source, results, args, notes, labels):
    """Every number of the fit: the fixed effects with their inference, the random
    effects' covariance, the scale, the likelihood and the criteria, the rows."""
    alpha = 1 - args.level
    ci = results.conf_int(alpha)
    fixed = list(results.fe_params.index)
    return {"source": source, "formula": args.formula, "groups": args.groups,
            "re_formula": args.re_formula, "method": results.method,
            "fe_params": dict(results.fe_params), "bse_fe": dict(results.bse_fe),
            "tvalues": dict(results.tvalues), "pvalues": dict(results.pvalues),
            "conf_int": {n: list(ci.loc[n]) for n in fixed},
            "cov_re": frame_json(results.cov_re), "bse_re": dict(results.bse_re),
            "scale": results.scale, "llf": results.llf, "aic": results.aic,
            "bic": results.bic, "converged": results.converged, "nobs": results.nobs,
            "n_groups": results.n_groups, "rows_by_site": dict(results.rows_by_site),
            "summary": frame_json(results.summary_frame(alpha)),
            "journal": table_rows_json(results.journal_table(alpha, labels=labels)),
            "labels": labels, "notes": notes}


def mixed_page(source, results, summary, journal, notes, labels, path, alpha):
    """The ``--report`` page: the summary, the journal table, the forest plot."""
    from ..plotting import plot_forest
    from .html_report import _figure

    parts = page_head("skfed mixed: linear mixed model") + [
        f"<p>{html.escape(source)}: {html.escape(_groups_text(results))}.</p>",
        "<h2>Journal table (fixed effects)</h2>", text_table_html(journal),
        "<h2>Summary</h2>",
        "<p>Fixed effects (estimate, standard error, z, p, interval), then the random "
        "effects' variances and covariances (estimate and standard error), as statsmodels "
        "prints them.</p>", *summary_html(summary)]
    try:
        fig = plot_forest(results, alpha=alpha, labels=labels)
        parts.append(_figure(fig, path, "forest", "The fixed effects with their "
                             f"{100 * (1 - alpha):g}% confidence intervals"))
    except ValueError:  # an intercept alone: nothing to draw
        pass
    parts += [f"<p>Note: {html.escape(n)}</p>" for n in notes]
    return parts + ["</body></html>"]
