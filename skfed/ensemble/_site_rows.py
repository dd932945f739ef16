"""A boosting fit's rows at a site, and the state that keeps them between requests.

The site's features in the model's order and binned, its encoded target, the
raw predictions of a model (trees applied once, then only the new ones), the
gradients, and the rows of the tree nodes a request names. They are kept in the
fit's state at the site (:mod:`._fit_state`), which a request names by its context
and its model's digest (:mod:`._model_chain`); they never change an answer: a
request computes the same sums from a state as from its whole model
(:mod:`skfed.ensemble._site`).
"""

import functools
from itertools import accumulate

import numpy as np

from .._messages import show
from ..data.site import SiteError
from ..federation.session import add_fields
from ._fit_state import STORE, FitStateLost
from ._losses import gradients, loss_sums, make_loss
from ._model_chain import chain_start, content_digest, tree_digests
from ._tree import in_bitset, split_rows, unpack_trees
from ._wire import NAMING_KEYS, is_reference

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


def _model_column(site, context, j):
    """Column ``j`` of :func:`model_features` (a view of the site's rows where one serves)."""
    col = int(context["order"][j])
    if context["categorical"][j]:
        return _codes(_column(site, col), context["categories"][j])
    return _numeric(site, col)


def model_features(site, context):
    """The site's features in the model's order (categorical first, as codes), float64
    (column-major: every later pass reads a column)."""
    out = np.empty((site.n_samples, len(context["order"])), dtype=np.float64, order="F")
    for j in range(out.shape[1]):
        out[:, j] = _model_column(site, context, j)
    return out


def missing_counts(site, context):
    """The missing values of each of :func:`model_features`' columns, column by column
    (no copy of the rows where the site's columns are float64 already)."""
    return np.array([np.count_nonzero(np.isnan(_model_column(site, context, j)))
                     for j in range(len(context["order"]))], dtype=np.int64)


#: rows binned at a time (bounds the search's temporary arrays)
_BIN_CHUNK = 1 << 16


def bin_features(X, thresholds, missing_bin):
    """scikit-learn's bin of each value: ``i`` iff ``t[i-1] < x <= t[i]``; NaN to
    ``missing_bin`` (a negative categorical code is a value like any other: bin 0).
    Column-major (splits and scikit-learn's histogram kernel read a column).

    The bins of ``np.searchsorted(t, x, side="left")`` and of scikit-learn's
    ``_map_to_bins`` (without categorical features), found by a branch-free binary
    search vectorised over the rows (3x faster than either: their searches branch
    on every comparison).
    """
    binned = np.empty(X.shape, dtype=np.uint8, order="F")
    m = max(min(X.shape[0], _BIN_CHUNK), 1)
    pos, below = np.empty(m, dtype=np.intp), np.empty(m, dtype=bool)
    step, probe = np.empty(m, dtype=np.intp), np.empty(m)
    for j, t in enumerate(thresholds):
        levels = _search_levels(t)
        for a in range(0, X.shape[0], m):
            x = X[a:a + m, j]
            p = pos[:len(x)]
            p[:] = 0
            for table, h in levels:  # p: how many thresholds lie below x, to within h
                np.take(table, p, out=probe[:len(x)], mode="clip")
                np.less(probe[:len(x)], x, out=below[:len(x)])
                p += np.multiply(below[:len(x)], h, out=step[:len(x)])
            binned[a:a + m, j] = p
        binned[np.isnan(X[:, j]), j] = missing_bin
    return binned


def _search_levels(thresholds):
    """``[(table, h)]`` of a binary search counting the thresholds below a value, ``h``
    from the largest power of two down to 1: the sorted thresholds padded with +inf
    (never below a value) to ``2**k - 1``, from position ``h - 1`` on."""
    t = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    k = len(t).bit_length()
    padded = np.full((1 << k) - 1, np.inf)
    padded[:len(t)] = t
    return [(padded[(1 << s) - 1:], 1 << s) for s in range(k - 1, -1, -1)]


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


# -- the fit's state at the site (never visible in a result) --------------------
def fit_state(site, context):
    """The fit state (:class:`~._fit_state.FitState`) that a request's ``context``
    names (a reference: :class:`~._fit_state.FitStateLost` if this analyst's site holds
    none of that name) or carries whole (a state kept for its fit, or, without a fit,
    the one state of the requests that name none)."""
    if is_reference(context):
        state = STORE.get(site, context["fit"], create=False)
        if state is None or state.name != context["name"]:
            raise FitStateLost()
        return state
    state = STORE.get(site, context.get("fit"), create=True)
    if state.last is not context:  # a context received whole: digested once
        plain = {k: v for k, v in context.items() if k not in NAMING_KEYS}
        digest = content_digest(plain)
        if digest != state.digest:
            state.reset(plain, context.get("name"), digest)
        state.name, state.last = context.get("name"), context
    return state


