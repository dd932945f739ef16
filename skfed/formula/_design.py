"""What a site runs for a formula: its complete rows, its levels, and its design matrix.

A formula reaches a site as a *design*: plain data (``json.dumps`` writes it)
that :func:`check_design` reads against a closed schema before anything else
runs. Numeric factors are expression trees over the site's columns with the
operations of :data:`OPERATIONS` and :data:`FUNCTIONS` only; categorical factors
are a column and its levels; splines a column, knots and a degree. Nothing a
site receives is evaluated as code.

- :func:`complete_rows` (a row step): the rows with a value for every column
  and factor the formula uses (statsmodels' ``missing="drop"``: complete cases);
- :func:`site_levels` (a per-site release): the levels of each categorical
  column, each held by at least ``min_count`` rows, else a refusal naming the
  column;
- :func:`site_extremes` (a per-site release): a spline column's minimum and
  maximum (single rows' values, as the exact quantiles of ``skfed.stats``);
- :func:`design_rows` (a row step): the design matrix as a table with the
  columns' names, the response, offsets and weights.
"""

import functools

import numpy as np
import pandas as pd

from .._messages import show
from ..data.site import SiteData, SiteError, site_rows
from ..federation.combine import Combine, add_counts
from ..federation.operations import COUNTS, SUMS, Arg, check_deadline, row_step, site_operation
from ..stats._levels import sorted_levels
from ._errors import DesignError
from ._site_rules import design_rules, matrix_rules
from ._vocabulary import FUNCTIONS, OPERATIONS, basis_support, plain_level, tree_columns

#: the formats of a design this module reads
FORMAT = "skfed.formula/1"
#: the deepest expression tree a site evaluates, and the most factors, design columns,
#: levels per factor and knots per spline a design may hold (they bound a site's work
#: before it starts: a B-spline's cost grows with its knots squared)
MAX_DEPTH = 32
MAX_FACTORS, MAX_COLUMNS, MAX_LEVELS, MAX_KNOTS = 256, 1024, 1024, 64
_RESPONSE_KINDS = ("numeric", "binary", "survival")


# --- the schema a site checks ------------------------------------------------------
def _check_tree(tree, depth=0):
    if depth > MAX_DEPTH or not isinstance(tree, dict) or len(tree) not in (1, 2):
        raise DesignError("an expression is a small dict (column, number, op or call).")
    if set(tree) == {"column"} and isinstance(tree["column"], str):
        return
    if set(tree) == {"number"} and type(tree["number"]) in (int, float) and np.isfinite(
            tree["number"]):
        return
    args = tree.get("args")
    if not isinstance(args, list):
        raise DesignError(f"an expression node {sorted(tree)} has no argument list.")
    if set(tree) == {"op", "args"} and tree["op"] in OPERATIONS:
        expected = OPERATIONS[tree["op"]][1]
    elif set(tree) == {"call", "args"} and tree["call"] in FUNCTIONS:
        expected = 1
    else:
        raise DesignError(f"an expression node {show(tree.get('op', tree.get('call')))} is "
                          "not an allowed operation.")
    if len(args) != expected:
        raise DesignError(f"{show(tree.get('op', tree.get('call')))} takes {expected} "
                          "argument(s).")
    for arg in args:
        _check_tree(arg, depth + 1)


def _check_factor(name, factor):
    kind = factor.get("kind") if isinstance(factor, dict) else None
    if kind == "numeric":
        _check_tree(factor.get("expr"))
    elif kind == "categorical":
        levels = factor.get("levels")
        if not isinstance(factor.get("column"), str) or not (levels is None or (
                isinstance(levels, list) and len(levels) <= MAX_LEVELS and all(
                    type(v) in (str, int, float, bool) for v in levels))):
            raise DesignError(f"factor {name!r}: a column and a list of at most "
                              f"{MAX_LEVELS} levels.")
    elif kind == "spline":
        knots = factor.get("knots")
        if factor.get("basis") != "bs" or not isinstance(factor.get("column"), str) or (
                type(factor.get("degree")) is not int or not 0 <= factor["degree"] <= 10) or (
                knots is not None and not (isinstance(knots, list) and len(knots) <= MAX_KNOTS
                                           and all(type(k) in (int, float) and np.isfinite(k)
                                                   for k in knots))):
            raise DesignError(f"factor {name!r}: a B-spline of a column, degree 0 to 10, "
                              f"at most {MAX_KNOTS} finite knots.")
    else:
        raise DesignError(f"factor {name!r} has no known kind (numeric, categorical, "
                          "spline).")


