"""The design's columns from the terms: patsy's order, coding and names (statsmodels').

A term is a tuple of factor names (the intercept is ``()``). As patsy (what
``statsmodels.formula.api`` runs):

- terms go into buckets by the set of numeric factors they hold; the bucket of
  terms without a numeric factor (the intercept, categorical main effects and
  their interactions) comes first, the others in order of first appearance;
  within a bucket, terms by their number of factors (stable);
- within a bucket, each term's categorical factors are coded so that the
  columns are not redundant with those of the terms before it (patsy's
  ``pick_contrasts_for_term``): treatment coding against the reference level
  (``[T.b]``) where a lower-order term already spans the rest, every level
  (``[b]``) otherwise (``y ~ 0 + C(sex)``, ``y ~ age:C(sex)``);
- a term's columns are the products of its factors' columns, the left-most
  factor varying fastest; a column is named by its factors' names joined with
  ``:``, a categorical factor's name followed by its level's suffix and a
  numeric factor of several columns (a spline) by ``[i]``.

Every column is written as plain data (:func:`design_columns`): its name and
its *parts*, pairs ``[factor name, selector]`` whose product at a row is the
column's value: the selector of a categorical factor is the index of a level
(an indicator), of a spline the index of a basis column, ``None`` for a numeric
factor of one column.
"""

from itertools import product


def level_text(level):
    """How patsy writes a level in a column name: a string as it is, any other value
    by its ``repr`` (``1``, ``2.5``, ``True``)."""
    return level if isinstance(level, str) else repr(level)


def _subsets_sorted(items):
    """All subsets of ``items`` (tuples, in the items' order), by size then position."""
    indexed = list(enumerate(items))
    subsets = [tuple(pair for pair, keep in zip(indexed, mask) if keep)
               for mask in product((False, True), repeat=len(items))]
    subsets.sort()
    subsets.sort(key=len)
    return [tuple(item for _, item in subset) for subset in subsets]


def _simplify(subterms):
    """patsy's absorption: a subterm one factor larger absorbs a smaller one it
    contains, that factor then coded with every level (``True``)."""
    changed = True
    while changed:
        changed = False
        for i, short in enumerate(subterms):
            for j in range(i + 1, len(subterms)):
                long = subterms[j]
                extra = set(long) - set(short)
                if len(long) == len(short) + 1 and set(short) <= set(long) and not any(
                        long[f] for f in extra) and all(short[f] == long[f] for f in short):
                    merged = dict(short)
                    merged.update({f: True for f in extra})
                    subterms[j] = merged
                    subterms.pop(i)
                    changed = True
                    break
            if changed:
                break
    return subterms


def _codings(categorical, used):
    """The subterms of a term's categorical factors not spanned by ``used``: a list
    of ``{factor: full rank}`` (``True``: every level; ``False``: treatment contrasts)."""
    fresh = []
    for subset in _subsets_sorted(categorical):
        key = frozenset(subset)
        if key not in used:
            used.add(key)
            fresh.append({factor: False for factor in subset})
    return _simplify(fresh)


def ordered_terms(terms, numeric):
    """patsy's order of ``terms`` (buckets of numeric factors, then degree).

    Parameters
    ----------
    terms : list of tuple of str
    numeric : set of str
        The numeric factors (numbers and splines).

    Returns
    -------
    list of list of tuple
        The terms of each bucket, in the design's order.
    """
    buckets = {}
    for term in terms:
        buckets.setdefault(frozenset(f for f in term if f in numeric), []).append(term)
    order = sorted(buckets, key=lambda key: bool(key))  # stable: the empty set first
    return [sorted(buckets[key], key=len) for key in order]


def design_columns(terms, numeric_widths, levels):
    """The design's columns, in statsmodels' order, with their names and parts.

    Parameters
    ----------
    terms : list of tuple of str
        The terms (factor names; the intercept ``()``), in the formula's order.
    numeric_widths : dict
        ``{numeric factor: its number of columns}`` (1, or a spline's basis size).
    levels : dict
        ``{categorical factor: (levels, reference index)}``.

    Returns
    -------
    list of dict
        ``{"name": str, "term": str, "parts": [[factor, selector], ...]}``.
    """
    columns = []
    for bucket in ordered_terms(terms, set(numeric_widths)):
        used = set()
        for term in bucket:
            categorical = [f for f in term if f not in numeric_widths]
            for coding in _codings(categorical, used):
                columns += _subterm_columns(term, coding, numeric_widths, levels)
    return columns


def _subterm_columns(term, coding, numeric_widths, levels):
    """One subterm's columns: the product of its factors' columns, left-most fastest."""
    factors, choices = [], []
    for factor in term:
        if factor in numeric_widths:
            width = numeric_widths[factor]
            names = [factor] if width == 1 else [f"{factor}[{i}]" for i in range(width)]
            selectors = [None] if width == 1 else list(range(width))
        elif factor in coding:
            values, reference = levels[factor]
            keep = [i for i in range(len(values)) if coding[factor] or i != reference]
            prefix = "" if coding[factor] else "T."
            names = [f"{factor}[{prefix}{level_text(values[i])}]" for i in keep]
            selectors = keep
        else:
            continue
        factors.append(factor)
        choices.append(list(zip(names, selectors)))
    term_name = ":".join(term) if term else "Intercept"
    out = []
    for combo in product(*reversed(choices)):
        combo = combo[::-1]
        name = ":".join(n for n, _ in combo) or "Intercept"
        out.append({"name": name, "term": term_name,
                    "parts": [[f, s] for f, (_, s) in zip(factors, combo)]})
    return out
