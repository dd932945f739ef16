"""A B-spline's knots from the sites: pooled extremes and exact pooled quantiles.

patsy's ``bs(x, df=k)`` puts its interior knots at equally spaced quantiles of
``x`` (``np.percentile``, linear interpolation) and its boundary knots at the
minimum and maximum. Over the sites: each site releases its column's count,
minimum and maximum (:func:`~skfed.formula._design.site_extremes`; never for a
spline whose knots and both bounds are given, which a site without
``allow_exact_quantiles`` then serves), then the two order statistics around each
quantile are found by bisection, each round every site answering with its count
of values at most a threshold and its values next to it
(:func:`skfed.stats._site.site_count_below`, the operation of
``skfed.stats.describe``'s exact quantiles). Every exchange goes through
the fit's :class:`~skfed.federation.session.FederationSession`.
"""

import numpy as np

from .._messages import show
from ..preprocessing._imputer import _midpoint
from ..stats._site import site_count_below
from ._design import site_extremes
from ._errors import FormulaError
from ._parse import spline_inner_count

#: the bisection halves the float64 values of a bracket: 64 rounds pin any value
_MAX_ROUNDS = 200


def _lerp(a, b, g):
    """numpy's linear interpolation between two order statistics (its ``_lerp``)."""
    diff = b - a
    return np.where(g >= 0.5, b - diff * (1 - g), a + diff * g)


def order_statistics(session, columns, ranks, lo, hi):
    """The ``ranks[i]``-th smallest value (1-based) of column ``columns[i]`` over every
    site's rows, by bisection within its pooled range ``[lo[i], hi[i]]``.

    Each round, per open query, the sites' counts of values ``<= t`` are added and
    their largest value ``<= t`` and smallest ``> t`` bound the bracket; ``t``
    halves the float64 values between the bracket's ends.
    """
    lo, hi = np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)
    ranks = np.asarray(ranks)
    done = lo == hi
    for _ in range(_MAX_ROUNDS):
        if done.all():
            return lo
        active = np.flatnonzero(~done)
        t = _midpoint(lo[active], hi[active])
        replies = session.per_site(site_count_below, None,
                                   [(None, columns[i]) for i in active], t, phase="setup")
        c = np.sum([r["count"] for r in replies], axis=0)
        below = np.fmax.reduce([r["below"] for r in replies], axis=0)
        above = np.fmin.reduce([r["above"] for r in replies], axis=0)
        k = ranks[active]
        hi[active[c >= k]] = np.minimum(hi[active[c >= k]], below[c >= k])
        lo[active[c < k]] = np.maximum(lo[active[c < k]], above[c < k])
        lo[active[c == k]] = hi[active[c == k]] = below[c == k]
        lo[active[c == k - 1]] = hi[active[c == k - 1]] = above[c == k - 1]
        done = lo == hi
    raise RuntimeError("the federated quantile bisection did not converge.")  # pragma: no cover


def _pooled_quantiles(session, column_quantiles, extremes):
    """``{column: {p: quantile}}``: exact pooled quantiles (numpy's linear
    interpolation, as patsy's knots) by the federated bisection of order statistics."""
    queries, ranks, lo, hi, where = [], [], [], [], []
    for column, probabilities in column_quantiles.items():
        n, vmin, vmax = extremes[column]
        for p in probabilities:
            h = (n - 1) * ((100 * p) / 100)  # np.percentile(x, 100 p), as patsy calls it
            low = int(np.floor(h))
            for rank in (low + 1, min(low + 2, n)):
                queries.append(column)
                ranks.append(rank)
                lo.append(vmin)
                hi.append(vmax)
            where.append((column, p, h - np.floor(h)))
    out = {column: {} for column in column_quantiles}
    if not queries:
        return out
    found = order_statistics(session, queries, ranks, lo, hi)
    for i, (column, p, gamma) in enumerate(where):
        out[column][p] = float(_lerp(found[2 * i], found[2 * i + 1], gamma))
    return out


def _interior_probabilities(spec):
    """patsy's interior knots of ``bs(x, df=...)``: equally spaced quantiles."""
    return [float(p) for p in np.linspace(0, 1, spline_inner_count(spec) + 2)[1:-1]]


def discover_knots(session, factors, options):
    """Each spline's full knot vector (patsy's ``bs``: ``degree + 1`` copies of each
    bound, and the interior knots), from the sites' extremes and exact quantiles.

    Returns
    -------
    dict
        ``{spline factor: its number of basis columns}``; the design's factors get
        their ``knots``.
    """
    names = [n for n, f in factors.items() if f["kind"] == "spline"]
    if not names:
        return {}
    # a spline whose knots and both bounds are given needs nothing from the sites: its
    # column's extremes (single rows' values) are asked only for another spline's sake
    columns = list(dict.fromkeys(factors[n]["column"] for n in names
                                 if not _given(options[n])))
    extremes = {}
    if columns:
        replies = session.per_site(site_extremes, columns, phase="setup")
        for c in columns:
            present = [r[c] for r in replies if r[c][0] > 0]
            extremes[c] = (sum(p[0] for p in present), min(p[1] for p in present),
                           max(p[2] for p in present))
    wanted = {}
    for name in names:
        if options[name]["knots"] is None:
            wanted.setdefault(factors[name]["column"], []).extend(
                _interior_probabilities(options[name]))
    quantiles = _pooled_quantiles(session, {c: list(dict.fromkeys(p))
                                            for c, p in wanted.items()}, extremes)
    return {name: _knot_vector(name, factors[name], options[name],
                               extremes.get(factors[name]["column"]),
                               quantiles.get(factors[name]["column"], {}))
            for name in names}


def _given(spec):
    """Whether a spline's knots and both bounds are given (nothing to find)."""
    return spec["knots"] is not None and spec["lower_bound"] is not None and \
        spec["upper_bound"] is not None


def _knot_vector(name, factor, spec, extremes, quantiles):
    """Set ``factor["knots"]``; return the basis's number of columns (``extremes``:
    ``None`` when the knots and bounds are given)."""
    _, vmin, vmax = (None, None, None) if extremes is None else extremes
    inner = (list(spec["knots"]) if spec["knots"] is not None
             else [quantiles[p] for p in _interior_probabilities(spec)])
    lower = vmin if spec["lower_bound"] is None else float(spec["lower_bound"])
    upper = vmax if spec["upper_bound"] is None else float(spec["upper_bound"])
    if lower > upper or any(k < lower or k > upper for k in inner):
        raise FormulaError(f"the term {name!r}: the knots {show(inner)} must lie within "
                           f"[{lower:g}, {upper:g}].")
    order = spec["degree"] + 1
    factor["knots"] = [float(k) for k in sorted([lower, upper] * order + inner)]
    return len(factor["knots"]) - order - (0 if spec["include_intercept"] else 1)
