"""Command line: ``python -m skfed demo|fit|support-matrix`` (also installed as ``skfed``)."""

import argparse
import sys
import warnings

import numpy as np


def run_demo(alpha=0.1, n_sites=5, out=None, report=None, output=None):
    """``skfed fit`` on a built-in dataset, with the evidence that it is the pooled model.

    The diabetes data are split into ``n_sites`` "hospitals" by BMI quantile
    (strong covariate shift). Prints the same report as ``skfed fit``
    (coefficients; held-out R2 per site of the federated, local-only and
    pooled models; rounds and bytes), then compares the federated model with
    scikit-learn's ``Lasso`` on the pooled training rows and shows the
    convergence. Returns the fitted federated estimator.
    """
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Lasso

    from ._cli_fit import fit_and_compare, format_text
    from .datasets import simulate_clients

    data = load_diabetes()
    X, y, names = data.data, data.target, list(data.feature_names)
    site_index = simulate_clients(X, y, n_sites, scheme="quantile", feature=names.index("bmi"))
    sites = np.array([f"site-{s}" for s in site_index])
    out = sys.stdout if out is None else out
    p = lambda *a, **k: print(*a, **k, file=out)  # noqa: E731
    p(f"skfed demo: Lasso(alpha={alpha}) on the diabetes data held by {n_sites} sites "
      "(quantiles of BMI: strong covariate shift)")
    p("the same as: skfed fit diabetes.csv --target progression --clients site "
      f"--model lasso --alpha {alpha}\n")
    result = fit_and_compare(X, y, sites, model="lasso", test_size=0.2, random_state=0,
                             feature_names=names, output_names=["progression"],
                             strength=alpha, max_rounds=5000, tol=1e-9)
    p(format_text(result), end="")
    fed = result.estimator

    # the evidence: the federated model is scikit-learn's Lasso on the pooled rows
    train = ~result.test
    Xtr, ytr = X[train], y[train]
    pooled = Lasso(alpha=alpha, tol=1e-12, max_iter=100_000).fit(Xtr, ytr)
    f_star = (0.5 * np.mean((ytr - pooled.predict(Xtr)) ** 2)
              + alpha * np.abs(pooled.coef_).sum())
    fed.history_.set_reference(f_star)
    gap = (fed.objective_ - f_star) / f_star
    same = np.array_equal(np.sign(fed.coef_), np.sign(pooled.coef_))
    p(f"\nfederated vs scikit-learn Lasso on the pooled rows: relative objective gap "
      f"{gap:.2e}, max |coef difference| {np.max(np.abs(fed.coef_ - pooled.coef_)):.2e}, "
      f"same support: {same}\n")
    h = fed.history_
    p(f"{'round':>7}{'suboptimality':>16}{'stationarity':>15}{'non-zeros':>11}")
    rounds = sorted(set(np.unique(np.geomspace(1, fed.n_iter_, 8).astype(int))) | {0})
    for r in rounds:
        p(f"{r:>7d}{h['suboptimality'][r]:>16.3e}{h['stationarity'][r]:>15.3e}{h['nnz'][r]:>11d}")
    p("\nselected features: " + ", ".join(n for n, c in zip(names, fed.coef_) if c != 0))
    _save(result, report, output, p)
    return fed


def _save(result, report, output, p):
    """Write ``--report`` and ``--output`` (shared by ``demo`` and ``fit``)."""
    if report:
        from ._report import write_html_report

        write_html_report(result, report)
        p(f"report written to {report}")
    if output:
        import joblib

        joblib.dump(result.estimator, output)
        p(f"model saved to {output} (joblib.load it; feature_names_in_ lists the columns it "
          "expects)")