def resolve(site, context, model=None):
    """``(state, prepared rows, raw predictions or None)`` of a request: its fit's state,
    the rows binned for its context, and the raw predictions of ``model`` (a message
    of :func:`~._wire.check_model_message`'s forms), the state's caps held."""
    state = fit_state(site, context)
    with state.lock:  # two requests rebuilding one state apply its trees once
        prep = prepared(site, state)
        raw = None if model is None else apply_model(state, prep, model)
        if state.accounted != state.get("model_version"):  # measured as it grows
            STORE.account(state)
            state.accounted = state.get("model_version")
    return state, prep, raw


class _Prepared:
    """A site's rows for one fit context: binned features, target, weights."""

    def __init__(self, site, context):
        self.binned = bin_features(model_features(site, context), context["thresholds"],
                                   context["max_bins"])
        self.n_bins = context["max_bins"] + 1
        # which features have a row in the missing bin here (where they have none, the
        # missing-value direction of a split moves no row: node keys ignore it)
        self.has_missing = (self.binned == context["max_bins"]).any(axis=0)
        self.has_missing_list = self.has_missing.tolist()
        self.y, self.sw = encoded_target(site, context)
        self.loss = make_loss(context["loss"], n_classes=len(context["classes"])
                              if context["classes"] is not None else None,
                              quantile=context["quantile"], weighted=context["weighted"])
        self._root_counts = self._all_rows = self._every_feature = None
        self.ones = {}  # the shared vectors of ones this site's products use (_ones)
        self.bounds = None  # where the rows pool several sites: each one's first row

    @classmethod
    def pooled(cls, parts):
        """The prepared rows of several sites as one site's, in site order (each row's
        bins, target and weight its own site's: the same numbers, computed there)."""
        self = cls.__new__(cls)
        first, sizes = parts[0], [len(p.y) for p in parts]
        self.binned = np.empty((sum(sizes), first.binned.shape[1]),
                               dtype=first.binned.dtype, order="F")  # as bin_features'
        np.concatenate([p.binned for p in parts], out=self.binned)
        self.n_bins, self.loss = first.n_bins, first.loss
        self.has_missing = np.logical_or.reduce([p.has_missing for p in parts])
        self.has_missing_list = self.has_missing.tolist()
        self.y = np.concatenate([p.y for p in parts])
        self.sw = None if first.sw is None else np.concatenate([p.sw for p in parts])
        self._root_counts = self._all_rows = self._every_feature = None
        self.ones = {}
        self.bounds = [0, *accumulate(sizes)]
        return self

    def loss_sums(self, raw):
        """:func:`~._losses.loss_sums` of the rows at ``raw``; of pooled rows, each site's
        added in site order (the server's sum of the sites' replies, bit for bit)."""
        if self.bounds is None:
            return loss_sums(self.loss, self.y, raw, self.sw)
        return add_fields([loss_sums(self.loss, self.y[a:b], raw[a:b],
                                     None if self.sw is None else self.sw[a:b])
                           for a, b in zip(self.bounds[:-1], self.bounds[1:])])

    @functools.cached_property
    def cells(self):
        """Each row's histogram cell per feature (feature-major blocks of bins), int32:
        the column indices of the one-hot matrix of the product (:func:`_histogram_sums`)."""
        return _cells(self.binned, np.arange(self.binned.shape[1]), self.n_bins)

    def every_feature(self, features):
        """Whether ``features`` are all the features, in order (compared as bytes: a
        request's nodes ask for them all but under interaction constraints)."""
        if self._every_feature is None:
            self._every_feature = np.arange(self.binned.shape[1], dtype=np.intp).tobytes()
        return len(features) == self.binned.shape[1] and \
            np.asarray(features, dtype=np.intp).tobytes() == self._every_feature

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


class PooledSite:
    """The sites of this process as one site: their rows one after the other, in site
    order (:mod:`._pooled_sites`). A fit state keeps their prepared rows pooled."""

    def __init__(self, parts):
        self.parts, self.site, self.meta = list(parts), "the sites of this process", {}


def prepared(site, state):
    """The site's rows for the state's context (built once per state)."""
    if "prepared" not in state:
        state["prepared"] = _Prepared.pooled(
            [_Prepared(part, state.context) for part in site.parts]) \
            if isinstance(site, PooledSite) else _Prepared(site, state.context)
    return state["prepared"]


