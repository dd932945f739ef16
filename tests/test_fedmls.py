"""FedMLS: the authors' update rule, convergence on the Lasso, options."""

import math

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Lasso

from skfed import FedLasso
from skfed.datasets import simulate_clients
from skfed.solvers import FedMLS

from ._harness import drive, make_problem, quadratic_clients
from .conftest import enet_objective, fit_quietly, relative_gap


def reference_fedmls(grads, N, d, weight, rounds, t0=1.0):
    """FedMLS.m transcribed: server (x, y, z), clients (x_j, y_j, z_j), all from zero."""
    x, y, z = np.zeros(d), np.zeros(d), np.zeros(d)
    xs, ys, zs = [np.zeros(d) for _ in range(N)], [np.zeros(d) for _ in range(N)], \
        [np.zeros(d) for _ in range(N)]
    out = []
    for k in range(1, rounds + 1):
        g_k, g_k1 = 2 / (k + 1), 2 / (k + 2)
        for j in range(N):
            v = zs[j] - (k / 4) * (ys[j] - y)
            u = zs[j].copy()
            ut = u.copy()
            for t in range(1, math.ceil(t0 * k) + 1):
                u = u - (2 / (t + 2)) * (weight * grads[j](u) + u - v)
                th = 2 * (t + 1) / (t * (t + 3))
                ut = (1 - th) * ut + th * u
            zs[j] = u
            xs[j] = (1 - g_k) * xs[j] + g_k * ut
            ys[j] = (1 - g_k1) * xs[j] + g_k1 * zs[j]
        ybar = np.mean(ys, axis=0)
        x = (1 - g_k) * x + g_k * z
        y = (1 - g_k1) * x + g_k1 * z
        z = z - ((k + 1) / 4) * (y - ybar)
        out.append(x.copy())
    return out


def test_matches_the_authors_algorithm():
    rng = np.random.default_rng(0)
    blocks = [(rng.standard_normal((7, 3)) + j, rng.standard_normal(7)) for j in range(3)]
    clients, lay = quadratic_clients(blocks)
    problem = make_problem(clients, lay)
    n = 21
    lam0 = 0.5
    # our weight on grad f_j (f_j = N a_j L_j) for the paper's lambda0 (sum losses)
    weight = lam0 * n / (4 * 3 * 3)
    grads = [lambda u, X=X, y=y: X.T @ (X @ u - y) / 7 for X, y in blocks]
    ours = drive(FedMLS(lambda0=lam0, t0=1.0), clients, problem, 6)
    ref = reference_fedmls(grads, 3, 3, weight, 6)
    for step, x in zip(ours, ref):
        np.testing.assert_allclose(step["server"]["x"], x, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("scheme", ["iid", "quantile"])
def test_lasso_to_1e4_on_diabetes(scheme):
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 8, scheme=scheme, random_state=0)
    ref = Lasso(alpha=0.1, tol=1e-14, max_iter=200_000).fit(X, y)
    est = fit_quietly(FedLasso(alpha=0.1, solver=FedMLS(t0=0.3), max_rounds=700, tol=0), X, y,
                      clients=clients)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, 0.1)
    assert relative_gap(enet_objective(X, y, est.coef_, est.intercept_, 0.1), f_ref) <= 1e-4
    sub = est.history_.set_reference(f_ref)["suboptimality"]
    assert sub[100] < sub[10] and sub[600] < sub[100]


def test_stochastic_subgradients_converge_roughly():
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 4, scheme="iid", random_state=0)
    ref = Lasso(alpha=0.1, tol=1e-14, max_iter=200_000).fit(X, y)
    est = FedLasso(alpha=0.1, solver=FedMLS(t0=0.3, batch_fraction=0.1), max_rounds=200,
                   tol=0, random_state=0)
    est = fit_quietly(est, X, y, clients=clients)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, 0.1)
    assert relative_gap(enet_objective(X, y, est.coef_, est.intercept_, 0.1), f_ref) <= 2e-2


def test_radius_projects_the_coefficients():
    rng = np.random.default_rng(0)
    blocks = [(rng.standard_normal((7, 3)) * 3, rng.standard_normal(7) * 10) for j in range(2)]
    clients, lay = quadratic_clients(blocks, fit_intercept=True)
    problem = make_problem(clients, lay)
    trace = drive(FedMLS(radius=0.5), clients, problem, 5)
    for step in trace:
        for s in step["states"]:
            assert np.linalg.norm(s["z"][:3]) <= 0.5 + 1e-12  # intercept is free


def test_needs_full_participation_and_valid_parameters(synthetic):
    X, y, clients, _ = synthetic
    with pytest.raises(ValueError, match="needs full participation"):
        FedLasso(solver="fedmls", participation=0.5).fit(X, y, clients=clients)
    with pytest.raises(ValueError, match="batch_fraction must be in"):
        FedLasso(solver=FedMLS(batch_fraction=2.0)).fit(X, y, clients=clients)
