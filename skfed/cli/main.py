"""Command line: ``python -m skfed demo|fit|describe|km|mixed|meta|causal|site|relay|
support-matrix`` (also installed as ``skfed``)."""

import argparse
import sys

import numpy as np


def demo_command(alpha, csv_path="diabetes.csv"):
    """The ``skfed fit`` command that reproduces the demo from its ``--csv`` file."""
    return (f"skfed fit {csv_path} --target progression --clients site --model lasso "
            f"--alpha {alpha:g} --max-rounds 5000 --tol 1e-9")


def write_demo_csv(path, X, y, sites, names):
    """The demo's rows as one CSV with a ``site`` column (what ``skfed fit`` reads)."""
    import csv

    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["site", *names, "progression"])
        for site, row, target in zip(sites, X, y):
            writer.writerow([site, *(repr(float(v)) for v in row), repr(float(target))])


def run_demo(alpha=2.0, n_sites=5, out=None, report=None, output=None, csv=None):
    """``skfed fit`` on a built-in dataset, with the evidence that it is the pooled model.

    The diabetes data are split into ``n_sites`` "hospitals" by BMI quantile
    (strong covariate shift). Prints the same report as ``skfed fit`` with its
    defaults (features standardized from per-site sums; coefficients; held-out
    R2 per site of the federated, local-only and pooled models; rounds and
    bytes), then compares the federated model with scikit-learn's
    ``StandardScaler`` and ``Lasso`` on the pooled training rows and shows
    the convergence. Returns the fitted federated estimator.
    """
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Lasso
    from sklearn.preprocessing import StandardScaler

    from .fit import fit_and_compare, format_text, original_coefficients
    from ..datasets import simulate_clients

    data = load_diabetes()
    X, y, names = data.data, data.target, list(data.feature_names)
    site_index = simulate_clients(X, y, n_sites, scheme="quantile", feature=names.index("bmi"))
    sites = np.array([f"site-{s}" for s in site_index])
    out = sys.stdout if out is None else out
    p = lambda *a, **k: print(*a, **k, file=out)  # noqa: E731
    p(f"skfed demo: Lasso(alpha={alpha:g}) on the diabetes data held by {n_sites} sites "
      "(quantiles of BMI: strong covariate shift)")
    if csv:
        write_demo_csv(csv, X, y, sites, names)
        p(f"wrote the sites' rows to {csv}; the same fit: {demo_command(alpha, csv)}\n")
    else:
        p(f"the same as: skfed demo --csv diabetes.csv, then {demo_command(alpha)}\n")
    result = fit_and_compare(X, y, sites, model="lasso", test_size=0.2, random_state=0,
                             feature_names=names, output_names=["progression"],
                             strength=alpha, max_rounds=5000, tol=1e-9)
    from types import SimpleNamespace

    from .holdout import holdout_note

    # the note of the skfed fit command it stands for (its defaults)
    result.holdout = holdout_note(SimpleNamespace(test_size=None, final=False, summary=False,
                                                  random_state=0), result.site_rows, "local")
    p(format_text(result), end="")
    fed, scaler = result.estimator, result.scaler

    # the evidence: the federated model is scikit-learn's StandardScaler + Lasso on the pooled rows
    train = ~result.test
    Xtr, ytr = X[train], y[train]
    pooled_scaler = StandardScaler().fit(Xtr)
    Ztr = pooled_scaler.transform(Xtr)
    pooled = Lasso(alpha=alpha, tol=1e-12, max_iter=100_000).fit(Ztr, ytr)
    f_star = (0.5 * np.mean((ytr - pooled.predict(Ztr)) ** 2)
              + alpha * np.abs(pooled.coef_).sum())
    fed.history_.set_reference(f_star)
    gap = (fed.objective_ - f_star) / f_star
    same = np.array_equal(np.sign(fed.coef_), np.sign(pooled.coef_))
    sd_diff = np.max(np.abs(scaler.scale_ / pooled_scaler.scale_ - 1))
    original = original_coefficients(result)[0].ravel()
    p(f"\nfederated standardization vs scikit-learn's StandardScaler on the pooled rows: max "
      f"relative difference of the standard deviations {sd_diff:.1e}")
    p(f"federated vs scikit-learn Lasso on the pooled standardized rows: relative objective gap "
      f"{gap:.2e}, max |coef difference| {np.max(np.abs(fed.coef_ - pooled.coef_)):.2e} "
      f"(original units: {np.max(np.abs(original - pooled.coef_ / pooled_scaler.scale_)):.2e}),"
      f" same support: {same}\n")
    h = fed.history_
    p(f"{'round':>7}{'suboptimality':>16}{'stationarity':>15}{'non-zeros':>11}")
    rounds = sorted(set(np.unique(np.geomspace(1, fed.n_iter_, 8).astype(int))) | {0})
    for r in rounds:
        p(f"{r:>7d}{h['suboptimality'][r]:>16.3e}{h['stationarity'][r]:>15.3e}{h['nnz'][r]:>11d}")
    p("\nselected features: " + ", ".join(n for n, c in zip(names, fed.coef_) if c != 0))
    _save(result, report, output, p)
    return fed


