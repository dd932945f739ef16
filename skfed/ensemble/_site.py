"""What runs at a site during a federated boosting fit.

Every function here takes one site's :class:`~skfed.data.SiteData` and the
request's arguments, and returns sums or counts over the site's rows (never a
row): a schema and label sets (:func:`site_schema`, the one per-site
release), totals (:func:`site_totals`), counts below probe values for the bin
thresholds (:func:`site_bin_counts`), node histograms
(:func:`site_histograms`) and loss sums (:func:`site_loss`).

The functions are stateless: each request carries the fit's *context* (column
order, categories, bin thresholds, loss, classes) and the *model* (baseline
and every tree so far), from which the site recomputes its binned rows, raw
predictions and gradients. A small cache keyed by digests of the context and
of the trees spares the recomputation between requests of one fit; it never
changes an answer (a request whose digest differs is computed afresh).
"""

import hashlib
import weakref

import numpy as np

from .._messages import show
from ..data.site import SiteError
from ._losses import gradients, loss_sums, make_loss
from ._selection import count_below
from ._tree import in_bitset, packed_leaf_values, unpack_trees

#: per-site caches, dropped with the site's data
_CACHES = {}


# -- the site's rows, as the model sees them ---------------------------------
def _column(site, j):
    X = site.X
    return X.iloc[:, j] if hasattr(X, "iloc") else np.asarray(X)[:, j]


def _is_category_dtype(values):
    return str(getattr(values, "dtype", "")) == "category"


def _present_levels(values):
    """The distinct non-missing values of a categorical column (sorted)."""
    values = np.asarray(values, dtype=object if _is_category_dtype(values) else None)
    if values.dtype.kind == "f":
        return np.unique(values[~np.isnan(values)])
    if values.dtype.kind in "iub":
        return np.unique(values)
    kept = [v for v in values.tolist() if not _missing(v)]
    return np.asarray(sorted(set(kept)), dtype=object)


def _missing(value):
    return value is None or (isinstance(value, float) and value != value) or \
        type(value).__name__ in ("NAType", "NaTType")


def _numeric(site, j):
    values = _column(site, j)
    try:
        if hasattr(values, "to_numpy"):
            return values.to_numpy(dtype=np.float64, na_value=np.nan)
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        names = site.columns()
        name = repr(names[j]) if names else f"{j}"
        raise SiteError(site.site, f"column {name} is not numeric; declare it in "
                                   "categorical_features (or encode it).") from None


def _codes(values, categories):
    """Category codes (positions in ``categories``); NaN for missing and unknown."""
    categories = np.asarray(categories)
    values = np.asarray(values, dtype=object if _is_category_dtype(values) else None)
    if categories.dtype.kind in "fiub" and values.dtype.kind in "fiub":
        x = values.astype(np.float64)
        if len(categories) == 0:
            return np.full(len(x), np.nan)
        at = np.clip(np.searchsorted(categories, x), 0, len(categories) - 1)
        return np.where(categories[at] == x, at, np.nan).astype(np.float64)
    lookup = {c: float(i) for i, c in enumerate(categories.tolist())}
    return np.array([np.nan if _missing(v) else lookup.get(v, np.nan)
                     for v in values.tolist()], dtype=np.float64)


def model_features(site, context):
    """The site's features in the model's order (categorical first, as codes), float64."""
    order, categorical = context["order"], context["categorical"]
    out = np.empty((site.n_samples, len(order)), dtype=np.float64)
    for j, (col, is_cat) in enumerate(zip(order, categorical)):
        out[:, j] = (_codes(_column(site, int(col)), context["categories"][j]) if is_cat
                     else _numeric(site, int(col)))
    return out


def bin_features(X, thresholds, missing_bin):
    """scikit-learn's bin of each value: ``i`` iff ``t[i-1] < x <= t[i]``; NaN (and
    a negative categorical code) to ``missing_bin``."""
    binned = np.empty(X.shape, dtype=np.uint8)
    for j, t in enumerate(thresholds):
        x = X[:, j]
        missing = np.isnan(x)
        binned[:, j] = np.where(missing, missing_bin,
                                np.searchsorted(t, np.where(missing, 0.0, x), side="left"))
    return binned


