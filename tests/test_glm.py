"""GLMs with offsets: the pooled optimum of scikit-learn's estimators, federated.

FedPoissonRegressor, FedGammaRegressor, FedTweedieRegressor, FedLinearRegression
and FedRidge against PoissonRegressor, GammaRegressor, TweedieRegressor,
LinearRegression and Ridge on the pooled rows (relative objective gap <= 1e-10,
coefficients to 1e-7), on an IID and a strongly heterogeneous split, with
sample weights; with offsets against statsmodels' GLM (scikit-learn has none);
L1 against a tight pooled solve. Inference is in tests/test_glm_inference.py.
"""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.linear_model import (GammaRegressor, LinearRegression, PoissonRegressor, Ridge,
                                  TweedieRegressor)
from sklearn.metrics import mean_tweedie_deviance

from skfed import (FederatedDataset, FedGammaRegressor, FedLinearRegression,
                   FedPoissonRegressor, FedRidge, FedTweedieRegressor)
from skfed.datasets import simulate_clients

sm = pytest.importorskip("statsmodels.api")


def _data(kind, n=600, d=5, seed=0, coef=None):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) + 0.3 * rng.standard_normal(d)
    eta = 0.3 + X @ (np.linspace(-0.4, 0.4, d) if coef is None else np.asarray(coef))
    mu = np.exp(eta)
    offset = np.log(rng.uniform(0.5, 3.0, n))
    if kind == "poisson":
        y = rng.poisson(mu).astype(float)
        yo = rng.poisson(mu * np.exp(offset)).astype(float)
    elif kind == "gamma":
        y = rng.gamma(2.0, mu / 2.0)
        yo = rng.gamma(2.0, mu * np.exp(offset) / 2.0)
    elif kind == "tweedie":  # compound Poisson-Gamma: exact zeros and amounts
        def cpg(m):
            counts = rng.poisson(m)
            return np.array([rng.gamma(2.0, 0.5, c).sum() for c in counts])
        y, yo = cpg(mu), cpg(mu * np.exp(offset))
    else:
        y = eta + rng.standard_normal(n)
        yo = eta + offset + rng.standard_normal(n)
    return X, y, yo, offset


def _split(X, y, scheme):
    return simulate_clients(X, y, 5, scheme=scheme, random_state=0)


def _objective(est_coef, intercept, X, y, sw, power, alpha, offset=None, l1=0.0):
    eta = X @ est_coef + intercept + (0 if offset is None else offset)
    mu = eta if power == "identity" else np.exp(eta)
    p = 0 if power == "identity" else power
    dev = mean_tweedie_deviance(y, mu, sample_weight=sw, power=p)
    return dev / 2 + alpha * (l1 * np.abs(est_coef).sum() + (1 - l1) / 2 * est_coef @ est_coef)


CASES = {
    "poisson": (lambda a: FedPoissonRegressor(alpha=a),
                lambda a: PoissonRegressor(alpha=a, solver="newton-cholesky", tol=1e-12,
                                           max_iter=1000), 1),
    "gamma": (lambda a: FedGammaRegressor(alpha=a),
              lambda a: GammaRegressor(alpha=a, solver="newton-cholesky", tol=1e-12,
                                       max_iter=1000), 2),
    "tweedie": (lambda a: FedTweedieRegressor(power=1.5, alpha=a),
                lambda a: TweedieRegressor(power=1.5, link="log", alpha=a,
                                           solver="newton-cholesky", tol=1e-12,
                                           max_iter=1000), 1.5),
}


@pytest.mark.parametrize("family", sorted(CASES))
@pytest.mark.parametrize("scheme", ["iid", "quantile"])
@pytest.mark.parametrize("alpha", [0.0, 0.05])
@pytest.mark.parametrize("weighted", [False, True])
def test_glm_equals_sklearn(family, scheme, alpha, weighted):
    make, make_ref, power = CASES[family]
    X, y, _, _ = _data(family)
    sw = np.random.default_rng(1).uniform(0.2, 3.0, len(y)) if weighted else None
    clients = _split(X, y, scheme)
    est = make(alpha).fit(X, y, clients=clients, sample_weight=sw)
    ref = make_ref(alpha).fit(X, y, sample_weight=sw)
    f_fed = _objective(est.coef_, est.intercept_, X, y, sw, power, alpha)
    f_ref = _objective(ref.coef_, ref.intercept_, X, y, sw, power, alpha)
    assert (f_fed - f_ref) / abs(f_ref) <= 1e-10
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    assert est.intercept_ == pytest.approx(ref.intercept_, rel=1e-7, abs=1e-9)
    # skfed's objective is scikit-learn's: the same number, reported by the history
    assert est.objective_ == pytest.approx(f_fed, rel=1e-9)
    assert est.n_clients_ == 5 and est.n_iter_ <= 12  # a handful of Newton rounds
    np.testing.assert_allclose(est.predict(X), ref.predict(X), rtol=1e-6)


