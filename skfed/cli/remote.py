"""``skfed fit --scheduler ... --site NAME=PATH``: the report of ``skfed fit``, rows at the sites.

Each ``PATH`` is read by the worker named ``NAME`` (relative paths under its
``SKFED_DATA_DIR``). Every site holds out a share of its own rows (drawn at
the site), the federated model is fitted on the training rows and scored at
each site on the held-out ones, and each site fits and scores its own
local-only model. The pooled model is not fitted: it would need the rows in
one place. Only metadata, the algorithm's messages and scores cross the
network.

By default the features are standardized as in the local form
(:mod:`skfed.preprocessing._feature_scaler`): each site sends four numbers
per column of its training rows, the server merges them into the pooled
means and standard deviations, and each site standardizes its own rows with
them. A site's local-only model
(:func:`skfed.model_selection._local_baseline.local_only_score`) is
standardized with that site's training rows. Nothing here runs at a site:
the row steps are in :mod:`skfed.data.steps` and the transformers in
:mod:`skfed.preprocessing`; this module composes them.

``--categorical`` columns are one-hot encoded at the sites with
:class:`skfed.preprocessing.FedOneHotEncoder`: each site sends the set of
values it holds in those columns (not how often), the union is the encoding
of every site, and the columns come out in the order and with the names of
the local form (``name=value`` in place of ``name``).
"""

import numpy as np
from sklearn.base import clone

from .fit import (MODELS, REFERENCE_CODED_MODELS, SURVIVAL_MODELS, CLIError, FitReport,
                  fit_watching_convergence, make_estimator, metric_name, pass_on_warnings)
from ..data import FederatedDataset
from ..data.steps import (check_numeric, drop_incomplete_site, impute_site, inspect_site,
                          one_hot_site, select_columns, split_site)
from ..model_selection import site_scores
from ..model_selection._local_baseline import local_only_score
from ..preprocessing import FedOneHotEncoder
from ..preprocessing._column_encoder import ColumnEncoder, ReferenceCodedEncoder
from ..preprocessing._column_imputer import ColumnImputer
from ..preprocessing._feature_scaler import FeatureScaler
from .._messages import count
from .inputs import reference_notes, shown_count, site_problems, total_count


def parse_sites(specs):
    """``["a=/data/a.csv", ...]`` -> ``{"a": "/data/a.csv", ...}`` with clear errors."""
    sources = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise CLIError(f"--site takes NAME=PATH (the site's worker name and a file on "
                           f"that machine); got {spec!r}.")
        if name in sources:
            raise CLIError(f"--site {name} is given twice.")
        sources[name.strip()] = path.strip()
    return sources


def encode_categorical(data, categorical, return_encoder=False, reference=False):
    """One-hot encode the ``categorical`` columns of ``data`` at its sites.

    Returns ``(encoded, names, indicators)``: the encoded dataset, its
    column names (``name=value`` for the one-hot columns, in place of
    ``name``) and the positions of the one-hot columns (and the fitted
    :class:`~skfed.preprocessing.FedOneHotEncoder` with ``return_encoder``).
    ``reference``: each column's first level is left out (treatment coding;
    the sites' row step keeps the other columns only).
    """
    columns = list(data.columns or ())
    for name in categorical:
        if name not in columns:
            raise CLIError(f"--categorical {name!r}: the sites have no feature column "
                           f"{name!r} (it may be the target or dropped); their columns are "
                           f"{columns}.")
    encoder = FedOneHotEncoder(handle_unknown="ignore").fit(
        data.apply(select_columns, categorical))
    numeric = [name for name in columns if name not in categorical]
    start, offsets = len(numeric), {}
    for name, levels in zip(categorical, encoder.categories_):
        offsets[name] = (start, levels)
        start += len(levels)
    order, names, indicators = [], [], []
    for name in columns:
        if name in offsets:
            first, levels = offsets[name]
            for k, level in enumerate(levels):
                if reference and k == 0:  # the reference level: no column of its own
                    continue
                indicators.append(len(order))
                order.append(first + k)
                names.append(f"{name}={level}")
        else:
            order.append(numeric.index(name))
            names.append(name)
    encoded = data.apply(one_hot_site, list(categorical), encoder, np.array(order))
    if return_encoder:
        return encoded, names, indicators, encoder
    return encoded, names, indicators


def _check_remote(model, test_size):
    if not 0 <= test_size < 1:
        raise CLIError(f"--test-size must be between 0 (no held-out rows: fit on every row) "
                       f"and 1; got {test_size}.")
    if model == "lowrank":
        raise CLIError("--model lowrank is not available with site-resident data yet: give it "
                       "one CSV with the rows instead.")


