"""Federated boosting as a scikit-learn estimator: checks, pipelines, searches, bad input."""

import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import parametrize_with_checks
from threadpoolctl import threadpool_limits

from skfed.data import FederatedDataset, SiteError
from skfed.ensemble import FedHistGradientBoostingClassifier, FedHistGradientBoostingRegressor

SLOW = {"check_class_weight_classifiers":
        "fits max_iter=1000 multiclass iterations (minutes in process); class weights are "
        "checked against scikit-learn in test_hist_gradient_boosting.py"}


@pytest.fixture(autouse=True)
def one_openmp_thread():
    with threadpool_limits(limits=1, user_api="openmp"):
        yield


@parametrize_with_checks([FedHistGradientBoostingRegressor(max_iter=5),
                          FedHistGradientBoostingClassifier(max_iter=5)])
def test_sklearn_estimator_checks(estimator, check):
    name = getattr(check, "func", check).__name__
    if name in SLOW:
        pytest.skip(SLOW[name])
    check(estimator)


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X[:, 0] + rng.normal(scale=0.3, size=n)
    return X, y, rng.integers(0, 3, n)


def test_pipeline_and_grid_search_over_sites():
    X, y, site = _data()
    pipe = make_pipeline(FunctionTransformer(), FedHistGradientBoostingRegressor(
        max_iter=3, early_stopping=False))
    pipe.fit(X, y, fedhistgradientboostingregressor__clients=site)
    assert pipe[-1].n_clients_ == 3
    search = GridSearchCV(FedHistGradientBoostingRegressor(max_iter=3, early_stopping=False),
                          {"max_leaf_nodes": [4, 8]}, cv=GroupKFold(n_splits=3))
    search.fit(X, y, groups=site, clients=site)
    assert search.best_params_["max_leaf_nodes"] in (4, 8)
    assert search.best_estimator_.n_clients_ == 3


