"""``skfed fit --model boosting``: federated boosted trees from the command line.

:class:`~skfed.ensemble.FedHistGradientBoostingRegressor` (``--model
boosting-regressor``) or ``...Classifier`` (``--model boosting-classifier``;
``--model boosting`` takes a classifier for a text target, else a regressor)
on the rows of one CSV with a ``--clients`` column, of one CSV per site
(``--site-files``), or of a dataset site services serve (``--site-service
NAME=HOST:PORT ... --dataset NAME``). The model is scikit-learn's
``HistGradientBoosting*`` fitted on the pooled training rows, tree for tree
(``docs/boosting.md``); categorical columns are the trees' own (no one-hot
encoding) and missing values get their own bin (nothing is imputed).

The report gives each site's held-out score (federated, local-only and pooled
for local files; federated only at site services, where a site scores the
model on its own held-out rows and sends the score's sums) and the training
loss after each tree, pooled from the sites' sums; ``--json`` writes them, and
``--report`` an HTML page with them, a figure of the loss per tree, the trees'
settings and the fit's rounds and bytes (:mod:`skfed.cli.boosting_report`).
"""

import json
import math
from dataclasses import dataclass, field

import numpy as np

from .errors import CLIError

#: ``--model`` -> a classifier (True), a regressor (False), or by the target (None)
BOOSTING_MODELS = {"boosting": None, "boosting-classifier": True,
                   "boosting-regressor": False}
#: the most lines of the loss-per-tree table (every k-th tree, and the last)
MAX_LOSS_LINES = 20

#: options a boosting fit does not take, with what to do instead
_NOT_FOR_BOOSTING = (
    ("alpha", "--alpha", "the trees have no penalty option here"),
    ("C", "--C", "the trees have no penalty option here"),
    ("l1_ratio", "--l1-ratio", "the trees have no penalty option here"),
    ("summary", "--summary", "boosted trees have no regression table"),
    ("cov_type", "--cov-type", "boosted trees have no regression table"),
    ("impute", "--impute", "the trees give missing values their own bin (scikit-learn's "
                           "rule): nothing is imputed"),
    ("offset", "--offset", "boosted trees take no offset"),
    ("strata", "--strata", "it is for --model cox"),
    ("ties", "--ties", "it is for --model cox"),
    ("time_grid", "--time-grid", "it is for --model cox"),
    ("dp_epsilon", "--dp-epsilon", "differential privacy is not offered for boosted trees"),
    ("scheduler", "--scheduler", "boosting reaches site-resident rows through site "
                                 "services (--site-service ... --dataset)"),
)


def add_boosting_options(fit):
    """The trees' options (``--model boosting``), as an argument group of ``fit``."""
    trees = fit.add_argument_group(
        "boosted trees (--model boosting, boosting-classifier, boosting-regressor)",
        "scikit-learn's HistGradientBoosting on the pooled rows, tree for tree "
        "(docs/boosting.md); --max-rounds is the number of trees (default 100)")
    trees.add_argument("--learning-rate", type=float, metavar="RATE",
                       help="the shrinkage (default 0.1)")
    trees.add_argument("--max-depth", type=int, metavar="N",
                       help="the deepest a tree grows (default: no limit)")
    trees.add_argument("--max-leaf-nodes", type=int, metavar="N",
                       help="leaves per tree (default 31)")
    trees.add_argument("--min-samples-leaf", type=int, metavar="N",
                       help="pooled rows per leaf at least (default 20)")
    trees.add_argument("--binning", type=int, metavar="K",
                       help="bins from the sites' sketches: means of groups of at least K "
                            "rows (at site services K is their min_rows; without it the "
                            "exact bins, which need allow_exact_quantiles)")


#: the trees' own options (:func:`add_boosting_options`)
TREE_OPTIONS = ("learning_rate", "max_depth", "max_leaf_nodes", "min_samples_leaf",
                "binning")


def is_boosting(args):
    """Whether ``skfed fit`` fits boosted trees (``--model boosting...``, no formula);
    the trees' options with another model are refused, not ignored."""
    boosting = getattr(args, "model", None) in BOOSTING_MODELS and \
        not getattr(args, "formula", None)
    given = [name for name in TREE_OPTIONS if getattr(args, name, None) is not None]
    if given and not boosting:
        raise CLIError(f"--{given[0].replace('_', '-')} is for --model boosting, "
                       "boosting-classifier or boosting-regressor.")
    return boosting


