"""skfed.causal in this process: every number equal to delicatessen's M-estimation on the
pooled rows (``ee_ipw`` Hajek and ``ee_aipw`` where they apply, stacked estimating
equations written here and solved by its ``MEstimator`` elsewhere), the balance table
equal to a pooled pandas computation; over an IID and a strongly heterogeneous split of
the rows into sites."""

import warnings

import numpy as np
import pandas as pd
import pytest

from skfed import FederatedDataset
from skfed.causal import FedAIPW, FedIPW

delicatessen = pytest.importorskip("delicatessen")
from delicatessen import MEstimator  # noqa: E402
from delicatessen.estimating_equations import ee_aipw, ee_ipw, ee_regression  # noqa: E402
from delicatessen.utilities import inverse_logit  # noqa: E402

POINT, VARIANCE = 1e-9, 1e-6


def _data(split="iid", outcome="gaussian", n=900, seed=0):
    """Three covariates (two continuous, one binary), a treatment and an outcome; the
    heterogeneous split puts 10% treated at one site and 80% at another."""
    rng = np.random.default_rng(seed)
    site = np.arange(n) % 3
    X = np.column_stack([rng.normal(size=n), rng.normal(size=n), rng.random(n) < 0.4])
    shift = np.array([-2.4, 1.6, -0.3])[site] if split == "hetero" else 0.0
    a = (rng.random(n) < inverse_logit(shift + 0.8 * X[:, 0] - 0.5 * X[:, 2])).astype(float)
    if outcome == "gaussian":
        y = 1 + 2 * a + X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=n)
    elif outcome == "binomial":
        y = (rng.random(n) < inverse_logit(-0.5 + a + 0.5 * X[:, 0])).astype(float)
    else:
        y = rng.poisson(np.exp(0.2 + 0.4 * a + 0.3 * X[:, 0])).astype(float)
    return X, a, y, site


def _solve(psi, k):
    m = MEstimator(psi, init=[0.0] * k)
    m.estimate(solver="lm", tolerance=1e-13, deriv_method="exact")
    return m.theta, m.variance


def _weights(e, a, estimand):
    if estimand == "ATE":
        return a / e, (1 - a) / (1 - e)
    if estimand == "ATT":
        return a, (1 - a) * e / (1 - e)
    if estimand == "ATC":
        return a * (1 - e) / e, (1 - a)
    return a * (1 - e), (1 - a) * e


def _reference_ipw(X, a, y, estimand, stabilized=False, trim=None):
    """The stacked equations: weighted means [share of treated], logistic score."""
    W = np.column_stack([np.ones(len(a)), X])
    keep = 1.0
    if trim is not None:  # the indicator is flat in beta at the fitted score: fixed there
        beta, _ = _solve(lambda theta: ee_regression(theta, W, a, "logistic"), W.shape[1])
        e_hat = inverse_logit(W @ beta)
        keep = ((e_hat >= trim[0]) & (e_hat <= trim[1])).astype(float)
    off = 3 if stabilized else 2

    def psi(theta):
        e = inverse_logit(np.dot(W, theta[off:]))
        w1, w0 = _weights(e, a, estimand)
        s1, s0 = (theta[2], 1 - theta[2]) if stabilized else (1.0, 1.0)
        rows = [keep * s1 * w1 * (y - theta[0]), keep * s0 * w0 * (y - theta[1])]
        rows += [a - theta[2]] if stabilized else []
        return np.vstack(rows + [ee_regression(theta[off:], W, a, "logistic")])
    return _solve(psi, off + W.shape[1])


def _check(est, theta, variance):
    """Point estimates to 1e-9 and the sandwich to 1e-6 (relative), every parameter."""
    np.testing.assert_allclose(est.params_, theta, rtol=POINT, atol=POINT)
    np.testing.assert_allclose(est.cov_params_, variance, rtol=VARIANCE,
                               atol=VARIANCE * np.abs(variance).max())
    c = np.array([1.0, -1.0])
    np.testing.assert_allclose(est.effect_, theta[0] - theta[1], rtol=POINT, atol=POINT)
    np.testing.assert_allclose(est.std_err_ ** 2, c @ variance[:2, :2] @ c, rtol=VARIANCE)


