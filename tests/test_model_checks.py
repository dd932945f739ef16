"""Model checks equal their references on the pooled rows.

- ``wald_test(R, q)`` of the GLMs equals statsmodels' ``GLMResults.wald_test(R,
  q, scalar=True)`` (statistic, p-value, degrees of freedom; chi2, or F with
  ``use_f=True``), for matrices, lists of names and statsmodels' strings, for
  ``cov_type`` nonrobust, HC0 and cluster; of ``FedCoxPH`` the chi2 Wald test
  from lifelines' estimates and covariance.
- ``wald_test_terms()`` equals statsmodels' ``wald_test_terms(scalar=True)`` of the
  formula fit (a categorical's dummies tested jointly).
- ``skfed.stats.anova_deviance`` equals the analysis of deviance of statsmodels'
  fits: the likelihood-ratio statistic ``2 (llf_large - llf_small)`` (Poisson),
  OLS's ``compare_f_test`` (Gaussian), R's F test from statsmodels' deviances
  and scale (Gamma).
- A ``FewClustersWarning`` below ``FEW_CLUSTERS`` sites with ``cov_type="cluster"``,
  and its correction (``use_t=True``) equals statsmodels' ``use_t=True``
  (Student's t and F with ``G - 1`` degrees of freedom).
- ``FederatedGridSearchCV`` ranks an unconverged fit after converged ones and says so.
"""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.exceptions import ConvergenceWarning

from skfed import (FedGammaRegressor, FedLinearRegression, FedLogisticRegression,
                   FedPoissonRegressor)
from skfed.data import FederatedDataset
from skfed.linear_model import InferenceError
from skfed.model_selection import FederatedGridSearchCV
from skfed.stats import FewClustersWarning, anova_deviance
from skfed.stats._hypothesis import FEW_CLUSTERS, linear_hypothesis, term_groups
from skfed.survival import FedCoxPH, survival_target

sm = pytest.importorskip("statsmodels.api")
smf = pytest.importorskip("statsmodels.formula.api")
RTOL = 1e-7


