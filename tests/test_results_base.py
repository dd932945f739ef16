"""One results base under every model's results (issue 36, items 3 and 9).

Every results kind (fitted GLM, logistic and Cox estimators; formula GLM and Cox
results; linear and generalized mixed models; meta-analysis) answers the same
methods from the same code: the regression table, intervals, Wald tests per
hypothesis and per term, car's type II/III Wald tests, the journal table and the
forest plot. Type II/III tests equal R's ``car::Anova`` (numbers stored below);
formula results have their estimator's methods (the PH test, survival curves,
``anova_deviance`` between nested formulas).
"""

import re

import numpy as np
import pandas as pd
import pytest

from skfed import FedLogisticRegression, FedPoissonRegressor
from skfed.formula import coxph, glm, mixedlm
from skfed.mixed import FedMixedGLM
from skfed.stats import anova_deviance, meta_analysis
from skfed.stats._results import ModelResults, Summary
from skfed.survival import FedCoxPH, proportional_hazard_test, survival_target

lifelines = pytest.importorskip("lifelines")
from lifelines.datasets import load_gbsg2  # noqa: E402

#: the gbsg2 paper's three hospitals, split by tumour size (the issue's)
LABELS = {"horTh": "Hormone therapy", "tgrade": "Tumour grade", "menostat": "Menopause",
          "age": "Age (years)", "tsize": "Tumour size (mm)"}


@pytest.fixture(scope="module")
def gbsg2():
    frame = load_gbsg2()
    frame["site"] = np.where(frame.tsize < 20, "A", np.where(frame.tsize < 30, "B", "C"))
    return frame


def _numeric(frame):
    X = pd.DataFrame({"age": frame.age, "tsize": frame.tsize, "pnodes": np.log(frame.pnodes),
                      "hormone": (frame.horTh == "yes").astype(float)})
    return X


@pytest.fixture(scope="module")
def results(gbsg2):
    """``{kind: fitted results}``: every kind of the results base, fitted once."""
    X, site = _numeric(gbsg2), gbsg2.site.to_numpy()
    out = {"logistic": FedLogisticRegression(C=np.inf).fit(X, gbsg2.cens, clients=site),
           "poisson": FedPoissonRegressor(alpha=0.0).fit(X, gbsg2.pnodes, clients=site),
           "cox": FedCoxPH().fit(X, survival_target(gbsg2.cens, gbsg2.time), clients=site)}
    out["glm formula"] = glm("cens ~ age + C(horTh) * C(menostat) + C(tgrade) + "
                             "np.log(pnodes)", gbsg2, family="binomial", clients="site")
    out["cox formula"] = coxph("Surv(time, cens) ~ age + C(horTh) * C(menostat) + C(tgrade)"
                               " + tsize", gbsg2, clients="site")
    frame = gbsg2.assign(clinic=gbsg2.site + (gbsg2.index % 4).astype(str))
    out["mixed formula"] = mixedlm("np.log(tsize) ~ age + C(horTh)", frame, groups="clinic",
                                   clients="site")
    glmm = FedMixedGLM(family="binomial").fit(X[["age", "hormone"]], gbsg2.cens,
                                                groups=frame.clinic, clients=site)
    out["glmm"] = glmm.results_
    out["meta-analysis"] = meta_analysis([0.1, 0.3, 0.2], [0.01, 0.02, 0.015])
    return out