def test_no_categorical_features_is_scikit_learns_model():
    """``categorical_features=None`` (what ``skfed fit`` passes without --categorical):
    scikit-learn's model, tree for tree (the sites once got None for their mask)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    X, y, site = _data()
    params = dict(max_iter=4, early_stopping=False, categorical_features=None)
    fed = FedHistGradientBoostingRegressor(**params).fit(X, y, clients=site)
    pooled = HistGradientBoostingRegressor(**params).fit(X, y)
    assert fed.is_categorical_ is None and pooled.is_categorical_ is None
    for mine, theirs in zip(fed._predictors, pooled._predictors):
        for field in ("feature_idx", "num_threshold", "is_leaf"):
            np.testing.assert_array_equal(mine[0].nodes[field], theirs[0].nodes[field])
    np.testing.assert_allclose(fed.predict(X), pooled.predict(X), rtol=1e-12)


# -- bad input gets a clear error -------------------------------------------------
@pytest.mark.parametrize("params, match", [
    ({"warm_start": True}, "warm_start=True"),
    ({"scoring": "r2"}, "scoring='r2'"),
    ({"loss": "quantile"}, "quantile parameter"),
    ({"max_bins": 300}, "max_bins"),
])
def test_unsupported_or_invalid_parameters(params, match):
    X, y, site = _data(100)
    with pytest.raises(ValueError, match=match):
        FedHistGradientBoostingRegressor(**params).fit(X, y, clients=site)


def test_nan_in_y_and_mismatched_lengths():
    X, y, site = _data(100)
    y[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FedHistGradientBoostingRegressor().fit(X, y, clients=site)
    data = FederatedDataset.from_arrays(X, y, site)
    with pytest.raises(SiteError, match=f"site {site[3]}: the target has 1 NaN"):
        FedHistGradientBoostingRegressor().fit(data)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        FedHistGradientBoostingRegressor().fit(X, np.ones(99), clients=site)


def test_negative_poisson_target_names_the_site():
    X, y, site = _data(100)
    y = np.abs(y)
    y[site == 2] *= -1
    data = FederatedDataset.from_arrays(X, y, site)
    with pytest.raises(SiteError, match="site 2: loss='poisson' requires non-negative y"):
        FedHistGradientBoostingRegressor(loss="poisson").fit(data)


def test_categories_beyond_max_bins_across_the_sites():
    rng = np.random.default_rng(0)
    n = 200
    levels = np.where(np.arange(n) < 100, rng.integers(0, 8, n), rng.integers(8, 16, n))
    X = pd.DataFrame({"level": pd.Categorical(levels), "x": rng.normal(size=n)})
    site = (np.arange(n) >= 100).astype(int)  # 8 levels at each site, 16 in all
    with pytest.raises(ValueError, match="cardinality of 16 across the sites"):
        FedHistGradientBoostingRegressor(max_bins=10).fit(X, rng.normal(size=n), clients=site)


def test_text_column_must_be_declared_categorical():
    X = pd.DataFrame({"town": ["a", "b"] * 50, "x": np.arange(100.0)})
    with pytest.raises(ValueError, match="column 'town' is not numeric"):
        FedHistGradientBoostingRegressor().fit(X, np.arange(100.0), clients=np.arange(100) % 2)


def test_monotonic_constraints_refused_for_multiclass():
    X, y, site = _data(150)
    with pytest.raises(ValueError, match="not supported for multiclass"):
        FedHistGradientBoostingClassifier(monotonic_cst=[1, 0, 0]).fit(
            X, np.digitize(y, [-0.5, 0.5]), clients=site)


def test_an_empty_site_is_refused_by_name():
    X, y, _ = _data(60)
    parts = FederatedDataset.from_arrays(X, y, np.arange(60) % 2)
    empty = parts.apply(_drop_rows_of, 1)
    with pytest.raises(SiteError, match="site 1: no rows"):
        FedHistGradientBoostingRegressor().fit(empty)


def _drop_rows_of(site, label):
    if site.site != label:
        return site
    return site.replace(X=site.X[:0], y=site.y[:0])


def test_a_site_with_one_class_is_fine_and_a_failed_fit_changes_nothing():
    X, y, _ = _data(300)
    labels = (y > 0).astype(int)
    site = labels  # each site holds one class
    clf = FedHistGradientBoostingClassifier(max_iter=3, early_stopping=False)
    clf.fit(X, labels, clients=site)
    np.testing.assert_array_equal(clf.classes_, [0, 1])
    before = clf._predictors
    with pytest.raises(ValueError):
        clf.set_params(warm_start=True).fit(X, labels, clients=site)
    assert clf._predictors is before


def test_a_class_only_in_held_out_rows_is_named():
    from skfed.data.site import held_out_mask

    rng = np.random.default_rng(2)
    n = 10_050  # early stopping on: each site holds out its own rows
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] > 0).astype(int)
    site = np.arange(n) % 2
    seed = np.random.RandomState(0).randint(np.iinfo(np.uint32).max, dtype="u8")
    held = FederatedDataset.from_arrays(X, y, site).map(
        lambda s: held_out_mask(s, 0.1, int(seed)))[0]
    y[np.flatnonzero(site == 0)[np.flatnonzero(held)[0]]] = 7  # only a held-out row has it
    with pytest.raises(SiteError, match="class 7 is not among the classes of the training"):
        FedHistGradientBoostingClassifier(max_iter=2, random_state=0).fit(
            FederatedDataset.from_arrays(X, y, site))


def test_cross_validate_sites():
    from skfed.model_selection import cross_validate_sites

    X, y, site = _data(450)
    result = cross_validate_sites(FedHistGradientBoostingRegressor(max_iter=4),
                                  FederatedDataset.from_arrays(X, y, site))
    assert len(result["test_score"]) == 3 and result["n_rounds"] == [4, 4, 4]
    assert all(0 < s < 1 for s in result["test_score"])
