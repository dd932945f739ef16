"""A formula's text to typed factors: formulaic parses, an allow-list types each factor.

formulaic (:func:`parse_formula`) expands the formula's operators (``+``, ``-``,
``:``, ``*``, ``/``, ``**``, ``0``/``1``) into terms, each a set of factors.
Each factor's own text is then read with Python's :mod:`ast` (parsed, never
evaluated) and accepted only if it is one of the declared forms
(:func:`read_factor`):

- a column name (``age``; ``Q("a b")`` for a name with spaces);
- a numeric expression: ``np.log(x)`` and the other functions of
  :data:`FUNCTIONS`, or ``I(...)`` around arithmetic (``+ - * / **``, numbers,
  columns and those functions), e.g. ``I(age ** 2)``, ``I(weight / height ** 2)``;
- a categorical factor ``C(x)``, ``C(x, Treatment("b"))``,
  ``C(x, Treatment(reference="b"))``, ``C(x, levels=[...])``;
- a B-spline basis ``bs(x, df=4)`` (``degree``, ``knots``, ``include_intercept``,
  ``lower_bound``, ``upper_bound`` as patsy's).

A factor's name is its text with patsy's token spacing (:func:`patsy_name`), the
name statsmodels gives its columns (``I(age ** 2)``, ``C(sex, Treatment("M"))``).
"""

import ast
import io
import re
import tokenize
from dataclasses import dataclass

from ._errors import FormulaError

#: the numeric functions a formula may use, by the names it may call them, and the
#: name of the operation a site runs for each
FUNCTIONS = {f"{prefix}.{name}": name for prefix in ("np", "numpy")
             for name in ("log", "log2", "log10", "log1p", "exp", "expm1", "sqrt", "abs",
                          "square")}
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos"}
_SPLINE_OPTIONS = ("df", "knots", "degree", "include_intercept", "lower_bound",
                   "upper_bound")

#: functions of patsy and formulaic a site does not build yet, and what to write instead
NOT_BUILT = {
    "cr": "natural cubic regression splines, cr(), are not built yet (their centring "
          "constraint needs pooled basis means); use a B-spline, bs(x, df=k)",
    "cc": "cyclic cubic splines, cc(), are not built yet; use bs(x, df=k)",
    "te": "tensor-product splines, te(), are not built",
    "poly": "orthogonal polynomials, poly(), are not built (their basis needs pooled "
            "moments); use I(x ** 2), I(x ** 3)",
    "center": "center() is not built (it needs the pooled mean); use I(x - value)",
    "standardize": "standardize() is not built; use I((x - value) / scale)",
    "scale": "scale() is not built; use I((x - value) / scale)",
}
ALLOWED = ("column names, np.log/log2/log10/log1p/exp/expm1/sqrt/abs/square(x), "
           "I(arithmetic with + - * / ** on columns and numbers), C(x), "
           "C(x, Treatment(\"level\")), C(x, levels=[...]), bs(x, df=k)")


@dataclass(frozen=True)
class ParsedFormula:
    """A formula as terms of named factors.

    Attributes
    ----------
    lhs : list of str
        The left-hand side's factor texts (as written).
    terms : list of tuple of str
        The right-hand side's terms in the formula's order, each a tuple of
        factor names; the intercept is the empty tuple.
    sources : dict
        ``{factor name: factor text as written}``.
    """

    lhs: list
    terms: list
    sources: dict