def fit_remote(sources, *, scheduler, security=None, target, drop=(), client=None,
               offset=None, **kwargs):
    """The ``skfed fit`` report for site-resident files read by Dask workers (see the
    module docstring); ``offset``: the column of offsets; ``kwargs`` as
    :func:`fit_sites`."""
    import distributed

    _check_remote(kwargs["model"], kwargs.get("test_size", 0.2))
    own = client is None
    try:
        client = client or distributed.Client(scheduler, security=security, timeout=30)
    except (OSError, TimeoutError) as exc:
        raise CLIError(f"cannot connect to the coordinator {scheduler}: {exc} (check the "
                       "address and the TLS certificates).") from None
    try:
        try:
            data = FederatedDataset.from_sources(sources, target=target, drop=drop,
                                                 client=client, offset=offset)
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
        return fit_sites(data, target=target, with_offset=offset is not None, **kwargs)
    finally:
        if own:
            client.close()


def fit_services(sites, *, dataset, target, drop=(), ca_file, cert_file, key_file,
                 timeout=None, offset=None, **kwargs):
    """The ``skfed fit`` report on a dataset that site services serve
    (``skfed fit --site-service NAME=HOST:PORT ... --dataset NAME``): every step is a
    site operation or a declared row step, under each site's policy (``offset``: the
    column of offsets the sites keep)."""
    from ..sites import SiteRefusal, SiteServiceError, SiteUnavailable

    _check_remote(kwargs["model"], kwargs.get("test_size", 0.2))
    try:
        data = FederatedDataset.from_sites(sites, dataset=dataset, target=target, drop=drop,
                                           ca_file=ca_file, cert_file=cert_file,
                                           key_file=key_file, timeout=timeout, offset=offset)
    except (ValueError, OSError, SiteRefusal, SiteServiceError, SiteUnavailable) as exc:
        raise CLIError(str(exc)) from exc
    try:
        return fit_sites(data, target=target, with_offset=offset is not None, services=True,
                         **kwargs)
    except SiteRefusal as exc:
        raise CLIError(str(exc) + _refusal_hint(exc, kwargs)) from exc
    except (SiteServiceError, SiteUnavailable) as exc:
        raise CLIError(str(exc)) from exc
    finally:
        data.close()


def _refusal_hint(refusal, options):
    """What the command line can do about a site's refusal of a Cox model's shared
    baseline (its message names the Python parameters)."""
    if options.get("model") not in SURVIVAL_MODELS:
        return ""
    if refusal.rule == "allow_event_times":
        return ("\n  on the command line: --strata site (each site its own baseline: no "
                "event time leaves a site), or --time-grid K or T1,T2,... (a shared baseline "
                "on intervals), unless the sites set allow_event_times = true "
                "(docs/data-officers.md)")
    if refusal.rule == "min_level_count" and options.get("time_grid") is not None:
        return ("\n  on the command line: fewer, wider intervals (--time-grid with a smaller "
                "K or fewer cut points), or --strata site")
    return ""


def _concordance(fed, test, notes):
    """Harrell's concordance of the federated Cox model on the sites' held-out rows:
    ``(pooled, {site: index})``, and a note on which pairs the pooled index counts."""
    from ..survival import concordance_index

    result = concordance_index(fed, test)
    if not result["cross_site_pairs"]:
        notes.append("overall concordance: the pairs within each site only (a site kept its "
                     "histograms of (time, risk score), whose cells held fewer rows than its "
                     "min_level_count)")
    elif not result["exact"]:
        notes.append(f"overall concordance: pairs across sites counted from the sites' "
                     f"(time, risk score) histograms; between {result['lower']:.4f} and "
                     f"{result['upper']:.4f}")
    return result["pooled"], result["per_site"]


