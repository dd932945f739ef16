"""Datafits: gradients against finite differences, smoothness bounds against Hessians."""

import numpy as np
import pytest
import scipy.sparse as sp

from skfed.federation.layout import Layout
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


# --- the classification losses --------------------------------------------
from scipy.special import expit, logsumexp  # noqa: E402

from skfed.datafits import Gamma, Hinge, Logistic, Multinomial, Poisson, SquaredHinge  # noqa: E402


def _targets(fit, rng, n, k):
    if isinstance(fit, Multinomial):
        return np.eye(k)[rng.integers(0, k, n)]
    return np.where(rng.random((n, k)) > 0.5, 1.0, -1.0)


@pytest.mark.parametrize("fit, k", [(Logistic(), 1), (Multinomial(), 3), (SquaredHinge(), 1),
                                    (SquaredHinge(), 3)])
def test_classification_gradients_match_finite_differences(fit, k):
    rng = np.random.default_rng(0)
    X, sw = rng.standard_normal((30, 4)), rng.random(30) + 0.5
    Y = _targets(fit, rng, 30, k)
    client = ClientObjective(fit, X, Y, sw, Layout(k, 4, True))
    theta = 0.3 * rng.standard_normal(client.layout.size)
    g = client.gradient(theta)
    eps = 1e-6
    fd = [(client.value(theta + eps * e) - client.value(theta - eps * e)) / (2 * eps)
          for e in np.eye(theta.size)]
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8)


def test_logistic_and_multinomial_values_are_the_textbook_ones():
    Z = np.array([[0.3], [-1.2]])
    Y = np.array([[1.0], [-1.0]])
    sw = np.array([1.0, 2.0])
    expected = np.log1p(np.exp(-0.3)) + 2 * np.log1p(np.exp(-1.2))
    assert np.isclose(Logistic().loss_sum(Z, Y, sw), expected)
    Zm = np.array([[0.1, 0.5, -0.2]])
    assert np.isclose(Multinomial().loss_sum(Zm, np.array([[0, 1.0, 0]]), np.ones(1)),
                      logsumexp(Zm) - 0.5)
    assert np.allclose(Logistic().raw_gradient(Z, Y, np.ones(2)), -Y * expit(-Y * Z))


@pytest.mark.parametrize("fit, bound", [(Logistic(), 0.25), (Multinomial(), 0.5),
                                        (SquaredHinge(), 2.0)])
def test_declared_curvature_bounds_the_second_derivative(fit, bound):
    assert fit.curvature == bound
    rng = np.random.default_rng(1)
    k = 4 if isinstance(fit, Multinomial) else 1
    for _ in range(20):
        z = 3 * rng.standard_normal((1, k))
        y = _targets(fit, rng, 1, k)
        eps = 1e-5
        H = np.array([[(fit.raw_gradient(z + eps * e, y, np.ones(1))
                        - fit.raw_gradient(z - eps * e, y, np.ones(1)))[0, i] / (2 * eps)
                       for e in np.eye(k)] for i in range(k)])
        assert np.linalg.eigvalsh(0.5 * (H + H.T))[-1] <= bound + 1e-6


def test_hinge_subgradient_and_scale():
    Z = np.array([[0.5], [2.0], [1.0]])
    Y = np.ones((3, 1))
    assert Hinge().loss_sum(Z, Y, np.ones(3)) == 0.5
    np.testing.assert_array_equal(Hinge().raw_gradient(Z, Y, np.ones(3)).ravel(), [-1, 0, 0])
    assert not Hinge().smooth and Hinge().step_curvature == 1.0


@pytest.mark.parametrize("data", ["near separable", "random labels far from 0"])
@pytest.mark.parametrize("products", ["Python floats", "numpy"])
def test_hinge_local_dual_solve_meets_the_kkt_conditions(data, products, monkeypatch):
    """The hinge local problem solved by dual coordinate ascent (with shrinking: duals
    held at a bound leave the sweeps, and the stop is read on a sweep of them all):
    theta = M^-1 (l + sum beta_i y_i xt_i), beta_i = 0 where the margin exceeds 1,
    = c_i where it is below. Random labels on rows far from the origin (as
    scikit-learn's checks draw them) put most duals at the cap and make the dual
    ill-conditioned: the case where shrinking matters most. The rows' products on
    Python floats (narrow rows) and in numpy (wide ones) alike."""
    from types import SimpleNamespace

    from skfed.local import sdca
    from skfed.local.sdca import solve_hinge_dual

    # the rows are 4 wide (3 features and the intercept): at the width's bound, and past it
    monkeypatch.setattr(sdca, "_PYTHON_WIDTH", 4 if products == "Python floats" else 3)

    rng = np.random.default_rng(0)
    X, sw = rng.standard_normal((25, 3)), rng.random(25) + 0.5
    Y = np.where(X[:, :1] + 0.3 * rng.standard_normal((25, 1)) > 0, 1.0, -1.0)
    if data != "near separable":
        X += 100.0
        Y = np.where(rng.random((25, 1)) < 0.5, 1.0, -1.0)
    lay = Layout(1, 3, True)
    client = ClientObjective(Hinge(), X, Y, sw, lay)
    problem = SimpleNamespace(n_clients=2, weights=np.array([0.5, 0.5]), smooth_curvature=0.1)
    D, linear = np.full(4, 0.2), rng.standard_normal(4) * 0.1
    theta, beta, _ = solve_hinge_dual(client, problem, 0, D, linear, None, tol=1e-14,
                                      rtol=0.0, max_epochs=200000, reference=None)
    cap = sw / sw.sum()  # s = N a_j = 1
    Xt = np.column_stack([X, np.ones(25)])
    M = D + np.r_[0.1, 0.1, 0.1, 0.0]
    np.testing.assert_allclose(theta, (linear + Xt.T @ (beta[:, 0] * Y[:, 0])) / M, atol=1e-12)
    margin = Y[:, 0] * (Xt @ theta)
    b = beta[:, 0]
    assert np.all((b >= -1e-15) & (b <= cap + 1e-15))
    assert np.all(b[margin > 1 + 1e-7] <= 1e-10)
    assert np.all(np.abs(b[margin < 1 - 1e-7] - cap[margin < 1 - 1e-7]) <= 1e-10)


