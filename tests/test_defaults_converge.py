"""Defaults that converge (issue 16): every estimator x penalty with its default
solver and default parameters, on the bundled datasets, IID and label-skewed
(Dirichlet(0.3)) sites, reaches the pooled optimum without a ConvergenceWarning.

The tolerance is the one the docs state for the default path (``docs/index.md``,
"Defaults"): a relative objective gap of at most ``GAP`` against an
independent pooled solve (scikit-learn where its objective is skfed's, a tight
centralized solve otherwise), and the same support for L1 models.

Not in the grid: ``C=np.inf`` (no penalty) on these datasets, whose classes
are (nearly) separable after scaling, so the unpenalized optimum does not
exist; ``FedLinearSVC(loss="hinge")`` (not a default; its non-smooth loss is
covered by tests/test_oracle_classification.py).
"""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression
from sklearn.preprocessing import StandardScaler

from skfed import FedElasticNet, FedLasso, FedLinearSVC, FedLogisticRegression, FedLowRank
from skfed.datasets import simulate_clients

from . import _oracles as orc

#: relative objective gap the default path promises (docs/index.md, "Defaults")
GAP = 1e-6
N_CLIENTS = 5

LOADERS = {"breast_cancer": load_breast_cancer, "wine": load_wine, "digits": load_digits}
_CACHE = {}


def _cached(key, make):
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _split(X, y, split):
    scheme = "iid" if split == "iid" else "dirichlet"
    return simulate_clients(X, y, N_CLIENTS, scheme=scheme, alpha=0.3, random_state=0)


def _classification(name):
    def make():
        X, y = LOADERS[name](return_X_y=True)
        return StandardScaler().fit_transform(X), y
    return _cached(name, make)


def _fit(est, X, y, clients):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # a default must not warn
        return est.fit(X, y, clients=clients)


def _check_gap(value, best, what):
    gap = (value - best) / abs(best)
    assert -GAP <= gap <= GAP, f"{what}: relative gap {gap:.2e}"


# --- regression: diabetes ------------------------------------------------------
REGRESSION = {
    "lasso": (FedLasso, lambda X, y: (orc.lasso_optimum(X, y, 1.0), Lasso(
        alpha=1.0, tol=1e-14, max_iter=100000).fit(X, y).coef_)),
    "elastic-net": (FedElasticNet, lambda X, y: (orc.lasso_optimum(X, y, 1.0, 0.5), ElasticNet(
        alpha=1.0, l1_ratio=0.5, tol=1e-14, max_iter=100000).fit(X, y).coef_)),
}


@pytest.mark.parametrize("split", ["iid", "dirichlet"])
@pytest.mark.parametrize("model", list(REGRESSION))
def test_regression_defaults(model, split):
    X, y = load_diabetes(return_X_y=True)
    cls, optimum = REGRESSION[model]
    best, coef = _cached((model, "diabetes"), lambda: optimum(X, y))
    est = _fit(cls(), X, y, _split(X, y, split))
    l1_ratio = 1.0 if model == "lasso" else 0.5
    value = (orc.ls_objective(X, y[:, None], est.coef_[None], est.intercept_)
             + l1_ratio * np.abs(est.coef_).sum() + 0.25 * (model != "lasso") * est.coef_ @ est.coef_)
    _check_gap(value, best, f"{model} {split}")
    np.testing.assert_array_equal(est.coef_ != 0, coef != 0)


@pytest.mark.parametrize("split", ["iid", "dirichlet"])
def test_lasso_in_an_l1_ball_defaults(split):
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    radius = 100.0  # inside the unconstrained solution's l1 norm (about 150)
    best = _cached("l1-ball", lambda: orc.l1_ball_ls_optimum(X, y, radius))
    est = _fit(FedLasso(alpha=0.0, constraint="l1_ball", radius=radius), X, y, _split(X, y, split))
    assert np.abs(est.coef_).sum() <= radius * (1 + 1e-9)
    _check_gap(orc.ls_objective(X, y[:, None], est.coef_[None], est.intercept_), best,
               f"l1 ball {split}")


@pytest.mark.parametrize("split", ["iid", "dirichlet"])
def test_low_rank_defaults(split):
    """Multi-output least squares with a nuclear norm: diabetes' target and two
    of its features as three outputs (the low-rank family needs several)."""
    X, y = load_diabetes(return_X_y=True)
    Y = np.column_stack([y, 100 * X[:, 2], 100 * X[:, 8]])
    Xr = np.delete(X, [2, 8], axis=1)
    alpha = 1.0
    best = _cached("low-rank", lambda: orc.low_rank_optimum(Xr, Y, alpha, (3, Xr.shape[1])))
    est = _fit(FedLowRank(alpha=alpha), Xr, Y, _split(Xr, y, split))
    value = (orc.ls_objective(Xr, Y, est.coef_, est.intercept_)
             + alpha * np.linalg.svd(est.coef_, compute_uv=False).sum())
    _check_gap(value, best, f"low rank {split}")


# --- classification: breast cancer, wine, digits ---------------------------------
def _logistic_reference(name, l1_ratio):
    """scikit-learn's lbfgs for the l2 penalty; with an l1 part a tight
    centralized L-BFGS-B on ``coef = p - q`` (``p, q >= 0``), which makes the
    objective smooth on a box (saga needs minutes on digits at this accuracy)."""
    X, y = _classification(name)

    def make():
        if l1_ratio == 0:
            return LogisticRegression(tol=1e-13, max_iter=100000).fit(X, y)
        return _l1_logistic(X, y, l1_ratio)
    return _cached(("logistic", name, l1_ratio), make)


