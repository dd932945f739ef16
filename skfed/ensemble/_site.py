"""What runs at a site during a federated boosting fit.

Every function here takes one site's :class:`~skfed.data.SiteData` and the
request's arguments, and returns sums or counts over the site's rows (never a
row): a schema and label sets (:func:`site_schema`, the one per-site
release), totals (:func:`site_totals`), counts below probe values for the bin
thresholds (:func:`site_bin_counts`), node histograms
(:func:`site_histograms`) and loss sums (:func:`site_loss`).

A request names the fit's *context* (column order, categories, bin thresholds,
loss, classes) and the *model* it extends (a chain of digests, :mod:`._model_chain`)
and carries only what the site lacks; the site keeps the fit's binned rows, raw
predictions and gradients between requests in the fit's state
(:mod:`skfed.ensemble._fit_state`, :mod:`skfed.ensemble._site_rows`), which never
changes an answer. A node's histograms are computed by
scikit-learn's own histogram kernel where it is there, else as one sparse
product of the nodes' rows (:mod:`skfed.ensemble._histograms`): the same sums
to the bit.

Each function is declared as a site operation with the rules a site service
applies to it before any row is read (:mod:`skfed.ensemble._site_rules`).
"""

import numpy as np

from ..data.site import SiteError, weighted_rows
from ..federation import dominance, whole_counts
from ..privacy.masked_sums import declare_row_bounds
from ..federation.combine import tree_combine
from ..federation.whole_counts import on_partitions
from ..federation.operations import SUMS, Arg, Refused, check_deadline, site_operation
from ._histograms import _joined, _node_histograms
from ._losses import row_bounds_of
from ._selection import SortedValues, count_below
from ._model_chain import content_digest
from ._site_continued import continued_histograms
from ._site_rows import (_cached_rows, _column, _gradients, _is_category_dtype, _model_column,
                         _present_levels, bin_features, encoded_target, fit_state,
                         missing_counts, model_features, node_cells, node_rows, pack_nodes,
                         resolve, unpack_nodes)
from ._site_rules import (bin_count_rules, context_rules, histogram_rules, loss_rules,
                          residual_rules, schema_reply, schema_rules, score_rules,
                          sketch_reply, sketch_rules)
from ._wire import score_message

#: what node histograms in the clear reveal (their declaration's finer sums)
FINER = ("per node and feature, per bin: sums of a few rows' gradients (a cell of one row "
         "is that row's gradient, and so its target under squared error)")


def _value(value):
    """A boosting request's part, checked by :mod:`skfed.ensemble._wire` against the
    site's rows (the operation's checks)."""
    return None


_CONTEXT = Arg("context", "value", check=_value)
_MODEL = Arg("model", "value", check=_value)

__all__ = ["bin_features", "model_features", "pack_nodes", "site_bin_counts",
           "site_histograms", "site_loss", "site_output", "site_residual_counts",
           "site_schema", "site_score_terms", "site_totals"]


def _union(parts):
    """The sorted distinct values of ``parts`` (each sorted and distinct, as
    :func:`~._site_rows._present_levels` and ``np.unique`` give them)."""
    values = np.concatenate(parts)
    if values.dtype.kind == "O":
        return np.asarray(sorted(set(values.tolist())), dtype=object)
    return np.unique(values)


def combine_schema(replies):
    """The schemas of a dataset's partitions as the schema of all its rows: rows and
    weights added, each categorical column's levels and the classes their union, the
    class counts and weight sums added class by class (a partition's classes are among
    the union)."""
    first = replies[0]
    for reply in replies[1:]:
        if reply["n_columns"] != first["n_columns"] or not np.array_equal(
                reply["category_dtype"], first["category_dtype"]):
            raise ValueError("partitions replied with different columns")
    out = {"n_samples": sum(r["n_samples"] for r in replies), "n_columns": first["n_columns"],
           "category_dtype": first["category_dtype"],
           "levels": [None if levels is None else _union([r["levels"][j] for r in replies])
                      for j, levels in enumerate(first["levels"])],
           "weight_sum": tree_combine("sum", [r["weight_sum"] for r in replies])}
    if "classes" in first:
        out["classes"] = _union([r["classes"] for r in replies])
        counts = np.zeros(len(out["classes"]), dtype=first["class_counts"].dtype)
        weights = np.zeros(len(out["classes"]))
        for reply in replies:
            at = np.searchsorted(out["classes"], reply["classes"])
            counts[at] += reply["class_counts"]
            weights[at] += reply["class_weight_sums"]
        out.update(class_counts=counts, class_weight_sums=weights)
    return out