def _save(result, report, output, p, json_path=None):
    """Write ``--report``, ``--output`` and ``--json`` (shared by ``demo`` and ``fit``)."""
    if json_path:
        import json

        from .formula_fit import report_json

        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump(report_json(result), fh, indent=1)
        p(f"JSON written to {json_path}")
    if report:
        from .html_report import write_html_report

        write_html_report(result, report, kaplan_meier=result.kaplan_meier)
        p(f"report written to {report}")
    if output:
        import joblib

        model = result.model_to_save
        joblib.dump(model, output)
        if getattr(result, "formula", None) is not None:
            p(f"model saved to {output}: the formula's results (joblib.load(path).predict("
              "pandas.read_csv(file)) builds the design from rows like the input's; "
              ".estimator is the fitted model)")
        elif getattr(result, "preprocess", None):
            steps = ", ".join(name for name, _ in model.steps)
            p(f"model saved to {output}: a scikit-learn Pipeline ({steps}) that predicts "
              "from rows like the input file's: joblib.load(path).predict(pandas.read_csv("
              "file)); feature_names_in_ lists the columns it reads, others are ignored")
        elif result.scaler is None:
            p(f"model saved to {output} (joblib.load it; feature_names_in_ lists the columns "
              "it expects)")
        else:
            p(f"model saved to {output}: a scikit-learn Pipeline, the standardization fitted "
              "on the training rows then the model (joblib.load it and predict from rows in "
              "the original units; feature_names_in_ lists the columns it expects)")


def _fit_parser(sub):
    """Add ``skfed fit`` and its options to the subcommands ``sub``; returns its parser.

    The options are added in the order ``skfed fit --help`` lists them.
    """
    fit = sub.add_parser(
        "fit", help="fit a federated model on CSV data from several sites",
        description="Fit a federated model on CSV data held by several sites, and compare it, "
                    "site by site, with each site's local-only model and the pooled model on "
                    "held-out rows. The features are standardized first (federated: from "
                    "per-site sums over the training rows), so the penalty applies to "
                    "standardized coefficients; the report gives the coefficients in the "
                    "original units too. --no-scale fits the columns as they are.")
    _add_fit_inputs(fit)
    _add_model_options(fit)
    _add_formula_options(fit)
    _add_survival_options(fit)
    from .finegray_fit import add_finegray_options

    add_finegray_options(fit)
    from .boosting_fit import add_boosting_options

    add_boosting_options(fit)
    _add_scaling_and_stopping_options(fit)
    _add_column_options(fit)
    _add_holdout_and_missing_value_options(fit)
    _add_output_options(fit)
    _add_privacy_options(fit)
    _add_site_resident_options(fit)
    return fit


def _add_fit_inputs(fit):
    """The rows: one CSV with a site column, or one CSV per site; the target column(s)."""
    fit.add_argument("data", nargs="?", help="CSV file with every site's rows and a site column")
    fit.add_argument("--site-files", nargs="+", metavar="CSV",
                     help="one CSV per site instead (the site is the file name)")
    fit.add_argument("--target", nargs="+", metavar="COLUMN",
                     help="the column to predict (required without --formula; several for "
                          "--model lowrank; for --model cox two: the event indicator, 1 or "
                          "0 (censored), then the follow-up time)")
    fit.add_argument("--clients", metavar="COLUMN", help="the column naming each row's site")


