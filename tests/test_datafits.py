"""Datafits: gradients against finite differences, smoothness bounds against Hessians."""

import numpy as np
import pytest
import scipy.sparse as sp

from skfed._layout import Layout
from skfed.datafits import ClientObjective, Quadratic


def make_client(n=15, d=4, k=1, fit_intercept=True, sparse=False, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) + 2.0
    if sparse:
        X[rng.random((n, d)) < 0.5] = 0.0
        X = sp.csr_matrix(X)
    Y = rng.standard_normal((n, k))
    sw = rng.uniform(0.1, 2.0, n)
    lay = Layout(n_outputs=k, n_features=d, fit_intercept=fit_intercept)
    return ClientObjective(Quadratic(), X, Y, sw, lay), rng


def hessian(client):
    """Exact Hessian of the mean quadratic loss (single output)."""
    X = client.X.toarray() if sp.issparse(client.X) else client.X
    if client.layout.fit_intercept:
        X = np.column_stack([X, np.ones(len(X))])
    return X.T @ (X * client.sample_weight[:, None]) / client.weight_sum


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("k", [1, 3])
def test_gradient_matches_finite_differences(sparse, fit_intercept, k):
    client, rng = make_client(k=k, fit_intercept=fit_intercept, sparse=sparse)
    theta = rng.standard_normal(client.layout.size)
    _, g = client.value_and_gradient(theta)
    eps = 1e-6
    fd = np.array([(client.value(theta + eps * e) - client.value(theta - eps * e)) / (2 * eps)
                   for e in np.eye(theta.size)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_minibatch_gradient_is_the_gradient_of_those_rows():
    client, rng = make_client()
    theta = rng.standard_normal(client.layout.size)
    rows = np.array([1, 4, 7])
    sub = ClientObjective(Quadratic(), client.X[rows], client.Y[rows],
                          client.sample_weight[rows], client.layout)
    np.testing.assert_allclose(client.gradient(theta, rows), sub.gradient(theta))


def test_value_is_weighted_mean_half_squared_error():
    client, rng = make_client()
    theta = rng.standard_normal(client.layout.size)
    r = client.X @ theta[:4] + theta[4] - client.Y[:, 0]
    expected = 0.5 * np.sum(client.sample_weight * r**2) / client.sample_weight.sum()
    assert client.value(theta) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_lipschitz_bounds_are_valid_and_tight(sparse):
    client, rng = make_client(n=40, d=6, sparse=sparse)
    L = client.lipschitz()
    H = hessian(client)
    assert L["coef"] == pytest.approx(np.linalg.eigvalsh(H[:6, :6])[-1], rel=1e-10)
    assert L["intercept"] == pytest.approx(1.0)
    D = np.diag(1 / np.sqrt(np.r_[np.full(6, L["coef"]), L["intercept"]]))
    top = np.linalg.eigvalsh(D @ H @ D)[-1]
    assert top >= 1.0  # the scaled blocks have top eigenvalue 1 each
    assert top <= L["joint"] + 1e-12
    assert L["joint"] <= 2.0
    # row bound: any minibatch mean loss is at most that rough
    X = client.X.toarray() if sparse else client.X
    for _ in range(20):
        rows = rng.choice(40, 5, replace=False)
        Hb = X[rows].T @ (X[rows] * client.sample_weight[rows, None]) / client.sample_weight[rows].sum()
        assert np.linalg.eigvalsh(Hb)[-1] <= L["row"] * (1 + 1e-12)


def test_lipschitz_wide_client_uses_small_gram():
    client, _ = make_client(n=5, d=300)
    H = hessian(client)
    assert client.lipschitz()["coef"] == pytest.approx(np.linalg.eigvalsh(H[:300, :300])[-1])
