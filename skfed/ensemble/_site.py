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
predictions and gradients. A small cache, keyed by a digest of the context
and by the trees themselves (compared bit for bit), spares the recomputation
between requests of one fit: the binned rows, the raw predictions (a new
model's trees are applied to the ones held when it extends the held model),
the gradients, and the rows of the nodes asked for. It never changes an answer
(a request that differs is computed afresh).

A node's histograms are computed by scikit-learn's own histogram kernel
(``HistogramBuilder``, the compiled code its grower runs) where it is there,
else as one sparse product of the nodes' rows (the one-hot matrix of their
cells times their gradients, hessians and ones). Both add each cell's rows one
by one, in row order, in float64 (as ``np.bincount`` does): the sums are the
same to the bit.
"""

import functools
import hashlib
import weakref

import numpy as np
from scipy.sparse import csc_matrix

from .._messages import show
from ..data.site import SiteError
from ._losses import gradients, loss_sums, make_loss
from ._selection import SortedValues, count_below
from ._tree import in_bitset, split_rows, unpack_trees

try:  # scikit-learn's compiled histogram kernel: the sums of the sparse product below
    from sklearn.ensemble._hist_gradient_boosting.histogram import HistogramBuilder
except ImportError:  # pragma: no cover - a scikit-learn without it: the product alone
    HistogramBuilder = None

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
    """The site's features in the model's order (categorical first, as codes), float64
    (column-major: every later pass reads a column)."""
    order, categorical = context["order"], context["categorical"]
    out = np.empty((site.n_samples, len(order)), dtype=np.float64, order="F")
    for j, (col, is_cat) in enumerate(zip(order, categorical)):
        out[:, j] = (_codes(_column(site, int(col)), context["categories"][j]) if is_cat
                     else _numeric(site, int(col)))
    return out


def bin_features(X, thresholds, missing_bin):
    """scikit-learn's bin of each value: ``i`` iff ``t[i-1] < x <= t[i]``; NaN (and
    a negative categorical code) to ``missing_bin``. Column-major (splits and
    scikit-learn's histogram kernel read a column)."""
    binned = np.empty(X.shape, dtype=np.uint8, order="F")
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
    h = hashlib.sha256() if top else h  # hardware-accelerated on most CPUs
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
        if all(isinstance(item, np.ndarray) and item.dtype.kind != "O" for item in obj):
            # the common case (bin thresholds, categories): one header, then the bytes
            h.update(repr([(item.dtype.str, item.shape) for item in obj]).encode())
            for item in obj:
                h.update(np.ascontiguousarray(item).tobytes())
            return h.hexdigest() if top else None
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
        self.binned = bin_features(model_features(site, context), context["thresholds"],
                                   context["max_bins"])
        self.n_bins = context["max_bins"] + 1
        # which features have a row in the missing bin here (where they have none, the
        # missing-value direction of a split moves no row: node keys ignore it)
        self.has_missing = (self.binned == context["max_bins"]).any(axis=0)
        self.y, self.sw = encoded_target(site, context)
        self.loss = make_loss(context["loss"], n_classes=len(context["classes"])
                              if context["classes"] is not None else None,
                              quantile=context["quantile"], weighted=context["weighted"])
        self._root_counts = self._all_rows = None
        self.ones = {}  # the shared vectors of ones this site's products use (_ones)

    @functools.cached_property
    def cells(self):
        """Each row's histogram cell per feature (feature-major blocks of bins), int32:
        the column indices of the one-hot matrix of the product (:func:`_histogram_sums`)."""
        return _cells(self.binned, np.arange(self.binned.shape[1]), self.n_bins)

    def all_rows(self):
        """Every row's index, as uint32 (scikit-learn's sample indices)."""
        if self._all_rows is None:
            self._all_rows = np.arange(self.binned.shape[0], dtype=np.uint32)
        return self._all_rows

    def root_counts(self, n_cells):
        """The rows in each cell (float64), computed once: the root's counts."""
        if self._root_counts is None:
            self._root_counts = np.bincount(self.cells.ravel(),
                                            minlength=n_cells).astype(np.float64)
        return self._root_counts


def prepared(site, context):
    """The site's rows for ``context`` (cached by the context's digest)."""
    cache = _cache(site)
    digest = _digest(context)
    if cache.get("context") != digest:
        cache.clear()
        cache["context"], cache["prepared"] = digest, _Prepared(site, context)
    return cache["prepared"]


#: the arrays of a packed model (:func:`~._tree.pack_trees`) after its baseline
_TREE_FIELDS = ("start", "feature", "bin", "flags", "right", "value", "bitsets")


def _model_arrays(model):
    """The model's arrays, the baseline first (flat float64), as they arrived."""
    return [np.asarray(model["baseline"], dtype=np.float64).reshape(-1)] + \
        [np.ascontiguousarray(model["trees"][name]) for name in _TREE_FIELDS]


def _same_bytes(a, b):
    """Whether two arrays are the same, bit for bit (dtype and shape too)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _trees_held(held, arrays):
    """How many trees of the model whose raw predictions are held (``held``, its
    arrays) begin the model ``arrays`` (same baseline, then the same trees, bit for
    bit); 0 when the held model is not a beginning of it."""
    if held is None or not _same_bytes(held[0], arrays[0]):
        return 0
    for old, new in zip(held[1:], arrays[1:]):  # tree starts, node fields, bitsets
        if len(new) < len(old) or not _same_bytes(old, new[:len(old)]):
            return 0
    return len(held[1]) - 1


def raw_predictions(site, context, model):
    """The raw predictions of the site's rows, shape (n, n_trees_per_iteration).

    Equal to scikit-learn's during fit: the baseline plus each tree's leaf
    value, added tree by tree in float64.
    """
    return _raw_predictions(_cache(site), prepared(site, context), context, model)


def _raw_predictions(cache, prep, context, model):
    """:func:`raw_predictions` from the site's cache and prepared rows: the trees
    already applied for the previous model are not applied again."""
    arrays = _model_arrays(model)
    held = cache.get("model")
    if held is not None and all(_same_bytes(a, b) for a, b in zip(held, arrays)):
        return cache["raw"]
    baseline, first = arrays[0], _trees_held(held, arrays)
    raw = cache["raw"] if first else None
    if raw is None:
        raw = np.zeros((prep.binned.shape[0], len(baseline)), order="F")
        raw += baseline.reshape(1, -1)
    known = cache.get("rows", {})
    for t, tree in enumerate(unpack_trees(model["trees"], first=first), start=first):
        _add_leaf_values(raw[:, t % len(baseline)], tree, prep, context["max_bins"], known)
    cache["raw"], cache["model"] = raw, [a.copy() for a in arrays]
    cache["model_version"] = cache.get("model_version", 0) + 1
    cache.pop("rows", None)  # a new iteration: the row sets of its nodes start afresh
    cache.pop("rows_held", None)
    return raw


def _add_leaf_values(column, tree, prep, missing_bin, known):
    """Adds to ``column`` each row's leaf value of an unpacked ``tree`` (one float64
    addition per row, as :func:`~._tree.packed_leaf_values`). The rows of a node whose path
    the histogram requests of the tree's iteration met are taken from ``known``."""
    (is_leaf, feature, threshold, missing_left, categorical, bitset_row, bitsets, left, right,
     value) = tree
    stack = [(0, None, ())]  # (node, its rows (None: every row), its key in ``known``)
    while stack:
        node, rows, key = stack.pop()
        if is_leaf[node]:
            if rows is None:
                column += value[node]
            else:
                column[rows] += value[node]
            continue
        bitset = bitsets[bitset_row[node]] if categorical[node] else None
        step = _step_key(prep, (feature[node], threshold[node], missing_left[node],
                                categorical[node], bitset))
        left_key, right_key = key + (step + (True,),), key + (step + (False,),)
        if left_key in known and right_key in known:
            left_rows, right_rows = known[left_key], known[right_key]
        else:
            left_rows, right_rows = split_rows(prep.binned, missing_bin, feature[node],
                                               threshold[node], missing_left[node],
                                               categorical[node], bitset, rows)
        stack += [(right[node], right_rows, right_key), (left[node], left_rows, left_key)]


