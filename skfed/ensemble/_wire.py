"""The shape of what a boosting fit sends to a site, checked before the site runs it.

A site service runs the boosting site functions of :mod:`._site` on its rows
(declared there, :mod:`skfed.federation.operations`). Their arguments come from the analyst's
machine, so the site reads none of them before it has checked, here, every
key, dtype, shape and range of the dicts a fit sends: the fit's *context*
(columns, categories, bin thresholds, loss, classes), the *model* (baseline
and packed trees, :func:`._tree.pack_trees`), the packed *nodes* of a
histogram or residual request (:func:`._site.pack_nodes`), the *sampling* of
the bin search and its *probes*. A malformed request raises
:class:`WireError`, naming what is wrong (never a value of the site's rows).

Sizes are bounded, so that no request can make the site work without end:
trees per model, nodes per tree, nodes per request, steps per path, cells
per histogram reply, probes per query. A tree must also be one the site can
walk: every internal node's children come after it, inside its tree, so a
row's walk ends at a leaf.

:func:`score_message` is the analyst's side: the fitted model as the site's
score operation takes it (arrays only; no estimator travels).
"""

import numpy as np

#: keys of a fit's context (``BoostingRun._context``)
CONTEXT_KEYS = frozenset({"order", "categorical", "categories", "names", "thresholds",
                          "sketch", "max_bins", "loss", "quantile", "classes",
                          "class_weight", "weighted"})
#: what names a fit's context, kept at the site (:mod:`._model_chain`)
NAMING_KEYS = ("fit", "name")
#: a model a request carries: whole, whole again (from no digest), or the trees after one
MODEL_FORMS = (frozenset({"baseline", "trees"}), frozenset({"extends", "baseline", "trees"}),
               frozenset({"extends", "trees"}))
#: keys of one site's sketch (:func:`._sketch.site_sketch`), and what a service adds
SKETCH_KEYS = frozenset({"rows", "means", "counts"})
SIGNED_SKETCH_KEYS = frozenset({"site", "dataset", "certificate", "signature"})
#: keys of packed trees (:func:`._tree.pack_trees`) and their dtypes
TREE_ARRAYS = {"start": np.int32, "feature": np.int32, "bin": np.uint8, "flags": np.uint8,
               "right": np.int32, "value": np.float64, "bitsets": np.uint32}
#: keys of packed nodes (:func:`._site.pack_nodes`) and their dtypes
NODE_ARRAYS = {"tree": np.int32, "step_start": np.int32, "step_feature": np.int32,
               "step_bin": np.uint8, "step_flags": np.uint8, "step_bitsets": np.uint32,
               "feature_start": np.int32, "features": np.int32}
LOSSES = ("squared_error", "absolute_error", "gamma", "poisson", "quantile", "log_loss")

#: the bounds of one request (each far above what scikit-learn's defaults ask)
MAX_COLUMNS = 1 << 16
MAX_CLASSES = 1024
MAX_TREES = 100_000
MAX_TREE_NODES = 1 << 17
MAX_MODEL_NODES = 1 << 24
MAX_NODES_PER_REQUEST = 4096
MAX_PATH_STEPS = 1024
MAX_STEPS_PER_REQUEST = 1 << 16
#: histogram cells (node x feature x bin) one reply may hold: about 80 MB of sums
MAX_HISTOGRAM_CELLS = 1 << 22
MAX_PROBES_PER_QUERY = 1 << 16
MAX_PROBES = 1 << 22
#: scikit-learn's binning subsample (``_binning.SUBSAMPLE``): the most rows a draw takes
MAX_DRAW = 200_000
MAX_DRAW_POPULATION = 1 << 40
MAX_SITES = 10_000


class WireError(ValueError):
    """A boosting request that is not of the declared form (refused before it runs)."""


def _fail(what):
    raise WireError(what)