def fit_sites(data, *, target, model, categorical=(), scale=True, test_size=0.2,
              random_state=0, impute=None, drop_incomplete=False, with_offset=False,
              services=False, ph_test=False, **options):
    """The ``skfed fit`` report on a site-resident :class:`~skfed.FederatedDataset`.

    ``test_size=0``: the final model, fitted on every row of every site, with
    no held-out score (nor local-only models to compare). ``with_offset``:
    the sites' rows carry offsets (their local-only models, which would
    ignore them, are not fitted). ``services``: the sites are site services.
    ``ph_test``: a Cox model's proportional-hazards test on its training rows
    (``--summary``; the sites send its sums; a method of ``--ph-test``).
    """
    features = [str(c) for c in (data.columns or range(data.n_features))]
    reports = _inspect_sites(data, features, categorical, impute, drop_incomplete)
    notes = []
    if drop_incomplete:
        data = _drop_incomplete_rows(data, reports, impute, notes)
    data, imputer = _impute_at_sites(data, features, categorical, impute, reports,
                                     test_size, random_state, notes)
    data, names, indicators, encoder = _encode_at_sites(
        data, features, categorical, reference=model in REFERENCE_CODED_MODELS)
    notes += reference_notes(encoder)
    final = test_size == 0
    train = data if final else data.apply(split_site, test_size, random_state, False)
    test = None if final else data.apply(split_site, test_size, random_state, True)
    scaler = None
    try:
        if scale:  # the sites' moments of their training rows; each site scales its rows
            train, test, scaler = _scale_at_sites(train, test, indicators)
        est = make_estimator(model, random_state=random_state, **options)
        # the fit's parameter names and messages name the columns
        named = train.with_columns(names)
        fed, caught = fit_watching_convergence(lambda: clone(est).fit(named))
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    fed.__dict__.pop("feature_names_in_", None)  # as the scaler's (see _scale_at_sites)
    converged = pass_on_warnings(caught, stacklevel=2)
    if model in SURVIVAL_MODELS:
        notes += _baseline_notes(fed)
    pooled_fed, per_site, local = _remote_scores(
        fed, est, data, test, notes, model=model, test_size=test_size,
        random_state=random_state, scale=scale, indicators=indicators,
        with_offset=with_offset, services=services)
    notes.append("pooled model: not fitted (the rows never leave their sites); the federated "
                 "model converges to it.")
    n_test = np.zeros(len(data.sites), dtype=int) if final else test.n_samples
    site_rows = [(str(s), int(a), int(b), per_site.get(s, np.nan), loc, np.nan)
                 for s, a, b, loc in zip(data.sites, train.n_samples, n_test, local)]
    overall = (int(train.n_samples.sum()), int(np.sum(n_test)), pooled_fed, np.nan, np.nan)
    test_of_ph = None
    if ph_test and model in SURVIVAL_MODELS:  # on the training rows, while they are open
        from .ph_test import ph_test_of

        test_of_ph = ph_test_of(fed, named, method=ph_test)
    return FitReport(model=model, estimator=fed, metric=metric_name(model),
                     feature_names=list(names), output_names=list(np.atleast_1d(target)),
                     site_rows=site_rows,
                     overall=overall, converged=converged, notes=notes, test=None,
                     scaler=scaler, preprocess=[("impute", imputer), ("encode", encoder)],
                     ph_test=test_of_ph)


def _baseline_notes(fed):
    """Why a Cox model fitted at the sites has no baseline hazard (no survival curves
    from the saved model): a site's refusal names the grid that would pass."""
    from ..linear_model._inference import InferenceError

    try:
        fed.baseline_times_
    except InferenceError as exc:
        return [f"no survival curves (predict_survival_function): {exc}"]
    return []


def _remote_scores(fed, est, data, test, notes, *, model, test_size, random_state, scale,
                   indicators, with_offset, services):
    """``(pooled, {site: score}, local-only scores)`` of the federated model on the
    sites' held-out rows (all NaN without held-out rows: the final model), with the
    notes on the sites without a local-only score."""
    nothing = [np.nan] * len(data.sites)
    if test is None:  # the final model: the report says there is no held-out score
        return np.nan, {}, nothing
    if model in SURVIVAL_MODELS:
        pooled, per_site = _concordance(fed, test, notes)
    else:
        pooled, per_site = site_scores(fed, test)
    if with_offset:  # a site's own model would be fitted and scored without its offsets
        notes.append("local-only models: not fitted with --offset on site-resident data")
        return pooled, per_site, nothing
    # each site's own model needs no protection from itself: fitted without privacy=
    classifier = MODELS[model][2]
    local = data.map(local_only_score, clone(est).set_params(privacy=None), test_size,
                     random_state, classifier, scale, indicators)
    notes += _no_local_only_notes(data.sites, local, classifier, model in SURVIVAL_MODELS)
    return pooled, per_site, local


def _inspect_sites(data, features, categorical, impute, drop_incomplete):
    """Each site's report on its input (:func:`~skfed.data.steps.inspect_site`), once
    no site's input has a problem the options leave unsolved."""
    for name in categorical:
        if name not in features:
            raise CLIError(f"--categorical {name!r}: the sites have no feature column "
                           f"{name!r} (it may be the target or dropped); their columns "
                           f"are {features}.")
    # every problem of every site's input, counted at the sites, in one error
    reports = data.map(inspect_site, list(categorical))
    problems = site_problems(data.sites, reports, list(categorical), impute=impute,
                             drop_incomplete=drop_incomplete)
    if problems:
        listed = "" if len(problems) == 1 else " (all of them, one per line)"
        raise CLIError(f"the sites' input has {count(len(problems), 'problem')}{listed}:"
                       "\n  - " + "\n  - ".join(problems))
    return reports