def _step_key(prep, split):
    """A split's part of a node key: ``(feature, bin, missing left, categorical, bitset
    bytes)``, the missing-value direction only where a row here is missing."""
    feature, threshold, missing_left, categorical, bitset = split
    feature = int(feature)
    return (feature, int(threshold), bool(missing_left) and bool(prep.has_missing[feature]),
            bool(categorical), None if bitset is None else bitset.tobytes())


def _gradients(cache, prep, raw):
    """The gradients and hessians at ``raw``, the raw predictions just computed by
    :func:`_raw_predictions` with ``cache``."""
    version = cache["model_version"]
    if cache.get("gradients", (None,))[0] != version:  # a new model: new gradients
        cache["gradients"] = (version, gradients(prep.loss, prep.y, raw, prep.sw))
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
    out = {"missing": np.isnan(X).sum(axis=0), "n": len(y), "w": float(w.sum())}
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
    features = _sorted_features(site, context, sampling)
    parts = []
    for q in range(len(sampling["features"])):
        a, b = int(starts[q]), int(starts[q + 1])
        if a == b:
            continue
        parts.append(features[q].count_below(np.asarray(probes[a:b])))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _sorted_features(site, context, sampling):
    """The site's values of each feature of ``sampling``, sorted once for all the
    rounds of the threshold search (cached by the digest of the request)."""
    cache = _cache(site)
    digest = _digest({"context": context, "sampling": sampling})
    if cache.get("bin_counts", (None,))[0] != digest:
        cache.pop("bin_counts", None)  # free the previous search's arrays first
        X = model_features(site, context)
        m, sw = _multiplicity(site, context, sampling)
        features = []
        for f in sampling["features"]:
            x = X[:, int(f)]
            ok = ~np.isnan(x)
            features.append(SortedValues(x[ok], m[ok], None if sw is None else sw[ok]))
        cache["bin_counts"] = (digest, features)
    return cache["bin_counts"][1]


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