def _add_model_options(fit):
    """The model, its solver, its penalty and its regression table."""
    from .fit import MODELS

    fit.add_argument("--model", choices=sorted(MODELS),
                     help="the model (required; with --formula: linear, logistic, poisson, "
                          "gamma, tweedie, cox, ordinal, multinomial or gee, or give "
                          "--family; finegray: --target EVENT TIME --cause K)")
    fit.add_argument("--solver", default="auto", help="federated solver (default: auto)")
    fit.add_argument("--summary", action="store_true",
                     help="the regression table on the original columns: estimates, standard "
                          "errors, z, p-values, 95%% intervals, rate or odds ratios (models "
                          "linear, ridge, poisson, gamma, tweedie, logistic; unpenalized: "
                          "--alpha 0, or --C inf); for --model cox the hazard ratios")
    fit.add_argument("--ph-test", choices=["lifelines", "survival3"], default="lifelines",
                     help="a Cox model's proportional-hazards test with --summary: lifelines' "
                          "(default; R's cox.zph before survival 3.0) or R survival 3.x's "
                          "cox.zph score test (transform km, a formula's terms)")
    fit.add_argument("--cov-type", choices=["nonrobust", "HC0", "HC1", "robust", "cluster"],
                     help="the regression table's standard errors: model-based (default), "
                          "robust sandwich (HC0, HC1; for cox: robust), or cluster-robust "
                          "with the sites as clusters")
    fit.add_argument("--alpha", type=float, help="penalty strength (lasso, elasticnet, "
                                                 "lowrank), on the standardized coefficients "
                                                 "unless --no-scale")
    fit.add_argument("--C", type=float, dest="C", help="inverse penalty strength (logistic, "
                                                       "svm), on the standardized coefficients "
                                                       "unless --no-scale")
    fit.add_argument("--l1-ratio", type=float, help="L1 share of the penalty "
                                                    "(elasticnet, logistic, cox)")


def _add_formula_options(fit):
    """``--formula``: statsmodels' and lifelines' model formulas (skfed.formula)."""
    formula = fit.add_argument_group(
        "formula", "a model formula as statsmodels and lifelines write it (docs/formulas.md): "
        "skfed.formula.glm or coxph on every complete row of the sites, with statsmodels' "
        "design and names (treatment coding, interactions, np.log, I(x**2), bs(x, df=k)); "
        "no --target, --categorical or held-out rows")
    formula.add_argument("--formula", metavar="FORMULA",
                         help='"y ~ age + C(sex)", or "Surv(time, event) ~ age + C(sex)" '
                              "with --model cox")
    formula.add_argument("--family", choices=["gaussian", "binomial", "poisson", "gamma",
                                              "tweedie"],
                         help="the GLM's family (instead of --model linear, logistic, "
                              "poisson, gamma, tweedie); gamma and tweedie with the log link")
    formula.add_argument("--var-power", type=float, metavar="P",
                         help="the Tweedie variance power (default 1)")
    formula.add_argument("--groups", metavar="COLUMN",
                         help="--model gee: the cluster of each row (a patient), each "
                              "cluster at one site")
    formula.add_argument("--time", metavar="COLUMN",
                         help="--model gee with --cov-struct autoregressive: each row's "
                              "time in its cluster (whole numbers; default: the rows' order)")
    formula.add_argument("--cov-struct", choices=["independence", "exchangeable",
                                                  "autoregressive"],
                         help="--model gee: the working correlation (default independence)")


def _add_survival_options(fit):
    """``--model cox``: strata, ties and a coarsened time axis."""
    cox = fit.add_argument_group(
        "survival (--model cox)", "Cox regression of --target EVENT TIME "
        "(docs/survival.md); scored by Harrell's concordance on the held-out rows")
    cox.add_argument("--strata", metavar="site|COLUMN",
                     help="site: each site its own baseline hazard (the fit sends no event "
                          "time; works with every site service, which reports its baseline "
                          "at cut points it chooses); a column: one baseline per "
                          "level of it, shared across sites (not a covariate). Default: one "
                          "baseline shared across sites")
    cox.add_argument("--ties", choices=["efron", "breslow"],
                     help="tied event times: Efron's approximation (default; lifelines, R) "
                          "or Breslow's")
    cox.add_argument("--time-grid", metavar="K|T1,T2,...",
                     help="a shared baseline on a coarsened time axis: K intervals at the "
                          "quantiles of the event times, or the cut points T1,T2,... (one cut "
                          "point: T1,). Site services need it for a shared baseline unless "
                          "they allow event times")


