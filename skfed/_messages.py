"""Helpers for error messages: values shown plainly, and the closest valid names.

With numpy 2, ``repr(np.float64(1.0))`` is ``'np.float64(1.0)'``: a message
built with ``{value!r}`` shows a user's ``lr=np.float64(-1)`` (a value taken
from an array or a grid) as ``np.float64(-1.0)``. :func:`show` gives
``-1.0`` instead, and keeps the quotes of strings (``'auto'``).
"""

import difflib

import numpy as np


def plain(value):
    """``value`` with numpy scalars (and 0-d arrays) as the Python scalars they
    hold, inside tuples, lists and dicts too; anything else unchanged."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if type(value) in (tuple, list):
        return type(value)(plain(v) for v in value)
    if type(value) is dict:
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def count(n, word, plural=None):
    """``"1 round"``, ``"3 rounds"``: ``n`` and ``word`` agreeing in number."""
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def show(value):
    """How a message shows a value: ``repr`` of :func:`plain` (``-1.0``,
    ``(2, 3)``, ``'auto'``; never ``np.float64(-1.0)``)."""
    return repr(plain(value))


def closest(name, choices, normalize=str.lower, n=3, cutoff=0.6):
    """The ``choices`` closest to ``name`` (at most ``n``, best first), compared
    after ``normalize``; ``[]`` when none is close.

    ``choices`` may be a dict ``{spelling: name}``: spellings are compared and
    the names they stand for returned (each once).
    """
    names = choices if isinstance(choices, dict) else {c: c for c in choices}
    by_key = {}
    for spelling, target in names.items():
        by_key.setdefault(normalize(spelling), target)
    matches = difflib.get_close_matches(normalize(name), list(by_key), n=n, cutoff=cutoff)
    return list(dict.fromkeys(by_key[m] for m in matches))


def did_you_mean(candidates):
    """``"; did you mean 'a' or 'b'?"`` (empty without candidates)."""
    if not candidates:
        return ""
    return "; did you mean " + " or ".join(show(c) for c in candidates) + "?"