@dataclass
class BoostingReport:
    """What ``skfed fit --model boosting`` prints and writes."""

    model: str
    estimator: object
    metric: str
    feature_names: list
    categorical: list
    site_rows: list      # (site, n_train, n_test, federated, local-only, pooled)
    overall: tuple       # (n_train, n_test, federated, local-only (NaN), pooled)
    notes: list = field(default_factory=list)

    @property
    def held_out(self):
        return self.overall[1] > 0

    @property
    def model_to_save(self):
        """What ``--output`` saves: the estimator (it predicts from rows like the input's
        feature columns; categorical columns as text)."""
        return self.estimator


def run_boosting_fit(args, out):
    """``skfed fit --model boosting...``: fit, print the report, write ``--json``,
    ``--report`` and ``--output``; returns the :class:`BoostingReport`."""
    _check_options(args)
    from .holdout import holdout_note

    report = _service_fit(args) if args.site_service else _local_fit(args)
    report.notes.insert(0, holdout_note(args, report.site_rows,
                                        "services" if args.site_service else "local"))
    print(format_boosting_text(report), end="", file=out)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(boosting_json(report), fh, indent=1)
        print(f"JSON written to {args.json}", file=out)
    if args.report:
        from .boosting_report import write_boosting_html_report

        write_boosting_html_report(report, args.report, max_loss_rows=MAX_LOSS_LINES)
        print(f"report written to {args.report}", file=out)
    if args.output:
        import joblib

        joblib.dump(report.model_to_save, args.output)
        print(f"model saved to {args.output}: joblib.load(path).predict(pandas.read_csv(file)"
              "[feature_names_in_]) predicts from rows like the input's", file=out)
    return report


def _check_options(args):
    taken = [(flag, why) for name, flag, why in _NOT_FOR_BOOSTING
             if getattr(args, name, None) not in (None, False, [], ())]
    if taken:
        flag, why = taken[0]
        raise CLIError(f"--model {args.model} takes no {flag}: {why}.")
    if not args.target or len(args.target) != 1:
        raise CLIError(f"--model {args.model} takes one --target column.")
    if args.site:
        raise CLIError(f"--model {args.model} reaches site-resident rows through site "
                       "services: --site-service NAME=HOST:PORT ... --dataset NAME.")
    if args.max_rounds is not None and args.max_rounds < 1:
        raise CLIError("--max-rounds (the number of trees) must be at least 1.")


def _estimator(args, classifier):
    from ..ensemble import FedHistGradientBoostingClassifier, FedHistGradientBoostingRegressor

    params = {"random_state": args.random_state,
              "categorical_features": list(args.categorical) or None}
    for option, name in (("max_rounds", "max_iter"), ("learning_rate", "learning_rate"),
                         ("max_depth", "max_depth"), ("max_leaf_nodes", "max_leaf_nodes"),
                         ("min_samples_leaf", "min_samples_leaf"), ("binning", "binning")):
        value = getattr(args, option, None)
        if value is not None:
            params[name] = value
    if args.secure_aggregation:  # every sum masked, exact: the same trees
        from ..privacy import SecureAggregation

        params["privacy"] = SecureAggregation()
    kind = FedHistGradientBoostingClassifier if classifier else FedHistGradientBoostingRegressor
    return kind(**params)


def _test_size(args):
    """The held-out share under the one rule of :mod:`skfed.cli.holdout` (trees have no
    regression table: 0.2 unless told)."""
    from .holdout import test_size

    return test_size(args)


