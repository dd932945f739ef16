"""``skfed fit``: a federated fit from CSV files, for analysts who do not write Python.

Reads one CSV (with a column naming each row's site) or one CSV per site,
holds out a share of every site's rows, fits the federated model, and
compares it, site by site, with each site's local-only model and the pooled
model (the same estimator fitted on all training rows at once). Errors are
:class:`CLIError` with a message a person can act on; the command line
prints it without a traceback.
"""

import csv
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .errors import CLIError  # the other modules (and tests) import it from here too
from ..data.steps import MIN_SITE_ROWS

#: ``--model`` -> (estimator name, regularization option, is a classifier)
MODELS = {
    "lasso": ("FedLasso", "alpha", False),
    "elasticnet": ("FedElasticNet", "alpha", False),
    "logistic": ("FedLogisticRegression", "C", True),
    "svm": ("FedLinearSVC", "C", True),
    "lowrank": ("FedLowRank", "alpha", False),
    # generalized linear models (--summary: their regression table)
    "linear": ("FedLinearRegression", None, False),
    "ridge": ("FedRidge", "alpha", False),
    "poisson": ("FedPoissonRegressor", "alpha", False),
    "gamma": ("FedGammaRegressor", "alpha", False),
    "tweedie": ("FedTweedieRegressor", "alpha", False),
    # survival (--target EVENT TIME; scored by Harrell's concordance; --summary: hazard ratios)
    "cox": ("FedCoxPH", "alpha", False),
    # boosted trees (skfed.cli.boosting_fit, their own report; "boosting": by the target)
    "boosting": ("FedHistGradientBoostingRegressor", None, False),
    "boosting-regressor": ("FedHistGradientBoostingRegressor", None, False),
    "boosting-classifier": ("FedHistGradientBoostingClassifier", None, True),
    # a categorical outcome, from a formula only (skfed.formula.ordinal, mnlogit)
    "ordinal": ("FedOrderedModel", None, True),
    "multinomial": ("FedMNLogit", None, True),
    # clustered rows (skfed.formula.gee: --groups, --cov-struct, --family)
    "gee": ("FedGEE", None, False),
    # competing risks (skfed.cli.finegray_fit: --target EVENT TIME --cause K)
    "finegray": ("FedFineGray", None, False),
}
#: the models fitted from a --formula only (their outcome a column the formula names)
FORMULA_ONLY_MODELS = ("ordinal", "multinomial", "gee")
#: the models with a regression table (``--summary``)
GLM_MODELS = ("linear", "ridge", "poisson", "gamma", "tweedie", "logistic")
#: the survival models: a target of two columns (event, time); the Cox model's table
SURVIVAL_MODELS = ("cox",)
#: the models that take ``--offset`` (their estimators' ``fit(..., offset=)``)
OFFSET_MODELS = ("linear", "ridge", "poisson", "gamma", "tweedie")
#: the models whose --categorical columns leave out a reference level (statsmodels'
#: treatment coding): with an intercept or a baseline hazard, every level's column would
#: be collinear with it and the regression table would not exist; the penalized
#: learners (lasso, elastic net, SVM, low rank) keep every level, which the penalty
#: treats alike whatever level comes first (as glmnet does)
REFERENCE_CODED_MODELS = GLM_MODELS + SURVIVAL_MODELS
#: ``--cov-type`` values by kind of model
COV_TYPES = {"glm": ("nonrobust", "HC0", "HC1", "cluster"),
             "survival": ("nonrobust", "robust", "cluster")}
#: most classes ``--model logistic/svm`` accepts: more is likely a continuous target
MAX_CLASSES = 50


@dataclass
class Table:
    """The rows of the CSV input, as strings, with where each came from."""

    columns: list
    rows: list = field(default_factory=list)
    origin: list = field(default_factory=list)  # (file name, line number) per row
    site: list = field(default_factory=list)    # site label per row, from --site-files


def read_csv_files(paths, *, site_files=False, missing=None):
    """Rows of one or several CSV files with the same header, each cell stripped; a cell
    that is one of the ``missing`` tokens (default: pandas.read_csv's,
    :mod:`skfed.cli.missing_values`) is read as the empty cell, a missing value."""
    from .missing_values import PANDAS_NA_VALUES, blank_missing

    missing = PANDAS_NA_VALUES if missing is None else frozenset(missing)
    table = None
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise CLIError(f"cannot read {path}: no such file.")
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header:
                raise CLIError(f"{path} is empty: the first line must name the columns.")
            header = [h.strip() for h in header]
            if table is None:
                table = Table(columns=header)
            elif header != table.columns:
                raise CLIError(f"{path} has columns {header}, but {paths[0]} has "
                               f"{table.columns}; every site file needs the same columns.")
            n_before = len(table.rows)
            for line, row in enumerate(reader, start=2):
                if not row or all(not cell.strip() for cell in row):
                    continue
                if len(row) != len(header):
                    raise CLIError(f"{path.name}, line {line}: {len(row)} values for "
                                   f"{len(header)} columns.")
                table.rows.append([cell.strip() for cell in row])
                table.origin.append((path.name, line))
                if site_files:
                    table.site.append(path.stem)
            if len(table.rows) == n_before:
                raise CLIError(f"{path} has a header but no data rows.")
    blank_missing(table.rows, missing)
    return table


def _column(table, name, role):
    if name not in table.columns:
        raise CLIError(f"column {name!r} ({role}) not found; the columns are: "
                       + ", ".join(table.columns) + ".")
    return table.columns.index(name)


