"""``skfed.formula.mixedlm`` equals ``statsmodels.formula.api.mixedlm`` on the pooled rows:
pigs nested in three sites, a categorical fixed effect, a random intercept and slope.

The reference is statsmodels' conjugate-gradient fit run to ``gtol=1e-9`` (its default
stops at ``gtol=1e-5``); both maximize the same REML likelihood.
"""

import warnings

import numpy as np
import pandas as pd
import pytest

from skfed.formula import FormulaError, mixedlm

smf = pytest.importorskip("statsmodels.formula.api")


@pytest.fixture(scope="module")
def pigs():
    rng = np.random.default_rng(0)
    rows = []
    for s in range(3):
        for p in range(8):
            u, b = rng.normal(0, 1), rng.normal(0, 0.3)
            for t in range(10):
                # numpy strings as the levels (an object column of np.str_)
                rows.append(dict(site=f"s{s}", pig=f"s{s}-{p}", time=t,
                                 arm=rng.choice(["a", "b"]),
                                 y=5 + u + (1 + b) * t + 0.5 * s + rng.normal(0, 1)))
    return pd.DataFrame(rows)


def _fits(pigs, re_formula, reml):
    formula = "y ~ time + C(arm)"
    model = smf.mixedlm(formula, pigs, groups=pigs["pig"], re_formula=re_formula)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = model.fit(reml=reml, method="cg", gtol=1e-9)
        ours = mixedlm(formula, pigs, groups="pig", re_formula=re_formula, reml=reml,
                       clients="site")
    return reference, ours


@pytest.mark.parametrize("re_formula", [None, "~time"])
@pytest.mark.parametrize("reml", [True, False])
def test_mixedlm_equals_statsmodels(pigs, re_formula, reml):
    reference, ours = _fits(pigs, re_formula, reml)
    assert list(ours.fe_params.index) == list(reference.fe_params.index)
    np.testing.assert_allclose(ours.fe_params, reference.fe_params, rtol=1e-6)
    np.testing.assert_allclose(ours.bse_fe, reference.bse_fe, rtol=1e-5)
    np.testing.assert_allclose(ours.cov_re, reference.cov_re, rtol=1e-5, atol=1e-7)
    assert ours.llf >= reference.llf - 1e-9
    assert ours.llf == pytest.approx(reference.llf, abs=1e-6)
    assert ours.rows_by_site.tolist() == [80, 80, 80]


def test_a_random_slope_on_a_column_outside_the_design_is_named(pigs):
    with pytest.raises(FormulaError, match="'weight' is not a column of the fixed design"):
        mixedlm("y ~ time", pigs, groups="pig", re_formula="~weight", clients="site")
