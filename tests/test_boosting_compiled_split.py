"""The server's split search: scikit-learn's compiled splitter where it runs, equal to
the numpy scan (skfed/ensemble/_compiled_split.py)."""

import numpy as np
import pytest

from skfed.ensemble import FedHistGradientBoostingRegressor
from skfed.ensemble import _compiled_split
from skfed.ensemble._compiled_split import CompiledSplit, compiled_splitter
from skfed.ensemble._splitting import SplitInfo, Splitter

N_FEATURES, N_BINS = 4, 256


def _splitter(rng, categorical=None, fraction=1.0, constant=False, min_samples_leaf=None):
    return Splitter(
        n_bins_non_missing=np.array([200, 5, 255, 12]), missing_bin=255,
        has_missing_values=rng.random(N_FEATURES) < 0.5,
        is_categorical=np.zeros(N_FEATURES, bool) if categorical is None else categorical,
        monotonic_cst=rng.integers(-1, 2, N_FEATURES).astype(np.int8),
        l2_regularization=float(rng.choice([0.0, 0.5])),
        min_samples_leaf=min_samples_leaf or int(rng.integers(1, 30)),
        hessians_are_constant=constant,
        feature_fraction_per_split=fraction)


def _node(rng, splitter, ties):
    """A node's arguments: random histograms (integer gradients when ``ties``)."""
    n = int(rng.integers(50, 3000))
    count = np.zeros((N_FEATURES, N_BINS), np.int64)
    for f in range(N_FEATURES):
        bins = list(range(splitter.n_bins_non_missing[f]))
        bins += [255] if splitter.has_missing_values[f] else []
        count[f, bins] = rng.multinomial(n, np.ones(len(bins)) / len(bins))
    grad = (np.round(rng.normal(size=count.shape)) if ties
            else rng.normal(size=count.shape)) * count
    hess = count.astype(float) if splitter.hessians_are_constant else \
        rng.random(count.shape) * count
    G, H = float(grad[0].sum()), float(hess[0].sum())
    lower, upper = (-np.inf, np.inf) if rng.random() < 0.5 else \
        (float(rng.normal() - 3), float(rng.normal() + 3))
    allowed = np.arange(N_FEATURES) if rng.random() < 0.5 else \
        np.sort(rng.choice(N_FEATURES, 2, replace=False))
    hist = (grad, None if splitter.hessians_are_constant else hess, count)
    return (n, hist, G, H, -G / (H + 1e-15), lower, upper, allowed)


def _fields(info):
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v)
            for k, v in vars(info).items()}


def test_the_compiled_split_is_the_numpy_scans_field_for_field():
    """Random nodes (missing values, monotonic constraints and bounds, l2, constant
    hessians, interaction subsets, tied gradients): every field equal, no split too."""
    rng = np.random.default_rng(0)
    no_split = 0
    for trial in range(600):
        # one in five: leaves too large for most nodes (no split)
        splitter = _splitter(rng, constant=trial % 3 == 0,
                             min_samples_leaf=1500 if trial % 5 == 4 else None)
        args = _node(rng, splitter, ties=trial % 2 == 0)
        expected = splitter.find_node_split(*args, np.ones(len(args[-1]), bool))
        got = CompiledSplit(splitter).find_node_split(*args)
        assert isinstance(got, SplitInfo)
        assert _fields(got) == _fields(expected), trial
        no_split += expected.gain == -1
    assert 0 < no_split < 600  # both kinds of answers were compared


def test_a_categorical_feature_or_feature_draws_keep_the_numpy_scan():
    """A node that may split on a categorical feature gets None (the numpy scan runs:
    the compiled one breaks ties of categories by the C library's qsort); one without
    it is split; max_features < 1 (draws the replay makes) has no compiled splitter."""
    rng = np.random.default_rng(1)
    splitter = _splitter(rng, categorical=np.array([False, True, False, False]))
    compiled = CompiledSplit(splitter)
    args = _node(rng, splitter, ties=True)
    assert compiled.find_node_split(*args[:-1], np.arange(N_FEATURES)) is None
    assert isinstance(compiled.find_node_split(*args[:-1], np.array([0, 2])), SplitInfo)
    assert compiled_splitter(_splitter(rng, fraction=0.5)) is None
    assert compiled_splitter(_splitter(rng)) is not None


def test_the_fit_is_the_same_with_the_numpy_scan(monkeypatch):
    """A fit (missing values, a monotonic constraint, l2) with the compiled splitter and
    with the numpy scan alone: the same trees, node for node."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(3000, 5))
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 1]) ** 2 + rng.normal(size=3000)
    clients = rng.integers(0, 3, 3000)
    params = dict(max_iter=8, early_stopping=False, l2_regularization=0.3,
                  monotonic_cst=[1, 0, 0, 0, 0], random_state=0)
    fast = FedHistGradientBoostingRegressor(**params).fit(X, y, clients=clients)
    monkeypatch.setattr(_compiled_split, "_SkSplitter", None)
    slow = FedHistGradientBoostingRegressor(**params).fit(X, y, clients=clients)
    assert len(fast._predictors) == len(slow._predictors) == 8
    for a, b in zip(fast._predictors, slow._predictors):
        assert a[0].nodes.tobytes() == b[0].nodes.tobytes()


@pytest.mark.parametrize("n_samples", [2**32])
def test_counts_beyond_uint32_keep_the_numpy_scan(n_samples):
    rng = np.random.default_rng(3)
    splitter = _splitter(rng)
    args = _node(rng, splitter, ties=False)
    assert CompiledSplit(splitter).find_node_split(n_samples, *args[1:]) is None
