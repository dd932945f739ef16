"""FedLogisticRegression and FedLinearSVC against scikit-learn on bundled datasets.

breast_cancer (2 classes), wine (3) and digits (10), standardized, split IID and
with Dirichlet(0.1) label skew (clients holding one or a few classes). Every
exact solver of the support matrix must give scikit-learn's coefficients to
1e-5 (relative norm) and, for the L1 penalty, its support. The default suite
runs the L2 model with all exact solvers on wine and with DualFL (a first-order
solver with exact local solves; the default is Newton)
on the two others, and the L1 model on wine; the full grid is `slow` (the L1
model on breast cancer and digits needs thousands of rounds: its first-order
methods see the correlated features' poor conditioning, as saga does).

The L1 multinomial model on digits (640 coefficients, flat along common shifts
of the class coefficients, pinned only by the L1 term) is verified for DualFL;
the other exact solvers had not reached 1e-5 after 8,000 rounds when measured
(a convergence-speed limit, reported in the issue note), so they are not in
the grid.
"""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from skfed import FedLinearSVC, FedLogisticRegression
from skfed._support import support_matrix
from skfed.datasets import simulate_clients

from . import _oracles as orc

LOADERS = {"breast_cancer": load_breast_cancer, "wine": load_wine, "digits": load_digits}
# C per dataset: moderately regularized, as a tuned model would be
C_VALUES = {"breast_cancer": 0.1, "wine": 0.1, "digits": 0.05}
# the L1 model: C giving a sparse, well-posed problem (breast cancer at C=0.1 has
# a nearly flat optimum along correlated features: 3,000 rounds reach only 1e-3)
C_L1 = {"breast_cancer": 0.02, "wine": 0.1, "digits": 0.02}
# the slowest pairs (measured, > 5 s each) run in the slow suite
SLOW = {("wine", "dirichlet", "scaffold"), ("wine", "dirichlet", "local-gecl"),
        ("wine", "iid", "scaffold"), ("wine", "iid", "local-gecl")}
EXACT = {label: sorted(r["solver"] for r in support_matrix()
                       if r["model"] == label and r["status"] == "exact")
         for label in ("FedLogisticRegression (l2)", "FedLogisticRegression(l1_ratio=1)")}
RECOMMENDED = {"dualfl"}

_DATA = {}


def _data(name, split):
    if (name, split) not in _DATA:
        X, y = LOADERS[name](return_X_y=True)
        X = StandardScaler().fit_transform(X)
        scheme = "iid" if split == "iid" else "dirichlet"
        clients = simulate_clients(X, y, 8, scheme=scheme, alpha=0.1, random_state=0)
        _DATA[name, split] = (X, y, clients)
    return _DATA[name, split]


_REFS = {}


def _reference(name, l1_ratio):
    if (name, l1_ratio) not in _REFS:
        X, y, _ = _data(name, "iid")
        solver = "lbfgs" if l1_ratio == 0 else "saga"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            _REFS[name, l1_ratio] = LogisticRegression(
                C=(C_VALUES if l1_ratio == 0 else C_L1)[name], l1_ratio=l1_ratio, solver=solver, tol=1e-13,
                max_iter=200000).fit(X, y)
    return _REFS[name, l1_ratio]


def _cases():
    out = []
    for l1_ratio, label in ((0.0, "FedLogisticRegression (l2)"),
                            (1.0, "FedLogisticRegression(l1_ratio=1)")):
        for name in LOADERS:
            for split in ("iid", "dirichlet"):
                for solver in EXACT[label]:
                    if (name, l1_ratio) == ("digits", 1.0) and solver != "dualfl":
                        continue  # see the module docstring: verified for DualFL only
                    if l1_ratio == 0.0:
                        default = (name == "wine" and (name, split, solver) not in SLOW
                                   or solver in RECOMMENDED and (name, split) != ("digits", "dirichlet"))
                    else:  # multinomial L1 is flat along common shifts: 1,600+ rounds
                        default = name == "wine" and solver == "feddualavg"
                    marks = [] if default else [pytest.mark.slow]
                    out.append(pytest.param(name, split, l1_ratio, solver, marks=marks,
                                            id=f"{name}-{split}-l1_ratio={l1_ratio}-{solver}"))
    return out


