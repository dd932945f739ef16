"""history_: fields, communication counts, stopping, warnings, warm start, verbose."""

import matplotlib
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso

from skfed import ConvergenceHistory, FedLasso
from skfed.history import FIELDS
from skfed.solvers import FedDualAvg, FedMIDOSP

from .conftest import enet_objective, fit_quietly

matplotlib.use("Agg")


@pytest.fixture
def fitted(synthetic):
    X, y, clients, _ = synthetic
    return fit_quietly(FedLasso(alpha=0.3, solver="feddualavg", max_rounds=40, tol=0,
                                participation=0.5, random_state=0), X, y,
                       clients=clients), synthetic


def test_records_and_fields(fitted):
    est, (X, y, clients, _) = fitted
    h = est.history_
    assert len(h) == est.n_iter_ + 1 == 41
    assert list(h["round"]) == list(range(41))
    frame = h.to_frame()
    assert list(frame.columns) == list(FIELDS)
    assert set(h.to_dict()) == set(FIELDS)
    # objective is the pooled objective at the server model
    assert h["objective"][-1] == pytest.approx(
        enet_objective(X, y, est.coef_, est.intercept_, 0.3), rel=1e-12)
    assert h["nnz"][-1] == np.count_nonzero(est.coef_)
    assert np.all(np.diff(h["wall_time"][1:]) >= 0)
    assert np.all(h["n_participants"][1:] == 4)
    assert np.all(np.isfinite(h["consensus"][1:])) and np.isnan(h["consensus"][0])
    with pytest.raises(KeyError, match="unknown history field"):
        h["loss"]


def test_bytes_are_what_feddualavg_sends(fitted):
    est, (X, _, clients, _) = fitted
    h = est.history_
    p = X.shape[1] + 1
    # down (partial participation: the accelerated default): Nesterov's point y
    # (p floats) and the round index; up: dz (p floats) and deps
    assert np.all(h["bytes_down"][1:] == 4 * (8 * p + 8))
    assert np.all(h["bytes_up"][1:] == 4 * (8 * p + 8))
    # monitoring: every client (8) gets the model and returns loss + gradient
    assert np.all(h["monitor_bytes"][1:] == 8 * (16 * p + 8))
    # setup: the sites' metadata round (the task's name down; rows, weight sum,
    # features, target dimension and count up: 6 numbers per client), one summary
    # round (the kind of constants down; rows, weight sum and four smoothness
    # constants up: 7 numbers per client), one round of curvature products (the
    # n_features unit vectors down, H_j times them up: d x d each way per client) and
    # one round of feature means (one vector per client)
    d, n_clients = X.shape[1], 8
    assert h.setup_rounds == 4
    assert h.setup_bytes == (8 * 6 * n_clients + 8 * 7 * n_clients
                             + 2 * n_clients * 8 * d * d
                             + n_clients * 8 * d)


def test_bytes_are_what_fedmid_sends(synthetic):
    X, y, clients, _ = synthetic
    est = fit_quietly(FedLasso(alpha=0.3, solver=FedMIDOSP(), max_rounds=3, tol=0), X, y,
                      clients=clients)
    p = X.shape[1] + 1
    assert np.all(est.history_["bytes_down"][1:] == 8 * (8 * p + 8))
    assert np.all(est.history_["bytes_up"][1:] == 8 * (8 * p + 8))


def test_suboptimality_against_reference(synthetic):
    X, y, clients, _ = synthetic
    est = FedLasso(alpha=0.3, max_rounds=5000, tol=1e-10).fit(X, y, clients=clients)
    ref = Lasso(alpha=0.3, tol=1e-14, max_iter=100_000).fit(X, y)
    f_star = enet_objective(X, y, ref.coef_, ref.intercept_, 0.3)
    assert np.all(np.isnan(est.history_["suboptimality"]))
    est.history_.set_reference(f_star)
    sub = est.history_["suboptimality"]
    assert sub[0] > 0.1 and abs(sub[-1]) < 1e-8
    axes = est.history_.plot(["objective", "stationarity", "nnz"])
    assert axes[0].get_ylabel() == "suboptimality" and len(axes) == 3