#: the node rows a site keeps, at most this many times its rows (a tree's nodes hold
#: about its depth times the rows)
_MAX_HELD_ROWS = 32


def _cached_rows(cache, prep, steps, missing_bin):
    """The indices (ascending) of a node's rows, None for the root (every row), from
    the rows of its longest known ancestor: a node costs its parent's rows, not all.
    A split's two sides are kept together (the larger one is often split next)."""
    known = cache.setdefault("rows", {})
    keys = [_step_key(prep, s[:5]) + (s[5],) for s in steps]
    depth = len(steps)
    while depth and tuple(keys[:depth]) not in known:
        depth -= 1
    rows = known[tuple(keys[:depth])] if depth else None
    n = prep.binned.shape[0]
    for d in range(depth, len(steps)):
        if cache.get("rows_held", 0) > _MAX_HELD_ROWS * n:  # a bound, whatever is asked
            known.clear()
            cache["rows_held"] = 0
        left, right = _step_rows(prep.binned, steps[d], missing_bin, rows)
        parent = tuple(keys[:d])
        known[parent + (keys[d][:5] + (True,),)] = left
        known[parent + (keys[d][:5] + (False,),)] = right
        cache["rows_held"] = cache.get("rows_held", 0) + len(left) + len(right)
        rows = left if keys[d][5] else right
    return rows


def _step_rows(binned, step, missing_bin, rows):
    """The indices of those ``rows`` (all when None) that go left, and right, at the
    split of a path's ``step`` (:func:`node_rows`'s rule; the fitted tree's rule,
    :func:`~._tree.split_rows`, moves the same training rows: the two differ only on
    missing values of a feature that had none in training)."""
    feature, threshold, missing_left, categorical, bitset, _ = step
    col = binned[:, feature] if rows is None else np.take(binned[:, feature], rows)
    if categorical:
        left = in_bitset(bitset[None, :], np.zeros(len(col), dtype=np.intp), col)
    else:
        left = col <= threshold
        if missing_left:
            left |= col == missing_bin
    if rows is None:
        return np.flatnonzero(left), np.flatnonzero(~left)
    return np.compress(left, rows), np.compress(~left, rows)  # faster than rows[left]


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
    cache, prep = _cache(site), prepared(site, context)
    raw = _raw_predictions(cache, prep, context, model)
    grad, hess = _gradients(cache, prep, raw)
    n_bins = context["max_bins"] + 1
    # the nodes of a tree that need the same features are computed together
    groups, nodes = {}, unpack_nodes(request)
    for j, (k, steps, features) in enumerate(nodes):
        rows = _cached_rows(cache, prep, steps, context["max_bins"])
        groups.setdefault((k, features.tobytes()), []).append((j, rows))
    sums = [None] * len(nodes)
    for (k, _), members in groups.items():
        features = nodes[members[0][0]][2]
        per_node = _node_histograms(cache, prep, [rows for _, rows in members], features,
                                    grad[:, k], None if hess is None else hess[:, k], k,
                                    n_bins)
        for (j, _), node_sums in zip(members, per_node):
            sums[j] = node_sums
    out = {"gradients": _joined([s[0] for s in sums], np.float64),
           "counts": _joined([s[2] for s in sums], np.uint32)}
    if hess is not None:
        out["hessians"] = _joined([s[1] for s in sums], np.float64)
    if request["with_loss"]:
        out.update(loss_sums(prep.loss, prep.y, raw, prep.sw))
    return out


