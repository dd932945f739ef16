"""Federated model selection: folds of whole sites, scores from the sites' sums."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut
from sklearn.preprocessing import StandardScaler

from skfed import FedLasso, FedLogisticRegression
from skfed.data import FederatedDataset
from skfed.model_selection import (FederatedGridSearchCV, LeaveOneSiteOut, SiteKFold,
                                   cross_validate_sites, site_scores)


@pytest.fixture(scope="module")
def diabetes_sites():
    X, y = load_diabetes(return_X_y=True)
    site = np.searchsorted(np.quantile(X[:, 2], [0.2, 0.4, 0.6, 0.8]), X[:, 2])
    return X, y, site


@pytest.fixture(scope="module")
def cancer_sites():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)[:, :10]
    return X, y, np.arange(len(y)) % 4


def test_leave_one_site_out_is_leave_one_group_out(diabetes_sites):
    X, y, site = diabetes_sites
    data = FederatedDataset.from_arrays(X, y, site)
    out = cross_validate_sites(FedLasso(alpha=0.1, tol=1e-8), data, cv=LeaveOneSiteOut())
    assert out["test_sites"] == [[s] for s in range(5)]
    for k, (train, test) in enumerate(LeaveOneGroupOut().split(X, y, site)):
        ref = FedLasso(alpha=0.1, tol=1e-8).fit(X[train], y[train], clients=site[train])
        assert out["test_score"][k] == pytest.approx(r2_score(y[test], ref.predict(X[test])),
                                                     rel=1e-12)
        assert out["site_scores"][k] == {k: pytest.approx(out["test_score"][k], rel=1e-15)}
        assert out["n_rounds"][k] == ref.n_iter_


def test_site_kfold_balances_rows_like_group_kfold(diabetes_sites):
    X, y, site = diabetes_sites
    data = FederatedDataset.from_arrays(X, y, site)
    ours = [sorted(test) for _, test in SiteKFold(n_splits=2).split(data)]
    theirs = [sorted(np.unique(site[test])) for _, test in GroupKFold(2).split(X, y, site)]
    assert sorted(ours) == sorted(theirs)
    shuffled = [t for _, t in SiteKFold(3, shuffle=True, random_state=0).split(data)]
    assert sorted(s for t in shuffled for s in t) == list(range(5))
    with pytest.raises(ValueError, match="needs at least 6 sites"):
        list(SiteKFold(6).split(data))
    with pytest.raises(ValueError, match="n_splits must be an int >= 2"):
        SiteKFold(1)


def test_site_scores_are_the_pooled_scores(cancer_sites):
    X, y, site = cancer_sites
    data = FederatedDataset.from_arrays(X, y, site)
    est = FedLogisticRegression(C=0.3).fit(data)
    pooled, per_site = site_scores(est, data)
    assert pooled == pytest.approx(accuracy_score(y, est.predict(X)), abs=1e-15)
    for s in range(4):
        assert per_site[s] == pytest.approx(accuracy_score(y[site == s],
                                                           est.predict(X[site == s])))
    with pytest.raises(TypeError, match="takes a FederatedDataset"):
        site_scores(est, X)


def test_grid_search_over_sites(diabetes_sites):
    X, y, site = diabetes_sites
    data = FederatedDataset.from_arrays(X, y, site)
    grid = {"alpha": [0.1, 0.3, 3.0], "solver": ["dualfl", "feddyn"]}
    search = FederatedGridSearchCV(FedLasso(tol=1e-7, max_rounds=3000), grid, cv=3).fit(data)
    results = search.cv_results_
    assert len(results["params"]) == 6 and search.n_splits_ == 3
    # the same folds by hand: each candidate's mean score
    for k, params in enumerate(results["params"]):
        out = cross_validate_sites(FedLasso(tol=1e-7, max_rounds=3000, **params), data,
                                   cv=SiteKFold(3))
        assert results["mean_test_score"][k] == pytest.approx(np.mean(out["test_score"]))
        assert [sorted(f) for f in results["site_scores"][k]] == [sorted(f) for f in
                                                                  out["test_sites"]]
    best = int(np.argmax(results["mean_test_score"]))
    assert search.best_params_ == results["params"][best]
    assert results["rank_test_score"][best] == 1
    ref = FedLasso(tol=1e-7, max_rounds=3000, **search.best_params_).fit(X, y, clients=site)
    np.testing.assert_allclose(search.best_estimator_.coef_, ref.coef_)
    assert search.score(data) == pytest.approx(ref.score(X, y), rel=1e-12)
    with pytest.raises(ValueError, match="carries its own target"):
        search.fit(data, y)
    with pytest.raises(TypeError, match="takes a FederatedDataset"):
        search.fit(X)


def test_an_estimator_that_takes_missing_values_is_scored_with_them():
    """Scoring at the sites follows the estimator's own missing-value rule (its
    ``allow_nan`` tag): boosted trees score rows with gaps; a Lasso's fit refuses them,
    naming the column."""
    from skfed import FedHistGradientBoostingRegressor, FedLasso, FederatedDataset
    from skfed.data.site import SiteError

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = X[:, 0] + rng.normal(size=300)
    X[::7, 1] = np.nan
    data = FederatedDataset.from_arrays(X, y, np.repeat([0, 1, 2], 100))
    result = cross_validate_sites(FedHistGradientBoostingRegressor(max_iter=10), data)
    assert np.all(np.isfinite(result["test_score"]))
    pooled, _ = site_scores(FedHistGradientBoostingRegressor(max_iter=10).fit(data), data)
    assert 0 < pooled < 1
    with pytest.raises(SiteError, match="column 1 contains NaN"):
        cross_validate_sites(FedLasso(alpha=0.1), data)