def column_roles(table, *, target, clients=None, categorical=(), drop=()):
    """``(targets, sites, features)``: the target column names, every row's site and the
    feature columns (every column but the target(s), the site column and ``drop``)."""
    targets = [target] if isinstance(target, str) else list(target)
    t_idx = [_column(table, t, "target") for t in targets]
    if table.site:
        if clients is not None:
            raise CLIError("pass either --clients (one file with a site column) or "
                           "--site-files (one file per site), not both.")
        sites = np.array(table.site)
        skip = set(t_idx)
    else:
        if clients is None:
            raise CLIError("say which column names each row's site: --clients COLUMN "
                           "(or give one file per site with --site-files).")
        c_idx = _column(table, clients, "--clients site column")
        sites = np.array([row[c_idx] for row in table.rows])
        skip = set(t_idx) | {c_idx}
    skip |= {_column(table, name, "--drop") for name in drop}
    for name in categorical:
        if _column(table, name, "--categorical") in skip:
            raise CLIError(f"--categorical {name!r} is the target, the site column or dropped.")
    features = [name for k, name in enumerate(table.columns) if k not in skip]
    if not features:
        raise CLIError("no feature columns are left besides the target and the site column.")
    return targets, sites, features


def target_values(table, targets, keep, classifier, survival=False):
    """The target(s) of the kept rows (class labels or numbers; with ``survival`` the
    structured (event, time) array of :func:`skfed.survival.survival_target`)."""
    rows = [row for row, k in zip(table.rows, keep) if k]
    idx = [table.columns.index(t) for t in targets]
    if survival:
        from ..survival import survival_target
        from .inputs import event_value

        return survival_target([event_value(row[idx[0]]) for row in rows],
                               [float(row[idx[1]]) for row in rows])
    if classifier:
        if len(targets) != 1:
            raise CLIError("a classifier takes one --target column.")
        Y = np.array([row[idx[0]] for row in rows])
        classes = np.unique(Y)
        check_class_target(targets[0], Y, classes)
        if len(classes) < 2:
            raise CLIError(f"target {targets[0]!r} has only one class ({str(classes[0])!r}); a "
                           "classifier needs at least two.")
        return _maybe_numeric_labels(Y)
    Y = np.array([[float(row[k]) for k in idx] for row in rows])
    return Y[:, 0] if len(targets) == 1 else Y


def read_inputs(table, *, target, clients=None, categorical=(), drop=(), classifier=False,
                impute=None, drop_incomplete=False, survival=False, strata=None, offset=None):
    """The checked input of ``skfed fit``: ``(frame, Y, sites, features, notes)``.

    Every problem is reported in one :class:`CLIError` (see
    :func:`skfed.cli.inputs.check_columns`); ``frame`` holds the feature
    columns of the rows kept (numbers as floats, categories as strings,
    missing values as NaN), ``notes`` what was done to the rows.

    ``survival``: the target is two columns, the event indicator (0/1) then
    the follow-up time (``Y``: the structured array of
    :func:`skfed.survival.survival_target`). ``strata``: a column that is not
    a feature but the Cox model's strata; ``frame`` then holds it last, as
    text (the fitted preprocessing steps ignore it). ``offset``: a column
    that is not a feature but a GLM's offset; ``frame`` then holds it last,
    as numbers.
    """
    from .inputs import IMPUTE_STRATEGIES, check_columns, dropped_note, feature_frame

    if impute is not None and impute not in IMPUTE_STRATEGIES:
        raise CLIError(f"--impute takes one of {', '.join(IMPUTE_STRATEGIES)}; got {impute!r}.")
    targets = [target] if isinstance(target, str) else list(target)
    if survival and len(targets) != 2:
        raise CLIError("a survival model takes two --target columns, the event indicator "
                       "(1: the event happened, 0: censored) then the follow-up time: "
                       f"--target EVENT TIME; got {len(targets)} ({', '.join(targets)}).")
    if strata is not None:
        _column(table, strata, "--strata")
        if strata in targets or strata == clients:
            raise CLIError(f"--strata {strata!r} is a --target or the --clients column; "
                           "give another column (or --strata site for one baseline per site).")
        drop = [*drop, strata]  # not a feature: the model's strata
    if offset is not None:
        _check_offset_column(table, offset, targets, clients, categorical, strata)
        drop = [*drop, offset]  # not a feature: the model's offset
    targets, sites, features = column_roles(table, target=target, clients=clients,
                                            categorical=categorical, drop=drop)
    keep = check_columns(table, features=features, categorical=list(categorical),
                         targets=targets, regression=not classifier, impute=impute,
                         drop_incomplete=drop_incomplete, survival=survival, strata=strata,
                         offset=offset)
    notes = []
    if drop_incomplete:
        notes.append(dropped_note(sites, keep, impute))
    Y = target_values(table, targets, keep, classifier, survival=survival)
    frame = feature_frame(table, features, list(categorical), keep)
    if strata is not None:
        k = table.columns.index(strata)
        frame[strata] = np.array([row[k] for row, kept in zip(table.rows, keep) if kept],
                                 dtype=object)
    if offset is not None:
        k = table.columns.index(offset)
        frame[offset] = np.array([float(row[k]) for row, kept in zip(table.rows, keep)
                                  if kept])
    return frame, Y, sites[keep], features, notes