def check_design(design):
    """Refuse a design that does not follow the schema (what a site does first).

    Parameters
    ----------
    design : dict
        A design (:func:`skfed.formula._models.build_design`), possibly
        incomplete (no columns yet, categorical levels ``None``).

    Raises
    ------
    DesignError
        The first thing that is not as the schema says.
    """
    if not isinstance(design, dict) or design.get("format") != FORMAT:
        raise DesignError(f"not a formula design of format {FORMAT!r}.")
    factors, columns = design.get("factors"), design.get("columns", [])
    if not isinstance(factors, dict) or len(factors) > MAX_FACTORS:
        raise DesignError(f"a design's factors are a dict of at most {MAX_FACTORS}.")
    for name, factor in factors.items():
        _check_factor(name, factor)
    if not isinstance(columns, list) or len(columns) > MAX_COLUMNS or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str)
            and isinstance(c.get("parts"), list) and len(c["parts"]) <= 8 for c in columns):
        raise DesignError(f"a design's columns are a list of at most {MAX_COLUMNS}, each "
                          "a name and its parts.")
    for column in columns:
        for factor, selector in column["parts"]:
            if factor not in factors or not (selector is None or type(selector) is int):
                raise DesignError(f"column {column['name']!r} refers to an unknown factor.")
    response = design.get("response")
    if response is not None:
        if response.get("kind") not in _RESPONSE_KINDS:
            raise DesignError("the response is numeric, binary or survival.")
        for key in (("time", "event") if response["kind"] == "survival" else ("expr",)):
            _check_tree(response.get(key))
    if design.get("offset") is not None:
        _check_tree(design["offset"].get("expr"))
    if not all(isinstance(c, str) for c in design.get("keep", [])):
        raise DesignError("kept columns are column names.")
    weights = design.get("weights")
    if weights is not None and not (isinstance(weights, dict) and set(weights) == {"column"}
                                    and isinstance(weights["column"], str)):
        raise DesignError("the weights are a column: {'column': name}.")


# --- reading the site's columns ----------------------------------------------------
def _column(site, name):
    X = site.X
    if not hasattr(X, "columns"):
        raise SiteError(site.site, "a formula needs the site's rows as a table with named "
                                   "columns.")
    if name not in X.columns:
        raise SiteError(site.site, f"no column {name!r}; its columns are "
                                   f"{list(map(str, X.columns))}.")
    return X[name]


def _numbers(site, name):
    column = _column(site, name)
    if not (pd.api.types.is_numeric_dtype(column.dtype)
            or pd.api.types.is_bool_dtype(column.dtype)):
        raise SiteError(site.site, f"column {name!r} is not numeric (dtype {column.dtype}); "
                                   "a numeric term needs numbers (use C() for a category).")
    return column.to_numpy(dtype=np.float64, na_value=np.nan)


def evaluate(site, tree):
    """A numeric expression tree on the site's rows (NaN where a value is missing)."""
    if "column" in tree:
        return _numbers(site, tree["column"])
    if "number" in tree:
        return np.full(site.n_samples, float(tree["number"]))
    args = [evaluate(site, arg) for arg in tree["args"]]
    function = OPERATIONS[tree["op"]][0] if "op" in tree else FUNCTIONS[tree["call"]]
    with np.errstate(all="ignore"):  # NaN rows are dropped, infinities refused
        return function(*args)


def _categories(site, name):
    """``(values as Python objects, missing mask)`` of a categorical column."""
    column = _column(site, name)
    missing = column.isna().to_numpy()
    return column.astype(object).to_numpy(), missing


