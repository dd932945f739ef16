"""A node's histograms at a site: scikit-learn's kernel, or one sparse product.

Both add each cell's rows one by one, in row order, in float64 (as
``np.bincount`` does): the sums are the same to the bit.
"""

import weakref

import numpy as np
from scipy.sparse import csc_matrix

from ._site_rows import _cells

try:  # scikit-learn's compiled histogram kernel: the sums of the sparse product below
    from sklearn.ensemble._hist_gradient_boosting.histogram import HistogramBuilder
except ImportError:  # pragma: no cover - a scikit-learn without it: the product alone
    HistogramBuilder = None


def _node_histograms(cache, prep, node_rows_list, features, gradient, hessian, k, n_bins):
    """Per node (its row indices; None: every row) ``(gradients, hessians or None,
    counts)``, the sums in every cell of ``features`` x bins: scikit-learn's kernel
    where it is there, else the sparse product (:func:`_histogram_sums`); both add
    each cell's rows one by one in row order, in float64, so the sums are the same."""
    builders = _builders(cache, prep, k, gradient, hessian, n_bins)
    every = prep.every_feature(features)
    if builders is not None:
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
    """The arrays ``parts``, flattened one after the other into one array (one copy,
    in C: a kernel's field is evenly strided, so it flattens without a copy)."""
    if not parts:
        return np.empty(0, dtype=dtype)
    return np.concatenate([part.reshape(-1) for part in parts], dtype=dtype,
                          casting="unsafe")  # as an assignment


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
    every = prep.every_feature(features)
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
