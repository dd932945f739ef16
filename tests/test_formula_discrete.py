"""skfed.formula.ordinal and skfed.formula.mnlogit equal statsmodels'
``OrderedModel.from_formula`` and ``smf.mnlogit`` on the pooled rows."""

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf
from statsmodels.miscmodels.ordinal_model import OrderedModel

from skfed.formula import FormulaError, mnlogit, ordinal

from .test_discrete import _ordinal_bse

GRADES = ["low", "mid", "high", "top"]


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(3)
    n = 600
    df = pd.DataFrame({"age": rng.normal(50, 10, n), "sex": rng.choice(["F", "M"], n),
                       "arm": rng.choice(["a", "b", "c"], n)})
    latent = 0.08 * (df["age"] - 50) + 0.6 * (df["sex"] == "M") - 0.4 * (df["arm"] == "c")
    df["y"] = np.digitize(latent + rng.logistic(size=n), [-1.0, 0.3, 1.5])
    df["grade"] = pd.Categorical(np.array(GRADES)[df["y"]], categories=GRADES, ordered=True)
    # heterogeneous sites: by age, and the first site holds no row of the top grade
    site = np.digitize(df["age"], np.quantile(df["age"], [1 / 3, 2 / 3]))
    df["site"] = np.where((site == 0) & (df["y"] == 3), 2, site)
    df.loc[[4, 17], "age"] = np.nan  # incomplete rows: dropped, as statsmodels does
    return df


@pytest.mark.parametrize("distr", ["logit", "probit"])
def test_ordinal_formula_equals_statsmodels(rows, distr):
    assert not ((rows["site"] == 0) & (rows["grade"] == "top")).any()
    fit = ordinal("grade ~ age + C(sex) + C(arm)", rows, distr=distr, clients="site")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = OrderedModel.from_formula("grade ~ age + C(sex) + C(arm)", rows,
                                        distr=distr).fit(method="bfgs", gtol=1e-12,
                                                         maxiter=5000, disp=0)
    assert np.max(np.abs(ref.mle_retvals["gopt"])) < 1e-6
    assert list(fit.params.index) == list(ref.params.index)
    np.testing.assert_allclose(fit.params, ref.params, rtol=0, atol=1e-6)
    np.testing.assert_allclose(fit.bse, _ordinal_bse(ref), rtol=1e-6)
    assert abs(fit.llf - ref.llf) < 1e-8 and fit.nobs == ref.nobs == 598
    assert fit.levels == GRADES
    terms = fit.wald_test_terms()
    assert terms.loc["C(arm)", "df_constraint"] == 2
    R = np.zeros((2, len(ref.params)))
    R[0, 1], R[1, 2] = 1.0, 1.0  # the two arm contrasts
    np.testing.assert_allclose(terms.loc["C(arm)", "statistic"],
                               ref.wald_test(R, scalar=True).statistic, rtol=1e-5)
    summary = fit.summary()
    assert summary.info["Dep. Variable:"] == "grade" and "high/top" in summary.index
    new = rows.drop(columns=["grade", "y"]).iloc[:25]
    np.testing.assert_allclose(fit.predict(new), ref.predict(new.dropna()), atol=1e-7)


def test_mnlogit_formula_equals_statsmodels(rows):
    fit = mnlogit("y ~ age + C(sex) + C(arm)", rows, clients="site")
    ref = smf.mnlogit("y ~ age + C(sex) + C(arm)", rows).fit(method="newton", tol=1e-12,
                                                           disp=0)
    np.testing.assert_allclose(fit.params, ref.params.to_numpy().ravel(order="F"), rtol=0,
                               atol=1e-6)
    np.testing.assert_allclose(fit.bse, ref.bse.to_numpy().ravel(order="F"), rtol=1e-6)
    assert abs(fit.llf - ref.llf) < 1e-8
    assert fit.param_names[:2] == ["Intercept[y=1]", "C(sex)[T.M][y=1]"]
    table = fit.summary()
    np.testing.assert_allclose(table.loc["y=3", "coef"], ref.params[2], atol=1e-6)
    assert fit.wald_test_terms().loc["C(arm)", "df_constraint"] == 6
    new = rows.iloc[:25]  # two of them incomplete: left out, as the fit's rows
    np.testing.assert_allclose(fit.predict(new), ref.predict(new.dropna()), atol=1e-8)
    # text outcomes (statsmodels takes numbers only): the same fit, levels named
    named = rows.assign(outcome=np.array(["none", "partial", "good", "full"])[rows["y"]])
    text = mnlogit("outcome ~ age + C(sex) + C(arm)", named, clients="site")
    assert text.levels == ["full", "good", "none", "partial"]
    assert text.param_names[0] == "Intercept[outcome=good]"
    # levels= sets the reference (the first)
    ordered = mnlogit("outcome ~ age + C(sex) + C(arm)", named, clients="site",
                      levels=["none", "partial", "good", "full"])
    np.testing.assert_allclose(ordered.params, fit.params, rtol=1e-9, atol=1e-12)