KINDS = ["logistic", "poisson", "cox", "glm formula", "cox formula", "mixed formula", "glmm",
         "meta-analysis"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_result_is_the_one_base(results, kind):
    assert isinstance(results[kind], ModelResults)


@pytest.mark.parametrize("kind", KINDS)
def test_summary_is_a_table_with_its_facts(results, kind):
    summary = results[kind].summary()
    assert isinstance(summary, Summary) and isinstance(summary, pd.DataFrame)
    text = str(summary)
    assert summary.title in text
    for label, value in summary.info.items():
        assert label in text and str(value) in text
    first = str(summary.index[0])
    assert first in text
    # a slice is a plain table; the table alone equals the summary's numbers
    assert type(summary.iloc[:2]) is pd.DataFrame
    pd.testing.assert_frame_equal(summary.table, pd.DataFrame(summary))


@pytest.mark.parametrize("kind", KINDS)
def test_intervals_and_wald_tests_agree(results, kind):
    """A single parameter's Wald test is its z squared; its 95 % interval excludes 0
    exactly when p < 0.05; every term's test is the joint test of its columns."""
    res = results[kind]
    est = res._estimates()
    names = [str(n) for n in est.names]
    z = np.asarray(est.params) / np.sqrt(np.diag(est.cov))
    for k, name in enumerate(names):
        test = res.wald_test([name])
        assert test.statistic == pytest.approx(z[k] ** 2, rel=1e-10)
    ci = np.asarray(res.conf_int() if kind != "meta-analysis"
                    else list(res.conf_int().values()))
    p = 2 * __import__("scipy").stats.norm.sf(np.abs(z))
    np.testing.assert_array_equal((ci[:, 0] > 0) | (ci[:, 1] < 0), p < 0.05)
    terms = res.wald_test_terms()
    for term in res._terms():
        members = [c for c, _ in term.columns]
        assert terms.loc[term.name, "statistic"] == pytest.approx(
            res.wald_test(members).statistic, rel=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_journal_table_and_forest_plot(results, kind):
    pytest.importorskip("matplotlib")
    from skfed.plotting import plot_forest

    res = results[kind]
    table = res.journal_table(labels=LABELS)
    assert list(table.columns)[1] == "p" and len(table)
    measure = res._measure()
    head = {"odds ratio": "OR", "hazard ratio": "HR", "rate ratio": "RR"}.get(measure)
    assert table.columns[0].startswith(head or "Coefficient")
    fig = plot_forest(res)
    assert fig.axes
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_journal_table_rows_read_as_a_paper(results):
    table = results["cox formula"].journal_table(labels=LABELS)
    rows = list(table.index)
    assert "Hormone therapy: yes vs no" in rows  # a binary factor is one row
    grade = rows.index("Tumour grade")  # a multi-level factor: header, reference, levels
    assert rows[grade + 1].strip() == "I" and table.iloc[grade + 1, 0] == "1 (reference)"
    assert [r.strip() for r in rows[grade + 2:grade + 4]] == ["II", "III"]
    joint = results["cox formula"].wald_test(["C(tgrade)[T.II]", "C(tgrade)[T.III]"]).pvalue
    assert table.iloc[grade, 1] == ("<0.001" if joint < 0.001 else f"{joint:.3f}")
    assert "Hormone therapy: yes \u00d7 Menopause: Pre" in rows
    assert not any("C(" in r for r in rows)  # no design names in a journal table
    hr = np.exp(results["cox formula"].params["C(tgrade)[T.II]"])
    assert table.iloc[grade + 2, 0].startswith(f"{hr:.2f}"[:3])


def test_a_spline_is_one_row_and_no_basis_odds_in_the_forest_plot(gbsg2):
    pytest.importorskip("matplotlib")
    from skfed.plotting import forest_table

    res = glm("cens ~ C(horTh) + bs(age, df=4)", gbsg2, family="binomial", clients="site")
    table = res.journal_table(labels=LABELS)
    assert "Age (years) (spline, 4 df)" in table.index
    joint = res.wald_test([f"bs(age, df=4)[{k}]" for k in range(4)]).pvalue
    assert table.loc["Age (years) (spline, 4 df)", "p"] == f"{joint:.3f}"
    assert list(forest_table(res).index) == ["horTh: yes vs no"]  # no basis odds


# --- car::Anova(test.statistic = "Wald"), computed once with R 4.2.2, car 3.1.1, survival
# 3.5.3 (Debian bookworm's r-base-core, r-cran-car, r-cran-survival) on lifelines' gbsg2:
#   glm(cens ~ age + horTh * menostat + tgrade + log(pnodes), family = binomial)
#   coxph(Surv(time, cens) ~ age + horTh * menostat + tgrade + tsize, ties = "efron")
R_ANOVA = {
    ("glm formula", 2): {"age": 1.314091844640253, "C(horTh)": 6.616367270125222,
                         "C(menostat)": 4.271263582515307, "C(tgrade)": 11.236669993468315,
                         "np.log(pnodes)": 42.317962537652306,
                         "C(horTh):C(menostat)": 0.471766530467672},
    ("glm formula", 3): {"Intercept": 0.578657357141735, "age": 1.314091844640253,
                         "C(horTh)": 6.319929474538156, "C(menostat)": 4.731964724243922,
                         "C(tgrade)": 11.236669993468315, "np.log(pnodes)": 42.317962537652306,
                         "C(horTh):C(menostat)": 0.471766530467672},
    ("cox formula", 2): {"age": 1.818576625123693, "C(horTh)": 8.302465067130370,
                         "C(menostat)": 3.721781937040263, "C(tgrade)": 16.201641000650262,
                         "tsize": 16.506407179582673,
                         "C(horTh):C(menostat)": 0.189249944787799},
    ("cox formula", 3): {"age": 1.818576625123693, "C(horTh)": 4.831709986726609,
                         "C(menostat)": 2.843218814614340, "C(tgrade)": 16.201641000650262,
                         "tsize": 16.506407179582673,
                         "C(horTh):C(menostat)": 0.189249944787799},
}


@pytest.mark.parametrize("kind, typ", list(R_ANOVA))
def test_type_ii_and_iii_wald_tests_equal_car(results, kind, typ):
    table = results[kind].anova_wald(typ)
    reference = R_ANOVA[kind, typ]
    assert set(table.index) == set(reference)
    for term, chisq in reference.items():
        # the federated fit converges to 1e-10; R's glm and coxph to their own tolerances
        assert table.loc[term, "Chisq"] == pytest.approx(chisq, rel=1e-6), term
    assert table.loc["C(tgrade)", "Df"] == 2


def test_without_interactions_type_ii_is_the_joint_test(results):
    res = results["logistic"]
    table = res.anova_wald(2)
    joint = res.wald_test_terms()
    for term in table.index:
        assert table.loc[term, "Chisq"] == pytest.approx(joint.loc[term, "statistic"],
                                                         rel=1e-12)


def test_anova_deviance_of_a_linear_term_against_its_spline_equals_statsmodels(gbsg2):
    sm = pytest.importorskip("statsmodels.formula.api")
    linear = glm("cens ~ C(horTh) + age", gbsg2, family="binomial", clients="site")
    spline = glm("cens ~ C(horTh) + bs(age, df=4)", gbsg2, family="binomial", clients="site")
    table = anova_deviance(linear, spline)
    knots = spline.design["factors"]["bs(age, df=4)"]["knots"]
    import statsmodels.api as sma

    family = sma.families.Binomial()
    ref_linear = sm.glm("cens ~ C(horTh) + age", gbsg2, family=family).fit()
    inner = knots[4:-4]
    ref_spline = sm.glm(f"cens ~ C(horTh) + bs(age, knots={inner}, degree=3, "
                        f"lower_bound={knots[0]}, upper_bound={knots[-1]})", gbsg2,
                        family=family).fit()
    assert table.loc[2, "deviance_diff"] == pytest.approx(
        ref_linear.deviance - ref_spline.deviance, rel=1e-6)
    assert table.loc[2, "df_diff"] == 3
    with pytest.raises(ValueError, match="not nested"):
        anova_deviance(glm("cens ~ C(horTh) + tsize", gbsg2, family="binomial",
                           clients="site"), spline)


def test_the_ph_test_and_curves_of_a_cox_formula(results, gbsg2):
    pytest.importorskip("matplotlib")
    from lifelines import CoxPHFitter
    from lifelines.statistics import proportional_hazard_test as lifelines_test

    from skfed.plotting import plot_survival

    res = coxph("Surv(time, cens) ~ age + C(horTh) + C(tgrade)", gbsg2, clients="site")
    ours = res.proportional_hazard_test(time_transform="km")
    assert proportional_hazard_test(res, time_transform="km").equals(ours)
    cph = CoxPHFitter().fit(gbsg2[["time", "cens", "age", "horTh", "tgrade"]], "time", "cens",
                            formula="age + horTh + tgrade")
    ref = lifelines_test(cph, gbsg2[["time", "cens", "age", "horTh", "tgrade"]],
                         time_transform="km").summary
    ours_by_name = ours.drop(index="GLOBAL")["test_statistic"].rename(
        lambda name: re.sub(r"C\((\w+)\)", r"\1", name))
    np.testing.assert_allclose(ours_by_name[ref.index].to_numpy(),
                               ref["test_statistic"].to_numpy(), rtol=1e-5)
    with pytest.raises(TypeError, match="own rows"):
        proportional_hazard_test(res, gbsg2)
    profiles = pd.DataFrame({"age": [50, 50], "horTh": ["no", "yes"], "tgrade": ["II", "II"]},
                            index=["no hormone", "hormone"])
    survival = res.predict_survival_function(profiles, times=[365.0, 1825.0])
    X = pd.DataFrame({"age": [50.0, 50.0], "C(horTh)[T.yes]": [0.0, 1.0],
                      "C(tgrade)[T.II]": [1.0, 1.0], "C(tgrade)[T.III]": [0.0, 0.0]})
    np.testing.assert_allclose(survival, res.estimator.predict_survival_function(
        X[res.param_names], times=[365.0, 1825.0]), rtol=1e-12)
    assert survival[1, 1] > survival[0, 1]  # hormone therapy: a lower hazard
    fig = plot_survival(res, profiles)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["no hormone",
                                                                          "hormone"]


def test_coxph_formula_takes_a_time_grid(gbsg2):
    res = coxph("Surv(time, cens) ~ age + C(horTh)", gbsg2, clients="site",
                time_grid=[0, 365, 730, 1095, 1460, 1825, 2190, 2555, 2920])
    assert res.estimator.time_grid_ is not None and len(res.estimator.time_grid_) == 9
    exact = coxph("Surv(time, cens) ~ age + C(horTh)", gbsg2, clients="site")
    # a yearly grid: near the exact fit, not equal to it
    assert res.params["C(horTh)[T.yes]"] == pytest.approx(
        exact.params["C(horTh)[T.yes]"], abs=0.05)
    assert res.params["C(horTh)[T.yes]"] != exact.params["C(horTh)[T.yes]"]


def test_a_mixed_formula_summary_names_its_response(results):
    assert "np.log(tsize)" in str(results["mixed formula"].summary())


def test_a_mixed_formula_predicts_from_rows_in_its_variables(results, gbsg2):
    res = results["mixed formula"]
    rows = gbsg2.iloc[:5].assign(clinic=lambda f: f.site + "0")
    fixed = res.predict(rows)
    X = np.column_stack([np.ones(5), (rows.horTh == "yes").astype(float), rows.age])
    np.testing.assert_allclose(fixed, X @ res.fe_params[["Intercept", "C(horTh)[T.yes]",
                                                         "age"]].to_numpy(), rtol=1e-12)
    with_groups = res.predict(rows, groups="clinic")  # each clinic's predicted effect added
    effects = res.random_effects_frame.iloc[:, 0]
    np.testing.assert_allclose(with_groups - fixed, effects.loc[rows.clinic].to_numpy(),
                               rtol=1e-10)