def _check_offset_column(table, offset, targets, clients, categorical, strata):
    """``--offset``: a column of the input that has no other role."""
    _column(table, offset, "--offset")
    if offset in targets or offset in (clients, strata) or offset in categorical:
        raise CLIError(f"--offset {offset!r} is a --target, the --clients, --strata or a "
                       "--categorical column; give the column of log exposures.")


def check_class_target(name, y, classes):
    """Refuse a continuous target (or one with very many classes) for a classifier."""
    try:
        numeric = np.asarray(y, dtype=float)
    except ValueError:
        numeric = None
    if numeric is not None and np.any(numeric != np.round(numeric)):
        example = next(v for v, f in zip(y, numeric) if f != round(f))
        raise CLIError(f"target {name!r} is continuous (e.g. {str(example)!r}), but --model "
                       "logistic/svm predict classes: use --model lasso or elasticnet, or "
                       "bin the target into classes first.")
    if len(classes) > MAX_CLASSES:
        raise CLIError(f"target {name!r} has {len(classes)} distinct values; a classifier here "
                       f"takes at most {MAX_CLASSES} classes. If it is a measurement, use "
                       "--model lasso or elasticnet.")


def _maybe_numeric_labels(y):
    try:
        numeric = y.astype(float)
    except ValueError:
        return y
    return numeric.astype(int) if np.all(numeric == np.round(numeric)) else y


def holdout_split(sites, test_size, random_state):
    """Boolean mask of held-out rows: ``ceil(test_size * n)`` random rows of every site.

    ``test_size=0``: no row is held out (the final model, on every row).
    Raises if a site has fewer than :data:`MIN_SITE_ROWS` rows.
    """
    if not 0 <= test_size < 1:
        raise CLIError(f"--test-size must be between 0 (no held-out rows: fit on every row) "
                       f"and 1; got {test_size}.")
    rng = np.random.default_rng(random_state)
    test = np.zeros(len(sites), dtype=bool)
    labels, counts = np.unique(sites, return_counts=True)
    if test_size == 0:
        return test
    small = [f"{str(lab)!r} ({n} rows)" for lab, n in zip(labels, counts) if n < MIN_SITE_ROWS]
    if small:
        raise CLIError(f"site(s) {', '.join(small)} have too few rows: each site needs at "
                       f"least {MIN_SITE_ROWS} (some to train on, some to evaluate on); merge "
                       "or drop them.")
    for label in labels:
        idx = np.flatnonzero(sites == label)
        k = max(1, math.ceil(test_size * len(idx)))
        test[rng.permutation(idx)[:k]] = True
    return test


def make_estimator(model, *, strength=None, l1_ratio=None, solver="auto", max_rounds=1000,
                   tol=1e-6, random_state=0, privacy=None, cov_type=None, strata=None,
                   ties=None, time_grid=None):
    """The estimator ``--model`` names, with the options given (``cov_type``: the
    regression table's standard errors, for the models of :data:`GLM_MODELS` and
    :data:`SURVIVAL_MODELS`; ``strata``, ``ties`` and ``time_grid``: the Cox model's)."""
    import skfed

    name, reg, _ = MODELS[model]
    params = {"solver": solver, "max_rounds": max_rounds, "tol": tol,
              "random_state": random_state, "privacy": privacy}
    if strength is not None:
        if reg is None:
            raise CLIError(f"--model {model} has no penalty: give neither --alpha nor --C.")
        params[reg] = strength
    if l1_ratio is not None:
        if model not in ("elasticnet", "logistic", "cox"):
            raise CLIError(f"--l1-ratio applies to elasticnet, logistic and cox, not {model}.")
        params["l1_ratio"] = l1_ratio
    if cov_type is not None:
        kind = "survival" if model in SURVIVAL_MODELS else "glm"
        if model not in GLM_MODELS + SURVIVAL_MODELS:
            raise CLIError(f"--cov-type is for the models with a regression table "
                           f"({', '.join(GLM_MODELS + SURVIVAL_MODELS)}), not {model}.")
        if cov_type not in COV_TYPES[kind]:
            raise CLIError(f"--model {model} takes --cov-type {', '.join(COV_TYPES[kind])}; "
                           f"got {cov_type}" + (" (the Cox model's sandwich is --cov-type "
                                                "robust)" if kind == "survival" else
                                                " (the sandwich: HC0 or HC1)") + ".")
        params["cov_type"] = cov_type
    for option, value in (("strata", strata), ("ties", ties), ("time_grid", time_grid)):
        if value is None:
            continue
        if model not in SURVIVAL_MODELS:
            raise CLIError(f"--{option.replace('_', '-')} is for --model cox, not {model}.")
        params[option] = value
    return getattr(skfed, name)(**params)


def parse_time_grid(text):
    """``--time-grid``: ``"10"`` -> 10 intervals at the quantiles of the event times;
    ``"30,60,90"`` (or one cut point, ``"26,"``) -> those cut points."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) == 1:
            k = int(parts[0])
            if k < 2:
                raise ValueError
            return k
        cuts = [float(p) for p in parts if p]
    except ValueError:
        raise CLIError(f"--time-grid takes a number of intervals (an integer >= 2) or "
                       f"increasing cut points separated by commas (30,60,90); got "
                       f"{text!r}.") from None
    if not cuts or any(b <= a for a, b in zip(cuts, cuts[1:])) or not all(
            map(math.isfinite, cuts)):
        raise CLIError(f"--time-grid cut points must be finite and increasing; got {text!r}.")
    return cuts


def _fit_quietly(est, X, y, clients=None, **fit_params):
    """Fit without ConvergenceWarning (local-only and pooled reference fits);
    ``fit_params``: ``offset=`` for a GLM with offsets."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if clients is not None:
            fit_params["clients"] = clients
        return est.fit(X, y, **fit_params)


