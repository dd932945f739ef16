"""FedMixedLM equals statsmodels' MixedLM on the pooled rows (and lme4's published numbers).

References: statsmodels' bundled ``dietox`` data (pigs nested in three sites,
the ``Cu`` levels) with lme4's numbers from statsmodels' ``test_lme.py``, and
simulated heterogeneous sites. statsmodels can stop early on flat
likelihoods (docs/mixed-models.md), so a random-slope reference is
statsmodels' conjugate-gradient fit run to ``gtol=1e-9``, and the federated
log-likelihood must be at least the reference's.
"""

import os
import warnings

import numpy as np
import pandas as pd
import pytest

sm_mixed = pytest.importorskip("statsmodels.regression.mixed_linear_model")
import statsmodels  # noqa: E402
import statsmodels.formula.api as smf  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402

from skfed.data import FederatedDataset, SiteData, SiteError  # noqa: E402
from skfed.federation.session import FederationSession  # noqa: E402
from skfed.mixed import (BoundaryFitWarning, FedMixedLM, FewGroupsWarning,  # noqa: E402
                         compare_two_stage, two_stage)
from skfed.mixed import _likelihood as lik  # noqa: E402
from skfed.mixed._linear import _collect_sums  # noqa: E402
from skfed.mixed._site import site_design  # noqa: E402
from skfed.stats import meta_analysis  # noqa: E402


@pytest.fixture(scope="module")
def dietox():
    path = os.path.join(os.path.dirname(statsmodels.__file__), "regression", "tests",
                        "results", "dietox.csv")
    return pd.read_csv(path, float_precision="round_trip")[["Weight", "Time", "Pig", "Cu"]]


def _reference(data, formula, groups, re_formula, reml, default=True):
    """statsmodels on the pooled rows: ``(default fit, tight fit)``, the tight one its
    conjugate-gradient fit run to gtol=1e-9 (the default stops at gtol=1e-5, which
    leaves ~1e-6 relative error in a variance). ``default=False``: the tight fit twice
    (statsmodels' default for random slopes tries three optimisers, slowly)."""
    model = smf.mixedlm(formula, data, groups=data[groups], re_formula=re_formula)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tight = model.fit(reml=reml, method="cg", gtol=1e-9)
        return (model.fit(reml=reml) if default else tight), tight


def _fit(data, features, groups, clients, re_columns=None, reml=True, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewGroupsWarning)
        return FedMixedLM(re_columns, reml=reml, **kw).fit(
            data[features + ([groups] if groups else [])], data["y"] if "y" in data
            else data["Weight"], clients=data[clients], groups=groups)


def _assert_same_fit(est, refs, var_rtol=1e-6):
    res, ref = est.results_, refs[1]
    assert res.llf >= max(r.llf for r in refs) - 1e-8
    assert res.llf == pytest.approx(ref.llf, abs=1e-6)
    np.testing.assert_allclose(res.fe_params, ref.fe_params, rtol=1e-6)
    np.testing.assert_allclose(res.bse_fe, ref.bse_fe, rtol=1e-6)
    np.testing.assert_allclose(res.cov_re, ref.cov_re, rtol=var_rtol, atol=1e-9)
    np.testing.assert_allclose(res.bse_re, ref.bse_re, rtol=var_rtol)
    assert res.scale == pytest.approx(ref.scale, rel=var_rtol)
    assert list(res.params.index) == list(ref.params.index)
    np.testing.assert_allclose(res.aic, ref.aic, rtol=1e-9, equal_nan=True)
    np.testing.assert_allclose(res.bic, ref.bic, rtol=1e-9, equal_nan=True)
    groups = list(ref.random_effects)
    np.testing.assert_allclose([res.random_effects[g] for g in groups],
                               [ref.random_effects[g] for g in groups],
                               rtol=var_rtol, atol=1e-6 * np.abs(ref.cov_re.values).max())