# -- rows read here -----------------------------------------------------------------
def _local_fit(args):
    """Local CSV files: the sites simulated here; local-only and pooled references."""
    from .fit import holdout_split, read_csv_files
    from .missing_values import missing_tokens

    if bool(args.data) == bool(args.site_files):
        raise CLIError("give one CSV file (with --clients COLUMN) or --site-files A.csv "
                       "B.csv ... (or --site-service ... --dataset NAME).")
    table = read_csv_files(args.site_files or [args.data], site_files=bool(args.site_files),
                           missing=missing_tokens(args))
    frame, Y, sites, features, classifier, notes = _read_rows(table, args)
    test = holdout_split(sites, _test_size(args), args.random_state)
    est = _estimator(args, classifier)
    fed = _fitted(est, frame[~test], Y[~test], clients=sites[~test])
    # the references are one party's fits: nothing to mask
    est = est.set_params(privacy=None)
    pooled = _fitted(est, frame[~test], Y[~test]) if test.any() else None
    site_rows = []
    for label in np.unique(sites):
        s_tr, s_te = ~test & (sites == label), test & (sites == label)
        local = _local_only(est, frame, Y, s_tr, s_te, classifier, label, notes)
        site_rows.append((str(label), int(s_tr.sum()), int(s_te.sum()),
                          _score(fed, frame, Y, s_te), local,
                          _score(pooled, frame, Y, s_te)))
    if pooled is not None and args.binning is None:
        notes.append("pooled: the same estimator on every site's training rows at once "
                     "(scikit-learn's model); the federated model is that model, tree for "
                     "tree")
    elif pooled is not None:
        notes.append("pooled: the same estimator on every site's training rows at once, "
                     "binned at its own sketch of them; the federated model is "
                     "scikit-learn's on the rows' bin indices at the sites' sketches, so "
                     "the two differ by their bins")
    overall = (int((~test).sum()), int(test.sum()), _score(fed, frame, Y, test), np.nan,
               _score(pooled, frame, Y, test))
    return BoostingReport(model=args.model, estimator=fed, metric=_metric(classifier),
                          feature_names=list(features), categorical=list(args.categorical),
                          site_rows=site_rows, overall=overall, notes=notes)


def _read_rows(table, args):
    """``(frame, Y, sites, features, classifier, notes)`` of the kept rows: the features
    as the trees take them (numbers, text categories, missing values as NaN)."""
    from .fit import column_roles, target_values
    from .inputs import check_columns, dropped_note, feature_frame, is_missing

    target = args.target[0]
    targets, sites, features = column_roles(table, target=target, clients=args.clients,
                                            categorical=args.categorical, drop=args.drop)
    k = table.columns.index(target)
    values = [row[k] for row in table.rows]
    classifier = _is_classifier(args.model, values)
    # the trees handle missing feature values (their own bin): nothing is imputed, and
    # --drop-incomplete drops only the rows without a target
    keep = check_columns(table, features=features, categorical=list(args.categorical),
                         targets=targets, regression=not classifier, impute="model",
                         drop_incomplete=args.drop_incomplete)
    notes = [dropped_note(sites, keep, "model")] if args.drop_incomplete else []
    if not classifier and len({v for v in values if not is_missing(v)}) == 2:
        notes.append(f"target {target!r} has two values, fitted as a number (R2): "
                     "--model boosting-classifier fits a classifier")
    Y = target_values(table, targets, keep, classifier)
    frame = feature_frame(table, features, list(args.categorical), keep)
    return frame, Y, sites[keep], features, classifier, notes


def _is_classifier(model, values):
    """``--model boosting``: a classifier for a text target (any value not a number)."""
    forced = BOOSTING_MODELS[model]
    if forced is not None:
        return forced
    from .inputs import is_missing

    for value in values:
        if is_missing(value):
            continue
        try:
            float(value)
        except ValueError:
            return True
    return False


def _fitted(est, X, y, clients=None):
    from sklearn.base import clone

    try:
        return clone(est).fit(X, y, clients=clients)
    except ValueError as exc:  # the estimator's own message, without a traceback
        raise CLIError(str(exc)) from exc


def _local_only(est, frame, Y, train, test, classifier, label, notes):
    """Site ``label``'s own model (its training rows only), scored on its held-out rows."""
    if not test.any():
        return np.nan
    if classifier and len(np.unique(Y[train])) < 2:
        notes.append(f"site {label!r} holds one class only: it has no local-only model.")
        return np.nan
    try:
        return _score(_fitted(est, frame[train], Y[train]), frame, Y, test)
    except CLIError as exc:
        notes.append(f"site {label!r} has no local-only model: {exc}")
        return np.nan


def _score(est, frame, Y, rows):
    if est is None or not rows.any():
        return np.nan
    return float(est.score(frame[rows], Y[rows]))


def _metric(classifier):
    return "accuracy" if classifier else "R2"