def _node_histograms(cache, prep, node_rows_list, features, gradient, hessian, k, n_bins):
    """Per node (its row indices; None: every row) ``(gradients, hessians or None,
    counts)``, the sums in every cell of ``features`` x bins: scikit-learn's kernel
    where it is there, else the sparse product (:func:`_histogram_sums`); both add
    each cell's rows one by one in row order, in float64, so the sums are the same."""
    builders = _builders(cache, prep, k, gradient, hessian, n_bins)
    if builders is not None:
        every = len(features) == prep.binned.shape[1] and \
            np.array_equal(features, np.arange(len(features)))
        return [_kernel_histogram(builders, prep, rows, None if every else features,
                                  hessian is not None) for rows in node_rows_list]
    out, columns = [], [gradient] + ([] if hessian is None else [hessian])
    for batch in _batches(node_rows_list, prep.binned.shape[0]):
        for sums in _histogram_sums(prep, batch, features, columns, n_bins):
            out.append((sums[:, 0], None if hessian is None else sums[:, 1], sums[:, -1]))
    return out


def _builders(cache, prep, k, gradient, hessian, n_bins):
    """scikit-learn's histogram builders of tree ``k`` of the current model (None
    without them): one for nodes of every row, whose kernel reads its own copy of
    the gradients (which the other's gathers would overwrite), one for the others."""
    if HistogramBuilder is None:
        return None
    version = cache["model_version"]
    held = cache.get("builders")
    if held is None or held[0] != version:
        held = cache["builders"] = (version, {})
    if k not in held[1]:
        constant = hessian is None
        args = (prep.binned, n_bins, np.ascontiguousarray(gradient, dtype=np.float32),
                np.ones(1, dtype=np.float32) if constant else
                np.ascontiguousarray(hessian, dtype=np.float32), constant, 1)
        try:
            held[1][k] = (HistogramBuilder(*args), HistogramBuilder(*args))
        except (TypeError, ValueError):  # another scikit-learn: the product
            held[1][k] = None
    return held[1][k]


def _kernel_histogram(builders, prep, rows, features, with_hessians):
    """``(gradients, hessians or None, counts)`` of one node by scikit-learn's kernel
    (the rows are ascending: its sums add them in row order), over ``features``
    (None: every feature), each of shape (features, bins)."""
    if rows is None or len(rows) == prep.binned.shape[0]:
        # every row (ascending, distinct): the root's kernel
        builder, indices = builders[0], prep.all_rows()
    else:
        builder, indices = builders[1], rows.astype(np.uint32)
    hist = builder.compute_histograms_brute(
        indices, None if features is None else features.astype(np.uint32))
    # the array behind the kernel's memoryview (np.asarray would parse its format)
    hist = hist.base if isinstance(getattr(hist, "base", None), np.ndarray) else \
        np.asarray(hist)
    if features is not None:
        hist = hist[features]
    return (hist["sum_gradients"], hist["sum_hessians"] if with_hessians else None,
            hist["count"])


def _joined(parts, dtype):
    """The arrays ``parts``, flattened one after the other into one array (one copy)."""
    out = np.empty(sum(part.size for part in parts), dtype=dtype)
    at = 0
    for part in parts:
        out[at:at + part.size].reshape(part.shape)[...] = part
        at += part.size
    return out


def _batches(members, n_rows):
    """The nodes' rows (None: all ``n_rows`` rows) in consecutive batches of at most
    ``n_rows`` rows (one node alone at most): a product's memory stays that of the
    site's rows however many nodes a request asks for."""
    batch, size = [], 0
    for member in members:
        rows = n_rows if member is None else len(member)
        if batch and size + rows > n_rows:
            yield batch
            batch, size = [], 0
        batch.append(member)
        size += rows
    if batch:
        yield batch


