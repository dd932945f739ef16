"""FedAIPW for the ATT and the ATC equals delicatessen's ``MEstimator`` on stacked
estimating equations written here (the doubly robust ATT: the treated outcomes' mean,
and the controls' outcome model averaged over the treated plus the controls' normalised
weighted residual, weights e/(1-e); the ATC with the arms swapped), on the pooled rows:
point estimates to 1e-9 and the sandwich to 1e-6 (relative), every parameter."""

import numpy as np
import pytest

from skfed.causal import FedAIPW

from .test_causal import _check, _data, _solve

delicatessen = pytest.importorskip("delicatessen")


def _reference(X, a, y, estimand, family, truncate=None):
    from delicatessen.estimating_equations import ee_regression
    from delicatessen.utilities import inverse_logit

    W = np.column_stack([np.ones(len(a)), X])
    q = W.shape[1]
    model = {"gaussian": "linear", "binomial": "logistic", "poisson": "poisson"}[family]
    mean = {"gaussian": lambda t: t, "binomial": inverse_logit, "poisson": np.exp}[family]

    def psi(theta):
        mu1, mu0 = theta[0], theta[1]
        beta, g1 = theta[2:2 + q], theta[2 + q:2 + 2 * q]
        g0, nu = theta[2 + 2 * q:2 + 3 * q], theta[2 + 3 * q]
        e = inverse_logit(W @ beta)
        if truncate is not None:
            e = np.clip(e, *truncate)
        m1, m0 = mean(W @ g1), mean(W @ g0)
        if estimand == "ATT":
            means = [a * (y - mu1), a * (m0 + nu - mu0),
                     (1 - a) * e / (1 - e) * (y - m0 - nu)]
        else:
            means = [(1 - a) * (m1 + nu - mu1), (1 - a) * (y - mu0),
                     a * (1 - e) / e * (y - m1 - nu)]
        return np.vstack([means[0], means[1], ee_regression(beta, W, a, "logistic"),
                          ee_regression(g1, W, y, model) * a,
                          ee_regression(g0, W, y, model) * (1 - a), means[2]])
    return _solve(psi, 3 + 3 * q)


@pytest.mark.parametrize("estimand", ["ATT", "ATC"])
@pytest.mark.parametrize("split, family", [("iid", "gaussian"), ("hetero", "gaussian"),
                                           ("hetero", "binomial"), ("iid", "poisson")])
def test_aipw_att_and_atc_equal_the_stacked_equations(estimand, split, family):
    X, a, y, site = _data(split, outcome=family)
    est = FedAIPW(estimand, outcome_family=family).fit(X, a, y, clients=site)
    _check(est, *_reference(X, a, y, estimand, family))
    assert est.param_names_[-1] == ("resid[Y(0)]" if estimand == "ATT" else "resid[Y(1)]")


def test_aipw_att_with_truncated_scores():
    X, a, y, site = _data("hetero")
    est = FedAIPW("ATT", truncate=(0.05, 0.95)).fit(X, a, y, clients=site)
    _check(est, *_reference(X, a, y, "ATT", "gaussian", truncate=(0.05, 0.95)))


def test_aipw_att_is_doubly_robust():
    """A wrong propensity model (a covariate left out) with the right outcome model, and
    the reverse: the ATT stays near its true value (2) in a large sample."""
    rng = np.random.default_rng(3)
    n = 20000
    X = rng.normal(size=(n, 2))
    a = (rng.random(n) < 1 / (1 + np.exp(-(X[:, 0] - 0.5)))).astype(float)
    y = 1 + (2 + X[:, 1]) * a + X[:, 0] + X[:, 1] + rng.normal(size=n)  # ATT = 2 + E[x1|A=1]
    truth = 2 + X[a == 1, 1].mean()
    site = np.arange(n) % 3
    fits = {
        "both right": FedAIPW("ATT", balance=False).fit(X, a, y, clients=site),
        # the score misses x0; x0 taken out of the outcome, whose model on x1 is right
        "score wrong": FedAIPW("ATT", balance=False).fit(X[:, [1]], a, y - X[:, 0],
                                                         clients=site),
        # the score right; x0^2 in the outcome, which the linear outcome model misses
        "outcome wrong": FedAIPW("ATT", balance=False).fit(X, a, y + X[:, 0] ** 2,
                                                           clients=site)}
    for name, est in fits.items():
        assert est.effect_ == pytest.approx(truth, abs=3 * est.std_err_), name


def test_aipw_rejects_the_overlap_estimand():
    X, a, y, site = _data()
    with pytest.raises(ValueError, match="estimand"):
        FedAIPW("ATO").fit(X, a, y, clients=site)


@pytest.mark.parametrize("estimand", ["ATE", "ATT"])
def test_aipw_with_its_own_outcome_covariates(estimand):
    """outcome_covariates: the outcome models on x0 and x1 only, the propensity model on
    all three; equal to the stacked equations with two designs."""
    import pandas as pd
    from delicatessen.estimating_equations import ee_regression
    from delicatessen.utilities import inverse_logit

    X, a, y, site = _data("hetero")
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2"])
    est = FedAIPW(estimand, outcome_covariates=["x0", "x1"]).fit(frame, a, y, clients=site)
    W, V = np.column_stack([np.ones(len(a)), X]), np.column_stack([np.ones(len(a)), X[:, :2]])
    q, r = W.shape[1], V.shape[1]

    def psi(theta):
        beta, g1, g0 = theta[2:2 + q], theta[2 + q:2 + q + r], theta[2 + q + r:2 + q + 2 * r]
        e = inverse_logit(W @ beta)
        m1, m0 = V @ g1, V @ g0
        if estimand == "ATE":
            means = [m1 + a * (y - m1) / e - theta[0], m0 + (1 - a) * (y - m0) / (1 - e)
                     - theta[1]]
        else:
            nu = theta[-1]
            means = [a * (y - theta[0]), a * (m0 + nu - theta[1])]
        rows = [*means, ee_regression(beta, W, a, "logistic"),
                ee_regression(g1, V, y, "linear") * a, ee_regression(g0, V, y, "linear") * (1 - a)]
        if estimand == "ATT":
            rows.append((1 - a) * e / (1 - e) * (y - m0 - theta[-1]))
        return np.vstack(rows)
    _check(est, *_solve(psi, 2 + q + 2 * r + (estimand == "ATT")))
    assert est.param_names_[2 + q:2 + q + r] == ["y1[Intercept]", "y1[x0]", "y1[x1]"]
    with pytest.raises(ValueError, match="outcome_covariates: no column 'bmi'"):
        FedAIPW(outcome_covariates=["bmi"]).fit(frame, a, y, clients=site)


@pytest.mark.slow
def test_aipw_att_with_outcome_covariates_through_site_services(tmp_path):
    import pandas as pd

    pytest.importorskip("grpc")
    from ._sites import services_of

    X, a, y, site = _data("iid", n=1500)
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2"]).assign(treated=a, y=y)
    est = FedAIPW("ATT", outcome_covariates=["x0", "x1"], balance=False)
    local = est.fit(frame[["x0", "x1", "x2"]], a, y, clients=site)
    local_params = local.params_.copy()
    frames = [frame[site == k].reset_index(drop=True) for k in range(3)]
    with services_of(tmp_path, frames, target="y") as data:
        remote = est.fit(data, treatment="treated", covariates=["x0", "x1", "x2"])
    np.testing.assert_allclose(remote.params_, local_params, rtol=1e-10, atol=1e-12)