def _l1_logistic(X, y, l1_ratio):
    classes = np.unique(y)
    n, d = X.shape
    K = 1 if len(classes) == 2 else len(classes)
    Y = (y == classes[1])[:, None].astype(float) if K == 1 else (y[:, None] == classes).astype(float)

    def fun(t):
        W = (t[:K * d] - t[K * d:2 * K * d]).reshape(K, d)
        Z = X @ W.T + t[2 * K * d:]
        if K == 1:
            loss = np.sum(np.logaddexp(0, Z) - Y * Z)
            G = 1 / (1 + np.exp(-Z)) - Y
        else:
            M = Z.max(axis=1, keepdims=True)
            lse = M + np.log(np.exp(Z - M).sum(axis=1, keepdims=True))
            loss = np.sum(lse) - np.sum(Y * Z)
            G = np.exp(Z - lse) - Y
        gW = G.T @ X + (1 - l1_ratio) * W
        value = loss + l1_ratio * t[:2 * K * d].sum() + 0.5 * (1 - l1_ratio) * np.sum(W * W)
        grad = np.r_[gW.ravel() + l1_ratio, -gW.ravel() + l1_ratio, G.sum(axis=0)]
        return value, grad

    bounds = [(0, None)] * (2 * K * d) + [(None, None)] * K
    res = minimize(fun, np.zeros(2 * K * d + K), jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"ftol": 1e-16, "gtol": 1e-11, "maxiter": 100000, "maxcor": 30})
    W = (res.x[:K * d] - res.x[K * d:2 * K * d]).reshape(K, d)
    b = res.x[2 * K * d:]
    if K > 1:
        b = b - b.mean()  # the multinomial intercepts are centred (skfed's convention)
    return SimpleNamespace(coef_=W, intercept_=b, classes_=classes)


def _logistic_value(X, y, est_or_ref, l1_ratio):
    coef, intercept = est_or_ref.coef_, est_or_ref.intercept_
    if coef.shape[0] == 1:
        return orc.logistic_objective(X, (y == est_or_ref.classes_[1]).astype(int), coef,
                                      intercept, 1.0, l1_ratio)
    return orc.multinomial_objective(X, np.searchsorted(est_or_ref.classes_, y), coef,
                                     intercept, 1.0, l1_ratio)


def _grid(names, penalties, ids, slow):
    """(name, penalty, split) cases; ``slow(name, penalty)`` ones in the slow suite."""
    return [pytest.param(name, penalty, split, id=f"{name}-{label}-{split}",
                         marks=[pytest.mark.slow] if slow(name, penalty) else [])
            for name in names for penalty, label in zip(penalties, ids)
            for split in ("iid", "dirichlet")]


# Newton's L1 sub-problem (coordinate descent on a 650 x 650 model) on digits:
# 6-19 s a fit (docs/index.md, "Defaults"), the rest well under 2 s
@pytest.mark.parametrize("name, l1_ratio, split", _grid(
    LOADERS, [0.0, 0.5, 1.0], ["l2", "elasticnet", "l1"],
    slow=lambda name, l1_ratio: name == "digits" and l1_ratio > 0))
def test_logistic_defaults(name, l1_ratio, split):
    X, y = _classification(name)
    ref = _logistic_reference(name, l1_ratio)
    est = _fit(FedLogisticRegression(l1_ratio=l1_ratio), X, y, _split(X, y, split))
    _check_gap(_logistic_value(X, y, est, l1_ratio), _logistic_value(X, y, ref, l1_ratio),
               f"logistic {name} l1_ratio={l1_ratio} {split}")
    if l1_ratio == 1.0:  # the same support (the reference's zeros are its bounds)
        np.testing.assert_array_equal(est.coef_ != 0, np.abs(ref.coef_) > 1e-9)


@pytest.mark.parametrize("split", ["iid", "dirichlet"])
def test_logistic_in_an_l2_ball_defaults(split):
    X, y = _classification("breast_cancer")
    best = _cached("l2-ball", lambda: orc.ball_logistic_optimum(X, y, 1.0, 0.5))
    est = _fit(FedLogisticRegression(constraint="l2_ball", radius=0.5), X, y, _split(X, y, split))
    assert np.linalg.norm(est.coef_) <= 0.5 * (1 + 1e-9)
    _check_gap(orc.logistic_objective(X, y, est.coef_, est.intercept_, 1.0, 0.0), best,
               f"l2 ball {split}")


@pytest.mark.parametrize("name, penalty, split", _grid(
    LOADERS, ["l2", "l1"], ["l2", "l1"],
    slow=lambda name, penalty: name == "digits" and penalty == "l1"))
def test_linear_svc_defaults(name, penalty, split):
    """Squared hinge (the default loss), one-vs-rest beyond two classes: each
    class's binary objective against its own tight centralized solve."""
    X, y = _classification(name)
    est = _fit(FedLinearSVC(penalty=penalty), X, y, _split(X, y, split))
    classes = est.classes_
    rows = [classes[1]] if len(classes) == 2 else classes
    for k, label in enumerate(rows):
        y01 = (y == label).astype(int)
        best = _cached(("svc", name, penalty, label), lambda: orc.svc_optimum(
            X, y01, 1.0, "squared_hinge", penalty, fit_intercept=True))
        value = orc.svc_objective(X, y01, est.coef_[k], est.intercept_[k], 1.0,
                                  "squared_hinge", penalty)
        _check_gap(value, best, f"svc {name} {penalty} class {label} {split}")
