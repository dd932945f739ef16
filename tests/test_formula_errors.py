"""Formulas skfed refuses, with a message naming the column, the term or the level.

Each refusal happens before any model is fitted: at the analyst for what the
schema, the allow-list and the pooled levels decide, at a site (naming it) for
what only its rows can tell (a rare level, a response outside the family's
range, no complete row).
"""

import numpy as np
import pandas as pd
import pytest

from skfed.data import SiteError
from skfed.formula import FormulaError, coxph, design, glm


def _frame(n=200, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"age": rng.normal(60, 10, n), "sex": rng.choice(["F", "M"], n),
                       "smoke": rng.choice(["current", "former", "never"], n),
                       "grade": rng.integers(1, 4, n), "x": rng.normal(size=n),
                       "time": rng.exponential(5, n), "event": rng.random(n) < 0.6})
    df["died"] = (rng.random(n) < 0.4).astype(int)
    return df


DATA = _frame()
SITES = np.arange(len(DATA)) % 2


def test_an_unknown_column_is_named_with_the_closest():
    with pytest.raises(FormulaError, match=r"column 'agee'.*did you mean 'age'"):
        glm("died ~ agee + sex", DATA, family="binomial", clients=SITES)
    with pytest.raises(FormulaError, match="column 'dead'"):
        glm("dead ~ age", DATA, family="binomial", clients=SITES)
    with pytest.raises(FormulaError, match="column 'weight'"):
        glm("died ~ np.log(weight)", DATA, family="binomial", clients=SITES)


@pytest.mark.parametrize("term, named", [
    ("np.sin(age)", "np.sin"), ("C(sex, Sum)", "treatment"), ("poly(age, 2)", "poly"),
    ("{age + 1}", "{age + 1}"), ("age.mean()", "age.mean"), ("I(age > 60)", "age > 60"),
    ("cr(x, df=4)", "cr(), are not built yet"), ("poly(x, 2)", "I(x ** 2)"),
    ("C(np.log(age))", "column name first"),
    ("bs(np.log(age), df=4)", "column name first"), ("I(age ** x.y)", "x.y"),
])
def test_a_term_outside_the_allow_list_is_named(term, named):
    with pytest.raises(FormulaError) as error:
        glm("died ~ age + " + term, DATA, family="binomial", clients=SITES)
    assert named in str(error.value)


def test_a_level_absent_everywhere_and_an_unlisted_level():
    with pytest.raises(FormulaError, match=r"\['quit'\] of column 'smoke' are held by no site"):
        glm("died ~ C(smoke, levels=['never', 'former', 'current', 'quit'])", DATA,
            family="binomial", clients=SITES)
    with pytest.raises(FormulaError, match=r"'smoke' has level\(s\) \['current'\]"):
        glm("died ~ C(smoke, levels=['never', 'former'])", DATA, family="binomial",
            clients=SITES)


def test_a_reference_level_that_does_not_exist():
    with pytest.raises(FormulaError, match=r"reference level 'X' is not a level of column "
                                           r"'sex'; its levels are \['F', 'M'\]"):
        glm("died ~ C(sex, Treatment('X'))", DATA, family="binomial", clients=SITES)
    with pytest.raises(FormulaError, match="reference level 7"):
        glm("died ~ C(grade, Treatment(reference=7))", DATA, family="binomial",
            clients=SITES)


def test_a_rare_level_at_a_site_is_refused_by_that_site():
    data = DATA.copy()
    data.loc[[0, 2], "smoke"] = "quit"  # two rows of site 0
    with pytest.raises(SiteError, match=r"site 0: a level of column 'smoke' is held by "
                                        r"fewer than 5 rows"):
        glm("died ~ smoke", data, family="binomial", clients=SITES)
    # the site's own threshold is the analyst's min_level_count (1: every level released)
    fitted = glm("died ~ smoke", data, family="binomial", clients=SITES, min_level_count=1)
    assert "smoke[T.quit]" in fitted.param_names


def test_a_numeric_transform_of_a_text_column():
    with pytest.raises(FormulaError, match="needs numbers, but column 'sex' is text"):
        glm("died ~ np.log(sex)", DATA, family="binomial", clients=SITES)
    with pytest.raises(FormulaError, match="column 'sex' is text"):
        glm("sex ~ age", DATA, clients=SITES)


def test_a_binomial_response_must_be_zero_or_one():
    with pytest.raises(SiteError, match="binomial response is 0 or 1"):
        glm("grade ~ age", DATA, family="binomial", clients=SITES)


def test_a_family_or_link_skfed_does_not_fit():
    sm = pytest.importorskip("statsmodels.api")
    with pytest.raises(FormulaError, match="inverse link"):
        glm("x ~ age", DATA, family=sm.families.Gamma(), clients=SITES)
    with pytest.raises(FormulaError, match="family 'probit'"):
        glm("died ~ age", DATA, family="probit", clients=SITES)


def test_a_site_without_a_complete_row():
    data = DATA.copy()
    data.loc[SITES == 1, "x"] = np.nan
    with pytest.raises(FormulaError, match="site 1 has no complete row"):
        glm("died ~ x", data, family="binomial", clients=SITES)


def test_an_infinite_transform_is_refused_naming_the_factor():
    data = DATA.assign(count=np.arange(len(DATA)) % 5)
    with pytest.raises(SiteError, match=r"np.log\(count\) is infinite"):
        glm("died ~ np.log(count)", data, family="binomial", clients=SITES)


def test_syntax_errors_and_responses():
    with pytest.raises(FormulaError, match="cannot parse"):
        glm("died ~ age +", DATA, clients=SITES)
    with pytest.raises(FormulaError, match="one response"):
        glm("died + age ~ x", DATA, clients=SITES)
    with pytest.raises(FormulaError, match="non-empty string"):
        glm("", DATA, clients=SITES)
    with pytest.raises(FormulaError, match=r"several parts \('\|'\)"):
        glm("died ~ age | x", DATA, clients=SITES)
    with pytest.raises(FormulaError, match=r"Numeric literals other than `1`[^\n]*$"):
        glm("died ~ age + 2", DATA, clients=SITES)


def test_cox_times_and_events_must_be_named():
    with pytest.raises(FormulaError, match="needs its times and events"):
        coxph("age + sex", DATA, clients=SITES)
    with pytest.raises(FormulaError, match=r"Surv takes \(time, event\)"):
        coxph("Surv(time) ~ age", DATA, clients=SITES)
    with pytest.raises(FormulaError, match="column 'evnt'"):
        coxph("Surv(time, evnt) ~ age", DATA, clients=SITES)
    with pytest.raises(FormulaError, match="'grade' is a stratum and a covariate"):
        coxph("Surv(time, event) ~ age + grade", DATA, clients=SITES, strata=["grade"])


def test_data_and_clients_are_checked():
    with pytest.raises(FormulaError, match="clients='hospital' is not a column"):
        design("died ~ age", DATA, clients="hospital")
    with pytest.raises(FormulaError, match="DataFrame or a FederatedDataset"):
        design("died ~ age", DATA.to_numpy(), clients=SITES)
    with pytest.raises(FormulaError, match="offset= or exposure="):
        glm("died ~ age", DATA, clients=SITES, offset="x", exposure="x")