# -- rows at site services ----------------------------------------------------------
def _service_fit(args):
    """A dataset site services serve: every step a site operation under its policy."""
    from ..data import FederatedDataset
    from ..sites import SiteRefusal, SiteServiceError, SiteUnavailable
    from .remote import parse_sites

    if args.data or args.site_files or args.clients:
        raise CLIError("--site-service reaches the sites' own services: give no local files "
                       "or --clients with it.")
    if not args.dataset or not all([args.tls_ca_file, args.tls_cert, args.tls_key]):
        raise CLIError("--site-service needs --dataset NAME and --tls-ca-file, --tls-cert "
                       "and --tls-key (mutual TLS with the analyst's certificate).")
    try:
        data = FederatedDataset.from_sites(
            parse_sites(args.site_service), dataset=args.dataset, target=args.target[0],
            drop=args.drop, ca_file=args.tls_ca_file, cert_file=args.tls_cert,
            key_file=args.tls_key)
    except (ValueError, OSError, SiteRefusal, SiteServiceError, SiteUnavailable) as exc:
        raise CLIError(str(exc)) from exc
    try:
        return _fit_at_services(data, args)
    except SiteRefusal as exc:
        raise CLIError(str(exc) + _refusal_hint(exc)) from exc
    except (ValueError, SiteServiceError, SiteUnavailable) as exc:
        raise CLIError(str(exc)) from exc
    finally:
        data.close()


def _fit_at_services(data, args):
    from ..data.steps import split_site

    forced = BOOSTING_MODELS[args.model]
    classifier = forced if forced is not None else data.metadata[0]["target_kind"] == "text"
    notes = []
    if args.drop_incomplete:  # the rows without a target; missing features stay
        from ..sites import SiteRefusal

        try:
            data = data.drop_incomplete(features=False)
        except SiteRefusal as exc:  # the site's text says what to do: no tree hint
            raise CLIError(str(exc)) from exc
        notes.append("--drop-incomplete: each site dropped its rows without a target")
    test_size = _test_size(args)
    final = test_size == 0
    train = data if final else data.apply(split_site, test_size, args.random_state, False)
    test = None if final else data.apply(split_site, test_size, args.random_state, True)
    fed = _estimator(args, classifier).fit(train)
    pooled, per_site = (np.nan, {}) if final else _scores_at_sites(fed, test)
    if fed.privacy is not None and not final:
        notes.append("--secure-aggregation: the held-out score is pooled from masked sums; "
                     "no site's own score is released")
    notes.append("local-only and pooled: not fitted (the rows never leave their sites); "
                 "the federated model is scikit-learn's on the pooled training rows"
                 + (" binned at the sites' sketches" if args.binning else ""))
    n_test = np.zeros(len(data.sites), dtype=int) if final else test.n_samples
    site_rows = [(str(s), int(a), int(b), per_site.get(s, np.nan), np.nan, np.nan)
                 for s, a, b in zip(data.sites, train.n_samples, n_test)]
    overall = (int(train.n_samples.sum()), int(np.sum(n_test)), pooled, np.nan, np.nan)
    return BoostingReport(model=args.model, estimator=fed, metric=_metric(classifier),
                          feature_names=[str(c) for c in data.columns or ()],
                          categorical=list(args.categorical), site_rows=site_rows,
                          overall=overall, notes=notes)


def _scores_at_sites(fed, test):
    """``(pooled, {site: score})``: each site scores the model on its held-out rows and
    sends the score's sums (``boosting.score``), never a prediction; under secure
    aggregation the pooled score only, from masked sums."""
    from ..data.site import combine_scores, site_score
    from ..ensemble._site import site_score_terms
    from ..federation.session import FederationSession

    if fed.privacy is not None:  # masked: the pooled score only
        return fed.score(test), {}
    terms = FederationSession.for_dataset(test).per_site(site_score_terms, fed,
                                                         phase="analysis")
    return combine_scores(terms), {s: site_score(t) for s, t in zip(test.sites, terms)}


def _refusal_hint(refusal):
    """What the command line can do about a site's refusal of a boosting request."""
    hints = {"min_rows": "shallower trees: --max-depth, or a larger --min-samples-leaf",
             "allow_exact_quantiles": "the exact bins need the sites' allow_exact_quantiles "
                                      "= true; --binning K (the sites' min_rows) bins at "
                                      "their sketches instead, and --categorical columns "
                                      "need neither",
             "min_level_count": "merge the rare levels of that column, or --drop it",
             "require": "a site requiring secure aggregation serves boosting masked only: "
                        "--secure-aggregation (differential privacy is not offered for "
                        "boosted trees)"}
    hint = hints.get(refusal.rule)
    return f"\n  on the command line: {hint} (docs/data-officers.md)" if hint else ""