# -- the requests ------------------------------------------------------------
@site_operation(
    "boosting.schema", releases=weighted_rows, keeps_rows=True, combine=combine_schema,
    describes="the row count; per categorical column the levels the site holds, for a "
              "classifier the classes with their counts (each >= min_level_count); the "
              "weight sums (over all rows and per class) where the rows carry a weight "
              "column, under the dominance rule",
    arguments=(Arg("request", "value", check=_value),), checks=(on_partitions(schema_rules),),
    reply=schema_reply, counts=lambda out: [out["n_samples"]] + (
        [out["class_counts"]] if "class_counts" in out else []))
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
    if site.sample_weight is not None:  # sums of a weight column: audited as data.summary's
        dominance.check_rows(sw, "the weight sum")
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
        if site.sample_weight is not None:
            dominance.check_groups(sw, index.ravel(), len(out["classes"]),
                                   "a class's weight sum")
        out["class_weight_sums"] = np.bincount(index.ravel(), weights=sw,
                                               minlength=len(out["classes"]))
    elif y.dtype.kind not in "fiub":
        raise SiteError(site.site, f"the target is not numeric (dtype {y.dtype}).")
    return out


@site_operation(
    "boosting.totals", releases=SUMS, maskable=True, keeps_rows=True, combine="sum",
    describes="per feature the count of missing values; the row count, weight sum and the "
              "target's (weighted) sums, or the weight of each class, under the dominance "
              "rule",
    arguments=(_CONTEXT,), checks=(on_partitions(context_rules),))
def site_totals(site, context):
    """Pooled totals: missing values per feature, rows, weights, and the target's
    sums (``wy``, ``y``) or per-class weights (``class_w``)."""
    context = fit_state(site, context).context
    missing = missing_counts(site, context)
    y, sw = encoded_target(site, context)
    w = np.ones(len(y)) if sw is None else sw
    # numpy's pairwise sums (on an engine: of all the partitions' terms, as one array)
    out = {"missing": missing, "n": len(y),
           "w": whole_counts.pairwise_sum("w", w)}
    if context["classes"] is not None:
        codes = y.astype(np.intp)
        dominance.check_rows(np.eye(len(context["classes"]))[codes] * w[:, None],
                             "a class's weight")
        out["class_w"] = np.bincount(codes, weights=w, minlength=len(context["classes"]))
        return out
    loss = context["loss"]
    if loss == "gamma" and np.any(y <= 0):
        raise SiteError(site.site, "loss='gamma' requires strictly positive y.")
    if loss == "poisson" and np.any(y < 0):
        raise SiteError(site.site, "loss='poisson' requires non-negative y.")
    dominance.check_rows(np.column_stack([w, w * y, y]), "a boosting fit's totals")
    out.update(wy=whole_counts.pairwise_sum("wy", np.multiply(y, w)),
               y=whole_counts.pairwise_sum("y", y))
    return out


def _multiplicity(site, context, sampling):
    """How often each row counts for the thresholds, and its weight (or None)."""
    n = site.n_samples
    if sampling["mode"] == "draw":  # scikit-learn's subsample, replayed at the site
        # a partition of a dataset on an engine: its rows' place among the site's
        offset = sampling["offsets"][str(site.site)] + site.meta.get("position", 0)
        rng = np.random.RandomState(sampling["seed"])
        if sampling.get("weight_total") is None:
            draws = rng.choice(sampling["n_total"], sampling["size"], replace=True)
            mine = draws[(draws >= offset) & (draws < offset + n)] - offset
        elif "position" in site.meta:  # the cumulative weights run across partitions
            raise Refused("engine", "scikit-learn's weighted 200,000-row draw is not served "
                                    "on a dataset on an engine (its cumulative weights run "
                                    "across partitions)", public=True)
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