def _fit_parser(sub):
    from ._cli_fit import MODELS

    fit = sub.add_parser(
        "fit", help="fit a federated model on CSV data from several sites",
        description="Fit a federated model on CSV data held by several sites, and compare it, "
                    "site by site, with each site's local-only model and the pooled model on "
                    "held-out rows.")
    fit.add_argument("data", nargs="?", help="CSV file with every site's rows and a site column")
    fit.add_argument("--site-files", nargs="+", metavar="CSV",
                     help="one CSV per site instead (the site is the file name)")
    fit.add_argument("--target", nargs="+", required=True, metavar="COLUMN",
                     help="the column to predict (several for --model lowrank)")
    fit.add_argument("--clients", metavar="COLUMN", help="the column naming each row's site")
    fit.add_argument("--model", required=True, choices=sorted(MODELS))
    fit.add_argument("--solver", default="auto", help="federated solver (default: auto)")
    fit.add_argument("--alpha", type=float, help="penalty strength (lasso, elasticnet, lowrank)")
    fit.add_argument("--C", type=float, dest="C", help="inverse penalty strength (logistic, svm)")
    fit.add_argument("--l1-ratio", type=float, help="L1 share of the penalty "
                                                    "(elasticnet, logistic)")
    fit.add_argument("--max-rounds", type=int, default=1000)
    fit.add_argument("--tol", type=float, default=1e-6)
    fit.add_argument("--categorical", nargs="+", default=[], metavar="COLUMN",
                     help="text columns to one-hot encode")
    fit.add_argument("--drop", nargs="+", default=[], metavar="COLUMN",
                     help="columns that are not features (identifiers, other outcomes)")
    fit.add_argument("--test-size", type=float, default=0.2,
                     help="share of every site's rows held out for the comparison")
    fit.add_argument("--random-state", type=int, default=0)
    fit.add_argument("--report", metavar="HTML", help="write a self-contained HTML report")
    fit.add_argument("--output", metavar="JOBLIB", help="save the fitted estimator (joblib)")
    return fit


def run_fit(args, out=None):
    """``skfed fit``: returns the :class:`~skfed._cli_fit.FitReport`."""
    from ._cli_fit import MODELS, CLIError, design_matrix, fit_and_compare, format_text
    from ._cli_fit import read_csv_files

    out = sys.stdout if out is None else out
    if bool(args.data) == bool(args.site_files):
        raise CLIError("give one CSV file (with --clients COLUMN) or --site-files A.csv B.csv ...")
    _, reg, classifier = MODELS[args.model]
    other = "C" if reg == "alpha" else "alpha"
    if getattr(args, other) is not None:
        raise CLIError(f"--model {args.model} takes --{reg}, not --{other}.")
    table = read_csv_files(args.site_files or [args.data], site_files=bool(args.site_files))
    target = args.target[0] if len(args.target) == 1 else args.target
    X, Y, sites, names = design_matrix(table, target=target, clients=args.clients,
                                       categorical=args.categorical, drop=args.drop,
                                       classifier=classifier)
    try:
        report = fit_and_compare(
            X, Y, sites, model=args.model, test_size=args.test_size,
            random_state=args.random_state, feature_names=names, output_names=args.target,
            strength=getattr(args, reg), l1_ratio=args.l1_ratio, solver=args.solver,
            max_rounds=args.max_rounds, tol=args.tol)
    except (ValueError, TypeError) as exc:  # the estimator's own message, without a traceback
        raise CLIError(str(exc)) from exc
    print(format_text(report), end="", file=out)
    _save(report, args.report, args.output, lambda *a: print(*a, file=out))
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="skfed", description="Federated convex estimators.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="federated Lasso on a built-in heterogeneous dataset")
    demo.add_argument("--alpha", type=float, default=0.1, help="L1 strength (default 0.1)")
    demo.add_argument("--sites", type=int, default=5, help="number of sites (default 5)")
    demo.add_argument("--report", metavar="HTML", help="write a self-contained HTML report")
    demo.add_argument("--output", metavar="JOBLIB", help="save the fitted estimator (joblib)")
    _fit_parser(sub)
    sub.add_parser("support-matrix",
                   help="print the estimator x solver support matrix (Markdown), from the code")
    args = parser.parse_args(argv)
    if args.command == "demo":
        run_demo(alpha=args.alpha, n_sites=args.sites, report=args.report, output=args.output)
    elif args.command == "fit":
        from ._cli_fit import CLIError

        try:
            run_fit(args)
        except CLIError as exc:
            print(f"skfed fit: error: {exc}", file=sys.stderr)
            return 2
    elif args.command == "support-matrix":
        from ._support import format_support_matrix, support_matrix

        print(format_support_matrix(support_matrix()), end="")
    return 0