def patsy_name(code):
    """``code`` with patsy's token spacing: the name statsmodels gives a factor.

    Spaces around binary operators (``age ** 2``), after commas, none inside
    brackets nor around a keyword's ``=``, none after a unary sign; strings as
    written (patsy's ``normalize_token_spacing``, rewritten here so that skfed
    needs no patsy).
    """
    space_both = set("+-*/%&^|<>") | {"==", "<>", "!=", "<=", ">=", "<<", ">>", "**", "//"}
    before, after = space_both | {"!", "~"}, space_both | {",", ":"}
    words = (tokenize.NAME, tokenize.NUMBER, tokenize.STRING)
    try:
        tokens = [(t[0], t[1]) for t in tokenize.generate_tokens(io.StringIO(code).readline)]
    except (tokenize.TokenError, SyntaxError):  # not Python: refused later, as written
        return code
    text, brackets = [], []
    wants_space = was_word = object_like = open_or_comma = False
    for kind, token in tokens:
        if kind in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.NL):
            continue
        if kind in words:
            text.append((" " if wants_space or was_word else "") + token)
            wants_space, was_word = False, True
        else:
            if token in ("(", "[", "{"):
                brackets.append(token)
            elif brackets and token in (")", "]", "}"):
                brackets.pop()
            space_before, space_after = token in before, token in after
            if token == ":" and brackets and brackets[-1] == "[":
                space_after = False
            if (token in ("*", "**") and open_or_comma
                    or token in ("+", "-") and not object_like):
                space_before = space_after = False
            if token == "=" and not brackets:
                space_before = space_after = True
            text.append((" " if wants_space or space_before else "") + token)
            wants_space, was_word = space_after, False
        object_like = kind in words or token == ")"
        open_or_comma = token in ("(", ",")
    return "".join(text)


def parse_formula(formula):
    """Parse ``formula`` with formulaic into a :class:`ParsedFormula`.

    Parameters
    ----------
    formula : str
        ``"y ~ age + C(sex)"`` (or a right-hand side alone, ``"age + C(sex)"``).

    Returns
    -------
    ParsedFormula

    Raises
    ------
    FormulaError
        formulaic's syntax errors, and forms formulaic accepts that patsy does
        not (literal terms other than ``0``/``1``).
    """
    if not isinstance(formula, str) or not formula.strip():
        raise FormulaError(f"a formula is a non-empty string such as 'y ~ age + C(sex)'; "
                           f"got {formula!r}.")
    try:
        from formulaic import Formula
        from formulaic.parser import DefaultFormulaParser
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("skfed.formula parses formulas with formulaic: "
                          "pip install formulaic") from None
    try:
        parsed = Formula(formula, _ordering="none")
        tokens = DefaultFormulaParser().get_tokens(formula)
    except Exception as exc:  # formulaic's syntax errors have several types
        reason = re.sub(r"\x1b\[[0-9;]*m|[\u29da\u29db]", "", str(exc)).splitlines()[0]
        raise FormulaError(f"cannot parse the formula {formula!r}: {reason}") from None
    written = {}
    for token in tokens:
        if token.source_loc is not None and token.kind.name in ("NAME", "PYTHON"):
            start, end = token.source_loc
            text = formula[start:end + 1]
            if text.startswith("{"):  # formulaic's {python} block, its closing brace left out
                text = "{" + token.token + "}"
            written.setdefault(token.token, text)
    lhs = _factor_texts(parsed.lhs, written, formula) if hasattr(parsed, "lhs") else []
    rhs = parsed.rhs if hasattr(parsed, "rhs") else parsed
    if isinstance(rhs, tuple):  # several parts (``y ~ a | b``): not a regression formula
        raise FormulaError(f"the formula {formula!r} has several parts ('|'); a GLM or Cox "
                           "formula has one right-hand side.")
    terms, sources = [], {}
    for term in rhs:
        factors = []
        for factor in term.factors:
            if factor.eval_method.name == "LITERAL":
                if factor.expr in ("1", "0"):
                    continue
                raise FormulaError(f"the literal term {factor.expr!r} of {formula!r} is not "
                                   "a column or a function of one; allowed: " + ALLOWED)
            source = written.get(factor.expr, factor.expr)
            name = patsy_name(source)
            sources.setdefault(name, source)
            factors.append(name)
        names = tuple(dict.fromkeys(factors))
        if names not in terms:
            terms.append(names)
    return ParsedFormula(lhs, terms, sources)


def _factor_texts(side, written, formula):
    texts = []
    for term in side:
        if len(term.factors) != 1:
            raise FormulaError(f"the left-hand side of {formula!r} must be one response "
                               "(or Surv(time, event)), not an interaction.")
        factor = term.factors[0]
        texts.append(written.get(factor.expr, factor.expr))
    return texts


