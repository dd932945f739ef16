"""``skfed.formula.gee`` equals ``statsmodels.formula.api.gee`` on the pooled rows: the
design's names (treatment coding, transforms, a time column that is also a term), the
estimates, both kinds of standard errors, the working correlation's parameter and the
summary with the response's name; statsmodels' family and covariance-structure objects
are taken as they are."""

import warnings

import numpy as np
import pytest

sm = pytest.importorskip("statsmodels.api")
smf = pytest.importorskip("statsmodels.formula.api")

import skfed.formula as F  # noqa: E402
from skfed import FederatedDataset  # noqa: E402

from .test_gee import sites_of, visits  # noqa: E402

FORMULA = "{} ~ age + visit + C(sex) + np.log(dose + 5)"


@pytest.fixture(scope="module")
def rows():
    rows = visits(5)
    rows["sex"] = np.where(rows["id"] % 3 == 0, "F", "M")
    rows["site"] = sites_of(rows, "heterogeneous")
    return rows


def _reference(rows, family, cov_struct, formula=FORMULA):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return smf.gee(formula.format(family), "id", rows, time=rows["visit"].to_numpy(),
                       family=getattr(sm.families, family.capitalize())(),
                       cov_struct=cov_struct).fit()


def _check(results, ref, tol=1e-9):
    assert list(results.params.index) == list(ref.params.index)
    np.testing.assert_allclose(results.params, ref.params, rtol=tol, atol=tol)
    np.testing.assert_allclose(results.bse, ref.bse, rtol=tol, atol=tol)
    np.testing.assert_allclose(results.bse_naive, ref.standard_errors("naive"), rtol=tol,
                               atol=tol)
    np.testing.assert_allclose(results.dep_params, ref.cov_struct.dep_params or 0.0,
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(results.scale, ref.scale, rtol=tol)
    np.testing.assert_allclose(results.conf_int(), ref.conf_int(), rtol=tol, atol=tol)


@pytest.mark.parametrize("family, cov_struct", [
    ("poisson", "exchangeable"), ("binomial", "independence"),
    ("gaussian", "autoregressive")])
def test_a_formula_equals_statsmodels(rows, family, cov_struct):
    struct = {"exchangeable": sm.cov_struct.Exchangeable(),
              "independence": sm.cov_struct.Independence(),
              "autoregressive": sm.cov_struct.Autoregressive(grid=False)}[cov_struct]
    results = F.gee(FORMULA.format(family), rows, groups="id", time="visit", family=family,
                    cov_struct=cov_struct, clients="site")
    _check(results, _reference(rows, family, struct),
           1e-6 if cov_struct == "autoregressive" else 1e-9)
    assert "Dependent Variable:" in str(results.summary())
    assert results.summary().info["Dependent Variable:"] == family
    assert results.estimator.n_clusters_ == rows["id"].nunique()


def test_statsmodels_objects_and_a_federated_dataset(rows):
    data = FederatedDataset.from_arrays(rows.drop(columns=["site"]), None, rows["site"])
    results = F.gee(FORMULA.format("gamma"), data, groups="id", time="visit",
                    family=sm.families.Gamma(link=sm.families.links.Log()),
                    cov_struct=sm.cov_struct.Autoregressive(grid=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = smf.gee(FORMULA.format("gamma"), "id", rows, time=rows["visit"].to_numpy(),
                      family=sm.families.Gamma(link=sm.families.links.Log()),
                      cov_struct=sm.cov_struct.Autoregressive(grid=True)).fit()
    _check(results, ref)
    new = rows.iloc[:7]
    np.testing.assert_allclose(results.predict(new), ref.predict(new), rtol=1e-9)


def test_bad_formulas_are_named(rows):
    with pytest.raises(F.FormulaError, match="unknown cov_struct"):
        F.gee("poisson ~ age", rows, groups="id", clients="site",
              cov_struct=sm.cov_struct.Nested())
    with pytest.raises(F.FormulaError, match="groups .* name columns"):
        F.gee("poisson ~ age", rows, groups=rows["id"].to_numpy(), clients="site")
    with pytest.raises(ValueError, match="unknown cov_struct='ar1'"):
        F.gee("poisson ~ age", rows, groups="id", clients="site", cov_struct="ar1")


def test_the_epilepsy_trial_equals_statsmodels():
    """statsmodels' shipped epilepsy trial (Thall and Vail: 59 patients, four visits
    each) in three hospitals: the worked example of docs/gee.md."""
    import os

    import pandas as pd
    import statsmodels

    path = os.path.join(os.path.dirname(statsmodels.__file__), "genmod", "tests", "results",
                        "epil.csv")
    if not os.path.exists(path):
        pytest.skip("statsmodels' test data are not installed")
    epil = pd.read_csv(path, float_precision="round_trip")
    epil["hospital"] = np.where(epil["subject"] <= 20, "north",
                                np.where(epil["subject"] <= 40, "centre", "south"))
    results = F.gee("y ~ age + trt + base", epil, groups="subject", family="poisson",
                    cov_struct="exchangeable", clients="hospital")
    ref = smf.gee("y ~ age + trt + base", "subject", epil, family=sm.families.Poisson(),
                  cov_struct=sm.cov_struct.Exchangeable()).fit()
    _check(results, ref)
    assert results.dep_params == pytest.approx(0.3934, abs=1e-4)