@pytest.mark.parametrize("split", ["iid", "hetero"])
@pytest.mark.parametrize("truncate", [None, (0.1, 0.9)])
def test_ipw_ate_equals_delicatessen_ee_ipw_hajek(split, truncate):
    X, a, y, site = _data(split)
    est = FedIPW(truncate=truncate).fit(X, a, y, clients=site)
    W = np.column_stack([np.ones(len(a)), X])
    theta, variance = _solve(lambda theta: ee_ipw(theta, y, a, W, truncate=truncate,
                                                  weight_type="hajek"), 3 + W.shape[1])
    order = [1, 2] + list(range(3, 3 + W.shape[1]))  # delicatessen puts the ATE first
    _check(est, theta[order], variance[np.ix_(order, order)])
    np.testing.assert_allclose(est.effect_, theta[0], rtol=POINT)
    np.testing.assert_allclose(est.std_err_ ** 2, variance[0, 0], rtol=VARIANCE)
    if split == "hetero":  # the split is what the test says it is
        shares = [a[site == k].mean() for k in range(3)]
        assert shares[0] < 0.15 and shares[1] > 0.75


@pytest.mark.parametrize("split", ["iid", "hetero"])
@pytest.mark.parametrize("estimand", ["ATT", "ATC", "ATO"])
def test_ipw_estimands_equal_the_stacked_equations(split, estimand):
    X, a, y, site = _data(split)
    est = FedIPW(estimand).fit(X, a, y, clients=site)
    _check(est, *_reference_ipw(X, a, y, estimand))


@pytest.mark.parametrize("split", ["iid", "hetero"])
def test_stabilized_and_trimmed_weights_equal_the_stacked_equations(split):
    X, a, y, site = _data(split)
    stable = FedIPW(stabilized=True).fit(X, a, y, clients=site)
    _check(stable, *_reference_ipw(X, a, y, "ATE", stabilized=True))
    plain = FedIPW().fit(X, a, y, clients=site)  # Hajek: the same effect and variance
    np.testing.assert_allclose(stable.effect_, plain.effect_, rtol=1e-12)
    np.testing.assert_allclose(stable.std_err_, plain.std_err_, rtol=1e-9)
    trimmed = FedIPW(trim=(0.1, 0.9)).fit(X, a, y, clients=site)
    _check(trimmed, *_reference_ipw(X, a, y, "ATE", trim=(0.1, 0.9)))
    assert abs(trimmed.effect_ - plain.effect_) > 1e-6  # trimming dropped rows


def _interacted(X, a):
    """delicatessen's single outcome model, fully interacted with the treatment: the same
    fitted values and scores as one model per arm."""
    one, zero = np.ones((len(a), 1)), np.zeros((len(a), 1))
    Z = np.hstack([one, X])
    full = np.hstack([(1 - a)[:, None] * Z, a[:, None] * Z])
    return full, np.hstack([0 * Z, Z]), np.hstack([Z, 0 * Z]), zero


@pytest.mark.parametrize("split", ["iid", "hetero"])
@pytest.mark.parametrize("family", ["gaussian", "binomial"])
def test_aipw_equals_delicatessen_ee_aipw(split, family):
    X, a, y, site = _data(split, outcome=family)
    est = FedAIPW(outcome_family=family).fit(X, a, y, clients=site)
    W = np.column_stack([np.ones(len(a)), X])
    full, X1, X0, _ = _interacted(X, a)
    q = W.shape[1]
    theta, variance = _solve(lambda theta: ee_aipw(theta, y, a, W, full, X1, X0),
                             3 + q + 2 * q)
    # delicatessen: [ATE, mu1, mu0, beta, gamma0, gamma1]; skfed: [mu1, mu0, beta, g1, g0]
    order = [1, 2] + list(range(3, 3 + q)) + list(range(3 + 2 * q, 3 + 3 * q)) + \
        list(range(3 + q, 3 + 2 * q))
    _check(est, theta[order], variance[np.ix_(order, order)])