# --- the site functions --------------------------------------------------------------
def _used_values(site, design):
    """``{what: values}`` for every numeric factor, response, offset and weight, and
    the missing mask of every categorical, spline and kept column."""
    numeric, missing = {}, np.zeros(site.n_samples, dtype=bool)
    for name, factor in design["factors"].items():
        if factor["kind"] == "numeric":
            numeric[name] = evaluate(site, factor["expr"])
        elif factor["kind"] == "spline":
            numeric[name] = _numbers(site, factor["column"])
        else:
            missing |= _categories(site, factor["column"])[1]
    response = design.get("response")
    if response is not None:
        keys = ("time", "event") if response["kind"] == "survival" else ("expr",)
        for key in keys:
            numeric[f"the response's {key}"] = evaluate(site, response[key])
    if design.get("offset") is not None:
        numeric["the offset"] = evaluate(site, design["offset"]["expr"])
    for name in design.get("keep", []):
        missing |= _column(site, name).isna().to_numpy()
    if site.offset is not None:
        numeric["the site's offset"] = np.asarray(site.offset, dtype=np.float64)
    if site.sample_weight is not None:
        numeric["the weights"] = np.asarray(site.sample_weight, dtype=np.float64)
    if design.get("weights") is not None:
        numeric["the weights"] = _numbers(site, design["weights"]["column"])
    return numeric, missing


def _design_form(value):
    try:
        check_design(value)
    except DesignError as exc:
        return f"a malformed design: {str(exc)[:200]}"
    return None


def _design_reads(design):
    """The raw columns a design reads (for the audit line)."""
    columns = set(design.get("keep", []))
    for factor in design["factors"].values():
        columns |= ({factor["column"]} if "column" in factor else
                    set(tree_columns(factor["expr"])))
    response = design.get("response") or {}
    for key in ("expr", "time", "event"):
        if key in response:
            columns |= set(tree_columns(response[key]))
    if design.get("offset") is not None:
        columns |= set(tree_columns(design["offset"]["expr"]))
    if design.get("weights") is not None:
        columns.add(design["weights"]["column"])
    return sorted(columns)


_DESIGN = Arg("design", "value", check=_design_form)


@row_step("formula_complete_rows", selects=True, arguments=(_DESIGN,), reads=_design_reads,
          checks=(design_rules,),
          remedy="leave out the terms whose columns have a few missing values here, or ask "
                 "the site's officer to declare the dataset's analysis population, "
                 "population = \"complete\" (docs/data-officers.md)")
def complete_rows(site, design):
    """At a site (a row step): the rows with every value the formula uses.

    A row is dropped when a column the formula uses is missing there, or a
    numeric factor is NaN (``np.log`` of a negative number), as statsmodels'
    ``missing="drop"``; an infinite value is refused, naming the factor.

    Parameters
    ----------
    site : SiteData
    design : dict
        The design's factors, response, offset and kept columns (levels and
        columns not needed yet).

    Returns
    -------
    SiteData
        The complete rows (their original row numbers kept along).
    """
    check_design(design)
    numeric, missing = _used_values(site, design)
    for name, values in numeric.items():
        if np.isinf(values).any():
            raise SiteError(site.site, f"{name} is infinite in {int(np.isinf(values).sum())} "
                                       "row(s) (the log of 0?); drop those rows first.")
        missing |= np.isnan(values)
    return site_rows(site, ~missing)


def _level_names(site, values, rules):
    from ..stats._site import check_level_names

    check_level_names(site, values["columns"], rules)


def _level_parts(site, columns, min_count=1):
    """Per column: its levels (first seen first), each one's count by its text, and the
    declared categories (what :func:`site_levels` decides on; a partition's part)."""
    out = {}
    for name in columns:
        values, missing = _categories(site, name)
        text, counts = np.unique(pd.Series(values[~missing]).astype(str), return_counts=True)
        dtype = _column(site, name).dtype
        out[name] = {"values": list(dict.fromkeys(plain_level(v) for v in values[~missing])),
                     "counts": dict(zip(text.tolist(), counts.tolist())),
                     "declared": ([plain_level(v) for v in dtype.categories]
                                  if isinstance(dtype, pd.CategoricalDtype) else None)}
    return out


def _add_levels(parts):
    return {name: {"values": list(dict.fromkeys(v for p in parts for v in p[name]["values"])),
                   "counts": functools.reduce(add_counts, [p[name]["counts"] for p in parts]),
                   "declared": parts[0][name]["declared"]} for name in parts[0]}


