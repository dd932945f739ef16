"""The sites' bins (``bin_features``): scikit-learn's rule, bit for bit."""

import numpy as np
import pytest

from skfed.ensemble import _site_rows
from skfed.ensemble._site_rows import bin_features


def _reference(X, thresholds, missing_bin):
    """The rule itself: ``i`` iff ``t[i-1] < x <= t[i]``, NaN to ``missing_bin``."""
    out = np.empty(X.shape, dtype=np.uint8)
    for j, t in enumerate(thresholds):
        x = X[:, j]
        out[:, j] = np.where(np.isnan(x), missing_bin,
                             np.searchsorted(t, np.where(np.isnan(x), 0.0, x), side="left"))
    return out


def _problem(seed, n=3001):
    """Columns with NaN, +-inf, -0.0, values on, just below and just above the
    thresholds, thresholds of many lengths (none to 255), and categorical codes
    (a negative one among them)."""
    rng = np.random.default_rng(seed)
    sizes = [0, 1, 2, 3, 7, 8, 31, 64, 200, 254, 255]
    columns, thresholds = [], []
    for size in sizes:
        t = np.unique(rng.normal(size=size) * rng.choice([1e-3, 1.0, 1e6]))
        x = rng.normal(size=n) * 2
        if size:  # ties: on each threshold and its neighbours either side
            at = rng.integers(0, n, n // 2)
            pick = t[rng.integers(0, len(t), len(at))]
            x[at] = np.where(rng.random(len(at)) < 0.5, pick,
                             np.nextafter(pick, rng.choice([-np.inf, np.inf], len(at))))
        x[rng.random(n) < 0.05] = np.nan
        x[rng.random(n) < 0.01] = np.inf
        x[rng.random(n) < 0.01] = -np.inf
        x[rng.random(n) < 0.01] = -0.0
        columns.append(x)
        thresholds.append(t)
    # a categorical feature: codes 0..9 (thresholds at the codes), -1 and NaN
    codes = rng.integers(-1, 10, n).astype(np.float64)
    codes[rng.random(n) < 0.05] = np.nan
    columns.append(codes)
    thresholds.append(np.arange(10, dtype=np.float64))
    # a threshold at 0.0 against -0.0 and 0.0
    columns.append(rng.choice([-0.0, 0.0, -1.0, 1.0, np.nan], n))
    thresholds.append(np.array([-1.0, 0.0]))
    return np.column_stack(columns), thresholds


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("order", ["C", "F"])
def test_bins_follow_the_rule(seed, order, monkeypatch):
    X, thresholds = _problem(seed)
    X = np.asarray(X, order=order)
    expected = _reference(X, thresholds, 255)
    got = bin_features(X, thresholds, 255)
    assert got.flags.f_contiguous and got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)
    # a negative categorical code keeps its bin of today: the lowest, not missing
    codes = X[:, -2]
    assert np.all(got[codes == -1, -2] == 0)
    # rows binned in chunks: the same bins across the chunks' edges
    monkeypatch.setattr(_site_rows, "_BIN_CHUNK", 97)
    np.testing.assert_array_equal(bin_features(X, thresholds, 255), expected)


def test_bins_are_sklearns_map_to_bins():
    """scikit-learn's compiled binning (no categorical feature: a negative code is a
    value) gives the same bins."""
    try:
        from sklearn.ensemble._hist_gradient_boosting._binning import _map_to_bins
    except ImportError:  # pragma: no cover - another scikit-learn
        pytest.skip("scikit-learn's _map_to_bins is not there")
    X, thresholds = _problem(3)
    theirs = np.empty(X.shape, dtype=np.uint8, order="F")
    _map_to_bins(X, [np.asarray(t, dtype=np.float64) for t in thresholds],
                 np.zeros(X.shape[1], dtype=np.uint8), 255, 1, theirs)
    np.testing.assert_array_equal(bin_features(X, thresholds, 255), theirs)


def test_a_missing_bin_below_255_and_no_rows():
    X, thresholds = _problem(4, n=50)
    np.testing.assert_array_equal(bin_features(X, thresholds, 17),
                                  _reference(X, thresholds, 17))
    assert bin_features(X[:0], thresholds, 255).shape == (0, X.shape[1])
