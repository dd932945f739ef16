"""FedLasso / FedElasticNet against scikit-learn's pooled Lasso / ElasticNet.

Each exact solver, in the regime where its theory gives exact convergence
(one full-batch local step, full participation), must reach the pooled
optimum: relative objective gap <= 1e-6 and the same support, on a real and
a synthetic dataset, under an IID and a strongly heterogeneous split.
"""

import numpy as np
import pytest
from sklearn.linear_model import ElasticNet, Lasso, Ridge

from skfed import FedElasticNet, FedLasso
from skfed.solvers import FedAvg, FedDualAvg, FedMID, FedMIDOSP

from .conftest import enet_objective, fit_quietly, make_split, relative_gap

EXACT_SOLVERS = ["feddualavg", "fedmid-osp", "fedprox"]
ALPHAS = {"diabetes": 0.1, "synthetic": 0.3}


def _data(request, name):
    data = request.getfixturevalue(name)
    return data[0], data[1]


def _reference(X, y, alpha, l1_ratio):
    if l1_ratio == 1.0:
        ref = Lasso(alpha=alpha, tol=1e-14, max_iter=200_000)
    else:
        ref = ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-14, max_iter=200_000)
    return ref.fit(X, y)


@pytest.mark.parametrize("dataset", ["diabetes", "synthetic"])
@pytest.mark.parametrize("scheme", ["iid", "quantile"])
@pytest.mark.parametrize("l1_ratio", [1.0, 0.5])
@pytest.mark.parametrize("solver", EXACT_SOLVERS)
def test_exact_solvers_reach_pooled_optimum(request, dataset, scheme, l1_ratio, solver):
    X, y = _data(request, dataset)
    alpha = ALPHAS[dataset]
    clients = make_split(X, y, scheme)
    ref = _reference(X, y, alpha, l1_ratio)
    if l1_ratio == 1.0:
        est = FedLasso(alpha=alpha, solver=solver, max_rounds=20_000, tol=1e-11)
    else:
        est = FedElasticNet(alpha=alpha, l1_ratio=l1_ratio, solver=solver,
                            max_rounds=20_000, tol=1e-11)
    est.fit(X, y, clients=clients)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, alpha, l1_ratio)
    f_fed = enet_objective(X, y, est.coef_, est.intercept_, alpha, l1_ratio)
    assert relative_gap(f_fed, f_ref) <= 1e-6
    np.testing.assert_array_equal(np.sign(est.coef_), np.sign(ref.coef_))
    # the objective the history reports is the pooled one
    assert est.objective_ == pytest.approx(f_fed, rel=1e-12)


@pytest.mark.parametrize("scheme", ["iid", "quantile"])
def test_sample_weight_matches_sklearn(diabetes, scheme):
    X, y = diabetes
    sw = np.random.default_rng(0).uniform(0.2, 3.0, size=len(y))
    clients = make_split(X, y, scheme)
    ref = Lasso(alpha=0.1, tol=1e-14, max_iter=200_000).fit(X, y, sample_weight=sw)
    est = FedLasso(alpha=0.1, max_rounds=20_000, tol=1e-11).fit(
        X, y, clients=clients, sample_weight=sw)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, 0.1, sample_weight=sw)
    f_fed = enet_objective(X, y, est.coef_, est.intercept_, 0.1, sample_weight=sw)
    assert relative_gap(f_fed, f_ref) <= 1e-6


def test_sparse_input_matches_dense(synthetic):
    import scipy.sparse as sp

    X, y, clients, _ = synthetic
    X = X.copy()
    X[np.abs(X) < 1.0] = 0.0
    dense = FedLasso(alpha=0.3, max_rounds=20_000, tol=1e-10).fit(X, y, clients=clients)
    sparse = FedLasso(alpha=0.3, max_rounds=20_000, tol=1e-10).fit(
        sp.csr_matrix(X), y, clients=clients)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-9, atol=1e-12)


def test_multi_output_lasso_matches_sklearn(synthetic):
    X, y, clients, _ = synthetic
    Y = np.column_stack([y, -0.5 * y + X[:, 7]])
    ref = Lasso(alpha=0.3, tol=1e-14, max_iter=200_000).fit(X, Y)
    est = FedLasso(alpha=0.3, max_rounds=20_000, tol=1e-11).fit(X, Y, clients=clients)
    assert est.coef_.shape == ref.coef_.shape == (2, X.shape[1])
    assert est.intercept_.shape == (2,)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-5)
    np.testing.assert_allclose(est.predict(X), ref.predict(X), atol=1e-4)


def test_no_intercept_matches_sklearn(diabetes):
    X, y = diabetes
    clients = make_split(X, y, "quantile")
    ref = Lasso(alpha=0.1, fit_intercept=False, tol=1e-14, max_iter=200_000).fit(X, y)
    est = FedLasso(alpha=0.1, fit_intercept=False, max_rounds=20_000, tol=1e-11).fit(
        X, y, clients=clients)
    assert est.intercept_ == 0.0
    f_ref = enet_objective(X, y, ref.coef_, 0.0, 0.1)
    assert relative_gap(enet_objective(X, y, est.coef_, 0.0, 0.1), f_ref) <= 1e-6