def _add_scaling_and_stopping_options(fit):
    """Standardization of the features, and when the solver stops."""
    fit.add_argument("--no-scale", dest="scale", action="store_false",
                     help="fit on the features as they are. By default every feature is "
                          "centred on its mean over the training rows and numeric ones are "
                          "divided by their standard deviation (computed from per-site sums; "
                          "one-hot --categorical columns keep their 0/1 unit, so each category "
                          "is penalized alike); --alpha/--C then apply to the standardized "
                          "coefficients, and the report gives them in the original units too")
    fit.add_argument("--max-rounds", type=int,
                     help="the most rounds of the solver (default 1000; with --formula the "
                          "Python API's: 100 for a GLM, 50 for cox)")
    fit.add_argument("--tol", type=float,
                     help="the solver's tolerance (default 1e-6; with --formula the Python "
                          "API's: 1e-8 for a GLM, 1e-10 for cox)")


def _add_column_options(fit):
    """Which columns are categories, and which are not features at all."""
    fit.add_argument("--categorical", nargs="+", default=[], metavar="COLUMN",
                     help="text columns to one-hot encode (0/1 columns: centred, not "
                          "divided by their standard deviation); for the models with a "
                          "regression table (linear, ridge, poisson, gamma, tweedie, "
                          "logistic, cox) without the reference level, the first of the "
                          "sorted levels (statsmodels' treatment coding); the penalized "
                          "learners keep every level. With --scheduler or --site-service "
                          "the encoding runs at the sites; each sends only the set of "
                          "values it holds")
    fit.add_argument("--offset", metavar="COLUMN",
                     help="a column of offsets, a known term of the linear predictor such "
                          "as log(person-years) for a rate (--model poisson, gamma, "
                          "tweedie, linear, ridge); not a feature. The saved model then "
                          "predicts for an offset of 0 unless given offset=")
    fit.add_argument("--drop", nargs="+", default=[], metavar="COLUMN",
                     help="columns that are not features (identifiers, other outcomes)")


def _add_holdout_and_missing_value_options(fit):
    """The held-out rows of the comparison, and what becomes of missing values."""
    fit.add_argument("--test-size", type=float, default=None,
                     help="share of every site's rows held out to score the models (default: "
                          "0.2, or 0 with --summary: a regression table is fitted on every "
                          "row unless asked); 0: no held-out rows, the final model on every "
                          "row (no held-out score). Site services hold out whole partitions "
                          "drawn from their own secrets")
    fit.add_argument("--final", action="store_true",
                     help="the final model: fit on every row (the same as --test-size 0)")
    fit.add_argument("--impute", choices=["median", "mean", "most_frequent"],
                     help="fill missing feature values (federated: FedSimpleImputer's "
                          "statistics of the training rows from per-site summaries; "
                          "--categorical columns always with their most frequent category). "
                          "Saved with --output: the model imputes rows the same way")
    fit.add_argument("--drop-incomplete", action="store_true",
                     help="drop the rows with a missing value (with --impute: only those "
                          "without a target); the output says how many per site")
    from .missing_values import add_missing_value_options

    add_missing_value_options(fit)
    fit.add_argument("--random-state", type=int, default=0)


def _add_output_options(fit):
    """The HTML report, the JSON of every number and the saved model."""
    fit.add_argument("--report", metavar="HTML", help="write a self-contained HTML report")
    fit.add_argument("--json", metavar="JSON",
                     help="write the fit's numbers as JSON: the coefficients, the regression "
                          "table (--summary, --formula), the rows and scores by site, the "
                          "notes (and the formula's design)")
    fit.add_argument("--output", metavar="JOBLIB",
                     help="save the fitted model (joblib): a scikit-learn Pipeline of the "
                          "imputer (--impute), the one-hot encoder (--categorical), the "
                          "scaler and the estimator, all fitted federatedly: "
                          "joblib.load(path).predict(pandas.read_csv(file)) predicts from "
                          "rows like the input's (extra columns are ignored)")


