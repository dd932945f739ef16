"""FedOrderedModel and FedMNLogit equal statsmodels' OrderedModel and MNLogit on the
pooled rows (parameters to 1e-6, standard errors to 1e-6 relative, log-likelihood to
1e-8), on IID and heterogeneous splits, a site missing a level included; bad input,
differential privacy and secure aggregation."""

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from statsmodels.miscmodels.ordinal_model import OrderedModel

from skfed import FedMNLogit, FedOrderedModel

N = 600


def _rows(seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"age": rng.normal(size=N), "dose": rng.uniform(-1, 1, N),
                      "male": rng.integers(0, 2, N).astype(float)})
    latent = X @ np.array([1.0, -0.8, 0.5]) + rng.logistic(size=N)
    y = np.digitize(latent, [-1.0, 0.5, 2.0])  # four ordered levels, 0..3
    return X, y, rng


def _splits(X, y, rng):
    """IID sites, and heterogeneous ones: sites by ``age`` tertile, the top level moved
    out of the first site (whose rows of level 3 go to the last site)."""
    iid = rng.integers(0, 3, N)
    hetero = np.digitize(X["age"], np.quantile(X["age"], [1 / 3, 2 / 3]))
    hetero = np.where((hetero == 0) & (y == 3), 2, hetero)
    return {"iid": iid, "heterogeneous": hetero}


def _ordinal_bse(ref):
    """statsmodels' standard errors of an OrderedModel fit, from its own log-likelihood's
    numerical Hessian (``approx_hess3``, its method) at two steps combined by Richardson's
    extrapolation: its default step leaves errors up to 5e-6 relative in ``ref.bse``
    (a categorical's dummies, an uncentred covariate), which the analytic Hessian does
    not have (checked against central differences of the exact gradient to 2e-10)."""
    from statsmodels.tools.numdiff import approx_hess3

    params, loglike = ref.params.to_numpy(), ref.model.loglike
    coarse, fine = (approx_hess3(params, loglike, epsilon=h) for h in (1e-3, 5e-4))
    return np.sqrt(np.diag(np.linalg.inv(-(4.0 * fine - coarse) / 3.0)))


def _statsmodels_ordinal(X, y, distr):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BFGS's "precision loss" at a gradient of 1e-10
        ref = OrderedModel(y, X, distr=distr).fit(method="bfgs", gtol=1e-12, maxiter=5000,
                                                  disp=0)
    assert np.max(np.abs(ref.mle_retvals["gopt"])) < 1e-7  # statsmodels converged
    return ref


def _assert_equal(model, params, bse, llf):
    np.testing.assert_allclose(model.params_, params, rtol=0, atol=1e-6)
    np.testing.assert_allclose(model.bse_, bse, rtol=1e-6)
    assert abs(model.llf_ - llf) < 1e-8


