"""The monitor pass: ``monitor_every`` and Newton's monitor read from its replies."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from skfed import FedLasso, FedLinearSVC, FedLogisticRegression
from skfed.datasets import simulate_clients
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
    own = fit_quietly(make(_NewtonWithItsOwnMonitor()), X, y, clients=clients)
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
