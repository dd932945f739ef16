"""A boosting fit's histograms in one pass where the sites' rows are in this process
(issue 37, item 6; :mod:`skfed.ensemble._pooled_sites`).

The pooled pass computes each row's terms as its site does and adds them in site
order; the per-site pass (Dask, site services, ``BoostingRun.pools_sites = False``)
rounds at each site's sum and again at the server's. The fits must be the same model:
the same trees node for node, the same rounds and bytes in ``history_``, and the same
losses bit for bit (they are summed site by site both ways).
"""

import numpy as np
import pytest
from sklearn.datasets import make_classification

from skfed.ensemble import FedHistGradientBoostingClassifier, FedHistGradientBoostingRegressor
from skfed.ensemble._fit import BoostingRun
from skfed.ensemble._fit_state import STORE
from skfed.ensemble._pooled_sites import PooledSites
from skfed.privacy import SecureAggregation

from .test_boosting_masked import NODE_FIELDS


def _classification(n_classes=2, n=3000, seed=0):
    X, y = make_classification(n_samples=n, n_features=8, n_informative=5,
                               n_classes=n_classes, random_state=seed)
    X[::23, 3] = np.nan
    # heterogeneous sites: split by the first feature's quantiles, unequal sizes
    site = np.digitize(X[:, 0], np.quantile(X[:, 0], [0.15, 0.5, 0.6]))
    return X, y, site