def apply_model(state, prep, model):
    """The raw predictions of ``model`` (a message of
    :func:`~._wire.check_model_message`'s forms) on the site's rows, shape (n,
    n_trees_per_iteration): the held model's, with only the trees it lacks added.

    Equal to scikit-learn's during fit: the baseline plus each tree's leaf value,
    added tree by tree in float64.
    """
    extends, trees = model.get("extends"), model["trees"]
    if extends is not None:  # the trees after the model of digest ``extends``
        if not state.digests or state.digests[-1] != extends or "raw" not in state:
            raise FitStateLost()
        first, new = 0, tree_digests(extends, trees)
    else:  # whole: the trees the held model has are not applied again
        chain = [chain_start(state.name or "", model["baseline"])]
        chain += tree_digests(chain[0], trees)
        held = state.digests
        if held and "raw" in state and len(held) <= len(chain) and \
                chain[len(held) - 1] == held[-1]:
            first, new = len(held) - 1, chain[len(held):]
        else:
            baseline = np.asarray(model["baseline"], dtype=np.float64).reshape(-1)
            state["raw"] = np.zeros((prep.binned.shape[0], len(baseline)), order="F")
            state["raw"] += baseline.reshape(1, -1)
            state.digests, first, new = chain[:1], 0, chain[1:]
            state["model_version"] = state.get("model_version", 0) + 1
    if not new:
        return state["raw"]
    raw, offset, known = state["raw"], state.n_trees - first, state.get("rows", {})
    for t, tree in enumerate(unpack_trees(trees, first=first), start=first + offset):
        _add_leaf_values(raw[:, t % raw.shape[1]], tree, prep, state.context["max_bins"],
                         known)
    state.digests = state.digests + new
    state["model_version"] = state.get("model_version", 0) + 1
    state.pop("rows", None)  # a new iteration: the row sets of its nodes start afresh
    state.pop("rows_held", None)
    return raw


def _add_leaf_values(column, tree, prep, missing_bin, known):
    """Adds to ``column`` each row's leaf value of an unpacked ``tree`` (one float64
    addition per row, as :func:`~._tree.packed_leaf_values`). The rows of a node whose path
    the histogram requests of the tree's iteration met are taken from ``known``."""
    (is_leaf, feature, threshold, missing_left, categorical, bitset_row, bitsets, left, right,
     value) = tree
    if is_leaf[0]:
        column += value[0]
        return
    # the leaves part the rows: each row's leaf value written once, then one addition
    # per row (a scatter and a pass, cheaper than a gather-add-scatter a leaf)
    leaf_value = np.empty(len(column))
    stack = [(0, None, ())]  # (node, its rows (None: every row), its key in ``known``)
    while stack:
        node, rows, key = stack.pop()
        if is_leaf[node]:
            leaf_value[rows] = value[node]
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
    column += leaf_value


def _step_key(prep, split):
    """A split's part of a node key: ``(feature, bin, missing left, categorical, bitset
    bytes)``, the missing-value direction only where a row here is missing."""
    feature, threshold, missing_left, categorical, bitset = split
    feature = int(feature)
    return (feature, int(threshold), bool(missing_left) and bool(prep.has_missing[feature]),
            bool(categorical), None if bitset is None else bitset.tobytes())


def _gradients(cache, prep, raw):
    """The gradients and hessians at ``raw``, the raw predictions of the state
    ``cache`` just computed by :func:`apply_model`."""
    version = cache["model_version"]
    if cache.get("gradients", (None,))[0] != version:  # a new model: new gradients
        cache["gradients"] = (version, gradients(prep.loss, prep.y, raw, prep.sw))
    return cache["gradients"][1]

def _cells(binned, features, n_bins):
    """Each row's histogram cell of each of ``features`` (position-major blocks of
    ``n_bins``), as a C-ordered int32 array (rows flatten without a copy)."""
    cells = np.empty((binned.shape[0], len(features)), dtype=np.int32)
    np.add(binned[:, features], np.arange(len(features), dtype=np.int32) * np.int32(n_bins),
           out=cells)
    return cells


#: the node rows a site keeps, at most this many times its rows (a tree's nodes hold
#: about its depth times the rows)
_MAX_HELD_ROWS = 32


def _cached_rows(cache, prep, steps, missing_bin):
    """The indices (ascending) of a node's rows, None for the root (every row), from
    the rows of its longest known ancestor: a node costs its parent's rows, not all.
    A split's two sides are kept together (the larger one is often split next)."""
    known = cache.setdefault("rows", {})
    missing = prep.has_missing_list
    # _step_key's parts of each step (Python values: unpack_nodes gives them)
    keys = tuple((f, b, bool(m) and missing[f], c,
                  None if bitset is None else bitset.tobytes(), left)
                 for f, b, m, c, bitset, left in steps)
    depth = len(steps)
    while depth and keys[:depth] not in known:
        depth -= 1
    rows = known[keys[:depth]] if depth else None
    n = prep.binned.shape[0]
    for d in range(depth, len(steps)):
        if cache.get("rows_held", 0) > _MAX_HELD_ROWS * n:  # a bound, whatever is asked
            known.clear()
            cache["rows_held"] = 0
        left, right = _step_rows(prep.binned, steps[d], missing_bin, rows)
        parent = keys[:d]
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
    # the arrays' methods: numpy's module functions add a dispatch per call, a third of
    # this step's time on a node of a few hundred rows
    col = binned[:, feature] if rows is None else binned[:, feature].take(rows)
    if categorical:
        left = in_bitset(bitset[None, :], np.zeros(len(col), dtype=np.intp), col)
    else:
        left = col <= threshold
        if missing_left:
            left |= col == missing_bin
    if rows is None:
        return left.nonzero()[0], (~left).nonzero()[0]
    return rows.compress(left), rows.compress(~left)  # faster than rows[left]


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


