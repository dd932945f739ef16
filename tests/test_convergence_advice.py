"""The ConvergenceWarning names the change that finishes *this* fit, measured
on its own history, and the change works."""

import re
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from skfed import FedLinearSVC, FedLogisticRegression
from skfed.datasets import simulate_clients


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    return X, y, simulate_clients(X, y, n_clients=5, scheme="dirichlet", alpha=0.3,
                                  random_state=0)


def _warning(est, X, y, clients):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y, clients=clients)
    return [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]


@pytest.mark.parametrize("make", [
    lambda: FedLogisticRegression(C=0.1, solver="newton", max_rounds=2),
    # measured: x0.9921 per round over rounds 200-400; needs 1,348 rounds in all
    lambda: FedLogisticRegression(C=0.1, solver="feddyn", max_rounds=400, tol=1e-6,
                                  monitor_every=4),
], ids=["newton", "feddyn-monitor-every"])
def test_the_suggested_max_rounds_finishes_the_fit(make, cancer):
    X, y, clients = cancer
    est = make()
    (message,) = _warning(est, X, y, clients)
    assert f"in {est.max_rounds} rounds" in message
    assert "at the rate measured over rounds" in message
    suggested = int(re.search(r"max_rounds=(\d+)", message).group(1))
    assert suggested > est.max_rounds
    assert _warning(est.set_params(max_rounds=suggested), X, y, clients) == []


def test_a_first_order_solver_on_a_smooth_loss_is_pointed_to_newton(cancer):
    X, y, clients = cancer
    (message,) = _warning(FedLogisticRegression(C=0.1, solver="feddyn", max_rounds=5),
                          X, y, clients)
    assert "solver='newton'" in message
    (message,) = _warning(FedLogisticRegression(C=0.1, solver="newton", max_rounds=2),
                          X, y, clients)
    assert "solver=" not in message  # no other solver is faster


def test_a_slowing_rate_gives_a_lower_bound_and_newton_finishes(cancer):
    """FedDyn on L1 logistic regression slows down (measured: x0.9915 then
    x0.9977 per round over rounds 100-200; still 3e-4 of its start at round
    5,000): the warning gives only a lower bound on the rounds, which holds,
    names Newton, and Newton finishes the fit."""
    X, y, clients = cancer
    est = FedLogisticRegression(C=0.1, l1_ratio=1.0, solver="feddyn", max_rounds=200)
    (message,) = _warning(est, X, y, clients)
    assert "its rate is slowing" in message and "max_rounds=" not in message
    assert "use solver='newton'" in message
    bound = int(re.search(r"needs over (\d+) more rounds", message).group(1))
    assert len(_warning(est.set_params(max_rounds=200 + bound), X, y, clients)) == 1
    assert _warning(FedLogisticRegression(C=0.1, l1_ratio=1.0, solver="newton"),
                    X, y, clients) == []


def test_a_biased_solver_says_so(cancer):
    X, y, clients = cancer
    (message,) = _warning(FedLogisticRegression(C=0.1, l1_ratio=1.0, solver="fedavg",
                                                max_rounds=60), X, y, clients)
    assert "'fedavg' is biased" in message


def test_a_non_smooth_fit_reports_its_measured_improvement(cancer):
    X, y, clients = cancer
    (message,) = _warning(FedLinearSVC(C=0.1, loss="hinge", max_rounds=50), X, y, clients)
    found = re.search(r"improved by ([0-9.e+-]+) \(relative\) over rounds 25-50", message)
    assert found and float(found.group(1)) > 1e-4
    assert "raise max_rounds or tol" in message and "solver=" not in message  # dualfl already


def test_stall_branch_on_a_flat_history():
    from skfed.federation.advice import convergence_advice
    from skfed.history import ConvergenceHistory

    class _Solver:
        name = "fedmid"

        def guarantee(self, problem, participation):
            return "biased", "client drift"

    class _Datafit:
        smooth = True

    class _Problem:
        datafit = _Datafit()

    h = ConvergenceHistory()
    for r in range(40):
        h.append(round=r, objective=1.0, stationarity=1.0 if r == 0 else 0.1)
    text = convergence_advice(h, tol=1e-4, solver=_Solver(), problem=_Problem(),
                              participation=1.0)
    assert "did not improve: more rounds will not help" in text
    assert "use solver='newton'" in text and "'fedmid' is biased (client drift)" in text
    assert np.isfinite(h["stationarity"]).all()
