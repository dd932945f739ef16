"""Variance components in FedMixedLM: clinics nested in hospitals (statsmodels'
``vc_formula``, lme4's ``(1 | hospital/clinic)``), crossed components within a
hospital, the ICC per level and the boundary-corrected likelihood-ratio test,
against statsmodels' ``MixedLM`` on the pooled rows."""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

smf = pytest.importorskip("statsmodels.formula.api")

import skfed.formula as sf  # noqa: E402
from skfed.data import SiteError  # noqa: E402
from skfed.mixed import BoundaryFitWarning, FedMixedLM, lrt_variance  # noqa: E402

CLINIC = {"clinic": "0 + C(clinic)"}
CROSSED = {"clinic": "0 + C(clinic)", "ward": "0 + C(ward)"}


@pytest.fixture(scope="module")
def hospitals():
    """Hospitals (three sites) with 2-4 clinics each, and two wards crossed with them."""
    rng = np.random.default_rng(1)
    frames = []
    for h in range(12):
        u_h = rng.normal()
        for c in range(rng.integers(2, 5)):
            n = rng.integers(6, 15)
            x = rng.normal(size=n)
            ward = rng.integers(0, 2, size=n)
            y = (2 + 0.5 * x + u_h + 0.7 * rng.normal() + 0.5 * rng.normal() * ward
                 + rng.normal(size=n))
            frames.append(pd.DataFrame({"hospital": f"h{h}", "clinic": f"c{c}", "x": x,
                                        "score": y, "site": f"s{h % 3}",
                                        "ward": np.where(ward, "w1", "w0")}))
    return pd.concat(frames, ignore_index=True)