# --- one factor's text to its typed form ---------------------------------------------
def read_factor(text):
    """The typed form of one factor's text (never evaluated).

    Parameters
    ----------
    text : str
        The factor as written (``"np.log(bmi)"``, ``"C(sex, Treatment('M'))"``).

    Returns
    -------
    dict
        ``{"kind": "column", "column": name}``, ``{"kind": "numeric", "expr":
        tree}``, ``{"kind": "categorical", "column", "reference", "levels"}`` or
        ``{"kind": "spline", "basis": "bs", "column", "df", "knots", "degree",
        "include_intercept", "lower_bound", "upper_bound"}``; an expression
        tree is ``{"column": name}``, ``{"number": value}``, ``{"op": name,
        "args": [...]}`` or ``{"call": name, "args": [tree]}``.

    Raises
    ------
    FormulaError
        The text is not one of the allowed forms; the message names it.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise FormulaError(f"the term {text!r} is not a column or an allowed function of "
                           f"one (a name with spaces is written Q(\"a name\")); allowed: "
                           f"{ALLOWED}.") from None
    column = _column_name(node)
    if column is not None:
        return {"kind": "column", "column": column}
    function = _dotted(node.func) if isinstance(node, ast.Call) else None
    if function == "C":
        return _categorical(node, text)
    if function == "bs":
        return _spline(node, text)
    if function == "I":
        if len(node.args) != 1 or node.keywords:
            raise FormulaError(f"the term {text!r}: I() takes one expression.")
        return {"kind": "numeric", "expr": _expression(node.args[0], text)}
    if function in FUNCTIONS:
        return {"kind": "numeric", "expr": _expression(node, text)}
    if function in NOT_BUILT:
        raise FormulaError(f"the term {text!r}: {NOT_BUILT[function]}.")
    what = f"the function {function}()" if function else "this expression"
    raise FormulaError(f"the term {text!r}: {what} is not in the allow-list of formula "
                       f"terms a site builds ({ALLOWED}).")


def _dotted(node):
    """``np.log`` for the attribute chain ``np.log``; ``None`` for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _column_name(node):
    """The column a bare name or ``Q("name")`` refers to, else ``None``."""
    if isinstance(node, ast.Name):
        return node.id
    if (isinstance(node, ast.Call) and _dotted(node.func) == "Q" and len(node.args) == 1
            and not node.keywords and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return node.args[0].value
    return None


def _expression(node, text):
    """An arithmetic expression's tree, or an error naming what is not allowed."""
    column = _column_name(node)
    if column is not None:
        return {"column": column}
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return {"number": node.value}
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return {"op": _BINARY[type(node.op)],
                "args": [_expression(node.left, text), _expression(node.right, text)]}
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return {"op": _UNARY[type(node.op)], "args": [_expression(node.operand, text)]}
    if isinstance(node, ast.Call) and _dotted(node.func) in FUNCTIONS:
        if len(node.args) != 1 or node.keywords:
            raise FormulaError(f"the term {text!r}: {_dotted(node.func)}() takes one "
                               "argument here.")
        return {"call": FUNCTIONS[_dotted(node.func)],
                "args": [_expression(node.args[0], text)]}
    raise FormulaError(f"the term {text!r}: {ast.unparse(node)!r} is not allowed in a "
                       f"numeric expression (columns, numbers, + - * / **, and "
                       f"{', '.join(sorted(set(k for k in FUNCTIONS if k[:3] == 'np.')))}).")


def _constant(node, text, what):
    """A literal's value (numbers, strings, booleans, lists of them)."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        raise FormulaError(f"the term {text!r}: {what} must be a literal value, not "
                           f"{ast.unparse(node)!r}.") from None
    return value


def _categorical(node, text):
    """``C(column[, Treatment(ref) | Treatment(reference=ref)][, levels=[...]])``."""
    if not node.args or _column_name(node.args[0]) is None:
        raise FormulaError(f"the term {text!r}: C() takes a column name first.")
    spec = {"kind": "categorical", "column": _column_name(node.args[0]), "reference": None,
            "levels": None}
    contrast = node.args[1] if len(node.args) > 1 else None
    for keyword in node.keywords:
        if keyword.arg == "levels":
            levels = _constant(keyword.value, text, "levels")
            if not isinstance(levels, (list, tuple)) or not levels:
                raise FormulaError(f"the term {text!r}: levels must be a non-empty list.")
            spec["levels"] = list(levels)
        elif keyword.arg == "contrast" and contrast is None:
            contrast = keyword.value
        else:
            raise FormulaError(f"the term {text!r}: C() takes a contrast and levels=, not "
                               f"{keyword.arg}=.")
    if len(node.args) > 2:
        raise FormulaError(f"the term {text!r}: C() takes a column, a contrast and levels=.")
    if contrast is not None:
        spec["reference"] = _treatment_reference(contrast, text)
    return spec


def _treatment_reference(node, text):
    """The reference level of ``Treatment``, ``Treatment(ref)`` or
    ``Treatment(reference=ref)`` (``None``: the first level)."""
    name = _dotted(node.func) if isinstance(node, ast.Call) else _dotted(node)
    if name not in ("Treatment", "T"):
        raise FormulaError(f"the term {text!r}: only treatment (dummy) coding is built, "
                           f"Treatment or Treatment(reference=...); not {ast.unparse(node)}.")
    if not isinstance(node, ast.Call):
        return None
    values = list(node.args) + [k.value for k in node.keywords if k.arg == "reference"]
    if len(values) != 1 or any(k.arg != "reference" for k in node.keywords):
        raise FormulaError(f"the term {text!r}: Treatment takes one reference level.")
    return _constant(values[0], text, "the reference level")


def _spline(node, text):
    """``bs(column, df=k, ...)`` with patsy's options (``df`` may come second)."""
    if not node.args or _column_name(node.args[0]) is None:
        raise FormulaError(f"the term {text!r}: bs() takes a column name first (a "
                           "transformed variable is not supported inside a spline).")
    spec = {"kind": "spline", "basis": "bs", "column": _column_name(node.args[0]),
            "df": None, "knots": None, "degree": 3, "include_intercept": False,
            "lower_bound": None, "upper_bound": None}
    given = dict(zip(_SPLINE_OPTIONS, node.args[1:]))
    if len(node.args) - 1 > len(_SPLINE_OPTIONS):
        raise FormulaError(f"the term {text!r}: too many arguments to bs().")
    for keyword in node.keywords:
        if keyword.arg not in _SPLINE_OPTIONS or keyword.arg in given:
            raise FormulaError(f"the term {text!r}: bs() takes {', '.join(_SPLINE_OPTIONS)} "
                               f"once each; not {keyword.arg}=.")
        given[keyword.arg] = keyword.value
    for key, value in given.items():
        spec[key] = _constant(value, text, key)
    return check_spline(spec, text)


def check_spline(spec, text):
    """patsy's checks of a B-spline's options, before any data is read."""
    degree, df, knots = spec["degree"], spec["df"], spec["knots"]
    if type(degree) is not int or degree < 0:
        raise FormulaError(f"the term {text!r}: degree must be an int >= 0.")
    if df is None and knots is None:
        raise FormulaError(f"the term {text!r}: give df= or knots=.")
    if df is not None and (type(df) is not int or df < 1):
        raise FormulaError(f"the term {text!r}: df must be a positive int.")
    if knots is not None:
        if not isinstance(knots, (list, tuple)) or not all(
                type(k) in (int, float) for k in knots):
            raise FormulaError(f"the term {text!r}: knots must be a list of numbers.")
        spec["knots"] = [float(k) for k in knots]
    inner = spline_inner_count(spec)
    if inner < 0:
        raise FormulaError(f"the term {text!r}: df={df} is too small for degree={degree} "
                           f"and include_intercept={spec['include_intercept']}; it must be "
                           f">= {df - inner}.")
    if knots is not None and df is not None and len(knots) != inner:
        raise FormulaError(f"the term {text!r}: df={df} with degree={degree} implies {inner} "
                           f"knots, but {len(knots)} were given.")
    for bound in ("lower_bound", "upper_bound"):
        if spec[bound] is not None and type(spec[bound]) not in (int, float):
            raise FormulaError(f"the term {text!r}: {bound} must be a number.")
    return spec


def spline_inner_count(spec):
    """Interior knots of a B-spline: from ``df`` (patsy's count), or those given."""
    if spec["df"] is None:
        return len(spec["knots"])
    return spec["df"] - (spec["degree"] + 1) + (0 if spec["include_intercept"] else 1)
