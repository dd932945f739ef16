"""What a site service serves of a formula: transforms it approves, rows it approves.

A formula reaches a site as a design (:mod:`skfed.formula._design`); before any
of its rows is read, the site's rules decide (the row steps' declared checks):

- **how much of the language** the site serves (its policy's ``formulas``):
  ``"none"``, the transforms each dataset declares (``"declared"``), or the
  closed vocabulary (``"closed"``, the default);
- **no row indicator from an analyst's constant**: ``abs`` and a power whose
  exponent reads a column are refused (``0 ** (|x - c| - (x - c))`` is the
  indicator of ``x >= c``); the vocabulary has no comparison, ``sign``,
  ``floor``, ``round``, ``min`` or ``max``;
- **finite on the declared domain, from the schema**: each expression is
  evaluated in interval arithmetic over the columns' declared ranges (the reals
  where a dataset declares none): ``log(bmi)`` needs ``bmi``'s range above 0,
  ``log(bmi - c)`` above ``c``, ``1 / x`` a range without 0, ``exp(x)`` an upper
  bound. A transform that could give NaN or infinity on a value of the domain is
  refused before it runs, so complete cases come from the raw columns only (a
  site reads a value outside its column's declared range as missing);
- **weights** are a column the dataset declares as a weight;
- **spline knots at an approved grid**: the column's declared range lies within
  the knots' bounds (no row outside the basis; where the site releases its
  extremes, ``allow_exact_quantiles``, its rows' range is enough), and each
  basis function's support holds 0 or at least ``min_rows`` of the site's rows
  (a degree-0 spline between close knots is a row indicator);
- **categories**: every level the site holds is one of the design's and is held
  by at least ``min_level_count`` rows (a level list cannot probe for a rare
  value).

Each refusal says which rule and which factor, never a row's value or a count.
"""

import functools
import json
import math

import numpy as np
import pandas as pd

from ..data.levels import check_levels
from ..federation.operations import Refused, dataset_key_check
from ._parse import read_factor
from ._vocabulary import FUNCTIONS, basis_support, plain_level, tree_columns

#: the functions that would make a row indicator from an analyst's constant
INDICATOR_FUNCTIONS = ("abs",)
#: the exponent of ``exp`` above which float64 overflows
_EXP_MAX = 709.0


def numeric_trees(design):
    """``[(what, tree)]``: every expression a design evaluates (its numeric factors,
    response and offset)."""
    trees = [(name, f["expr"]) for name, f in design["factors"].items()
             if f.get("kind") == "numeric"]
    response = design.get("response") or {}
    trees += [(f"the response's {k}", response[k]) for k in ("expr", "time", "event")
              if k in response]
    if design.get("offset") is not None:
        trees.append(("the offset", design["offset"]["expr"]))
    return trees


def _refuse(rule, what, detail):
    raise Refused(rule, f"{what}: {detail}", public=True)


def check_vocabulary(what, tree):
    """No operator of ``tree`` builds a row indicator from an analyst's constant."""
    call = tree.get("call")
    if call in INDICATOR_FUNCTIONS:
        _refuse("formulas", what, f"{call}() makes a row indicator from a constant "
                                  "(|x - c| - (x - c) is 0 exactly where x >= c)")
    if tree.get("op") == "pow" and tree_columns(tree["args"][1]):
        _refuse("formulas", what, "a power's exponent must be a constant (a power with "
                                  "a column in its exponent makes row indicators)")
    for arg in tree.get("args", []):
        check_vocabulary(what, arg)


# --- interval arithmetic over the declared domains -------------------------------------
def _products(a, b):
    values = []
    for x in a:
        for y in b:
            values.append(0.0 if (x == 0 or y == 0) else x * y)
    return min(values), max(values)