def _statsmodels(data, vc, re_formula, reml, **fit):
    model = smf.mixedlm("score ~ x", data, groups="hospital", re_formula=re_formula,
                        vc_formula=vc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = model.fit(reml=reml, **fit)
    gradient = np.max(np.abs(model.score(result.params_object, profile_fe=False)))
    return result, gradient


def _bse_at(model, res):
    """statsmodels' standard errors at skfed's estimate (its Hessian there)."""
    from statsmodels.regression.mixed_linear_model import MixedLMParams

    point = MixedLMParams.from_components(res.fe_params.to_numpy(),
                                          cov_re=res.cov_re_unscaled.to_numpy(),
                                          vcomp=res.vcomp.to_numpy() / res.scale)
    return np.sqrt(np.diag(np.linalg.inv(-model.hessian(point)[0])))


def _skfed(data, vc, intercept, reml):
    columns = ["x", "hospital"] + [f[6:-1] for f in vc.values()]
    return FedMixedLM(vc_formula=vc, re_intercept=intercept, reml=reml).fit(
        data[columns], data["score"], clients=data["site"], groups="hospital")


@pytest.mark.parametrize("reml", [True, False])
@pytest.mark.parametrize("re_formula", ["1", None])
def test_nested_components_equal_statsmodels(hospitals, re_formula, reml):
    tight, gradient = _statsmodels(hospitals, CLINIC, re_formula, reml, method="cg",
                                   gtol=1e-9)
    default, _ = _statsmodels(hospitals, CLINIC, re_formula, reml)
    assert gradient < 1e-5  # statsmodels (nearly) converged
    res = _skfed(hospitals, CLINIC, re_formula is not None, reml).results_
    assert list(res.params.index) == list(tight.params.index)
    np.testing.assert_allclose(res.params, tight.params, rtol=1e-6)
    # statsmodels stops at |gradient| ~ 4e-6: its SE of a variance is then 1e-6 off;
    # at the same point its Hessian gives skfed's SEs to 1e-9
    np.testing.assert_allclose(res.bse, tight.bse, rtol=1e-5)
    np.testing.assert_allclose(res.bse, _bse_at(tight.model, res), rtol=1e-9)
    np.testing.assert_allclose(res.vcomp, tight.vcomp, rtol=1e-6)
    np.testing.assert_allclose(res.cov_re, tight.cov_re, rtol=1e-6)
    assert res.scale == pytest.approx(tight.scale, rel=1e-6)
    assert res.llf == pytest.approx(tight.llf, abs=1e-6)
    assert res.llf >= default.llf - 1e-9
    np.testing.assert_allclose(res.aic, tight.aic, rtol=1e-9, equal_nan=True)
    # the predicted effects: each clinic's (lme4's hospital:clinic) and each hospital's
    assert len(res.vc_effects) == hospitals.groupby(["hospital", "clinic"]).ngroups
    for (h, component, level), value in res.vc_effects.items():
        name = f"{component}[C({component})[{level}]]"
        assert value == pytest.approx(tight.random_effects[h][name], abs=1e-6)
    if re_formula:
        for h, effect in res.random_effects.items():
            assert effect.iloc[0] == pytest.approx(tight.random_effects[h].iloc[0], abs=1e-6)


@pytest.mark.parametrize("reml", [True, False])
def test_crossed_components_within_hospitals(hospitals, reml):
    tight, gradient = _statsmodels(hospitals, CROSSED, "1", reml, method="cg", gtol=1e-9)
    est = _skfed(hospitals, CROSSED, True, reml)
    res = est.results_
    assert est.converged_
    assert list(res.params.index) == ["Intercept", "x", "hospital Var", "clinic Var",
                                      "ward Var"]
    assert res.llf >= tight.llf - 1e-9  # never below statsmodels
    np.testing.assert_allclose(res.bse, _bse_at(tight.model, res), rtol=1e-9)
    if gradient < 1e-5:
        np.testing.assert_allclose(res.params, tight.params, rtol=1e-6)
        np.testing.assert_allclose(res.bse, tight.bse, rtol=1e-5)
        # the fitted values: the hospital's, the clinic's and the ward's effects added
        fitted = est.predict(hospitals[["x", "hospital", "clinic", "ward"]])
        np.testing.assert_allclose(fitted, tight.fittedvalues, atol=1e-6)
        np.testing.assert_allclose(est.predict(hospitals[["x"]]), tight.predict(hospitals),
                                   atol=1e-6)
    else:  # statsmodels stopped early (REML here): skfed's optimum is higher
        assert res.llf > tight.llf


def test_formula_bar_term_equals_vc_formula_and_statsmodels(hospitals):
    nested = sf.mixedlm("score ~ x + (1 | hospital/clinic)", hospitals, clients="site")
    explicit = sf.mixedlm("score ~ x", hospitals, groups="hospital", re_formula="1",
                          vc_formula=CLINIC, clients="site")
    tight, _ = _statsmodels(hospitals, CLINIC, "1", True, method="cg", gtol=1e-9)
    np.testing.assert_allclose(nested.params, explicit.params, rtol=1e-12)
    np.testing.assert_allclose(nested.params, tight.params, rtol=1e-6)
    np.testing.assert_allclose(nested.bse, _bse_at(tight.model, nested), rtol=1e-9)
    # statsmodels' vc_formula alone: the clinics' components, no hospital intercept
    alone = sf.mixedlm("score ~ x", hospitals, groups="hospital", vc_formula=CLINIC,
                       clients="site")
    ref, _ = _statsmodels(hospitals, CLINIC, None, True, method="cg", gtol=1e-9)
    assert list(alone.params.index) == list(ref.params.index) == ["Intercept", "x",
                                                                  "clinic Var"]
    np.testing.assert_allclose(alone.params, ref.params, rtol=1e-6)


def test_summary_names_the_response_and_shows_each_levels_icc(hospitals):
    res = sf.mixedlm("score ~ x + (1 | hospital/clinic)", hospitals, clients="site")
    text = " ".join(str(res.summary()).split())
    assert "Dependent Variable: score" in text and "clinic Var" in text
    table = res.variance_components()
    v_h, v_c, s2 = res.cov_re.iloc[0, 0], res.vcomp["clinic"], res.scale
    assert list(table.index) == ["hospital", "clinic", "Residual"]
    np.testing.assert_allclose(table["Variance"], [v_h, v_c, s2], rtol=1e-12)
    total = v_h + v_c + s2
    np.testing.assert_allclose(res.icc(), [v_h / total, (v_h + v_c) / total], rtol=1e-12)
    assert f"ICC hospital: {v_h / total:.4f}" in text


def test_likelihood_ratio_test_of_a_component_is_chi_bar_square(hospitals):
    full = sf.mixedlm("score ~ x + (1 | hospital/clinic)", hospitals, clients="site")
    reduced = sf.mixedlm("score ~ x + (1 | hospital)", hospitals, clients="site")
    ref_full, _ = _statsmodels(hospitals, CLINIC, "1", True, method="cg", gtol=1e-9)
    ref_reduced, _ = _statsmodels(hospitals, None, "1", True, method="cg", gtol=1e-9)
    test = lrt_variance(full, reduced)
    statistic = 2 * (ref_full.llf - ref_reduced.llf)
    assert test.dropped == ("clinic Var",) and test.df == 1
    assert test.statistic == pytest.approx(statistic, abs=1e-5)
    assert test.pvalue == pytest.approx(0.5 * stats.chi2.sf(statistic, 1), rel=1e-4)
    assert test.pvalue_naive == pytest.approx(2 * test.pvalue, rel=1e-12)
    assert "chi-bar-square" in str(test)
    ml = sf.mixedlm("score ~ x + (1 | hospital)", hospitals, clients="site", reml=False)
    with pytest.raises(ValueError, match="same method"):
        lrt_variance(full, ml)
    with pytest.raises(ValueError, match="drops no variance"):
        lrt_variance(full, full)


def test_bad_components_are_refused_naming_the_problem(hospitals):
    with pytest.raises(ValueError, match="0 \\+ C\\(column\\)"):
        FedMixedLM(vc_formula={"clinic": "1 + x"}).fit(
            hospitals[["x", "hospital"]], hospitals["score"], clients=hospitals["site"],
            groups="hospital")
    with pytest.raises(ValueError, match="needs groups"):
        FedMixedLM(vc_formula=CLINIC).fit(hospitals[["x", "clinic"]], hospitals["score"],
                                          clients=hospitals["site"])
    c0 = (hospitals["hospital"] == "h0") & (hospitals["clinic"] == "c0")
    moved = hospitals.assign(site=np.where(c0, "s1", hospitals["site"]))  # a clinic moved
    with pytest.raises(ValueError, match="group 'h0' is at two sites"):
        _skfed(moved, CLINIC, True, True)
    lonely = hospitals.assign(clinic=np.where(hospitals.index == 0, "alone",
                                              hospitals["clinic"]))
    with pytest.raises(SiteError, match="variance component 'clinic' holds 1 row"):
        _skfed(lonely, CLINIC, True, True)
    with pytest.raises(Exception, match="one \\(1 \\| group/level\\) term"):
        sf.mixedlm("score ~ x + (1 | hospital/clinic) + (1 | hospital/ward)", hospitals,
                   clients="site")


def test_random_slope_with_nested_components(hospitals):
    """``re_formula="1 + x"`` beside the clinics: the hospital's intercept and slope
    (correlated), the clinics' intercepts; statsmodels on the pooled rows."""
    rng = np.random.default_rng(3)
    slope = {h: rng.normal(0, 0.5) for h in hospitals["hospital"].unique()}
    data = hospitals.assign(score=hospitals["score"]
                            + hospitals["hospital"].map(slope) * hospitals["x"])
    tight, gradient = _statsmodels(data, CLINIC, "1 + x", True, method="cg", gtol=1e-9)
    default, _ = _statsmodels(data, CLINIC, "1 + x", True)
    est = FedMixedLM(["x"], vc_formula=CLINIC).fit(
        data[["x", "hospital", "clinic"]], data["score"], clients=data["site"],
        groups="hospital")
    res = est.results_
    assert est.converged_
    assert list(res.params.index) == list(tight.params.index)
    assert res.llf >= max(tight.llf, default.llf) - 1e-9
    np.testing.assert_allclose(res.bse, _bse_at(tight.model, res), rtol=1e-9)
    if gradient < 1e-5:
        np.testing.assert_allclose(res.params, tight.params, rtol=1e-6)


def test_a_component_without_variation_is_a_boundary_fit(hospitals):
    rng = np.random.default_rng(0)
    effect = {h: rng.normal() for h in hospitals["hospital"].unique()}
    data = hospitals.assign(score=2 + 0.5 * hospitals["x"] + hospitals["hospital"].map(effect)
                            + rng.normal(size=len(hospitals)))  # no clinic effect
    with pytest.warns(BoundaryFitWarning, match="singular along clinic"):
        est = _skfed(data, CLINIC, True, True)
    default, _ = _statsmodels(data, CLINIC, "1", True)
    assert est.converged_ and est.vcomp_["clinic"] < 1e-10
    assert est.llf_ >= default.llf - 1e-9  # statsmodels stops at a clinic variance > 0
    assert lrt_variance(est.results_, sf.mixedlm("score ~ x + (1 | hospital)", data,
                                                 clients="site")).pvalue > 0.4
