"""docs/extending.md, run block by block: the tutorial's additions reach independent optima."""

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


@pytest.fixture(scope="module")
def tutorial():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 6, "the tutorial's code blocks changed: update this test"
    namespace = {"__name__": "tutorial"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the tutorial must run clean
        for block in blocks:
            exec(compile(block, str(PAGE), "exec"), namespace)  # noqa: S102
    return namespace


def test_the_new_penalty_is_sklearn_s_positive_lasso(tutorial):
    X, y, est = tutorial["X"], tutorial["y"], tutorial["nonneg"]
    ref = Lasso(alpha=0.1, positive=True, tol=1e-14, max_iter=1_000_000).fit(X, y)
    assert np.all(est.coef_ >= 0)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-6)
    assert np.array_equal(est.coef_ == 0, ref.coef_ == 0)


def test_the_new_solver_reaches_the_pooled_lasso(tutorial):
    X, y, est = tutorial["X"], tutorial["y"], tutorial["proxgrad"]
    ref = Lasso(alpha=0.1, tol=1e-14, max_iter=1_000_000).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-6)
    assert est.solver_.name == "fedproxgrad"
    assert est.history_["bytes_up"][1] > 0


def test_the_new_solver_runs_under_secure_aggregation(tutorial):
    """It declares its sums, so it runs masked: the same iterates to the fixed-point
    precision."""
    pytest.importorskip("cryptography")
    from skfed import FedLasso
    from skfed.privacy import SecureAggregation

    X, y, site = tutorial["X"], tutorial["y"], tutorial["site"]
    kwargs = dict(alpha=0.1, solver=tutorial["FedProxGrad"](), tol=0, max_rounds=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol=0: 50 rounds
        plain = FedLasso(**kwargs).fit(X, y, clients=site)
        masked = FedLasso(**kwargs, privacy=SecureAggregation()).fit(X, y, clients=site)
    np.testing.assert_allclose(masked.coef_, plain.coef_, atol=1e-9)


def test_the_new_datafit_matches_a_centralized_huber_lasso(tutorial):
    X, y, est = tutorial["X"], tutorial["y_outliers"], tutorial["huber"]
    n, d = X.shape

    def huber(r):
        a = np.abs(r)
        return np.where(a <= 1.0, 0.5 * a**2, a - 0.5)

    def f(z):  # w = p - q, p, q >= 0; z = [p, q, b]
        p, q, b = z[:d], z[d:2 * d], z[-1]
        r = X @ (p - q) + b - y
        g = np.clip(r, -1, 1) / n
        value = huber(r).mean() + 0.1 * (p.sum() + q.sum())
        gw = X.T @ g
        return value, np.r_[gw + 0.1, -gw + 0.1, g.sum()]

    res = minimize(f, np.zeros(2 * d + 1), jac=True, method="L-BFGS-B",
                   bounds=[(0, None)] * (2 * d) + [(None, None)],
                   options={"maxiter": 100_000, "ftol": 1e-15, "gtol": 1e-12})
    w = res.x[:d] - res.x[d:2 * d]
    np.testing.assert_allclose(est.coef_, w, atol=1e-5)
    objective = huber(X @ est.coef_ + est.intercept_ - y).mean() + 0.1 * np.abs(est.coef_).sum()
    assert objective <= res.fun + 1e-9


def test_every_solver_has_a_section_on_the_algorithms_page():
    from skfed.solvers import SOLVERS

    pages = {p.stem: p.read_text() for p in (PAGE.parent / "algorithms").glob("*.md")}
    for name in SOLVERS:  # each solver named in the title of a page of its own
        titles = {stem: text.splitlines()[0] for stem, text in pages.items()}
        assert any(f'"{name}"' in title for title in titles.values()), name