#: the share of a sketch group's absolute total its ``rows - 1`` largest values may hold
#: (the dominance rule's default): a group past it is merged with its neighbour
SKETCH_DOMINANCE = 0.95


def _undominated(values, sizes, rows):
    """Group sizes merged, neighbour into neighbour, until in no group the ``rows - 1``
    largest absolute values hold more than :data:`SKETCH_DOMINANCE` of its absolute
    total (a mean of nine zeros and a five would give that five); ``[]`` if even all the
    values together are dominated."""
    sizes, i = list(sizes), 0
    while i < len(sizes):
        start = sum(sizes[:i])
        group = np.sort(np.abs(values[start:start + sizes[i]]))[::-1]
        total = group.sum()
        if total > 0 and group[:rows - 1].sum() > SKETCH_DOMINANCE * total:
            if len(sizes) == 1:
                return []
            j = i + 1 if i + 1 < len(sizes) else i - 1
            sizes[min(i, j)] += sizes[max(i, j)]
            del sizes[max(i, j)]
            i = min(i, j)
            continue
        i += 1
    return sizes


@site_operation(
    "boosting.sketch", releases=SUMS, keeps_rows=True,
    describes="per continuous feature the means and row counts of consecutive groups of "
              "min_rows or more of the site's values in value order (at most max_bins "
              "groups; never a row's value), under the dominance rule, signed with the "
              "site's certificate",
    arguments=(_CONTEXT, Arg("rows", "int", low=1, high=1 << 30)),
    checks=(sketch_rules,), reply=sketch_reply)
