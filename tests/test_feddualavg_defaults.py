"""FedDualAvg's defaults under partial participation (issue 14, item 5).

The FedDualAvg paper's LASSO set III (8 true non-zeros of 1024 features, 64
heterogeneous clients), 10 clients a round, ``alpha = 0.1`` (where the pooled
scikit-learn Lasso finds exactly the true support): with its default steps
``FedLasso(solver="feddualavg")`` must find the support within 100 rounds.
The defaults (accelerated server weights, the step safe for the sampled
clients' loss, the weight cap) were tuned on seed 0; the test uses seed 3,
never looked at while tuning. ``server_momentum="none"`` keeps the paper's
rule, the previous default, which is at F1 ~ 0.07 after 100 rounds.
"""

import numpy as np
import pytest
from sklearn.linear_model import Lasso

from skfed import FedLasso
from skfed.datasets import make_federated_lasso
from skfed.metrics import support_scores
from skfed.solvers import FedDualAvg
from skfed.solvers.dual_averaging import NESTEROV_MAX_WEIGHT, nesterov_weight

from .conftest import fit_quietly

SEED = 3  # not the tuning seed (0)


@pytest.fixture(scope="module")
def set_iii():
    return make_federated_lasso("III", random_state=SEED)


def _fit(data, solver, rounds=100):
    X, y, clients, _ = data
    est = FedLasso(alpha=0.1, solver=solver, participation=10 / 64, max_rounds=rounds, tol=0,
                   monitor_every=rounds, random_state=SEED)
    return fit_quietly(est, X, y, clients=clients)


def test_default_recovers_the_support_of_set_III_within_100_rounds(set_iii):
    X, y, _, w_true = set_iii
    assert support_scores(Lasso(alpha=0.1).fit(X, y).coef_, w_true)["f1"] == 1.0
    est = _fit(set_iii, "feddualavg")
    assert est.solver_.nesterov_
    assert support_scores(est.coef_, w_true)["f1"] == 1.0
    # exactly the 8 true features are non-zero: exact zeros, not small values
    assert np.count_nonzero(est.coef_) == np.count_nonzero(w_true)
    assert np.all(est.history_["n_participants"][1:] == 10)


def test_the_papers_rule_is_kept_and_is_the_previous_default(set_iii):
    est = _fit(set_iii, FedDualAvg(server_momentum="none"))
    solver, problem = est.solver_, est.solver_.problem_
    assert not solver.nesterov_
    # the roughest client's 1 / L per block, as before
    np.testing.assert_array_equal(solver.steps_, problem.block_steps(worst_client=True))
    assert support_scores(est.coef_, set_iii[3])["f1"] < 0.2


def test_the_default_step_is_safe_for_the_sampled_clients(set_iii):
    est = _fit(set_iii, "feddualavg", rounds=1)
    problem = est.solver_.problem_
    np.testing.assert_array_equal(est.solver_.steps_, problem.sampled_steps(10))
    assert est.solver_.steps_[0] > 5 * problem.block_steps(worst_client=True)[0]


def test_nesterov_weights():
    # full participation: Tseng's (k + 2) / 2, uncapped
    assert [nesterov_weight(k, False) for k in (0, 1, 2, 100)] == [1.0, 1.5, 2.0, 51.0]
    # sampled clients: the same ramp, capped, then a 1 / sqrt(k) decay, never below 1
    peak = int(2 * NESTEROV_MAX_WEIGHT - 2)
    ramp = [nesterov_weight(k, True) for k in range(peak + 1)]
    assert ramp[:3] == [1.0, 1.5, 2.0] and ramp[-1] == NESTEROV_MAX_WEIGHT
    after = np.array([nesterov_weight(k, True) for k in range(peak, 100 * peak)])
    assert np.all(np.diff(after) <= 0) and after.min() >= 1.0
    assert nesterov_weight(4 * peak, True) == pytest.approx(NESTEROV_MAX_WEIGHT / 2)
    assert nesterov_weight(10**9, True) == 1.0


def test_auto_is_the_papers_method_elsewhere(synthetic):
    X, y, clients, _ = synthetic
    for solver, participation in [(FedDualAvg(), 1.0), (FedDualAvg(local_steps=3), 0.5),
                                  (FedDualAvg(batch_size=5, local_epochs=1), 0.5)]:
        est = fit_quietly(FedLasso(alpha=0.3, solver=solver, participation=participation,
                                   max_rounds=3, tol=0, random_state=0),
                          X, y, clients=clients)
        assert not est.solver_.nesterov_


def test_server_momentum_is_checked(synthetic):
    X, y, clients, _ = synthetic
    with pytest.raises(ValueError, match="server_momentum must be one of"):
        FedLasso(solver=FedDualAvg(server_momentum="heavy-ball")).fit(X, y, clients=clients)
    with pytest.raises(ValueError, match="needs one full-batch local step"):
        FedLasso(solver=FedDualAvg(server_momentum="nesterov", local_steps=2)).fit(
            X, y, clients=clients)


def test_forced_nesterov_under_full_participation_reaches_the_pooled_optimum(synthetic):
    """Exact, not necessarily faster: without a restart, acceleration can take more
    rounds than plain dual averaging on a strongly convex problem (470 against 297
    to tol=1e-8 here), which is why "auto" leaves full participation alone."""
    X, y, clients, _ = synthetic
    ref = fit_quietly(FedLasso(alpha=0.3, solver="feddualavg", max_rounds=3000, tol=1e-10),
                      X, y, clients=clients)
    est = fit_quietly(FedLasso(alpha=0.3, solver=FedDualAvg(server_momentum="nesterov"),
                               max_rounds=3000, tol=1e-8), X, y, clients=clients)
    assert est.n_iter_ < 3000
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-5)
    np.testing.assert_array_equal(est.coef_ == 0, ref.coef_ == 0)


def test_warm_start_into_partial_participation(synthetic):
    """A warm start from a full-participation fit (no accelerated state) continues."""
    X, y, clients, _ = synthetic
    est = FedLasso(alpha=0.3, solver="feddualavg", max_rounds=20, tol=0, warm_start=True,
                   random_state=0)
    fit_quietly(est, X, y, clients=clients)
    first = est.history_["objective"][-1]
    est.set_params(participation=0.5)
    fit_quietly(est, X, y, clients=clients)
    assert est.solver_.nesterov_ and np.all(np.isfinite(est.coef_))
    assert est.history_["objective"][0] == pytest.approx(first)