# -- the likelihood from the sums ----------------------------------------------
@pytest.mark.parametrize("re_formula", [None, "1 + Time"])
@pytest.mark.parametrize("reml", [True, False])
def test_loglike_score_and_hessian_from_sums_equal_statsmodels(dietox, re_formula, reml):
    data = FederatedDataset.from_arrays(dietox[["Time", "Pig"]], dietox["Weight"].to_numpy(),
                                        clients=dietox["Cu"])
    design = {"groups": "Pig", "re_columns": [0] if re_formula else [], "fit_intercept": True,
              "re_intercept": True, "min_group_rows": 2}
    sums, _, _ = _collect_sums(FederationSession.for_dataset(data), data, design)
    model = smf.mixedlm("Weight ~ Time", dietox, groups=dietox["Pig"], re_formula=re_formula)
    model.reml, model.cov_pen, model.fe_pen, model._freepat = reml, None, None, None
    q = sums.k_re
    rng = np.random.default_rng(0)
    for _ in range(3):
        L = np.tril(rng.normal(size=(q, q)))
        L[np.diag_indices(q)] = rng.uniform(0.3, 3.0, size=q)
        theta = L[np.tril_indices(q)]
        fit = lik.gls(L, sums)
        assert lik.loglike(fit, sums, reml) == pytest.approx(model.loglike(theta), rel=1e-11)
        _, grad = lik.objective(theta, sums, reml)
        np.testing.assert_allclose(-grad * sums.n_obs, model.score(theta), rtol=1e-7)
        params = sm_mixed.MixedLMParams.from_components(fit.fe_params, cov_re=fit.psi)
        np.testing.assert_allclose(lik.hessian(fit, sums, reml), model.hessian(params)[0],
                                   rtol=1e-9, atol=1e-9 * np.abs(model.hessian(params)[0]).max())


# -- dietox: pigs nested in three sites ------------------------------------------
@pytest.mark.parametrize("reml", [True, False])
def test_dietox_random_intercept_equals_statsmodels(dietox, reml):
    refs = _reference(dietox, "Weight ~ Time", "Pig", None, reml)
    est = _fit(dietox, ["Time"], "Pig", "Cu", reml=reml)
    _assert_same_fit(est, refs)
    assert str(est.summary()) == str(refs[0].summary())
    assert est.converged_ and est.n_groups_ == 72 and est.n_clients_ == 3


def test_dietox_matches_lme4(dietox):
    # lme4's REML random-intercept fit, as statsmodels' test_lme.py records it
    est = _fit(dietox, ["Time"], "Pig", "Cu")
    np.testing.assert_allclose(est.fe_params_, [15.723523, 6.942505], rtol=1e-6)
    np.testing.assert_allclose(est.results_.bse_fe, [0.78805374, 0.03338727], rtol=1e-6)
    assert est.scale_ == pytest.approx(11.36692, rel=1e-6)
    assert est.cov_re_.iloc[0, 0] == pytest.approx(40.39395, rel=1e-6)
    assert est.llf_ == pytest.approx(-2404.775, abs=1e-3)


@pytest.mark.parametrize("reml", [True, False])
def test_dietox_random_slope_equals_tight_statsmodels(dietox, reml):
    refs = _reference(dietox, "Weight ~ Time", "Pig", "1 + Time", reml, default=False)
    est = _fit(dietox, ["Time"], "Pig", "Cu", re_columns=["Time"], reml=reml)
    _assert_same_fit(est, refs, var_rtol=1e-5)
    if reml:  # lme4 (statsmodels' test_lme.py): the random-intercept variance
        assert est.cov_re_.iloc[0, 0] == pytest.approx(19.4934552, rel=1e-6)
    assert list(est.cov_re_.index) == ["Group", "Time"]


def test_two_exchanges_whatever_the_optimiser_does(dietox):
    est = _fit(dietox, ["Time"], "Pig", "Cu", re_columns=["Time"])
    ledger = est.ledger_
    assert ledger["setup"]["rounds"] == 2 and ledger["setup"]["bytes"] > 0
    assert all(v["rounds"] == 0 for k, v in ledger.items() if k != "setup")
    assert est.n_iter_ > 2


# -- heterogeneous simulated sites ---------------------------------------------------
def _simulated(seed, n_sites=4, slopes=True):
    """Patients nested in sites of very different sizes, covariate means and spreads;
    a random intercept and (optionally) slope per patient."""
    rng = np.random.default_rng(seed)
    frames = []
    for s in range(n_sites):
        n_groups = [25, 6, 14, 9, 11, 7][s]
        for g in range(n_groups):
            m = rng.integers(3, 12)
            x = rng.normal(loc=s - 1.5, scale=0.5 + s, size=m)
            z = rng.binomial(1, 0.2 + 0.15 * s, size=m)
            u = rng.multivariate_normal([0, 0], [[2.0, 0.3], [0.3, 0.4]]) * [1, slopes]
            y = 2 + 0.8 * x - 0.5 * z + u[0] + u[1] * x + rng.normal(size=m)
            frames.append(pd.DataFrame({"y": y, "x": x, "z": z, "site": f"s{s}",
                                        "patient": f"s{s}p{g}"}))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("slopes", [False, True])