def _array(value, name, dtype, ndim=1, *, length=None, most=None):
    """``value`` as declared: an ndarray of exactly ``dtype`` and ``ndim``."""
    if not isinstance(value, np.ndarray) or value.dtype != np.dtype(dtype) or \
            value.ndim != ndim:
        _fail(f"{name} must be a {ndim}-D array of {np.dtype(dtype).name}")
    if length is not None and value.shape[0] != length:
        _fail(f"{name} must hold {length} entries, not {value.shape[0]}")
    if most is not None and value.shape[0] > most:
        _fail(f"{name} holds more than {most} entries")
    return value


def _keys(value, name, required, optional=()):
    if not isinstance(value, dict):
        _fail(f"{name} must be a dict")
    unknown = sorted(set(value) - set(required) - set(optional), key=str)
    if unknown:
        _fail(f"{name} takes no key {str(unknown[0])[:32]!r}")
    missing = sorted(set(required) - set(value))
    if missing:
        _fail(f"{name} lacks its key {missing[0]!r}")


def _integer(value, name, low, high):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or \
            not low <= value <= high:
        _fail(f"{name} must be an integer in [{low}, {high}]")
    return int(value)


def _number(value, name, low=-np.inf, high=np.inf):
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)) or not np.isfinite(value) or \
            not low <= value <= high:
        _fail(f"{name} must be a finite number in [{low}, {high}]")
    return float(value)


def _flag(value, name):
    if not isinstance(value, (bool, np.bool_)):
        _fail(f"{name} must be true or false")
    return bool(value)


def _offsets(value, name):
    """``{start: ...}``: a CSR-like index of ``len - 1`` slices of a flat array."""
    if value.size == 0 or value[0] != 0 or np.any(value[1:] < value[:-1]):
        _fail(f"{name} must start at 0 and never decrease")
    return value


def _increasing(values):
    """Strictly increasing (compared, never subtracted: no overflow, no NaN from inf)."""
    return bool(np.all(values[1:] > values[:-1]))


def _plain_levels(values, name):
    """Sorted distinct levels: numbers, or text (an object array of plain values)."""
    if values.ndim != 1 or values.dtype.kind not in "fiubUO":
        _fail(f"{name} must be a 1-D array of numbers or text")
    if values.dtype.kind == "O" and not all(isinstance(v, (str, int, float, bool))
                                            for v in values.tolist()):
        _fail(f"{name} must hold plain values")
    if values.dtype.kind in "fiub":
        ordered = values.astype(np.int8) if values.dtype.kind == "b" else values
        if (values.dtype.kind == "f" and np.isnan(values).any()) or \
                not _increasing(ordered):
            _fail(f"{name} must be sorted distinct numbers")
    elif len(set(values.tolist())) != len(values):
        _fail(f"{name} must be distinct")


# -- the requests ------------------------------------------------------------
def check_schema_request(request, n_columns):
    """Check a schema request (:func:`._site.site_schema`).

    Parameters
    ----------
    request : dict
        ``{"categorical": "from_dtype" or a boolean mask over the columns,
        "task": "regression" or "classification"}``.
    n_columns : int
        The site's columns.

    Raises
    ------
    WireError
        Naming what is not of the declared form.
    """
    _keys(request, "the schema request", ("categorical", "task"))
    if not isinstance(request["task"], str) or \
            request["task"] not in ("regression", "classification"):
        _fail("the schema request's task must be 'regression' or 'classification'")
    categorical = request["categorical"]
    if not (isinstance(categorical, str) and categorical == "from_dtype"):
        _array(categorical, "the categorical mask", np.bool_, length=n_columns)