#: the kept bins of recent contexts' thresholds, and their nodes' cells by features:
#: {id(thresholds): (thresholds, kept, {features' bytes: cells})}
_KEPT = {}
#: the most feature lists whose cells are kept for one context (a fit asks for a few:
#: every feature, or an interaction constraint's)
_MAX_KNOWN_CELLS = 64


def _kept_entry(context):
    thresholds = context["thresholds"]
    held = _KEPT.get(id(thresholds))
    if held is not None and held[0] is thresholds:
        return held
    missing = context["max_bins"]
    kept = []
    for t in thresholds:
        used = min(len(t) + 1, missing)  # bins 0 to len(t); the missing bin apart
        kept.append(None if used == missing else np.append(np.arange(used), missing))
    if len(_KEPT) >= 8:  # a few fits at once, each with its context
        _KEPT.clear()
    held = _KEPT[id(thresholds)] = (thresholds, kept, {})
    return held


def kept_bins(context):
    """Per feature, the bins a row can fall into, or None where that is every bin: bins
    ``0`` to ``len(thresholds)`` (a row's bin counts the thresholds below its value) and
    the missing bin. Public, from the context's thresholds: every other cell of a
    node's histograms is zero at every site, so a masked sum leaves it out (a binary
    feature's cells are 3, not 256)."""
    return _kept_entry(context)[1]


def node_cells(context, features):
    """The cells of a node's histograms over ``features`` that can hold a row (each
    feature's ``max_bins + 1`` cells after the one before, in ``features``' order;
    :func:`kept_bins`), or None where that is every cell: what a site sends when asked
    for them and the server spreads back."""
    _, _, known = _kept_entry(context)
    key = np.asarray(features, dtype=np.intp).tobytes()
    if key not in known:
        if len(known) >= _MAX_KNOWN_CELLS:  # a request's feature lists cannot grow it
            known.clear()
        kept = kept_bins(context)
        n_bins = context["max_bins"] + 1
        known[key] = None if all(kept[f] is None for f in features) else np.concatenate(
            [p * n_bins + (np.arange(n_bins) if kept[f] is None else kept[f])
             for p, f in enumerate(features)])
    return known[key]


def pack_nodes(nodes, n_features):
    """The node requests ``[(tree, key, allowed)]`` as flat arrays (what travels)."""
    steps = [s for _, key, _ in nodes for s in key]
    bitsets = [s[4] for s in steps if s[3]]
    step_start = np.zeros(len(nodes) + 1, dtype=np.int32)
    step_start[1:] = list(accumulate(len(key) for _, key, _ in nodes))
    features = [np.arange(n_features) if allowed is None else np.asarray(allowed)
                for _, _, allowed in nodes]
    feature_start = np.zeros(len(nodes) + 1, dtype=np.int32)
    feature_start[1:] = list(accumulate(len(f) for f in features))
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
    # one conversion to Python values per request, not one per step and node
    flags = np.asarray(request["step_flags"]).tolist()
    pairs = zip(np.asarray(request["step_feature"]).tolist(),
                np.asarray(request["step_bin"]).tolist(), flags)
    if not any(x & 2 for x in flags):  # no categorical step: no bitset
        steps = [(f, b, bool(x & 1), False, None, bool(x & 4)) for f, b, x in pairs]
    else:
        bitsets, at = request["step_bitsets"], -1
        steps = []
        for f, b, x in pairs:
            at += bool(x & 2)
            steps.append((f, b, bool(x & 1), bool(x & 2), bitsets[at] if x & 2 else None,
                          bool(x & 4)))
    step_start = np.asarray(request["step_start"]).tolist()
    feature_start = np.asarray(request["feature_start"]).tolist()
    features = np.asarray(request["features"]).astype(np.intp)
    return [(k, steps[step_start[j]:step_start[j + 1]],
             features[feature_start[j]:feature_start[j + 1]])
            for j, k in enumerate(np.asarray(request["tree"]).tolist())]
