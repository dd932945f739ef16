"""The NHEFS smoking-cessation study ("What If", Hernan & Robins, ch. 12) split into sites:
the IPW effect of quitting on weight gain with the book's propensity model, its
M-estimation sandwich equal to delicatessen's on the pooled rows, and the book's robust
interval that holds the score fixed equal to the weighted regression's GEE sandwich
(statsmodels) on the pooled rows; about 3.4 kg (2.4 to 4.5)."""

import numpy as np
import pandas as pd
import pytest

from skfed.causal import FedIPW

causaldata = pytest.importorskip("causaldata")
pytest.importorskip("delicatessen")
sm = pytest.importorskip("statsmodels.api")


def nhefs_design(frame):
    """The book's propensity model's columns: sex, race, age, age^2, education (5 levels),
    smoking intensity, years and their squares, exercise and activity (3 levels each),
    weight in 1971 and its square."""
    out = pd.DataFrame({"sex": frame.sex.astype(float), "race": frame.race.astype(float),
                        "age": frame.age, "age2": frame.age ** 2})
    for column, levels in (("education", (2, 3, 4, 5)), ("exercise", (1, 2)),
                           ("active", (1, 2))):
        for level in levels:
            out[f"{column}_{level}"] = (frame[column].astype(int) == level).astype(float)
    for column in ("smokeintensity", "smokeyrs", "wt71"):
        out[column] = frame[column]
        out[f"{column}2"] = frame[column] ** 2
    return out


@pytest.fixture(scope="module")
def nhefs():
    frame = causaldata.nhefs_complete.load_pandas().data
    assert len(frame) == 1566
    return nhefs_design(frame), frame.qsmk.to_numpy(float), frame.wt82_71.to_numpy(float)


def _pooled(X, a, y):
    """delicatessen's Hajek IPW on the pooled rows (started from statsmodels' logistic
    fit: the squared columns' scales defeat its solver from zeros) and the book's GEE."""
    from delicatessen import MEstimator
    from delicatessen.estimating_equations import ee_ipw

    W = np.column_stack([np.ones(len(a)), X.to_numpy()])
    start = sm.Logit(a, W).fit(disp=0, method="newton", tol=1e-12).params
    m = MEstimator(lambda theta: ee_ipw(theta, y, a, W, weight_type="hajek"),
                   init=[3.0, 4.0, 2.0, *start])
    m.estimate(solver="lm", tolerance=1e-13, deriv_method="exact")
    e = 1 / (1 + np.exp(-W @ m.theta[3:]))
    w = np.where(a == 1, 1 / e, 1 / (1 - e))
    gee = sm.GEE(y, sm.add_constant(a), groups=np.arange(len(a)), weights=w).fit()
    return m, gee


@pytest.mark.parametrize("split", ["round robin", "by age"])
def test_nhefs_ipw_equals_the_pooled_analyses(nhefs, split):
    X, a, y = nhefs
    site = (np.arange(len(a)) % 4 if split == "round robin" else
            np.searchsorted(np.quantile(X.age, [0.25, 0.5, 0.75]), X.age, side="right"))
    with pytest.warns(UserWarning, match="extreme weights"):
        est = FedIPW(extreme_weight=10.0).fit(X, a, y, clients=site)
    m, gee = _pooled(X, a, y)
    np.testing.assert_allclose(est.effect_, m.theta[0], rtol=1e-9)
    np.testing.assert_allclose(est.params_[2:], m.theta[3:], rtol=1e-9)
    np.testing.assert_allclose(est.std_err_ ** 2, m.variance[0, 0], rtol=1e-6)
    np.testing.assert_allclose(est.effect_, gee.params[1], rtol=1e-9)
    np.testing.assert_allclose(est.conf_int(fixed_score=True), gee.conf_int()[1], rtol=1e-9)
    # the book's numbers: 3.4 kg, 95% CI 2.4 to 4.5 (the robust interval, score fixed)
    assert round(est.effect_, 1) == 3.4
    np.testing.assert_allclose(est.conf_int(fixed_score=True), [2.4, 4.5], atol=0.075)
    lo, hi = est.conf_int()  # the M-estimation sandwich: narrower (the ATE's score)
    assert 2.4 < lo < hi < 4.5