def _sites(n, k=4):
    return np.repeat(np.arange(k), -(-n // k))[:n]


def _spector():
    d = sm.datasets.spector.load_pandas()
    return d.exog.astype(float), d.endog.to_numpy(float)


def _scotland():
    d = sm.datasets.scotland.load_pandas()
    return d.exog.astype(float), d.endog.to_numpy(float)


def _statsmodels(X, y, family, cov_type, site, use_t=False):
    kwds = {"groups": site} if cov_type == "cluster" else None
    return sm.GLM(y, sm.add_constant(X), family=family).fit(
        cov_type=cov_type, cov_kwds=kwds, use_t=use_t, tol=1e-13)


def _assert_same_test(ours, ref, use_f):
    assert ours.statistic == pytest.approx(float(np.squeeze(ref.statistic)), rel=RTOL)
    assert ours.pvalue == pytest.approx(float(ref.pvalue), rel=RTOL)
    if use_f:
        assert (ours.distribution, ours.df_num, ours.df_denom) == ("F", ref.df_num,
                                                                   ref.df_denom)
    else:  # statsmodels' chi2 result keeps the number of constraints in df_denom
        assert (ours.distribution, ours.df_num, ours.df_denom) == ("chi2", ref.df_denom, None)


# --- Wald tests -------------------------------------------------------------------------
GLM_CASES = {
    "binomial": (_spector, lambda: FedLogisticRegression(C=np.inf), sm.families.Binomial,
                 "GPA = 0, TUCE = PSI"),
    "gamma": (_scotland, lambda: FedGammaRegressor(alpha=0),
              lambda: sm.families.Gamma(sm.families.links.Log()),
              "COUTAX = 0, UNEMPF = MOR, 2*AGE + GDP = 0.05"),
}


@pytest.mark.parametrize("use_f", [False, True])
@pytest.mark.parametrize("cov_type", ["nonrobust", "HC0", "cluster"])
@pytest.mark.parametrize("case", sorted(GLM_CASES))
def test_wald_test_equals_statsmodels(case, cov_type, use_f):
    data, make, family, hypothesis = GLM_CASES[case]
    X, y = data()
    site = _sites(len(y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewClustersWarning)
        est = make().set_params(cov_type=cov_type).fit(X, y, clients=site)
    # use_t: statsmodels' F tests then use G - 1 (cluster) or n - p degrees of freedom
    ref = _statsmodels(X, y, family(), cov_type, site, use_t=use_f)
    R = np.random.default_rng(0).normal(size=(2, X.shape[1] + 1))
    q = np.array([0.5, -1.0])
    _assert_same_test(est.wald_test(R, q, use_f=use_f),
                      ref.wald_test((R, q), scalar=True, use_f=use_f), use_f)
    _assert_same_test(est.wald_test(hypothesis, use_f=use_f),
                      ref.wald_test(hypothesis, scalar=True, use_f=use_f), use_f)
    names = list(X.columns[:2])
    _assert_same_test(est.wald_test(names, use_f=use_f),
                      ref.wald_test(", ".join(f"{n} = 0" for n in names), scalar=True,
                                    use_f=use_f), use_f)


def test_a_single_name_is_the_z_test_squared():
    X, y = _spector()
    est = FedLogisticRegression(C=np.inf).fit(X, y, clients=_sites(len(y)))
    result = est.wald_test(["GPA"])
    k = est.param_names_.index("GPA")
    assert result.statistic == pytest.approx(est.tvalues_[k] ** 2, rel=1e-12)
    assert result.pvalue == pytest.approx(est.pvalues_[k], rel=1e-10)


def test_hypotheses_are_read_as_statsmodels_reads_them():
    names = ["intercept", "C(sex)[T.M]", "age:C(sex)[T.M]", "x1", "x10"]
    R, q = linear_hypothesis("C(sex)[T.M] = 0, age:C(sex)[T.M] = 2*x1, x1 = x10 = 1", names)
    np.testing.assert_array_equal(R, [[0, 1, 0, 0, 0], [0, 0, 1, -2, 0], [0, 0, 0, 1, -1],
                                      [0, 0, 0, 0, 1]])
    np.testing.assert_array_equal(q, [0, 0, 0, 1])
    R, q = linear_hypothesis(["x1", "intercept"], names)
    np.testing.assert_array_equal(R, [[0, 0, 0, 1, 0], [1, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="(?s)cannot read the hypothesis 'x2 = 0'.*named"):
        linear_hypothesis("x2 = 0", names)
    with pytest.raises(ValueError, match="one column per parameter"):
        linear_hypothesis(np.eye(2), names)
    with pytest.raises(ValueError, match="q is for a matrix"):
        linear_hypothesis("x1 = 0", names, q=[1.0])
    assert term_groups(["Intercept", "C(g)[T.b]", "C(g)[T.c]", "x", "x:C(g)[T.b]",
                        "bs(x, df=3)[0]", "bs(x, df=3)[1]"]) == {
        "Intercept": ["Intercept"], "C(g)": ["C(g)[T.b]", "C(g)[T.c]"], "x": ["x"],
        "x:C(g)": ["x:C(g)[T.b]"], "bs(x, df=3)": ["bs(x, df=3)[0]", "bs(x, df=3)[1]"]}


def test_dependent_constraints_are_refused():
    X, y = _spector()
    est = FedLogisticRegression(C=np.inf).fit(X, y, clients=_sites(len(y)))
    with pytest.raises(ValueError, match="not linearly independent"):
        est.wald_test("GPA = 0, 2*GPA = 0")


@pytest.mark.parametrize("use_f", [False, True])
def test_wald_test_terms_equals_statsmodels_formula_fit(use_f):
    d = sm.datasets.fair.load_pandas().data
    d = d.assign(affair=(d["affairs"] > 0).astype(float))
    formula = "affair ~ C(occupation) + rate_marriage + age"
    ref = smf.glm(formula, d, family=sm.families.Binomial()).fit(use_t=use_f, tol=1e-13)
    design = pd.DataFrame(ref.model.exog, columns=ref.model.exog_names).drop(
        columns="Intercept")
    est = FedLogisticRegression(C=np.inf, tol=1e-10).fit(design, d["affair"],
                                                         clients=_sites(len(d)))
    ours = est.wald_test_terms(use_f=use_f)
    table = ref.wald_test_terms(scalar=True).table
    assert list(ours.index) == ["intercept", "C(occupation)", "rate_marriage", "age"]
    np.testing.assert_allclose(ours["statistic"], table["statistic"], rtol=RTOL)
    np.testing.assert_allclose(ours["pvalue"], table["pvalue"], rtol=RTOL)
    np.testing.assert_array_equal(ours["df_constraint"], table["df_constraint"])
    if use_f:
        np.testing.assert_array_equal(ours["df_denom"], table["df_denom"])
    occupations = [n for n in est.param_names_ if n.startswith("C(occupation)")]
    joint = est.wald_test_terms({"occupation": occupations}, use_f=use_f)
    assert joint.loc["occupation", "statistic"] == pytest.approx(
        ours.loc["C(occupation)", "statistic"], rel=1e-12)


def test_cox_wald_test_equals_the_chi2_from_lifelines_covariance():
    lifelines = pytest.importorskip("lifelines")
    df = lifelines.datasets.load_rossi()
    X = df.drop(columns=["week", "arrest"]).astype(float)
    cox = FedCoxPH(tol=1e-12).fit(X, survival_target(df["arrest"], df["week"]),
                                  clients=_sites(len(df)))
    cph = lifelines.CoxPHFitter().fit(df, "week", "arrest", fit_options={
        "precision": 1e-20, "r_precision": 1e-20, "max_steps": 500})
    b, V = cph.params_.loc[X.columns].to_numpy(), cph.variance_matrix_.loc[X.columns,
                                                                            X.columns].to_numpy()
    R = np.zeros((3, X.shape[1]))
    R[0, 0], R[1, 1], R[1, 2], R[2, 6] = 1, 1, -1, 1  # fin = 0, age = race, prio = 0.05
    q = np.array([0.0, 0.0, 0.05])
    expected = (R @ b - q) @ np.linalg.solve(R @ V @ R.T, R @ b - q)
    result = cox.wald_test("fin = 0, age = race, prio = 0.05")
    assert result.statistic == pytest.approx(expected, rel=RTOL)
    assert result.pvalue == pytest.approx(stats.chi2.sf(expected, 3), rel=RTOL)
    assert (result.df_num, result.distribution) == (3, "chi2")
    with pytest.raises(ValueError, match="use_t \\(and use_f\\) is for cov_type='cluster'"):
        cox.wald_test(["fin"], use_f=True)


# --- analysis of deviance -----------------------------------------------------------------
def test_anova_deviance_poisson_is_the_likelihood_ratio_test():
    d = sm.datasets.cpunish.load_pandas()
    X = d.exog.assign(VC100k96=np.log(d.exog["VC100k96"])).astype(float)
    y, site = d.endog.to_numpy(float), _sites(len(d.endog))
    small, large = X.iloc[:, :3], X
    fits = [FedPoissonRegressor(alpha=0).fit(Z, y, clients=site) for Z in (small, large)]
    refs = [sm.GLM(y, sm.add_constant(Z), family=sm.families.Poisson()).fit(tol=1e-13)
            for Z in (small, large)]
    table = anova_deviance(*fits)
    lr = 2 * (refs[1].llf - refs[0].llf)
    assert table.attrs["test"] == "chisq" and table.attrs["scale"] == 1.0
    np.testing.assert_allclose(table["deviance"], [r.deviance for r in refs], rtol=RTOL)
    np.testing.assert_array_equal(table["df_resid"], [r.df_resid for r in refs])
    assert table.loc[2, "df_diff"] == X.shape[1] - 3
    assert table.loc[2, "chi2"] == pytest.approx(lr, rel=RTOL)
    assert table.loc[2, "Pr(>Chi)"] == pytest.approx(stats.chi2.sf(lr, X.shape[1] - 3),
                                                     rel=RTOL)
    assert np.isnan(table.loc[1, "chi2"])
    with pytest.raises(ValueError, match="scale is 1"):
        anova_deviance(*fits, test="F")


def test_anova_deviance_gaussian_is_the_extra_sum_of_squares_f_test():
    X, y = _scotland()
    site = _sites(len(y))
    small, large = X.iloc[:, :4], X
    fits = [FedLinearRegression().fit(Z, y, clients=site) for Z in (small, large)]
    F, p, df = sm.OLS(y, sm.add_constant(large)).fit().compare_f_test(
        sm.OLS(y, sm.add_constant(small)).fit())
    table = anova_deviance(*fits)
    assert table.attrs["test"] == "F"
    assert table.loc[2, "F"] == pytest.approx(F, rel=RTOL)
    assert table.loc[2, "Pr(>F)"] == pytest.approx(p, rel=RTOL)
    assert table.loc[2, "df_diff"] == df


def test_anova_deviance_gamma_three_models_as_r():
    # R's anova.glmlist: every drop is scaled by the largest model's Pearson dispersion,
    # its F compared with F(df_diff, df_resid of the largest model)
    X, y = _scotland()
    site = _sites(len(y))
    designs = [X.iloc[:, :2], X.iloc[:, :5], X]
    fits = [FedGammaRegressor(alpha=0).fit(Z, y, clients=site) for Z in designs]
    refs = [sm.GLM(y, sm.add_constant(Z), family=sm.families.Gamma(
        sm.families.links.Log())).fit(tol=1e-13) for Z in designs]
    scale, df_resid = refs[-1].scale, refs[-1].df_resid
    for test in ("F", "chisq"):
        table = anova_deviance(*fits, test=test)
        for k in (2, 3):
            drop = refs[k - 2].deviance - refs[k - 1].deviance
            df = refs[k - 2].df_resid - refs[k - 1].df_resid
            assert table.loc[k, "deviance_diff"] == pytest.approx(drop, rel=RTOL)
            if test == "F":
                assert table.loc[k, "F"] == pytest.approx(drop / df / scale, rel=RTOL)
                assert table.loc[k, "Pr(>F)"] == pytest.approx(
                    stats.f.sf(drop / df / scale, df, df_resid), rel=RTOL)
            else:
                assert table.loc[k, "Pr(>Chi)"] == pytest.approx(
                    stats.chi2.sf(drop / scale, df), rel=RTOL)


def test_anova_deviance_refuses_models_that_are_not_nested():
    X, y = _scotland()
    site = _sites(len(y))
    a = FedGammaRegressor(alpha=0).fit(X.iloc[:, :3], y, clients=site)
    b = FedGammaRegressor(alpha=0).fit(X.iloc[:, 2:], y, clients=site)
    with pytest.raises(ValueError, match="not nested"):
        anova_deviance(a, b)
    with pytest.raises(ValueError, match="smallest to the largest"):
        anova_deviance(FedGammaRegressor(alpha=0).fit(X, y, clients=site), a)
    with pytest.raises(ValueError, match="different families"):
        anova_deviance(a, FedLinearRegression().fit(X, y, clients=site))
    with pytest.raises(InferenceError, match="penaliz"):
        anova_deviance(a, FedGammaRegressor(alpha=1.0).fit(X, y, clients=site))
    with pytest.raises(TypeError, match="not a skfed GLM"):
        anova_deviance(a, FedCoxPH())
    with pytest.raises(ValueError, match="different rows"):
        anova_deviance(a, FedGammaRegressor(alpha=0).fit(X.iloc[:20], y[:20],
                                                         clients=site[:20]))


# --- few clusters ---------------------------------------------------------------------------
def test_few_sites_as_clusters_warn_and_name_the_correction():
    X, y = _scotland()
    with pytest.warns(FewClustersWarning, match="4 sites.*Cameron & Miller.*use_t=True"):
        FedLinearRegression(cov_type="cluster").fit(X, y, clients=_sites(len(y)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FewClustersWarning)
        FedLinearRegression(cov_type="HC0").fit(X, y, clients=_sites(len(y)))
        FedLinearRegression(cov_type="cluster").fit(X, y, clients=np.arange(len(y)) %
                                                    FEW_CLUSTERS)
    with pytest.warns(FewClustersWarning, match=f"{FEW_CLUSTERS - 1} sites"):
        FedLinearRegression(cov_type="cluster").fit(X, y, clients=np.arange(len(y)) %
                                                    (FEW_CLUSTERS - 1))


def test_the_small_sample_correction_equals_statsmodels_use_t():
    X, y = _spector()
    site = _sites(len(y))
    with pytest.warns(FewClustersWarning):
        est = FedLogisticRegression(C=np.inf, cov_type="cluster").fit(X, y, clients=site)
    ref = _statsmodels(X, y, sm.families.Binomial(), "cluster", site, use_t=True)
    assert ref.df_resid_inference == 3
    np.testing.assert_allclose(est.conf_int(use_t=True), ref.conf_int(), rtol=RTOL)
    table = est.summary(use_t=True)
    np.testing.assert_allclose(table["P>|t|"], ref.pvalues, rtol=RTOL)
    np.testing.assert_allclose(table["t"], ref.tvalues, rtol=RTOL)
    _assert_same_test(est.wald_test("GPA = 0, TUCE = PSI", use_f=True),
                      ref.wald_test("GPA = 0, TUCE = PSI", scalar=True), use_f=True)


def test_cox_cluster_warns_and_offers_t_with_sites_minus_one():
    lifelines = pytest.importorskip("lifelines")
    df = lifelines.datasets.load_rossi()
    X = df.drop(columns=["week", "arrest"]).astype(float)
    with pytest.warns(FewClustersWarning, match="no small-sample factor"):
        cox = FedCoxPH(cov_type="cluster").fit(X, survival_target(df["arrest"], df["week"]),
                                               clients=_sites(len(df)))
    q = stats.t.ppf(0.975, 3)
    np.testing.assert_allclose(cox.conf_int(use_t=True),
                               np.column_stack([cox.coef_ - q * cox.bse_,
                                                cox.coef_ + q * cox.bse_]), rtol=1e-12)
    np.testing.assert_allclose(cox.summary(use_t=True)["p"],
                               2 * stats.t.sf(np.abs(cox.tvalues_), 3), rtol=1e-12)


# --- the federated search and unconverged fits ------------------------------------------------
def _noisy_regression():
    # few rows, many noise columns: a fit stopped early (shrunk toward zero) scores
    # better at a held-out site than the exact least-squares fit
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 30))
    y = X[:, 0] + rng.normal(scale=2.0, size=120)
    return FederatedDataset.from_arrays(X, y, np.arange(120) % 4)


def test_search_ranks_an_unconverged_fit_after_the_converged_ones():
    data = _noisy_regression()
    with pytest.warns(ConvergenceWarning, match=r"1 of 2 candidates.*'fedavg'.*4 of 4 "
                                                      r"folds.*ranked after"):
        search = FederatedGridSearchCV(FedLinearRegression(max_rounds=5),
                                       {"solver": ["fedavg", "newton"]}).fit(data)
    results = search.cv_results_
    fedavg, newton = 0, 1
    # the unconverged fit has the better held-out score: ranking by score would pick it
    assert results["mean_test_score"][fedavg] > results["mean_test_score"][newton]
    assert list(results["converged"]) == [False, True]
    assert not results["split0_converged"][fedavg] and results["split0_converged"][newton]
    assert list(results["rank_test_score"]) == [2, 1]
    assert search.best_params_ == {"solver": "newton"}
    assert search.best_score_ == results["mean_test_score"][newton]


def test_search_names_the_chosen_candidate_when_none_converged():
    data = _noisy_regression()
    with pytest.warns(ConvergenceWarning) as record:
        search = FederatedGridSearchCV(FedLinearRegression(solver="fedavg"),
                                       {"max_rounds": [2, 5]}, refit=False).fit(data)
    messages = [str(w.message) for w in record]
    assert any("no candidate converged" in m and str(search.best_params_) in m
               for m in messages)
    assert not search.cv_results_["converged"].any()
    # among unconverged candidates, by score
    best = np.argmax(search.cv_results_["mean_test_score"])
    assert search.best_index_ == best
