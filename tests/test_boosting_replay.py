"""The server's replay of scikit-learn's grower resumes where it last missed a histogram
(skfed/ensemble/_grower.py): the same trees and rounds as replaying from the root each
round, with fewer node splits replayed."""

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor

from skfed.ensemble import FedHistGradientBoostingRegressor
from skfed.ensemble import _grower


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X[rng.random(X.shape) < 0.05] = np.nan
    Z = np.nan_to_num(X)
    y = Z[:, 0] - Z[:, 1] ** 2 + np.sin(3 * Z[:, 2]) + 0.1 * rng.normal(size=n)
    return X, y, rng.integers(0, 3, n)


def _counting(monkeypatch, resume):
    """Count the node splits the replays make; ``resume=False``: from the root always."""
    calls = {"splits": 0}
    split, init = _grower.TreeReplay._split, _grower.TreeReplay.__init__

    def counted(self, *args):
        calls["splits"] += 1
        return split(self, *args)

    def no_resume(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._draws_nothing = self._draws_nothing and resume

    monkeypatch.setattr(_grower.TreeReplay, "_split", counted)
    monkeypatch.setattr(_grower.TreeReplay, "__init__", no_resume)
    return calls


@pytest.mark.parametrize("params", [
    dict(),  # the leaf budget (31 leaves)
    dict(max_leaf_nodes=8, monotonic_cst=[1, 0, 0, -1, 0], l2_regularization=0.5),
    dict(max_leaf_nodes=None, max_depth=4),
    dict(interaction_cst=[[0, 1], [2, 3, 4]], min_samples_leaf=40),
])
def test_resumed_replays_give_the_same_trees_and_rounds(monkeypatch, params):
    X, y, clients = _data()
    params = dict(max_iter=4, early_stopping=False, **params)
    fits, splits = [], []
    for resume in (True, False):
        with monkeypatch.context() as m:
            calls = _counting(m, resume)
            fits.append(FedHistGradientBoostingRegressor(**params).fit(X, y, clients=clients))
        splits.append(calls["splits"])
    resumed, fresh = fits
    for a, b in zip(resumed._predictors, fresh._predictors):
        for ta, tb in zip(a, b):
            assert np.array_equal(ta.nodes, tb.nodes)
    assert np.array_equal(resumed.history_["rounds"], fresh.history_["rounds"])
    assert np.array_equal(resumed.history_["histograms"], fresh.history_["histograms"])
    assert splits[0] < splits[1]
    # and scikit-learn's trees, on the pooled rows in the sites' order
    order = np.argsort(clients, kind="stable")
    ref = HistGradientBoostingRegressor(**params).fit(X[order], y[order])
    for a, b in zip(resumed._predictors, ref._predictors):
        assert np.array_equal(a[0].nodes["feature_idx"], b[0].nodes["feature_idx"])
        np.testing.assert_allclose(a[0].nodes["value"], b[0].nodes["value"], rtol=1e-10)


def test_feature_draws_replay_from_the_root(monkeypatch):
    """With max_features < 1 a replay reads the generator: it never resumes."""
    X, y, clients = _data(n=1500)
    with monkeypatch.context() as m:
        calls = _counting(m, True)
        resumed = FedHistGradientBoostingRegressor(
            max_iter=2, early_stopping=False, max_features=0.5, random_state=0).fit(
            X, y, clients=clients)
    with monkeypatch.context() as m:
        fresh_calls = _counting(m, False)
        fresh = FedHistGradientBoostingRegressor(
            max_iter=2, early_stopping=False, max_features=0.5, random_state=0).fit(
            X, y, clients=clients)
    assert calls["splits"] == fresh_calls["splits"]
    for a, b in zip(resumed._predictors, fresh._predictors):
        assert np.array_equal(a[0].nodes, b[0].nodes)
