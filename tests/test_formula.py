"""``skfed.formula.glm`` equals ``statsmodels.formula.api.glm`` on the pooled rows.

The data: a synthetic clinic of 800 patients with text columns (``sex``,
``smoke``), a boolean (``chf``), an integer grade, 3 % missing values in
``bmi``, ``sex`` and ``smoke``, and four responses (a death, a count of events
over years of follow-up, a cost, a blood pressure); split into four sites at
random (IID), by age quartile (each site a different age band) or by grade (each
site holds one level of a categorical covariate). statsmodels fits the same
formula on the pooled DataFrame with its own missing-value handling (complete
cases of the columns the formula uses).

Tolerance: both reach the same maximum-likelihood estimate (skfed by federated
Newton to ``tol=1e-8``, statsmodels by IRLS to ``tol=1e-13``); measured
differences are below 1e-10 relative, so the tests ask for 1e-8 on every
number (parameters also within 1e-10 standard errors, for those near zero).
"""

import json

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from skfed import FederatedDataset
from skfed.data import SiteData
from skfed.formula import glm
from skfed.formula._design import design_rows

sm = pytest.importorskip("statsmodels.api")
smf = pytest.importorskip("statsmodels.formula.api")

RTOL = 1e-8


def clinic(n=800, seed=0):
    """The synthetic clinic (see the module docstring)."""
    rng = np.random.default_rng(seed)
    age = rng.normal(60, 10, n)
    sex = rng.choice(["F", "M"], n)
    smoke = rng.choice(["current", "former", "never"], n, p=[0.25, 0.3, 0.45])
    chf = rng.random(n) < 0.3
    grade = rng.integers(1, 4, n)
    bmi = np.exp(rng.normal(3.25, 0.15, n))
    years = rng.uniform(0.5, 5, n)
    eta = (-0.5 + 0.03 * (age - 60) + 0.4 * (sex == "M") + 0.5 * chf
           + 0.3 * (smoke == "current") - 0.02 * (bmi - 26) + 0.1 * grade)
    df = pd.DataFrame({
        "age": age, "sex": sex, "smoke": smoke, "chf": chf, "grade": grade, "bmi": bmi,
        "years": years, "died": (rng.random(n) < expit(eta)).astype(int),
        "events": rng.poisson(years * np.exp(eta - 1)),
        "cost": rng.gamma(2.0, np.exp(eta + 3) / 2.0),
        "sbp": 120 + 0.5 * (age - 60) + 5 * (sex == "M") + 8 * np.sin(age / 8)
        + rng.normal(0, 10, n)})
    for column in ("bmi", "sex", "smoke"):
        df.loc[rng.random(n) < 0.03, column] = None
    return df


DATA = clinic()
# IID; by age quartile; by grade, a covariate of every model (each site holds one level)
SPLITS = {"iid": np.random.default_rng(1).integers(0, 4, len(DATA)),
          "by-age": np.digitize(DATA["age"], np.quantile(DATA["age"], [0.25, 0.5, 0.75])),
          "by-grade": DATA["grade"].to_numpy()}

# name -> (formula, skfed family, statsmodels family, keyword arguments of both)
CASES = {
    "binomial": ("died ~ age + C(sex) + age:C(sex) + np.log(bmi) + I(age**2)", "binomial",
                 sm.families.Binomial(), {}),
    "binomial-reference": ("died ~ smoke*chf + C(grade, Treatment(3))", "binomial",
                           sm.families.Binomial(), {}),
    "poisson-exposure": ("events ~ age + C(smoke, Treatment('never')) + sex + chf",
                         "poisson", sm.families.Poisson(), {"exposure": "years"}),
    "gamma-log": ("cost ~ age + sex + np.sqrt(bmi) + C(grade)", "gamma",
                  sm.families.Gamma(sm.families.links.Log()), {}),
    "gaussian-spline": ("sbp ~ bs(age, df=5) + chf + C(grade)", "gaussian",
                        sm.families.Gaussian(), {}),
    "tweedie": ("cost ~ age + sex + C(grade)", "tweedie",
                sm.families.Tweedie(var_power=1.5, link=sm.families.links.Log()),
                {"var_power": 1.5}),
}


