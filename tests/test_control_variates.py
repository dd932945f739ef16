"""SCAFFOLD, Local G-ECL (centralized and decentralized) and gossip SGD."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge

from skfed import FedElasticNet, FedLasso
from skfed.datasets import simulate_clients
from skfed.penalties import L2 as L2Penalty
from skfed.solvers import DSGD, LocalGECL, Scaffold
from skfed.solvers.topology import adjacency, metropolis_hastings, mixing_matrix

from ._harness import drive, make_problem, quadratic_clients
from .conftest import enet_objective, fit_quietly, make_split, relative_gap

ALPHA = 0.01  # ridge strength: smooth objective, as these solvers need


def _ridge(X, y):
    return Ridge(alpha=ALPHA * len(y), solver="cholesky").fit(X, y)


def _gap(est, X, y):
    ref = _ridge(X, y)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, ALPHA, 0.0)
    return relative_gap(enet_objective(X, y, est.coef_, est.intercept_, ALPHA, 0.0), f_ref)


def _fit(solver, X, y, clients, **kw):
    est = FedElasticNet(alpha=ALPHA, l1_ratio=0.0, solver=solver, **kw)
    return fit_quietly(est, X, y, clients=clients)


SOLVERS = [Scaffold(), Scaffold(local_steps=1), LocalGECL(), LocalGECL(local_steps=1)]
CASES = ([(s, "diabetes", sch, n) for s in SOLVERS
          for sch, n in [("iid", 4), ("quantile", 16), ("kmeans", 8)]]
         + [(s, "synthetic", sch, n) for s in SOLVERS[::2] for sch, n in [("iid", 4), ("kmeans", 8)]])


@pytest.mark.parametrize("solver, dataset, scheme, n_clients", CASES, ids=str)
def test_reach_pooled_optimum(request, solver, dataset, scheme, n_clients):
    data = request.getfixturevalue(dataset)
    X, y = data[0], data[1]
    clients = make_split(X, y, scheme, n_clients=n_clients)
    est = _fit(solver, X, y, clients, max_rounds=5000, tol=1e-11)
    assert _gap(est, X, y) <= 1e-8


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS, ids=repr)
@pytest.mark.parametrize("scheme, n_clients", [("quantile", 16), ("kmeans", 8)])
def test_reach_pooled_optimum_synthetic_slow_splits(synthetic, solver, scheme, n_clients):
    """The slowest cases for these unaccelerated methods: the automatic step follows the
    largest client's smoothness (small clients in 40 dimensions); measured ~5000 rounds
    to 1e-8 for Local G-ECL with K = 1 on the quantile split."""
    X, y = synthetic[0], synthetic[1]
    clients = make_split(X, y, scheme, n_clients=n_clients)
    est = _fit(solver, X, y, clients, max_rounds=20_000, tol=1e-11)
    assert _gap(est, X, y) <= 1e-8


def test_scaffold_equals_centralized_local_gecl_from_the_server_model():
    """Tyou et al., Prop. 2: with the first gradient at the server model, Local G-ECL's
    iterates are SCAFFOLD's (option II, eta_g = 1, full participation)."""
    rng = np.random.default_rng(0)
    blocks = [(rng.standard_normal((9, 3)) + 2 * j, rng.standard_normal(9)) for j in range(3)]
    clients, lay = quadratic_clients(blocks)
    problem = make_problem(clients, lay)
    sc = drive(Scaffold(lr=0.05, local_steps=4), clients, problem, 6)
    ge = drive(LocalGECL(lr=0.05, local_steps=4, first_gradient="server"), clients, problem, 6)
    for a, b in zip(sc, ge):
        np.testing.assert_allclose(b["server"]["x"], a["server"]["x"], rtol=1e-12, atol=1e-14)
    # and lambda_i = c_i - c (the duals are applied one round later in G-ECL)
    c_bar = sc[-2]["server"]["c"]
    for s_sc, s_ge in zip(sc[-2]["states"], ge[-1]["states"]):
        np.testing.assert_allclose(s_ge["lam"], s_sc["c"] - c_bar, rtol=1e-10, atol=1e-12)
    # the paper's own first step (gradient at the previous local model) differs
    paper = drive(LocalGECL(lr=0.05, local_steps=4), clients, problem, 6)
    assert not np.allclose(paper[-1]["server"]["x"], sc[-1]["server"]["x"])


