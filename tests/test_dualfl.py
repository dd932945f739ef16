"""DualFL: the paper's update rule, its exact cases, acceleration, and the pooled optimum."""

import numpy as np
import pytest
from sklearn.linear_model import ElasticNet, Lasso

from skfed import FedElasticNet, FedLasso
from skfed.solvers import DualFL

from ._harness import drive, make_problem, quadratic_clients
from .conftest import enet_objective, fit_quietly, make_split, relative_gap


def test_two_rounds_solve_identity_quadratics_exactly():
    """f_j = (mu/2)||theta - a_j||^2 with nu = mu: theta_j^(1) = a_j, zeta_j^(1) = abar - a_j,
    theta_j^(2) = abar, and sum_j zeta_j = 0."""
    d, N = 3, 4
    a = np.random.default_rng(0).standard_normal((N, d))
    clients, lay = quadratic_clients([(np.eye(d), a[j]) for j in range(N)])
    problem = make_problem(clients, lay)
    mu = 1.0 / d  # N a_j L_j = (1/(2d)) ||theta - a_j||^2
    trace = drive(DualFL(nu=mu, rho=0.0, proximal=0.0, local_tol=1e-14, local_rtol=0.0), clients, problem, 3)
    abar = a.mean(axis=0)
    np.testing.assert_allclose([r["theta"] for r in trace[0]["replies"]], a, atol=1e-12)
    np.testing.assert_allclose(trace[0]["server"]["theta"], abar, atol=1e-12)
    zetas = np.array([s["zeta"] for s in trace[1]["states"]])
    np.testing.assert_allclose(zetas, abar - a, atol=1e-12)
    np.testing.assert_allclose([r["theta"] for r in trace[1]["replies"]], np.tile(abar, (N, 1)),
                               atol=1e-12)
    for step in trace:
        np.testing.assert_allclose(sum(s["zeta"] for s in step["states"]), 0, atol=1e-12)


def paper_dualfl(H, b, nu, rho, rounds):
    """DualFL Algorithm 1 transcribed from the paper for f_j(x) = x'H_j x/2 - b_j'x,
    with exact local solves (H_j - nu I) x ... in closed form."""
    N, d = len(H), len(b[0])
    theta_bar_prev = np.zeros(d)
    theta_loc_prev = [np.zeros(d)] * N
    zeta = [np.zeros(d)] * N
    zeta_prev = [np.zeros(d)] * N
    t = 1.0
    out = []
    for n in range(rounds):
        theta_loc = [np.linalg.solve(H[j], b[j] + nu * zeta[j]) for j in range(N)]
        theta_bar = np.mean(theta_loc, axis=0)
        t_next = 0.5 * (1 - rho * t * t + np.sqrt((1 - rho * t * t) ** 2 + 4 * t * t))
        beta = ((t - 1) / t_next) * ((1 - rho * t_next) / (1 - rho))
        new_zeta = [(1 + beta) * (zeta[j] + theta_bar - theta_loc[j])
                    - beta * (zeta_prev[j] + theta_bar_prev - theta_loc_prev[j]) for j in range(N)]
        zeta_prev, zeta = zeta, new_zeta
        theta_bar_prev, theta_loc_prev, t = theta_bar, theta_loc, t_next
        out.append((theta_bar, theta_loc, zeta))
    return out


@pytest.mark.parametrize("local_solver", ["direct", "fista"])
@pytest.mark.parametrize("rho", [0.0, 0.05])
def test_matches_the_papers_algorithm_line_by_line(rho, local_solver):
    rng = np.random.default_rng(1)
    d, N, n = 4, 3, 12
    blocks = [(rng.standard_normal((n, d)) + j, rng.standard_normal(n)) for j in range(N)]
    clients, lay = quadratic_clients(blocks)
    problem = make_problem(clients, lay)
    # f_j = N a_j L_j = (1/(2n)) ||X_j theta - y_j||^2 (equal sizes): H_j = X_j'X_j / n
    H = [X.T @ X / n for X, _ in blocks]
    b = [X.T @ y / n for X, y in blocks]
    nu = min(np.linalg.eigvalsh(h)[0] for h in H)
    ours = drive(DualFL(nu=nu, rho=rho, proximal=0.0, local_tol=1e-15, local_rtol=0.0,
                        max_local_iter=20000, local_solver=local_solver),
                 clients, problem, 8)
    ref = paper_dualfl(H, b, nu, rho, 8)
    for step, (theta_bar, theta_loc, zeta) in zip(ours[:-1], ref[:-1]):
        np.testing.assert_allclose(step["server"]["theta"], theta_bar, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose([r["theta"] for r in step["replies"]], theta_loc,
                                   rtol=1e-9, atol=1e-11)
    # our clients apply round n's dual step at the start of round n + 1
    for step, (_, _, zeta) in zip(ours[1:], ref[:-1]):
        np.testing.assert_allclose([s["zeta"] for s in step["states"]], zeta, rtol=1e-8,
                                   atol=1e-10)


def _spectrum_problem(d=24, n_clients=4):
    """Ridge least squares whose data Hessian has eigenvalues log-spaced in [1e-6, 1],
    every eigen-direction weighing equally in the objective, and each client holding
    a few of the directions (strong heterogeneity). With ridge mu, kappa = (1 + mu) / mu."""
    lam = np.logspace(0, -6, d)
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((d, d)))
    X = np.sqrt(d * lam)[:, None] * Q  # X'X / d = Q' diag(lam) Q
    y = X @ (Q.T @ (1 / np.sqrt(lam + 1e-4)))
    return X, y, np.arange(d) % n_clients