@pytest.mark.parametrize("fit, k", [(Quadratic(), 1), (Quadratic(), 2), (Logistic(), 1),
                                    (Multinomial(), 3), (Hinge(), 1), (SquaredHinge(), 2),
                                    (Poisson(), 1), (Gamma(), 1)])
@pytest.mark.parametrize("design", ["C", "F", "strided", "sparse"])
@pytest.mark.parametrize("intercept", [True, False])
def test_an_evaluation_on_every_row_is_the_row_selections_bit_for_bit(fit, k, design,
                                                                      intercept):
    """The whole rows' evaluation (a local step's: the layout's and the design's facts
    read once, the product written in place) is the general one's arithmetic: the
    same loss and gradient bits (and, where the selection keeps the design's memory
    order, the bits of the selection of every row)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((40, 2 * 6))
    X = {"C": X[:, :6].copy(), "F": np.asfortranarray(X[:, :6]), "strided": X[:, ::2],
         "sparse": sp.csr_matrix(np.where(np.abs(X[:, :6]) > 0.8, X[:, :6], 0.0))}[design]
    if isinstance(fit, (Poisson, Gamma)):
        Y = rng.gamma(2.0, size=(40, k))
    elif isinstance(fit, Quadratic):
        Y = rng.standard_normal((40, k))
    else:
        Y = _targets(fit, rng, 40, k)
    client = ClientObjective(fit, X, Y, rng.random(40) + 0.5, Layout(k, 6, intercept))
    every = np.arange(40)
    for _ in range(3):
        theta = 0.2 * rng.standard_normal(client.layout.size)
        value, grad = client.value_and_gradient(theta)
        value_general, grad_general = client._evaluate_rows(theta, None, True)
        assert value == value_general
        np.testing.assert_array_equal(grad, grad_general)
        np.testing.assert_array_equal(client.gradient(theta), grad)
        if design in ("C", "sparse"):
            value_rows, grad_rows = client.value_and_gradient(theta, every)
            assert value == value_rows
            np.testing.assert_array_equal(grad, grad_rows)


def test_a_client_unpickled_from_unaligned_buffers_computes_the_same_bits():
    """A transport may hand arrays over in place at any byte offset of a received
    buffer (Dask's frames): numpy then cannot use BLAS and adds in another order. The
    objective aligns its arrays when it is unpickled: the same loss and gradient bits
    as where it was made (on Dask, the in-process fit's)."""
    import pickle

    rng = np.random.default_rng(4)
    X, Y = rng.standard_normal((100, 20)), rng.standard_normal((100, 1))
    client = ClientObjective(Quadratic(), X, Y, rng.random(100) + 0.5, Layout(1, 20, True))
    theta = rng.standard_normal(21)
    buffers = []
    blob = pickle.dumps(client, protocol=5, buffer_callback=buffers.append)
    shifted = []
    for buffer in buffers:  # each buffer one byte into a larger one: unaligned
        raw = buffer.raw()
        holder = bytearray(raw.nbytes + 1)
        holder[1:] = raw
        shifted.append(memoryview(holder)[1:])
    unaligned = np.frombuffer(shifted[0], dtype=np.float64)
    assert not unaligned.flags.aligned  # the case this test is about
    there = pickle.loads(blob, buffers=shifted)
    assert all(a.flags.aligned for a in (there.X, there.Y, there.sample_weight))
    value, grad = there.value_and_gradient(theta)
    assert value == client.value_and_gradient(theta)[0]
    np.testing.assert_array_equal(grad, client.value_and_gradient(theta)[1])
    np.testing.assert_array_equal(there.feature_mean(), client.feature_mean())
    # made at a worker from rows handed over in such a buffer: aligned as well
    made = ClientObjective(Quadratic(), unaligned.reshape(100, 20), Y, client.sample_weight,
                           client.layout)
    assert made.X.flags.aligned
    np.testing.assert_array_equal(made.gradient(theta), client.gradient(theta))