def _score(est, X, y, classifier, survival=False, offset=None):
    if len(y) == 0:
        return np.nan
    if survival:  # Harrell's concordance (NaN without a comparable pair)
        return float(est.score(X, y))
    pred = est.predict(X) if offset is None else est.predict(X, offset=offset)
    if classifier:
        return float(np.mean(pred == y))
    y2, p2 = np.reshape(y, (len(y), -1)), np.reshape(pred, (len(y), -1))
    ss = np.sum((y2 - y2.mean(axis=0)) ** 2)
    return float(1 - np.sum((y2 - p2) ** 2) / ss) if ss > 0 else np.nan


@dataclass
class FitReport:
    """Everything ``skfed fit`` prints and puts in the HTML report."""

    model: str
    estimator: object    # the federated model, fitted on the standardized columns if scaled
    metric: str
    feature_names: list
    output_names: list
    site_rows: list      # (site, n_train, n_test, federated, local-only, pooled)
    overall: tuple       # (n_train, n_test, federated, local-only (NaN), pooled)
    converged: bool
    notes: list
    test: np.ndarray     # held-out rows
    scaler: object = None  # the FeatureScaler fitted on the training rows; None: --no-scale
    preprocess: list = field(default_factory=list)  # (name, step) before the scaler
    summary: object = None  # the regression table on the original columns (--summary)
    formula: object = None  # --formula: the FormulaResults (skfed.formula) fitted
    kaplan_meier: object = None  # a survival model's: the Kaplan-Meier table of its rows
    ph_test: object = None  # a Cox model's PH test with --summary (skfed.cli.ph_test.PHTest)
    holdout: str = None  # which rows were held out, and why (skfed.cli.holdout)
    #: why no row was held out, in a few words (skfed.cli.holdout.none_held_out)
    none_held_out: str = "--test-size 0: the final model, fitted on every row"

    @property
    def survival(self):
        """Whether the model is a survival model (no intercept; hazard ratios)."""
        return self.model in SURVIVAL_MODELS

    @property
    def held_out(self):
        """Whether some rows were held out (not with ``--test-size 0``)."""
        return self.overall[1] > 0

    @property
    def model_to_save(self):
        """What ``--output`` saves: a scikit-learn Pipeline of the fitted preprocessing
        (``impute`` and ``encode`` when the fit read raw columns, ``scale`` unless
        ``--no-scale``) and the ``model``: it predicts from rows like the input's; the
        estimator alone when there is nothing before it; with ``--formula``, the
        formula's results (their ``predict`` builds the design from raw rows)."""
        from sklearn.pipeline import Pipeline

        from ..survival import SurvivalPipeline

        if self.formula is not None:
            return self.formula
        steps = list(self.preprocess)
        if self.scaler is not None:
            steps.append(("scale", self.scaler))
        if not steps:
            return self.estimator
        # a Cox model's pipeline predicts survival curves too
        kind = SurvivalPipeline if self.survival else Pipeline
        return kind(steps + [("model", self.estimator)])


def _model_frame(Z, names, strata, rows):
    """The model's input: ``Z[rows]`` as a DataFrame of the columns ``names`` (the fit's
    messages and parameter names then name the columns), and the strata column beside
    it when ``strata`` is ``(column name, values)``."""
    import pandas as pd

    frame = pd.DataFrame(Z[rows], columns=list(names))
    if strata is not None:
        frame[strata[0]] = strata[1][rows]
    return frame


def _offset_of(offset, rows):
    """``{"offset": offset[rows]}`` for a fit with offsets, else ``{}``."""
    return {} if offset is None else {"offset": offset[rows]}


def _fit_local(reference, scale, indicators, X, y, names, strata, rows, offset=None):
    """A site's local-only model on its rows ``rows`` (a strata column kept aside from
    the scaling; the rows' offsets given to the model)."""
    from sklearn.base import clone
    from sklearn.pipeline import make_pipeline

    from ..model_selection._local_baseline import local_model
    from ..preprocessing._feature_scaler import FeatureScaler

    if strata is None and offset is None:
        return _fit_quietly(local_model(reference, scale, indicators), X[rows], y[rows])
    scaler = FeatureScaler(indicators=indicators).fit(X[rows]) if scale else None
    Z = X if scaler is None else scaler.transform(X)
    est = _fit_quietly(clone(reference), _model_frame(Z, names, strata, rows), y[rows],
                       **_offset_of(offset, rows))
    est.__dict__.pop("feature_names_in_", None)  # it predicts from arrays (no strata)
    return est if scaler is None else make_pipeline(scaler, est)


