"""Federated preprocessing on a FederatedDataset: the same statistics as on the pooled rows,
computed from summaries the sites send, and transforms that run at the sites."""

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_diabetes
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from skfed import FedLasso, FedLogisticRegression
from skfed.data import FederatedDataset
from skfed.preprocessing import FedOneHotEncoder, FedSimpleImputer, FedStandardScaler


@pytest.fixture(scope="module")
def table():
    X, y = load_diabetes(return_X_y=True)
    # quantile sites of bmi: strongly shifted means
    site = np.searchsorted(np.quantile(X[:, 2], [0.3, 0.6]), X[:, 2])
    X = X.copy()
    X[::7, 3] = np.nan
    X[site == 2, 5] = np.nan  # one site never observes feature 5
    return X, y, site


def test_scaler_on_a_dataset_uses_its_weights(table):
    X, y, site = table
    X = np.nan_to_num(X)
    sw = 1.0 + np.arange(len(y)) % 3
    data = FederatedDataset.from_arrays(X, y, site, sw)
    ours = FedStandardScaler().fit(data)
    ref = StandardScaler().fit(X, sample_weight=sw)
    np.testing.assert_allclose(ours.mean_, ref.mean_, rtol=1e-13, atol=1e-17)
    np.testing.assert_allclose(ours.scale_, ref.scale_, rtol=1e-13)
    assert ours.n_clients_ == 3
    transformed = ours.transform(data)
    assert isinstance(transformed, FederatedDataset) and transformed.sites == [0, 1, 2]
    rows = transformed.map(lambda s: s.X)
    np.testing.assert_allclose(rows[1], ref.transform(X[site == 1]), rtol=1e-12, atol=1e-14)
    # targets and weights stay with their rows
    np.testing.assert_array_equal(transformed.map(lambda s: s.sample_weight)[2], sw[site == 2])


@pytest.mark.parametrize("strategy", ["mean", "median", "most_frequent", "constant"])
def test_imputer_on_a_dataset_is_sklearns_on_the_pooled_rows(table, strategy):
    X, y, site = table
    data = FederatedDataset.from_arrays(X, y, site)
    ours = FedSimpleImputer(strategy=strategy, keep_empty_features=True).fit(data)
    ref = SimpleImputer(strategy=strategy, keep_empty_features=True).fit(X)
    # diabetes features are centred: means are ~1e-17, so an absolute tolerance
    np.testing.assert_allclose(ours.statistics_.astype(float), ref.statistics_.astype(float),
                               rtol=1e-12, atol=1e-15)
    arrays = FedSimpleImputer(strategy=strategy, keep_empty_features=True).fit(X, clients=site)
    np.testing.assert_array_equal(ours.statistics_, arrays.statistics_)
    out = ours.transform(data).map(lambda s: s.X)
    np.testing.assert_allclose(out[0], ref.transform(X[site == 0]))


def test_one_hot_from_the_union_of_site_categories():
    ward = np.array(["icu", "er", "ward", "er", "icu", "surgery"] * 10)
    site = np.repeat([0, 1, 2], 20)
    ward[site == 0] = np.where(ward[site == 0] == "surgery", "er", ward[site == 0])  # site 0 lacks one
    frame = pd.DataFrame({"ward": ward, "unit": np.arange(60) % 4})
    data = FederatedDataset.from_arrays(frame, np.arange(60.0), site)
    ours = FedOneHotEncoder().fit(data)
    ref = OneHotEncoder(sparse_output=False).fit(frame)
    for a, b in zip(ours.categories_, ref.categories_):
        np.testing.assert_array_equal(a, b)
    out = ours.transform(data)
    assert out.n_features == sum(len(c) for c in ref.categories_)
    np.testing.assert_array_equal(out.map(lambda s: s.X)[0], ref.transform(frame[site == 0]))
    np.testing.assert_array_equal(ours.get_feature_names_out(), ref.get_feature_names_out())


def test_pipeline_on_a_dataset_equals_the_pipeline_on_arrays(table):
    X, y, site = table
    data = FederatedDataset.from_arrays(X, y, site)
    steps = lambda: [FedSimpleImputer(strategy="median"), FedStandardScaler()]  # noqa: E731
    ours = make_pipeline(*steps(), FedLasso(alpha=0.1, tol=1e-10)).fit(data)
    arrays = make_pipeline(*steps(), FedLasso(alpha=0.1, tol=1e-10)).fit(
        X, y, fedsimpleimputer__clients=site, fedstandardscaler__clients=site,
        fedlasso__clients=site)
    np.testing.assert_allclose(ours[-1].coef_, arrays[-1].coef_, rtol=1e-12, atol=1e-12)
    # the pooled pipeline: scikit-learn's imputer and scaler on all rows
    pooled = make_pipeline(SimpleImputer(strategy="median"), StandardScaler(),
                           FedLasso(alpha=0.1, tol=1e-10)).fit(X, y, fedlasso__clients=site)
    np.testing.assert_allclose(ours[-1].coef_, pooled[-1].coef_, rtol=1e-9, atol=1e-10)
    assert ours.score(data) == pytest.approx(arrays.score(X, y), rel=1e-12)
    per_site = ours.predict(data)
    np.testing.assert_allclose(per_site[1], arrays.predict(X[site == 1]), rtol=1e-12)


def test_a_dataset_refuses_clients_beside_it(table):
    X, y, site = table
    data = FederatedDataset.from_arrays(np.nan_to_num(X), y, site)
    with pytest.raises(ValueError, match="carries its own sites and weights; do not pass "
                                         "sample_weight="):
        FedStandardScaler().fit(data, sample_weight=np.ones(len(y)))
    with pytest.raises(ValueError, match="do not pass clients="):
        FedSimpleImputer().fit(data, clients=site)


def test_text_in_a_numeric_strategy_names_the_site_and_column():
    frame = pd.DataFrame({"age": [30.0, 40, 50, 60], "ward": ["a", "b", "a", "b"]})
    data = FederatedDataset.from_arrays(frame, [0, 1, 0, 1], [0, 0, 1, 1])
    with pytest.raises(ValueError, match="mean strategy with non-numeric data"):
        FedSimpleImputer(strategy="mean").fit(data)
    enc = make_pipeline(FedOneHotEncoder(handle_unknown="ignore"),
                        FedLogisticRegression()).fit(data.apply(_only_ward))
    assert enc[-1].coef_.shape == (1, 2)


def _only_ward(site):
    return site.replace(X=site.X[["ward"]])