def _add_privacy_options(fit):
    """Secure aggregation and differential privacy of the federated fit."""
    private = fit.add_argument_group(
        "privacy", "protect each site's contribution (docs/privacy.md); the pooled and "
        "local-only reference fits of the report are not federated and not protected")
    private.add_argument("--secure-aggregation", action="store_true",
                         help="the server sees only the sum of the sites' messages, never "
                              "one site's (pairwise masks)")
    private.add_argument("--dp-epsilon", type=float, metavar="EPSILON",
                         help="client-level differential privacy with this budget for the "
                              "whole fit (implies secure aggregation); the solver is "
                              "DP-FedAvg with uniform site weights unless --solver says "
                              "otherwise")
    private.add_argument("--dp-delta", type=float, metavar="DELTA",
                         help="the delta of the guarantee (default 1e-5; below one over the "
                              "number of sites)")
    private.add_argument("--clip-norm", type=float, metavar="C",
                         help="each site's update is clipped to this L2 norm (default 1)")


def _add_site_resident_options(fit):
    """Rows that stay at the sites: Dask workers (``--scheduler``) or site services."""
    from .remote import add_site_service_options

    remote = fit.add_argument_group(
        "site-resident data", "each file is read by its site's own Dask worker; no row "
        "leaves its site (see the deployment guide)")
    remote.add_argument("--scheduler", metavar="ADDRESS",
                        help="the coordinator's Dask scheduler, e.g. tls://coordinator:8786")
    remote.add_argument("--site", action="append", default=[], metavar="NAME=PATH",
                        help="a site's worker name and a file on that machine (relative "
                             "paths: under its SKFED_DATA_DIR); repeat for every site")
    add_site_service_options(remote, "a site service (skfed site serve) instead of Dask: the "
                                     "site's name and address; repeat for every site; with "
                                     "--dataset")


def _recover_data_file(args):
    """``--categorical A B data.csv`` (or ``--drop``/``--target`` last): argparse gives the
    file name to the option, which takes several values; give it back to ``data``."""
    if args.data or args.site_files or args.scheduler or args.site or args.site_service:
        return
    for option in ("categorical", "drop", "target"):
        values = getattr(args, option)
        if values and values[-1].lower().endswith((".csv", ".tsv", ".txt")):
            if option == "target" and len(values) == 1:
                continue
            args.data = values.pop()
            return


def run_fit(args, out=None):
    """``skfed fit``: returns the :class:`~skfed.cli.fit.FitReport`."""
    from .fit import format_text

    out = sys.stdout if out is None else out
    _recover_data_file(args)
    from .boosting_fit import is_boosting, run_boosting_fit
    from .holdout import holdout_note, none_held_out
    from .missing_values import check_local_only

    check_local_only(args)

    if is_boosting(args):  # trees: a report of their own (no coefficients)
        return run_boosting_fit(args, out)
    from .finegray_fit import is_finegray, run_finegray_fit

    if is_finegray(args):  # competing risks: the estimator's own table
        return run_finegray_fit(args, out)
    if args.formula:
        from .formula_fit import run_formula_fit

        report = run_formula_fit(args)
    elif args.scheduler or args.site or args.site_service:
        _check_model_and_target(args)
        report = _with_summary(_run_remote_fit(args), args)
        home = "services" if args.site_service else "dask"
    else:
        _check_model_and_target(args)
        report = _with_summary(_run_local_fit(args), args)
        home = "local"
    if args.formula:  # its table: every complete row, as the Python API's
        report.none_held_out = "--formula: a regression table is fitted on every complete row"
    else:  # one rule, and one note, for the rows held out
        report.holdout = holdout_note(args, report.site_rows, home)
        report.none_held_out = none_held_out(args)
    print(format_text(report), end="", file=out)
    _save(report, args.report, args.output, lambda *a: print(*a, file=out), args.json)
    return report


