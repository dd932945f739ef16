"""``privacy=DifferentialPrivacy(epsilon)`` on defaults: a solver that carries the guarantee is
chosen and recorded, noise that swamps the signal warns with the measured ratio, and a DP fit
reports non-convergence like any fit."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from skfed import FedLogisticRegression
from skfed.solvers import FedAvg

pytest.importorskip("dp_accounting", reason="needs skfed[privacy]")
pytest.importorskip("cryptography", reason="needs skfed[privacy]")
from skfed.privacy import DifferentialPrivacy, PrivacyNoiseWarning  # noqa: E402


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _fit(X, y, n_sites, epsilon, **kw):
    est = FedLogisticRegression(privacy=DifferentialPrivacy(epsilon, random_state=0),
                                max_rounds=100, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y, clients=np.arange(len(y)) % n_sites)
    return est, caught


def test_default_solver_is_dp_fedavg_and_recorded(cancer):
    X, y = cancer
    est, caught = _fit(X, y, 50, 1.0)
    privacy = est.history_.privacy
    assert privacy["solver"] == "fedavg(client_lr=2)"
    assert privacy["client_weighting"] == "uniform"
    assert "solver='auto' under differential privacy" in privacy["chosen"]
    assert isinstance(est.solver_, FedAvg) and est.solver_.client_lr == 2.0
    assert est.get_params()["solver"] == "auto"  # fit does not touch the parameters
    majority = max(np.mean(y), 1 - np.mean(y))
    assert est.score(X, y) > majority + 0.2  # 50 sites carry epsilon=1
    assert not any(w.category is PrivacyNoiseWarning for w in caught)
    noise = privacy["noise_report"]
    assert noise["fit_ratio"] < 1 and noise["rounds"] == 100
    # no stationarity under DP: the ConvergenceWarning reports the last noisy step
    conv = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert len(conv) == 1 and "under differential privacy there is no stationarity" in conv[0]
    assert f"moved the model by {noise['final_step']:.3g} of its norm" in conv[0]


def test_noise_swamping_the_signal_warns_with_the_ratio(cancer):
    """4 sites at epsilon=1: the model falls below the majority-class rate, and says why."""
    X, y = cancer
    est, caught = _fit(X, y, 4, 1.0)
    majority = max(np.mean(y), 1 - np.mean(y))
    assert est.score(X, y) < majority
    msgs = [str(w.message) for w in caught if w.category is PrivacyNoiseWarning]
    assert len(msgs) == 1
    noise = est.history_.privacy["noise_report"]
    assert f"norm {noise['noise_norm']:.3g} per round" in msgs[0]
    for advice in ("more sites", "a larger epsilon", "fewer rounds", "a larger clip_norm"):
        assert advice in msgs[0]
    assert noise["fit_ratio"] > 1
    # the same fit without privacy: no such warning, and far better
    plain = FedLogisticRegression().fit(X, y, clients=np.arange(len(y)) % 4)
    assert plain.score(X, y) > 0.95


def test_an_explicit_incompatible_solver_is_still_refused(cancer):
    X, y = cancer
    est = FedLogisticRegression(solver="newton", privacy=DifferentialPrivacy(1.0))
    with pytest.raises(ValueError, match="solver 'newton' cannot run under differential "
                                         "privacy"):
        est.fit(X, y, clients=np.arange(len(y)) % 4)