@pytest.mark.parametrize("scheme", ["iid", "quantile"])
@pytest.mark.parametrize("weighted", [False, True])
def test_linear_regression_and_ridge_equal_sklearn(scheme, weighted):
    X, y, _, _ = _data("gaussian")
    sw = np.random.default_rng(1).uniform(0.2, 3.0, len(y)) if weighted else None
    clients = _split(X, y, scheme)
    ols = FedLinearRegression().fit(X, y, clients=clients, sample_weight=sw)
    ref = LinearRegression().fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(ols.coef_, ref.coef_, rtol=1e-9)
    assert ols.intercept_ == pytest.approx(ref.intercept_, rel=1e-9)
    assert ols.n_iter_ == 1  # least squares: one Newton round
    # Ridge's objective is ||y - Xw||^2 + alpha ||w||^2, unscaled: alpha=50 on 600
    # rows shrinks as much as alpha=50/600 in ElasticNet's 1/(2n) scaling
    ridge = FedRidge(alpha=50.0).fit(X, y, clients=clients, sample_weight=sw)
    ref = Ridge(alpha=50.0, solver="cholesky").fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(ridge.coef_, ref.coef_, rtol=1e-9)
    assert ridge.intercept_ == pytest.approx(ref.intercept_, rel=1e-9)
    assert not np.allclose(ridge.coef_, ols.coef_, rtol=1e-3)  # the penalty acts


def _statsmodels_family(name):
    return {"poisson": sm.families.Poisson(),
            "gamma": sm.families.Gamma(sm.families.links.Log()),
            "tweedie": sm.families.Tweedie(var_power=1.5, link=sm.families.links.Log()),
            "gaussian": sm.families.Gaussian()}[name]


@pytest.mark.parametrize("family", ["poisson", "gamma", "tweedie", "gaussian"])
@pytest.mark.parametrize("scheme", ["iid", "quantile"])
def test_offset_matches_statsmodels(family, scheme):
    X, _, y, offset = _data(family)
    clients = _split(X, y, scheme)
    est = (FedLinearRegression() if family == "gaussian" else CASES[family][0](0.0))
    est.fit(X, y, clients=clients, offset=offset)
    ref = sm.GLM(y, sm.add_constant(X), family=_statsmodels_family(family),
                 offset=offset).fit(tol=1e-13)
    np.testing.assert_allclose(np.r_[est.intercept_, est.coef_], ref.params, rtol=1e-8,
                               atol=1e-10)
    # predict with the offset is statsmodels' fitted mean
    np.testing.assert_allclose(est.predict(X, offset=offset), ref.fittedvalues, rtol=1e-8)
    # the offset matters: without it the fit differs
    assert not np.allclose(est.predict(X), ref.fittedvalues, rtol=1e-3)


def test_offset_is_carried_per_row_by_a_federated_dataset():
    X, _, y, offset = _data("poisson")
    clients = np.arange(len(y)) % 3
    arrays = FedPoissonRegressor(alpha=0).fit(X, y, clients=clients, offset=offset)
    data = FederatedDataset.from_arrays(X, y, clients, offset=offset)
    fed = FedPoissonRegressor(alpha=0).fit(data)
    np.testing.assert_allclose(fed.coef_, arrays.coef_, rtol=1e-12)
    np.testing.assert_allclose(fed.bse_, arrays.bse_, rtol=1e-12)
    # predictions on the dataset use each site's own offsets
    by_site = fed.predict(data)
    for k, site in enumerate(data.sites):
        rows = clients == site
        np.testing.assert_allclose(by_site[site], arrays.predict(X[rows], offset=offset[rows]))


