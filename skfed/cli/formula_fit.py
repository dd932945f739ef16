"""``skfed fit --formula "y ~ age + C(sex)"``: skfed's formula fits from the command line.

:func:`skfed.formula.glm` (``--model linear|logistic|poisson|gamma|tweedie``
or ``--family``), :func:`skfed.formula.coxph` (``--model cox``) and
:func:`skfed.formula.gee` (``--model gee --groups COLUMN``) on the
rows of one CSV with a ``--clients`` column, of one CSV per site
(``--site-files``), or of a dataset that site services serve
(``--site-service NAME=HOST:PORT ... --dataset NAME``, its columns named by
the formula). The fit is the Python API's on the same rows: statsmodels'
(lifelines') design, names and numbers on every complete row of every site;
its ``summary()`` is the report's regression table. Also here:
:func:`report_json`, the numbers of any ``skfed fit`` report as JSON
(``--json``).
"""

import numpy as np

from .fit import (CLIError, FitReport, coefficient_headers, coefficient_rows, intercept_row,
                  fit_watching_convergence, metric_name, pass_on_warnings, traffic)
from .json_values import json_value

#: ``--model`` -> the formula's GLM family (``cox``: :func:`skfed.formula.coxph`)
FAMILIES = {"linear": "gaussian", "logistic": "binomial", "poisson": "poisson",
            "gamma": "gamma", "tweedie": "tweedie"}
#: ``--model`` -> the route of a categorical outcome (:func:`skfed.formula.ordinal`, 
#: :func:`skfed.formula.mnlogit`)
DISCRETE = ("ordinal", "multinomial")

#: options a formula fit does not take, with what to do instead
_NOT_WITH_FORMULA = (
    ("target", "--target", "the formula names the response: 'y ~ ...', or "
                           "'Surv(time, event) ~ ...' with --model cox"),
    ("categorical", "--categorical", "write C(column) in the formula (treatment coding "
                                     "against its first level, or C(column, "
                                     "Treatment('b')))"),
    ("drop", "--drop", "the formula names the columns it uses"),
    ("alpha", "--alpha", "a formula fit is unpenalized (statsmodels' GLM, lifelines' Cox)"),
    ("C", "--C", "a formula fit is unpenalized (statsmodels' GLM)"),
    ("l1_ratio", "--l1-ratio", "a formula fit is unpenalized"),
    ("impute", "--impute", "a formula uses each site's complete rows (statsmodels' "
                           "missing='drop')"),
    ("dp_epsilon", "--dp-epsilon", "a formula fit runs Newton's method, which differential "
                                   "privacy does not cover; --secure-aggregation masks it"),
)


def formula_model(args):
    """``(model, family)`` of a ``--formula`` fit from ``--model`` or ``--family``
    (``family`` ``None`` for ``cox``; a GEE's ``--family``, gaussian by default)."""
    if args.model == "gee":
        if args.family == "tweedie":
            raise CLIError("--model gee takes --family gaussian, binomial, poisson or gamma.")
        return "gee", args.family or "gaussian"
    if args.family:
        model = {family: model for model, family in FAMILIES.items()}[args.family]
        if args.model not in (None, model):
            raise CLIError(f"--family {args.family} is --model {model}; give one of them.")
        return model, args.family
    if args.model in ("cox", *DISCRETE):
        return args.model, None
    if args.model not in FAMILIES:
        raise CLIError("--formula fits --model " + ", ".join([*FAMILIES, "cox", *DISCRETE])
                       + (f", not {args.model}" if args.model else " (or give --family)")
                       + ".")
    return args.model, FAMILIES[args.model]


def _check_options(args, model):
    """Refuse what a formula fit does not take, naming what to do instead."""
    for attribute, option, instead in _NOT_WITH_FORMULA:
        if getattr(args, attribute, None) not in (None, [], ()):
            raise CLIError(f"{option} does not go with --formula: {instead}.")
    if args.test_size not in (None, 0):
        raise CLIError("--test-size does not go with --formula: a formula fit uses every "
                       "complete row of every site (the final model; no held-out score).")
    if model == "cox" and (args.offset or args.var_power is not None):
        raise CLIError("--offset and --var-power are for a GLM's formula, not --model cox.")
    if model in DISCRETE and (args.offset or args.var_power is not None):
        raise CLIError(f"--model {model} takes no --offset nor --var-power.")
    if model in DISCRETE and args.cov_type not in (None, "nonrobust", "HC0", "cluster"):
        raise CLIError(f"--model {model} takes --cov-type nonrobust, HC0 or cluster (the "
                       f"sites as clusters), not {args.cov_type}.")
    if model in DISCRETE and args.report:
        raise CLIError(f"--model {model} has no HTML report yet (its Newton rounds keep "
                       "no solver history to plot): use --json or --output.")
    _check_gee_options(args, model)
    if model != "cox" and (args.strata or args.ties):
        raise CLIError("--strata and --ties are for --model cox.")
    if args.scheduler or args.site:
        raise CLIError("--formula reads local CSV files or site services (--site-service); "
                       "on Dask workers fit skfed.formula.glm or coxph in Python on "
                       "FederatedDataset.from_sources(...).")