def test_heterogeneous_sites_equal_statsmodels(slopes):
    data = _simulated(1, slopes=slopes)
    re_formula = "1 + x" if slopes else None
    refs = _reference(data, "y ~ x + z", "patient", re_formula, True, default=not slopes)
    est = _fit(data, ["x", "z"], "patient", "site", re_columns=["x"] if slopes else None)
    _assert_same_fit(est, refs, var_rtol=1e-5 if slopes else 1e-6)
    fitted = est.predict(data[["x", "z"]], groups=data["patient"])
    np.testing.assert_allclose(fitted, refs[1].fittedvalues, rtol=1e-6, atol=1e-6)


def test_sites_as_groups_equal_statsmodels():
    data = _simulated(2, n_sites=6, slopes=False)
    refs = _reference(data, "y ~ x + z", "site", None, True)
    est = _fit(data, ["x", "z"], None, "site")
    _assert_same_fit(est, refs)
    assert est.groups_ == [f"s{s}" for s in range(6)]


def test_federated_dataset_gives_the_same_fit():
    data = _simulated(3)
    arrays = _fit(data, ["x", "z"], "patient", "site", re_columns=["x"])
    dataset = FederatedDataset.from_arrays(data[["x", "z", "patient"]], data["y"].to_numpy(),
                                           clients=data["site"])
    federated = FedMixedLM(["x"]).fit(dataset, groups="patient")
    assert federated.llf_ == arrays.llf_
    np.testing.assert_array_equal(federated.fe_params_, arrays.fe_params_)
    with_array = FedMixedLM(["x"]).fit(data[["x", "z"]], data["y"], clients=data["site"],
                                       groups=data["patient"].to_numpy())
    assert with_array.llf_ == arrays.llf_


# -- two stages beside one -------------------------------------------------------------
def test_two_stage_pools_each_sites_least_squares():
    import statsmodels.api as sm

    data = _simulated(4, n_sites=6)
    results, ledger = two_stage(data[["x", "z"]], data["y"], clients=data["site"])
    fits = [sm.OLS(part["y"], sm.add_constant(part[["x", "z"]])).fit()
            for _, part in data.groupby("site")]
    for j, name in enumerate(["Intercept", "x", "z"]):
        expected = meta_analysis([f.params.iloc[j] for f in fits],
                                 [f.bse.iloc[j] ** 2 for f in fits])
        assert results[name].mean_effect_re == pytest.approx(expected.mean_effect_re,
                                                             rel=1e-10)
        assert results[name].tau2 == pytest.approx(expected.tau2, rel=1e-8, abs=1e-14)
    assert ledger["analysis"]["rounds"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundaryFitWarning)  # no slope variance in six sites
        warnings.simplefilter("ignore", ConvergenceWarning)
        comparison = compare_two_stage(data[["x", "z"]], data["y"], clients=data["site"],
                                       re_columns=["x"])
    table = comparison.table
    assert list(table.index) == ["Intercept", "x", "z"]
    np.testing.assert_allclose(table["two_stage"], [results[n].mean_effect_re
                                                    for n in table.index])
    np.testing.assert_allclose(table["one_stage"], comparison.one_stage.fe_params_)


