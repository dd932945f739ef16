"""Client simulation, the FCO synthetic generator, and support metrics."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris

from skfed.datasets import LASSO_CONFIGS, make_federated_lasso, simulate_clients
from skfed.metrics import density, relative_suboptimality, support_scores

X, y = load_diabetes(return_X_y=True)


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "kmeans", "quantile"])
def test_every_client_gets_samples(scheme):
    labels = simulate_clients(X, y, 7, scheme=scheme, random_state=0)
    assert labels.shape == y.shape
    assert set(np.unique(labels)) == set(range(7))


def test_iid_is_balanced_and_seeded():
    labels = simulate_clients(X, y, 5, scheme="iid", random_state=1)
    assert np.bincount(labels).max() - np.bincount(labels).min() <= 1
    np.testing.assert_array_equal(labels, simulate_clients(X, y, 5, random_state=1))


def test_quantile_orders_clients_by_target_or_feature():
    labels = simulate_clients(X, y, 4, scheme="quantile")
    means = [y[labels == c].mean() for c in range(4)]
    assert means == sorted(means)
    assert y[labels == 0].max() <= y[labels == 1].min()
    labels = simulate_clients(X, y, 4, scheme="quantile", feature=2)
    assert X[labels == 0, 2].max() <= X[labels == 3, 2].min()


def test_dirichlet_skews_labels():
    Xi, yi = load_iris(return_X_y=True)
    labels = simulate_clients(Xi, yi, 5, scheme="dirichlet", alpha=0.05, random_state=0)
    # with alpha this small, most clients are dominated by one class
    purity = [np.bincount(yi[labels == c]).max() / (labels == c).sum() for c in range(5)]
    assert np.median(purity) > 0.8


def test_simulate_clients_errors():
    with pytest.raises(ValueError, match="scheme must be one of"):
        simulate_clients(X, y, 3, scheme="random")
    with pytest.raises(ValueError, match="n_clients must be between 1 and"):
        simulate_clients(X, y, 0)


@pytest.mark.parametrize("config", sorted(LASSO_CONFIGS))
def test_make_federated_lasso_configs(config):
    d1, M, n_m = LASSO_CONFIGS[config]
    X_, y_, clients, w = make_federated_lasso(config, n_features=1024, random_state=0)
    assert X_.shape == (M * n_m, 1024) and y_.shape == (M * n_m,)
    assert np.bincount(clients).tolist() == [n_m] * M
    assert w.sum() == d1 and np.all(w[:d1] == 1) and np.all(w[d1:] == 0)


def test_make_federated_lasso_heterogeneity():
    X_, y_, clients, w = make_federated_lasso("III", n_features=20, n_clients=4,
                                              n_samples_per_client=500, random_state=0)
    means = np.array([X_[clients == c].mean(axis=0) for c in range(4)])
    within = np.array([X_[clients == c].std(axis=0) for c in range(4)])
    assert np.all(np.abs(within - 1) < 0.15)  # delta ~ N(0, I) inside a client
    assert means.std(axis=0).mean() > 0.5  # mu_m differ across clients
    resid = y_ - X_ @ w
    assert abs(resid.std() - 1.0) < 0.1  # label noise N(0, 1) around a common bias


def test_support_scores():
    true = np.array([1.0, 1.0, 0.0, 0.0])
    s = support_scores(np.array([0.5, 0.0, 0.2, 0.001]), true)
    assert s == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "density": 0.5}
    assert support_scores(np.zeros(4), true)["f1"] == 0.0
    assert support_scores(true, true)["f1"] == 1.0
    assert density(np.array([0.5, 1e-3]), cutoff=1e-4) == 1.0
    with pytest.raises(ValueError, match="coef has 3 entries"):
        support_scores(np.ones(3), true)
    assert relative_suboptimality(2.0, 1.0) == 1.0