@pytest.mark.parametrize("scheme", ["iid", "quantile"])
def test_fedavg_is_exact_for_a_smooth_penalty(diabetes, scheme):
    """With l1_ratio=0 (ridge) FedAvg with one full-batch step is gradient descent."""
    X, y = diabetes
    clients = make_split(X, y, scheme)
    alpha = 0.01
    ref = Ridge(alpha=alpha * len(y), solver="cholesky").fit(X, y)
    est = FedElasticNet(alpha=alpha, l1_ratio=0.0, solver="fedavg", max_rounds=50_000,
                        tol=1e-11).fit(X, y, clients=clients)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, alpha, 0.0)
    assert relative_gap(enet_objective(X, y, est.coef_, est.intercept_, alpha, 0.0), f_ref) <= 1e-6


def test_fedmid_converges_to_twice_the_l1_strength(diabetes):
    """FedMID applies the L1 prox on the client and again on the server: with one
    client and one full-batch step, its fixed point is exactly the Lasso at 2*alpha."""
    X, y = diabetes
    alpha = 0.05
    est = fit_quietly(FedLasso(alpha=alpha, solver="fedmid", max_rounds=6000, tol=0), X, y)
    double = Lasso(alpha=2 * alpha, tol=1e-14, max_iter=200_000).fit(X, y)
    single = Lasso(alpha=alpha, tol=1e-14, max_iter=200_000).fit(X, y)
    np.testing.assert_allclose(est.coef_, double.coef_, rtol=1e-6, atol=1e-6)
    f_single = enet_objective(X, y, single.coef_, single.intercept_, alpha)
    assert relative_gap(enet_objective(X, y, est.coef_, est.intercept_, alpha), f_single) > 1e-3


def test_fedavg_subgradient_is_dense_and_slow(diabetes):
    """FedAvg (d) never produces exact zeros for L1 and converges sublinearly."""
    X, y = diabetes
    alpha = 0.1
    clients = make_split(X, y, "quantile")
    ref = Lasso(alpha=alpha, tol=1e-14, max_iter=200_000).fit(X, y)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, alpha)
    solver = FedAvg(client_lr_schedule="inverse_sqrt")
    est = fit_quietly(FedLasso(alpha=alpha, solver=solver, max_rounds=3000, tol=0), X, y,
                      clients=clients)
    gaps = [relative_gap(f, f_ref) for f in est.history_["objective"]]
    assert np.count_nonzero(est.coef_) == X.shape[1] > np.count_nonzero(ref.coef_)
    assert gaps[-1] < gaps[300] < gaps[30]  # it does make progress...
    assert gaps[-1] > 1e-6  # ...but is far from exact after 3000 rounds


@pytest.mark.parametrize("solver_cls", [FedMIDOSP, FedAvg])
def test_local_steps_drift_primal_solvers(synthetic, solver_cls):
    """Several local steps on heterogeneous clients: primal averaging is biased."""
    X, y, clients, _ = synthetic
    alpha = 0.3
    ref = Lasso(alpha=alpha, tol=1e-14, max_iter=200_000).fit(X, y)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, alpha)
    est = fit_quietly(FedLasso(alpha=alpha, solver=solver_cls(local_steps=10), max_rounds=1500,
                               tol=0), X, y, clients=clients)
    gaps = np.array([relative_gap(f, f_ref) for f in est.history_["objective"]])
    # stalled: the last 500 rounds gain (almost) nothing, at a clearly non-zero gap
    assert gaps[-1] > 1e-4
    assert gaps[-500] - gaps[-1] < 0.05 * gaps[-1]


def test_feddualavg_drift_shrinks_with_client_lr(synthetic):
    """FedDualAvg with 10 local steps on heterogeneous clients is biased, and the bias
    shrinks as the client learning rate shrinks."""
    X, y, clients, _ = synthetic
    alpha = 0.3
    ref = Lasso(alpha=alpha, tol=1e-14, max_iter=200_000).fit(X, y)
    f_ref = enet_objective(X, y, ref.coef_, ref.intercept_, alpha)
    base = FedDualAvg(local_steps=10)
    est = FedLasso(alpha=alpha, solver=base, max_rounds=1, tol=0)
    lr = fit_quietly(est, X, y, clients=clients).solver_.coef_step_
    biases = []
    for scale, rounds in [(1.0, 300), (0.25, 1200)]:
        solver = FedDualAvg(client_lr=lr * scale, local_steps=10)
        fitted = fit_quietly(FedLasso(alpha=alpha, solver=solver, max_rounds=rounds, tol=0),
                             X, y, clients=clients)
        gaps = [relative_gap(f, f_ref) for f in fitted.history_["objective"]]
        assert abs(gaps[-1] - gaps[rounds // 2]) < 0.05 * gaps[-1]  # at its plateau
        biases.append(gaps[-1])
    assert biases[0] > 1e-4
    assert biases[1] < 0.25 * biases[0]


@pytest.mark.parametrize("solver", ["feddualavg", FedMID()])
def test_prox_solvers_give_exact_zeros(synthetic, solver):
    X, y, clients, w_true = synthetic
    est = fit_quietly(FedLasso(alpha=0.3, solver=solver, max_rounds=300, tol=0), X, y,
                      clients=clients)
    assert 0 < np.count_nonzero(est.coef_) < X.shape[1]
    assert est.history_["nnz"][-1] == np.count_nonzero(est.coef_)
