"""scikit-learn's bin thresholds of the pooled rows, found from the sites' counts.

scikit-learn 1.9's ``_BinMapper`` (``binning.py``), per continuous feature,
over the training rows without missing values (and without zero-weight rows
when there are sample weights):

- one distinct value: no threshold;
- at most ``max_bins`` distinct values: the midpoints of consecutive values;
- more: the percentiles ``linspace(0, 100, max_bins + 1)[1:-1]`` with
  ``method="averaged_inverted_cdf"`` (weighted: ``_weighted_percentile(...,
  average=True)``), duplicates removed, clipped to ``1e300``;
- above ``subsample = 200_000`` training rows, all of this on 200,000 rows
  drawn with replacement by ``RandomState(seed).choice`` (with probabilities
  ``w / sum(w)`` under sample weights, which are then dropped).

:func:`federated_thresholds` finds the same numbers without moving a row:
the distinct values, or the order statistics the percentiles read, come from
the exact search of :mod:`._selection` (counts below probe values, summed over
the sites), and the server then applies numpy's own arithmetic to them (the
midpoint rule, ``np.percentile`` on a stand-in array holding the order
statistics at their ranks). Above the subsample size each site replays
scikit-learn's draw itself (the seed, the pooled row count and its offset in
the pooled order are public) and counts each of its rows as often as it was
drawn, so the thresholds are those of scikit-learn fitted on the pooled rows
in site order. With sample weights the draw's cumulative probabilities are
summed per site, not over the pooled array: equal except where a draw falls
within rounding of a boundary between two rows (``binning_exact_`` is then
False).
"""

import numpy as np

from ._bins import _finish, midpoint_thresholds, percentile_levels
from ._selection import OrderQuery, run_search
from ._site import site_bin_counts

#: scikit-learn's binning subsample and its clip of large thresholds
SUBSAMPLE = 200_000
#: probe keys per feature and round
PROBE_BUDGET = 2048


def percentile_ranks(n, max_bins):
    """0-based ranks whose order statistics ``np.percentile(..., "averaged_inverted_cdf")``
    reads (a margin of one rank each side of numpy's own index arithmetic)."""
    virtual = n * np.true_divide(percentile_levels(max_bins), 100) - 1
    below = np.floor(virtual).astype(np.int64)
    ranks = np.concatenate([below + d for d in (-1, 0, 1, 2)] + [[0, n - 1]])
    return np.unique(np.clip(ranks, 0, n - 1))


def percentiles_from_ranks(n, ranks, values, max_bins):
    """``np.percentile`` of ``n`` sorted values of which those at ``ranks`` are known.

    The unknown positions are filled with their nearest known lower value (the
    stand-in stays sorted), and numpy reads only the known ones.
    """
    fill = np.searchsorted(ranks, np.arange(n), side="right") - 1
    stand_in = np.asarray(values)[np.maximum(fill, 0)]
    return np.percentile(stand_in, percentile_levels(max_bins), method="averaged_inverted_cdf")


class _Targets:
    """Sets each query's targets once its totals are known and it has proved to
    have more than ``max_bins`` distinct values."""

    def __init__(self, max_bins, weighted):
        self.max_bins, self.weighted = max_bins, weighted

    def __call__(self, queries):
        for q in queries:
            if not q.wants_distinct or np.isnan(q.count[-1]):
                continue
            if np.count_nonzero(np.diff(q.count) > 0) <= self.max_bins:
                continue
            q.give_up_distinct()
            if self.weighted:
                levels = percentile_levels(self.max_bins)
                q.set_targets(weight_targets=[p / 100 * q.total_weight for p in levels])
            else:
                q.set_targets(count_targets=percentile_ranks(int(q.total_count),
                                                             self.max_bins) + 1)


def _weighted_thresholds(q, max_bins):
    """``_weighted_percentile(..., average=True)`` at scikit-learn's levels, from the
    pinned values (and, where a level falls on a boundary, the next value)."""
    eps = np.finfo(np.float64).eps
    out = []
    for p in percentile_levels(max_bins):
        target = p / 100 * q.total_weight
        value = q.value_for_weight([target])[0]
        if q.weight_at(value) - target > eps:
            out.append(value)
        else:
            following = q.value_for_count([q.count_at(value) + 1])[0] \
                if q.count_at(value) < q.total_count else value
            out.append((value + following) / 2)
    return np.array(out)


def _boundary_targets(q, max_bins):
    """Count targets for the values just above weighted percentiles that fall on a
    boundary of the weighted distribution (needed for the average)."""
    eps = np.finfo(np.float64).eps
    wanted = []
    for p in percentile_levels(max_bins):
        target = p / 100 * q.total_weight
        value = q.value_for_weight([target])[0]
        if q.weight_at(value) - target <= eps and q.count_at(value) < q.total_count:
            wanted.append(q.count_at(value) + 1)
    return wanted


def federated_thresholds(session, context, *, features, max_bins, sampling):
    """The bin thresholds of the continuous ``features`` (model order).

    Parameters
    ----------
    session : FederationSession
    context : dict
        The fit's context (column order, categories; see :mod:`._site`).
    features : sequence of int
    max_bins : int
    sampling : dict
        How rows count (``mode``: ``"all"``, ``"weighted"`` or ``"draw"``, and
        the draw's public parameters).

    Returns
    -------
    thresholds : dict
        ``{feature: ndarray}``.
    rounds : int
    """
    sampling = dict(sampling, features=np.asarray(features, dtype=np.int32))
    weighted = sampling["mode"] == "weighted"
    queries = [OrderQuery(cap=max_bins, weighted=weighted) for _ in features]

    def ask(probes, starts):
        return session.sum(site_bin_counts, context, sampling, probes, starts, phase="setup")

    rounds = run_search(ask, queries, PROBE_BUDGET, _Targets(max_bins, weighted))
    if weighted:
        for q in queries:
            if not q.wants_distinct and q.total_count > 0:
                q.set_targets(count_targets=_boundary_targets(q, max_bins))
        rounds += run_search(ask, queries, PROBE_BUDGET)
    out = {}
    for f, q in zip(features, queries):
        out[f] = _thresholds_of(q, f, max_bins, weighted, context)
    return out, rounds


def _thresholds_of(q, feature, max_bins, weighted, context):
    if q.wants_distinct:
        distinct = q.distinct_values()
        if len(distinct) == 0:
            raise ValueError(f"feature {_feature_name(feature, context)} has no non-missing "
                             "value in the training rows of any site; drop it.")
        return midpoint_thresholds(distinct)
    if weighted:
        return _finish(_weighted_thresholds(q, max_bins))
    n = int(q.total_count)
    ranks = percentile_ranks(n, max_bins)
    return _finish(percentiles_from_ranks(n, ranks, q.value_for_count(ranks + 1), max_bins))


def _feature_name(feature, context):
    names = context.get("names")
    column = int(context["order"][feature])
    return repr(names[column]) if names is not None else f"{column}"