def check_context(context, n_columns, *, binned):
    """Check a fit's context (``BoostingRun._context`` of :mod:`._fit`).

    Parameters
    ----------
    context : dict
        Exactly the keys of :data:`CONTEXT_KEYS`: the column order (a
        permutation of the site's columns), the categorical flags, each
        feature's categories (sorted distinct plain values; empty for a
        continuous feature), the column names, the bin thresholds, ``max_bins``
        (2 to 255), the loss, its quantile, the classes and class weights, and
        whether the fit is weighted.
    n_columns : int
        The site's columns.
    binned : bool
        Whether the bin thresholds are set (every request after the bin
        search): one float64 array per feature, increasing, at most
        ``max_bins - 1`` values; a categorical feature's are its codes
        ``0, 1, ..., k - 1``. Before: ``None``.

    Raises
    ------
    WireError
        Naming the first key, dtype, shape or range that is not as declared.
    """
    _keys(context, "the context", CONTEXT_KEYS, NAMING_KEYS)
    if ("fit" in context) != ("name" in context):
        _fail("a context names its fit and its own name together, or neither")
    if "fit" in context:
        check_context_reference({k: context[k] for k in NAMING_KEYS})
    n = n_columns
    if not 0 < n <= MAX_COLUMNS:
        _fail(f"the site's {n} columns are outside what a boosting fit takes")
    order = context["order"]
    if not isinstance(order, np.ndarray) or order.dtype.kind not in "iu" or \
            order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        _fail("the context's order must be a permutation of the site's columns")
    categorical = _array(context["categorical"], "the context's categorical flags", np.bool_,
                         length=n)
    max_bins = _integer(context["max_bins"], "max_bins", 2, 255)
    _check_categories(context["categories"], categorical, max_bins)
    _check_names(context["names"], n)
    _check_loss(context)
    if binned:
        _check_thresholds(context["thresholds"], context["categories"], categorical, max_bins)
    elif context["thresholds"] is not None:
        _fail("the context's thresholds are set only after the bin search")
    if context["sketch"] is not None:
        _check_sketch(context["sketch"], int(np.count_nonzero(~categorical)), max_bins)
    _flag(context["weighted"], "the context's weighted flag")


def _check_sketch(sketch, n_continuous, max_bins):
    """The sites' sketches a context carries (:mod:`._sketch`): each of the declared
    keys, one array of group means (finite, increasing) and counts (at least the
    sketch's rows each) per continuous feature, at most ``max_bins`` groups."""
    _keys(sketch, "the context's sketch", {"rows", "sites"})
    rows = _integer(sketch["rows"], "the sketch's rows", 2, 1 << 40)
    sites = sketch["sites"]
    if not isinstance(sites, list) or not 0 < len(sites) <= MAX_SITES:
        _fail("the sketch's sites must be a list of at most 10,000 sites' sketches")
    for k, entry in enumerate(sites):
        name = f"sketch {k}"
        _keys(entry, name, SKETCH_KEYS, SIGNED_SKETCH_KEYS)
        if _integer(entry["rows"], f"{name}'s rows", 2, 1 << 40) != rows:
            _fail(f"{name} has groups of another size than the sketch's")
        for key in ("means", "counts"):
            if not isinstance(entry[key], list) or len(entry[key]) != n_continuous:
                _fail(f"{name}'s {key} must be a list, one array per continuous feature")
        for j, (means, counts) in enumerate(zip(entry["means"], entry["counts"])):
            _array(means, f"{name}'s means of feature {j}", np.float64, most=max_bins)
            _array(counts, f"{name}'s counts of feature {j}", np.int64, length=means.size)
            if not np.all(np.isfinite(means)) or np.any(np.diff(means) < 0) or \
                    np.any(counts < rows):
                _fail(f"{name}'s groups of feature {j} are not increasing means of at "
                      "least its rows")
        for key in SIGNED_SKETCH_KEYS & set(entry):
            ok = isinstance(entry[key], str) if key in ("site", "dataset") else \
                isinstance(entry[key], (bytes, np.ndarray))
            if not ok:
                _fail(f"{name}'s {key} is not of its declared type")


def _check_categories(categories, categorical, max_bins):
    if not isinstance(categories, list) or len(categories) != len(categorical):
        _fail("the context's categories must be a list, one entry per feature")
    for j, (levels, is_cat) in enumerate(zip(categories, categorical)):
        name = f"the categories of feature {j}"
        if not isinstance(levels, np.ndarray):
            _fail(f"{name} must be an array")
        if not is_cat and levels.size:
            _fail(f"{name} must be empty (it is not categorical)")
        if is_cat:
            _plain_levels(levels, name)
            if levels.size > max_bins:
                _fail(f"{name} are more than max_bins")


def _check_names(names, n_columns):
    if names is None:
        return
    if not isinstance(names, list) or len(names) != n_columns or not all(
            isinstance(c, str) and len(c) <= 256 for c in names):
        _fail("the context's names must be a list of column names, one per column")


