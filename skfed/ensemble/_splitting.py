"""The best split of a node from its pooled histograms (server side).

The rules of scikit-learn 1.9's ``Splitter.find_node_split``
(``_hist_gradient_boosting/splitting.pyx``), written again in numpy:

- a node's value is ``-G / (H + l2 + 1e-15)``, clipped to its monotonic
  bounds; the gain of a split is ``G v - G_L v_L - G_R v_R`` (``v`` the
  node's own value, 0 at the root) and a split whose clipped child values
  break a monotonic constraint gets gain -1;
- numerical features are scanned left to right (missing values go right),
  and, when the feature had missing values in training, right to left
  (missing values go left), which replaces the first result only if strictly
  better; within a scan, bins are skipped while the growing side has fewer
  than ``min_samples_leaf`` rows or less hessian than ``min_hessian_to_split``
  and the scan stops once the shrinking side has; a bin wins only if its
  gain is strictly larger than the best so far and positive (ties keep the
  first bin in scan order);
- categorical features sort their supported categories by
  ``G_b / (H_b + 10)`` and scan the sorted list from both ends up to its
  middle;
- across features the first with the strictly largest gain wins;
- with ``max_features < 1`` a random subset of the allowed features is drawn
  (one shuffle of a boolean mask per call, with the estimator's generator).

The sums are accumulated in the same order as scikit-learn's loops
(``numpy.cumsum`` adds sequentially), so equal histograms give equal splits,
bit for bit.

Where scikit-learn's compiled splitter is there, the grower runs it instead
(:mod:`._compiled_split`, four times faster a node); this scan serves the
searches it cannot: features drawn per split and nodes that may split on a
categorical feature.
"""

import math
from dataclasses import dataclass

import numpy as np

#: scikit-learn's fixed grower constants
MIN_HESSIAN_TO_SPLIT = 1e-3
MIN_CAT_SUPPORT = 10.0


@dataclass
class SplitInfo:
    """The best split found for a node (scikit-learn's ``SplitInfo``)."""

    gain: float
    feature_idx: int
    bin_idx: int = 0
    missing_go_to_left: bool = False
    sum_gradient_left: float = 0.0
    sum_hessian_left: float = 0.0
    sum_gradient_right: float = 0.0
    sum_hessian_right: float = 0.0
    n_samples_left: int = 0
    n_samples_right: int = 0
    value_left: float = 0.0
    value_right: float = 0.0
    is_categorical: bool = False
    left_cat_bitset: object = None


def node_value(sum_gradient, sum_hessian, lower, upper, l2):
    """``-G / (H + l2 + 1e-15)`` clipped to ``[lower, upper]`` (arrays too)."""
    value = -sum_gradient / (sum_hessian + l2 + 1e-15)
    if isinstance(lower, float) and isinstance(upper, float) and lower == -np.inf \
            and upper == np.inf:
        return value  # unbounded: the clip would change nothing
    return np.where(value < lower, lower, np.where(value > upper, upper, value))


def split_gain(g_left, h_left, g_right, h_right, node_loss, cst, lower, upper, l2):
    """Loss reduction of splits (vectorized); -1 where a monotonic constraint breaks."""
    v_left = node_value(g_left, h_left, lower, upper, l2)
    v_right = node_value(g_right, h_right, lower, upper, l2)
    gain = node_loss - g_left * v_left
    gain = gain - g_right * v_right
    cst = np.asarray(cst)
    if not cst.any():  # no constraint: no gain to overrule
        return gain
    gain = np.where((cst == 1) & (v_left > v_right), -1.0, gain)
    return np.where((cst == -1) & (v_left < v_right), -1.0, gain)


