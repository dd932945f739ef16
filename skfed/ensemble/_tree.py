"""A fitted tree: scikit-learn's node layout, predictions, and its compact form for the sites.

:class:`TreePredictor` holds the nodes in the record layout of scikit-learn's
``TreePredictor.nodes`` (same field names and dtypes, depth-first pre-order:
root 0, then the left subtree, then the right), so a federated tree can be
compared with the pooled one field by field. :func:`pack_trees` turns a list
of trees into a few flat arrays (what the sites receive to recompute their
raw predictions) and :func:`unpack_trees` reads them back at the site.
"""

import numpy as np

#: the fields of scikit-learn's ``PREDICTOR_RECORD_DTYPE``
NODE_DTYPE = np.dtype([
    ("value", np.float64), ("count", np.uint32), ("feature_idx", np.intp),
    ("num_threshold", np.float64), ("missing_go_to_left", np.uint8),
    ("left", np.uint32), ("right", np.uint32), ("gain", np.float64),
    ("depth", np.uint32), ("is_leaf", np.uint8), ("bin_threshold", np.uint8),
    ("is_categorical", np.uint8), ("bitset_idx", np.uint32),
])

#: flag bits of a packed node
_LEAF, _MISSING_LEFT, _CATEGORICAL = 1, 2, 4


def in_bitset(bitsets, rows, values):
    """Whether integer ``values`` are in the 256-bit sets ``bitsets[rows]`` (8 uint32)."""
    values = values.astype(np.int64)
    words = bitsets[rows, values >> 5]
    return ((words >> (values & 31).astype(np.uint32)) & 1).astype(bool)


class TreePredictor:
    """One tree of the ensemble (scikit-learn's node records).

    Parameters
    ----------
    nodes : ndarray of NODE_DTYPE
    binned_left_cat_bitsets : ndarray of shape (n_categorical_splits, 8), dtype=uint32
        Per categorical split, the bins that go left.
    raw_left_cat_bitsets : ndarray of shape (n_categorical_splits, 8), dtype=uint32
        The same sets of raw category codes (equal to the bins: the codes are
        the bins of a categorical feature).
    """

    def __init__(self, nodes, binned_left_cat_bitsets, raw_left_cat_bitsets):
        self.nodes = nodes
        self.binned_left_cat_bitsets = binned_left_cat_bitsets
        self.raw_left_cat_bitsets = raw_left_cat_bitsets

    def get_n_leaf_nodes(self):
        """Number of leaves."""
        return int(self.nodes["is_leaf"].sum())

    def get_max_depth(self):
        """Depth of the deepest leaf."""
        return int(self.nodes["depth"].max())

    def predict(self, X):
        """Leaf values for raw feature values ``X`` (categorical codes, NaN missing)."""
        nodes = self.nodes
        at = np.zeros(X.shape[0], dtype=np.intp)
        active = np.flatnonzero(~nodes["is_leaf"][at].astype(bool))
        while active.size:
            node = nodes[at[active]]
            x = X[active, node["feature_idx"]]
            missing = np.isnan(x)
            left = np.where(missing, node["missing_go_to_left"].astype(bool),
                            x <= node["num_threshold"])
            cat = node["is_categorical"].astype(bool) & ~missing
            if cat.any():
                code = x[cat]
                negative = code < 0  # scikit-learn treats negative codes as missing
                inside = in_bitset(self.raw_left_cat_bitsets, node["bitset_idx"][cat],
                                   np.where(negative, 0, code))
                left[cat] = np.where(negative, node["missing_go_to_left"][cat].astype(bool),
                                     inside)
            at[active] = np.where(left, node["left"], node["right"])
            active = active[~nodes["is_leaf"][at[active]].astype(bool)]
        return nodes["value"][at]

    def predict_binned(self, X_binned, missing_bin):
        """Leaf values for binned rows (what training uses)."""
        nodes = self.nodes
        return nodes["value"][_leaf_of_binned(
            X_binned, missing_bin, nodes["is_leaf"].astype(bool), nodes["feature_idx"],
            nodes["bin_threshold"], nodes["missing_go_to_left"].astype(bool),
            nodes["is_categorical"].astype(bool), nodes["bitset_idx"],
            self.binned_left_cat_bitsets, nodes["left"], nodes["right"])]