def test_scaffold_update_rule_by_hand():
    rng = np.random.default_rng(2)
    blocks = [(rng.standard_normal((6, 2)), rng.standard_normal(6)) for _ in range(2)]
    clients, lay = quadratic_clients(blocks)
    problem = make_problem(clients, lay)
    eta, K = 0.1, 3
    trace = drive(Scaffold(lr=eta, local_steps=K, server_lr=0.8), clients, problem, 2)
    x, c, cs = np.zeros(2), np.zeros(2), [np.zeros(2), np.zeros(2)]
    for step in trace:
        dys, dcs = [], []
        for j, (Xj, yj) in enumerate(blocks):
            grad = lambda w: Xj.T @ (Xj @ w - yj) / 6  # noqa: E731  (f_j = N a_j L_j)
            yv = x.copy()
            for _ in range(K):
                yv = yv - eta * (grad(yv) - cs[j] + c)
            c_new = cs[j] - c + (x - yv) / (K * eta)
            dys.append(yv - x)
            dcs.append(c_new - cs[j])
            cs[j] = c_new
        x = x + 0.8 * np.mean(dys, axis=0)
        c = c + np.sum(dcs, axis=0) / 2
        np.testing.assert_allclose(step["server"]["x"], x, rtol=1e-12)
        np.testing.assert_allclose(step["server"]["c"], c, rtol=1e-12)


def test_scaffold_partial_participation_ten_percent_of_fifty_clients():
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 50, scheme="quantile")
    est = _fit(Scaffold(), X, y, clients, participation=0.1, max_rounds=3000, tol=0,
               random_state=0)
    assert set(est.history_["n_participants"][1:]) == {5}
    assert _gap(est, X, y) <= 1e-8


@pytest.mark.parametrize("topology", ["ring", "torus", "complete", "erdos-renyi"])
def test_decentralized_local_gecl_reaches_consensus_at_the_optimum(topology):
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 10, scheme="quantile")
    est = _fit(LocalGECL(topology=topology), X, y, clients, max_rounds=3000, tol=1e-10)
    assert _gap(est, X, y) <= 1e-8
    assert est.history_["consensus"][-1] < 1e-8


def test_gossip_sgd_drifts_under_heterogeneity():
    """Same ring, same data: gossip SGD stalls at a biased point with nodes that disagree."""
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 10, scheme="quantile")
    dsgd = _fit(DSGD("ring"), X, y, clients, max_rounds=1500, tol=0)
    assert _gap(dsgd, X, y) > 1e-2
    assert dsgd.history_["consensus"][-1] > 1.0
    late = dsgd.history_["objective"][-500:]
    assert np.ptp(late) < 1e-3 * late[-1]  # stalled, not slowly converging
    # while IID nodes make gossip SGD far less biased
    iid = simulate_clients(X, y, 10, scheme="iid", random_state=0)
    assert _gap(_fit(DSGD("ring"), X, y, iid, max_rounds=1500, tol=0), X, y) < _gap(dsgd, X, y)


def test_decentralized_traffic_is_counted_per_edge():
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 10, scheme="iid", random_state=0)
    p = X.shape[1] + 1
    gecl = _fit(LocalGECL(topology="ring"), X, y, clients, max_rounds=3, tol=0)
    # ring: 10 nodes x 2 neighbours, each sent (x_i, v_i)
    assert np.all(gecl.history_["bytes_up"][1:] == 10 * 2 * 2 * 8 * p)
    dsgd = _fit(DSGD("complete"), X, y, clients, max_rounds=3, tol=0)
    assert np.all(dsgd.history_["bytes_up"][1:] == 10 * 9 * 8 * p)


def test_scaffold_sends_two_vectors_each_way(synthetic):
    X, y, clients, _ = synthetic
    est = _fit(Scaffold(), X, y, clients, max_rounds=2, tol=0)
    p = X.shape[1] + 1
    assert np.all(est.history_["bytes_up"][1:] == 8 * 2 * 8 * p)
    assert np.all(est.history_["bytes_down"][1:] == 8 * 2 * 8 * p)