def fit_and_compare(X, Y, sites, *, model, test_size=0.2, random_state=0, feature_names=None,
                    output_names=None, scale=True, indicators=(), test=None, preprocess=(),
                    notes=(), strata_values=None, offset=None, ph_test=False, **options):
    """Fit federated, local-only and pooled models; score them on held-out rows.

    With ``scale`` the features are standardized first (see
    :mod:`skfed.preprocessing._feature_scaler`; ``indicators``: the one-hot
    columns, centred but not divided): the federated and pooled models with
    the statistics of every site's training rows (computed from per-site
    sums), each local-only model with its site's own training rows. Held-out rows are
    transformed with those statistics, never their own.

    ``test``: the held-out rows (default: :func:`holdout_split`); none
    (``test_size=0``): the model is fitted on every row and nothing is
    scored. ``preprocess``: the fitted ``(name, step)`` pairs that made
    ``X`` from the input's columns (the saved Pipeline's first steps).

    A survival model (``Y``: the (event, time) array) is scored by Harrell's
    concordance; ``strata_values``: each row's level of the column that
    ``options["strata"]`` names (not a feature: neither scaled nor a
    covariate). With ``strata="site"`` the pooled reference keeps one
    baseline per site (the same model, fitted in process). ``offset``: each
    row's offset (``--offset``), given to every fit and prediction. ``ph_test``: a
    Cox model's proportional-hazards test on its training rows (``--summary``; a
    method of ``--ph-test``, ``True`` lifelines').
    """
    from sklearn.base import clone

    classifier = MODELS[model][2]
    survival = model in SURVIVAL_MODELS
    if model == "lowrank" and (np.ndim(Y) != 2 or Y.shape[1] < 2):
        raise CLIError("--model lowrank fits several targets at once (a low-rank coefficient "
                       "matrix): give two or more --target columns.")
    if test is None:
        test = holdout_split(sites, test_size, random_state)
    tr = ~test
    scaler, Z = _standardize(X, sites, tr, scale, indicators)
    est = make_estimator(model, random_state=random_state, **options)
    names = feature_names or [f"x{k}" for k in range(X.shape[1])]
    strata = None
    if survival and strata_values is not None:
        strata = (est.strata, np.asarray(strata_values, dtype=object))
    rows = _ComparisonRows(X, Z, Y, sites, test, names, strata, classifier, survival,
                           None if offset is None else np.asarray(offset, dtype=float))
    fed, caught = fit_watching_convergence(
        lambda: clone(est).fit(rows.model_input(tr), Y[tr], clients=sites[tr],
                               **_offset_of(rows.offset, tr)))
    # the model predicts from arrays (the strata column was beside the features)
    fed.__dict__.pop("feature_names_in_", None)
    converged = pass_on_warnings(caught, stacklevel=2)
    # the references (pooled, local-only) need no protection: they show what the
    # federated model is compared with, so they are fitted without privacy=
    reference = clone(est).set_params(privacy=None)
    # nothing to score without held-out rows: no pooled or local-only reference fits
    pooled = _fit_pooled(reference, rows) if test.any() else None
    notes = list(notes)
    site_rows = _site_rows(rows, fed, pooled, reference, scale, indicators, notes)
    overall = (int(tr.sum()), int(test.sum()), rows.score(fed, Z, test), np.nan,
               rows.score(pooled, Z, test))
    if not preprocess:
        # the columns the saved model expects (a Pipeline: its scaler checks them, as
        # scikit-learn's StandardScaler would, and hands the model an array)
        (fed if scaler is None else scaler).feature_names_in_ = np.array(names, dtype=object)
    test_of_ph = None
    if ph_test and survival:
        from .ph_test import ph_test_of

        test_of_ph = ph_test_of(fed, rows.model_input(tr), Y[tr], sites[tr],
                                method=ph_test)
    return FitReport(model=model, estimator=fed, metric=metric_name(model),
                     feature_names=names, output_names=output_names, site_rows=site_rows,
                     overall=overall, converged=converged, notes=notes, test=test,
                     scaler=scaler, preprocess=list(preprocess),
                     kaplan_meier=_kaplan_meier_of(Y[tr], sites[tr]) if survival else None,
                     ph_test=test_of_ph)


def _kaplan_meier_of(Y, sites):
    """The Kaplan-Meier table of the survival target ``Y``, pooled over the sites:
    the report draws it beside the Cox model's adjusted curves."""
    import pandas as pd

    from ..stats import kaplan_meier
    from ..survival._target import split_survival

    event, time = split_survival(Y)
    frame = pd.DataFrame({"time": np.asarray(time, dtype=float),
                          "event": np.asarray(event, dtype=float)})
    return kaplan_meier(frame, time="time", event="event", clients=sites)


def _standardize(X, sites, train, scale, indicators):
    """``(scaler, Z)``: a FeatureScaler fitted on every site's ``train`` rows (from
    per-site sums) and ``X`` transformed with it; ``(None, X)`` without ``scale``."""
    from ..preprocessing._feature_scaler import FeatureScaler

    if not scale:
        return None, X
    scaler = FeatureScaler(indicators=indicators).fit(X[train], clients=sites[train])
    return scaler, scaler.transform(X)


