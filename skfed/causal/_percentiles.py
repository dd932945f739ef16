"""Percentile truncation: the pooled propensity scores' exact quantiles, by bisection.

numpy's default quantile (linear interpolation between the order statistics around
``(n - 1) q``) of the scores of every site's rows at the fitted propensity model. Each
round every site answers, per open order statistic, its count of scores at or below a
threshold and its scores next to it (:func:`skfed.causal._site.site_score_count_below`,
served only with ``allow_exact_quantiles``: single rows' scores); the bracket of
scores holding each order statistic shrinks until it is one value.
"""

import numpy as np

from ..preprocessing._imputer import _midpoint
from ..stats._moments import _lerp
from ._site import site_score_count_below

_MAX_ROUNDS = 200


def _ask(session, spec, theta, t):
    replies = session.per_site(site_score_count_below, spec, theta, t, phase="analysis")
    return (np.sum([r["count"] for r in replies], axis=0),
            np.fmax.reduce([r["below"] for r in replies], axis=0),
            np.fmin.reduce([r["above"] for r in replies], axis=0))


def order_statistics(session, spec, theta, ranks):
    """The ``ranks[i]``-th smallest (1-based) pooled score at ``theta``."""
    ranks = np.asarray(ranks)
    _, top, _ = _ask(session, spec, theta, np.full(1, np.inf))
    _, _, bottom = _ask(session, spec, theta, np.full(1, -np.inf))
    lo, hi = np.full(ranks.size, bottom[0]), np.full(ranks.size, top[0])
    done = lo == hi
    for _ in range(_MAX_ROUNDS):
        if done.all():
            return lo
        active = np.flatnonzero(~done)
        c, below, above = _ask(session, spec, theta, _midpoint(lo[active], hi[active]))
        k = ranks[active]
        ge, lt = c >= k, c < k
        hi[active[ge]] = np.minimum(hi[active[ge]], below[ge])
        lo[active[lt]] = np.maximum(lo[active[lt]], above[lt])
        for hit, value in ((c == k, below), (c == k - 1, above)):
            lo[active[hit]] = hi[active[hit]] = value[hit]
        done = lo == hi
    raise RuntimeError("the federated quantile bisection did not converge.")  # pragma: no cover


def score_quantiles(session, spec, theta, n, percentiles):
    """The pooled scores' percentiles (numpy's linear interpolation), exact."""
    q = np.asarray(percentiles, dtype=float) / 100.0
    position = (n - 1) * q
    low = np.floor(position).astype(int)
    ranks = np.concatenate([low + 1, np.minimum(low + 2, n)])
    values = order_statistics(session, spec, theta, ranks)
    m = q.size
    return _lerp(values[:m], values[m:], position - low)