@pytest.mark.parametrize("distr", ["logit", "probit"])
@pytest.mark.parametrize("split", ["iid", "heterogeneous"])
def test_ordered_model_equals_statsmodels(distr, split):
    X, y, rng = _rows()
    site = _splits(X, y, rng)[split]
    if split == "heterogeneous":
        assert not np.any(y[site == 0] == 3)  # a site without the top level
    model = FedOrderedModel(distr).fit(X, y, clients=site)
    ref = _statsmodels_ordinal(X, y, distr)
    _assert_equal(model, ref.params.to_numpy(), _ordinal_bse(ref), ref.llf)
    assert model.param_names_ == list(ref.params.index)
    assert model.converged_ and model.n_clients_ == 3
    np.testing.assert_allclose(model.pvalues_, ref.pvalues.to_numpy(), rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(model.conf_int(), ref.conf_int().to_numpy(), atol=2e-6)
    np.testing.assert_allclose(model.aic_, ref.aic, atol=1e-7)
    np.testing.assert_allclose(model.bic_, ref.bic, atol=1e-7)
    np.testing.assert_allclose(model.predict_proba(X.iloc[:20]),
                               ref.predict(X.iloc[:20]), atol=1e-7)


@pytest.mark.parametrize("split", ["iid", "heterogeneous"])
def test_mnlogit_equals_statsmodels(split):
    X, y, rng = _rows(1)
    site = _splits(X, y, rng)[split]
    model = FedMNLogit().fit(X, y, clients=site)
    ref = sm.MNLogit(y, sm.add_constant(X)).fit(method="newton", tol=1e-12, maxiter=100,
                                                disp=0)
    assert np.max(np.abs(ref.model.score(ref.params.to_numpy().ravel(order="F")))) < 1e-8
    _assert_equal(model, ref.params.to_numpy().ravel(order="F"),
                  ref.bse.to_numpy().ravel(order="F"), ref.llf)
    np.testing.assert_allclose(model.cov_params_, ref.cov_params().to_numpy(), rtol=1e-6,
                               atol=1e-12)
    np.testing.assert_allclose(model.predict_proba(X.iloc[:20]),
                               ref.predict(sm.add_constant(X).iloc[:20]), atol=1e-8)
    # the table per outcome level, statsmodels' layout and names
    table = model.summary()
    assert list(dict.fromkeys(table.index.get_level_values(0))) == ["y=1", "y=2", "y=3"]
    np.testing.assert_allclose(table.loc["y=2", "std err"].to_numpy(),
                               ref.bse[1].to_numpy(), rtol=1e-6)
    text = str(table)
    assert "y=1: coef" in text and "y=3: coef" in text and "MNLogit" in text
    # a Wald test of a covariate over every level: statsmodels' on the same constraint
    R = np.zeros((3, model.params_.size))
    for k in range(3):
        R[k, 4 * k + 1] = 1.0  # age at each level
    ours = model.wald_test([f"age[y={k}]" for k in (1, 2, 3)])
    theirs = ref.wald_test(R, scalar=True)
    np.testing.assert_allclose(ours.statistic, theirs.statistic, rtol=1e-6)
    assert model.wald_test_terms().loc["age", "df_constraint"] == 3


def test_the_null_model_and_the_likelihood_ratio_test():
    """llnull: the thresholds alone (ordinal), the intercepts alone (multinomial), both
    the closed form sum_k n_k log(n_k / n) on the pooled rows. statsmodels' OrderedModel
    gives it too; its MNLogit's null fit stops at its default tolerance (7e-8 off the
    closed form here), so the multinomial's is checked against the closed form only."""
    from scipy import stats

    X, y, rng = _rows()
    site = _splits(X, y, rng)["heterogeneous"]
    counts = np.bincount(y)
    exact = float(counts @ np.log(counts / N))
    ordinal = FedOrderedModel().fit(X, y, clients=site)
    ref = _statsmodels_ordinal(X, y, "logit")
    assert abs(ordinal.llnull_ - exact) < 1e-9 and abs(ref.llnull - exact) < 1e-8
    assert ordinal.df_model_ == ref.df_model == 3
    np.testing.assert_allclose(ordinal.llr_, ref.llr, atol=1e-7)
    np.testing.assert_allclose(ordinal.prsquared_, ref.prsquared, atol=1e-10)
    multi = FedMNLogit().fit(X, y, clients=site)
    assert abs(multi.llnull_ - exact) < 1e-9 and multi.df_model_ == 9
    np.testing.assert_allclose(multi.llr_pvalue_, stats.chi2.sf(2 * (multi.llf_ - exact), 9),
                               rtol=1e-9)
    assert np.isnan(FedMNLogit(fit_intercept=False).fit(X, y, clients=site).llnull_)
    assert "LL-Null:" in multi.summary().info


def test_text_levels_and_their_order():
    """Text labels are sorted (statsmodels' np.unique); an ordered categorical's order
    is kept, with its names in the thresholds and the summary."""
    X, y, rng = _rows(2)
    names = np.array(["mild", "moderate", "severe", "critical"])
    grade = pd.Series(pd.Categorical(names[y], categories=list(names), ordered=True),
                      name="grade")
    site = rng.integers(0, 3, N)
    model = FedOrderedModel().fit(X, grade, clients=site)
    ref = _statsmodels_ordinal(X, grade, "logit")
    _assert_equal(model, ref.params.to_numpy(), _ordinal_bse(ref), ref.llf)
    assert model.param_names_[-3:] == ["mild/moderate", "moderate/severe", "severe/critical"]
    summary = model.summary()
    assert summary.info["Dep. Variable:"] == "grade" and "severe/critical" in summary.index
    mn = FedMNLogit().fit(X, pd.Series(names[y], name="grade"), clients=site)
    assert list(mn.levels_) == sorted(names)
    assert mn.param_names_[0] == "const[grade=mild]"
    # text without an order (as sites read it from their files): levels= gives it
    text = FedOrderedModel(levels=list(names)).fit(X, names[y], clients=site)
    np.testing.assert_allclose(text.params_, model.params_, rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="repeat a level"):
        FedOrderedModel(levels=list(names) + ["mild"]).fit(X, names[y], clients=site)


def test_a_level_no_site_holds_is_an_error():
    X, y, rng = _rows()
    names = ["a", "b", "c", "d", "e"]
    grade = pd.Series(pd.Categorical(np.array(names)[y], categories=names, ordered=True))
    with pytest.raises(ValueError, match=r"level\(s\) \['e'\] are held by no site"):
        FedOrderedModel().fit(X, grade, clients=rng.integers(0, 3, N))


def test_bad_input():
    X, y, rng = _rows()
    site = rng.integers(0, 3, N)
    with pytest.raises(ValueError, match="two levels .* use FedLogisticRegression"):
        FedOrderedModel().fit(X, (y > 1).astype(int), clients=site)
    with pytest.raises(ValueError, match="unknown link distr='cloglog'"):
        FedOrderedModel("cloglog").fit(X, y, clients=site)
    with pytest.raises(ValueError, match="1 level"):
        FedMNLogit().fit(X, np.zeros(N), clients=site)
    y_nan = y.astype(float)
    y_nan[5] = np.nan
    for model in (FedOrderedModel(), FedMNLogit()):
        with pytest.raises(ValueError, match="missing value"):
            model.fit(X, y_nan, clients=site)
    X_nan = X.copy()
    X_nan.iloc[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FedOrderedModel().fit(X_nan, y, clients=site)
    # a constant column is the thresholds' shift: not identified, said so
    with pytest.raises(ValueError, match="collinear"):
        FedOrderedModel().fit(X.assign(one=1.0), y, clients=site)
    # complete separation: no maximum, said so (not mistaken for collinear columns)
    separated = np.digitize(X["age"], [-0.5, 0.5])
    with pytest.raises(ValueError, match="no maximum here"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        FedMNLogit(max_rounds=40).fit(X[["age"]], separated, clients=site)
    before = FedOrderedModel().fit(X, y, clients=site)
    kept = before.params_.copy()
    with pytest.raises(ValueError):
        before.fit(X_nan, y, clients=site)
    np.testing.assert_array_equal(before.params_, kept)  # a failed fit changes nothing


def test_differential_privacy_is_refused_with_the_reason():
    from skfed.privacy import DifferentialPrivacy

    X, y, rng = _rows()
    for model in (FedOrderedModel(privacy=DifferentialPrivacy(epsilon=1.0)),
                  FedMNLogit(privacy=DifferentialPrivacy(epsilon=1.0))):
        with pytest.raises(ValueError, match="does not offer differential privacy: its "
                                             "Newton rounds send"):
            model.fit(X, y, clients=rng.integers(0, 3, N))


def test_secure_aggregation_gives_the_same_fit():
    """Every sum masked (the sites' key pairs in this process: the same messages and
    decoded sums as at site services): the plain fit, to the last digits."""
    pytest.importorskip("cryptography")
    from skfed.privacy import SecureAggregation

    X, y, rng = _rows()
    site = rng.integers(0, 3, N)
    for cls in (FedOrderedModel, FedMNLogit):
        plain = cls(cov_type="HC0").fit(X, y, clients=site)
        masked = cls(cov_type="HC0", privacy=SecureAggregation()).fit(X, y, clients=site)
        np.testing.assert_allclose(masked.params_, plain.params_, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(masked.bse_, plain.bse_, rtol=1e-12)
        assert masked.summary().info["Sums:"] == "masked (secure aggregation)"


def test_forest_plots_per_outcome_level():
    pytest.importorskip("matplotlib")
    from skfed.plotting import forest_table, plot_forest

    X, y, rng = _rows()
    site = rng.integers(0, 3, N)
    mn = FedMNLogit().fit(X, y, clients=site)
    for level in (1, 2, 3):
        results = mn.level_results(level)
        table = forest_table(results)
        k = level - 1
        np.testing.assert_allclose(np.log(table["estimate"]), mn.coef_[k], rtol=1e-12)
        assert list(table.index) == ["age", "dose", "male"]
        assert table.attrs["measure"] == "odds ratio"
        assert plot_forest(results) is not None
    with pytest.raises(ValueError, match="not a modelled level"):
        mn.level_results(0)
    ordinal = FedOrderedModel().fit(X, y, clients=site)
    table = forest_table(ordinal)  # the thresholds are no effects
    assert list(table.index) == ["age", "dose", "male"]
    np.testing.assert_allclose(np.log(table["estimate"]), ordinal.coef_, rtol=1e-12)


@pytest.mark.filterwarnings("ignore:.*treats the 3 sites as the clusters")
@pytest.mark.parametrize("cov_type", ["HC0", "cluster"])
def test_robust_covariances(cov_type):
    """The sandwich (HC0), and with the sites as clusters (statsmodels' CRV1 factor):
    MNLogit's equal statsmodels' fit(cov_type=...); OrderedModel's equal the sandwich of
    statsmodels' own log-likelihood, its Hessian as :func:`_ordinal_bse` and its rows'
    scores by centred differences (its default bread and forward-difference scores are
    1e-6 off)."""
    from statsmodels.tools.numdiff import approx_fprime, approx_hess3

    X, y, rng = _rows()
    site = _splits(X, y, rng)["heterogeneous"]
    kwds = {"cov_kwds": {"groups": site}} if cov_type == "cluster" else {}
    multi = FedMNLogit(cov_type=cov_type).fit(X, y, clients=site)
    ref = sm.MNLogit(y, sm.add_constant(X)).fit(method="newton", tol=1e-12, maxiter=100,
                                                disp=0, cov_type=cov_type, **kwds)
    np.testing.assert_allclose(multi.bse_, ref.bse.to_numpy().ravel(order="F"), rtol=1e-6)
    model = FedOrderedModel(cov_type=cov_type).fit(X, y, clients=site)
    fit = _statsmodels_ordinal(X, y, "logit")
    params, om = fit.params.to_numpy(), fit.model
    coarse, fine = (approx_hess3(params, om.loglike, epsilon=h) for h in (1e-3, 5e-4))
    bread = np.linalg.inv(-(4.0 * fine - coarse) / 3.0)
    scores = approx_fprime(params, om.loglikeobs, epsilon=1e-5, centered=True)
    if cov_type == "cluster":
        scores = np.vstack([scores[site == g].sum(axis=0) for g in np.unique(site)])
        factor = 3 / 2 * (N - 1) / (N - len(params))
    else:
        factor = 1.0
    expected = np.sqrt(np.diag(factor * bread @ scores.T @ scores @ bread))
    np.testing.assert_allclose(model.bse_, expected, rtol=1e-6)
    np.testing.assert_allclose(model.params_, params, atol=1e-6)
    assert model.summary().info["Covariance:"] == cov_type


def test_scikit_learn_attributes_count_the_columns_of_x():
    """n_features_in_ and feature_names_in_ are X's (the added constant is not a column of
    X); exog_names_ the design's; predict checks new rows against them."""
    X, y, rng = _rows()
    site = rng.integers(0, 3, N)
    mn = FedMNLogit().fit(X, y, clients=site)
    assert mn.n_features_in_ == X.shape[1]
    assert list(mn.feature_names_in_) == list(X.columns)
    assert mn.exog_names_ == ["const"] + list(X.columns)
    one_site = FedMNLogit().fit(X, y)  # no clients: one site, the same pooled rows
    np.testing.assert_allclose(one_site.params_, mn.params_, rtol=1e-10)
    assert not hasattr(FedOrderedModel().fit(X.to_numpy(), y), "feature_names_in_")
    with pytest.raises(ValueError, match="feature names should match"):
        mn.predict(X.iloc[:, :2])
    with pytest.raises(ValueError, match="expecting 3 features"), \
            pytest.warns(UserWarning, match="does not have valid feature names"):
        mn.predict(X.to_numpy()[:, :2])