class TestTopology:
    def test_metropolis_hastings_is_doubly_stochastic(self):
        for name in ["ring", "torus", "complete", "erdos-renyi"]:
            W = mixing_matrix(name, 12)
            np.testing.assert_allclose(W, W.T)
            np.testing.assert_allclose(W.sum(axis=1), 1.0)
            assert np.all(W >= 0)

    def test_shapes(self):
        assert adjacency("ring", 5).sum(axis=1).tolist() == [2] * 5
        assert adjacency("torus", 12).sum(axis=1).tolist() == [4] * 12
        W = metropolis_hastings(adjacency("ring", 4))
        np.testing.assert_allclose(W[0], [1 / 3, 1 / 3, 0, 1 / 3])

    @pytest.mark.parametrize("W, message", [
        (np.eye(3)[:2], "must be 3 x 3"),
        (np.array([[0.5, 0.5, 0], [0.2, 0.5, 0.3], [0, 0.5, 0.5]]), "symmetric"),
        (np.array([[0.5, 0.6, 0], [0.6, 0.5, 0], [0, 0, 1.0]]), "doubly stochastic"),
        (np.eye(3), "connected"),
    ])
    def test_bad_user_matrix(self, W, message):
        with pytest.raises(ValueError, match=message):
            mixing_matrix(W, 3)

    def test_bad_names(self):
        with pytest.raises(ValueError, match="topology must be one of"):
            mixing_matrix("star", 4)
        with pytest.raises(ValueError, match="composite number"):
            mixing_matrix("torus", 7)

    def test_user_matrix_runs(self):
        X, y = load_diabetes(return_X_y=True)
        clients = simulate_clients(X, y, 3, scheme="quantile")
        W = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]])
        est = _fit(LocalGECL(topology=W), X, y, clients, max_rounds=3000, tol=1e-10)
        assert _gap(est, X, y) <= 1e-8


def test_smooth_only_solvers_refuse_l1(synthetic):
    X, y, clients, _ = synthetic
    for solver in ["scaffold", "local-gecl", "dsgd"]:
        with pytest.raises(ValueError, match="only handles smooth penalties"):
            FedLasso(alpha=0.1, solver=solver).fit(X, y, clients=clients)


def test_local_gecl_needs_full_participation(synthetic):
    X, y, clients, _ = synthetic
    with pytest.raises(ValueError, match="needs full participation"):
        FedElasticNet(l1_ratio=0.0, solver="local-gecl", participation=0.5).fit(
            X, y, clients=clients)


def test_local_gecl_warm_start_duals():
    """lambda_i(0) = grad f_i(x0) - grad f(x0): one gathering round, then a head start."""
    rng = np.random.default_rng(3)
    blocks = [(rng.standard_normal((8, 3)) + 2 * j, rng.standard_normal(8) + j) for j in range(3)]
    clients, lay = quadratic_clients(blocks)
    problem = make_problem(clients, lay)
    trace = drive(LocalGECL(lr=0.02, local_steps=5, warm_start_duals=True), clients, problem, 2)
    assert trace[0]["message"] == {"x": trace[0]["message"]["x"], "gather": 1.0}
    grads = [X.T @ (X @ np.zeros(3) - y) / 8 for X, y in blocks]  # f_j = N a_j L_j
    expected = [g - np.mean(grads, axis=0) for g in grads]
    np.testing.assert_allclose([s["lam"] for s in trace[1]["states"]], expected, atol=1e-12)
    X, y = load_diabetes(return_X_y=True)
    site = simulate_clients(X, y, 8, scheme="quantile")
    cold = _fit(LocalGECL(), X, y, site, max_rounds=15, tol=0)
    warm = _fit(LocalGECL(warm_start_duals=True), X, y, site, max_rounds=16, tol=0)
    assert warm.history_["objective"][-1] < cold.history_["objective"][-1]
    with pytest.raises(ValueError, match="centralized topology only"):
        _fit(LocalGECL(topology="ring", warm_start_duals=True), X, y, site, max_rounds=2)


def test_decentralized_edge_coupling_alpha():
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 10, scheme="quantile")
    est = _fit(LocalGECL(topology="ring", alpha=0.01), X, y, clients, max_rounds=3000,
               tol=1e-10)
    assert _gap(est, X, y) <= 1e-8
    with pytest.raises(ValueError, match="decentralized topologies only"):
        _fit(LocalGECL(alpha=0.01), X, y, clients, max_rounds=2)


# --- per-client step sizes (issue 14) ----------------------------------------
class _CommonStepScaffold(Scaffold):
    """The former rule: every client steps at the roughest client's 1/(K L)."""
    per_client_steps = False


class _CommonStepLocalGECL(LocalGECL):
    per_client_steps = False


def _uneven_smoothness(seed=0, n_clients=5, d=6, n=40):
    """Clients whose features are scaled by 10, 3, 1, 0.3, 0.1: smoothness
    constants four orders of magnitude apart."""
    rng = np.random.default_rng(seed)
    scales = np.logspace(1, -1, n_clients)
    X = np.vstack([s * (rng.standard_normal((n, d)) + rng.standard_normal(d)) for s in scales])
    y = X @ rng.standard_normal(d) + rng.standard_normal(len(X))
    return X, y, np.repeat(np.arange(n_clients), n)