def _cells(binned, features, n_bins):
    """Each row's histogram cell of each of ``features`` (position-major blocks of
    ``n_bins``), as a C-ordered int32 array (rows flatten without a copy)."""
    cells = np.empty((binned.shape[0], len(features)), dtype=np.int32)
    np.add(binned[:, features], np.arange(len(features), dtype=np.int32) * np.int32(n_bins),
           out=cells)
    return cells


#: read-only vectors of ones (the one-hot matrices' entries), one per power of two,
#: shared by the sites of the process while a site's prepared rows hold them
_ONES = weakref.WeakValueDictionary()


def _ones(size, holder):
    """``size`` ones, a view of at least half a shared buffer (scipy copies a view of
    a much larger array), which ``holder`` (a dict) keeps alive."""
    bits = max(int(size).bit_length(), 10)
    ones = holder.get(bits)
    if ones is None:
        ones = _ONES.get(bits)
        if ones is None:
            ones = np.ones(1 << bits)
            _ONES[bits] = ones
        holder[bits] = ones
    return ones[:size]


def _histogram_sums(prep, node_rows_list, features, columns, n_bins):
    """Per node (its row indices; None: every row), the sums of each of ``columns``
    (float32 per-row values, summed in float64) and the row count in every cell of
    ``features`` x bins; one array of shape (cells, len(columns) + 1) per node.

    One sparse product for all the nodes: the one-hot matrix of their rows' cells
    (a node's cells offset by its position) times the rows' values. Each cell
    adds its rows one by one in row order, from zero: the additions, hence the
    float64 sums, of ``np.bincount``.
    """
    every = len(features) == prep.binned.shape[1] and \
        np.array_equal(features, np.arange(len(features)))
    n_cells, width = len(features) * n_bins, len(features)
    root = every and len(node_rows_list) == 1 and node_rows_list[0] is None
    if root:  # every row, whose counts are the same at every iteration
        index, values = prep.cells, np.empty((prep.cells.shape[0], len(columns)))
        for c, column in enumerate(columns):
            values[:, c] = column
    else:
        index, values = _node_cells_and_values(prep, node_rows_list, features, columns,
                                               n_bins, every)
    n_rows = values.shape[0]
    pointers = np.arange(0, n_rows * width + 1, width,
                         dtype=np.int32 if n_rows * width < 2**31 else np.int64)
    one_hot = csc_matrix((_ones(n_rows * width, prep.ones), index.ravel(), pointers),
                         shape=(len(node_rows_list) * n_cells, n_rows))
    sums = one_hot @ values
    if root:
        sums = np.column_stack([sums, prep.root_counts(n_cells)])
    return [sums[slot * n_cells:(slot + 1) * n_cells] for slot in range(len(node_rows_list))]


def _node_cells_and_values(prep, node_rows_list, features, columns, n_bins, every):
    """The cells (offset by each node's position) and the values, with a last column
    of ones that counts, of the rows of the nodes, one node after the other."""
    sizes = [prep.binned.shape[0] if rows is None else len(rows) for rows in node_rows_list]
    index = np.empty((sum(sizes), len(features)), dtype=np.int32)
    values = np.empty((sum(sizes), len(columns) + 1))
    values[:, -1] = 1.0
    start = 0
    for slot, (rows, size) in enumerate(zip(node_rows_list, sizes)):
        block = slice(start, start + size)
        start += size
        for c, column in enumerate(columns):
            values[block, c] = column if rows is None else np.take(column, rows)
        if not every:
            index[block] = _cells(prep.binned if rows is None else prep.binned[rows],
                                  features, n_bins)
        elif rows is None:
            index[block] = prep.cells
        else:  # np.take: much faster than fancy indexing (and "clip": no buffer)
            np.take(prep.cells, rows, axis=0, out=index[block], mode="clip")
        if slot:
            index[block] += np.int32(slot * len(features) * n_bins)
    return index, values


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
    """The sums :func:`skfed.data.site.combine_scores` pools into R2 or accuracy (numbers
    only, so that a masked sum carries them: their keys say which score)."""
    sw = site.weights()
    pred = estimator.predict(site.X)
    y = np.asarray(site.y)
    if hasattr(estimator, "classes_"):
        return {"w": float(sw.sum()), "correct": float(sw @ (pred == y))}
    y2, p2 = y.reshape(len(y), 1).astype(np.float64), np.asarray(pred).reshape(len(y), 1)
    return {"w": float(sw.sum()), "wy": sw @ y2, "wy2": sw @ (y2 * y2),
            "res": sw @ ((y2 - p2) ** 2)}
