"""FedMixedGLM equals a tight pooled optimisation of the same approximate likelihood.

The oracle here is written apart from skfed: the random intercept on its own
scale ``u ~ N(0, sigma^2)`` (skfed works on ``v = u / sigma``), each group's
mode by plain Newton, the same Laplace / adaptive Gauss-Hermite formula, and
scipy's Nelder-Mead over the pooled rows. Published lme4 numbers for ``cbpp``
(lme4's ``tests/test-glmer.R`` and ``tests/glmer-1.R``, as docs/mixed-models.md
records them) and ``scipy.integrate.quad`` check the approximation itself.
"""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, optimize, special

from skfed.data import SiteError
from skfed.mixed import BoundaryFitWarning, FedMixedGLM, FewGroupsWarning

# lme4's cbpp: herd, incidence, size, period (56 rows, 15 herds)
_CBPP = [(1, 2, 14, 1), (1, 3, 12, 2), (1, 4, 9, 3), (1, 0, 5, 4), (2, 3, 22, 1), (2, 1, 18, 2),
         (2, 1, 21, 3), (3, 8, 22, 1), (3, 2, 16, 2), (3, 0, 16, 3), (3, 2, 20, 4),
         (4, 2, 10, 1), (4, 0, 10, 2), (4, 2, 9, 3), (4, 0, 6, 4), (5, 5, 18, 1), (5, 0, 25, 2),
         (5, 0, 24, 3), (5, 1, 4, 4), (6, 3, 17, 1), (6, 0, 17, 2), (6, 0, 18, 3), (6, 1, 20, 4),
         (7, 8, 16, 1), (7, 1, 10, 2), (7, 3, 9, 3), (7, 0, 5, 4), (8, 12, 34, 1), (9, 2, 9, 1),
         (9, 0, 6, 2), (9, 0, 8, 3), (9, 0, 6, 4), (10, 1, 22, 1), (10, 1, 22, 2),
         (10, 0, 18, 3), (10, 2, 22, 4), (11, 0, 25, 1), (11, 5, 27, 2), (11, 3, 22, 3),
         (11, 1, 22, 4), (12, 2, 10, 1), (12, 1, 8, 2), (12, 0, 6, 3), (12, 0, 5, 4),
         (13, 1, 21, 1), (13, 2, 24, 2), (13, 0, 19, 3), (13, 0, 23, 4), (14, 11, 19, 1),
         (14, 0, 2, 2), (14, 0, 3, 3), (14, 0, 2, 4), (15, 1, 19, 1), (15, 1, 15, 2),
         (15, 1, 15, 3), (15, 0, 15, 4)]


@pytest.fixture(scope="module")
def cbpp():
    data = pd.DataFrame(_CBPP, columns=["herd", "incidence", "size", "period"])
    table = pd.get_dummies(data["period"], prefix="period", drop_first=True).astype(float)
    table["herd"], table["size"] = data["herd"], data["size"]
    sites = (data["herd"] - 1) // 5  # three sites of five herds
    return table, data["incidence"].to_numpy(float), sites


# -- the independent oracle ---------------------------------------------------------------
def _log_p(family, y, m, eta):
    if family == "binomial":
        return (y * eta - m * np.logaddexp(0, eta) + special.gammaln(m + 1)
                - special.gammaln(y + 1) - special.gammaln(m - y + 1))
    return y * eta - np.exp(eta) - special.gammaln(y + 1)


def _oracle(params, X, y, m, codes, n_nodes, family):
    """The pooled AGQ log-likelihood on the scale of u (plain Newton for the modes)."""
    b, sigma = params[:-1], abs(params[-1])
    S = np.eye(codes.max() + 1)[codes].T  # group indicator
    eta0 = X @ b
    u = np.zeros(S.shape[0])

    def moments(u):
        mu = special.expit(eta0 + S.T @ u) if family == "binomial" else np.exp(eta0 + S.T @ u)
        var = m * mu * (1 - mu) if family == "binomial" else mu
        return S @ (y - m * mu if family == "binomial" else y - mu), S @ var + sigma ** -2

    for _ in range(100):
        grad, curvature = moments(u)
        step = (grad - u / sigma ** 2) / curvature
        u += step
        if np.max(np.abs(step)) < 1e-12 * (1 + np.max(np.abs(u))):
            break
    tau = moments(u)[1] ** -0.5
    z, w = np.polynomial.hermite.hermgauss(n_nodes)
    a = u[:, None] + np.sqrt(2) * tau[:, None] * z
    logp = _log_p(family, y[:, None], m[:, None], eta0[:, None] + S.T @ a)
    h = S @ logp - 0.5 * (a / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)
    return float(np.sum(np.log(np.sqrt(2) * tau) + special.logsumexp(np.log(w) + z ** 2 + h,
                                                                       axis=1)))


