"""The closed vocabulary of a formula's expressions, shared by the site's rules
(:mod:`skfed.formula._site_rules`) and its evaluation (:mod:`skfed.formula._design`)."""

import numbers

import numpy as np

#: arithmetic a numeric factor may use: name -> (function, number of arguments)
OPERATIONS = {"add": (np.add, 2), "sub": (np.subtract, 2), "mul": (np.multiply, 2),
              "div": (np.true_divide, 2), "pow": (np.power, 2), "neg": (np.negative, 1),
              "pos": (np.positive, 1)}
#: functions a numeric factor may call (one argument each)
FUNCTIONS = {"log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
             "exp": np.exp, "expm1": np.expm1, "sqrt": np.sqrt, "abs": np.abs,
             "square": np.square}


def tree_columns(tree):
    """The columns an expression tree reads, in order."""
    if "column" in tree:
        return [tree["column"]]
    return [c for arg in tree.get("args", []) for c in tree_columns(arg)]


def basis_support(x, knots, degree, j):
    """The rows of ``x`` where B-spline basis function ``j`` of the full knot vector
    ``knots`` may be non-zero: ``[t_j, t_{j+degree+1})``, closed at the last knot."""
    knots = np.sort(np.asarray(knots, dtype=np.float64))
    low, high = knots[j], knots[j + degree + 1]
    return (x >= low) & ((x <= high) if high == knots[-1] else (x < high))


def plain_level(value):
    """A category's level as a plain Python value (how it travels)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return str(value)  # numpy's str_ too: a level travels as a plain string
    raise TypeError(type(value).__name__)