def _pooled_l1_optimum(X, y, power, alpha, l1_ratio):
    """The elastic-net GLM objective minimized centrally by L-BFGS-B on w = u - v
    (u, v >= 0): smooth, bounded, independent of skfed."""
    n, d = X.shape

    def f(z):
        u, v, b = z[:d], z[d:2 * d], z[-1]
        w = u - v
        eta = X @ w + b
        mu = np.exp(eta)
        if power == 1:
            dev = np.mean(mu - y * eta)  # the half deviance up to a constant in y
            g = (mu - y) / n
        else:
            dev = np.mean(eta + y * np.exp(-eta))
            g = (1 - y * np.exp(-eta)) / n
        val = dev + alpha * (l1_ratio * (u.sum() + v.sum()) + (1 - l1_ratio) / 2 * w @ w)
        gw = X.T @ g + alpha * (1 - l1_ratio) * w
        grad = np.r_[gw + alpha * l1_ratio, -gw + alpha * l1_ratio, g.sum()]
        return val, grad

    best = None
    for start in (np.zeros(2 * d + 1),):
        res = minimize(f, start, jac=True, method="L-BFGS-B",
                       bounds=[(0, None)] * (2 * d) + [(None, None)],
                       options={"ftol": 1e-16, "gtol": 1e-13, "maxiter": 100000,
                                "maxcor": 50})
        best = res if best is None or res.fun < best.fun else best
    return best.x[:d] - best.x[d:2 * d], best.x[-1]


@pytest.mark.parametrize("family", ["poisson", "gamma"])
def test_elastic_net_glm_reaches_a_tight_pooled_solve(family):
    X, y, _, _ = _data(family, d=8, coef=[0.5, -0.4, 0, 0, 0.3, 0, 0, 0])
    clients = _split(X, y, "quantile")
    alpha, l1_ratio = 0.1, 0.7
    est = CASES[family][0](alpha).set_params(l1_ratio=l1_ratio, tol=1e-8)
    est.fit(X, y, clients=clients)
    power = CASES[family][2]
    w, b = _pooled_l1_optimum(X, y, power, alpha, l1_ratio)
    f_fed = _objective(est.coef_, est.intercept_, X, y, None, power, alpha, l1=l1_ratio)
    f_ref = _objective(w, b, X, y, None, power, alpha, l1=l1_ratio)
    assert (f_fed - f_ref) / abs(f_ref) <= 1e-10
    # exact zeros where the pooled solve has (numerically) zero coefficients
    assert np.any(est.coef_ == 0)
    np.testing.assert_array_equal(est.coef_ == 0, np.abs(w) < 1e-7)


def test_tweedie_identity_link_is_least_squares():
    X, y, _, _ = _data("gaussian")
    est = FedTweedieRegressor(power=0, alpha=0.0).fit(X, y, clients=np.arange(len(y)) % 4)
    ref = TweedieRegressor(power=0, alpha=0.0, link="identity", solver="newton-cholesky",
                           tol=1e-12).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-9)


# --- bad input ------------------------------------------------------------------
def test_negative_counts_are_refused_naming_the_site():
    X, y, _, _ = _data("poisson")
    y = y.copy()
    y[7] = -1
    with pytest.raises(ValueError, match=r"site 2: Poisson regression needs y >= 0.*exposure"):
        FedPoissonRegressor().fit(X, y, clients=np.arange(len(y)) % 5)


def test_non_positive_gamma_target_is_refused():
    X, y, _, _ = _data("gamma")
    y = y.copy()
    y[0] = 0.0
    with pytest.raises(ValueError, match=r"Gamma regression needs y > 0.*Tweedie"):
        FedGammaRegressor().fit(X, y)


@pytest.mark.parametrize("offset, match", [
    (np.zeros(5), r"offset has shape \(5,\) but X has 600 rows.*log\(exposure\)"),
    (np.r_[np.nan, np.zeros(599)], r"offset contains 1 NaN.*exposure"),
    (np.r_[-np.inf, np.zeros(599)], r"offset contains 1 NaN or infinite"),
])
def test_bad_offsets_are_refused(offset, match):
    X, y, _, _ = _data("poisson")
    with pytest.raises(ValueError, match=match):
        FedPoissonRegressor().fit(X, y, offset=offset)
    est = FedPoissonRegressor().fit(X, y)
    with pytest.raises(ValueError, match=match.split("but")[0]):
        est.predict(X, offset=offset)


def test_first_order_solvers_are_refused_for_unbounded_curvature():
    X, y, _, _ = _data("poisson")
    for solver in ["fedavg", "dualfl", "feddyn"]:
        with pytest.raises(ValueError, match=r"no step size is safe; use solver='newton'"):
            FedPoissonRegressor(solver=solver).fit(X, y, clients=np.arange(len(y)) % 3)
    with pytest.raises(ValueError, match="participation"):
        FedPoissonRegressor(participation=0.5).fit(X, y, clients=np.arange(len(y)) % 4)


