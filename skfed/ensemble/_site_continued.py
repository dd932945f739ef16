"""Node histograms summed in one site's row order across the partitions of an engine.

An in-memory site sums each histogram cell's float32 gradients (and hessians) in
float64, one row after the other in row order (scikit-learn's kernel,
:mod:`._histograms`). A dataset on an engine (:mod:`skfed.sites.engine`) sums each
partition's rows and adds the partitions' sums: the same bits whenever no addition
rounds (:func:`skfed.federation.whole_counts.any_order_exact`, checked on every
request). Where one could, the engine runs :func:`continued_histograms` on the
partitions one after the other instead, each continuing the previous ones' sums: every
cell then receives the same additions in the same order as in memory, and so the same
bits.
"""

import numpy as np

from ._losses import loss_sums
from ._site_rows import _cached_rows, _gradients, kept_bins, resolve, unpack_nodes


def continued_histograms(site, seed, context, model, request):
    """:func:`~._site.site_histograms`'s reply on ``site``'s rows, each cell's sums
    continuing ``seed`` (the previous partitions' reply; ``None`` for the first): the
    seed first, then this partition's rows' terms one by one in row order
    (``np.bincount`` adds its weights in order, in float64)."""
    cache, prep, raw = resolve(site, context, model)
    context = cache.context
    grad, hess = _gradients(cache, prep, raw)
    n_bins = context["max_bins"] + 1
    columns = {"gradients": grad} if hess is None else {"gradients": grad, "hessians": hess}
    out = {name: [] for name in (*columns, "counts")}
    at = 0
    kept = kept_bins(context) if request.get("kept_cells") else [None] * prep.binned.shape[1]
    for k, steps, features in unpack_nodes(request):
        rows = _cached_rows(cache, prep, steps, context["max_bins"])
        terms = {name: (values[:, k] if rows is None else values[rows, k]).astype(np.float64)
                 for name, values in columns.items()}
        for f in features:  # a feature's cells: its bins, each row's term in row order
            bins = prep.binned[:, f] if rows is None else prep.binned[rows, f]
            cells = np.concatenate([np.arange(n_bins, dtype=np.intp), bins])
            # the cells a row can be in (site_histograms' reply: node_cells)
            keep = slice(None) if kept[f] is None else kept[f]
            width = n_bins if kept[f] is None else len(kept[f])
            for name, values in terms.items():
                start = np.zeros(n_bins)
                if seed is not None:
                    start[keep] = seed[name][at:at + width]
                out[name].append(np.bincount(cells, weights=np.concatenate([start, values]),
                                             minlength=n_bins)[keep])
            counts = np.bincount(bins, minlength=n_bins).astype(np.uint32)[keep]
            out["counts"].append(counts if seed is None else
                                 counts + seed["counts"][at:at + width])
            at += width
    reply = {name: np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)
             for name, parts in out.items()}
    reply["counts"] = reply["counts"].astype(np.uint32)
    if request["with_loss"]:
        sums = loss_sums(prep.loss, prep.y, raw, prep.sw)
        reply.update(sums if seed is None else {key: seed[key] + value
                                                 for key, value in sums.items()})
    return reply