@pytest.mark.filterwarnings("ignore:.*treats the 3 sites as the clusters")
def test_mnlogit_formula_cluster_robust(rows):
    fit = mnlogit("y ~ age + C(sex)", rows, clients="site", cov_type="cluster")
    complete = rows.dropna()
    ref = smf.mnlogit("y ~ age + C(sex)", complete).fit(
        method="newton", tol=1e-12, disp=0, cov_type="cluster",
        cov_kwds={"groups": complete["site"].to_numpy()})
    np.testing.assert_allclose(fit.bse, ref.bse.to_numpy().ravel(order="F"), rtol=1e-6)
    assert fit.summary().info["Covariance:"] == "cluster"


def test_formula_errors(rows):
    with pytest.raises(FormulaError, match="the outcome: one column"):
        ordinal("np.log(age) ~ C(sex)", rows, clients="site")
    unused = rows.assign(grade=rows["grade"].cat.add_categories(["worse"]))
    with pytest.raises(FormulaError, match=r"level\(s\) \['worse'\] are held by no site"):
        ordinal("grade ~ age", unused, clients="site")
    with pytest.raises(FormulaError, match=r"level\(s\) \['top'\] that its declared"):
        ordinal("grade ~ age", rows, levels=["low", "mid", "high"], clients="site")
    with pytest.raises(ValueError, match="use FedLogisticRegression"):
        ordinal("male ~ age", rows.assign(male=(rows["sex"] == "M").astype(int)),
                clients="site")


def test_forest_rows_of_the_formula_results(rows):
    pytest.importorskip("matplotlib")
    from skfed.plotting import forest_table, plot_forest

    fit = ordinal("grade ~ age + C(sex)", rows, clients="site")
    table = forest_table(fit)
    assert len(table) == 2 and table.attrs["measure"] == "odds ratio"
    multi = mnlogit("y ~ age + C(sex)", rows, clients="site")
    for level in (1, 2, 3):
        assert plot_forest(multi.level_results(level)) is not None


#: MASS::polr on scikit-learn's diabetes data (tests/data/polr_diabetes.R, run once with
#: R 4.2.2 Patched (2022-11-10 r83330), MASS 7.3.58.2): coefficients (bmi, bp,
#: factor(sex)2), cut points zeta, their standard errors, and the log-likelihood
POLR = {
    "logit": ([0.2286222222, 0.0469964166985, -0.190099260055], [9.38906637874, 11.2829261008],
              [0.0267959148364, 0.00809548883797, 0.196764729287, 0.900074102333,
               0.953799151482], -398.037169616),
    "probit": ([0.138846844658, 0.0284178970452, -0.109381091911],
               [5.70421430919, 6.83230812865],
               [0.0154234321186, 0.00472934015433, 0.116850771644, 0.511654451651,
                0.534871552952], -396.479464296),
}