def encoded_target(site, context):
    """``(y, sample_weight)`` as the loss takes them (class codes; class weights applied)."""
    y = np.asarray(site.y)
    sw = site.weights() if context["weighted"] else None
    if context["classes"] is None:
        return y.astype(np.float64), sw
    classes = np.asarray(context["classes"])
    at = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
    unknown = classes[at] != y
    if unknown.any():
        raise SiteError(site.site, f"class {show(y[unknown][0])} is not among the classes of "
                                   "the training rows (it appears only in held-out rows).")
    if context["class_weight"] is not None:
        cw = np.asarray(context["class_weight"])[at]
        sw = cw if sw is None else sw * cw
    return at.astype(np.float64), sw


# -- the cache (never visible in a result) -----------------------------------
def _digest(obj, h=None):
    top = h is None
    h = hashlib.blake2b(digest_size=16) if top else h
    if isinstance(obj, np.ndarray):
        h.update(f"{obj.dtype.str}{obj.shape}".encode())
        h.update(repr(obj.tolist()).encode() if obj.dtype.kind == "O"
                 else np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            h.update(str(key).encode())
            _digest(obj[key], h)
    elif isinstance(obj, (list, tuple)):
        h.update(f"[{len(obj)}".encode())
        for item in obj:
            if isinstance(item, np.ndarray) and item.dtype.kind != "O":  # the common case
                h.update(item.dtype.str.encode() + str(item.shape).encode())
                h.update(np.ascontiguousarray(item).tobytes())
            else:
                _digest(item, h)
    else:
        h.update(repr(obj).encode())
    return h.hexdigest() if top else None


def _cache(site):
    """The site's cache, dropped with its data (no cache where that cannot be tracked)."""
    key = id(site)
    if key not in _CACHES:
        try:
            weakref.finalize(site, _CACHES.pop, key, None)
        except TypeError:  # not weakly referable: compute every request afresh
            return {}
        _CACHES[key] = {}
    return _CACHES[key]


class _Prepared:
    """A site's rows for one fit context: binned features, target, weights."""

    def __init__(self, site, context):
        self.X = model_features(site, context)
        self.binned = bin_features(self.X, context["thresholds"], context["max_bins"])
        # each row's histogram cell per feature (feature-major blocks of bins)
        n_bins = context["max_bins"] + 1
        self.cells = self.binned.astype(np.intp) + np.arange(self.binned.shape[1]) * n_bins
        self.y, self.sw = encoded_target(site, context)
        self.loss = make_loss(context["loss"], n_classes=len(context["classes"])
                              if context["classes"] is not None else None,
                              quantile=context["quantile"], weighted=context["weighted"])


def prepared(site, context):
    """The site's rows for ``context`` (cached by the context's digest)."""
    cache = _cache(site)
    digest = _digest(context)
    if cache.get("context") != digest:
        cache.clear()
        cache["context"], cache["prepared"] = digest, _Prepared(site, context)
    return cache["prepared"]


def _tree_digests(baseline, trees):
    """Chained digests of the model's prefixes: the baseline, then each tree added."""
    h = hashlib.blake2b(np.ascontiguousarray(baseline).tobytes(), digest_size=16)
    out = [h.hexdigest()]
    for tree in trees:
        for part in tree:
            h.update(np.ascontiguousarray(part).tobytes())
        out.append(h.hexdigest())
    return out


def _model_digest(model):
    """One digest of the whole model (a cheap check before the per-tree chain)."""
    h = hashlib.blake2b(np.ascontiguousarray(model["baseline"]).tobytes(), digest_size=16)
    for name in ("start", "feature", "bin", "flags", "right", "value", "bitsets"):
        h.update(np.ascontiguousarray(model["trees"][name]).tobytes())
    return h.hexdigest()


def raw_predictions(site, context, model):
    """The raw predictions of the site's rows, shape (n, n_trees_per_iteration).

    Equal to scikit-learn's during fit: the baseline plus each tree's leaf
    value, added tree by tree in float64.
    """
    prep = prepared(site, context)
    cache = _cache(site)
    whole = _model_digest(model)
    if cache.get("model") == whole:
        return cache["raw"][1]
    baseline = np.asarray(model["baseline"], dtype=np.float64).reshape(-1)
    trees = unpack_trees(model["trees"])
    digests = _tree_digests(baseline, trees)
    done, raw = cache.get("raw", (None, None))
    if done is None or len(done) > len(digests) or digests[len(done) - 1] != done[-1]:
        done = digests[:1]
        raw = np.zeros((prep.binned.shape[0], len(baseline)), order="F")
        raw += baseline.reshape(1, -1)
    for t in range(len(done) - 1, len(trees)):
        raw[:, t % len(baseline)] += packed_leaf_values(trees[t], prep.binned,
                                                       context["max_bins"])
    cache["raw"], cache["model"] = (digests, raw), whole
    cache.pop("rows", None)  # a new iteration: the row sets of its nodes start afresh
    return raw


def _gradients(site, context, model):
    cache = _cache(site)
    raw = raw_predictions(site, context, model)
    digest = cache["raw"][0][-1]
    if cache.get("gradients", (None,))[0] != digest:  # a new model: new gradients
        prep = prepared(site, context)
        cache["gradients"] = (digest, gradients(prep.loss, prep.y, raw, prep.sw))
    return cache["gradients"][1]


# -- the requests ------------------------------------------------------------
def site_schema(site, request):
    """The site's schema, its categorical columns' levels and its classes (per site).

    ``request["categorical"]`` is ``"from_dtype"`` or a boolean mask over the
    columns; ``request["task"]`` is ``"regression"`` or ``"classification"``.
    Checks the target and the weights on the way (errors name the site).
    """
    n = site.n_samples
    if n == 0:
        raise SiteError(site.site, "no rows.")
    n_cols = site.X.shape[1]
    by_dtype = np.array([_is_category_dtype(_column(site, j)) for j in range(n_cols)])
    wanted = by_dtype if isinstance(request["categorical"], str) else \
        np.asarray(request["categorical"], dtype=bool)
    out = {"n_samples": n, "n_columns": n_cols, "category_dtype": by_dtype,
           "levels": [_present_levels(_column(site, j)) if wanted[j] else None
                      for j in range(n_cols)]}
    sw = site.weights()
    if sw.shape != (n,) or not np.all(np.isfinite(sw)) or np.any(sw < 0):
        raise SiteError(site.site, "sample weights must be finite, non-negative and one per "
                                   "row.")
    out["weight_sum"] = float(sw.sum())
    y = None if site.y is None else np.asarray(site.y)
    if y is None or y.shape[0] != n or y.ndim != 1:
        raise SiteError(site.site, "the target must be one value per row.")
    if y.dtype.kind in "fc" and not np.all(np.isfinite(y)):
        raise SiteError(site.site, f"the target has {int(np.sum(~np.isfinite(y)))} NaN or "
                                   "infinite value(s); drop those rows.")
    if request["task"] == "classification":
        out["classes"], index, out["class_counts"] = np.unique(y, return_inverse=True,
                                                               return_counts=True)
        out["class_weight_sums"] = np.bincount(index.ravel(), weights=sw,
                                               minlength=len(out["classes"]))
    elif y.dtype.kind not in "fiub":
        raise SiteError(site.site, f"the target is not numeric (dtype {y.dtype}).")
    return out


def site_totals(site, context):
    """Pooled totals: missing values per feature, rows, weights, and the target's
    sums (``wy``, ``y``) or per-class weights (``class_w``)."""
    X = model_features(site, context)
    y, sw = encoded_target(site, context)
    w = np.ones(len(y)) if sw is None else sw
    out = {"missing": np.isnan(X).sum(axis=0), "n": float(len(y)), "w": float(w.sum())}
    if context["classes"] is not None:
        out["class_w"] = np.bincount(y.astype(np.intp), weights=w,
                                     minlength=len(context["classes"]))
        return out
    loss = context["loss"]
    if loss == "gamma" and np.any(y <= 0):
        raise SiteError(site.site, "loss='gamma' requires strictly positive y.")
    if loss == "poisson" and np.any(y < 0):
        raise SiteError(site.site, "loss='poisson' requires non-negative y.")
    out.update(wy=float(np.multiply(y, w).sum()), y=float(y.sum()))
    return out


def _multiplicity(site, context, sampling):
    """How often each row counts for the thresholds, and its weight (or None)."""
    n = site.n_samples
    if sampling["mode"] == "draw":  # scikit-learn's subsample, replayed at the site
        offset = sampling["offsets"][str(site.site)]
        rng = np.random.RandomState(sampling["seed"])
        if sampling.get("weight_total") is None:
            draws = rng.choice(sampling["n_total"], sampling["size"], replace=True)
            mine = draws[(draws >= offset) & (draws < offset + n)] - offset
        else:
            _, sw = encoded_target(site, context)
            u = rng.random_sample(sampling["size"])
            total = sampling["weight_total"]
            cdf = (sampling["weight_offsets"][str(site.site)] + np.cumsum(sw / total)) \
                / sampling["p_total"]
            low = sampling["weight_offsets"][str(site.site)] / sampling["p_total"]
            mine = np.searchsorted(cdf, u[u >= low], side="right")
            mine = mine[mine < n]
        return np.bincount(mine, minlength=n).astype(np.int64), None
    if sampling["mode"] == "weighted":
        _, sw = encoded_target(site, context)
        return (sw != 0).astype(np.int64), sw
    return np.ones(n, dtype=np.int64), None


def site_bin_counts(site, context, sampling, probes, starts):
    """Counts (and weights) at or below each probe, per continuous feature, and
    the sums of values between probes (:func:`~._selection.count_below`)."""
    X = model_features(site, context)
    m, sw = _multiplicity(site, context, sampling)
    parts = []
    for q, f in enumerate(sampling["features"]):
        a, b = int(starts[q]), int(starts[q + 1])
        if a == b:
            continue
        x = X[:, int(f)]
        ok = ~np.isnan(x)
        parts.append(count_below(x[ok], m[ok], None if sw is None else sw[ok],
                                 np.asarray(probes[a:b])))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def site_residual_counts(site, context, model, paths, probes, starts):
    """Counts (and weights) of the residuals ``y - raw`` at or below each probe, per
    node of ``paths`` (packed like :func:`pack_nodes`; ``model=None``: of ``y``)."""
    prep = prepared(site, context)
    values = prep.y if model is None else \
        prep.y - raw_predictions(site, context, model)[:, 0]
    ones = np.ones(len(values), dtype=np.int64)
    parts = []
    for q, (_, steps, _) in enumerate(unpack_nodes(paths)):
        a, b = int(starts[q]), int(starts[q + 1])
        if a == b:
            continue
        rows = node_rows(prep.binned, steps, context["max_bins"])
        parts.append(count_below(values[rows], ones[rows],
                                 None if prep.sw is None else prep.sw[rows],
                                 np.asarray(probes[a:b])))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _cached_rows(site, prep, steps, missing_bin):
    """:func:`node_rows`, reusing the rows of the node's longest known ancestor."""
    known = _cache(site).setdefault("rows", {})
    keys = [tuple(s[:4]) + (None if s[4] is None else s[4].tobytes(), s[5]) for s in steps]
    depth = len(steps)
    while depth and tuple(keys[:depth]) not in known:
        depth -= 1
    rows = known[tuple(keys[:depth])] if depth else None
    for d in range(depth, len(steps)):
        rows = node_rows(prep.binned, steps[d:d + 1], missing_bin, rows)
        known[tuple(keys[:d + 1])] = rows
    return np.ones(prep.binned.shape[0], dtype=bool) if rows is None else rows


def node_rows(binned, steps, missing_bin, rows=None):
    """The rows of a node: those (of ``rows``, all by default) that follow every
    split of its path."""
    rows = np.ones(binned.shape[0], dtype=bool) if rows is None else rows.copy()
    for feature, threshold, missing_left, categorical, bitset, goes_left in steps:
        col = binned[:, feature]
        if categorical:
            left = in_bitset(bitset[None, :], np.zeros(len(col), dtype=np.intp), col)
        else:
            left = (col <= threshold) | (missing_left & (col == missing_bin))
        rows &= left if goes_left else ~left
    return rows


def site_histograms(site, context, model, request):
    """Per requested node and allowed feature, per bin: the sums of gradients (and
    hessians, unless constant) and the row counts; with ``request["with_loss"]``
    also the loss sums of the current model (:func:`site_loss`)."""
    prep = prepared(site, context)
    grad, hess = _gradients(site, context, model)
    n_bins = context["max_bins"] + 1
    out = {"gradients": [], "counts": []}
    if hess is not None:
        out["hessians"] = []
    for k, steps, features in unpack_nodes(request):
        rows = _cached_rows(site, prep, steps, context["max_bins"])
        size = len(features) * n_bins
        if np.array_equal(features, np.arange(prep.binned.shape[1])):
            cells = prep.cells[rows].ravel()
        else:
            sub = prep.binned[rows][:, features]
            cells = (sub.astype(np.intp) + np.arange(len(features)) * n_bins).ravel()
        out["counts"].append(np.bincount(cells, minlength=size).astype(np.uint32))
        out["gradients"].append(np.bincount(
            cells, weights=np.repeat(grad[rows, k].astype(np.float64), len(features)),
            minlength=size))
        if hess is not None:
            out["hessians"].append(np.bincount(
                cells, weights=np.repeat(hess[rows, k].astype(np.float64), len(features)),
                minlength=size))
    out = {key: np.concatenate(v) for key, v in out.items()}
    if request["with_loss"]:
        out.update(loss_sums(prep.loss, prep.y, raw_predictions(site, context, model),
                             prep.sw))
    return out


def site_loss(site, context, model):
    """``{"loss": sum w * loss, "weight": sum w}`` of the model on the site's rows."""
    prep = prepared(site, context)
    return loss_sums(prep.loss, prep.y, raw_predictions(site, context, model), prep.sw)


def pack_nodes(nodes, n_features):
    """The node requests ``[(tree, key, allowed)]`` as flat arrays (what travels)."""
    steps = [s for _, key, _ in nodes for s in key]
    bitsets = [s[4] for s in steps if s[3]]
    step_start = np.zeros(len(nodes) + 1, dtype=np.int32)
    step_start[1:] = np.cumsum([len(key) for _, key, _ in nodes])
    features = [np.arange(n_features) if allowed is None else np.asarray(allowed)
                for _, _, allowed in nodes]
    feature_start = np.zeros(len(nodes) + 1, dtype=np.int32)
    feature_start[1:] = np.cumsum([len(f) for f in features])
    flags = np.array([s[2] * 1 + s[3] * 2 + s[5] * 4 for s in steps], dtype=np.uint8)
    return {"tree": np.array([k for k, _, _ in nodes], dtype=np.int32),
            "step_start": step_start, "step_feature": np.array([s[0] for s in steps],
                                                                dtype=np.int32),
            "step_bin": np.array([s[1] for s in steps], dtype=np.uint8), "step_flags": flags,
            "step_bitsets": (np.stack([np.frombuffer(b, dtype=np.uint32) for b in bitsets])
                             if bitsets else np.zeros((0, 8), dtype=np.uint32)),
            "feature_start": feature_start,
            "features": np.concatenate(features).astype(np.int32)}


def unpack_nodes(request):
    """``(tree, steps, features)`` per requested node (the inverse of :func:`pack_nodes`)."""
    flags = request["step_flags"]
    categorical = (flags & 2).astype(bool)
    bitset_of_step = np.cumsum(categorical) - 1
    out = []
    for j, k in enumerate(request["tree"]):
        a, b = request["step_start"][j], request["step_start"][j + 1]
        steps = [(int(request["step_feature"][s]), int(request["step_bin"][s]),
                  bool(flags[s] & 1), bool(categorical[s]),
                  request["step_bitsets"][bitset_of_step[s]] if categorical[s] else None,
                  bool(flags[s] & 4)) for s in range(a, b)]
        fa, fb = request["feature_start"][j], request["feature_start"][j + 1]
        out.append((int(k), steps, request["features"][fa:fb].astype(np.intp)))
    return out


# -- predictions and scores where the rows are -------------------------------
def site_output(site, estimator, method):
    """``estimator.<method>(X)`` on the site's rows (the rows stay at the site)."""
    return getattr(estimator, method)(site.X)


def site_score_terms(site, estimator):
    """The sums :func:`skfed.data.site.combine_scores` pools into R2 or accuracy."""
    sw = site.weights()
    pred = estimator.predict(site.X)
    y = np.asarray(site.y)
    if hasattr(estimator, "classes_"):
        return {"kind": "accuracy", "w": float(sw.sum()), "correct": float(sw @ (pred == y))}
    y2, p2 = y.reshape(len(y), 1).astype(np.float64), np.asarray(pred).reshape(len(y), 1)
    return {"kind": "r2", "w": float(sw.sum()), "wy": sw @ y2, "wy2": sw @ (y2 * y2),
            "res": sw @ ((y2 - p2) ** 2)}