# -- the report ---------------------------------------------------------------------
def _fmt(value):
    return "  n/a" if isinstance(value, float) and math.isnan(value) else f"{value:.4f}"


def _loss_lines(est):
    """The training loss after each tree (every k-th tree and the last; the baseline
    first), with the rounds and bytes of the tree."""
    from .boosting_report import shown_iterations

    history = est.history_
    loss, rounds, sent = history["train_loss"], history["rounds"], history["bytes"]
    step, shown = shown_iterations(len(loss), MAX_LOSS_LINES)
    lines = [f"training loss per tree (pooled from the sites' sums; "
             f"{'every tree' if step == 1 else f'one line every {step} trees'}):",
             f"  {'tree':>6}{'loss':>14}{'rounds':>8}{'bytes':>12}"]
    for i in shown:
        what = "baseline" if i == 0 else f"{i}"
        lines.append(f"  {what:>6}{loss[i]:>14.6g}{int(rounds[i]):>8}{int(sent[i]):>12,}")
    return lines


def format_boosting_text(report):
    """The terminal report of a boosting fit."""
    est = report.estimator
    loss = getattr(est, "loss", "log_loss")
    lines = [f"skfed fit: {type(est).__name__} ({report.model}, loss {loss}), "
             f"{len(report.site_rows)} sites, {report.overall[0]} training rows, "
             + (f"{report.overall[1]} held out" if report.held_out else "none held out "
                "(the final model, fitted on every row)"),
             f"{est.n_iter_} iteration(s) of {est.n_trees_per_iteration_} tree(s); "
             f"learning_rate {est.learning_rate:g}, max_leaf_nodes {est.max_leaf_nodes}, "
             f"max_depth {est.max_depth}, min_samples_leaf {est.min_samples_leaf}; "
             f"categorical: {', '.join(report.categorical) or 'none'}; missing values in "
             "their own bin", ""]
    if report.held_out:
        lines.append(f"held-out {report.metric} (higher is better):")
        lines.append(f"  {'site':<16}{'train':>7}{'test':>7}{'federated':>11}"
                     f"{'local-only':>12}{'pooled':>9}")
        for site, n_tr, n_te, fed, local, pooled in report.site_rows:
            lines.append(f"  {site:<16}{n_tr:>7}{n_te:>7}{_fmt(fed):>11}{_fmt(local):>12}"
                         f"{_fmt(pooled):>9}")
        n_tr, n_te, fed, _, pooled = report.overall
        lines.append(f"  {'overall':<16}{n_tr:>7}{n_te:>7}{_fmt(fed):>11}{'':>12}"
                     f"{_fmt(pooled):>9}")
    lines += [f"  note: {note}" for note in report.notes] + [""] + _loss_lines(est)
    history = est.history_
    lines.append(f"{int(history['rounds'].sum()) + history.setup_rounds} rounds "
                 f"({history.setup_rounds} of setup: schema, totals, bins), "
                 f"{int(history['bytes'].sum()) + history.setup_bytes:,} bytes")
    return "\n".join(lines) + "\n"


def _plain(value):
    """A JSON value: NaN as null, numpy numbers as Python's."""
    if isinstance(value, (np.integer, int)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(value) else float(value)
    return value


def boosting_json(report):
    """The numbers of a boosting report (``--json``)."""
    est, history = report.estimator, report.estimator.history_
    columns = ("site", "train", "test", "federated", "local_only", "pooled")
    params = {k: v for k, v in est.get_params().items()
              if v is None or isinstance(v, (bool, int, float, str, list))}
    return {
        "model": report.model, "estimator": type(est).__name__, "parameters": params,
        "metric": report.metric, "n_iter": int(est.n_iter_),
        "sites": [{c: _plain(v) for c, v in zip(columns, row)} for row in report.site_rows],
        "overall": {c: _plain(v) for c, v in zip(columns[1:], report.overall)},
        "loss_per_tree": _records(history),
        "setup": {"rounds": int(history.setup_rounds), "bytes": int(history.setup_bytes)},
        "features": report.feature_names, "categorical": report.categorical,
        "notes": list(report.notes)}


def _records(history):
    fields = ("iteration", "train_loss", "validation_loss", "rounds", "bytes", "histograms",
              "n_leaves", "max_depth")
    values = {f: history[f] for f in fields}
    return [{f: _plain(values[f][i]) for f in fields} for i in range(len(history))]