def _check_gee_options(args, model):
    """``--groups``, ``--time`` and ``--cov-struct`` are a GEE's, which needs ``--groups``
    and takes no offset, variance power or HTML report."""
    gee_options = [o for o, a in (("--groups", "groups"), ("--time", "time"),
                                  ("--cov-struct", "cov_struct"))
                   if getattr(args, a, None) is not None]
    if model != "gee":
        if gee_options:
            raise CLIError(f"{gee_options[0]} is for --model gee (clustered rows).")
        return
    if not getattr(args, "groups", None):
        raise CLIError("--model gee needs --groups COLUMN: the cluster of each row (a "
                       "patient), each cluster at one site.")
    if args.offset or args.var_power is not None or args.cov_type not in (None, "robust",
                                                                         "nonrobust"):
        raise CLIError("--model gee takes no --offset nor --var-power; --cov-type robust "
                       "(default: the sandwich) or nonrobust (model-based).")
    if args.report:
        raise CLIError("--model gee has no HTML report yet (its rounds keep no solver "
                       "history to plot): use --json or --output.")


def _local_frame(args):
    """``(DataFrame, clients)`` of the local CSV files: one file with its --clients
    column, or one file per site (the site: the file's name)."""
    import pandas as pd

    from .missing_values import missing_tokens, pandas_options

    if bool(args.data) == bool(args.site_files):
        raise CLIError("give one CSV file (with --clients COLUMN) or --site-files A.csv "
                       "B.csv ...")
    from pathlib import Path

    frames = []
    for path in args.site_files or [args.data]:
        if not Path(path).is_file():
            raise CLIError(f"cannot read {path}: no such file.")
        frame = pd.read_csv(path, skipinitialspace=True, encoding="utf-8-sig",
                            float_precision="round_trip", **pandas_options(missing_tokens(args)))
        frames.append(frame.rename(columns=lambda c: str(c).strip()))
    if args.site_files:
        if args.clients:
            raise CLIError("pass either --clients (one file with a site column) or "
                           "--site-files (one file per site), not both.")
        sites = np.repeat([Path(p).stem for p in args.site_files], [len(f) for f in frames])
        return pd.concat(frames, ignore_index=True), sites
    if not args.clients:
        raise CLIError("say which column names each row's site: --clients COLUMN (or give "
                       "one file per site with --site-files).")
    return frames[0], args.clients


def _service_dataset(args):
    """The site services' dataset, without a target (the formula names its columns)."""
    from ..data import FederatedDataset
    from .describe import check_service_options

    if args.site_files:
        raise CLIError("--site-service reaches the sites' own services: give no local files "
                       "or --clients with it.")
    sites = check_service_options(args)  # --dataset, the TLS files, no file nor --clients
    return FederatedDataset.from_sites(sites, dataset=args.dataset, ca_file=args.tls_ca_file,
                                       cert_file=args.tls_cert, key_file=args.tls_key)


def _fit(args, model, family, data, clients):
    """The formula's results (:mod:`skfed.formula`), and whether the fit converged."""
    from ..formula import coxph, glm
    from ..privacy import SecureAggregation

    options = {"cov_type": args.cov_type or "nonrobust", "clients": clients,
               "privacy": SecureAggregation() if args.secure_aggregation else None}
    for name, value in (("tol", args.tol), ("max_rounds", args.max_rounds)):
        if value is not None:  # else the Python API's defaults
            options[name] = value
    if model == "gee":
        return _fit_gee(args, family, data, options)
    if model in DISCRETE:
        from ..formula import mnlogit, ordinal

        route = ordinal if model == "ordinal" else mnlogit
        fit = lambda: route(args.formula, data, **options)  # noqa: E731
    elif model == "cox":
        from .fit import parse_time_grid

        grid = parse_time_grid(getattr(args, "time_grid", None))
        fit = lambda: coxph(args.formula, data, strata=args.strata,  # noqa: E731
                            ties=args.ties or "efron", time_grid=grid, **options)
    else:
        fit = lambda: glm(args.formula, data, family=family,  # noqa: E731
                          var_power=args.var_power, offset=args.offset, **options)
    results, caught = fit_watching_convergence(fit)
    return results, pass_on_warnings(caught, stacklevel=3)