def _pooled_optimum(X, y, m, codes, n_nodes, family):
    start = np.r_[np.zeros(X.shape[1]), 1.0]
    result = optimize.minimize(lambda t: -_oracle(t, X, y, m, codes, n_nodes, family), start,
                               method="Nelder-Mead",
                               options={"xatol": 1e-10, "fatol": 1e-12, "maxfev": 40000,
                                        "maxiter": 40000, "adaptive": True})
    assert result.success
    return np.r_[result.x[:-1], abs(result.x[-1])], -result.fun


def _assert_pooled_optimum(est, X, y, m, codes, n_nodes, family):
    theta = np.r_[est.fe_params_.to_numpy(), est.sigma_]
    # the same likelihood ...
    assert est.llf_ == pytest.approx(_oracle(theta, X, y, m, codes, n_nodes, family),
                                     rel=1e-11)
    # ... at its maximum: at least the pooled optimiser's value, the same point
    reference, best = _pooled_optimum(X, y, m, codes, n_nodes, family)
    assert est.llf_ >= best - 1e-9
    np.testing.assert_allclose(theta, reference, atol=2e-6)
    # standard errors: the inverse of the oracle's finite-difference Hessian
    f = lambda t: _oracle(t, X, y, m, codes, n_nodes, family)  # noqa: E731
    k, h = theta.size, 1e-4
    H = np.empty((k, k))
    for i in range(k):
        for j in range(k):
            e_i, e_j = np.eye(k)[i] * h, np.eye(k)[j] * h
            H[i, j] = (f(theta + e_i + e_j) - f(theta + e_i - e_j) - f(theta - e_i + e_j)
                       + f(theta - e_i - e_j)) / (4 * h * h)
    bse = np.sqrt(np.diag(np.linalg.inv(-H)))
    np.testing.assert_allclose(est.results_.bse_fe, bse[:-1], rtol=1e-4)
    assert est.results_.bse_sigma == pytest.approx(bse[-1], rel=1e-4)


def _cbpp_arrays(table, y):
    X = np.column_stack([np.ones(len(y)), table[["period_2", "period_3", "period_4"]]])
    return X, y, table["size"].to_numpy(float), table["herd"].to_numpy() - 1


def _fit_cbpp(cbpp, n_nodes):
    table, y, sites = cbpp
    return FedMixedGLM(trials="size", n_nodes=n_nodes, min_group_size=1).fit(
        table, y, clients=sites, groups="herd")


# -- cbpp -----------------------------------------------------------------------------------
def test_cbpp_laplace_is_the_pooled_optimum_and_lme4s(cbpp):
    est = _fit_cbpp(cbpp, 1)
    _assert_pooled_optimum(est, *_cbpp_arrays(*cbpp[:2]), 1, "binomial")
    # lme4 (test-glmer.R): fixef to 5e-4 and -2 logLik 184.0526746; the exact optimum is
    # a little better than lme4's
    np.testing.assert_allclose(est.fe_params_, [-1.39855, -0.99234, -1.12868, -1.58030],
                               atol=5e-4)
    assert -2 * est.llf_ <= 184.0526746 + 1e-6
    assert est.results_.aic == pytest.approx(194.0526746, abs=2e-4)
    assert est.n_iter_ <= 8 and est.converged_
    assert est.ledger_["rounds"]["rounds"] == est.n_iter_
    assert est.ledger_["inference"]["rounds"] == 1