def _rounds_to(solver, X, y, clients, kappa, max_rounds, target=1e-8):
    mu = 1.0 / kappa
    est = FedElasticNet(alpha=mu, l1_ratio=0.0, fit_intercept=False, solver=solver,
                        max_rounds=max_rounds, tol=1e-10)
    fit_quietly(est, X, y, clients=clients)
    d = X.shape[1]
    ref = np.linalg.solve(X.T @ X / len(y) + mu * np.eye(d), X.T @ y / len(y))
    f = lambda w: 0.5 * np.mean((y - X @ w) ** 2) + 0.5 * mu * w @ w  # noqa: E731
    reached = np.flatnonzero(est.history_.set_reference(f(ref))["suboptimality"] <= target)
    assert reached.size, f"{solver} did not reach {target} in {max_rounds} rounds"
    return int(reached[0])


def test_acceleration_rounds_grow_at_most_like_sqrt_kappa():
    """kappa 1e2 -> 1e4: DualFL's rounds to a 1e-8 gap grow by at most sqrt(100) = 10."""
    X, y, clients = _spectrum_problem()
    low, high = (_rounds_to("dualfl", X, y, clients, k, 3000) for k in (1e2, 1e4))
    assert high <= 10 * low, (low, high)


def test_unaccelerated_rounds_grow_like_kappa_on_the_same_problem():
    """The contrast: FedDualAvg (proximal gradient) on the same problem, kappa 1e2 -> 1e3,
    needs about 10 times more rounds (measured 699 -> 65200 for kappa 1e2 -> 1e4)."""
    X, y, clients = _spectrum_problem()
    low, high = (_rounds_to("feddualavg", X, y, clients, k, 30_000) for k in (1e2, 1e3))
    assert high >= 5 * low, (low, high)
    dual = _rounds_to("dualfl", X, y, clients, 1e3, 3000)
    assert dual < high / 20


@pytest.mark.parametrize("dataset", ["diabetes", "synthetic"])
@pytest.mark.parametrize("scheme, n_clients", [("iid", 4), ("quantile", 16), ("kmeans", 8)])
@pytest.mark.parametrize("l1_ratio", [1.0, 0.5])
def test_reaches_pooled_optimum_under_heterogeneity(request, dataset, scheme, n_clients,
                                                    l1_ratio):
    data = request.getfixturevalue(dataset)
    X, y = data[0], data[1]
    alpha = 0.1 if dataset == "diabetes" else 0.3
    clients = make_split(X, y, scheme, n_clients=n_clients)
    ref = ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-14, max_iter=200_000).fit(X, y)
    est = FedElasticNet(alpha=alpha, l1_ratio=l1_ratio, solver="dualfl", max_rounds=3000,
                        tol=1e-10).fit(X, y, clients=clients)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, alpha, l1_ratio)
    f_fed = enet_objective(X, y, est.coef_, est.intercept_, alpha, l1_ratio)
    assert relative_gap(f_fed, f_ref) <= 1e-8
    np.testing.assert_array_equal(np.sign(est.coef_), np.sign(ref.coef_))


def test_sixty_four_clients(synthetic):
    X, y, _, _ = synthetic
    clients = np.arange(len(y)) % 64
    ref = Lasso(alpha=0.3, tol=1e-14, max_iter=200_000).fit(X, y)
    est = FedLasso(alpha=0.3, solver="dualfl", max_rounds=3000, tol=1e-10).fit(X, y,
                                                                               clients=clients)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, 0.3)
    assert relative_gap(enet_objective(X, y, est.coef_, est.intercept_, 0.3), f_ref) <= 1e-8
    assert est.n_clients_ == 64


def test_needs_full_participation(synthetic):
    X, y, clients, _ = synthetic
    with pytest.raises(ValueError, match="needs full participation"):
        FedLasso(solver="dualfl", participation=0.5).fit(X, y, clients=clients)


def test_bytes_one_vector_each_way(synthetic):
    X, y, clients, _ = synthetic
    est = fit_quietly(FedLasso(alpha=0.3, solver="dualfl", max_rounds=3, tol=0), X, y,
                      clients=clients)
    p = X.shape[1] + 1
    # the local model and one scalar: its part of the consensus residual
    assert np.all(est.history_["bytes_up"][1:] == 8 * (8 * p + 8))
    # the model and four scalars: the dual momentum, the re-centring flag, the
    # anchor's momentum and the inner/outer balance of alpha (least squares: no
    # curvature scale, whose measurement adds a scalar each way for other losses)
    assert np.all(est.history_["bytes_down"][1:] == 8 * (8 * p + 32))


def test_bad_parameters(synthetic):
    X, y, clients, _ = synthetic
    with pytest.raises(ValueError, match="rho must be in"):
        FedLasso(solver=DualFL(rho=1.0)).fit(X, y, clients=clients)
    with pytest.raises(ValueError, match="not strongly convex.*proximal must be > 0"):
        FedLasso(solver=DualFL(proximal=0.0)).fit(X, y, clients=clients)