def _regression(n=3000, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    X[::17, 2] = np.nan
    y = X[:, 0] + np.sin(X[:, 1]) + np.nan_to_num(X[:, 2]) + 0.3 * rng.normal(size=n)
    w = rng.uniform(0.2, 3.0, size=n)
    return X, y, np.arange(n) % 3, w


class _Spy:
    """Counts the pooled sums a fit ran."""

    def __init__(self, monkeypatch):
        self.calls, original = 0, PooledSites.reply

        def counted(pooled, fn, *args):
            self.calls += 1
            return original(pooled, fn, *args)

        monkeypatch.setattr(PooledSites, "reply", counted)


def _fit_both(monkeypatch, make, X, y, site, **fit_params):
    spy = _Spy(monkeypatch)
    pooled = make().fit(X, y, clients=site, **fit_params)
    assert spy.calls > 0
    monkeypatch.setattr(BoostingRun, "pools_sites", False)
    calls = spy.calls
    per_site = make().fit(X, y, clients=site, **fit_params)
    assert spy.calls == calls  # one pass per site: no pooled sum
    monkeypatch.setattr(BoostingRun, "pools_sites", True)
    return pooled, per_site


def assert_same_model(pooled, per_site):
    """The same trees node for node (leaf values to round-off: a histogram sum rounds
    at other places), the same rounds, bytes and histograms, the same losses."""
    assert pooled.n_iter_ == per_site.n_iter_
    for ours, theirs in zip(pooled._predictors, per_site._predictors):
        for a, b in zip(ours, theirs):
            for field in NODE_FIELDS:
                if a.nodes[field].dtype.kind == "f":
                    np.testing.assert_allclose(a.nodes[field], b.nodes[field], rtol=1e-13,
                                               atol=1e-15, err_msg=field)
                else:
                    np.testing.assert_array_equal(a.nodes[field], b.nodes[field], field)
    for field in ("rounds", "bytes", "histograms", "n_leaves", "max_depth"):
        np.testing.assert_array_equal(pooled.history_[field], per_site.history_[field],
                                      err_msg=field)
    assert pooled.history_.setup_bytes == per_site.history_.setup_bytes
    assert pooled.history_.monitor_bytes == per_site.history_.monitor_bytes
    assert pooled.history_.monitor_rounds == per_site.history_.monitor_rounds
    np.testing.assert_array_equal(pooled.history_["train_loss"],
                                  per_site.history_["train_loss"])
    np.testing.assert_array_equal(pooled.train_score_, per_site.train_score_)
    np.testing.assert_array_equal(pooled.validation_score_, per_site.validation_score_)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_pooled_classification_is_the_per_site_fit(monkeypatch, n_classes):
    X, y, site = _classification(n_classes)
    pooled, per_site = _fit_both(monkeypatch, lambda: FedHistGradientBoostingClassifier(
        max_iter=15, max_leaf_nodes=12, early_stopping=False, random_state=0), X, y, site)
    assert_same_model(pooled, per_site)
    np.testing.assert_allclose(pooled.predict_proba(X), per_site.predict_proba(X),
                               rtol=1e-12, atol=1e-14)


def test_pooled_weighted_regression_with_missing_values(monkeypatch):
    X, y, site, w = _regression()
    pooled, per_site = _fit_both(monkeypatch, lambda: FedHistGradientBoostingRegressor(
        max_iter=15, early_stopping=False, random_state=0), X, y, site, sample_weight=w)
    assert_same_model(pooled, per_site)


@pytest.mark.parametrize("validation_fraction", [None, 0.2])
def test_pooled_early_stopping_stops_where_the_per_site_fit_does(monkeypatch,
                                                                  validation_fraction):
    """Scored on the training loss (summed site by site: the same bits, so the same
    stop) or on held-out rows (per site either way)."""
    X, y, site = _classification()
    pooled, per_site = _fit_both(monkeypatch, lambda: FedHistGradientBoostingClassifier(
        max_iter=200, early_stopping=True, validation_fraction=validation_fraction,
        n_iter_no_change=3, learning_rate=0.5, random_state=0), X, y, site)
    assert pooled.n_iter_ < 200
    assert_same_model(pooled, per_site)


def test_quantile_loss_refits_leaves_per_site_on_the_pooled_trees(monkeypatch):
    X, y, site, _ = _regression()
    pooled, per_site = _fit_both(monkeypatch, lambda: FedHistGradientBoostingRegressor(
        loss="quantile", quantile=0.7, max_iter=6, early_stopping=False, random_state=0),
        X, y, site)
    assert_same_model(pooled, per_site)


def test_no_pooled_pass_when_masked_or_one_site(monkeypatch):
    """A masked sum masks each site's own reply; a single site has nothing to pool."""
    X, y, site = _classification(n=1200)
    spy = _Spy(monkeypatch)
    FedHistGradientBoostingClassifier(max_iter=2, early_stopping=False,
                                      privacy=SecureAggregation()).fit(X, y, clients=site)
    FedHistGradientBoostingClassifier(max_iter=2, early_stopping=False).fit(
        X, y, clients=np.zeros(len(y), dtype=int))
    assert spy.calls == 0


def test_a_pooled_state_lost_mid_fit_is_rebuilt_and_the_trees_do_not_change(monkeypatch):
    X, y, site = _classification()

    def make():
        return FedHistGradientBoostingClassifier(max_iter=8, early_stopping=False,
                                                 random_state=0)

    expected = make().fit(X, y, clients=site)
    original, seen = PooledSites.reply, []

    def dropping(pooled, fn, *args):
        seen.append(1)
        if len(seen) == 30:
            STORE.states.clear()
        return original(pooled, fn, *args)

    monkeypatch.setattr(PooledSites, "reply", dropping)
    fitted = make().fit(X, y, clients=site)
    assert len(seen) > 30
    assert_same_model(fitted, expected)
    np.testing.assert_array_equal(fitted.predict_proba(X), expected.predict_proba(X))


@pytest.mark.parametrize("options", [
    dict(categorical_features="from_dtype"), dict(interaction_cst=[[0, 1], [2, 3]]),
    dict(max_features=0.5), dict(class_weight="balanced")])
def test_pooled_fit_with_categories_constraints_draws_and_class_weights(monkeypatch,
                                                                       options):
    """Node requests over a subset of features, categorical splits (bitsets) and class
    weights (applied by each site to its own rows) pool as the plain case does."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 3000
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n),
                          "c": pd.Categorical(rng.choice(list("xyzw"), size=n)),
                          "d": rng.integers(0, 5, n).astype(float)})
    y = (frame.a + (frame.c == "x") + rng.normal(size=n) > 0.8).astype(int)
    site = rng.integers(0, 3, n)
    pooled, per_site = _fit_both(monkeypatch, lambda: FedHistGradientBoostingClassifier(
        max_iter=8, early_stopping=False, random_state=0, **options), frame, y, site)
    assert_same_model(pooled, per_site)
