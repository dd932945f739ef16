"""FedPD, FedADMM, FedDyn and A-FedPD: update rules, relations, pooled optimum, sampling."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import ElasticNet, Lasso

from skfed import FedElasticNet, FedLasso
from skfed.datasets import make_federated_lasso, simulate_clients
from skfed.solvers import AFedPD, FedADMM, FedDyn, FedPD

from ._harness import drive, make_problem, quadratic_clients
from .conftest import enet_objective, fit_quietly, make_split, relative_gap

FAMILY = [FedPD, FedADMM, FedDyn, AFedPD]


def _fit(cls, X, y, clients, rounds, participation=1.0, seed=0, **kw):
    est = FedLasso(alpha=0.3, solver=cls(**kw), participation=participation, max_rounds=rounds,
                   tol=0, random_state=seed)
    return fit_quietly(est, X, y, clients=clients)


def test_full_participation_all_four_coincide(synthetic):
    X, y, clients, _ = synthetic
    coefs = [_fit(cls, X, y, clients, 30).history_["objective"] for cls in FAMILY]
    for other in coefs[1:]:
        np.testing.assert_allclose(other, coefs[0], rtol=1e-10)


def test_afedpd_without_virtual_update_is_feddyn(synthetic):
    X, y, clients, _ = synthetic
    dyn = _fit(FedDyn, X, y, clients, 40, participation=0.25, seed=3)
    afe = _fit(AFedPD, X, y, clients, 40, participation=0.25, seed=3, virtual_update=False)
    np.testing.assert_allclose(afe.history_["objective"], dyn.history_["objective"], rtol=1e-10)
    np.testing.assert_allclose(afe.coef_, dyn.coef_, rtol=1e-10, atol=1e-14)
    with_virtual = _fit(AFedPD, X, y, clients, 40, participation=0.25, seed=3)
    assert not np.allclose(with_virtual.coef_, dyn.coef_)


def test_afedpd_server_duals_match_fedpd_client_duals():
    rng = np.random.default_rng(0)
    blocks = [(rng.standard_normal((10, 3)) + j, rng.standard_normal(10)) for j in range(3)]
    clients, lay = quadratic_clients(blocks)
    problem = make_problem(clients, lay)
    pd = drive(FedPD(rho=0.7), clients, problem, 5)
    af = drive(AFedPD(rho=0.7), clients, problem, 5)
    for a, b in zip(pd, af):
        np.testing.assert_allclose(b["server"]["lams"], [s["lam"] for s in a["states"]],
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(b["server"]["theta"], a["server"]["theta"], rtol=1e-12)


def test_fedpd_update_rule_by_hand():
    """One round on least squares with rho: local argmin, dual step, server average."""
    rng = np.random.default_rng(1)
    blocks = [(rng.standard_normal((8, 2)), rng.standard_normal(8)) for _ in range(2)]
    clients, lay = quadratic_clients(blocks)
    problem = make_problem(clients, lay)
    rho = 0.5
    trace = drive(FedPD(rho=rho), clients, problem, 2)
    theta, lams = np.zeros(2), [np.zeros(2), np.zeros(2)]
    for step in trace:
        vs = []
        for j, (X, y) in enumerate(blocks):
            H, b = X.T @ X / 8, X.T @ y / 8  # f_j = N a_j L_j = (1/(2*8))||X theta - y||^2
            x = np.linalg.solve(H + rho * np.eye(2), b + rho * theta - lams[j])
            lams[j] = lams[j] + rho * (x - theta)
            vs.append(x + lams[j] / rho)
        theta = np.mean(vs, axis=0)
        np.testing.assert_allclose(step["server"]["theta"], theta, rtol=1e-12)


@pytest.mark.parametrize("cls", FAMILY)
@pytest.mark.parametrize("dataset", ["diabetes", "synthetic"])
@pytest.mark.parametrize("scheme, n_clients", [("iid", 4), ("quantile", 16), ("kmeans", 8)])
def test_reach_pooled_optimum(request, cls, dataset, scheme, n_clients):
    data = request.getfixturevalue(dataset)
    X, y = data[0], data[1]
    alpha = 0.1 if dataset == "diabetes" else 0.3
    clients = make_split(X, y, scheme, n_clients=n_clients)
    ref = ElasticNet(alpha=alpha, l1_ratio=0.7, tol=1e-14, max_iter=200_000).fit(X, y)
    est = FedElasticNet(alpha=alpha, l1_ratio=0.7, solver=cls(), max_rounds=3000,
                        tol=1e-10).fit(X, y, clients=clients)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, alpha, 0.7)
    assert relative_gap(enet_objective(X, y, est.coef_, est.intercept_, alpha, 0.7),
                        f_ref) <= 1e-8
    np.testing.assert_array_equal(np.sign(est.coef_), np.sign(ref.coef_))


@pytest.mark.parametrize("cls", [FedDyn, AFedPD])
def test_inexact_local_steps_keep_the_exact_fixed_point(synthetic, cls):
    """With K gradient steps instead of an exact local solve, the optimum is still a
    fixed point (lambda_j = -grad f_j(theta*) makes the local gradient vanish there)."""
    X, y, clients, _ = synthetic
    ref = Lasso(alpha=0.3, tol=1e-14, max_iter=200_000).fit(X, y)
    est = _fit(cls, X, y, clients, 1500, local_steps=5)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, 0.3)
    assert relative_gap(enet_objective(X, y, est.coef_, est.intercept_, 0.3), f_ref) <= 1e-8


def _rounds_to(est, f_ref, target=1e-8):
    sub = est.history_.set_reference(f_ref)["suboptimality"]
    hits = np.flatnonzero(sub <= target)
    return int(hits[0]) if hits.size else np.inf


def test_partial_participation_ten_percent_of_fifty_clients():
    """Diabetes over 50 quantile sites, 5 sampled per round: A-FedPD, FedDyn and FedADMM
    all reach the pooled optimum. Measured (3 seeds): FedDyn 135-157 rounds to 1e-6,
    A-FedPD 159-180, FedADMM 1119-1265. The A-FedPD paper reports A-FedPD ahead of FedDyn
    (non-convex models, SGD local steps); on these convex problems we measure FedDyn
    10-20% ahead at 10% participation and A-FedPD slightly ahead at 30%."""
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 50, scheme="quantile")
    ref = Lasso(alpha=0.1, tol=1e-14, max_iter=200_000).fit(X, y)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, 0.1)
    rounds = {}
    for cls in [FedDyn, AFedPD, FedADMM]:
        est = FedLasso(alpha=0.1, solver=cls(), participation=0.1, max_rounds=2000, tol=0,
                       random_state=0)
        est = fit_quietly(est, X, y, clients=clients)
        assert set(est.history_["n_participants"][1:]) == {5}
        rounds[cls.name] = _rounds_to(est, f_ref)
    assert max(rounds.values()) < 2000, rounds
    assert rounds["afedpd"] <= 1.5 * rounds["feddyn"], rounds
    assert rounds["feddyn"] < rounds["fedadmm"] and rounds["afedpd"] < rounds["fedadmm"]


def test_bytes_per_algorithm(synthetic):
    X, y, clients, _ = synthetic
    p = X.shape[1] + 1
    for cls, down, up in [(FedPD, 1, 1), (FedADMM, 1, 1), (FedDyn, 1, 1), (AFedPD, 2, 1)]:
        h = _fit(cls, X, y, clients, 2, participation=0.5 if cls is not FedPD else 1.0).history_
        n = h["n_participants"][1]
        assert np.all(h["bytes_down"][1:] == n * down * 8 * p), cls
        assert np.all(h["bytes_up"][1:] == n * up * 8 * p), cls


def test_fedpd_needs_full_participation(synthetic):
    X, y, clients, _ = synthetic
    with pytest.raises(ValueError, match="'fedpd'.*needs full participation"):
        FedLasso(solver="fedpd", participation=0.5).fit(X, y, clients=clients)
