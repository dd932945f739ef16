"""The monitor pass: ``monitor_every``, Newton's monitor read from its replies, and in
process the monitor carried by the next round's calls (its gradient reused by the step)."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from skfed import FedElasticNet, FedLasso, FedLinearSVC, FedLogisticRegression
from skfed.datafits import ClientObjective, Quadratic
from skfed.datasets import simulate_clients
from skfed.executors import SequentialExecutor, ThreadExecutor
from skfed.federation.layout import Layout
from skfed.federation.monitor_reuse import Reusing, reusing
from skfed.federation.rounds import PLATEAU_WINDOW, _plateaued
from skfed.history import ConvergenceHistory
from skfed.solvers import FedNewton

from .conftest import fit_quietly


def _nan_rounds(est):
    return np.flatnonzero(np.isnan(est.history_["objective"]))


def test_monitor_every_changes_nothing_but_the_monitored_rounds(synthetic):
    X, y, clients, _ = synthetic
    every = fit_quietly(FedLasso(alpha=0.3, solver="fedmid", max_rounds=23, tol=0),
                        X, y, clients=clients)
    sparse = fit_quietly(FedLasso(alpha=0.3, solver="fedmid", max_rounds=23, tol=0,
                                  monitor_every=5), X, y, clients=clients)
    # the algorithm does not depend on its monitor: the same model
    np.testing.assert_array_equal(sparse.coef_, every.coef_)
    assert sparse.intercept_ == every.intercept_
    monitored = [0, 5, 10, 15, 20, 23]  # every fifth round and the last
    expected_nan = sorted(set(range(24)) - set(monitored))
    assert list(_nan_rounds(sparse)) == expected_nan
    for field in ["objective", "stationarity"]:
        np.testing.assert_allclose(sparse.history_[field][monitored],
                                   every.history_[field][monitored], rtol=1e-13)
    # the monitor's traffic only where it ran; the algorithm's everywhere
    mon = sparse.history_["monitor_bytes"]
    assert np.all(mon[expected_nan] == 0) and np.all(mon[monitored] > 0)
    np.testing.assert_array_equal(sparse.history_["bytes_up"], every.history_["bytes_up"])
    assert mon.sum() == pytest.approx(every.history_["monitor_bytes"].sum() * 6 / 24)
    assert sparse.objective_ == every.history_["objective"][-1]


def test_monitor_every_stops_at_the_next_monitored_round(synthetic):
    X, y, clients, _ = synthetic
    every = fit_quietly(FedLasso(alpha=0.3, solver="feddyn", max_rounds=2000, tol=1e-3),
                        X, y, clients=clients)
    k = 7
    sparse = fit_quietly(FedLasso(alpha=0.3, solver="feddyn", max_rounds=2000, tol=1e-3,
                                  monitor_every=k), X, y, clients=clients)
    assert every.n_iter_ < 2000
    assert sparse.n_iter_ % k == 0
    assert every.n_iter_ <= sparse.n_iter_ < every.n_iter_ + k
    assert not np.isnan(sparse.history_["stationarity"][-1])
    assert sparse.history_["stationarity"][-1] <= 1e-3 * sparse.history_["stationarity"][0]


def test_plateau_rule_reads_the_monitored_rounds_only():
    h = ConvergenceHistory()
    for r in range(3 * PLATEAU_WINDOW):
        h.append(round=r, objective=(1.0 if r % 5 == 0 else np.nan))
    assert _plateaued(h, 1e-6)  # flat where it was measured; NaN rounds ignored
    h = ConvergenceHistory()
    for r in range(3 * PLATEAU_WINDOW):
        h.append(round=r, objective=(1.0 / (1 + r) if r % 5 == 0 else np.nan))
    assert not _plateaued(h, 1e-6)


def test_non_smooth_fit_stops_on_its_plateau_with_monitor_every():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clients = simulate_clients(X, y, n_clients=4, scheme="iid", random_state=0)
    est = fit_quietly(FedLinearSVC(C=0.05, loss="hinge", solver="fedavg", max_rounds=3000,
                                   tol=1e-3, monitor_every=4), X, y, clients=clients)
    assert est.n_iter_ < 3000 and est.n_iter_ % 4 == 0


class _NewtonWithItsOwnMonitor(FedNewton):
    """The same solver, monitored by a pass of its own every round."""
    monitors_in_replies = False


class _Unfused(SequentialExecutor):
    """In process, every monitor a pass of its own (no round's calls carry it)."""
    fuses_monitor = False


@pytest.mark.parametrize("make", [
    lambda s: FedLasso(alpha=0.1, solver=s, tol=1e-10),
    lambda s: FedLogisticRegression(C=0.1, l1_ratio=1.0, solver=s, tol=1e-10),
], ids=["lasso", "logistic-l1"])
def test_newton_is_monitored_from_its_replies(make, synthetic):
    X, y, clients, _ = synthetic
    if "Logistic" in type(make("newton")).__name__:
        X, y = load_breast_cancer(return_X_y=True)
        X = StandardScaler().fit_transform(X)
        clients = simulate_clients(X, y, n_clients=5, scheme="dirichlet", alpha=0.3,
                                   random_state=0)
    fused = fit_quietly(make(FedNewton()), X, y, clients=clients)
    own = fit_quietly(make(_NewtonWithItsOwnMonitor()).set_params(executor=_Unfused()),
                      X, y, clients=clients)
    # the same fit, the same stopping round, the same history values
    assert fused.n_iter_ == own.n_iter_ < 50
    np.testing.assert_allclose(fused.coef_, own.coef_, rtol=1e-12, atol=1e-14)
    for field in ["objective", "stationarity"]:
        np.testing.assert_allclose(fused.history_[field], own.history_[field],
                                   rtol=1e-9, atol=1e-14)
    # ... without a monitor pass of its own between: only the last model, where
    # the solver's own stopping condition holds, is checked by a gradient pass
    # (the pass of the solver monitored on its own, cheaper than a Newton round)
    mon, own_mon = fused.history_["monitor_bytes"], own.history_["monitor_bytes"]
    assert mon[0] > 0 and np.all(mon[1:-1] == 0)
    assert mon[-1] == own_mon[-1] < fused.history_["bytes_up"][-1]


def test_newton_at_max_rounds_monitors_the_last_model_by_a_pass():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clients = simulate_clients(X, y, n_clients=5, scheme="iid", random_state=0)
    est = fit_quietly(FedLogisticRegression(C=1.0, solver="newton", max_rounds=2, tol=0),
                      X, y, clients=clients)
    assert est.n_iter_ == 2 and not np.any(np.isnan(est.history_["objective"]))
    mon = est.history_["monitor_bytes"]
    assert mon[1] == 0 and mon[2] == 5 * (2 * 8 * 31 + 8)  # a gradient each way, a value


# --- what Newton skips, and the per-output rule --------------------------------
def test_newton_with_a_full_hessian_skips_the_eigenvalue_pass(synthetic):
    X, y, clients, _ = synthetic
    newton = fit_quietly(FedLasso(alpha=0.3, solver="newton"), X, y, clients=clients)
    first_order = fit_quietly(FedLasso(alpha=0.3, solver="dualfl", max_rounds=2), X, y,
                              clients=clients)
    # the sizes/constants pass and the sites' metadata only; the pooled eigenvalue
    # (one round of the unit vectors' curvature products, and one of feature means)
    # is the first-order solvers' alone
    assert newton.history_.setup_rounds == 2
    assert first_order.history_.setup_rounds == 2 + 2
    assert first_order.history_.setup_bytes > newton.history_.setup_bytes
    quasi = FedNewton(max_message_bytes=64)  # gradients only: its first step needs them
    assert not FedNewton().needs_smoothness(newton.solver_.problem_.layout,
                                            newton.solver_.problem_.datafit)
    assert quasi.needs_smoothness(newton.solver_.problem_.layout,
                                  newton.solver_.problem_.datafit)


def test_output_blocks_only_where_the_outputs_are_separate_problems():
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clients = simulate_clients(X, y, n_clients=3, scheme="iid", random_state=0)
    svc = FedLinearSVC().fit(X, y, clients=clients)
    blocks = svc.solver_.problem_.output_blocks
    assert len(blocks) == 3
    assert list(blocks[1]) == list(range(13, 26)) + [3 * 13 + 1]  # row 1 and intercept 1
    multinomial = FedLogisticRegression().fit(X, y, clients=clients)
    assert multinomial.solver_.problem_.output_blocks is None  # coupled by the softmax
    ball = FedLinearSVC(max_rounds=3, tol=0, solver="fedavg")
    fit_quietly(ball, X, y, clients=clients)
    assert ball.solver_.problem_.output_blocks is not None


# -- the monitor carried by the next round's calls, in process ------------------------
class _UnfusedThreads(ThreadExecutor):
    fuses_monitor = False


@pytest.mark.parametrize("solver", ["fedavg", "fedmid", "feddualavg", "scaffold"])
@pytest.mark.parametrize("threads", [False, True], ids=["sequential", "threads"])
def test_a_monitored_round_computes_the_models_gradient_once(synthetic, evaluations,
                                                             solver, threads):
    """In process, a round of a solver whose clients hold no state carries the monitor of
    the model it starts from, and a one-step solver's step takes the monitor's gradient
    there (one pass over the rows instead of two): the fit, its history and its bytes
    are the separate passes' bit for bit. A stateful solver (SCAFFOLD's control
    variates) keeps the monitor's own pass: a step after the round that stops the fit
    would change its states."""
    X, y, clients, _ = synthetic
    params = dict(alpha=0.3, solver=solver, max_rounds=8, tol=0)
    fused = fit_quietly(FedElasticNet(l1_ratio=0.0, **params, executor=(
        "threads" if threads else "sequential")), X, y, clients=clients)
    fused_passes = dict(evaluations)
    evaluations.clear()
    plain = fit_quietly(FedElasticNet(l1_ratio=0.0, **params, executor=(
        _UnfusedThreads() if threads else _Unfused())), X, y, clients=clients)
    np.testing.assert_array_equal(fused.coef_, plain.coef_)
    assert fused.intercept_ == plain.intercept_
    for key in ("objective", "stationarity", "monitor_bytes", "bytes_up", "bytes_down"):
        np.testing.assert_array_equal(fused.history_[key], plain.history_[key])
    assert fused_passes["value"] == evaluations["value"]  # every monitor still computed
    n_clients = len(np.unique(clients))
    carried = 0 if solver == "scaffold" else (fused.n_iter_ - 1) * n_clients
    assert evaluations["gradient"] - fused_passes["gradient"] == carried


def test_a_fit_stopped_by_a_carried_monitor_spends_that_rounds_step_only(synthetic):
    """tol > 0: the round whose carried monitor meets the stopping rule is spent on
    monitoring (its step discarded, as through services and on Dask): the same model and
    rounds as the separate passes; the last record's monitor bytes count that step."""
    X, y, clients, _ = synthetic
    params = dict(alpha=0.3, l1_ratio=0.0, solver="fedmid", max_rounds=500, tol=1e-3)
    fused = fit_quietly(FedElasticNet(**params), X, y, clients=clients)
    plain = fit_quietly(FedElasticNet(**params, executor=_Unfused()), X, y, clients=clients)
    assert 1 < fused.n_iter_ == plain.n_iter_ < 500
    np.testing.assert_array_equal(fused.coef_, plain.coef_)
    for key in ("objective", "stationarity", "bytes_up", "bytes_down"):
        np.testing.assert_array_equal(fused.history_[key], plain.history_[key])
    mon, own = fused.history_["monitor_bytes"], plain.history_["monitor_bytes"]
    np.testing.assert_array_equal(mon[:-1], own[:-1])
    step = fused.history_["bytes_up"][-1] + fused.history_["bytes_down"][-1]
    assert mon[-1] == own[-1] + step


@pytest.mark.parametrize("change", ["same", "one bit", "negative zero", "float32", "rows"])
def test_a_kept_gradient_answers_its_model_only(change):
    """The step reads the monitor's gradient at exactly its model (dtype, shape, bytes,
    every row), as a copy it may change in place; any other call is the objective's."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    layout = Layout(n_features=3, n_outputs=1, fit_intercept=True)
    objective = ClientObjective(Quadratic(), X, rng.normal(size=(30, 1)), np.ones(30), layout)
    w = np.array([0.5, -0.5, 0.0, 0.1])
    stand_in = reusing(objective, w, objective.value_and_gradient(w))
    assert isinstance(stand_in, Reusing) and stand_in.layout is objective.layout
    theta, rows = w.copy(), None
    if change == "one bit":
        theta[1] = np.nextafter(theta[1], 0.0)
    elif change == "negative zero":
        theta[2] = -0.0
    elif change == "float32":
        theta = theta.astype(np.float32)
    elif change == "rows":
        rows = np.arange(10)
    kept = stand_in._kept
    reused = stand_in._reused(theta, rows)
    assert reused == (change == "same")
    grad = stand_in.gradient(theta, rows)
    np.testing.assert_array_equal(grad, objective.gradient(theta, rows))
    grad += 1.0  # the step's own copy
    np.testing.assert_array_equal(kept.grad, objective.gradient(w))
    # nothing to reuse: no monitor reply, or an objective whose gradient may differ
    assert reusing(objective, w, None) is objective
    assert reusing(stand_in, w, objective.value_and_gradient(w)) is stand_in
