"""Per-site summaries of the federated transformers, their merges, and the one door to the data.

Every ``*_summary`` function is a pure function of **one site's** rows
``(X, sample_weight)`` (plus small arguments sent by the server, such as
thresholds) and returns a small object: numbers, per-feature arrays, a
site's set of categories, never rows. Every ``merge_*`` function runs at the
server on the list of the sites' summaries. ``_map_sites`` is the only place
where a transformer's ``fit`` touches the rows: for in-memory arrays it splits
them by ``clients`` and calls a summary function once per site, so a
site-resident dataset can later replace it without changing the transformers.
"""

import functools
from collections import Counter

import numpy as np
import scipy.sparse as sp
from sklearn.utils import _safe_indexing
from sklearn.utils._encode import _unique
from sklearn.utils._mask import _get_mask
from sklearn.utils.sparsefuncs import mean_variance_axis
from sklearn.utils.validation import _num_samples, check_array

from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from ..federation import dominance
from ..federation.combine import Combine, add_counts
from ..federation.operations import (COUNTS, NOTHING, SUMS, Arg, Refused, row_step,
                                     site_operation)
from ..federation.session import FederationSession
from ..federation.wire import role_of, wire_function, wire_functions
from ..federation.clients import check_clients_nonempty, group_clients
from ..data import FederatedDataset
from ..data.levels import check_levels as held_levels, level_counts


# -- the one door to the rows ------------------------------------------------
class _SiteRows:
    """What ``clients`` becomes when ``fit`` runs on a FederatedDataset: the dataset and
    how each site checks its rows (``validate(estimator, X_site)``) before summarizing."""

    def __init__(self, dataset, validate, estimator, weighted):
        self.dataset, self.validate, self.estimator = dataset, validate, estimator
        self.weighted = weighted


def _row_check(value):
    """One of skfed's registered row checks (a ``_checked_rows`` of a transformer)."""
    if value not in wire_functions().values() or getattr(value, "__name__", "") != \
            "_checked_rows":
        return "not one of skfed's row checks"
    return None


def _summary_function(value):
    """One of skfed's per-site summaries (a registered ``*_summary``)."""
    if value not in wire_functions().values() or not getattr(value, "__name__", "").endswith(
            "_summary"):
        return "not a preprocessing summary"
    return None


def _transformer(value):
    return None if role_of(value) == "transformer" else "one of skfed's transformers"


def _summary_class(site, args):
    """Counts and level names (a one-hot encoder's categories, a mode's value counts,
    row counts), or sums (a scaler's moments, a mean imputer's sums)."""
    counted = (count_summary, categories_summary, value_counts_summary,
               unknown_categories_summary)
    return COUNTS if args.get("fn") in counted and not args.get("weighted") else SUMS


def _summary_rules(site, values, rules):
    """The exact median releases single rows' values; no level (a category, a value
    counted for a mode) held by fewer than ``min_level_count`` rows is released."""
    fn = values["fn"]
    if fn in (range_summary, count_below_summary):
        if not rules.allow_exact_quantiles:
            raise Refused("allow_exact_quantiles", "the exact federated median releases "
                          "single rows' values (the site's extremes and the values next to "
                          "each threshold); use strategy='mean' or 'most_frequent'",
                          public=True)
        rules.release_exact("allow_exact_quantiles")
    if fn in (categories_summary, value_counts_summary, unknown_categories_summary):
        if hasattr(site, "map_parts"):  # an engine's partitions: their counts added
            parts = site.map_parts(_checked_level_counts, values)
            names, counts = parts[0][0], [functools.reduce(
                add_counts, [p[1][j] for p in parts]) for j in range(len(parts[0][1]))]
        else:
            names, counts = _checked_level_counts(site, values)
        held_levels((), names, rules.min_level_count, counts=counts)