def fit_watching_convergence(fit):
    """``fit()`` with its warnings recorded: ``(what it returns, the warnings)``.

    Every ConvergenceWarning is recorded, even one shown before: the report says
    whether the federated fit converged (:func:`pass_on_warnings`).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        fitted = fit()
    return fitted, caught


def pass_on_warnings(caught, stacklevel):
    """Whether the fit converged (no ConvergenceWarning among the warnings ``caught``);
    the other warnings are raised again.

    ``stacklevel``: as :func:`warnings.warn`'s, counted from the caller.
    """
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    for w in caught:  # the others (privacy noise, ...) reach the user
        if not issubclass(w.category, ConvergenceWarning):
            warnings.warn(w.message, w.category, stacklevel=stacklevel + 1)
    return converged


@dataclass
class _ComparisonRows:
    """The rows :func:`fit_and_compare` fits its models on, and how it scores them."""

    X: np.ndarray        # the features as read: each local-only model scales its own
    Z: np.ndarray        # the federated and pooled models' (X standardized, unless --no-scale)
    Y: np.ndarray
    sites: np.ndarray
    test: np.ndarray     # held-out rows
    names: list
    strata: tuple        # the Cox model's (strata column, values), or None
    classifier: bool
    survival: bool
    offset: np.ndarray = None  # each row's offset (--offset), or None

    @property
    def train(self):
        return ~self.test

    def model_input(self, rows):
        """What the federated and pooled models see of ``rows`` (:func:`_model_frame`)."""
        return _model_frame(self.Z, self.names, self.strata, rows)

    def score(self, est, features, rows):
        """The held-out score of ``est`` on ``features[rows]`` (NaN without rows)."""
        return _score(est, features[rows], self.Y[rows], self.classifier, self.survival,
                      None if self.offset is None else self.offset[rows])


def _fit_pooled(reference, rows):
    """The pooled reference: ``reference`` fitted on the training rows of every site at
    once."""
    from sklearn.base import clone

    tr = rows.train
    # one baseline per site is the model: the pooled fit needs to know the sites
    by_site = rows.survival and "site" in np.atleast_1d(
        np.asarray(reference.strata, dtype=object))
    pooled = _fit_quietly(clone(reference), rows.model_input(tr), rows.Y[tr],
                          clients=rows.sites[tr] if by_site else None,
                          **_offset_of(rows.offset, tr))
    pooled.__dict__.pop("feature_names_in_", None)
    return pooled


def _site_rows(rows, fed, pooled, reference, scale, indicators, notes):
    """Per site, ``(site, n_train, n_test, federated, local-only, pooled)``: the scores
    on its held-out rows (NaN without any); why a site has no local-only model goes to
    ``notes``."""
    final = not rows.test.any()
    table = []
    for label in np.unique(rows.sites):
        s_tr, s_te = rows.train & (rows.sites == label), rows.test & (rows.sites == label)
        local_score = np.nan if final else _local_only_score(
            reference, scale, indicators, rows, label, s_tr, s_te, notes)
        table.append((str(label), int(s_tr.sum()), int(s_te.sum()),
                      rows.score(fed, rows.Z, s_te), local_score,
                      rows.score(pooled, rows.Z, s_te)))
    return table


def _local_only_score(reference, scale, indicators, rows, label, s_tr, s_te, notes):
    """The score of site ``label``'s local-only model (fitted on its training rows
    ``s_tr``) on its held-out rows ``s_te``; NaN, and a note why, when it has none."""
    if rows.classifier and len(np.unique(rows.Y[s_tr])) < 2:
        notes.append(f"site {label!r} holds one class only: it has no local-only model.")
        return np.nan
    try:
        local = _fit_local(reference, scale, indicators, rows.X, rows.Y, rows.names,
                           rows.strata, s_tr, rows.offset)
        return rows.score(local, rows.X, s_te)
    except ValueError as exc:
        if not rows.survival:
            raise
        # e.g. no event among the site's training rows: no model of its own
        notes.append(f"site {label!r} has no local-only model: {exc}")
        return np.nan


def metric_name(model):
    """The held-out score of ``--model``."""
    if model in SURVIVAL_MODELS:
        return "Harrell's concordance"
    return "accuracy" if MODELS[model][2] else "R2"


def _coef_matrix(report):
    """``(coef, intercept)`` of the fitted model, as ``(n_outputs, n_features)`` and
    ``(n_outputs,)``."""
    est = report.estimator
    coef = np.atleast_2d(est.coef_)              # (n_outputs or classes, n_features)
    if report.formula is not None:  # the formula's design carries its intercept column
        names = [c["name"] for c in report.formula.design["columns"]]
        if "Intercept" not in names:
            return coef, np.zeros(coef.shape[0])
        k = names.index("Intercept")
        return np.delete(coef, k, axis=1), coef[:, k]
    if coef.shape[1] != len(report.feature_names):
        coef = coef.reshape(-1, len(report.feature_names))
    if report.survival:  # no intercept: the baseline hazard plays its part
        return coef, np.zeros(coef.shape[0])
    return coef, np.ravel(est.intercept_)


def original_coefficients(report):
    """``(coef, intercept)`` in the CSV's units (``coef / scale``, ``intercept - sum(coef *
    mean / scale)``), shaped as in :func:`_coef_matrix`; the fitted ones under --no-scale."""
    coef, intercept = _coef_matrix(report)
    if report.scaler is None:
        return coef, intercept
    return report.scaler.original_coefficients(coef, intercept)


def coefficient_rows(report):
    """``(feature, values...)`` rows, non-zeros first (largest first, on the fitted scale):
    the fitted coefficients, then (if the features were scaled) the same in original units."""
    coef, _ = _coef_matrix(report)
    columns = coef if report.scaler is None else np.vstack([coef, original_coefficients(
        report)[0]])
    if report.survival:  # the hazard ratio per unit of the column
        columns = np.vstack([columns, np.exp(original_coefficients(report)[0])])
    size = np.max(np.abs(coef), axis=0)
    order = sorted(range(len(size)), key=lambda k: (size[k] == 0, -size[k], k))
    return [(report.feature_names[k], *columns[:, k]) for k in order]


def intercept_row(report):
    """The intercept(s), in the columns of :func:`coefficient_rows`."""
    _, intercept = _coef_matrix(report)
    if report.scaler is not None:
        intercept = np.concatenate([intercept, original_coefficients(report)[1]])
    return ("(intercept)", *intercept)


def _output_headers(report):
    est = report.estimator
    n = np.atleast_2d(est.coef_).shape[0]
    if hasattr(est, "classes_"):
        return [f"class {c}" for c in est.classes_] if n > 1 else [f"coef ({est.classes_[1]})"]
    if report.output_names and len(report.output_names) == n:
        return list(report.output_names)
    return ["coef"] if n == 1 else [f"output {k}" for k in range(n)]


def coefficient_headers(report):
    """Column headers of :func:`coefficient_rows` (without the feature column)."""
    heads = _output_headers(report)
    if report.survival:
        return (["coef"] if report.scaler is None else ["standardized", "original units"]) \
            + ["hazard ratio"]
    if report.scaler is None:
        return heads
    if len(heads) == 1:
        return ["standardized", "original units"]
    return [f"{h} (std.)" for h in heads] + [f"{h} (orig.)" for h in heads]


def coefficient_title(report):
    """The line above the coefficient table."""
    if report.survival:
        if report.scaler is None:
            return ("log hazard ratios (coef), non-zeros first; hazard ratio: exp(coef), per "
                    "unit of the column:")
        return ("log hazard ratios, non-zeros first; standardized: as fitted, per sd of the "
                "feature;\n  original units: the same model per unit of the column (coef / "
                "sd); hazard ratio: exp(original units):")
    if report.scaler is None:
        return "coefficients (non-zeros first):"
    est, heads = report.estimator, _output_headers(report)
    what = ""
    if len(heads) == 1:
        what = (f" for class {est.classes_[1]}" if hasattr(est, "classes_")
                else f" of {heads[0]}" if heads[0] != "coef" else "")
    onehot = " (one-hot: per unit)" if len(report.scaler.indicators) else ""
    return (f"coefficients{what}, non-zeros first; standardized: as fitted, per sd of the "
            f"feature{onehot};\n  original units: the same model (coef / sd; intercept - "
            "sum(coef * mean / sd)):")


def scaling_text(report):
    """Whether the features were standardized, and what the penalty acts on."""
    reg = MODELS[report.model][1]
    if report.formula is not None:
        return (f"formula {report.formula.formula!r}: statsmodels' design of every complete "
                "row (treatment coding, no standardization), unpenalized")
    if report.scaler is None:
        return (f"features not scaled (--no-scale): {reg} applies to the coefficients in the "
                "features' original units")
    onehot = "; one-hot: centred only" if len(report.scaler.indicators) else ""
    return (f"features standardized (mean 0, sd 1 on the training rows, from per-site sums"
            f"{onehot});\n{reg} applies to the standardized coefficients (--no-scale: to those "
            "in the original units)")


def survival_text(report):
    """The Cox model's settings: ties, strata, baseline, standard errors."""
    est = report.estimator
    strata = est.strata
    items = [] if strata is None else [strata] if isinstance(strata, str) else list(strata)
    parts = []
    if "site" in items:
        parts.append("strata site (each site its own baseline hazard: the fit sends no "
                     "event time)")
    columns = [s for s in items if s != "site"]
    if columns:
        parts.append(f"strata {columns[0]} (one baseline per level)")
    if "site" not in items:
        grid = est.time_grid_
        parts.append("one baseline hazard shared across sites, " + (
            "at the exact event times (the pooled event times are exchanged)" if grid is None
            else f"on a time grid of {len(grid) + 1} intervals (cut points "
                 + ", ".join(f"{c:g}" for c in grid[:8]) + (", ..." if len(grid) > 8 else "")
                 + ")"))
    return (f"Cox model: {est.ties} ties; " + "; ".join(parts)
            + f"; {est.n_events_} events in the training rows")


