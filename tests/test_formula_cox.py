"""``skfed.formula.coxph`` equals lifelines' ``CoxPHFitter(...).fit(df, formula=...)``
and statsmodels' ``PHReg.from_formula`` on the pooled rows.

Real data sets lifelines ships: the German breast cancer study (``gbsg2``: text
columns ``horTh``, ``menostat``, ``tgrade``) with 3 % missing values put into
``tsize`` and ``tgrade``, split into four hospitals by quartile of the
number of positive nodes (split by age, the oldest hospital holds fewer than five
premenopausal women, and refuses: ``test_formula_errors.py``), and the
recidivism data (``rossi``) split by age quartile. lifelines refuses missing values, so its
reference is fitted on the complete cases of the columns the formula uses
(what every site keeps). Tolerance: the estimates, standard errors and
log-likelihoods within 1e-8 relative (both fits are Newton's to machine
precision; measured differences are below 1e-12 relative).
"""

import numpy as np
import pandas as pd
import pytest

from skfed.formula import coxph

lifelines = pytest.importorskip("lifelines")
smf = pytest.importorskip("statsmodels.formula.api")
from lifelines.datasets import load_gbsg2, load_rossi  # noqa: E402

RTOL = 1e-8
LIFELINES_FIT = {"precision": 1e-14, "r_precision": 1e-14, "max_steps": 500}


def _gbsg2():
    df = load_gbsg2()
    rng = np.random.default_rng(0)
    df["tsize"] = df["tsize"].astype(float)
    for column in ("tsize", "tgrade"):
        df.loc[rng.random(len(df)) < 0.03, column] = None
    return df


GBSG2, ROSSI = _gbsg2(), load_rossi()


def _hospitals(df, column="age"):
    """Four sites by quartile of ``column`` (a heterogeneous split)."""
    return np.digitize(df[column], np.quantile(df[column], [0.25, 0.5, 0.75]))


def _lifelines(df, duration, event, rhs, columns, **kwargs):
    complete = df.dropna(subset=columns)
    return lifelines.CoxPHFitter().fit(complete, duration, event, formula=rhs,
                                       fit_options=LIFELINES_FIT, **kwargs)


def assert_same_cox(res, cph, rtol=RTOL):
    """Estimates, standard errors, z, p, intervals and log-likelihood equal to lifelines'
    (its rows reordered to statsmodels' order, the names being the same)."""
    assert sorted(res.param_names) == sorted(cph.params_.index)
    names = res.param_names
    se = cph.standard_errors_[names].to_numpy()
    np.testing.assert_allclose(res.params, cph.params_[names], rtol=rtol, atol=1e-10 * se.max())
    np.testing.assert_allclose(res.bse, se, rtol=rtol)
    # a p-value's relative error is its z's times z^2 (z up to 10 here)
    np.testing.assert_allclose(res.pvalues, cph.summary["p"][names], rtol=1e3 * rtol,
                               atol=1e-12)
    np.testing.assert_allclose(res.conf_int(), cph.confidence_intervals_.loc[names], rtol=rtol,
                               atol=1e-10 * se.max())
    np.testing.assert_allclose(res.hazard_ratios_, cph.hazard_ratios_[names], rtol=rtol)
    np.testing.assert_allclose(res.llf, cph.log_likelihood_, rtol=rtol)


GBSG2_RHS = ("age + horTh + menostat + C(tgrade) + np.log(pnodes) + I(tsize / 10) "
             "+ horTh:age")
GBSG2_USED = ["time", "cens", "age", "horTh", "menostat", "tgrade", "pnodes", "tsize"]


def test_gbsg2_with_text_columns_and_missing_values():
    res = coxph("Surv(time, cens) ~ " + GBSG2_RHS, GBSG2, clients=_hospitals(GBSG2, "pnodes"))
    cph = _lifelines(GBSG2, "time", "cens", GBSG2_RHS, GBSG2_USED)
    assert_same_cox(res, cph)
    assert int(res.rows_by_site.sum()) == len(GBSG2.dropna(subset=GBSG2_USED))
    assert "C(tgrade)[T.III]" in res.param_names and "horTh[T.yes]:age" in res.param_names