def _check_loss(context):
    loss, classes = context["loss"], context["classes"]
    if not isinstance(loss, str) or loss not in LOSSES:
        _fail(f"the context's loss must be one of {', '.join(LOSSES)}")
    if (loss == "log_loss") != (classes is not None):
        _fail("a classifier's context has classes and the log loss; a regressor's neither")
    if loss == "quantile":
        _number(context["quantile"], "the context's quantile", 0.0, 1.0)
    elif context["quantile"] is not None:
        _fail("the context's quantile is for loss='quantile' only")
    if classes is None:
        if context["class_weight"] is not None:
            _fail("a regressor's context has no class weights")
        return
    if not isinstance(classes, np.ndarray) or not 1 <= classes.size <= MAX_CLASSES:
        _fail(f"the context's classes must be an array of 1 to {MAX_CLASSES} labels")
    _plain_levels(classes, "the context's classes")
    if context["class_weight"] is not None:
        weights = _array(context["class_weight"], "the class weights", np.float64,
                         length=classes.size)
        if not np.all(np.isfinite(weights)) or np.any(weights < 0):
            _fail("the class weights must be finite and non-negative")


def _check_thresholds(thresholds, categories, categorical, max_bins):
    if not isinstance(thresholds, list) or len(thresholds) != len(categorical):
        _fail("the context's thresholds must be a list, one array per feature")
    for j, (t, is_cat) in enumerate(zip(thresholds, categorical)):
        name = f"the thresholds of feature {j}"
        _array(t, name, np.float64, most=max_bins - 1 if not is_cat else max_bins)
        if is_cat:  # a categorical feature's bins are its codes, never values
            if not np.array_equal(t, np.arange(len(categories[j]), dtype=np.float64)):
                _fail(f"{name} must be its category codes")
        elif np.any(np.isnan(t)) or not _increasing(t):
            _fail(f"{name} must be increasing numbers")


def n_trees_per_iteration(context):
    """1, or the number of classes beyond two."""
    classes = context["classes"]
    return 1 if classes is None or classes.size <= 2 else int(classes.size)


def _hex(value, name, length):
    if not isinstance(value, str) or len(value) != length or \
            any(c not in "0123456789abcdef" for c in value):
        _fail(f"{name} must be {length} lower-case hexadecimal digits")
    return value


def is_reference(context):
    """Whether a request's context is a reference to one the site holds."""
    return isinstance(context, dict) and set(context) == set(NAMING_KEYS)


def check_context_reference(reference):
    """Check ``{"fit": 32 hex digits, "name": 64 hex digits}``: a context by its name."""
    _keys(reference, "the context's reference", NAMING_KEYS)
    _hex(reference["fit"], "the fit's identifier", 32)
    _hex(reference["name"], "the context's name", 64)


def check_model_message(model, context):
    """Check a model as a request carries it: ``{"baseline", "trees"}`` (whole),
    ``{"extends": None, "baseline", "trees"}`` (whole, sent again), or
    ``{"extends": digest, "trees"}`` (the trees after the model of that digest).

    Returns
    -------
    extends : str or None
        The digest the trees extend (``None``: whole).
    n_trees : int
        The trees the message carries.

    Raises
    ------
    WireError
    """
    form = frozenset(model) if isinstance(model, dict) else None
    if form not in MODEL_FORMS:
        _fail("the model must be {baseline, trees}, {extends: None, baseline, trees} or "
              "{extends: digest, trees}")
    extends = model.get("extends")
    if "baseline" in form:
        if extends is not None:
            _fail("a whole model extends no digest")
        return None, check_model({"baseline": model["baseline"], "trees": model["trees"]},
                                 context)
    return _hex(extends, "the digest a model extends", 64), check_trees(model["trees"],
                                                                          context)