@pytest.mark.parametrize("params, match", [
    ({"power": 0.5}, r"power=0.5 is not supported"),
    ({"power": -1.0}, r"power=-1 is not supported"),
    ({"power": 1.5, "link": "identity"}, r"link='identity' needs power=0"),
])
def test_unsupported_tweedie_settings(params, match):
    X, y, _, _ = _data("poisson")
    with pytest.raises(ValueError, match=match):
        FedTweedieRegressor(**params).fit(X, y)


def test_first_order_solver_still_fits_least_squares_with_an_offset():
    """The offset of a quadratic loss is a shift of the target (folded at the site),
    so every solver, not only Newton, fits it."""
    X, _, y, offset = _data("gaussian")
    clients = np.arange(len(y)) % 4
    newton = FedLinearRegression().fit(X, y, clients=clients, offset=offset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dualfl = FedLinearRegression(solver="dualfl", tol=1e-10, max_rounds=3000).fit(
            X, y, clients=clients, offset=offset)
    np.testing.assert_allclose(dualfl.coef_, newton.coef_, rtol=1e-6)


def test_a_site_table_names_its_offset_column():
    """Resident sites load their rows themselves: the offset is a column of the
    site's table (``FederatedDataset.from_sources(..., offset="log_years")``)."""
    import pandas as pd

    from skfed.data.sources import load_site

    X, _, y, offset = _data("poisson", n=40)
    table = pd.DataFrame(X, columns=[f"x{k}" for k in range(X.shape[1])]).assign(
        cases=y, log_years=offset)
    site = load_site("a", lambda: table, target="cases", offset="log_years")
    np.testing.assert_array_equal(site.offset, offset)
    assert "log_years" not in site.X.columns and "cases" not in site.X.columns
    with pytest.raises(ValueError, match="no offset column 'exposure'"):
        load_site("a", lambda: table, target="cases", offset="exposure")


def test_tweedie_power_zero_with_log_link_equals_sklearn():
    """Non-convex (normal deviance, log link): Newton uses the expected information
    (Fisher scoring) and reaches scikit-learn's optimum. Its rate is linear, not
    quadratic: at the default tol=1e-4 it stops 2.5e-11 (relative) above the optimum
    with coefficients 2e-6 off (measured), so coefficients to 1e-5 need a tighter tol."""
    X, y, _, _ = _data("poisson")
    est = FedTweedieRegressor(power=0, link="log", alpha=0.01, tol=1e-10).fit(
        X, y, clients=_split(X, y, "quantile"))
    ref = TweedieRegressor(power=0, link="log", alpha=0.01, solver="lbfgs", tol=1e-12,
                           max_iter=10000).fit(X, y)
    f_fed = _objective(est.coef_, est.intercept_, X, y, None, 0, 0.01)
    f_ref = _objective(ref.coef_, ref.intercept_, X, y, None, 0, 0.01)
    assert (f_fed - f_ref) / abs(f_ref) <= 1e-10
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("family", sorted(CASES))
def test_score_is_sklearns_d2_on_arrays_and_on_sites(family):
    make, make_ref, _ = CASES[family]
    X, y, _, _ = _data(family)
    sw = np.random.default_rng(2).uniform(0.5, 2.0, len(y))
    clients = _split(X, y, "quantile")
    est = make(0.05).fit(X, y, clients=clients, sample_weight=sw)
    ref = make_ref(0.05).fit(X, y, sample_weight=sw)
    assert est.score(X, y, sample_weight=sw) == pytest.approx(
        ref.score(X, y, sample_weight=sw), rel=1e-8)
    data = FederatedDataset.from_arrays(X, y, clients, sample_weight=sw)
    assert est.score(data) == pytest.approx(est.score(X, y, sample_weight=sw), rel=1e-12)


def test_a_site_reads_each_number_of_its_csv_as_written(tmp_path):
    """The site's reader gives the float nearest each number's text, as Python's
    float() and the analyst's own CSV reads do (pandas' default parser was off by the
    last bit for about a third of random normals)."""
    import pandas as pd

    from skfed.data.sources import read_table

    x = np.random.default_rng(0).normal(size=2000)
    pd.DataFrame({"x": x}).to_csv(tmp_path / "rows.csv", index=False)
    np.testing.assert_array_equal(read_table("a", tmp_path / "rows.csv")["x"].to_numpy(), x)