def _fit_gee(args, family, data, options):
    """:func:`skfed.formula.gee` with the command line's options."""
    from ..formula import gee

    options["cov_type"] = "naive" if args.cov_type == "nonrobust" else "robust"
    if "tol" in options:
        options["ctol"] = options.pop("tol")
    if "max_rounds" in options:
        options["maxiter"] = options.pop("max_rounds")
    results, caught = fit_watching_convergence(
        lambda: gee(args.formula, data, groups=args.groups, time=args.time, family=family,
                    cov_struct=args.cov_struct or "independence", **options))
    return results, pass_on_warnings(caught, stacklevel=3)


def run_formula_fit(args):
    """``skfed fit --formula ...``: the :class:`~skfed.cli.fit.FitReport` of the formula's
    fit, its regression table the results' ``summary()``."""
    from ..data import FederatedDataset
    from ..formula import FormulaError
    from ..sites import SiteRefusal, SiteServiceError, SiteUnavailable

    model, family = formula_model(args)
    _check_options(args, model)
    data = None
    try:
        if args.site_service:
            data, clients = _service_dataset(args), None
        else:
            data, clients = _local_frame(args)
        results, converged = _fit(args, model, family, data, clients)
        summary = results.summary()
        ph_test = None
        if model == "cox":  # on the fit's own rows, while the services are open
            from .ph_test import ph_test_of

            ph_test = ph_test_of(results, method=args.ph_test)
    except (FormulaError, ValueError, TypeError, SiteRefusal, SiteServiceError,
            SiteUnavailable) as exc:
        raise CLIError(str(exc)) from exc
    finally:
        if isinstance(data, FederatedDataset):  # the connections to the services
            data.close()
    rows = results.rows_by_site
    names = [c["name"] for c in results.design["columns"] if c["name"] != "Intercept"]
    outcome = args.formula.split("~")[0].strip()
    outputs = ([f"{outcome}={v}" for v in results.levels[1:]] if model == "multinomial"
               else [outcome])
    return FitReport(
        model=model, estimator=results.estimator, metric=metric_name(model),
        feature_names=names, output_names=outputs,
        site_rows=[(str(s), int(n), 0, np.nan, np.nan, np.nan) for s, n in rows.items()],
        overall=(int(rows.sum()), 0, np.nan, np.nan, np.nan), converged=converged,
        notes=[], test=None, summary=summary, formula=results, ph_test=ph_test)


def report_json(report):
    """Every number of a ``skfed fit`` report, as plain JSON values (``--json``).

    Parameters
    ----------
    report : FitReport

    Returns
    -------
    dict
        ``model``, ``estimator``, ``formula`` (and its ``design``), the
        ``coefficients`` (``{feature: [values...]}`` under ``headers``), the
        ``intercept``, the regression table ``summary`` (``{row: {column:
        value}}``, or ``None``), the ``sites`` with their rows and scores,
        ``overall``, ``ph_test`` (a Cox model's proportional-hazards test with
        ``--summary``, or why there is none: :mod:`skfed.cli.ph_test`),
        ``converged``, ``notes``, ``holdout`` (which rows were held out and why,
        :mod:`skfed.cli.holdout`) and ``traffic``.
    """
    from .ph_test import ph_test_json

    rows = coefficient_rows(report)
    out = {"model": report.model, "estimator": type(report.estimator).__name__,
           "formula": None if report.formula is None else report.formula.formula,
           "metric": report.metric, "headers": coefficient_headers(report),
           "coefficients": {name: list(values) for name, *values in rows},
           "intercept": None if report.survival else list(intercept_row(report)[1:]),
           "summary": None if report.summary is None else
           {": ".join(map(str, k)) if isinstance(k, tuple) else str(k): dict(v)
            for k, v in report.summary.to_dict(orient="index").items()},
           "sites": [dict(zip(("site", "train_rows", "test_rows", "federated", "local_only",
                                "pooled"), r)) for r in report.site_rows],
           "overall": dict(zip(("train_rows", "test_rows", "federated", "local_only",
                                "pooled"), report.overall)),
           "ph_test": ph_test_json(report.ph_test),
           "converged": report.converged, "notes": list(report.notes),
           "holdout": report.holdout, "traffic": traffic(report)}
    if report.formula is not None:
        out["design"] = report.formula.design
    return json_value(out)