def _checked_level_counts(site, values):
    """The checked columns' names and their counts per level (an imputer's missing
    marker left out)."""
    X = values["validate"](values["estimator"], site.X)
    missing = values["args"][-1] if values["fn"] is value_counts_summary else None
    return _names_of(X), level_counts(encoder_columns(X), missing)


def _names_of(X):
    return [str(c) for c in X.columns] if hasattr(X, "columns") else \
        [f"{i}" for i in range(X.shape[1])]


def check_levels(X, min_count, missing=None):
    """No level (a category, or a value counted for a mode) of ``X`` held by fewer than
    ``min_count`` rows (``missing``: the missing marker, left out)."""
    held_levels(encoder_columns(X), _names_of(X), min_count, missing=missing)


@site_operation(
    "preprocess.summary", releases=_summary_class, reads_design=True,
    describes="one federated transformer's per-site summary: sums and counts (scaler, "
              "mean imputer) under the dominance rule; levels each held by >= "
              "min_level_count rows (one-hot encoder, most-frequent imputer); with "
              "allow_exact_quantiles, the site's values nearest a threshold (exact median)",
    arguments=(Arg("estimator", "object", role="transformer"),
               Arg("validate", "value", check=_row_check), Arg("weighted", "bool"),
               Arg("fn", "value", check=_summary_function),
               Arg("args", "value", check=lambda a: None if isinstance(a, (list, tuple))
                   and len(a) <= 8 else "a summary's arguments are a short list",
                   convert=tuple)),
    checks=(_summary_rules,),
    # an engine's partitions' summaries merged as one site's (the fn's own merge)
    combine=Combine(lambda parts, args: combine_parts(args[3], parts)))
def _summarize_site(site, estimator, validate, weighted, fn, args):
    """At a site: check its rows as ``fit`` checks arrays, then summarize them."""
    return fn(validate(estimator, site.X), site.sample_weight if weighted else None, *args)


@site_operation(
    "preprocess.schema", releases=NOTHING,
    describes="the checked columns' names and dtypes (zero rows)",
    arguments=(Arg("estimator", "object", role="transformer"),
               Arg("validate", "value", check=_row_check)),
    reply=lambda site, values, template, rules: schema_of(template),
    combine=Combine(lambda parts, args: _one_schema(parts)))
def _template_site(site, estimator, validate):
    """At a site: its checked rows' schema (zero rows: dtypes and column names only)."""
    X = validate(estimator, site.X)
    return X.iloc[:0] if hasattr(X, "iloc") else X[:0]


def _one_schema(templates):
    """An engine's partitions' schemas: one (the same names and dtypes in each)."""
    if any(schema_of(t) != schema_of(templates[0]) for t in templates):
        raise ValueError("the partitions' checked columns differ in names or dtypes")
    return templates[0]


def sites_input(estimator, dataset, clients, sample_weight, validate, *, weighted=False):
    """``fit`` on a FederatedDataset: ``(template, clients)`` to use in place of ``(X, clients)``.

    Each site checks its rows with ``validate(estimator, X_site)`` (the checks
    ``fit`` applies to in-memory arrays) and sends their schema: a zero-row
    array or table with the checked dtypes. The template stands for ``X``
    wherever ``fit`` reads only its dtype and width; the returned ``clients``
    makes :func:`_map_sites` run the summaries at the sites (with the
    dataset's sample weights if ``weighted``). Sets
    ``n_features_in_`` (and ``feature_names_in_``) from the metadata.
    """
    given = [n for n, v in (("clients", clients), ("sample_weight", sample_weight))
             if v is not None]
    if given:
        raise ValueError(f"a FederatedDataset carries its own sites and weights; do not pass "
                         f"{given[0]}= with it.")
    site_estimator = clone(estimator)
    templates = FederationSession.for_dataset(dataset).per_site(
        _template_site, site_estimator, validate, phase="analysis")
    template = templates[0]
    if not hasattr(template, "iloc"):  # arrays: the widest numeric dtype, or object
        kinds = {t.dtype.kind for t in templates}
        if len(kinds) > 1 and "O" in kinds:
            raise ValueError("the sites' rows have different kinds (numbers at some sites, "
                             "text at others).")
        template = np.empty((0, template.shape[1]),
                            dtype=np.result_type(*[t.dtype for t in templates]))
    estimator.n_features_in_ = template.shape[1]
    if dataset.columns is not None:
        estimator.feature_names_in_ = np.asarray(dataset.columns, dtype=object)
    elif hasattr(estimator, "feature_names_in_"):
        del estimator.feature_names_in_
    return template, _SiteRows(dataset, validate, site_estimator, weighted)