def site_sketch(site, context, rows):
    """The site's sketch: per continuous feature (model order), the means and counts of
    consecutive groups of at least ``rows`` of its non-missing values, at most
    ``max_bins`` groups (zero-weight rows left out, as scikit-learn leaves them out of
    its bins), a group that a few values dominate merged with its neighbour
    (:func:`_undominated`)."""
    context = fit_state(site, context).context
    X = model_features(site, context)
    _, sw = encoded_target(site, context)
    means, counts = [], []
    for f in np.flatnonzero(~np.asarray(context["categorical"], dtype=bool)):
        x = X[:, f]
        keep = ~np.isnan(x) if sw is None else ~np.isnan(x) & (sw != 0)
        values = np.sort(x[keep])
        groups = min(len(values) // int(rows), int(context["max_bins"]))
        if groups == 0:
            means.append(np.empty(0))
            counts.append(np.empty(0, dtype=np.int64))
            continue
        sizes = np.full(groups, len(values) // groups, dtype=np.int64)
        sizes[:len(values) % groups] += 1  # numpy's array_split: the first groups larger
        sizes = np.asarray(_undominated(values, sizes, int(rows)), dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        for a, n in zip(starts, sizes):  # each group's mean, under the site's own rule
            dominance.check_rows(values[a:a + n], "a sketch's group")
        means.append(np.add.reduceat(values, starts) / sizes if sizes.size else np.empty(0))
        counts.append(sizes)
    if dominance.active() is not None and not means:
        dominance.check_rows(np.zeros(0), "a sketch")  # no continuous feature: nothing
    return {"rows": int(rows), "means": means, "counts": counts}


@site_operation(
    "boosting.bin_counts", releases=SUMS, maskable=True, keeps_rows=True, combine="sum",
    requires="allow_exact_quantiles: the exact bin thresholds are the pooled quantiles or "
             "distinct values of each feature, found from counts at values the analyst "
             "sends (binning=min_rows bins at the sites' sketches instead)",
    describes="per probe of a continuous feature the count (and weight) of the site's "
              "values at or below it, and the sums of its values between probes: the exact "
              "bin search, single rows' values (only with allow_exact_quantiles)",
    arguments=(_CONTEXT, Arg("sampling", "value", check=_value),
               Arg("probes", "floats", most=1 << 22), Arg("starts", "ints", most=1 << 17)),
    checks=(on_partitions(bin_count_rules),))
def site_bin_counts(site, context, sampling, probes, starts):
    """Counts (and weights) at or below each probe, per continuous feature, and
    the sums of values between probes (:func:`~._selection.count_below`)."""
    features = _sorted_features(site, fit_state(site, context), sampling)
    parts = []
    for q in range(len(sampling["features"])):
        a, b = int(starts[q]), int(starts[q + 1])
        if a == b:
            continue
        parts.append(features[q].count_below(np.asarray(probes[a:b])))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _sorted_features(site, state, sampling):
    """The site's values of each feature of ``sampling``, sorted once for all the
    rounds of the threshold search (kept in the fit's state by the sampling's digest)."""
    cache, context = state, state.context
    digest = content_digest(sampling)
    if cache.get("bin_counts", (None,))[0] != digest:
        cache.pop("bin_counts", None)  # free the previous search's arrays first
        m, sw = _multiplicity(site, context, sampling)
        rows = None
        if not (m > 0).all():  # a draw counts a few rows: those alone
            rows = np.flatnonzero(m)
            m, sw = m[rows], None if sw is None else sw[rows]
        features = []
        for f in sampling["features"]:  # the searched columns alone, no copy of the rest
            x = _model_column(site, context, int(f))  # float64 already
            if rows is not None:
                x = np.take(x, rows)
            ok = ~np.isnan(x)
            features.append(SortedValues(x[ok], m[ok], None if sw is None else sw[ok]))
        cache["bin_counts"] = (digest, features)
    return cache["bin_counts"][1]


@site_operation(
    "boosting.residual_counts", releases=SUMS, maskable=True, keeps_rows=True,
    combine="sum",
    requires="allow_exact_quantiles: a leaf's quantile of the residuals y - raw is found "
             "from counts at values the analyst sends",
    describes="the same counts and sums for the residuals y - raw of each requested leaf "
              "(each leaf and its sibling 0 or >= min_rows rows here unless masked; only "
              "with allow_exact_quantiles)",
    arguments=(_CONTEXT, Arg("model", "value", nullable=True, check=_value),
               Arg("paths", "value", check=_value), Arg("probes", "floats", most=1 << 22),
               Arg("starts", "ints", most=1 << 17)),
    checks=(on_partitions(residual_rules),))
def site_residual_counts(site, context, model, paths, probes, starts):
    """Counts (and weights) of the residuals ``y - raw`` at or below each probe, per
    node of ``paths`` (packed like :func:`pack_nodes`; ``model=None``: of ``y``)."""
    state, prep, raw = resolve(site, context, model)
    context = state.context
    values = prep.y if model is None else prep.y - raw[:, 0]
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


@site_operation(
    "boosting.histograms", releases=SUMS, maskable=True, keeps_rows=True, finer=FINER,
    combine="sum",
    describes="per requested node and feature, per bin: the sums of the gradients and "
              "hessians and the row count (each node and its sibling 0 or >= min_rows rows "
              "here unless masked; bins at continuous thresholds only at the sites' signed "
              "sketches or with allow_exact_quantiles; asked for, as a masked sum asks, "
              "only the bins a row can be in); optionally the loss sums",
    arguments=(_CONTEXT, _MODEL, Arg("request", "value", check=_value)),
    checks=(on_partitions(histogram_rules),))
def site_histograms(site, context, model, request):
    """Per requested node and allowed feature, per bin: the sums of gradients (and
    hessians, unless constant) and the row counts; with ``request["with_loss"]``
    also the loss sums of the current model (:func:`site_loss`)."""
    cache, prep, raw = resolve(site, context, model)
    context = cache.context
    grad, hess = _gradients(cache, prep, raw)
    # on a partition of an engine: whether its sums add to the in-memory site's bits
    whole_counts.float_terms(grad)
    if hess is not None:
        whole_counts.float_terms(hess)
    # a masked reply's limbs from the loss's public bounds (none under weights)
    declare_row_bounds(**row_bounds_of(prep.loss, prep.sw is not None))
    n_bins = context["max_bins"] + 1
    # the nodes of a tree that need the same features are computed together
    groups, nodes = {}, unpack_nodes(request)
    for j, (k, steps, features) in enumerate(nodes):
        rows = _cached_rows(cache, prep, steps, context["max_bins"])
        groups.setdefault((k, features.tobytes()), []).append((j, rows))
    sums = [None] * len(nodes)
    for (k, _), members in groups.items():
        check_deadline()
        features = nodes[members[0][0]][2]
        per_node = _node_histograms(cache, prep, [rows for _, rows in members], features,
                                    grad[:, k], None if hess is None else hess[:, k], k,
                                    n_bins)
        # asked for (a masked sum's words): the cells a row can be in only (all: None)
        cells = node_cells(context, features) if request.get("kept_cells") else None
        for (j, _), node_sums in zip(members, per_node):
            sums[j] = node_sums if cells is None else tuple(
                None if part is None else part.reshape(-1)[cells] for part in node_sums)
    out = {"gradients": _joined([s[0] for s in sums], np.float64),
           "counts": _joined([s[2] for s in sums], np.uint32)}
    if hess is not None:
        out["hessians"] = _joined([s[1] for s in sums], np.float64)
    if request["with_loss"]:
        out.update(prep.loss_sums(raw))
    return out


# where partition sums would round differently, an engine continues them in row order
site_histograms.continued = continued_histograms


@site_operation(
    "boosting.loss", releases=SUMS, maskable=True, keeps_rows=True, combine="sum",
    describes="two numbers: the weighted loss of the broadcast model over the site's rows "
              "and the weight sum, under the dominance rule",
    arguments=(_CONTEXT, _MODEL), checks=(on_partitions(loss_rules),))
def site_loss(site, context, model):
    """``{"loss": sum w * loss, "weight": sum w}`` of the model on the site's rows."""
    _, prep, raw = resolve(site, context, model)
    return prep.loss_sums(raw)


# -- predictions and scores where the rows are -------------------------------
def site_output(site, estimator, method):
    """``estimator.<method>(X)`` on the site's rows (the rows stay at the site)."""
    return getattr(estimator, method)(site.X)


@site_operation(
    "boosting.score", releases=SUMS, maskable=True, keeps_rows=True, combine="sum",
    describes="four weighted sums (regression) or two (classification) of the model's "
              "predictions at the site, under the dominance rule: never a prediction",
    arguments=(Arg("estimator", "value", check=_value),), checks=(on_partitions(score_rules),),
    packer=lambda estimator: {"estimator": score_message(estimator)})
def site_score_terms(site, estimator):
    """The sums :func:`skfed.data.site.combine_scores` pools into R2 or accuracy (numbers
    only, so that a masked sum carries them: their keys say which score)."""
    sw = site.weights()
    pred = estimator.predict(site.X)
    y = np.asarray(site.y)
    if hasattr(estimator, "classes_"):
        dominance.check_rows(np.column_stack([sw, sw * (pred == y)]), "a score")
        return {"w": float(sw.sum()), "correct": float(sw @ (pred == y))}
    y2, p2 = y.reshape(len(y), 1).astype(np.float64), np.asarray(pred).reshape(len(y), 1)
    dominance.check_rows(np.column_stack([sw[:, None], sw[:, None] * y2, sw[:, None] * y2 * y2,
                                          sw[:, None] * (y2 - p2) ** 2]), "a score")
    return {"w": float(sw.sum()), "wy": sw @ y2, "wy2": sw @ (y2 * y2),
            "res": sw @ ((y2 - p2) ** 2)}