def test_rows_are_named_and_ordered_as_statsmodels_phreg():
    rhs = GBSG2_RHS
    res = coxph("Surv(time, cens) ~ " + rhs, GBSG2, clients=_hospitals(GBSG2, "pnodes"),
                ties="breslow")
    complete = GBSG2.dropna(subset=GBSG2_USED)
    ref = smf.phreg("time ~ " + rhs, complete, status=complete["cens"],
                    ties="breslow").fit()
    assert res.param_names == list(ref.model.exog_names)
    np.testing.assert_allclose(res.params, ref.params, rtol=RTOL, atol=1e-10 * ref.bse.max())
    np.testing.assert_allclose(res.bse, ref.bse, rtol=RTOL)


def test_strata_column_and_categorical_interaction_on_rossi():
    rhs = "age + fin + prio + C(wexp)*mar"
    res = coxph("Surv(week, arrest) ~ " + rhs, ROSSI, clients=_hospitals(ROSSI),
                strata=["paro"])
    cph = _lifelines(ROSSI, "week", "arrest", rhs, [], strata=["paro"])
    assert_same_cox(res, cph)


def test_each_site_its_own_baseline_is_lifelines_strata_by_site():
    rhs = "age + fin + prio + C(race)"
    site = _hospitals(ROSSI)
    res = coxph("Surv(week, arrest) ~ " + rhs, ROSSI, clients=site, strata="site")
    # lifelines stops here with a score of 1e-6 (step halving), statsmodels at 1e-13:
    # the tight comparison is with statsmodels, lifelines' within its own precision
    ref = smf.phreg("week ~ " + rhs, ROSSI, status=ROSSI["arrest"], strata=site,
                    ties="efron").fit()
    assert res.param_names == list(ref.model.exog_names)
    np.testing.assert_allclose(res.params, ref.params, rtol=RTOL)
    np.testing.assert_allclose(res.bse, ref.bse, rtol=RTOL)
    cph = _lifelines(ROSSI.assign(site=site), "week", "arrest", rhs, [], strata=["site"])
    assert_same_cox(res, cph, rtol=1e-6)


def test_the_three_ways_to_name_time_and_event_agree():
    site = _hospitals(ROSSI)
    rhs = "age + fin + prio + C(race)"
    surv = coxph("Surv(week, arrest) ~ " + rhs, ROSSI, clients=site)
    statsmodels_style = coxph("week ~ " + rhs, ROSSI, clients=site, event_col="arrest")
    lifelines_style = coxph(rhs, ROSSI, clients=site, duration_col="week",
                            event_col="arrest")
    for other in (statsmodels_style, lifelines_style):
        assert other.param_names == surv.param_names
        np.testing.assert_array_equal(other.params, surv.params)


def test_frequency_weights_are_replicated_rows():
    # Breslow's partial likelihood with a row of weight k is that of k equal rows
    weights = np.random.default_rng(0).integers(1, 4, len(ROSSI))
    rhs = "age + fin + C(race)"
    res = coxph("Surv(week, arrest) ~ " + rhs, ROSSI.assign(w=weights),
                clients=_hospitals(ROSSI), freq_weights="w", ties="breslow")
    replicated = ROSSI.loc[np.repeat(ROSSI.index, weights)]
    ref = smf.phreg("week ~ " + rhs, replicated, status=replicated["arrest"],
                    ties="breslow").fit()
    np.testing.assert_allclose(res.params, ref.params, rtol=RTOL)
    np.testing.assert_allclose(res.bse, ref.bse, rtol=RTOL)


def test_predict_gives_the_linear_predictor_of_new_rows():
    res = coxph("Surv(week, arrest) ~ age + C(race) + np.log1p(prio)", ROSSI,
                clients=_hospitals(ROSSI))
    new = ROSSI.iloc[:20]
    expected = (res.params["age"] * new["age"] + res.params["C(race)[T.1]"] * new["race"]
                + res.params["np.log1p(prio)"] * np.log1p(new["prio"]))
    np.testing.assert_allclose(res.predict(new), expected, rtol=1e-12)
    assert isinstance(res.predict(new), pd.Series)