def test_aipw_poisson_equals_the_stacked_equations():
    X, a, y, site = _data("hetero", outcome="poisson")
    est = FedAIPW(outcome_family="poisson").fit(X, a, y, clients=site)
    W = np.column_stack([np.ones(len(a)), X])
    q = W.shape[1]

    def psi(theta):
        beta, g1, g0 = theta[2:2 + q], theta[2 + q:2 + 2 * q], theta[2 + 2 * q:]
        e = inverse_logit(np.dot(W, beta))
        m1, m0 = np.exp(np.dot(W, g1)), np.exp(np.dot(W, g0))
        return np.vstack([m1 + a * (y - m1) / e - theta[0],
                          m0 + (1 - a) * (y - m0) / (1 - e) - theta[1],
                          ee_regression(beta, W, a, "logistic"),
                          ee_regression(g1, W, y, "poisson") * a,
                          ee_regression(g0, W, y, "poisson") * (1 - a)])
    _check(est, *_solve(psi, 2 + 3 * q))


def test_binary_outcome_ratio_and_odds_ratio_by_the_delta_method():
    """The ratio and odds ratio equal delicatessen's with their logs stacked as
    parameters (the sandwich of a smooth function is the delta method)."""
    X, a, y, site = _data("hetero", outcome="binomial")
    est = FedIPW().fit(X, a, y, clients=site)
    W = np.column_stack([np.ones(len(a)), X])

    def psi(theta):
        base = ee_ipw(theta[2:], y, a, W, weight_type="hajek")
        mu1, mu0 = theta[3], theta[4]
        ones = np.ones(len(a))
        return np.vstack([ones * (np.log(mu1) - np.log(mu0)) - theta[0],
                          ones * (np.log(mu1 / (1 - mu1)) - np.log(mu0 / (1 - mu0)))
                          - theta[1], base])
    init = [0.0, 0.0, 0.0, 0.5, 0.5] + [0.0] * W.shape[1]
    m = MEstimator(psi, init=init)
    m.estimate(solver="lm", tolerance=1e-13, deriv_method="exact")
    ratio, odds = est.effects_.loc["ratio"], est.effects_.loc["odds ratio"]
    np.testing.assert_allclose(np.log(ratio["estimate"]), m.theta[0], rtol=POINT)
    np.testing.assert_allclose(np.log(odds["estimate"]), m.theta[1], rtol=POINT)
    np.testing.assert_allclose(ratio["std_err"] ** 2, m.variance[0, 0], rtol=VARIANCE)
    np.testing.assert_allclose(odds["std_err"] ** 2, m.variance[1, 1], rtol=VARIANCE)
    lo, hi = np.exp(m.theta[0] + np.array([-1, 1]) * 1.959963984540054 *
                    np.sqrt(m.variance[0, 0]))
    np.testing.assert_allclose([ratio["lower 95%"], ratio["upper 95%"]], [lo, hi],
                               rtol=1e-6)


def _pooled_scores(X, a):
    W = np.column_stack([np.ones(len(a)), X])
    beta, _ = _solve(lambda theta: ee_regression(theta, W, a, "logistic"), W.shape[1])
    return inverse_logit(W @ beta)