class Splitter:
    """Finds the best split of a node from its histograms.

    Parameters
    ----------
    n_bins_non_missing : ndarray of shape (n_features,)
    missing_bin : int
        The bin of missing values (``max_bins``).
    has_missing_values : ndarray of bool of shape (n_features,)
    is_categorical : ndarray of bool of shape (n_features,)
    monotonic_cst : ndarray of int of shape (n_features,)
    l2_regularization : float
    min_samples_leaf : int
    hessians_are_constant : bool
        Counts stand in for hessians (squared or absolute error without weights).
    feature_fraction_per_split : float
    """

    def __init__(self, *, n_bins_non_missing, missing_bin, has_missing_values, is_categorical,
                 monotonic_cst, l2_regularization, min_samples_leaf, hessians_are_constant,
                 feature_fraction_per_split):
        self.n_bins_non_missing = np.asarray(n_bins_non_missing, dtype=np.int64)
        self.missing_bin = int(missing_bin)
        self.has_missing_values = np.asarray(has_missing_values, dtype=bool)
        self.is_categorical = np.asarray(is_categorical, dtype=bool)
        self.monotonic_cst = np.asarray(monotonic_cst, dtype=np.int8)
        self.l2 = float(l2_regularization)
        self.min_samples_leaf = int(min_samples_leaf)
        self.hessians_are_constant = bool(hessians_are_constant)
        self.feature_fraction = float(feature_fraction_per_split)
        self._layouts = {}

    def scan_layout(self, features, n_bins):
        """The :class:`_ScanLayout` of ``features`` (cached)."""
        key = (np.asarray(features).tobytes(), n_bins)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = _ScanLayout(self, features, n_bins)
        return layout

    def draw_features(self, n_allowed, rng):
        """The mask of features considered at one split search (drawn as scikit-learn draws)."""
        mask = np.ones(n_allowed, dtype=bool)
        if self.feature_fraction < 1.0:
            n_drawn = max(1, int(math.ceil(self.feature_fraction * n_allowed)))
            mask = np.full(n_allowed, False)
            mask[:n_drawn] = True
            rng.shuffle(mask)
        return mask

    def find_node_split(self, n_samples, hist, sum_gradients, sum_hessians, value,
                        lower, upper, allowed, mask):
        """The best split of a node (gain -1: none).

        ``hist`` is ``(gradients, hessians, counts)``, each of shape
        ``(n_features, n_bins)`` (hessians ``None`` when constant);
        ``allowed`` the features the node may split on, in order; ``mask``
        which of them this search considers (:meth:`draw_features`).
        """
        grad, hess, count = hist
        hess = count.astype(np.float64) if self.hessians_are_constant else hess
        node_loss = sum_gradients * value
        gains = np.full(len(allowed), -1.0)
        found = {}
        numeric = np.flatnonzero(mask & ~self.is_categorical[allowed])
        if numeric.size:
            scan = _NumericScan(self, allowed[numeric], grad, hess, count, n_samples,
                                sum_gradients, sum_hessians, node_loss, lower, upper)
            gains[numeric] = scan.best_gain
            found.update({int(i): (scan, row) for row, i in enumerate(numeric)})
        for i in np.flatnonzero(mask & self.is_categorical[allowed]):
            info = self._scan_categorical(int(allowed[i]), grad, hess, count, n_samples,
                                          sum_gradients, sum_hessians, node_loss, lower,
                                          upper)
            if info is not None:
                gains[i], found[int(i)] = info.gain, info
        best = int(np.argmax(gains))  # the first feature with the largest gain
        if gains[best] == -1.0 and not isinstance(found.get(best), SplitInfo):
            return SplitInfo(gain=-1.0, feature_idx=int(allowed[best]),
                             is_categorical=bool(self.is_categorical[allowed[best]]))
        if isinstance(found[best], SplitInfo):
            return found[best]
        scan, row = found[best]
        return scan.info(row)

    def _info(self, gain, f, b, missing_left, g_left, h_left, n_left, n, G, H, lower, upper):
        g_right, h_right = G - g_left, H - h_left
        return SplitInfo(
            gain=gain, feature_idx=int(f), bin_idx=int(b), missing_go_to_left=missing_left,
            sum_gradient_left=float(g_left), sum_hessian_left=float(h_left),
            sum_gradient_right=float(g_right), sum_hessian_right=float(h_right),
            n_samples_left=int(n_left), n_samples_right=int(n - n_left),
            value_left=float(node_value(g_left, h_left, lower, upper, self.l2)),
            value_right=float(node_value(g_right, h_right, lower, upper, self.l2)))

    # -- categorical features ------------------------------------------------
    def _scan_categorical(self, f, grad, hess, count, n, G, H, node_loss, lower, upper):
        """Fisher's grouping: categories sorted by ``G_b / (H_b + 10)``, scanned from
        both ends up to the middle; unsupported categories always go right."""
        bins = list(range(int(self.n_bins_non_missing[f])))
        if self.has_missing_values[f]:
            bins.append(self.missing_bin)
        bins = np.asarray(bins, dtype=np.intp)
        h_bin = hess[f, bins]
        support = n / H
        used = bins[h_bin * support >= MIN_CAT_SUPPORT]
        if used.size <= 1:
            return None
        keys = grad[f, used] / (hess[f, used] + MIN_CAT_SUPPORT)
        used = used[np.argsort(keys, kind="stable")]  # equal keys: C qsort leaves them open
        best, msl, mh = None, self.min_samples_leaf, MIN_HESSIAN_TO_SPLIT
        best_gain = -1.0
        for direction in (1, -1):
            middle = (used.size + 1) // 2 - (0 if direction == 1 else 1)
            order = used[:middle] if direction == 1 else used[::-1][:middle]
            n_left, g_left, h_left = 0, 0.0, 0.0
            for i, b in enumerate(order):
                n_left += int(count[f, b])
                h_left += hess[f, b]
                g_left += grad[f, b]
                if n_left < msl or h_left < mh:
                    continue
                if n - n_left < msl or H - h_left < mh:
                    break
                gain = float(split_gain(g_left, h_left, G - g_left, H - h_left, node_loss,
                                        self.monotonic_cst[f], lower, upper, self.l2))
                if gain > best_gain and gain > 0:
                    best_gain, best = gain, (order[:i + 1], g_left, h_left, n_left)
        if best is None:
            return None
        left_bins, g_left, h_left, n_left = best
        info = self._info(best_gain, f, 0, False, g_left, h_left, n_left, n, G, H, lower, upper)
        info.is_categorical = True
        info.left_cat_bitset = bins_to_bitset(left_bins)
        if self.has_missing_values[f]:
            info.missing_go_to_left = bool(self.missing_bin in set(left_bins.tolist()))
        return info