def traffic(report):
    if hasattr(report.estimator, "traffic_"):  # Newton on site sums: its own ledger
        return dict(report.estimator.traffic_, monitor_bytes=0)
    h = report.estimator.history_
    return {"rounds": int(report.estimator.n_iter_), "bytes_up": int(h["bytes_up"].sum()),
            "bytes_down": int(h["bytes_down"].sum()),
            "monitor_bytes": int(h["monitor_bytes"].sum()), "setup_bytes": int(h.setup_bytes)}


def penalty_text(report):
    """The regularization the fit used, defaults included: ``alpha=0.1`` or
    ``C=1, l1_ratio=0``."""
    params = report.estimator.get_params()
    reg = MODELS[report.model][1]
    names = ([reg] if reg else []) + [k for k in ("l1_ratio", "penalty", "loss")
                                      if k in params and params[k] != "deprecated"]
    if not names:
        return "no penalty"
    return ", ".join(f"{k}={params[k]:g}" if isinstance(params[k], float)
                     else f"{k}={params[k]}" for k in names)


def _fmt(v):
    return "  n/a" if isinstance(v, float) and math.isnan(v) else f"{v:.4f}"


def privacy_lines(privacy):
    """What ``--secure-aggregation`` / ``--dp-epsilon`` did, for the report."""
    if "epsilon" not in privacy:
        return ["privacy: secure aggregation (the server decoded only sums of the sites' "
                "messages)"]
    lines = [f"privacy: client-level differential privacy, epsilon={privacy['epsilon']:g}, "
             f"delta={privacy['delta']:g}, clip_norm={privacy['clip_norm']:g}, noise "
             f"multiplier {privacy['noise_multiplier']:.3g}, with secure aggregation"]
    if "solver" in privacy:
        lines.append(f"  solver {privacy['solver']}, {privacy['client_weighting']} site "
                     f"weights ({privacy['chosen']})")
    noise = privacy.get("noise_report")
    if noise:
        over = (f"over the fit {noise['fit_ratio']:.3g} times the signal"
                if np.isfinite(noise["fit_ratio"]) else "no signal measurable above it")
        lines.append(f"  noise on the mean update {noise['noise_norm']:.3g} per round; {over}"
                     + (" (it swamps the signal: see the warning)" if noise["fit_ratio"] > 1
                        else ""))
    return lines


