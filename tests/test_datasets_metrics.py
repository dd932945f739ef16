"""Client simulation, the FCO synthetic generator, and support metrics."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris

from skfed.datasets import (LASSO_CONFIGS, make_federated_fmri_like, make_federated_lasso,
                            simulate_clients)
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


def test_make_federated_fmri_like_structure():
    """Sessions are clients, half the scans of each show each stimulus, more voxels than scans."""
    X_, y_, sessions, subjects, pattern = make_federated_fmri_like(
        n_subjects=3, n_sessions=4, n_scans=18, n_voxels=300, n_active=12, random_state=0)
    assert X_.shape == (3 * 4 * 18, 300) and X_.shape[1] > np.bincount(sessions).max()
    assert np.bincount(sessions).tolist() == [18] * 12
    assert np.bincount(subjects).tolist() == [72] * 3
    assert all(np.unique(subjects[sessions == s]).size == 1 for s in range(12))
    assert all(y_[sessions == s].sum() == 9 for s in range(12))
    assert np.count_nonzero(pattern) == 12
    assert np.all((np.abs(pattern[pattern != 0]) >= 0.1) & (np.abs(pattern[pattern != 0]) <= 0.3))
    # the stimulus moves the active voxels only: class means differ there, not elsewhere
    diff = X_[y_ == 1].mean(axis=0) - X_[y_ == 0].mean(axis=0)
    active = pattern != 0
    assert np.all(np.sign(diff[active]) == np.sign(pattern[active]))
    assert np.abs(diff[~active]).mean() < 0.5 * np.abs(diff[active]).mean()
    # subjects differ (anatomy): their mean scans are far apart compared with the noise
    means = np.array([X_[subjects == s].mean(axis=0) for s in range(3)])
    assert np.linalg.norm(means[0] - means[1]) / np.sqrt(300) > 0.5
    X2 = make_federated_fmri_like(n_subjects=3, n_sessions=4, n_voxels=300, n_active=12,
                                  random_state=0)[0]
    np.testing.assert_array_equal(X_, X2)
    with pytest.raises(ValueError, match="n_active"):
        make_federated_fmri_like(n_voxels=10, n_active=11)
    with pytest.raises(ValueError, match="even"):
        make_federated_fmri_like(n_scans=17)


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
