"""Exact pooled quantiles for the absolute error and quantile losses.

scikit-learn starts these losses from a quantile of the target
(``np.median`` / ``np.percentile``; weighted: ``_weighted_percentile``, the
inverted cdf) and, after growing each tree on the sign-like gradients,
replaces every leaf's value with ``learning_rate`` times the same quantile of
the residuals ``y - raw`` of the leaf's rows (``_update_leaves_values``).
Both are order statistics of pooled values, found exactly by the search of
:mod:`._selection` (all leaves of a tree in the same rounds), then passed
through numpy's own arithmetic (``np.median`` / ``np.percentile`` of a
stand-in array holding the order statistics at their ranks).
"""

import numpy as np

from ._selection import OrderQuery, run_search
from ._site import pack_nodes, site_residual_counts

#: probe keys per query and round
_BUDGET = 2048


def _linear_ranks(n, q):
    """0-based ranks ``np.percentile(..., q)`` (linear) and ``np.median`` read, with a
    margin of one rank each side."""
    below = int(np.floor((n - 1) * q))
    return np.unique(np.clip(np.arange(below - 1, below + 3), 0, n - 1))


def _stand_in(n, ranks, values):
    fill = np.searchsorted(ranks, np.arange(n), side="right") - 1
    return np.asarray(values)[np.maximum(fill, 0)]


class _SetTargets:
    """Once a query's totals are known: the ranks (or the weight) its quantile needs."""

    def __init__(self, q, weighted):
        self.q, self.weighted = q, weighted

    def __call__(self, queries):
        for query in queries:
            if query.count_targets.size or query.weight_targets.size or \
                    np.isnan(query.count[-1]):
                continue
            if self.weighted:
                query.set_targets(weight_targets=[100 * self.q / 100 * query.total_weight])
            else:
                query.set_targets(count_targets=_linear_ranks(int(query.total_count),
                                                              self.q) + 1)


def _quantile_of(query, q, weighted, median):
    """The loss's ``fit_intercept_only`` of the query's values."""
    if weighted:
        return query.value_for_weight([100 * q / 100 * query.total_weight])[0]
    n = int(query.total_count)
    ranks = _linear_ranks(n, q)
    stand_in = _stand_in(n, ranks, query.value_for_count(ranks + 1))
    return np.median(stand_in) if median else np.percentile(stand_in, 100 * q)


def _level(loss):
    """``(q, is_median)`` of an absolute error or pinball loss."""
    if hasattr(loss.closs, "quantile"):
        return float(loss.closs.quantile), False
    return 0.5, True


def pooled_quantiles(session, context, model, paths, loss, phase="rounds"):
    """The loss's quantile of ``y - raw`` over each path's rows (``()``: all rows;
    ``model=None``: of ``y``). Returns the values and the rounds used.
    """
    weighted = context["weighted"]
    paths = pack_nodes([(0, tuple(path), None) for path in paths], len(context["order"]))
    q, median = _level(loss)
    queries = [OrderQuery(weighted=weighted) for _ in range(len(paths["tree"]))]

    def ask(probes, starts):
        return session.sum(site_residual_counts, context, model, paths, probes, starts,
                           phase=phase)

    rounds = run_search(ask, queries, _BUDGET, _SetTargets(q, weighted))
    return [_quantile_of(query, q, weighted, median) for query in queries], rounds


def pooled_quantile_baseline(session, context, loss):
    """The baseline of an absolute error or quantile loss (shape (1, 1)) and its rounds."""
    values, rounds = pooled_quantiles(session, context, None, [()], loss, phase="setup")
    return np.asarray(values[0], dtype=np.float64).reshape(1, 1), rounds


class QuantileRefit:
    """Replaces the leaves' values of the iteration's tree (scikit-learn's
    ``_update_leaves_values``): ``shrinkage * quantile(y - raw)`` per leaf."""

    def __init__(self, session, context, model, shrinkage, loss):
        self.session, self.context, self.model = session, context, model
        self.shrinkage, self.loss = shrinkage, loss

    def refit(self, grown):
        """Set the values of the leaves of ``grown`` (``[(root, leaves)]``); rounds used."""
        (_, leaves), = grown  # one tree per iteration for regression losses
        paths = [list(leaf.key) for leaf in leaves]
        values, rounds = pooled_quantiles(self.session, self.context, self.model, paths,
                                          self.loss)
        for leaf, value in zip(leaves, values):
            leaf.value = self.shrinkage * value
        return rounds
