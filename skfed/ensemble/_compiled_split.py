"""scikit-learn's compiled split search, run on pooled node histograms.

The server's split search (:mod:`._splitting`) rewrites scikit-learn's
``Splitter.find_node_split`` in numpy; it costs about 0.25 ms a node in numpy
passes over the (features x bins) grid, which at 20,000 rows was a third of a
fit's time. Where this scikit-learn's ``Splitter`` is there, it runs instead:
it is the reference's own code on the same pooled sums, so its splits are the
reference's by construction. It draws no features (a ``max_features < 1``
search keeps the replay's draws, hence the numpy scan), and reads nothing of
the rows it is built with (a dummy one-row array) in ``find_node_split``.

A node that may split on a categorical feature keeps the numpy scan: the
compiled one orders categories of equal ``G / (H + 10)`` by the C library's
``qsort``, which leaves ties open (it changed between glibc releases), where
the numpy scan keeps them in bin order, as the fits this library has given
so far did; one split of ties apart can leave a site with a node under its
``min_rows`` and refuse the fit.
"""

import numpy as np

from ._splitting import MIN_HESSIAN_TO_SPLIT, SplitInfo

try:  # scikit-learn's compiled splitter and its histogram record
    from sklearn.ensemble._hist_gradient_boosting.common import HISTOGRAM_DTYPE
    from sklearn.ensemble._hist_gradient_boosting.splitting import Splitter as _SkSplitter
except ImportError:  # pragma: no cover - a scikit-learn without them: the numpy scan
    _SkSplitter = HISTOGRAM_DTYPE = None

#: the largest pooled row count the compiled histograms' uint32 counts hold
_MAX_COUNT = np.iinfo(np.uint32).max


def compiled_splitter(splitter):
    """A :class:`CompiledSplit` for ``splitter``'s settings, or None where the numpy
    scan must run (no compiled splitter, or features drawn at each split)."""
    if _SkSplitter is None or splitter.feature_fraction < 1.0:
        return None
    try:
        return CompiledSplit(splitter)
    except (TypeError, ValueError):  # another scikit-learn's signature: the numpy scan
        return None


class CompiledSplit:
    """scikit-learn's ``Splitter`` with the settings of a :class:`Splitter`.

    Parameters
    ----------
    splitter : Splitter
        The numpy splitter whose settings (bins, missing values, categories,
        monotonic constraints, l2, ``min_samples_leaf``) it takes.
    """

    def __init__(self, splitter):
        n_features = len(splitter.is_categorical)
        rows = np.zeros((1, n_features), dtype=np.uint8, order="F")  # never read
        self.n_features = n_features
        self.is_categorical = np.asarray(splitter.is_categorical, dtype=bool)
        self.any_categorical = bool(self.is_categorical.any())
        self._every = None  # the last array of every feature seen (never written to)
        self.kernel = _SkSplitter(
            rows, np.asarray(splitter.n_bins_non_missing, dtype=np.uint32),
            np.uint8(splitter.missing_bin),
            np.asarray(splitter.has_missing_values, dtype=np.uint8),
            np.asarray(splitter.is_categorical, dtype=np.uint8),
            np.asarray(splitter.monotonic_cst, dtype=np.int8),
            splitter.l2, MIN_HESSIAN_TO_SPLIT, splitter.min_samples_leaf, 0.0,
            splitter.hessians_are_constant, 1.0, np.random.RandomState(0), 1)

    def find_node_split(self, n_samples, hist, sum_gradients, sum_hessians, value,
                        lower, upper, allowed):
        """The best split of a node (:meth:`Splitter.find_node_split`'s arguments but
        the mask, which draws nothing here); None where the numpy scan must run
        (a categorical feature allowed, or counts beyond uint32)."""
        grad, hess, count = hist
        if n_samples > _MAX_COUNT or (
                self.any_categorical and self.is_categorical[allowed].any()):
            return None
        records = np.empty(grad.shape, dtype=HISTOGRAM_DTYPE)
        records["sum_gradients"], records["count"] = grad, count
        records["sum_hessians"] = 0.0 if hess is None else hess
        every = allowed is self._every or (  # the replay passes one array of them all
            len(allowed) == self.n_features and
            np.array_equal(allowed, np.arange(self.n_features)))
        if every:
            self._every = allowed
        info = self.kernel.find_node_split(
            n_samples, records, sum_gradients, sum_hessians, value, lower, upper,
            None if every else np.asarray(allowed, dtype=np.uint32))
        if info.gain == -1:  # no split: the numpy scan's record (the sums are not set)
            return SplitInfo(gain=-1.0, feature_idx=int(info.feature_idx),
                             is_categorical=bool(info.is_categorical))
        return SplitInfo(
            gain=float(info.gain), feature_idx=int(info.feature_idx),
            bin_idx=int(info.bin_idx), missing_go_to_left=bool(info.missing_go_to_left),
            sum_gradient_left=float(info.sum_gradient_left),
            sum_hessian_left=float(info.sum_hessian_left),
            sum_gradient_right=float(info.sum_gradient_right),
            sum_hessian_right=float(info.sum_hessian_right),
            n_samples_left=int(info.n_samples_left),
            n_samples_right=int(info.n_samples_right),
            value_left=float(info.value_left), value_right=float(info.value_right),
            is_categorical=bool(info.is_categorical),
            left_cat_bitset=None if info.left_cat_bitset is None else
            np.asarray(info.left_cat_bitset, dtype=np.uint32))