@pytest.mark.parametrize("solver", [Scaffold(local_steps=4), LocalGECL(local_steps=4),
                                    LocalGECL(local_steps=1)], ids=repr)
def test_pooled_optimum_is_a_fixed_point_with_per_client_steps(solver):
    """Start at the pooled optimum with the control variates at their fixed point
    (c_j = grad f_j(x*), c = 0; Local G-ECL: lambda_j = grad f_j(x*)): one round,
    with each client's own step size, moves nothing."""
    X, y, site = _uneven_smoothness()
    blocks = [(X[site == j], y[site == j]) for j in range(5)]
    clients, lay = quadratic_clients(blocks, fit_intercept=True)
    problem = make_problem(clients, lay, penalty=L2Penalty(ALPHA))
    solver.setup(problem)
    steps = np.array(solver.client_steps_)
    assert steps[:, 0].max() > 1000 * steps[:, 0].min()  # really uneven
    ref = _ridge(X, y)
    x_star = np.r_[ref.coef_, ref.intercept_]
    server = solver.init_server(x_star)
    states = []
    for j, c in enumerate(clients):
        grad = solver._grad(c, j, x_star)
        state = solver.init_client(j, x_star)
        state.update({"c": grad} if isinstance(solver, Scaffold) else {"lam": grad, "x": x_star})
        states.append(state)
    np.testing.assert_allclose(sum(s.get("c", s.get("lam")) for s in states), 0, atol=1e-10)
    message = solver.broadcast(server, 0)
    replies = []
    for j, c in enumerate(clients):
        reply, states[j] = solver.client_update(c, states[j], message, None)
        replies.append(reply)
    server = solver.aggregate(server, replies, problem.weights, np.arange(5))
    np.testing.assert_allclose(server["x"], x_star, rtol=0, atol=1e-12 * np.abs(x_star).max())
    if isinstance(solver, Scaffold):
        np.testing.assert_allclose(server["c"], 0, atol=1e-12)
        for j, c in enumerate(clients):
            np.testing.assert_allclose(states[j]["c"], solver._grad(c, j, x_star), atol=1e-12)
    else:  # the next round's dual step: lambda_j += (x_server - x_j) / (K eta_j) = 0
        for r in replies:
            np.testing.assert_allclose(r["x"], x_star, rtol=0, atol=1e-12 * np.abs(x_star).max())


@pytest.mark.parametrize("solver, common", [(Scaffold(), _CommonStepScaffold()),
                                            (LocalGECL(), _CommonStepLocalGECL())], ids=repr)
def test_per_client_steps_need_fewer_rounds_on_uneven_clients(solver, common):
    """With the roughest client's step for everyone the smooth clients crawl; each
    client's own step (and the server's 1/eta-weighted average) is several times
    faster (measured: SCAFFOLD 189, Local G-ECL 175 rounds to 1e-8, against 817 for
    both with the common step)."""
    X, y, site = _uneven_smoothness()

    def rounds(s):
        est = _fit(s, X, y, site, max_rounds=3000, tol=1e-12)
        ref = _ridge(X, y)
        f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, ALPHA, 0.0)
        gaps = (est.history_["objective"] - f_ref) / f_ref  # skfed's objective is sklearn's here
        hit = np.flatnonzero(gaps <= 1e-8)
        return int(hit[0]) if hit.size else np.inf

    own, shared = rounds(solver), rounds(common)
    assert own * 3 <= shared, (own, shared)


def test_local_gecl_duals_sum_to_zero_with_per_client_steps():
    """sum_j lambda_j = 0 is what makes Local G-ECL's fixed point the pooled optimum;
    with per-client steps the server must average the models weighted by 1/eta_j
    for the dual steps (x_server - x_j) / (K eta_j) to keep it."""
    X, y, site = _uneven_smoothness()
    blocks = [(X[site == j], y[site == j]) for j in range(5)]
    clients, lay = quadratic_clients(blocks, fit_intercept=True)
    problem = make_problem(clients, lay, penalty=L2Penalty(ALPHA))
    trace = drive(LocalGECL(local_steps=3), clients, problem, 6)
    for step in trace[1:]:
        lam = np.array([s["lam"] for s in step["states"]])
        np.testing.assert_allclose(lam.sum(axis=0), 0, atol=1e-9 * np.abs(lam).max())