@pytest.mark.parametrize("name, split, l1_ratio, solver", _cases())
def test_logistic_matches_sklearn(name, split, l1_ratio, solver):
    X, y, clients = _data(name, split)
    ref = _reference(name, l1_ratio)
    C = (C_VALUES if l1_ratio == 0 else C_L1)[name]
    # SCAFFOLD and Local G-ECL step at the roughest client's constant: with
    # Dirichlet(0.1) clients of 1-4 rows they need ~20,000 rounds (measured 19,533
    # on breast cancer), which only the slow suite runs
    est = FedLogisticRegression(C=C, l1_ratio=l1_ratio, solver=solver, tol=1e-8,
                                max_rounds=30000, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y, clients=clients)
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    err = np.linalg.norm(est.coef_ - ref.coef_) / np.linalg.norm(ref.coef_)
    assert err <= 1e-5, f"coef relative error {err:.2e} after {est.n_iter_} rounds"
    np.testing.assert_allclose(est.intercept_, ref.intercept_, atol=1e-5 * (1 + np.abs(ref.intercept_).max()))
    if l1_ratio == 1.0:
        # same support: exact zeros where sklearn has exact zeros, non-zeros where
        # it has clear non-zeros (saga leaves no values in between here)
        np.testing.assert_array_equal(est.coef_[ref.coef_ == 0], 0.0)
        assert np.all(est.coef_[np.abs(ref.coef_) > 1e-6] != 0)
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), atol=1e-5)


def test_a_client_with_one_class_is_normal():
    X, y, _ = _data("wine", "iid")
    clients = y.copy()  # each client holds exactly one class
    est = FedLogisticRegression(C=0.1, tol=1e-10, max_rounds=3000).fit(X, y, clients=clients)
    ref = _reference("wine", 0.0)
    assert np.linalg.norm(est.coef_ - ref.coef_) / np.linalg.norm(ref.coef_) <= 1e-5
    assert est.coef_.shape == (3, 13) and est.predict_proba(X).shape == (178, 3)


def test_classes_are_the_union_of_client_label_sets():
    X, y, _ = _data("wine", "iid")
    labels = np.array(["a", "b", "c"])[y]
    est = FedLogisticRegression(C=0.1, max_rounds=50).fit(X, labels, clients=y)
    assert list(est.classes_) == ["a", "b", "c"]
    assert set(est.predict(X)) <= {"a", "b", "c"}


def test_class_weight_matches_sklearn():
    X, y, clients = _data("breast_cancer", "dirichlet")
    ref = LogisticRegression(C=0.1, class_weight="balanced", tol=1e-13, max_iter=100000).fit(X, y)
    est = FedLogisticRegression(C=0.1, class_weight="balanced", tol=1e-10,
                                max_rounds=3000).fit(X, y, clients=clients)
    assert np.linalg.norm(est.coef_ - ref.coef_) / np.linalg.norm(ref.coef_) <= 1e-5


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_svc_without_intercept_matches_liblinear(loss):
    # without an intercept FedLinearSVC's objective is exactly LinearSVC's
    X, y, clients = _data("breast_cancer", "dirichlet")
    best = orc.svc_optimum(X, y, 0.05, loss, "l2", fit_intercept=False)
    est = FedLinearSVC(C=0.05, loss=loss, fit_intercept=False,
                       tol=1e-8 if loss == "squared_hinge" else 0.0,
                       max_rounds=2000 if loss == "squared_hinge" else 400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y, clients=clients)
    gap = (orc.svc_objective(X, y, est.coef_, 0.0, 0.05, loss, "l2") - best) / best
    assert -1e-9 <= gap <= (1e-6 if loss == "squared_hinge" else 1e-5), gap


@pytest.mark.parametrize("fast", [pytest.param(True),
                                  pytest.param(False, marks=pytest.mark.slow(seconds=707))])
def test_fedmls_hinge_svm_reaches_1e_4(fast):
    """The issue's hinge target: FedMLS within 1e-4 of the exact SVM (SVC, libsvm).
    Default suite: 1e-3 after 250 rounds (sublinear rate); slow: 1e-4 after 2,000
    (measured: 2.0e-4 after 1,000 rounds; each round k runs k local steps)."""
    X, y, clients = _data("breast_cancer", "iid")
    best = orc.svc_optimum(X, y, 0.05, "hinge", "l2", fit_intercept=True)
    rounds, target = (250, 1e-3) if fast else (2000, 1e-4)
    est = FedLinearSVC(C=0.05, loss="hinge", solver="fedmls", tol=0.0, max_rounds=rounds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y, clients=clients)
    gap = (orc.svc_objective(X, y, est.coef_, est.intercept_, 0.05, "hinge", "l2") - best) / best
    assert -1e-9 <= gap <= target, f"gap {gap:.2e} after {rounds} rounds"