@pytest.mark.parametrize("distr", ["logit", "probit"])
def test_equal_to_r_polr(distr):
    """R's MASS::polr, its numbers stored: the coefficients and cut points (polr's zeta:
    ``thresholds_``) to 1e-6, the standard errors to 1e-6 relative (the cut points' by
    the delta method from statsmodels' parametrisation), the log-likelihood to 1e-8."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes(as_frame=True, scaled=False).frame
    d["progression"] = pd.qcut(d["target"], 3, labels=["low", "middle", "high"])
    d["site"] = np.where(d["age"] < 45, "young", np.where(d["age"] < 58, "middle", "older"))
    fit = ordinal("progression ~ bmi + bp + C(sex)", d, distr=distr, clients="site")
    coef, zeta, se, llf = POLR[distr]
    model = fit.estimator
    np.testing.assert_allclose(fit.params[["bmi", "bp", "C(sex)[T.2.0]"]], coef, atol=1e-6)
    np.testing.assert_allclose(model.thresholds_, zeta, atol=1e-6)
    z = np.concatenate([model.coef_, model.thresholds_])
    J = model._jacobian(z, len(model.coef_))
    se_zeta = np.sqrt(np.diag(J @ model.cov_params_ @ J.T))[-2:]
    np.testing.assert_allclose(fit.bse[["bmi", "bp", "C(sex)[T.2.0]"]], se[:3], rtol=1e-6)
    np.testing.assert_allclose(se_zeta, se[3:], rtol=1e-6)
    assert abs(fit.llf - llf) < 1e-8


#: car::poTest (R 4.2.2, car 3.1.1) of polr on the diabetes data cut into quarters,
#: grade4 ~ bmi + bp + age + factor(sex): per covariate the chi-square (2 df) and the
#: binary logits' slopes above q1, q2, q3; its overall chi-square (8 df)
PO_TEST = {"bmi": (3.22699480129, [0.216102117855, 0.227423231617, 0.29263262108]),
           "bp": (5.33063965116, [0.0277085739265, 0.0447441541073, 0.0597847573004]),
           "age": (0.352830252937, [0.00581005046022, 0.00410795107192, 0.0109701802403]),
           "C(sex)[T.2.0]": (1.99798354355, [-0.293880240794, -0.454483799457,
                                             -0.0802275127492])}
PO_TEST_OVERALL = 12.7325564613


def _pooled_brant(X, codes, m, car):
    """Brant's overall statistic on the pooled rows from statsmodels' Logit fits; ``car``:
    with car::poTest's covariance, whose blocks below the diagonal are those above it
    untransposed (A_j^-1 C_jl A_l^-1 where A_l^-1 C_lj A_j^-1 belongs)."""
    fits = [sm.Logit((codes > j).astype(float), X).fit(method="newton", tol=1e-12, disp=0)
            for j in range(m)]
    P, k = [f.predict(X) for f in fits], X.shape[1] - 1
    info = [np.linalg.inv((X * (p * (1 - p))[:, None]).T @ X) for p in P]
    V = np.zeros((m * k, m * k))
    for j in range(m):
        for el in range(j, m):
            block = (info[j] @ (X * (P[el] - P[j] * P[el])[:, None]).T @ X @ info[el])[1:, 1:]
            V[j * k:(j + 1) * k, el * k:(el + 1) * k] = block
            V[el * k:(el + 1) * k, j * k:(j + 1) * k] = block if car else block.T
    beta = np.concatenate([f.params[1:] for f in fits])
    D = np.hstack([np.tile(np.eye(k), (m - 1, 1)), -np.eye((m - 1) * k)])
    return float(D @ beta @ np.linalg.solve(D @ V @ D.T, D @ beta))


def test_brant_test_equals_car_po_test():
    """Per covariate, car::poTest's statistics and slopes; overall, the statistic of the
    binary logits' joint covariance (car's own overall statistic uses its blocks below
    the diagonal untransposed, which reproduces its number: 12.7326 for 12.7010)."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes(as_frame=True, scaled=False).frame
    d["grade4"] = pd.qcut(d["target"], 4, labels=["q1", "q2", "q3", "q4"])
    d["site"] = np.where(d["age"] < 45, "young", np.where(d["age"] < 58, "middle", "older"))
    fit = ordinal("grade4 ~ bmi + bp + age + C(sex)", d, clients="site")
    table = fit.brant_test()
    for name, (chisq, slopes) in PO_TEST.items():
        np.testing.assert_allclose(table.loc[name, "Chisquare"], chisq, rtol=1e-6)
        np.testing.assert_allclose(table.loc[name, ["b[>q1]", "b[>q2]", "b[>q3]"]], slopes,
                                   atol=1e-6)
        assert table.loc[name, "df"] == 2
    X = np.column_stack([np.ones(len(d)), d["bmi"], d["bp"], d["age"],
                         (d["sex"] == 2).astype(float)])
    codes = d["grade4"].cat.codes.to_numpy()
    assert abs(_pooled_brant(X, codes, 3, car=True) - PO_TEST_OVERALL) < 1e-5
    np.testing.assert_allclose(table.loc["Overall", "Chisquare"],
                               _pooled_brant(X, codes, 3, car=False), rtol=1e-6)
    assert table.loc["Overall", "df"] == 8
    # the estimator's own route, its sums masked: the same table
    pytest.importorskip("cryptography")
    from skfed import FedOrderedModel
    from skfed.privacy import SecureAggregation

    X_frame = pd.DataFrame(X[:, [4, 1, 2, 3]], columns=["C(sex)[T.2.0]", "bmi", "bp", "age"])
    model = FedOrderedModel(privacy=SecureAggregation()).fit(X_frame, d["grade4"],
                                                             clients=d["site"])
    masked = model.brant_test(X_frame, d["grade4"], clients=d["site"])
    pd.testing.assert_frame_equal(masked, table, rtol=1e-9)
    with pytest.raises(ValueError, match="for the logit link"):
        FedOrderedModel("probit").fit(X_frame, d["grade4"]).brant_test(X_frame, d["grade4"])