def _held_out_lines(report, lines):
    """The held-out score table of :func:`format_text`."""
    lines.append(f"held-out {report.metric} (higher is better):")
    lines.append(f"  {'site':<16}{'train':>7}{'test':>7}{'federated':>11}{'local-only':>12}"
                 f"{'pooled':>9}")
    for site, n_tr, n_te, fed, loc, pool in report.site_rows:
        lines.append(f"  {site:<16}{n_tr:>7}{n_te:>7}{_fmt(fed):>11}{_fmt(loc):>12}"
                     f"{_fmt(pool):>9}")
    n_tr, n_te, fed, _, pool = report.overall
    lines.append(f"  {'overall':<16}{n_tr:>7}{n_te:>7}{_fmt(fed):>11}{'':>12}{_fmt(pool):>9}")
    for note in ([report.holdout] if report.holdout else []) + report.notes:
        lines.append(f"  note: {note}")


def _no_held_out_line(report):
    """Why the report has no held-out score, with the rows each site fitted on."""
    if report.holdout:
        return report.holdout
    by_site = ", ".join(f"{r[0]} {r[1]}" for r in report.site_rows)
    if report.formula is not None:
        return (f"no held-out score: a formula fit uses every complete row (rows by site: "
                f"{by_site})")
    return (f"no held-out score: --test-size 0 fits on every row (training rows by site: "
            f"{by_site}); run with --test-size 0.2 to estimate how well the model predicts")


def _coefficient_lines(report):
    """The coefficients as fitted, non-zeros first (the exact zeros named), then the
    intercept."""
    lines = []
    heads = coefficient_headers(report)
    width = max(12, max(len(n) for n in report.feature_names) + 2)
    cell = max([14] + [len(h) + 2 for h in heads])
    lines.append(coefficient_title(report))
    lines.append(f"  {'feature':<{width}}" + "".join(f"{h:>{cell}}" for h in heads))
    zeros = []
    for name, *values in coefficient_rows(report):
        if not any(values):
            zeros.append(name)
            continue
        lines.append(f"  {name:<{width}}" + "".join(f"{v:>#{cell}.6g}" for v in values))
    if zeros:
        lines.append(f"  exactly zero ({len(zeros)}): " + ", ".join(zeros))
    if not report.survival:
        name, *intercept = intercept_row(report)
        lines.append(f"  {name:<{width}}" + "".join(f"{v:>#{cell}.6g}" for v in intercept))
    return lines


def _solver_name(est):
    if hasattr(est, "dep_params_"):  # a GEE
        return "Fisher scoring on the GEE's score (the sites' summed bread and score)"
    solver = getattr(est, "solver_", None)
    return "newton (on the sites' summed log-likelihood)" if solver is None else solver.name


def format_text(report):
    """The terminal report."""
    est, lines = report.estimator, []
    t = traffic(report)
    lines.append(f"skfed fit: {type(est).__name__} ({report.model}, {penalty_text(report)}), "
                 f"solver {_solver_name(est)}, {len(report.site_rows)} sites, "
                 f"{report.overall[0]} training rows, "
                 + (f"{report.overall[1]} held out" if report.held_out else
                    f"none held out ({report.none_held_out})"))
    lines.append(scaling_text(report))
    if report.survival:
        lines.append(survival_text(report))
    lines.append("")
    if report.summary is None:  # with --summary the regression table shows them
        lines.extend(_coefficient_lines(report) + [""])
    if report.summary is not None:
        from .summary import summary_lines

        lines.extend(summary_lines(report))
        lines.append("")
    if not report.held_out:
        lines.append(_no_held_out_line(report))
        for note in report.notes:
            lines.append(f"  note: {note}")
    else:
        _held_out_lines(report, lines)
    lines.append("")
    privacy = getattr(getattr(est, "history_", None), "privacy", None)
    state = "converged" if report.converged else "did NOT converge (raise --max-rounds)"
    if privacy:
        lines.extend(privacy_lines(privacy))
        if "epsilon" in privacy:
            state = ("no convergence check under differential privacy (the last noisy step "
                     f"moved the model by {privacy['noise_report']['final_step']:.2g} of its "
                     "norm)") if privacy.get("noise_report") else state
    rounds = f"{t['rounds']} round{'' if t['rounds'] == 1 else 's'}"
    lines.append(f"{rounds}, {state}; sent {t['bytes_up']:,} bytes up and "
                 f"{t['bytes_down']:,} down (+{t['monitor_bytes']:,} monitoring, "
                 f"{t['setup_bytes']:,} setup)")
    return "\n".join(lines) + "\n"