def _leaf_of_binned(X_binned, missing_bin, is_leaf, feature, threshold, missing_left,
                    categorical, bitset_row, bitsets, left_child, right_child):
    """The leaf each binned row falls in (scikit-learn's ``predict_binned`` rule).

    The rows are split node by node, from the root down (as scikit-learn's
    grower partitions them): each row is read once per level, at its node's
    feature only.
    """
    at = np.empty(X_binned.shape[0], dtype=np.intp)
    stack = [(0, None)]  # (node, its rows; None: every row)
    while stack:
        node, rows = stack.pop()
        if is_leaf[node]:
            at[slice(None) if rows is None else rows] = node
            continue
        bitset = bitsets[bitset_row[node]] if categorical[node] else None
        left, right = split_rows(X_binned, missing_bin, feature[node], threshold[node],
                                 missing_left[node], categorical[node], bitset, rows)
        stack += [(right_child[node], right), (left_child[node], left)]
    return at


def split_rows(X_binned, missing_bin, feature, threshold, missing_left, categorical, bitset,
               rows=None):
    """The indices of the ``rows`` (None: every row) that go left, and right, at one
    node (scikit-learn's ``predict_binned`` rule; ``bitset`` only read when
    ``categorical``)."""
    column = X_binned[:, feature]
    b = column if rows is None else np.take(column, rows)
    if categorical:
        go_left = in_bitset(bitset[None, :], np.zeros(len(b), dtype=np.intp), b)
    else:
        go_left = b <= threshold
    missing = b == missing_bin
    if missing_left:
        go_left |= missing
    else:
        go_left &= ~missing
    if rows is None:
        return np.flatnonzero(go_left), np.flatnonzero(~go_left)
    return np.compress(go_left, rows), np.compress(~go_left, rows)  # faster than rows[mask]


def pack_trees(predictors):
    """Flat arrays of a list of trees (what the sites receive).

    Per node: feature (int32), bin threshold (uint8), flags (uint8: leaf,
    missing goes left, categorical), right child (int32; the left child of an
    internal node is the next node), value (float64, leaves only matter);
    per categorical split its bitset of bins going left.
    """
    sizes = [len(p.nodes) for p in predictors]
    start = np.zeros(len(predictors) + 1, dtype=np.int32)
    start[1:] = np.cumsum(sizes)
    if not predictors:
        empty = np.empty(0)
        return {"start": start, "feature": empty.astype(np.int32),
                "bin": empty.astype(np.uint8), "flags": empty.astype(np.uint8),
                "right": empty.astype(np.int32), "value": empty,
                "bitsets": np.zeros((0, 8), np.uint32)}
    nodes = np.concatenate([p.nodes for p in predictors])
    flags = (nodes["is_leaf"] * _LEAF + nodes["missing_go_to_left"] * _MISSING_LEFT
             + nodes["is_categorical"] * _CATEGORICAL).astype(np.uint8)
    bitsets = [p.binned_left_cat_bitsets for p in predictors]
    return {"start": start, "feature": nodes["feature_idx"].astype(np.int32),
            "bin": nodes["bin_threshold"].astype(np.uint8), "flags": flags,
            "right": nodes["right"].astype(np.int32), "value": nodes["value"].copy(),
            "bitsets": np.concatenate(bitsets).astype(np.uint32)}


def unpack_trees(packed, first=0):
    """The packed trees as ``(is_leaf, feature, bin, missing_left, categorical,
    bitset_row, bitsets, left, right, value)`` tuples, one per tree (from tree
    ``first`` on)."""
    trees = []
    start = np.asarray(packed["start"])
    # the categorical splits of the trees skipped hold the first bitsets
    bitset_start = int(np.count_nonzero(packed["flags"][:start[first]] & _CATEGORICAL))
    for a, b in zip(start[first:-1], start[first + 1:]):
        flags = packed["flags"][a:b]
        categorical = (flags & _CATEGORICAL).astype(bool)
        n_cat = int(categorical.sum())
        bitset_row = np.zeros(b - a, dtype=np.intp)
        bitset_row[categorical] = np.arange(n_cat)
        left = np.arange(1, b - a + 1)  # pre-order: an internal node's left child is next
        trees.append(((flags & _LEAF).astype(bool), packed["feature"][a:b].astype(np.intp),
                      packed["bin"][a:b], (flags & _MISSING_LEFT).astype(bool), categorical,
                      bitset_row, packed["bitsets"][bitset_start:bitset_start + n_cat],
                      left, packed["right"][a:b].astype(np.intp), packed["value"][a:b]))
        bitset_start += n_cat
    return trees


def packed_leaf_values(tree, X_binned, missing_bin):
    """Leaf values of binned rows for one unpacked tree."""
    (is_leaf, feature, threshold, missing_left, categorical, bitset_row, bitsets, left,
     right, value) = tree
    at = _leaf_of_binned(X_binned, missing_bin, is_leaf, feature, threshold, missing_left,
                         categorical, bitset_row, bitsets, left, right)
    return value[at]