def schema_of(template):
    """A zero-row template as plain names and dtypes (what a site service sends)."""
    if hasattr(template, "dtypes"):
        return {"columns": [str(c) for c in template.columns],
                "dtypes": [str(t) for t in template.dtypes]}
    return {"columns": None, "dtypes": [template.dtype.str], "width": template.shape[1]}


@row_step("transform", arguments=(Arg("estimator", "object", role="transformer"),
                                  Arg("method", "choice", choices=("transform",))))
def _transform_site(site, estimator, method):
    return site.replace(X=getattr(estimator, method)(site.X))


def transforms_sites(method):
    """Let ``transform`` (or ``inverse_transform``) take a FederatedDataset: each site
    transforms its own rows, and a new dataset of the transformed rows comes back."""
    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if isinstance(X, FederatedDataset):
            check_is_fitted(self)
            return X.apply(_transform_site, self, method.__name__)
        return method(self, X, *args, **kwargs)
    return wrapper


def _map_sites(fn, X, clients, sample_weight, *args):
    """Run ``fn(X_j, sample_weight_j, *args)`` at every site; return the labels and results.

    Parameters
    ----------
    fn : callable
        A module-level summary function of one site's rows.
    X : array-like, sparse matrix or DataFrame of shape (n_samples, n_features)
        The (already validated) rows of all sites, in memory.
    clients : array-like of shape (n_samples,) or None
        The site of each row; ``None``: one site holding every row.
    sample_weight : ndarray of shape (n_samples,) or None
    *args
        Small arguments the server sends to every site.

    Returns
    -------
    labels : ndarray of shape (n_clients,)
        The sites, as :func:`skfed.federation.clients.group_clients` orders them.
    summaries : list
        ``fn``'s result for each site, in the order of ``labels``.
    """
    if isinstance(clients, _SiteRows):  # a FederatedDataset: the rows stay at the sites
        data = clients.dataset
        return data.labels, FederationSession.for_dataset(data).per_site(
            _summarize_site, clients.estimator, clients.validate, clients.weighted, fn, args,
            phase="analysis")
    n_samples = _num_samples(X)
    labels, indices = group_clients(clients, n_samples)
    check_clients_nonempty(labels, indices,
                           np.ones(n_samples) if sample_weight is None else sample_weight)
    summaries = []
    for idx in indices:
        X_j = _safe_indexing(X, idx, axis=0)
        sw_j = None if sample_weight is None else sample_weight[idx]
        summaries.append(fn(X_j, sw_j, *args))
    return labels, summaries