def _power(base, exponent, what):
    lo, hi = float(base[0]), float(base[1])
    if float(exponent).is_integer():
        k = int(exponent)
        if k < 0 and lo <= 0 <= hi:
            _refuse("domains", what, "a negative power of a range that holds 0")
        ends = [v ** k if not (v == 0 and k < 0) else math.inf for v in (lo, hi)
                if math.isfinite(v) or k > 0]
        if k % 2 == 0 and lo < 0 < hi:
            ends.append(0.0)
        if not math.isfinite(lo) or not math.isfinite(hi):  # unbounded: the power too
            return (-math.inf if k % 2 and not math.isfinite(lo) else min(ends + [0.0])
                    if k > 0 else 0.0, math.inf)
        return min(ends), max(ends)
    if lo < 0 or (exponent < 0 and lo <= 0):
        _refuse("domains", what, "a fractional power of a range below 0")
    ends = [lo ** exponent, hi ** exponent if math.isfinite(hi) else math.inf]
    return min(ends), max(ends)


def _function(name, value, what):
    lo, hi = value
    if name in ("log", "log2", "log10"):
        if not lo > 0:
            _refuse("domains", what, f"{name}() of a range that is not above 0 (declare "
                                     "the column's domain)")
    elif name == "log1p" and not lo > -1:
        _refuse("domains", what, "log1p() of a range that is not above -1")
    elif name == "sqrt" and not lo >= 0:
        _refuse("domains", what, "sqrt() of a range below 0 (declare the column's domain)")
    elif name in ("exp", "expm1") and not hi <= _EXP_MAX:
        _refuse("domains", what, f"{name}() of a range without an upper bound below "
                                 f"{_EXP_MAX:g} (float64 overflows: declare the column's "
                                 "domain)")
    with np.errstate(all="ignore"):
        ends = FUNCTIONS[name](np.array([lo, hi]))
    if name == "square":
        return (0.0 if lo < 0 < hi else float(min(ends)), float(max(ends)))
    return float(min(ends)), float(max(ends))


def interval(tree, domains, what):
    """The range of an expression over the columns' declared ranges (the reals where a
    column declares none), or a refusal (rule ``domains``) where the expression is not
    finite on all of it."""
    if "column" in tree:
        return domains.get(tree["column"], (-math.inf, math.inf))
    if "number" in tree:
        return float(tree["number"]), float(tree["number"])
    if "call" in tree:
        return _function(tree["call"], interval(tree["args"][0], domains, what), what)
    op, args = tree["op"], tree["args"]
    if op == "pow":  # a constant exponent (the vocabulary's rule)
        exponent = interval(args[1], domains, what)[0]
        try:
            return _power(interval(args[0], domains, what), exponent, what)
        except (OverflowError, ZeroDivisionError):
            _refuse("domains", what, "a power that overflows on the declared domain")
    values = [interval(a, domains, what) for a in args]
    if op == "neg":
        return -values[0][1], -values[0][0]
    if op == "pos":
        return values[0]
    a, b = values
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        return _products(a, b)
    if b[0] <= 0 <= b[1]:  # div
        _refuse("domains", what, "a division by a range that holds 0 (declare the "
                                 "column's domain)")
    return _products(a, (1.0 / b[1], 1.0 / b[0]))


# --- the rules of a design, at a site --------------------------------------------------
def design_rules(site, values, rules):
    """A design's factors under the site's rules (see the module docstring), from the
    schema alone (no row is read); a declared check of the formula's row steps."""
    design = values["design"]
    if rules.formulas == "none":
        raise Refused("formulas", "this site serves no formula", public=True)
    declared = rules.declared
    for what, tree in numeric_trees(design):
        check_vocabulary(what, tree)
        if rules.formulas == "declared" and not _declared(tree, declared):
            _refuse("formulas", what, "not one of the transforms this dataset declares")
        interval(tree, declared.domains, what)
    weights = design.get("weights")
    if weights is not None and weights["column"] not in declared.weights:
        raise Refused("columns", f"column {weights['column']!r} is not one this dataset "
                                 "declares as a weight", columns=[weights["column"]],
                      public=True)