def bins_to_bitset(bins):
    """A 256-bit set of bins (8 uint32 words)."""
    bitset = np.zeros(8, dtype=np.uint32)
    for b in np.asarray(bins, dtype=np.int64):
        bitset[b >> 5] |= np.uint32(1) << np.uint32(b & 31)
    return bitset


def _valid_bins(n_grow, n_shrink, h_grow, h_shrink, in_range, min_samples_leaf):
    """Bins a scan evaluates: it skips a bin while the growing side is too small and
    stops at the first bin where the shrinking side is (scikit-learn's order of tests:
    rows of the growing side, rows of the shrinking side, then the same for hessians)."""
    msl, mh = min_samples_leaf, MIN_HESSIAN_TO_SPLIT
    counted = in_range & (n_grow >= msl)  # not skipped for its rows
    n_short, h_skip, h_short = n_shrink < msl, h_grow < mh, h_shrink < mh
    stop = counted & (n_short | (h_short & ~h_skip))
    first_stop = np.where(stop.any(1), np.argmax(stop, 1), stop.shape[1])
    before = np.arange(stop.shape[1])[None, :] < first_stop[:, None]
    return counted & before & ~(n_short | h_skip | h_short)


def _first_best(gain, valid):
    """Per row, the first position of the largest gain among valid ones, and that gain."""
    gain = np.where(valid & ~np.isnan(gain), gain, -np.inf)
    at = np.argmax(gain, axis=1)
    return at, gain[np.arange(len(at)), at]


class _ScanLayout:
    """What the scans of a set of features need besides the histograms (the same at
    every node: computed once per feature set)."""

    def __init__(self, splitter, features, n_bins):
        self.nb = nb = splitter.n_bins_non_missing[features]
        self.has_missing = has_missing = splitter.has_missing_values[features]
        cst = splitter.monotonic_cst[features][:, None]
        self.cst = cst if cst.any() else np.zeros(1, dtype=np.int8)  # a scalar-like "none"
        self.every = len(features) == len(splitter.is_categorical) and \
            np.array_equal(features, np.arange(len(features)))
        # left to right (missing values go right): bins 0 .. nb - 2 + has_missing
        self.in_range = np.arange(n_bins)[None, :] < (nb - 1 + has_missing)[:, None]
        # right to left (missing values go left): at step i, bin nb - 1 - i joins the right
        source = (nb - 1)[:, None] - np.arange(n_bins - 1)[None, :]
        self.rtl_ok = (source >= 1) & has_missing[:, None]
        self.top = int(nb[0]) if np.all(nb == nb[0]) and nb[0] >= 2 else None
        if self.top is not None:  # the usual case: reversed views
            self.rtl_ok = self.rtl_ok[:, :self.top - 1]
        else:
            self.rtl_take = np.clip(source, 0, n_bins - 1)