# -- moments (FedStandardScaler) ----------------------------------------------
@wire_function
def moments_summary(X, sample_weight=None):
    """A site's weighted moments per feature, NaNs ignored.

    The arithmetic is scikit-learn's (``_incremental_mean_and_var`` on one
    batch: a corrected two-pass), so with one site the pooled statistics are
    scikit-learn's bit for bit.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    sample_weight : ndarray of shape (n_samples,) or None

    Returns
    -------
    summary : dict
        Per feature (``5 * n_features`` numbers): ``weight`` (the sum of the
        weights of the non-NaN entries), ``count`` (their number), ``mean``
        (the weighted mean, rounded), ``mean_lo`` (what the rounding left
        out: the mean of the deviations about ``mean``, so that
        ``mean + mean_lo`` carries about twice the digits; it keeps the
        merge exact to rounding when the sites' means differ little relative
        to their size) and ``m2`` (the weighted sum of squared deviations
        about the site's own mean).
    """
    n_samples = X.shape[0]
    if sp.issparse(X) and dominance.active() is not None:
        X = X.toarray()  # audited row by row at a site service (the dense path below)
    if sp.issparse(X):
        X = sp.csc_matrix(X)
        nan_data = np.isnan(X.data)
        nan_cols = np.bincount(np.repeat(np.arange(X.shape[1]), np.diff(X.indptr)),
                               weights=nan_data, minlength=X.shape[1])
        count = n_samples - nan_cols
        mean, var, weight = mean_variance_axis(X, axis=0, weights=sample_weight,
                                               return_sum_weights=True)
        weight = np.asarray(weight, dtype=np.float64)
        mean = np.asarray(mean, dtype=np.float64)
        m2 = np.where(weight > 0, np.asarray(var, dtype=np.float64) * weight, 0.0)
        return {"weight": weight, "count": count.astype(np.int64), "mean": mean,
                "mean_lo": np.zeros_like(mean), "m2": m2}
    X = np.asarray(X, dtype=np.float64)
    missing = np.isnan(X)
    with np.errstate(divide="ignore", invalid="ignore"):
        if sample_weight is None:
            total = np.nansum if missing.any() else np.sum
            weight = n_samples - total(missing.astype(np.float64), axis=0)
            mean = total(X, axis=0) / weight
            centred = X - mean
            correction = total(centred, axis=0)
            m2 = total(centred**2, axis=0) - correction**2 / weight
        else:
            sw = np.asarray(sample_weight, dtype=np.float64)
            weight = np.sum(sw[:, None] * (~missing).astype(np.float64), axis=0)
            mean = (sw @ np.where(missing, 0.0, X)) / weight
            centred = X - mean
            correction = sw @ np.where(missing, 0.0, centred)
            m2 = sw @ np.where(missing, 0.0, centred**2) - correction**2 / weight
        mean_lo = correction / weight
    if dominance.active() is not None:
        w = np.ones(n_samples) if sample_weight is None else np.asarray(sample_weight, float)
        dominance.check_rows(np.where(missing, 0.0, X) * w[:, None], "a mean")
        dominance.check_rows(np.where(missing, 0.0, centred ** 2) * w[:, None],
                             "a sum of squares")
    empty = ~(weight > 0)
    return {"weight": weight, "count": (~missing).sum(axis=0).astype(np.int64),
            "mean": np.where(empty, 0.0, mean), "mean_lo": np.where(empty, 0.0, mean_lo),
            "m2": np.where(empty, 0.0, m2)}


def _two_sum(a, b):
    """``a + b`` as its rounded value and the rounding error (Knuth's TwoSum)."""
    s = a + b
    b_virtual = s - a
    return s, (a - (s - b_virtual)) + (b - b_virtual)