def matrix_rules(site, values, rules):
    """:func:`design_rules`, and the rows a design matrix reads under them: a spline's
    knots and a categorical's levels (a declared check of the design step)."""
    design_rules(site, values, rules)
    declared = rules.declared
    for name, factor in values["design"]["factors"].items():
        if factor.get("kind") == "spline" and factor.get("knots") is not None:
            _spline_rules(site, name, factor, declared, rules)
        elif factor.get("kind") == "categorical" and factor.get("levels") is not None:
            _level_rules(site, name, factor, rules)


@dataset_key_check("transforms")
def check_transforms(texts):
    """A dataset's declared transforms (``transforms = ["np.log(bmi)"]``): each a numeric
    formula term of the closed vocabulary, with no row indicator (a site's check of its
    configuration)."""
    if not isinstance(texts, list):
        return None  # the key's type is checked with the others
    for text in texts:
        try:
            factor = read_factor(str(text))
        except ValueError as exc:
            return f"{text!r} is not a formula term ({exc})"
        if factor.get("kind") != "numeric":
            return f"{text!r} is not a numeric transform of columns"
        try:
            check_vocabulary(str(text), factor["expr"])
        except Refused as exc:
            return exc.detail
    return None


@functools.lru_cache(maxsize=1024)
def _declared_tree(text):
    """A declared transform's expression tree, parsed once (``None``: not numeric)."""
    try:
        factor = read_factor(text)
    except ValueError:
        return None
    return json.dumps(factor["expr"], sort_keys=True) if factor.get("kind") == "numeric" \
        else None


def _declared(tree, declared):
    wanted = json.dumps(tree, sort_keys=True)
    return any(_declared_tree(text) == wanted for text in declared.transforms or ())


def _spline_rules(site, name, factor, declared, rules):
    """A spline's knots: the column's declared range within their bounds, and each basis
    function's support (a degree-0 spline's is one interval: an indicator) holding 0
    or at least ``min_rows`` rows here."""
    column = factor["column"]
    knots = np.unique(np.asarray(factor["knots"], dtype=np.float64))
    low, high = declared.domains.get(column, (-math.inf, math.inf))
    x = pd.to_numeric(site.X[column], errors="coerce").to_numpy(dtype=np.float64)
    x = x[~np.isnan(x)]
    if not (knots[0] <= low and high <= knots[-1]):
        # a row outside the bounds would be refused: a probe of the column's extremes,
        # which only a site that releases them (allow_exact_quantiles) may answer
        if not rules.allow_exact_quantiles:
            _refuse("domains", name, f"the column {column!r}'s declared range must lie "
                                     "within the spline's bounds (lower_bound, upper_bound)")
        if x.size and (x.min() < knots[0] or x.max() > knots[-1]):
            raise Refused("domains", f"{name}: values outside the spline's bounds",
                          columns=[column])
    degree = factor["degree"]
    for j in range(len(factor["knots"]) - degree - 1):  # every basis function's support
        count = np.count_nonzero(basis_support(x, factor["knots"], degree, j))
        if 0 < count < rules.min_rows:
            raise Refused("min_rows", f"{name}: a basis function's support holds fewer "
                                      f"than {rules.min_rows} rows here (knots at the site's "
                                      "approved grid: coarser knots)", columns=[column],
                          public=True)


def _level_rules(site, name, factor, rules):
    """Every level the site holds is one of the design's and held by at least
    ``min_level_count`` rows: a level list cannot ask whether a rare value exists."""
    column = site.X[factor["column"]]
    values = column[column.notna()]
    check_levels([values], [factor["column"]], rules.min_level_count)
    allowed = {str(level) for level in factor["levels"]}
    if any(str(plain_level(v)) not in allowed for v in pd.unique(values)):
        raise Refused("formulas", f"{name}: column {factor['column']!r} holds a level that "
                      "is not one of the formula's", columns=[factor["column"]], public=True)