class _NumericScan:
    """Both scans of every numerical feature of a node at once (rows: features)."""

    def __init__(self, splitter, features, grad, hess, count, n, G, H, node_loss, lower,
                 upper):
        self.splitter, self.features, self.n, self.G, self.H = splitter, features, n, G, H
        self.lower, self.upper = lower, upper
        layout = splitter.scan_layout(features, count.shape[1])
        if layout.every:  # every feature: no copy
            cnt, g, h = count.astype(np.int64, copy=False), grad, hess
        else:
            cnt, g, h = count[features].astype(np.int64), grad[features], hess[features]
        # gradients and hessians as one complex array: one running sum adds both, each
        # part exactly as a float64 running sum would (the scans' costliest step)
        gh = np.empty(g.shape, dtype=np.complex128)
        gh.real, gh.imag = g, h
        # left to right: missing values go right
        running = np.cumsum(gh, 1)
        self.n_left, self.g_left, self.h_left = np.cumsum(cnt, 1), running.real, running.imag
        h_right = H - self.h_left
        valid = _valid_bins(self.n_left, n - self.n_left, self.h_left, h_right,
                            layout.in_range, splitter.min_samples_leaf)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            gain = split_gain(self.g_left, self.h_left, G - self.g_left, h_right,
                              node_loss, layout.cst, lower, upper, splitter.l2)
        self.ltr_bin, ltr_gain = _first_best(gain, valid)
        self.best_gain = np.where(ltr_gain > 0, ltr_gain, -1.0)
        self.missing_left = np.zeros(len(features), dtype=bool)
        self.nb = layout.nb
        if layout.has_missing.any():
            self._right_to_left(cnt, gh, layout, node_loss)

    def _right_to_left(self, cnt, gh, layout, node_loss):
        """Missing values go left: the bin ``nb-1-i`` joins the right side at step
        ``i`` (the split is then at bin ``nb-2-i``); replaces the left-to-right
        result only where strictly better."""
        n, G, H, splitter = self.n, self.G, self.H, self.splitter
        ok = layout.rtl_ok
        if layout.top is not None:
            top = layout.top
            self.n_right = np.cumsum(cnt[:, top - 1:0:-1], 1)
            running = np.cumsum(gh[:, top - 1:0:-1], 1)
        else:
            take, rows = layout.rtl_take, np.arange(len(layout.nb))[:, None]
            self.n_right = np.cumsum(np.where(ok, cnt[rows, take], 0), 1)
            running = np.cumsum(np.where(ok, gh[rows, take], 0.0), 1)
        self.g_right, self.h_right = running.real, running.imag
        h_left = H - self.h_right
        valid = _valid_bins(self.n_right, n - self.n_right, self.h_right, h_left, ok,
                            splitter.min_samples_leaf)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            gain = split_gain(G - self.g_right, h_left, self.g_right, self.h_right,
                              node_loss, layout.cst, self.lower, self.upper, splitter.l2)
        self.rtl_step, rtl_gain = _first_best(gain, valid)
        better = (rtl_gain > self.best_gain) & (rtl_gain > 0)
        self.missing_left = better
        self.best_gain = np.where(better, rtl_gain, self.best_gain)

    def info(self, row):
        """The SplitInfo of the best split of feature ``row``."""
        s, f = self.splitter, int(self.features[row])
        if self.missing_left[row]:
            i = self.rtl_step[row]
            return s._info(float(self.best_gain[row]), f, self.nb[row] - 2 - i, True,
                           self.G - self.g_right[row, i], self.H - self.h_right[row, i],
                           self.n - self.n_right[row, i], self.n, self.G, self.H,
                           self.lower, self.upper)
        b = self.ltr_bin[row]
        return s._info(float(self.best_gain[row]), f, b, False, self.g_left[row, b],
                       self.h_left[row, b], self.n_left[row, b], self.n, self.G, self.H,
                       self.lower, self.upper)