def check_model(model, context):
    """Check a model: its baseline and its packed trees (:func:`._tree.pack_trees`).

    Parameters
    ----------
    model : dict
        ``{"baseline": float64 array of one value per tree of an iteration,
        "trees": the packed trees}``. At most :data:`MAX_TREES` trees of 1 to
        :data:`MAX_TREE_NODES` nodes (:data:`MAX_MODEL_NODES` in all), each
        node's arrays of the declared dtype, finite values, an internal node's
        children after it inside its tree and its feature one of the
        context's, one bitset of 8 words per categorical split.
    context : dict
        The fit's context, already checked (:func:`check_context`).

    Returns
    -------
    n_trees : int

    Raises
    ------
    WireError
    """
    _keys(model, "the model", ("baseline", "trees"))
    baseline = _array(model["baseline"], "the baseline", np.float64,
                      length=n_trees_per_iteration(context))
    if not np.all(np.isfinite(baseline)):
        _fail("the baseline must be finite")
    return check_trees(model["trees"], context)


def check_trees(trees, context):
    """Check packed trees (:func:`._tree.pack_trees`; see :func:`check_model`); returns
    their number (0 or more)."""
    _keys(trees, "the trees", TREE_ARRAYS)
    start = _offsets(_array(trees["start"], "the trees' starts", np.int32,
                            most=MAX_TREES + 1), "the trees' starts")
    n_nodes = int(start[-1])
    if n_nodes > MAX_MODEL_NODES:
        _fail(f"the model holds more than {MAX_MODEL_NODES} nodes")
    sizes = np.diff(start)
    if np.any(sizes < 1) or np.any(sizes > MAX_TREE_NODES):
        _fail(f"every tree must hold 1 to {MAX_TREE_NODES} nodes")
    for key, dtype in TREE_ARRAYS.items():
        if key not in ("start", "bitsets"):
            _array(trees[key], f"the trees' {key}", dtype, length=n_nodes)
    _check_walk(trees, start, sizes, len(context["order"]))
    if not np.all(np.isfinite(trees["value"])):
        _fail("the trees' values must be finite")
    return len(sizes)


def _check_walk(trees, start, sizes, n_features):
    """Every internal node's children come after it in its tree (a walk ends at a
    leaf); its feature is a column; a categorical split has its bitset."""
    flags = trees["flags"]
    if np.any(flags > 7):
        _fail("the trees' flags take three bits")
    tree_of = np.repeat(np.arange(len(sizes)), sizes)
    local = np.arange(len(flags)) - start[:-1][tree_of]
    size = sizes[tree_of]
    internal = (flags & 1) == 0
    right = trees["right"].astype(np.int64)
    bad = internal & ((local + 1 >= size) | (right <= local + 1) | (right >= size))
    if bad.any():
        _fail("a tree's internal node must have both children after it, inside the tree")
    feature = trees["feature"]
    if np.any(internal & ((feature < 0) | (feature >= n_features))):
        _fail("a tree splits on a feature the context does not have")
    n_categorical = int(np.count_nonzero(flags & 4))
    _array(trees["bitsets"], "the trees' bitsets", np.uint32, 2, length=n_categorical)
    if trees["bitsets"].shape[1] != 8:
        _fail("a bitset is 8 words")