def _check_model_and_target(args):
    """Without ``--formula``: ``--model`` and ``--target`` are needed, ``--family`` is not;
    the solver's defaults (1000 rounds, tolerance 1e-6)."""
    from .fit import FORMULA_ONLY_MODELS, OFFSET_MODELS, CLIError

    if args.model in FORMULA_ONLY_MODELS:
        raise CLIError(f"--model {args.model} is fitted from a formula naming its outcome: "
                       "--formula 'grade ~ age + C(sex)'.")
    if args.model is None or not args.target:
        raise CLIError("give --model and --target (or a --formula naming the response).")
    if args.family or args.var_power is not None:
        raise CLIError("--family and --var-power go with --formula; without one, --model "
                       "names the model.")
    args.max_rounds = 1000 if args.max_rounds is None else args.max_rounds
    args.tol = 1e-6 if args.tol is None else args.tol
    if args.offset and args.model not in OFFSET_MODELS:
        raise CLIError(f"--offset is for --model {', '.join(OFFSET_MODELS)}, not "
                       f"{args.model}.")


def _run_local_fit(args):
    """``skfed fit`` on local CSV files: the rows read here, the sites simulated."""
    from .fit import (MODELS, REFERENCE_CODED_MODELS, SURVIVAL_MODELS, CLIError,
                      fit_and_compare, holdout_split, read_csv_files, read_inputs)
    from .missing_values import missing_tokens
    from ..preprocessing._column_encoder import ColumnEncoder, ReferenceCodedEncoder
    from ..preprocessing._column_imputer import ColumnImputer

    if bool(args.data) == bool(args.site_files):
        raise CLIError("give one CSV file (with --clients COLUMN) or --site-files A.csv B.csv ...")
    _, _, classifier = MODELS[args.model]
    reg = _check_strength(args)
    test_size = _test_size(args)
    survival = args.model in SURVIVAL_MODELS
    table = read_csv_files(args.site_files or [args.data], site_files=bool(args.site_files),
                           missing=missing_tokens(args))
    target = args.target[0] if len(args.target) == 1 else args.target
    strata_column = args.strata if survival and args.strata not in (None, "site") else None
    frame, Y, sites, features, notes = read_inputs(
        table, target=target, clients=args.clients, categorical=args.categorical,
        drop=args.drop, classifier=classifier, impute=args.impute,
        drop_incomplete=args.drop_incomplete, survival=survival, strata=strata_column,
        offset=args.offset)
    test = holdout_split(sites, test_size, args.random_state)
    # the imputation statistics from the training rows' per-site summaries; the
    # categories from every site's set (as the one-hot columns always were)
    imputer = ColumnImputer(features, list(args.categorical), args.impute).fit(
        frame[~test], clients=sites[~test])
    filled = imputer.transform(frame)
    coding = ReferenceCodedEncoder if args.model in REFERENCE_CODED_MODELS else ColumnEncoder
    encoder = coding(features, list(args.categorical)).fit(filled, clients=sites)
    X = encoder.transform(filled)
    notes += _local_notes(args, frame, encoder)
    try:
        return fit_and_compare(
            X, Y, sites, model=args.model, test_size=test_size, test=test,
            random_state=args.random_state, feature_names=list(encoder.feature_names_out_),
            output_names=args.target, scale=args.scale, indicators=encoder.indicators_,
            strength=_strength(args, reg), l1_ratio=args.l1_ratio, solver=args.solver,
            max_rounds=args.max_rounds, tol=args.tol, privacy=_privacy(args),
            preprocess=[("impute", imputer), ("encode", encoder)], notes=notes,
            strata_values=None if strata_column is None else frame[strata_column].to_numpy(),
            offset=None if args.offset is None else frame[args.offset].to_numpy(),
            ph_test=args.summary and args.ph_test, **_model_options(args))
    except (ValueError, TypeError) as exc:  # the estimator's own message, without a traceback
        raise CLIError(str(exc)) from exc


def _local_notes(args, frame, encoder):
    """What the local form did to the columns: the values imputed, the reference levels."""
    notes = []
    if args.impute:
        n_filled = int(frame[encoder.features].isna().to_numpy().sum())
        notes.append(f"--impute {args.impute}: filled {n_filled} missing value(s) with "
                     "statistics of the training rows computed from per-site summaries"
                     + (" (categorical columns: their most frequent category)"
                        if args.categorical else ""))
    from .inputs import reference_notes

    return notes + reference_notes(encoder)


def _test_size(args):
    """The held-out share under the one rule of :mod:`skfed.cli.holdout`."""
    from .holdout import test_size

    return test_size(args)


