"""The term list: patsy's names, order and coding, and the schema a site checks.

Names are compared with patsy's own (``dmatrix(...).design_info.column_names``,
what ``statsmodels.formula.api`` names its rows) on formulas exercising every
rule: the reference level, full-rank coding without an intercept or without a
main effect, interactions of text, boolean and integer columns, numeric
transforms, splines. The values of the design are compared with patsy's matrix
too. No model is fitted here.
"""

import json

import numpy as np
import pandas as pd
import pytest

from skfed.data import SiteData
from skfed.formula import DesignError, design
from skfed.formula._design import check_design, design_rows
from skfed.formula._parse import patsy_name
from skfed.formula._terms import design_columns

patsy = pytest.importorskip("patsy")


def _frame(n=240, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "y": rng.normal(size=n), "age": rng.normal(60, 10, n), "x": rng.normal(size=n),
        "bmi": np.exp(rng.normal(3.2, 0.2, n)), "sex": rng.choice(["F", "M"], n),
        "smoke": rng.choice(["current", "former", "never"], n), "chf": rng.random(n) < 0.4,
        "grade": rng.integers(1, 4, n)})


DATA = _frame()
SITES = np.arange(len(DATA)) % 3

FORMULAS = [
    "y ~ age + C(sex) + age:C(sex) + np.log(bmi) + I(age**2)",
    "y ~ chf + C(grade) + sex",
    "y ~ age:C(sex)",
    "y ~ 0 + C(sex) + C(grade)",
    "y ~ C(sex, Treatment('M')) * C(grade, Treatment(reference=3))",
    "y ~ C(grade, Treatment(1)) + C(smoke, Treatment(reference='never'))",
    "y ~ C(sex) * x * age",
    "y ~ chf:sex",
    "y ~ smoke:sex:chf",
    "y ~ smoke * sex - 1",
    "y ~ C(grade):x + C(grade)",
    "y ~ x + I(x**2) + I(x**3) - 1",
    "y ~ np.sqrt(bmi) + np.exp(x) + I((age - 60) / 10) + np.log1p(bmi)",
    "y ~ C(smoke, levels=['never', 'former', 'current']) + Q('age')",
    "y ~ bs(x, df=4) + bs(age, 5, degree=2) + bs(bmi, knots=[22, 26], include_intercept=True)",
    "y ~ bs(x, df=3, degree=1):sex + C(grade)",
]


@pytest.mark.parametrize("formula", FORMULAS)
def test_columns_named_ordered_and_valued_as_patsy(formula):
    ours = design(formula, DATA, clients=SITES, min_level_count=1)
    theirs = patsy.dmatrix(formula.split("~")[1], DATA, return_type="dataframe")
    assert [c["name"] for c in ours["columns"]] == list(theirs.columns)
    built = design_rows(SiteData("all", DATA), ours).X
    np.testing.assert_allclose(built.to_numpy(), theirs.to_numpy(), rtol=1e-12, atol=1e-13)


def test_a_pandas_categorical_keeps_its_declared_order():
    data = DATA.assign(stage=pd.Categorical(DATA["smoke"],
                                            categories=["never", "former", "current"]))
    ours = design("y ~ stage + age:stage", data, clients=SITES, min_level_count=1)
    theirs = patsy.dmatrix("stage + age:stage", data)
    assert [c["name"] for c in ours["columns"]] == theirs.design_info.column_names


@pytest.mark.parametrize("code", [
    "I(age**2)", "np.log(x+1)", "I(-x)", "C(sex,Treatment('b'))",
    'C(sex, Treatment(reference="b"))',
    "bs(x , df = 4, degree=2)", "I(weight/height**2)", "np.log( bmi )", "I(x - -1)",
    "I(x ** -1)", "bs(x, knots=[1,2, 3])", "I((x-50)/10)", "I(x - 1e-3)", "f(*a, **k)",
    "a[1:2]", "Q('a b')"])
def test_factor_names_have_patsy_spacing(code):
    assert patsy_name(code) == patsy.tokens.normalize_token_spacing(code)


def test_terms_absorb_lower_order_terms_as_patsy():
    # y ~ a:b with an intercept: the subterms of a:b not spanned by the intercept are
    # a, b and a:b; patsy absorbs them into b (treatment), then a (treatment) times b
    # with every level
    levels = {"a": (["p", "q"], 0), "b": (["u", "v"], 0)}
    names = [c["name"] for c in design_columns([(), ("a", "b")], {}, levels)]
    assert names == ["Intercept", "b[T.v]", "a[T.q]:b[u]", "a[T.q]:b[v]"]
    assert names == list(patsy.dmatrix("a:b", pd.DataFrame(
        {"a": ["p", "q", "p", "q"], "b": ["u", "u", "v", "v"]})).design_info.column_names)


def test_the_design_is_json_and_every_level_and_knot_is_data():
    ours = design("y ~ C(sex) + bs(x, df=4) + np.log(bmi)", DATA, clients=SITES)
    assert json.loads(json.dumps(ours)) == ours
    assert ours["factors"]["C(sex)"]["levels"] == ["F", "M"]
    np.testing.assert_allclose(ours["factors"]["bs(x, df=4)"]["knots"][4],
                               np.percentile(DATA["x"], 50), rtol=0, atol=0)
    assert ours["factors"]["np.log(bmi)"]["expr"] == {"call": "log", "args": [{"column": "bmi"}]}


def _tampered(change):
    wire = json.loads(json.dumps(design("y ~ np.log(bmi) + sex", DATA, clients=SITES)))
    change(wire)
    return wire


@pytest.mark.parametrize("change, message", [
    (lambda d: d["factors"]["np.log(bmi)"]["expr"].update(call="eval"), "not an allowed"),
    (lambda d: d["factors"]["np.log(bmi)"].update(expr={"op": "system", "args": []}),
     "not an allowed"),
    (lambda d: d["factors"]["np.log(bmi)"].update(expr={"code": "import os"}), "argument list"),
    (lambda d: d["factors"]["sex"].update(kind="python"), "no known kind"),
    (lambda d: d.update(format="pickle"), "format"),
    (lambda d: d["columns"].append({"name": "z", "term": "z", "parts": [["z", None]]}),
     "unknown factor"),
    (lambda d: d["factors"]["np.log(bmi)"].update(expr=_deep(40)), "small dict"),
])
def test_a_site_refuses_a_design_outside_the_schema(change, message):
    with pytest.raises(DesignError, match=message):
        check_design(_tampered(change))
    with pytest.raises(DesignError):
        design_rows(SiteData("a", DATA), _tampered(change))


def _deep(depth):
    tree = {"column": "bmi"}
    for _ in range(depth):
        tree = {"call": "abs", "args": [tree]}
    return tree