# -- warnings a statistician expects ------------------------------------------------------
def test_few_sites_warn_and_boundary_fit_warns():
    data = _simulated(5, n_sites=3, slopes=False)
    with pytest.warns(FewGroupsWarning, match="only 3 sites"):
        FedMixedLM().fit(data[["x", "z"]], data["y"], clients=data["site"])
    rng = np.random.default_rng(0)
    flat = pd.DataFrame({"x": rng.normal(size=300), "g": np.repeat(np.arange(30), 10)})
    noise = rng.normal(size=300)
    noise -= pd.Series(noise).groupby(flat["g"]).transform("mean").to_numpy()
    y = 1 + flat["x"] + noise  # every group's mean residual is zero: no group effect
    model = smf.mixedlm("y ~ x", flat.assign(y=y), groups=flat["g"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = model.fit()
    with pytest.warns(BoundaryFitWarning, match="boundary"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # no standard error at zero
        est = FedMixedLM().fit(flat, y, clients=flat["g"] // 10, groups="g")
    assert est.results_.llf >= ref.llf - 1e-8
    assert est.cov_re_.iloc[0, 0] < 1e-6


def test_non_convergence_warns_with_the_reason(dietox):
    with pytest.warns(ConvergenceWarning, match=r"did not converge.*\|gradient\|"), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Hessian at the estimate")
        est = FedMixedLM(["Time"], max_iter=1).fit(dietox[["Time", "Pig"]], dietox["Weight"],
                                                   clients=dietox["Cu"], groups="Pig")
    assert not est.converged_ and not est.results_.converged


# -- bad input --------------------------------------------------------------------------
def _small():
    return _simulated(6, n_sites=5, slopes=False)


def test_group_at_two_sites_is_refused_naming_both():
    data = _small()
    data.loc[data.index[-2:], "patient"] = "s0p0"  # two rows of s0's patient at s4
    with pytest.raises(ValueError, match=r"group 's0p0' is at two sites, 's0' and 's4'"):
        FedMixedLM().fit(data[["x", "z", "patient"]], data["y"], clients=data["site"],
                         groups="patient")


@pytest.mark.parametrize("column, match", [
    ("x", r"site 's\d': column 'x' contains NaN"),
    ("y", r"site 's\d': the target contains NaN"),
    ("patient", r"site 's\d': the grouping column 'patient' has 1 missing"),
])
def test_missing_values_are_refused_naming_the_site(column, match):
    data = _small()
    data[column] = data[column].astype(object) if column == "patient" else data[column]
    data.loc[7, column] = np.nan if column != "patient" else None
    with pytest.raises(SiteError, match=match):
        FedMixedLM().fit(data[["x", "z", "patient"]], data["y"], clients=data["site"],
                         groups="patient")


def test_one_row_group_singular_design_and_lengths_are_refused():
    data = _small()
    data.loc[3, "patient"] = "alone"
    with pytest.raises(SiteError, match="group 'alone' has 1 row"):
        FedMixedLM().fit(data[["x", "patient"]], data["y"], clients=data["site"],
                         groups="patient")
    data = _small().assign(x2=lambda d: 2 * d["x"])
    with pytest.raises(ValueError, match="singular fixed-effects design: the column 'x2'"):
        FedMixedLM().fit(data[["x", "x2"]], data["y"], clients=data["site"])
    with pytest.raises(ValueError, match="groups='ward' is not a column of X"):
        FedMixedLM().fit(data[["x"]], data["y"], clients=data["site"], groups="ward")
    with pytest.raises(ValueError, match="groups has 3 entries"):
        FedMixedLM().fit(data[["x"]], data["y"], clients=data["site"], groups=[1, 2, 3])
    with pytest.raises(ValueError, match="y has 5 entries"):
        FedMixedLM().fit(data[["x"]], data["y"][:5], clients=data["site"])
    with pytest.raises(ValueError, match="re_columns: 'w' is not a feature"):
        FedMixedLM(["w"]).fit(data[["x"]], data["y"], clients=data["site"])


def test_empty_site_and_weights_are_refused():
    design = {"groups": None, "re_columns": [], "fit_intercept": True, "re_intercept": True,
              "min_group_rows": 2}
    with pytest.raises(SiteError, match="site 'a': no rows"):
        site_design(SiteData("a", np.zeros((0, 2)), np.zeros(0)), design)
    with pytest.raises(SiteError, match="sample weights"):
        site_design(SiteData("a", np.ones((4, 2)), np.ones(4), np.ones(4)), design)


def test_a_failed_fit_leaves_the_model_as_it_was(dietox):
    est = _fit(dietox, ["Time"], "Pig", "Cu")
    before = est.fe_params_.copy()
    with pytest.raises(ValueError):
        est.fit(dietox[["Time"]], dietox["Weight"], clients=dietox["Cu"], groups=[0, 1])
    pd.testing.assert_series_equal(est.fe_params_, before)