def _privacy(args):
    """``privacy=`` from --secure-aggregation / --dp-epsilon / --dp-delta / --clip-norm."""
    from .fit import CLIError

    dp = args.dp_epsilon is not None
    if not dp and (args.dp_delta is not None or args.clip_norm is not None):
        raise CLIError("--dp-delta and --clip-norm set differential privacy up: give "
                       "--dp-epsilon too.")
    if dp:
        from ..privacy import DifferentialPrivacy

        options = {k: v for k, v in (("delta", args.dp_delta), ("clip_norm", args.clip_norm))
                   if v is not None}
        return DifferentialPrivacy(args.dp_epsilon, **options)
    if args.secure_aggregation:
        from ..privacy import SecureAggregation

        return SecureAggregation()
    return None


def _run_remote_fit(args):
    """``skfed fit --scheduler ... --site NAME=PATH ...``: rows read at the sites."""
    from .fit import CLIError
    from .remote import fit_remote, parse_sites

    if args.site_service:
        return _run_service_fit(args)
    if not (args.scheduler and args.site):
        raise CLIError("site-resident data needs both --scheduler ADDRESS and one --site "
                       "NAME=PATH per site.")
    if args.data or args.site_files or args.clients:
        raise CLIError("with --scheduler the sites' files are read at the sites: give them "
                       "with --site NAME=PATH, not as local files or --clients.")
    _check_remote_target(args, "--scheduler")
    reg = _check_strength(args)
    security = None
    tls = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if any(tls):
        if not all(tls):
            raise CLIError("TLS needs all three of --tls-ca-file, --tls-cert and --tls-key.")
        from distributed.security import Security

        security = Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert,
                            tls_client_key=args.tls_key, require_encryption=True)
    elif args.scheduler.startswith("tls://"):
        raise CLIError("a tls:// coordinator needs --tls-ca-file, --tls-cert and --tls-key.")
    return fit_remote(parse_sites(args.site), scheduler=args.scheduler, security=security,
                      target=_remote_target(args), model=args.model, drop=args.drop,
                      categorical=args.categorical, scale=args.scale, test_size=_test_size(args),
                      random_state=args.random_state,
                      strength=_strength(args, reg), l1_ratio=args.l1_ratio, solver=args.solver,
                      max_rounds=args.max_rounds, tol=args.tol, privacy=_privacy(args),
                      impute=args.impute, drop_incomplete=args.drop_incomplete,
                      offset=args.offset, ph_test=args.summary and args.ph_test,
                      **_model_options(args, remote=True))


def _model_options(args, remote=False):
    """The model's options beyond the penalty: ``cov_type``, and the Cox model's
    ``strata``, ``ties`` and ``time_grid`` (refused for the other models by
    :func:`~skfed.cli.fit.make_estimator`)."""
    from .fit import SURVIVAL_MODELS, CLIError, parse_time_grid

    if args.model in SURVIVAL_MODELS and args.dp_epsilon is not None:
        raise CLIError(f"--model {args.model} does not run under differential privacy (its "
                       "Newton steps and standard errors would need noise calibrated to the "
                       "partial likelihood); --secure-aggregation protects each site's "
                       "messages.")
    if remote and args.strata not in (None, "site"):
        raise CLIError(f"--strata {args.strata}: on the command line a strata column is for "
                       "the rows in one file; with site-resident data use --strata site or "
                       "one shared baseline (no --strata), or fit FedCoxPH(strata=COLUMN) on "
                       "the FederatedDataset in Python (each site then moves the column "
                       "into its target).")
    return {"cov_type": args.cov_type, "strata": args.strata, "ties": args.ties,
            "time_grid": parse_time_grid(args.time_grid)}


def _check_remote_target(args, option):
    from .fit import SURVIVAL_MODELS, CLIError

    want = 2 if args.model in SURVIVAL_MODELS else 1
    if len(args.target) != want:
        what = ("two --target columns (the event, then the time)" if want == 2 else
                "one --target column")
        raise CLIError(f"with {option} give {what}.")


def _remote_target(args):
    """The sites' target column (a list of two for a survival model: event, time)."""
    from .fit import SURVIVAL_MODELS

    return list(args.target) if args.model in SURVIVAL_MODELS else args.target[0]