@pytest.mark.parametrize("estimand", ["ATE", "ATT", "ATO"])
def test_balance_table_equals_pooled_pandas(estimand):
    X, a, y, site = _data("hetero")
    est = FedIPW(estimand).fit(X, a, y, clients=site)
    e = _pooled_scores(X, a)
    w1, w0 = _weights(e, a, estimand)
    w = w1 + w0
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2"]).assign(a=a, w=w)
    treated, control = frame[frame.a == 1], frame[frame.a == 0]
    for c in ["x0", "x1", "x2"]:
        sd = {"ATE": np.sqrt((treated[c].var() + control[c].var()) / 2),
              "ATT": treated[c].std(), "ATO": np.sqrt((treated[c].var() + control[c].var())
                                                      / 2)}[estimand]
        before = (treated[c].mean() - control[c].mean()) / sd
        after = (np.average(treated[c], weights=treated.w) -
                 np.average(control[c], weights=control.w)) / sd
        row = est.balance_.loc[c]
        np.testing.assert_allclose([row["SMD before"], row["SMD after"]], [before, after],
                                   rtol=1e-9, atol=1e-12)
    for arm, part in (("treated", treated), ("control", control)):
        ess = part.w.sum() ** 2 / (part.w ** 2).sum()
        np.testing.assert_allclose(est.effective_sample_size_[arm], ess, rtol=1e-10)
    if estimand == "ATO":  # overlap weights balance the means exactly
        np.testing.assert_allclose(est.balance_["SMD after"], 0, atol=1e-9)


def test_overlap_counts_and_extreme_weight_warning_carry_counts_only():
    X, a, y, site = _data("hetero")
    with pytest.warns(UserWarning, match="extreme weights") as caught:
        est = FedIPW(extreme_weight=3.0, min_level_count=5).fit(X, a, y, clients=site)
    e = _pooled_scores(X, a)
    edges = est.overlap_["edges"]
    for arm, value in (("treated", 1), ("control", 0)):
        pooled = np.histogram(e[a == value], bins=edges)[0]
        per_site = [np.histogram(e[(a == value) & (site == k)], bins=edges)[0]
                    for k in range(3)]
        small = np.any([(c > 0) & (c < 5) for c in per_site], axis=0) | \
            ((pooled > 0) & (pooled < 5))
        shown = est.overlap_[arm]
        assert np.all(np.isnan(shown[small]))
        np.testing.assert_array_equal(shown[~small], pooled[~small])
    w1, w0 = _weights(e, a, "ATE")
    text = str(caught[0].message)
    assert "." not in text.split("weigh more")[0]  # counts only: no weight's value
    for arm, w, value in (("treated", w1, 1), ("control", w0, 0)):
        per_site = np.array([np.sum((w > 3) & (a == value) & (site == k))
                             for k in range(3)])
        assert est.overlap_["extreme"][arm] == per_site[per_site >= 5].sum()
        assert f"{per_site[per_site >= 5].sum()} {arm}" in text
    assert sum(est.overlap_["extreme"].values()) > 0


def test_dataset_route_equals_the_array_route():
    X, a, y, site = _data("hetero")
    frame = pd.DataFrame(X, columns=["age", "bmi", "male"]).assign(smoker=a)
    data = FederatedDataset.from_arrays(frame, y, site)
    by_name = FedIPW().fit(data, treatment="smoker", covariates=["age", "bmi", "male"])
    by_array = FedIPW().fit(X, a, y, clients=site)
    np.testing.assert_allclose(by_name.params_, by_array.params_, rtol=1e-12)
    np.testing.assert_allclose(by_name.cov_params_, by_array.cov_params_, rtol=1e-10)
    assert by_name.param_names_[2:] == ["ps[Intercept]", "ps[age]", "ps[bmi]", "ps[male]"]
    frame["outcome"] = y
    data = FederatedDataset.from_arrays(frame, None, site)
    named = FedIPW().fit(data, treatment="smoker", outcome="outcome")
    np.testing.assert_allclose(named.params_, by_array.params_, rtol=1e-12)


def test_results_table_and_intervals():
    X, a, y, site = _data()
    est = FedIPW().fit(X, a, y, clients=site)
    table = est.results_.summary_frame()
    np.testing.assert_allclose(table.iloc[0, 0], est.effect_)
    np.testing.assert_allclose(table.iloc[0, 1], est.std_err_)
    np.testing.assert_allclose(est.results_.conf_int().iloc[0].to_numpy(), est.conf_int())
    assert est.std_err_fixed_score_ > 0
    assert "M-estimation sandwich" in str(est.summary())
    # a ratio of positive means; no odds ratio of means outside (0, 1)
    assert est.effects_.index.tolist() == ["difference", "ratio"]
    with pytest.raises(AttributeError, match="FedAIPW"):
        FedAIPW().fit(X, a, y, clients=site).std_err_fixed_score_