def _levels_of(parts, args, site):
    """The reply from the levels' counts: a level under ``min_count`` rows refused."""
    columns, min_count = args
    out = {}
    for name in columns:
        counts = list(parts[name]["counts"].values())
        if counts and min(counts) < int(min_count):
            raise SiteError(site, f"a level of column {name!r} is held by fewer than "
                                  f"{int(min_count)} rows here (min_level_count); merge "
                                  "it with another level or drop those rows.")
        try:
            levels = sorted_levels(parts[name]["values"])
        except TypeError as exc:
            raise SiteError(site, f"column {name!r} holds values of type {exc}; a "
                                  "categorical column holds text, numbers or "
                                  "booleans.") from None
        out[name] = {"levels": levels, "declared": parts[name]["declared"]}
    return out


@site_operation(
    "formula.levels", releases=COUNTS,
    describes="per categorical column of a formula, the levels the site holds (each held "
              "by >= min_level_count rows, else a refusal naming the column)",
    arguments=(Arg("columns", "names", most=1024),
               Arg("min_count", "int", low=1, high=1 << 30, floor="min_level_count")),
    checks=(_level_names,), counts=lambda out: [],
    # an engine's partitions count each level; the rule and the order on the whole
    combine=Combine(lambda parts, args: _add_levels(parts), part=_level_parts,
                    finish=_levels_of))
def site_levels(site, columns, min_count):
    """At a site (a per-site release): the levels of categorical columns.

    Parameters
    ----------
    site : SiteData
    columns : list of str
    min_count : int
        The fewest rows a released level may hold (``min_level_count``).

    Returns
    -------
    dict
        ``{column: {"levels": sorted levels held here, "declared": the pandas
        categories in their order, or None}}``.

    Raises
    ------
    SiteError
        A level held by fewer than ``min_count`` rows here (naming the column,
        not the level), or values that are not text, numbers or booleans.
    """
    return _levels_of(_level_parts(site, columns), (columns, min_count), site.site)


@site_operation(
    "formula.extremes", releases=SUMS,
    requires="allow_exact_quantiles: a spline's boundary knots are single rows' values "
             "(the minimum and maximum)",
    describes="per spline column of a formula, its non-missing count, minimum and maximum "
              "(single rows' values: only with allow_exact_quantiles)",
    arguments=(Arg("columns", "names", most=1024),),
    combine=lambda replies: _merge_extremes(replies))  # counts added, min of minima ...
def site_extremes(site, columns):
    """At a site (a per-site release): each column's non-missing count, minimum and
    maximum (two single rows' values: the ends of a spline's knots)."""
    out = {}
    for name in columns:
        values = _numbers(site, name)
        values = values[~np.isnan(values)]
        out[name] = (int(values.size), float(values.min()) if values.size else np.nan,
                     float(values.max()) if values.size else np.nan)
    return out


def _merge_extremes(replies):
    """Parts' extremes as the whole's (an engine's partitions): counts added, the least
    minimum and the greatest maximum of the parts with values."""
    out = {}
    for name in replies[0]:
        parts = [r[name] for r in replies if r[name][0] > 0]
        out[name] = (int(sum(p[0] for p in parts)),
                     float(min(p[1] for p in parts)) if parts else np.nan,
                     float(max(p[2] for p in parts)) if parts else np.nan)
    return out


def bspline_basis(x, knots, degree, include_intercept):
    """patsy's ``bs`` basis of ``x`` at the full knot vector ``knots`` (B-splines by
    ``scipy.interpolate.splev``, one coefficient vector per basis function)."""
    from scipy.interpolate import splev

    knots = np.sort(np.asarray(knots, dtype=np.float64))
    n_bases = len(knots) - (degree + 1)
    basis = np.empty((len(x), n_bases))
    for i in range(n_bases):
        check_deadline()
        coefs = np.zeros(n_bases)
        coefs[i] = 1.0
        basis[:, i] = splev(x, (knots, coefs, degree))
    return basis if include_intercept else basis[:, 1:]


