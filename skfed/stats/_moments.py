"""Pooled means, standard deviations and exact quantiles of a Table 1's numeric cells.

From released parts, the sites' counts, means and sums of squared deviations
merge by Chan's pairwise formula
(:func:`skfed.preprocessing._summaries.merge_moments`); from masked sums, the
mean is the pooled sum over the pooled count and the SD comes from a second
masked sum of squared deviations about it. The pooled quantiles are pandas'
default (linear interpolation between the order statistics around
``(n - 1) q``), the order statistics found by a federated bisection in which
each site answers with its count of values below a threshold and its values
next to it (:func:`skfed.stats._site.site_count_below`, single rows' values:
a site serves it only with ``allow_exact_quantiles``).
"""

import numpy as np

from ..federation.session import FederationSession
from ..preprocessing._imputer import _midpoint
from ..preprocessing._summaries import merge_moments
from ._site import site_count_below

_MAX_ROUNDS = 200


def chan_moments(parts):
    """The mean and standard deviation (ddof=1) of the sites' cells ``parts`` (Chan's
    pairwise merge of their counts, means and sums of squared deviations)."""
    if not parts:
        return np.nan, np.nan
    pooled = merge_moments([{"weight": np.array([p["count"]], dtype=float),
                             "count": np.array([p["count"]]), "mean": np.array([p["mean"]]),
                             "mean_lo": np.array([p["mean_lo"]]), "m2": np.array([p["m2"]])}
                            for p in parts])
    n = int(pooled["count"][0])
    std = float(np.sqrt(pooled["m2"][0] / (n - 1))) if n > 1 else np.nan
    return float(pooled["mean"][0]), std


def quantile_name(q):
    """A quantile's row name, as pandas' ``describe``: ``"25%"``."""
    return f"{100 * q:g}%"


def _order_statistics(data, by, queries, ranks, lo, hi):
    """The ``ranks[i]``-th smallest value of each query's pooled values, by bisection.

    ``lo``/``hi``: the pooled minimum and maximum of each query. Each round
    every site answers, per open query, its count ``<= t``, its largest value
    ``<= t`` and smallest ``> t`` (:func:`site_count_below`); the bracket of
    data values holding the order statistic shrinks until it is one value.
    """
    lo, hi = np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)
    ranks = np.asarray(ranks)
    done = lo == hi
    rounds = 0
    while not done.all():
        rounds += 1
        if rounds > _MAX_ROUNDS:  # pragma: no cover - the bisection halves 64-bit ranges
            raise RuntimeError("the federated quantile bisection did not converge.")
        active = np.flatnonzero(~done)
        t = _midpoint(lo[active], hi[active])
        replies = FederationSession.for_dataset(data).per_site(
            site_count_below, by, [queries[i] for i in active], t, phase="analysis")
        c = np.sum([r["count"] for r in replies], axis=0)
        below = np.fmax.reduce([r["below"] for r in replies], axis=0)
        above = np.fmin.reduce([r["above"] for r in replies], axis=0)
        k = ranks[active]
        ge, lt = c >= k, c < k
        hi[active[ge]] = np.minimum(hi[active[ge]], below[ge])
        lo[active[lt]] = np.maximum(lo[active[lt]], above[lt])
        at_below, at_above = c == k, c == k - 1
        lo[active[at_below]] = hi[active[at_below]] = below[at_below]
        lo[active[at_above]] = hi[active[at_above]] = above[at_above]
        done = lo == hi
    return lo


def _lerp(a, b, g):
    """numpy's linear interpolation (``np.quantile``'s ``_lerp``), digit for digit."""
    diff = b - a
    return np.where(g >= 0.5, b - diff * (1 - g), a + diff * g)


def pooled_quantiles(data, by, queries):
    """Exact pooled quantiles, all in one federated bisection.

    Parameters
    ----------
    data : FederatedDataset
    by : str or None
    queries : list of (stratum, column, n, q)
        ``stratum`` a level of ``by`` or ``None`` (all rows), ``n`` the pooled
        count of the column's values there (at least 1), ``q`` the probability.

    Returns
    -------
    values : list of float
        Each query's quantile, as pandas' ``Series.quantile(q)``.
    """
    if not queries:
        return []
    pairs = list(dict.fromkeys((g, c) for g, c, _, _ in queries))
    # the pooled extremes: the largest value <= +inf and the smallest > -inf
    ends = FederationSession.for_dataset(data).per_site(
        site_count_below, by, pairs + pairs, np.r_[np.full(len(pairs), np.inf),
                                                    np.full(len(pairs), -np.inf)],
        phase="analysis")
    top = np.fmax.reduce([r["below"][:len(pairs)] for r in ends], axis=0)
    bottom = np.fmin.reduce([r["above"][len(pairs):] for r in ends], axis=0)
    bracket = {pair: (bottom[i], top[i]) for i, pair in enumerate(pairs)}
    asked, ranks, lo, hi = [], [], [], []
    for g, c, n, q in queries:
        low = int(np.floor((n - 1) * q))
        for rank in (low + 1, min(low + 2, n)):
            asked.append((g, c))
            ranks.append(rank)
            lo.append(bracket[g, c][0])
            hi.append(bracket[g, c][1])
    found = _order_statistics(data, by, asked, ranks, lo, hi)
    out = []
    for i, (_, _, n, q) in enumerate(queries):
        h = (n - 1) * q
        out.append(float(_lerp(found[2 * i], found[2 * i + 1], h - np.floor(h))))
    return out