def test_cbpp_agq25_matches_lme4_and_quadrature(cbpp):
    est = _fit_cbpp(cbpp, 25)
    X, y, m, codes = _cbpp_arrays(*cbpp[:2])
    # lme4 reports nAGQ > 1 deviances relative to the saturated model (glmer-1.R)
    saturated = _log_p("binomial", y, m, special.logit(np.clip(y / m, 1e-300, 1 - 1e-16)))
    saturated = np.where((y == 0) | (y == m), 0.0, saturated)
    saturated += np.where((y == 0) | (y == m), special.gammaln(m + 1) - special.gammaln(y + 1)
                          - special.gammaln(m - y + 1), 0.0)
    assert -2 * est.llf_ + 2 * saturated.sum() == pytest.approx(100.010030538022, abs=1e-8)
    np.testing.assert_allclose(est.fe_params_, [-1.399225, -0.991407, -1.127822, -1.579466],
                               atol=1e-5)
    # with 25 nodes the approximation is the integral itself (adaptive quad, group by group)
    b, sigma = est.fe_params_.to_numpy(), est.sigma_
    total = 0.0
    for g in range(codes.max() + 1):
        rows = codes == g
        f = lambda u: np.exp(_log_p("binomial", y[rows], m[rows], X[rows] @ b + u).sum()  # noqa
                             - 0.5 * (u / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi))
        total += np.log(integrate.quad(f, -12 * sigma, 12 * sigma, epsabs=0, epsrel=1e-13,
                                       limit=200)[0])
    assert est.llf_ == pytest.approx(total, rel=1e-10)


# -- Poisson on heterogeneous sites ------------------------------------------------------------
def _poisson_sites(seed=0):
    rng = np.random.default_rng(seed)
    frames = []
    for s, n_groups in enumerate([9, 4, 6]):
        for g in range(n_groups):
            n = rng.integers(4, 9)
            x = rng.normal(loc=0.5 * s, scale=1 + 0.5 * s, size=n)
            u = rng.normal(scale=0.7)
            y = rng.poisson(np.exp(0.3 + 0.4 * x + u))
            frames.append(pd.DataFrame({"x": x, "y": y, "site": s, "g": f"{s}-{g}"}))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("n_nodes", [1, 7])
def test_poisson_nested_groups_are_the_pooled_optimum(n_nodes):
    data = _poisson_sites()
    est = FedMixedGLM("poisson", n_nodes=n_nodes).fit(data[["x", "g"]], data["y"],
                                                      clients=data["site"], groups="g")
    X = np.column_stack([np.ones(len(data)), data["x"]])
    codes = pd.factorize(data["g"], sort=True)[0]
    _assert_pooled_optimum(est, X, data["y"].to_numpy(float), np.ones(len(data)), codes,
                           n_nodes, "poisson")
    assert est.n_iter_ <= 8
    assert set(est.random_effects_.index) == set(data["g"])
    assert np.all(np.isfinite(est.random_effects_))


# -- warnings and bad input ------------------------------------------------------------
def test_sites_as_groups_warn_when_few(cbpp):
    table, y, sites = cbpp
    with pytest.warns(FewGroupsWarning, match="only 3 sites"), warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundaryFitWarning)  # three sites: sigma near 0
        est = FedMixedGLM(trials="size").fit(table.drop(columns="herd"), y, clients=sites)
    assert est.n_groups_ == 3


def test_bad_input_is_refused(cbpp):
    table, y, sites = cbpp
    bad = y.copy()
    bad[4] = 40  # more successes than trials
    with pytest.raises(SiteError, match="between 0 and its trials"):
        FedMixedGLM(trials="size", min_group_size=1).fit(table, bad, clients=sites,
                                                        groups="herd")
    with pytest.raises(SiteError, match="site 1: group 8 has 1 row"):
        FedMixedGLM(trials="size").fit(table, y, clients=sites, groups="herd")
    moved = table.copy()
    moved.loc[[0, 1], "herd"] = 15  # two rows of herd 15 (site 2) at site 0
    with pytest.raises(ValueError, match="group 15 is at two sites"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            FedMixedGLM(trials="size", min_group_size=1).fit(moved, y, clients=sites,
                                                            groups="herd")
    with pytest.raises(ValueError, match="binomial family only"):
        FedMixedGLM("poisson", trials="size").fit(table, y, clients=sites, groups="herd")