def check_nodes(nodes, context, *, with_loss):
    """Check packed nodes (:func:`._site.pack_nodes`).

    Parameters
    ----------
    nodes : dict
        The arrays of :data:`NODE_ARRAYS`: per node its tree (one of the
        iteration's), its path (at most :data:`MAX_PATH_STEPS` steps, each on
        one of the context's features, a categorical step with its bitset;
        :data:`MAX_STEPS_PER_REQUEST` in all) and its features (one or more,
        increasing); at most :data:`MAX_NODES_PER_REQUEST` nodes and
        :data:`MAX_HISTOGRAM_CELLS` cells in the reply.
    context : dict
        The fit's context, already checked (:func:`check_context`).
    with_loss : bool
        A histogram request (it also has the boolean ``with_loss``, and may have the
        boolean ``kept_cells``: the reply in the cells a row can be in only), else the
        leaves of a residual request.

    Returns
    -------
    n_nodes : int

    Raises
    ------
    WireError
    """
    _keys(nodes, "the node request", tuple(NODE_ARRAYS) + (("with_loss",) if with_loss else ()),
          optional=("kept_cells",) if with_loss else ())
    if with_loss:
        _flag(nodes["with_loss"], "with_loss")
        if "kept_cells" in nodes:
            _flag(nodes["kept_cells"], "kept_cells")
    tree = _array(nodes["tree"], "the nodes' trees", np.int32, most=MAX_NODES_PER_REQUEST)
    n = tree.size
    if n == 0:
        _fail("a node request names at least one node")
    if np.any(tree < 0) or np.any(tree >= n_trees_per_iteration(context)):
        _fail("a node belongs to one of the iteration's trees")
    n_features = len(context["order"])
    steps = _slices(nodes, "step_start", "step_feature", n, MAX_PATH_STEPS)
    if steps > MAX_STEPS_PER_REQUEST:
        _fail(f"a request's paths hold more than {MAX_STEPS_PER_REQUEST} steps in all")
    for key in ("step_bin", "step_flags"):
        _array(nodes[key], f"the nodes' {key}", NODE_ARRAYS[key], length=steps)
    feature = nodes["step_feature"]
    if np.any((feature < 0) | (feature >= n_features)):
        _fail("a node's path splits on a feature the context does not have")
    if np.any(nodes["step_flags"] > 7):
        _fail("a step's flags take three bits")
    n_categorical = int(np.count_nonzero(nodes["step_flags"] & 2))
    bitsets = _array(nodes["step_bitsets"], "the steps' bitsets", np.uint32, 2,
                     length=n_categorical)
    if bitsets.shape[1] != 8:
        _fail("a bitset is 8 words")
    total = _slices(nodes, "feature_start", "features", n, n_features)
    if total * (context["max_bins"] + 1) > MAX_HISTOGRAM_CELLS:
        _fail(f"a reply would hold more than {MAX_HISTOGRAM_CELLS} histogram cells")
    _check_feature_lists(nodes["features"], nodes["feature_start"], n_features)
    return n


def _slices(nodes, start_key, values_key, n, most_each):
    """The start index ``nodes[start_key]`` of the flat ``nodes[values_key]``: one slice
    per node of at most ``most_each`` entries; returns the total length."""
    start = _offsets(_array(nodes[start_key], f"the nodes' {start_key}", np.int32,
                            length=n + 1), f"the nodes' {start_key}")
    if np.any(np.diff(start) > most_each):
        _fail(f"a node's {values_key} hold more than {most_each} entries")
    total = int(start[-1])
    _array(nodes[values_key], f"the nodes' {values_key}", NODE_ARRAYS[values_key],
           length=total)
    return total


def _check_feature_lists(features, start, n_features):
    """Each node's features: one or more distinct columns, increasing."""
    if np.any(np.diff(start) < 1):
        _fail("a node's histogram needs at least one feature")
    if np.any((features < 0) | (features >= n_features)):
        _fail("a node asks for a feature the context does not have")
    rising = features[1:] > features[:-1]
    rising[start[1:-1] - 1] = True  # a new node may start lower
    if not rising.all():
        _fail("a node's features must be increasing")


def check_probes(probes, starts, n_queries):
    """Check the probes of an order-statistic search (:func:`._selection.pack_probes`).

    Parameters
    ----------
    probes : ndarray of int64
        The probe keys, increasing within each query; at least one, at most
        :data:`MAX_PROBES` in all and :data:`MAX_PROBES_PER_QUERY` per query.
    starts : ndarray of int64
        Each query's first probe, then the number of probes.
    n_queries : int

    Raises
    ------
    WireError
    """
    _array(probes, "the probes", np.int64, most=MAX_PROBES)
    _offsets(_array(starts, "the probes' starts", np.int64, length=n_queries + 1),
             "the probes' starts")
    if int(starts[-1]) != probes.size or probes.size == 0:
        _fail("the probes' starts must cover the probes (at least one)")
    if np.any(np.diff(starts) > MAX_PROBES_PER_QUERY):
        _fail(f"a query takes at most {MAX_PROBES_PER_QUERY} probes")
    rising = probes[1:] > probes[:-1]  # compared, not subtracted: keys span int64
    inner = starts[1:-1]
    rising[inner[(inner > 0) & (inner < probes.size)] - 1] = True
    if not rising.all():
        _fail("a query's probes must be increasing")


