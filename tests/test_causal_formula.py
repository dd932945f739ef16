"""skfed.formula.ipw / aipw: the propensity model from a formula (statsmodels' design),
equal to the same analysis on the design's columns built by hand (itself equal to
delicatessen, tests/test_causal_nhefs.py), in this process and at site services."""

import numpy as np
import pandas as pd
import pytest

from skfed.causal import FedAIPW, FedIPW
from skfed.formula import FormulaError, aipw, ipw

pytest.importorskip("formulaic")
causaldata = pytest.importorskip("causaldata")

PS = ("qsmk ~ C(sex) + C(race) + age + I(age**2) + C(education) + smokeintensity"
      " + I(smokeintensity**2) + smokeyrs + I(smokeyrs**2) + C(exercise) + C(active)"
      " + wt71 + I(wt71**2)")
COLUMNS = ["qsmk", "sex", "race", "age", "education", "smokeintensity", "smokeyrs",
           "exercise", "active", "wt71", "wt82_71"]


@pytest.fixture(scope="module")
def nhefs():
    frame = causaldata.nhefs_complete.load_pandas().data
    return frame[COLUMNS].assign(site=np.arange(len(frame)) % 4)


def test_the_book_formula_equals_the_hand_built_design(nhefs):
    from .test_causal_nhefs import nhefs_design

    X, a, y = nhefs_design(nhefs), nhefs.qsmk.to_numpy(float), nhefs.wt82_71.to_numpy(float)
    with pytest.warns(UserWarning):  # extreme weights' counts
        by_formula = ipw("wt82_71 ~ qsmk", nhefs, ps=PS, clients="site", extreme_weight=10.0)
    with pytest.warns(UserWarning):
        by_hand = FedIPW(extreme_weight=10.0).fit(X, a, y, clients=nhefs.site)
    np.testing.assert_allclose(by_formula.effect_, by_hand.effect_, rtol=1e-12)
    np.testing.assert_allclose(by_formula.std_err_, by_hand.std_err_, rtol=1e-10)
    np.testing.assert_allclose(by_formula.conf_int(fixed_score=True),
                               by_hand.conf_int(fixed_score=True), rtol=1e-10)
    assert "ps[C(education)[T.5]]" in by_formula.param_names_
    assert "ps[I(wt71 ** 2)]" in by_formula.param_names_  # statsmodels' names
    both = aipw("wt82_71 ~ qsmk", nhefs, ps=PS, clients="site", balance=False)
    hand = FedAIPW(balance=False).fit(X, a, y, clients=nhefs.site)
    np.testing.assert_allclose(both.effect_, hand.effect_, rtol=1e-10)
    np.testing.assert_allclose(both.std_err_, hand.std_err_, rtol=1e-9)


def test_formula_errors_are_named(nhefs):
    with pytest.raises(FormulaError, match="'outcome ~ treatment'"):
        ipw("wt82_71 ~ qsmk + age", nhefs, ps=PS, clients="site")
    with pytest.raises(FormulaError, match="left-hand side is the treatment"):
        ipw("wt82_71 ~ qsmk", nhefs, ps="sex ~ age", clients="site")
    with pytest.raises(FormulaError, match="not a column"):
        ipw("wt82_71 ~ quit", nhefs, ps="quit ~ age", clients="site")


def test_the_formula_route_at_site_services(tmp_path):
    pytest.importorskip("grpc")
    from ._sites import services_of
    from .test_causal_sites import _frames

    frames = list(_frames().values())
    pooled = pd.concat(frames, ignore_index=True)
    site = np.repeat(np.arange(3), [len(f) for f in frames])
    ps = "treated ~ age + I(age**2) + C(male) + bmi"
    local = ipw("y ~ treated", pooled, ps=ps, clients=site, balance=False)
    with services_of(tmp_path, frames) as data:
        remote = ipw("y ~ treated", data, ps=ps, balance=False)
    np.testing.assert_allclose(remote.params_, local.params_, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(remote.cov_params_, local.cov_params_, rtol=1e-10,
                               atol=1e-15)