def _reference(formula, family, data, site, cov_type, **kwargs):
    """statsmodels on the pooled rows (its complete cases), clusters = sites."""
    kwargs.pop("var_power", None)  # in the family object
    for name in ("exposure", "offset", "freq_weights"):
        if isinstance(kwargs.get(name), str):
            kwargs[name] = data[kwargs[name]]
    model = smf.glm(formula, data, family=family, **kwargs)
    cov_kwds = None
    if cov_type == "cluster":
        kept = model.data.row_labels
        cov_kwds = {"groups": pd.Series(site, index=data.index).loc[kept].to_numpy()}
    return model.fit(cov_type=cov_type, cov_kwds=cov_kwds, tol=1e-13)


def assert_same_fit(res, ref, rtol=RTOL):
    """Names, estimates, inference and fit statistics equal to statsmodels'."""
    assert res.param_names == list(ref.params.index)
    bse = ref.bse.to_numpy()
    np.testing.assert_allclose(res.params, ref.params, rtol=rtol, atol=1e-10 * bse.max())
    np.testing.assert_allclose(res.bse, bse, rtol=rtol)
    np.testing.assert_allclose(res.tvalues, ref.tvalues, rtol=rtol, atol=1e-10)
    # a p-value's relative error is its z's times z^2: statsmodels' Poisson standard
    # errors lag its estimate by 1.6e-9 (IRLS), which moves a p-value of 5e-46 (z = 14) by 3e-7
    np.testing.assert_allclose(res.pvalues, ref.pvalues, rtol=1e3 * rtol, atol=1e-12)
    np.testing.assert_allclose(res.conf_int(), ref.conf_int(), rtol=rtol,
                               atol=1e-10 * bse.max())
    np.testing.assert_allclose(res.cov_params(), ref.cov_params(), rtol=rtol,
                               atol=1e-12 * bse.max() ** 2)
    assert (res.nobs, res.df_model, res.df_resid) == (ref.nobs, ref.df_model, ref.df_resid)
    for ours, theirs in ((res.deviance, ref.deviance), (res.null_deviance, ref.null_deviance),
                         (res.llf, ref.llf), (res.aic, ref.aic), (res.scale, ref.scale),
                         (res.pearson_chi2, ref.pearson_chi2)):
        np.testing.assert_allclose(ours, theirs, rtol=rtol)


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("case", list(CASES))
def test_glm_equals_statsmodels(case, split):
    formula, family, sm_family, kwargs = CASES[case]
    res = glm(formula, DATA, family=family, clients=SPLITS[split], **kwargs)
    assert_same_fit(res, _reference(formula, sm_family, DATA, SPLITS[split], "nonrobust",
                                    **kwargs))


@pytest.mark.filterwarnings("ignore:.*treats the 4 sites as the clusters")
@pytest.mark.parametrize("cov_type", ["HC0", "cluster"])
@pytest.mark.parametrize("case", ["binomial", "poisson-exposure"])
def test_robust_and_cluster_covariance(case, cov_type):
    formula, family, sm_family, kwargs = CASES[case]
    site = SPLITS["by-age"]
    res = glm(formula, DATA, family=family, clients=site, cov_type=cov_type, **kwargs)
    assert_same_fit(res, _reference(formula, sm_family, DATA, site, cov_type, **kwargs))


def test_rows_used_are_the_complete_cases_of_the_used_columns():
    formula = CASES["binomial"][0]  # uses bmi and sex, not smoke
    res = glm(formula, DATA, family="binomial", clients=SPLITS["iid"])
    complete = DATA[["died", "age", "sex", "bmi"]].notna().all(axis=1)
    expected = pd.Series(SPLITS["iid"][complete]).value_counts().sort_index()
    assert res.rows_by_site.tolist() == expected.tolist()
    assert res.nobs == complete.sum() < len(DATA)


