"""From a parsed formula and a dataset's sites to the design every site builds.

The analyst's side of a formula fit, in the order it runs:

1. each factor's text is typed (:func:`skfed.formula._parse.read_factor`) and
   its columns checked against the dataset's schema (its metadata: no row is
   read), a bare column being numeric or categorical by its dtype as in
   statsmodels;
2. each site keeps its complete rows (:func:`~skfed.formula._design.complete_rows`);
3. the levels of the categorical columns come from the sites
   (:func:`~skfed.formula._design.site_levels`, a per-site release under
   ``min_level_count``), sorted as patsy sorts them (or in a pandas
   categorical's declared order), the reference chosen as patsy chooses it;
4. a spline's knots come from the exact pooled quantiles of its column
   (:mod:`skfed.formula._knots`);
5. the columns, named and ordered as statsmodels' (:mod:`skfed.formula._terms`).

Every exchange with the sites goes through one
:class:`~skfed.federation.session.FederationSession` (phase ``"setup"``).
"""

from .._messages import closest, did_you_mean, show
from ..stats._levels import sorted_levels
from ._design import FORMAT, site_levels
from ._vocabulary import tree_columns
from ._errors import FormulaError
from ._parse import read_factor


def _check_column(name, column, kinds, need_numbers=False):
    if column not in kinds:
        hint = did_you_mean(closest(column, list(kinds)))
        raise FormulaError(f"the term {name!r} names the column {column!r}, which the data "
                           f"does not have{hint} (its columns: {list(kinds)}).")
    if need_numbers and kinds[column] == "text":
        raise FormulaError(f"the term {name!r} needs numbers, but column {column!r} is text "
                           "(write C(...) for a categorical column).")


def numeric_expression(name, text, kinds):
    """The expression tree of a numeric factor or response (columns checked)."""
    spec = read_factor(text)
    if spec["kind"] == "column":
        spec = {"kind": "numeric", "expr": {"column": spec["column"]}}
    if spec["kind"] != "numeric":
        raise FormulaError(f"{name!r} must be a numeric column or expression here.")
    for column in tree_columns(spec["expr"]):
        _check_column(name, column, kinds, need_numbers=True)
    return spec["expr"]


def type_factors(parsed, kinds):
    """``(factors, options)``: each factor as the sites will read it, and the
    analyst's own options of each (a reference level, requested levels, a
    spline's df and bounds).

    Parameters
    ----------
    parsed : ParsedFormula
    kinds : dict
        ``{column: "number" | "bool" | "text"}`` (the dataset's metadata).
    """
    factors, options = {}, {}
    for name, text in parsed.sources.items():
        spec = read_factor(text)
        if spec["kind"] == "column":
            _check_column(name, spec["column"], kinds)
            if kinds[spec["column"]] == "number":
                spec = {"kind": "numeric", "expr": {"column": spec["column"]}}
            else:  # text and booleans are categorical, as in patsy
                spec = {"kind": "categorical", "column": spec["column"], "reference": None,
                        "levels": None}
        if spec["kind"] == "numeric":
            for column in tree_columns(spec["expr"]):
                _check_column(name, column, kinds, need_numbers=True)
            factors[name] = spec
        elif spec["kind"] == "categorical":
            _check_column(name, spec["column"], kinds)
            options[name] = {"reference": spec["reference"], "levels": spec["levels"]}
            factors[name] = {"kind": "categorical", "column": spec["column"], "levels": None}
        else:
            _check_column(name, spec["column"], kinds, need_numbers=True)
            options[name] = spec
            factors[name] = {"kind": "spline", "basis": "bs", "column": spec["column"],
                             "degree": spec["degree"],
                             "include_intercept": spec["include_intercept"], "knots": None}
    return factors, options


def start_design(factors, response, offset=None, keep=(), weights=None):
    """A design without levels, knots nor columns: what
    :func:`~skfed.formula._design.complete_rows` reads."""
    return {"format": FORMAT, "factors": factors, "columns": [], "response": response,
            "offset": offset, "keep": list(keep),
            "weights": None if weights is None else {"column": weights}}


def _pooled_levels(replies, column):
    """The union of the sites' levels of ``column``: in a pandas categorical's declared
    order when every site declares the same one, else sorted (patsy's rule)."""
    held = sorted_levels([v for r in replies for v in r[column]["levels"]])
    declared = [r[column]["declared"] for r in replies]
    if declared[0] is not None and all(d == declared[0] for d in declared):
        return [v for v in declared[0] if v in held]
    return held


def _reference_index(name, column, levels, reference):
    """patsy's ``Treatment`` reference: a level, else an int as an index into the levels."""
    if reference is None:
        return 0
    if reference in levels:
        return levels.index(reference)
    if type(reference) is int and -len(levels) <= reference < len(levels):
        return reference % len(levels)
    raise FormulaError(f"the term {name!r}: the reference level {show(reference)} is not a "
                       f"level of column {column!r}; its levels are {show(levels)}.")


def discover_levels(session, factors, options, min_level_count):
    """Each categorical factor's levels and reference index, from the sites.

    Returns
    -------
    dict
        ``{factor: (levels, reference index)}``; the design's factors get their
        ``levels``.
    """
    names = [n for n, f in factors.items() if f["kind"] == "categorical"]
    if not names:
        return {}
    columns = list(dict.fromkeys(factors[n]["column"] for n in names))
    replies = session.per_site(site_levels, columns, int(min_level_count), phase="setup")
    pooled = {c: _pooled_levels(replies, c) for c in columns}
    out = {}
    for name in names:
        column = factors[name]["column"]
        levels, wanted = pooled[column], options[name]["levels"]
        if wanted is not None:
            absent = [v for v in wanted if v not in levels]
            if absent:
                raise FormulaError(f"the term {name!r}: level(s) {show(absent)} of column "
                                   f"{column!r} are held by no site (its levels are "
                                   f"{show(levels)}).")
            extra = [v for v in levels if v not in wanted]
            if extra:
                raise FormulaError(f"the term {name!r}: column {column!r} has level(s) "
                                   f"{show(extra)} that levels= does not list.")
            levels = list(wanted)
        if not levels:
            raise FormulaError(f"the term {name!r}: column {column!r} has no value in the "
                               "complete rows.")
        factors[name]["levels"] = levels
        out[name] = (levels, _reference_index(name, column, levels, options[name]["reference"]))
    return out
