"""Errors, constraints, class handling and model selection for the estimator family."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.preprocessing import StandardScaler

from skfed import (FedElasticNet, FedLasso, FedLinearSVC, FedLogisticRegression, FedLowRank,
                   FedSVM)
from skfed.datasets import make_federated_low_rank

from . import _oracles as orc


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y, np.arange(len(y)) % 4


def test_fedsvm_is_the_documented_alias():
    assert FedSVM is FedLinearSVC


def test_single_class_overall_is_refused(cancer):
    X, y, site = cancer
    with pytest.raises(ValueError, match="at least 2 classes.*got 1 class"):
        FedLogisticRegression().fit(X, np.zeros(len(y)), clients=site)
    with pytest.raises(ValueError, match="got 1 class"):
        FedLinearSVC().fit(X, np.ones(len(y)), clients=site)


@pytest.mark.parametrize("solver", ["feddyn", "feddualavg", "scaffold", "fedprox", "fedpd"])
def test_hinge_with_a_smooth_only_solver_is_refused(cancer, solver):
    X, y, site = cancer
    with pytest.raises(ValueError, match="needs a smooth loss.*Hinge"):
        FedLinearSVC(loss="hinge", solver=solver).fit(X, y, clients=site)


def test_hinge_with_l1_and_dualfl_is_refused_with_the_alternative(cancer):
    X, y, site = cancer
    with pytest.raises(ValueError, match="only for the hinge loss with a smooth penalty.*fedmls"):
        FedLinearSVC(loss="hinge", penalty="l1", solver="dualfl").fit(X, y, clients=site)


def test_auto_solver_for_the_hinge_loss(cancer):
    X, y, site = cancer
    fit = lambda **kw: FedLinearSVC(loss="hinge", max_rounds=5, **kw).fit(X, y, clients=site)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert fit().solver_.name == "dualfl"
        assert fit(penalty="l1").solver_.name == "fedmls"
        assert fit(participation=0.5).solver_.name == "fedavg"


@pytest.mark.parametrize("solver", ["fedavg", "fedmls", "dsgd"])
def test_constraints_refuse_subgradient_solvers(solver):
    X, y = load_wine(return_X_y=True)
    with pytest.raises(ValueError, match="constraint|smooth penalties"):
        FedLogisticRegression(constraint="l2_ball", solver=solver).fit(
            StandardScaler().fit_transform(X), y, clients=np.arange(len(y)) % 3)


@pytest.mark.parametrize("constraint, norm", [("l1_ball", 1), ("l2_ball", 2)])
def test_lasso_constraint_is_enforced(constraint, norm):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 6))
    y = X @ np.array([3.0, -2.0, 1.0, 0, 0, 0]) + 0.1 * rng.standard_normal(120)
    site = np.arange(120) % 4
    est = FedLasso(alpha=0.0, constraint=constraint, radius=1.0, tol=1e-10,
                   max_rounds=3000).fit(X, y, clients=site)
    assert np.linalg.norm(est.coef_, norm) <= 1.0 + 1e-9
    if constraint == "l1_ball":
        best = orc.l1_ball_ls_optimum(X, y, 1.0)
        value = orc.ls_objective(X, y[:, None], est.coef_[None], est.intercept_)
        assert abs(value - best) / best <= 1e-6


def test_constraint_with_feddualavg_projects_like_the_paper():
    X, y, site = make_federated_low_rank("III", n_clients=4, matrix_shape=(3, 3), flatten=True,
                                         random_state=0)[:3]
    est = FedLasso(alpha=0.01, constraint="l1_ball", radius=0.5, solver="feddualavg",
                   tol=1e-8, max_rounds=2000).fit(X, y, clients=site)
    assert np.abs(est.coef_).sum() <= 0.5 + 1e-9


@pytest.mark.parametrize("est, grid, data", [
    (FedLasso(max_rounds=200), {"alpha": [0.05, 0.2], "solver__proximal": [0.1, 0.3]},
     "regression"),
    (FedElasticNet(max_rounds=200), {"alpha": [0.05, 0.2], "solver__local_rtol": [1e-2, 1e-3]},
     "regression"),
    (FedLogisticRegression(max_rounds=200), {"C": [0.1, 1.0], "solver__proximal": [0.03, 0.1]},
     "classification"),
    (FedLinearSVC(max_rounds=200), {"C": [0.01, 0.1], "solver__proximal": [0.03, 0.1]},
     "classification"),
    (FedLowRank(max_rounds=200), {"alpha": [0.1, 0.5], "solver__proximal": [0.1, 0.3]},
     "multi-output"),
])
def test_grid_search_over_C_and_solver_parameters_with_group_folds(est, grid, data):
    from skfed.solvers import DualFL

    rng = np.random.default_rng(0)
    X = rng.standard_normal((160, 5))
    site = np.arange(160) % 4
    if data == "regression":
        y = X @ rng.standard_normal(5)
    elif data == "classification":
        y = (X[:, 0] - X[:, 1] > 0).astype(int)
    else:
        y = X @ rng.standard_normal((5, 3))
    est = est.set_params(solver=DualFL())
    search = GridSearchCV(est, grid, cv=GroupKFold(n_splits=4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search.fit(X, y, groups=site, clients=site)
    assert search.best_estimator_.n_clients_ == 4  # refit on all four sites
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert len(search.cv_results_["params"]) == 4