def test_bad_input_is_named():
    X, a, y, site = _data()
    with pytest.raises(ValueError, match="other than 0 and 1"):
        FedIPW().fit(X, a * 2, y, clients=site)
    with pytest.raises(ValueError, match="stabilized weights are for the ATE"):
        FedIPW("ATT", stabilized=True).fit(X, a, y, clients=site)
    with pytest.raises(ValueError, match="trim must be two increasing"):
        FedIPW(trim=(0.9, 0.1)).fit(X, a, y, clients=site)
    with pytest.raises(ValueError, match="one arm"):
        FedIPW().fit(X, np.ones_like(a), y, clients=site)
    with pytest.raises(ValueError, match="did not converge|singular"):
        FedIPW().fit(np.column_stack([X, a]), a, y, clients=site)  # separation
    with pytest.raises(ValueError, match="binomial outcome model"):
        FedAIPW(outcome_family="binomial").fit(X, a, y, clients=site)
    with pytest.raises(ValueError, match="X has 900 rows"):
        FedIPW().fit(X, a[:10], y, clients=site)


def test_differential_privacy_is_refused_and_masked_sums_are_exact():
    pytest.importorskip("cryptography")
    from skfed.privacy import DifferentialPrivacy, SecureAggregation

    X, a, y, site = _data("hetero")
    with pytest.raises(ValueError, match="differential privacy is refused"):
        FedIPW(privacy=DifferentialPrivacy(epsilon=1.0)).fit(X, a, y, clients=site)
    with pytest.raises(ValueError, match="percentile truncation is refused under secure"):
        FedIPW(truncate=(1, 99), truncate_by="percentile",
               privacy=SecureAggregation()).fit(X, a, y, clients=site)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = FedAIPW().fit(X, a, y, clients=site)
        masked = FedAIPW(privacy=SecureAggregation()).fit(X, a, y, clients=site)
    np.testing.assert_allclose(masked.params_, plain.params_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(masked.cov_params_, plain.cov_params_, rtol=1e-10)
    pd.testing.assert_frame_equal(masked.balance_, plain.balance_, rtol=1e-10)


def test_love_plot_and_overlap_figure_draw_the_fitted_numbers():
    pytest.importorskip("matplotlib")
    from skfed.plotting import plot_love, plot_overlap

    X, a, y, site = _data("hetero")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est = FedIPW().fit(X, a, y, clients=site)
    ax = plot_love(est).axes[0]
    before, after = ax.lines[0].get_xdata(), ax.lines[1].get_xdata()
    np.testing.assert_array_equal(before, np.abs(est.balance_["SMD before"]))
    np.testing.assert_array_equal(after, np.abs(est.balance_["SMD after"]))
    rows = {t.get_text(): t.get_position()[1] for t in ax.get_yticklabels()}
    assert rows == {"x0": 2, "x1": 1, "x2": 0}  # the table's order, top down
    ax = plot_overlap(est).axes[0]
    heights = np.array([p.get_height() for p in ax.patches])
    n = len(est.overlap_["edges"]) - 1
    np.testing.assert_array_equal(heights[:n], np.nan_to_num(est.overlap_["treated"]))
    np.testing.assert_array_equal(heights[n:], -np.nan_to_num(est.overlap_["control"]))
    with pytest.raises(ValueError, match="balance=True"):
        plot_love(FedIPW(balance=False).fit(X, a, y, clients=site))


def test_a_boosted_propensity_model_gives_the_point_estimate_only():
    """Boosted trees have no estimating equations: the effect is the pooled Hajek
    estimate with the model's scores, std_err_ is NaN and conf_int() says why; the
    interval that treats the weights as given equals statsmodels' weighted regression."""
    import statsmodels.api as sm

    from skfed import FedHistGradientBoostingClassifier

    X, a, y, site = _data("hetero")
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2"])
    with pytest.warns(UserWarning, match="boosted trees have no such equations"):
        est = FedIPW(propensity=FedHistGradientBoostingClassifier(max_iter=20)).fit(
            frame, a, y, clients=site)
    e = est.propensity_model_.predict_proba(frame)[:, 1]
    w = np.where(a == 1, 1 / e, 1 / (1 - e))
    mu1, mu0 = np.average(y[a == 1], weights=w[a == 1]), np.average(y[a == 0],
                                                                    weights=w[a == 0])
    np.testing.assert_allclose(est.potential_outcomes_[1], mu1, rtol=1e-12)
    np.testing.assert_allclose(est.potential_outcomes_[0], mu0, rtol=1e-12)
    assert np.isnan(est.std_err_) and np.isnan(est.cov_params_).all()
    with pytest.raises(ValueError, match="not in the stacked estimating equations"):
        est.conf_int()
    wls = sm.WLS(y, sm.add_constant(a), weights=w).fit(cov_type="HC0")
    np.testing.assert_allclose(est.conf_int(fixed_score=True), wls.conf_int()[1], rtol=1e-9)
    after = (np.average(frame.x0[a == 1], weights=w[a == 1]) -
             np.average(frame.x0[a == 0], weights=w[a == 0]))
    np.testing.assert_allclose(est.balance_.loc["x0", "SMD after"] * np.sqrt(
        (frame.x0[a == 1].var() + frame.x0[a == 0].var()) / 2), after, rtol=1e-9)


@pytest.mark.parametrize("estimator", [FedIPW, FedAIPW])
def test_percentile_truncation_equals_ee_ipw_at_the_pooled_percentiles(estimator):
    """The pooled scores' exact 5th and 95th percentiles (numpy's), then delicatessen's
    truncate at them (held fixed)."""
    X, a, y, site = _data("hetero")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est = estimator(truncate=(5, 95), truncate_by="percentile").fit(X, a, y,
                                                                         clients=site)
    W = np.column_stack([np.ones(len(a)), X])
    beta, _ = _solve(lambda theta: ee_regression(theta, W, a, "logistic"), W.shape[1])
    bounds = np.percentile(inverse_logit(W @ beta), [5, 95])
    np.testing.assert_allclose(est.truncation_bounds_, bounds, rtol=1e-12)
    if estimator is FedIPW:
        theta, variance = _solve(lambda theta: ee_ipw(theta, y, a, W, truncate=tuple(bounds),
                                                      weight_type="hajek"), 3 + W.shape[1])
    else:
        full, X1, X0, _ = _interacted(X, a)
        theta, variance = _solve(lambda theta: ee_aipw(theta, y, a, W, full, X1, X0,
                                                       truncate=tuple(bounds)),
                                 3 + 3 * W.shape[1])
    np.testing.assert_allclose(est.effect_, theta[0], rtol=POINT)
    np.testing.assert_allclose(est.std_err_ ** 2, variance[0, 0], rtol=VARIANCE)
    with pytest.raises(ValueError, match="two increasing percentiles in \\[0, 100\\]"):
        estimator(truncate=(95, 5), truncate_by="percentile").fit(X, a, y, clients=site)


def test_a_site_without_treated_rows():
    """One site treats no one (its rows weigh in the controls' mean and the score):
    the pooled estimate all the same."""
    X, a, y, site = _data("hetero")
    a = np.where(site == 0, 0.0, a)
    est = FedIPW().fit(X, a, y, clients=site)
    W = np.column_stack([np.ones(len(a)), X])
    theta, variance = _solve(lambda theta: ee_ipw(theta, y, a, W, weight_type="hajek"),
                             3 + W.shape[1])
    np.testing.assert_allclose(est.effect_, theta[0], rtol=POINT)
    np.testing.assert_allclose(est.std_err_ ** 2, variance[0, 0], rtol=VARIANCE)