def _factor_values(site, name, factor):
    """A factor's values: numbers, level indices (categorical) or a basis (spline)."""
    if factor["kind"] == "numeric":
        return evaluate(site, factor["expr"])
    if factor["kind"] == "spline":
        x = _numbers(site, factor["column"])
        low, high = min(factor["knots"]), max(factor["knots"])
        if np.any((x < low) | (x > high)):
            raise SiteError(site.site, f"{name}: values of column {factor['column']!r} lie "
                                       f"outside the spline's range [{low:g}, {high:g}].")
        return bspline_basis(x, factor["knots"], factor["degree"],
                             factor["include_intercept"])
    values, missing = _categories(site, factor["column"])
    index = {level: k for k, level in enumerate(factor["levels"])}
    codes = np.array([-1 if gone else index.get(plain_level(v), -1)
                      for v, gone in zip(values, missing)], dtype=np.intp)
    if np.any(codes < 0):
        raise SiteError(site.site, f"{name}: column {factor['column']!r} has a value that is "
                                   "not one of the formula's levels.")
    return codes


def design_matrix(site, design, *, supports=False):
    """The design's columns on the site's rows, as a float table named as statsmodels
    (and, with ``supports``, each column's row set: the rows its categorical levels and
    spline intervals select)."""
    values = {name: _factor_values(site, name, factor)
              for name, factor in design["factors"].items()}
    matrix = np.ones((site.n_samples, len(design["columns"])))
    selected = np.ones(matrix.shape, dtype=bool)
    for j, column in enumerate(design["columns"]):
        for factor, selector in column["parts"]:
            v, spec = values[factor], design["factors"][factor]
            if spec["kind"] == "categorical":
                matrix[:, j] *= v == selector
                selected[:, j] &= v == selector
            else:
                matrix[:, j] *= v if selector is None else v[:, selector]
            if spec["kind"] == "spline":
                selected[:, j] &= _basis_interval(site, spec, selector)
    table = pd.DataFrame(matrix, columns=[c["name"] for c in design["columns"]])
    return (table, selected) if supports else table


def _basis_interval(site, spline, selector):
    """The rows where a spline's design column ``selector`` may be non-zero."""
    j = selector + (0 if spline["include_intercept"] else 1)
    return basis_support(_numbers(site, spline["column"]), spline["knots"], spline["degree"], j)


def _response(site, response):
    if response["kind"] == "survival":
        event, time = evaluate(site, response["event"]), evaluate(site, response["time"])
        return np.column_stack([event, time])
    y = evaluate(site, response["expr"])
    if response["kind"] == "binary" and not np.all(np.isin(y, (0.0, 1.0))):
        raise SiteError(site.site, f"a binomial response is 0 or 1; "
                                   f"{int(np.sum(~np.isin(y, (0.0, 1.0))))} value(s) are not.")
    return y


@row_step("formula_design", arguments=(_DESIGN,), reads=_design_reads, checks=(matrix_rules,))
def design_rows(site, design):
    """At a site (a row step): its rows as the formula's design.

    Parameters
    ----------
    site : SiteData
        Complete rows (:func:`complete_rows`).
    design : dict
        The full design (factors with their levels and knots, columns).

    Returns
    -------
    SiteData
        ``X``: the design matrix as a table (column names as statsmodels'),
        then the kept columns as they are; ``y``: the response (``(event,
        time)`` for survival); the offset (the design's, or the site's own) and
        the weights.
    """
    check_design(design)
    X, supports = design_matrix(site, design, supports=True)
    for name in design.get("keep", []):
        X[name] = _column(site, name).to_numpy()
    offset = site.offset
    if design.get("offset") is not None:
        if site.offset is not None:
            raise SiteError(site.site, "the site's rows carry their own offsets and the "
                                       "formula names another; give one.")
        offset = evaluate(site, design["offset"]["expr"])
        if design["offset"].get("log"):
            if np.any(offset <= 0):
                raise SiteError(site.site, "an exposure must be positive.")
            offset = np.log(offset)
    response = design.get("response")
    y = None if response is None else _response(site, response)
    weights = site.sample_weight
    if design.get("weights") is not None:
        if site.sample_weight is not None:
            raise SiteError(site.site, "the site's rows carry their own weights and the "
                                       "formula names another column; give one.")
        weights = _numbers(site, design["weights"]["column"])
    # the target is now the formula's response: the table's target name no longer says it
    meta = {k: v for k, v in site.meta.items() if k != "target_name"}
    return SiteData(site.site, X, y, weights, dict(meta, supports=supports), offset=offset)