def test_stopping_rule_and_convergence_warning(synthetic):
    X, y, clients, _ = synthetic
    est = FedLasso(alpha=0.3, tol=1e-3).fit(X, y, clients=clients)
    h = est.history_
    assert h["stationarity"][-1] <= 1e-3 * h["stationarity"][0] < h["stationarity"][-2]
    # a first-order solver: the default (Newton) solves this Lasso in one round
    with pytest.warns(ConvergenceWarning, match="did not reach tol=1e-12 in 5 rounds"):
        FedLasso(alpha=0.3, tol=1e-12, max_rounds=5, solver="dualfl").fit(X, y, clients=clients)


def test_zero_solution_converges_at_round_zero(synthetic):
    X, y, clients, _ = synthetic
    est = FedLasso(alpha=1e6, fit_intercept=False).fit(X, y, clients=clients)
    assert est.n_iter_ == 0 and not np.any(est.coef_)


@pytest.mark.parametrize("solver", ["dualfl", "feddualavg", "feddyn", "scaffold", "fedmls"])
def test_warm_start_resumes_the_solver_state(synthetic, solver):
    """50 rounds, then 50 more with warm_start, is the same run as 100 rounds."""
    X, y, clients, _ = synthetic
    kw = {"alpha": 0.3, "l1_ratio": 0.0 if solver == "scaffold" else 1.0, "solver": solver,
          "tol": 0}
    from skfed import FedElasticNet

    warm = FedElasticNet(max_rounds=20, warm_start=True, **kw)
    fit_quietly(warm, X, y, clients=clients)
    fit_quietly(warm, X, y, clients=clients)
    cold = fit_quietly(FedElasticNet(max_rounds=40, **kw), X, y, clients=clients)
    np.testing.assert_allclose(warm.history_["objective"][-1], cold.history_["objective"][-1],
                               rtol=1e-10)


def test_warm_start_continues(synthetic):
    X, y, clients, _ = synthetic
    est = fit_quietly(FedLasso(alpha=0.3, max_rounds=50, tol=0, warm_start=True), X, y,
                      clients=clients)
    first = est.history_["objective"][-1]
    fit_quietly(est, X, y, clients=clients)
    assert est.history_["objective"][0] == pytest.approx(first, rel=1e-12)
    cold = fit_quietly(FedLasso(alpha=0.3, max_rounds=100, tol=0), X, y, clients=clients)
    assert est.history_["objective"][-1] <= cold.history_["objective"][-1] * (1 + 1e-9)


def test_uniform_client_weighting(synthetic):
    X, y, clients, _ = synthetic
    keep = np.ones(len(y), dtype=bool)
    keep[np.flatnonzero(clients == 0)[10:]] = False  # client 0 much smaller
    X, y, clients = X[keep], y[keep], clients[keep]
    uni = FedLasso(alpha=0.3, client_weighting="uniform", max_rounds=5000, tol=1e-10).fit(
        X, y, clients=clients)
    # uniform weighting = pooled Lasso with each sample weighted 1 / n_client
    sw = 1.0 / np.bincount(clients)[clients]
    ref = Lasso(alpha=0.3, tol=1e-14, max_iter=100_000).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(uni.coef_, ref.coef_, atol=1e-5)


def test_verbose_progress(synthetic, capsys):
    X, y, clients, _ = synthetic
    fit_quietly(FedLasso(alpha=0.3, max_rounds=3, tol=0, verbose=1), X, y, clients=clients)
    err = capsys.readouterr().err
    assert "round 3/3" in err and "[" in err and "stopped at max_rounds after 3 rounds" in err
    FedLasso(alpha=0.3, max_rounds=5000, tol=1e-3, verbose=2).fit(X, y, clients=clients)
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("converged after")
    assert [line.split()[1] for line in lines[:-1]] == [str(r) for r in range(1, len(lines))]


def test_solver_object_is_not_mutated(synthetic):
    X, y, clients, _ = synthetic
    solver = FedDualAvg()
    est = FedLasso(alpha=0.3, solver=solver, max_rounds=3, tol=0)
    fit_quietly(est, X, y, clients=clients)
    assert est.solver is solver and solver.client_lr == "auto"
    assert not hasattr(solver, "steps_") and hasattr(est.solver_, "steps_")


def test_empty_history_repr():
    assert "rounds=0" in repr(ConvergenceHistory())