def test_offset_and_weights_as_columns_or_arrays():
    formula, family, sm_family, _ = CASES["poisson-exposure"]
    site, offset = SPLITS["iid"], np.log(DATA["years"])
    weights = np.random.default_rng(3).integers(1, 4, len(DATA)).astype(float)
    data = DATA.assign(logyears=offset, w=weights)
    ref = smf.glm(formula, data, family=sm_family, offset=offset,
                  freq_weights=weights).fit(tol=1e-13)
    by_column = glm(formula, data, family=family, clients=site, offset="logyears",
                    freq_weights="w")
    by_array = glm(formula, data, family=family, clients=site, offset=offset.to_numpy(),
                   freq_weights=weights)
    assert_same_fit(by_column, ref)
    assert_same_fit(by_array, ref)


def test_federated_dataset_gives_the_dataframe_fit():
    formula, family, _, kwargs = CASES["poisson-exposure"]
    site = SPLITS["by-age"]
    dataset = FederatedDataset.from_arrays(DATA, clients=site)
    from_dataset = glm(formula, dataset, family=family, **kwargs)
    from_frame = glm(formula, DATA, family=family, clients=site, **kwargs)
    np.testing.assert_array_equal(from_dataset.params, from_frame.params)
    np.testing.assert_array_equal(from_dataset.bse, from_frame.bse)


def test_statsmodels_family_objects_are_accepted():
    formula = CASES["gamma-log"][0]
    site = SPLITS["iid"]
    by_name = glm(formula, DATA, family="gamma", clients=site)
    by_object = glm(formula, DATA, family=sm.families.Gamma(sm.families.links.Log()),
                    clients=site)
    np.testing.assert_array_equal(by_name.params, by_object.params)


def test_design_is_plain_data_that_builds_the_same_rows():
    res = glm(CASES["binomial-reference"][0], DATA, family="binomial",
              clients=SPLITS["iid"])
    wire = json.loads(json.dumps(res.design))
    rows = DATA.dropna(subset=["smoke"]).iloc[:50]
    site = SiteData("a", rows.reset_index(drop=True))
    np.testing.assert_array_equal(design_rows(site, wire).X.to_numpy(),
                                  design_rows(site, res.design).X.to_numpy())
    assert list(design_rows(site, wire).X.columns) == res.param_names


def test_predict_equals_statsmodels_predict():
    formula, family, sm_family, kwargs = CASES["binomial"]
    res = glm(formula, DATA, family=family, clients=SPLITS["iid"])
    ref = _reference(formula, sm_family, DATA, None, "nonrobust")
    new = clinic(n=60, seed=7)
    expected = ref.predict(new)
    got = res.predict(new)
    assert list(got.index) == list(expected.dropna().index)
    np.testing.assert_allclose(got, expected.dropna(), rtol=RTOL)


def test_summary_rows_are_statsmodels_names():
    formula, family, _, kwargs = CASES["poisson-exposure"]
    res = glm(formula, DATA, family=family, clients=SPLITS["iid"], **kwargs)
    table = res.summary(exponentiate=True)
    assert list(table.index) == res.param_names
    assert "C(smoke, Treatment('never'))[T.current]" in table.index
    np.testing.assert_allclose(table["exp(coef)"], np.exp(res.params), rtol=1e-15)


def test_the_formulas_page_runs_and_shows_the_names_it_prints(capsys):
    import ast
    import pathlib
    import re

    page = (pathlib.Path(__file__).parents[1] / "docs" / "formulas.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    namespace = {}
    exec(blocks[0], namespace)
    shown = ast.literal_eval(re.search(r"^# (\['Intercept'.*\])$", blocks[0], re.M).group(1))
    assert namespace["res"].param_names == shown
    for block in blocks[1:]:
        exec(block, namespace)
    assert "exp(coef)" in capsys.readouterr().out