def check_sampling(sampling, context, site, n_rows):
    """Check how the bin search counts a site's rows (:func:`._site.site_bin_counts`).

    Parameters
    ----------
    sampling : dict
        ``mode`` (``"all"``, ``"weighted"``, or ``"draw"``: scikit-learn's
        subsample replayed, with its public seed, population, size of at most
        :data:`MAX_DRAW` rows, and this site's offset) and the continuous
        features asked about (increasing).
    context : dict
        The fit's context, already checked (:func:`check_context`).
    site : str
        This site's label (its offset must be given).
    n_rows : int
        This site's rows.

    Returns
    -------
    features : ndarray of int32

    Raises
    ------
    WireError
    """
    mode = sampling.get("mode") if isinstance(sampling, dict) else None
    draw = ("seed", "n_total", "size", "offsets")
    weights = ("weight_total", "p_total", "weight_offsets")
    if mode in ("all", "weighted"):
        _keys(sampling, "the sampling", ("mode", "features"))
    elif mode == "draw":
        _keys(sampling, "the sampling", ("mode", "features") + draw, weights)
        _check_draw(sampling, site, n_rows)
    else:
        _fail("the sampling's mode must be 'all', 'weighted' or 'draw'")
    features = _array(sampling["features"], "the sampled features", np.int32,
                      most=len(context["order"]))
    if features.size == 0 or np.any((features < 0) | (features >= len(context["order"]))) \
            or not _increasing(features):
        _fail("the sampled features must be increasing features of the context")
    if np.any(context["categorical"][features]):
        _fail("the bin search is for continuous features only")
    return features


def _check_draw(sampling, site, n_rows):
    """scikit-learn's subsample replayed at the site: public numbers, bounded."""
    _integer(sampling["seed"], "the draw's seed", 0, 2**32 - 1)
    n_total = _integer(sampling["n_total"], "the draw's population", 1, MAX_DRAW_POPULATION)
    _integer(sampling["size"], "the draw's size", 1, MAX_DRAW)
    offsets = sampling["offsets"]
    if not isinstance(offsets, dict) or len(offsets) > MAX_SITES or str(site) not in offsets:
        _fail("the draw's offsets must name this site")
    _integer(offsets[str(site)], "this site's offset", 0, max(0, n_total - n_rows))
    if ("weight_total" in sampling) != ("weight_offsets" in sampling) or \
            ("weight_total" in sampling) != ("p_total" in sampling):
        _fail("a weighted draw takes weight_total, p_total and weight_offsets")
    if "weight_total" in sampling:
        _number(sampling["weight_total"], "the draw's weight total", 1e-300)
        _number(sampling["p_total"], "the draw's probability total", 1e-300)
        share = sampling["weight_offsets"]
        if not isinstance(share, dict) or len(share) > MAX_SITES or str(site) not in share:
            _fail("the draw's weight offsets must name this site")
        _number(share[str(site)], "this site's weight offset", 0.0)


def check_score_message(message):
    """The model of a score at the site: ``{"context", "model"}`` and nothing else (each
    then checked by :func:`check_context` and :func:`check_model`)."""
    _keys(message, "the model to score", ("context", "model"))
    return message["context"], message["model"]


def score_message(estimator):
    """A fitted boosting estimator as the site's score operation takes it.

    Parameters
    ----------
    estimator : FedHistGradientBoostingRegressor or FedHistGradientBoostingClassifier
        Fitted.

    Returns
    -------
    message : dict
        ``{"context": its context (columns, categories, bin thresholds, loss,
        classes), "model": {"baseline", "trees"}}``: arrays and plain values
        only.
    """
    from sklearn.utils.validation import check_is_fitted

    from ._tree import pack_trees

    check_is_fitted(estimator, "_predictors")
    trees = [tree for iteration in estimator._predictors for tree in iteration]
    return {"context": dict(estimator._context),
            "model": {"baseline": np.asarray(estimator._baseline_prediction,
                                             dtype=np.float64).ravel(),
                      "trees": pack_trees(trees)}}