def merge_moments(summaries, keep_lo=False):
    """Pool the sites' moments with Chan et al.'s pairwise (parallel) update.

    For the pooled part ``a`` and a site ``b`` with weights ``w_a``, ``w_b``
    and ``delta = mean_b - mean_a``: ``w = w_a + w_b``,
    ``mean = mean_a + delta * w_b / w``,
    ``m2 = m2_a + m2_b + delta**2 * w_a * w_b / w``: no raw sums of squares,
    so no cancellation when the features are far from zero. The means are
    carried as two doubles (``mean + mean_lo``), so ``delta`` keeps its
    digits even when the sites' means are close relative to their size
    (e.g. ``1e6 + small``), where one double would lose ``delta``'s last
    digits and the between-site part of the variance with them.

    Parameters
    ----------
    summaries : list of dict
        :func:`moments_summary` of each site.
    keep_lo : bool, default=False
        Also return ``mean_lo``, what the rounded mean leaves out.

    Returns
    -------
    pooled : dict
        ``weight``, ``count``, ``mean`` (NaN where no site has a value),
        ``m2`` and ``var = m2 / weight``.
    """
    weight = np.zeros_like(summaries[0]["weight"], dtype=np.float64)
    count = np.zeros_like(summaries[0]["count"])
    hi, lo, m2 = np.zeros_like(weight), np.zeros_like(weight), np.zeros_like(weight)
    for s in summaries:
        w_b, hi_b, lo_b = s["weight"], s["mean"], s["mean_lo"]
        total = weight + w_b
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            frac = w_b / total
            delta = (hi_b - hi) + (lo_b - lo)
            new_hi, new_lo = _two_sum(hi, lo + delta * frac)
            new_m2 = m2 + s["m2"] + delta**2 * (weight * frac)
        first = (w_b > 0) & ~(weight > 0)  # the first site with values: its moments as sent
        later = (w_b > 0) & (weight > 0)
        hi = np.where(first, hi_b, np.where(later, new_hi, hi))
        lo = np.where(first, lo_b, np.where(later, new_lo, lo))
        m2 = np.where(first, s["m2"], np.where(later, new_m2, m2))
        weight = total
        count = count + s["count"]
    with np.errstate(divide="ignore", invalid="ignore"):
        var = m2 / weight
    mean = np.where(weight > 0, hi, np.nan)
    out = {"weight": weight, "count": count, "mean": mean, "m2": m2, "var": var}
    return dict(out, mean_lo=lo) if keep_lo else out


# -- per-column counts, sums, ranges (FedSimpleImputer) -----------------------
def _present(X, missing_values):
    return ~_get_mask(X, missing_values)


@wire_function
def count_summary(X, sample_weight, missing_values):
    """A site's row count and non-missing count per feature (``1 + n_features`` numbers)."""
    present = _present(X, missing_values)
    return {"n_samples": X.shape[0], "count": present.sum(axis=0).astype(np.int64)}


def merge_counts(summaries):
    """Pooled rows and non-missing counts per feature."""
    return {"n_samples": sum(s["n_samples"] for s in summaries),
            "count": np.sum([s["count"] for s in summaries], axis=0)}


@wire_function
def mean_summary(X, sample_weight, missing_values):
    """A site's non-missing count and sum per feature (``1 + 2 * n_features`` numbers)."""
    out = count_summary(X, sample_weight, missing_values)
    present = _present(X, missing_values)
    values = np.where(present, np.asarray(X, dtype=np.float64), 0.0)
    dominance.check_rows(values, "a sum")
    out["sum"] = values.sum(axis=0)
    return out