def _drop_incomplete_rows(data, reports, impute, notes):
    """``--drop-incomplete``: each site drops its rows without a target (with
    ``--impute``) or with any missing value; a note says how many."""
    data = data.apply(drop_incomplete_site, impute is not None)
    lost = [r["no_target"] if impute else r["incomplete"] for r in reports]
    what = "rows without a target" if impute else "incomplete rows (a missing value)"
    dropped = total_count(lost)
    dropped = "some rows" if dropped == "some" else count(dropped, "row")
    notes.append(f"--drop-incomplete: dropped {dropped} of "
                 f"{sum(r['rows'] for r in reports)}, the {what}; by site: "
                 + ", ".join(f"{s} {shown_count(k)}" for s, k in zip(data.sites, lost)))
    return data


def _impute_at_sites(data, features, categorical, impute, reports, test_size, random_state,
                     notes):
    """``(data, imputer)``: the sites' rows selected, cleaned and imputed at the sites,
    and the fitted ColumnImputer (the saved model's first step); with ``impute``, a note
    on the values filled."""
    # the imputation statistics from the training rows' per-site summaries; every
    # site then selects, cleans and imputes its own rows
    train = data if test_size == 0 else data.apply(split_site, test_size, random_state,
                                                   False)
    imputer = ColumnImputer(features, list(categorical), impute).fit_sites(train)
    data = data.apply(impute_site, imputer)
    if impute:
        filled = sum(sum(c[0] for c in r["columns"].values()) for r in reports)
        notes.append(f"--impute {impute}: filled the missing feature values (at most "
                     f"{filled}) at the sites with statistics of the training rows from "
                     "per-site summaries")
    return data, imputer


def _encode_at_sites(data, features, categorical, reference=False):
    """``(data, names, indicators, encoder)``: the ``categorical`` columns one-hot encoded
    at the sites (:func:`encode_categorical`; ``reference``: without each column's first
    level), the columns' names, the positions of the one-hot columns, and the
    ColumnEncoder that does the same in the saved model."""
    encoder = (ReferenceCodedEncoder if reference else ColumnEncoder)(features,
                                                                     list(categorical))
    encoder.encoder_, names, indicators = None, list(features), []
    if categorical:
        data, names, indicators, encoder.encoder_ = encode_categorical(
            data, list(categorical), return_encoder=True, reference=reference)
    if reference:  # the same columns as the sites' encoding
        encoder.lay_out()
    else:
        encoder.feature_names_out_, encoder.indicators_ = list(names), list(indicators)
        encoder.n_features_in_ = len(features)
    return data, names, indicators, encoder


def _scale_at_sites(train, test, indicators):
    """``(train, test, scaler)``: the FeatureScaler fitted on the sites' moments of their
    training rows, and each site's rows standardized with it (``test`` ``None``: no
    held-out rows)."""
    train.map(check_numeric)
    scaler = FeatureScaler(indicators=indicators).fit(train)
    train = scaler.transform(train)
    test = None if test is None else scaler.transform(test)
    # the saved Pipeline reads the columns by name in its first step; the
    # scaler and the model get arrays
    scaler.__dict__.pop("feature_names_in_", None)
    return train, test, scaler


def _no_local_only_notes(sites, local, classifier, survival):
    """The notes on the sites without a local-only score (``local``: NaN)."""
    notes = [f"site {s!r} holds one class only: it has no local-only model."
             for s, v in zip(sites, local) if classifier and np.isnan(v)]
    notes += [f"site {s!r}: no local-only score (no event among its training rows, or no "
              "comparable pair among its held-out rows)"
              for s, v in zip(sites, local) if survival and np.isnan(v)]
    return notes


def add_site_service_options(group, service_help):
    """The options naming site services and the analyst's TLS files (``skfed fit`` and
    ``skfed describe`` take the same ones)."""
    group.add_argument("--site-service", action="append", default=[],
                       metavar="NAME=HOST:PORT", help=service_help)
    group.add_argument("--dataset", metavar="NAME",
                       help="the dataset's name in the site services' configurations")
    group.add_argument("--tls-ca-file", metavar="PEM", help="the federation's CA certificate")
    group.add_argument("--tls-cert", metavar="PEM", help="the analyst's certificate")
    group.add_argument("--tls-key", metavar="PEM", help="the analyst's private key")