def _check_strength(args):
    """The model's penalty option (``alpha`` or ``C``; ``None``: the model has none), after
    refusing the other one."""
    from .fit import MODELS, CLIError

    reg = MODELS[args.model][1]
    for other in ("alpha", "C"):
        if other != reg and getattr(args, other) is not None:
            takes = f"takes --{reg}" if reg else "has no penalty"
            raise CLIError(f"--model {args.model} {takes}, not --{other}.")
    return reg


def _strength(args, reg):
    return getattr(args, reg) if reg else None


def _with_summary(report, args):
    """``--summary``: the regression table on the original columns."""
    from .summary import regression_table

    if getattr(args, "summary", False):
        report.summary = regression_table(report)
    return report


def _run_service_fit(args):
    """``skfed fit --site-service NAME=HOST:PORT ... --dataset NAME``: the sites' services
    run every step under their own policies."""
    from .fit import CLIError
    from .remote import fit_services, parse_sites

    if args.scheduler or args.site or args.data or args.site_files or args.clients:
        raise CLIError("--site-service reaches the sites' own services: give no --scheduler, "
                       "--site, local files or --clients with it.")
    if not args.dataset:
        raise CLIError("--site-service needs --dataset NAME (the dataset's name in the "
                       "sites' configurations).")
    tls = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if not all(tls):
        raise CLIError("site services need --tls-ca-file, --tls-cert and --tls-key (mutual "
                       "TLS with the analyst's certificate).")
    _check_remote_target(args, "--site-service")
    reg = _check_strength(args)
    return fit_services(parse_sites(args.site_service), dataset=args.dataset,
                        target=_remote_target(args), drop=args.drop, ca_file=args.tls_ca_file,
                        cert_file=args.tls_cert, key_file=args.tls_key, model=args.model,
                        categorical=args.categorical, scale=args.scale,
                        test_size=_test_size(args), random_state=args.random_state,
                        strength=_strength(args, reg), l1_ratio=args.l1_ratio,
                        solver=args.solver, max_rounds=args.max_rounds, tol=args.tol,
                        privacy=_privacy(args), impute=args.impute,
                        drop_incomplete=args.drop_incomplete, offset=args.offset,
                        ph_test=args.summary and args.ph_test,
                        **_model_options(args, remote=True))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="skfed", description="Federated convex estimators.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="federated Lasso on a built-in heterogeneous dataset")
    demo.add_argument("--alpha", type=float, default=2.0,
                      help="L1 strength on the standardized coefficients (default 2)")
    demo.add_argument("--sites", type=int, default=5, help="number of sites (default 5)")
    demo.add_argument("--report", metavar="HTML", help="write a self-contained HTML report")
    demo.add_argument("--output", metavar="JOBLIB", help="save the fitted estimator (joblib)")
    demo.add_argument("--csv", metavar="CSV", help="also write the sites' rows to this CSV "
                                                   "(the input of the equivalent skfed fit)")
    _fit_parser(sub)
    from .describe import add_describe_parser

    add_describe_parser(sub)
    sub.add_parser("support-matrix",
                   help="print the estimator x solver support matrix (Markdown), from the code")
    from .site import add_relay_parser, add_site_parser, run_relay, run_site

    add_site_parser(sub)
    add_relay_parser(sub)
    from .analyses import COMMANDS, add_analysis_parsers, run_analysis

    add_analysis_parsers(sub)  # km, mixed, meta
    args = parser.parse_args(argv)
    if args.command == "site":
        return run_site(args)
    if args.command == "relay":
        return run_relay(args)
    if args.command in COMMANDS:
        return run_analysis(args)
    if args.command == "demo":
        run_demo(alpha=args.alpha, n_sites=args.sites, report=args.report, output=args.output,
                 csv=args.csv)
    elif args.command == "fit":
        from .fit import CLIError

        try:
            run_fit(args)
        except CLIError as exc:
            print(f"skfed fit: error: {exc}", file=sys.stderr)
            return 2
    elif args.command == "describe":
        from .describe import recover_data_file, run_describe
        from .fit import CLIError

        recover_data_file(args)
        try:
            run_describe(args)
        except CLIError as exc:
            print(f"skfed describe: error: {exc}", file=sys.stderr)
            return 2
    elif args.command == "support-matrix":
        from .._support import format_support_matrix, support_matrix

        print(format_support_matrix(support_matrix()), end="")
    return 0