def merge_means(summaries):
    """Pooled mean per feature (``sum / count``; NaN for a feature no site observed)."""
    out = merge_counts(summaries)
    total = np.sum([s["sum"] for s in summaries], axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mean"] = np.where(out["count"] > 0, total / out["count"], np.nan)
    return out


@wire_function
def range_summary(X, sample_weight, missing_values):
    """A site's row count; non-missing count, minimum and maximum per feature.

    ``1 + 3 * n_features`` numbers.

    The first round of the federated median: it reveals each site's extreme values.
    """
    out = count_summary(X, sample_weight, missing_values)
    values = np.where(_present(X, missing_values), np.asarray(X, dtype=np.float64), np.nan)
    out["min"] = np.fmin.reduce(values, axis=0, initial=np.nan)
    out["max"] = np.fmax.reduce(values, axis=0, initial=np.nan)
    return out


def merge_ranges(summaries):
    """Pooled non-missing counts, minimum and maximum per feature (NaN if never observed)."""
    out = merge_counts(summaries)
    out["min"] = np.fmin.reduce([s["min"] for s in summaries], axis=0)
    out["max"] = np.fmax.reduce([s["max"] for s in summaries], axis=0)
    return out


@wire_function
def count_below_summary(X, sample_weight, thresholds, missing_values):
    """One step of the federated bisection: a site's counts below thresholds and their neighbours.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    sample_weight : ignored
    thresholds : ndarray of shape (n_features,)
        One threshold ``t`` per feature; NaN for a feature that is not queried.
    missing_values : scalar
        Entries equal to it are left out.

    Returns
    -------
    summary : dict
        Per feature: ``count`` (the number of non-missing values ``<= t``),
        ``below`` (the site's largest value ``<= t``) and ``above`` (its
        smallest value ``> t``), NaN when there is none: ``3`` numbers per
        queried feature, two of them **data values** of the site.
    """
    thresholds = np.asarray(thresholds, dtype=np.float64)
    values = np.where(_present(X, missing_values), np.asarray(X, dtype=np.float64), np.nan)
    le = values <= thresholds  # NaN (missing, or feature not queried) compares False
    gt = values > thresholds
    below = np.where(le, values, -np.inf).max(axis=0, initial=-np.inf)
    above = np.where(gt, values, np.inf).min(axis=0, initial=np.inf)
    return {"count": le.sum(axis=0).astype(np.int64),
            "below": np.where(np.isinf(below), np.nan, below),
            "above": np.where(np.isinf(above), np.nan, above)}


def merge_count_below(summaries):
    """Pooled count below each threshold, pooled largest value below and smallest above."""
    return {"count": np.sum([s["count"] for s in summaries], axis=0),
            "below": np.fmax.reduce([s["below"] for s in summaries], axis=0),
            "above": np.fmin.reduce([s["above"] for s in summaries], axis=0)}


@wire_function
def value_counts_summary(X, sample_weight, missing_values):
    """A site's count of every distinct non-missing value, per feature.

    Returns
    -------
    summary : dict
        ``n_samples``, ``count`` (non-missing per feature) and ``values``: for
        each feature a pair ``(distinct values, their counts)`` -- as many
        numbers as the site has distinct values, so the site reveals which
        values it holds and how often (all its values, for a continuous
        feature).
    """
    out = count_summary(X, sample_weight, missing_values)
    present = _present(X, missing_values)
    columns = []
    for i in range(X.shape[1]):
        column = X[present[:, i], i]
        if column.dtype == object:
            counter = Counter(column)
            columns.append((list(counter), list(counter.values())))
        else:
            values, counts = np.unique(column, return_counts=True)
            columns.append((values, counts))
    out["values"] = columns
    return out


def _safe_min(items):
    """The smallest item; items of non-comparable types by ``(type name, str)``."""
    try:
        return min(items)
    except TypeError:
        return min(items, key=lambda x: (str(type(x)), str(x)))


def merge_value_counts(summaries):
    """The most frequent value per feature over all sites (ties: the smallest value).

    Returns
    -------
    pooled : dict
        ``n_samples``, ``count`` and ``mode``: a list with, per feature, the
        most frequent value and its count (``None`` for a feature no site
        observed).
    """
    out = merge_counts(summaries)
    modes = []
    for i in range(len(out["count"])):
        parts = [s["values"][i] for s in summaries]
        if any(isinstance(values, list) for values, _ in parts):  # object columns: Counters
            total = Counter()
            for values, counts in parts:
                total.update(dict(zip(values, counts)))
            if not total:
                modes.append(None)
                continue
            best = max(total.values())
            modes.append((_safe_min([v for v, c in total.items() if c == best]), best))
        else:
            values = np.concatenate([v for v, _ in parts])
            counts = np.concatenate([c for _, c in parts])
            if values.size == 0:
                modes.append(None)
                continue
            uniq, inverse = np.unique(values, return_inverse=True)
            totals = np.bincount(inverse.ravel(), weights=counts, minlength=uniq.size)
            k = int(np.argmax(totals))  # the first maximum: the smallest value
            modes.append((uniq[k], int(totals[k])))
    out["mode"] = modes
    return out


# -- categories (FedOneHotEncoder) --------------------------------------------
def encoder_columns(X):
    """The columns of ``X`` as scikit-learn's encoders see them (each keeps its own dtype).

    ``X`` is a DataFrame or an array already validated by
    :func:`check_array` (``dtype=None``).
    """
    if hasattr(X, "iloc") and getattr(X, "ndim", 0) == 2:
        return [check_array(_safe_indexing(X, i, axis=1), ensure_2d=False, dtype=None,
                            ensure_all_finite="allow-nan") for i in range(X.shape[1])]
    return [check_array(X[:, i], ensure_2d=False, dtype=None, ensure_all_finite=False)
            for i in range(X.shape[1])]


@wire_function
def categories_summary(X, sample_weight=None):
    """A site's set of categories per feature: its sorted distinct values (missing last).

    This reveals **which categories the site holds** (not how often).
    """
    return [_unique(column) for column in encoder_columns(X)]


def merge_categories(summaries):
    """The sorted union of the sites' categories per feature (as ``OneHotEncoder`` sorts them)."""
    n_features = len(summaries[0])
    return [_unique(np.concatenate([s[i] for s in summaries])) for i in range(n_features)]


@wire_function
def unknown_categories_summary(X, sample_weight, categories):
    """Per feature, the site's values that are not in ``categories`` (normally none)."""
    from sklearn.utils._encode import _check_unknown

    out = []
    for column, cats in zip(encoder_columns(X), categories):
        cats = np.asarray(cats, dtype=object if column.dtype.kind in "OUS" else column.dtype)
        out.append(list(_check_unknown(column, cats)))
    return out


# -- a site's summary from its partitions' (a site on an engine) ---------------
def _moment_parts(parts):
    """:func:`moments_summary`'s reply from its partitions' (Chan's update, the means as
    two doubles): the site's moments to round-off."""
    pooled = merge_moments(parts, keep_lo=True)
    empty = ~(pooled["weight"] > 0)
    return {"weight": pooled["weight"], "count": pooled["count"],
            "mean": np.where(empty, 0.0, pooled["mean"]),
            "mean_lo": np.where(empty, 0.0, pooled["mean_lo"]), "m2": pooled["m2"]}


def _extreme_parts(parts, low, high):
    out = functools.reduce(lambda a, b: {k: a[k] + b[k] for k in a},
                           [{k: p[k] for k in p if k not in (low, high)} for p in parts])
    out[low] = np.fmin.reduce([p[low] for p in parts], axis=0)
    out[high] = np.fmax.reduce([p[high] for p in parts], axis=0)
    return out


def _value_count_parts(parts):
    out = merge_counts(parts)
    columns = []
    for i in range(len(out["count"])):
        pairs = [p["values"][i] for p in parts]
        if any(isinstance(values, list) for values, _ in pairs):  # object columns
            total = Counter()
            for values, counts in pairs:
                total.update(dict(zip(values, counts)))
            columns.append((list(total), list(total.values())))
            continue
        uniq, inverse = np.unique(np.concatenate([v for v, _ in pairs]), return_inverse=True)
        counts = np.concatenate([c for _, c in pairs])
        columns.append((uniq, np.bincount(inverse.ravel(), weights=counts,
                                          minlength=uniq.size).astype(np.int64)))
    out["values"] = columns
    return out


def combine_parts(fn, parts):
    """A site's ``fn`` summary from its partitions' summaries (in partition order)."""
    if fn is moments_summary:
        return _moment_parts(parts)
    if fn in (count_summary, mean_summary):
        return functools.reduce(lambda a, b: {k: a[k] + b[k] for k in a}, parts)
    if fn is range_summary:
        return _extreme_parts(parts, "min", "max")
    if fn is count_below_summary:
        return _extreme_parts(parts, "above", "below")
    if fn is value_counts_summary:
        return _value_count_parts(parts)
    if fn is categories_summary:
        return merge_categories(parts)
    if fn is unknown_categories_summary:
        return [list(dict.fromkeys(v for p in parts for v in p[i]))
                for i in range(len(parts[0]))]
    raise ValueError(f"no combination of {getattr(fn, '__name__', fn)!r} across partitions")
