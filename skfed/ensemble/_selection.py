"""Exact pooled order statistics and distinct values, from counts below probes.

The server never sees a row. It keeps, for each *query* (a feature's values, a
leaf's residuals), a sorted list of probe keys and the pooled count (and
weight) of values at or below each: every round it sends probes inside the
gaps it still needs to narrow and the sites answer, per probe, how many of
their values lie at or below it and, per gap between consecutive probes, the
sum of those values. All three are sums over rows, so they travel through the
federation session's sum (masked or plain).

Values are compared through an order-preserving map of float64 onto int64
*keys* (``-0.0`` and ``0.0`` share one), so a gap ``(lo, hi]`` of width one
holds a single value, known exactly: the value of key ``hi``. A gap is split
into equal parts of key space; in addition, when its values' sum ``S`` and
count ``c`` are known, the key of ``S / c`` and its neighbours at distances
1, 2, 4, ... up to about ``2c`` (and 4096) are probed: a gap holding one row,
or many rows of one value, is then pinned in the next round (a float sum of
``c`` equal values is off by well under ``c`` units in the last place of the
value, so farther guesses would only cost probes). Correctness never rests on
that guess: a value is known only once its gap has width one.

A query either wants all its distinct values (while it has at most ``cap``
of them: more gaps with values than ``cap`` proves it has more, and the query
falls back to its targets) or only some *targets*: the smallest value whose
pooled count reaches ``t`` (the ``t``-th smallest, 1-based), or whose pooled
weight reaches ``a``.
"""

import numpy as np

from ..preprocessing._imputer import _from_ordered as key_values
from ..preprocessing._imputer import _to_ordered

#: the key below every value (the gap above it holds all of them) and the key of +inf
KEY_FLOOR = int(_to_ordered(np.array([-np.inf]))[0]) - 1
KEY_CEIL = int(_to_ordered(np.array([np.inf]))[0])
#: distances of the guesses around the key of a gap's mean (a sum of c equal values
#: is off by under c units in the last place; a gap's guesses reach about 2c)
_GUESS_STEPS = np.array([0, -1] + [s * (1 << j) for j in range(1, 13) for s in (1, -1)],
                        dtype=np.int64)
#: probes per open gap and per query and round (at least)
_MIN_SPLIT = 8
#: a safety net: 64 bits of key space are exhausted long before
_MAX_ROUNDS = 80


def value_keys(values):
    """The int64 keys of float64 ``values`` (order-preserving; NaN not allowed)."""
    return _to_ordered(np.asarray(values, dtype=np.float64))


def _sorted_unique(keys):
    """Sorted distinct int64 keys (a sort, not numpy's hash-based ``unique``)."""
    keys = np.sort(keys)
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if keys.size else keys


def _merged(keys, probes):
    """The sorted union of two sorted arrays of distinct keys, and where each key and
    each probe lands in it: a merge (the probes not among ``keys`` inserted at their
    places), not a sort of both nor a search of each in the union."""
    at = np.searchsorted(keys, probes)
    fresh = (at == len(keys)) | (keys[np.minimum(at, len(keys) - 1)] != probes)
    # a key moves up by the fresh probes below it; a probe lands at its place among
    # the keys, moved up by the fresh probes before it (all smaller: probes are sorted)
    below = np.cumsum(np.bincount(at[fresh], minlength=len(keys) + 1))[:len(keys)]
    before = np.cumsum(fresh) - fresh
    return (np.insert(keys, at[fresh], probes[fresh]), np.arange(len(keys)) + below,
            at + before)


def _widths(keys):
    """Widths of the gaps between consecutive keys, exactly (as Python ints when the
    difference would overflow int64)."""
    lo, hi = keys[:-1], keys[1:]
    return hi.astype(np.uint64) - lo.astype(np.uint64)  # < 2**64: exact modulo 2**64


class OrderQuery:
    """What the server knows of one query's pooled values.

    Parameters
    ----------
    cap : int or None
        Find every distinct value while there are at most ``cap`` of them
        (``None``: only the targets).
    weighted : bool
        Whether the sites also report weights (weight targets need them).
    """

    def __init__(self, *, cap=None, weighted=False):
        self.keys = np.array([KEY_FLOOR, KEY_CEIL], dtype=np.int64)
        self.count = np.array([0.0, np.nan])
        self.weight = np.array([0.0, np.nan]) if weighted else None
        self.gap_sum = np.array([np.nan, np.nan])
        self.cap = cap
        self.count_targets = np.empty(0)
        self.weight_targets = np.empty(0)
        self.targets_set = cap is None

    # -- what is known -------------------------------------------------------
    @property
    def total_count(self):
        return float(self.count[-1])

    @property
    def total_weight(self):
        return float(self.weight[-1])

    @property
    def wants_distinct(self):
        return self.cap is not None

    def set_targets(self, count_targets=(), weight_targets=()):
        """Look for the smallest values whose pooled count reaches each of
        ``count_targets`` (or pooled weight each of ``weight_targets``)."""
        self.count_targets = np.unique(np.concatenate(
            [self.count_targets, np.asarray(count_targets, dtype=float)]))
        self.weight_targets = np.unique(np.concatenate(
            [self.weight_targets, np.asarray(weight_targets, dtype=float)]))
        self.targets_set = True

    def give_up_distinct(self):
        self.cap = None

    def _occupied(self):
        return np.diff(self.count) > 0

    def _holding(self, cumulative, targets):
        """Gaps (by index of their upper key) holding each target."""
        return np.searchsorted(cumulative, targets, side="left")

    def open_gaps(self):
        """Indices ``i`` of the gaps ``(keys[i-1], keys[i]]`` still to narrow."""
        unknown = np.isnan(self.count[1:])
        wide = _widths(self.keys) > 1
        wanted = np.zeros(len(self.keys) - 1, dtype=bool)
        if self.wants_distinct:
            wanted |= self._occupied()
        if self.count_targets.size and not unknown.any():
            wanted[self._holding(self.count, self.count_targets) - 1] = True
        if self.weight_targets.size and not unknown.any():
            at = self._holding(self.weight, self.weight_targets)
            wanted[np.minimum(at, len(self.keys) - 1) - 1] = True
        return np.flatnonzero(unknown | (wanted & wide)) + 1

    def distinct_values(self):
        """The sorted distinct values (when all are pinned)."""
        occupied = np.flatnonzero(self._occupied()) + 1
        return key_values(self.keys[occupied])

    def count_at(self, value):
        """Pooled count of values ``<= value`` (``value`` must be a pinned value)."""
        return float(self.count[np.searchsorted(self.keys, value_keys([value])[0])])

    def weight_at(self, value):
        return float(self.weight[np.searchsorted(self.keys, value_keys([value])[0])])

    def value_for_count(self, targets):
        """The smallest pinned values whose pooled count reaches each target."""
        at = self._holding(self.count, np.asarray(targets, dtype=float))
        return key_values(self.keys[at])

    def value_for_weight(self, targets):
        at = self._holding(self.weight, np.asarray(targets, dtype=float))
        return key_values(self.keys[np.minimum(at, len(self.keys) - 1)])

    # -- a round -------------------------------------------------------------
    def probes(self, budget):
        """The keys to ask about next (sorted, unique; empty when done)."""
        gaps = self.open_gaps()
        if gaps.size == 0:
            return np.empty(0, dtype=np.int64)
        parts = max(_MIN_SPLIT, budget // gaps.size)
        lo, hi = self.keys[gaps - 1], self.keys[gaps]
        width = hi.astype(np.uint64) - lo.astype(np.uint64)
        step = np.maximum(width // np.uint64(parts), np.uint64(1))
        j = np.arange(1, parts, dtype=np.uint64)
        inner = (lo.astype(np.uint64)[:, None] + step[:, None] * j[None, :]).view(np.int64)
        inner = inner[(inner > lo[:, None]) & (inner < hi[:, None])]
        out = [lo, hi, inner, self._guesses(gaps, lo, hi)]
        return _sorted_unique(np.concatenate(out))

    def _guesses(self, gaps, lo, hi):
        """Keys around each gap's mean value (where its sum and count are known)."""
        c = self.count[gaps] - self.count[gaps - 1]
        s = self.gap_sum[gaps]
        ok = (c > 0) & np.isfinite(s)
        if not ok.any():
            return np.empty(0, dtype=np.int64)
        with np.errstate(invalid="ignore", over="ignore"):
            mean = s[ok] / c[ok]
        fine = ~np.isnan(mean)
        centre = value_keys(mean[fine])
        low, high = lo[ok][fine], hi[ok][fine]
        # clip the centre into the gap first: no overflow when adding the steps
        centre = np.clip(centre, low + 1, high)
        rows_in = c[ok][fine]
        # |steps| up to about 2c units: a sum of c equal values is off by fewer
        reach = np.where(rows_in == 1, 1, 2 * np.minimum(rows_in, 1 << 12))
        guesses = centre[:, None] + _GUESS_STEPS[None, :]
        keep = (np.abs(_GUESS_STEPS)[None, :] <= reach[:, None]) & \
            (guesses > low[:, None]) & (guesses <= high[:, None])
        return guesses[keep]

    def absorb(self, probes, count, weight, gap_sum):
        """Merge the pooled answers for ``probes`` (sorted unique keys)."""
        keys, old, new = _merged(self.keys, probes)
        merged_count = np.full(len(keys), np.nan)
        merged_count[old] = self.count
        merged_count[new] = count
        if self.weight is not None:
            merged_weight = np.full(len(keys), np.nan)
            merged_weight[old] = self.weight
            merged_weight[new] = weight
            self.weight = merged_weight
        sums = np.full(len(keys), np.nan)
        # an old gap keeps its sum if no new probe fell inside it
        still = np.zeros(len(keys), dtype=bool)
        still[old[1:]] = old[1:] - old[:-1] == 1
        sums[old[still[old]]] = self.gap_sum[still[old]]
        # a gap between consecutive probes that are also consecutive keys
        adjacent = new[1:] - new[:-1] == 1
        sums[new[1:][adjacent]] = np.asarray(gap_sum)[1:][adjacent]
        self.keys, self.count, self.gap_sum = keys, merged_count, sums


def pack_probes(queries, budget):
    """The next probes of every query, concatenated, with each query's start."""
    chunks = [q.probes(budget) for q in queries]
    starts = np.zeros(len(chunks) + 1, dtype=np.int64)
    starts[1:] = np.cumsum([len(c) for c in chunks])
    flat = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
    return flat, starts


def unpack_answers(queries, probes, starts, answer):
    """Give each query its share of the pooled ``answer`` to ``probes``."""
    weight = answer.get("weight")
    for q, a, b in zip(queries, starts[:-1], starts[1:]):
        if a == b:
            continue
        q.absorb(probes[a:b], answer["count"][a:b],
                 None if weight is None else weight[a:b], answer["sum"][a:b])


def run_search(ask, queries, budget, on_round=None):
    """Narrow every query until it is settled; returns the rounds used.

    ``ask(probes, starts)`` returns the pooled ``count``, ``sum`` (and
    ``weight``) for the concatenated probes; ``on_round(queries)`` may set
    targets once totals are known (it runs after every round).
    """
    rounds = 0
    while True:
        if on_round is not None:
            on_round(queries)
        probes, starts = pack_probes(queries, budget)
        if probes.size == 0:
            return rounds
        rounds += 1
        if rounds > _MAX_ROUNDS:  # pragma: no cover - 64-bit keys run out far earlier
            raise RuntimeError("the federated order-statistic search did not converge; "
                               "please report this.")
        unpack_answers(queries, probes, starts, ask(probes, starts))


def count_below(values, multiplicity, weights, probes):
    """One site's answer for one query: its counts (and weights) at or below each
    probe, and the sum of its values in each gap between consecutive probes.

    ``values`` are the site's non-missing values of the query, ``multiplicity``
    how many times each row counts (0 leaves it out) and ``weights`` its
    weights (or ``None``). The first gap runs from minus infinity.
    """
    return SortedValues(values, multiplicity, weights).count_below(probes)


class SortedValues:
    """One site's values of one query, sorted once, to answer many rounds of probes
    (:func:`count_below`) without sorting again."""

    def __init__(self, values, multiplicity, weights):
        keep = multiplicity > 0
        values, multiplicity = values[keep], multiplicity[keep]
        self.total = int(multiplicity.sum())
        if weights is None:
            # a row counted m times is m equal values: one sort of the values (keys keep
            # their order; -0.0 and 0.0 share a key) and no running counts
            if not np.all(multiplicity == 1):
                values = np.repeat(values, multiplicity)
            values = np.sort(values)
            self.sorted_keys, self.cum_count, self.cum_weight = value_keys(values), None, None
            # a zero past the last value: a gap's values are then one run of it
            self.sorted_terms = np.concatenate([values, [0.0]])
            return
        keys = value_keys(values)
        # the order among equal keys shows in the running weights: a stable sort
        order = np.argsort(keys, kind="stable")
        self.sorted_keys = keys[order]
        self.cum_count = None if np.all(multiplicity == 1) else np.concatenate(
            [[0], np.cumsum(multiplicity[order], dtype=np.int64)])
        self.cum_weight = np.concatenate([[0.0], np.cumsum(np.asarray(weights)[keep][order])])
        # each value times its multiplicity, in sorted order, and a zero past the last
        self.sorted_terms = np.concatenate(
            [np.multiply(multiplicity[order], values[order], dtype=np.float64), [0.0]])

    def count_below(self, probes):
        """The answer for sorted ``probes`` (see :func:`count_below`)."""
        at = np.searchsorted(self.sorted_keys, probes, side="right")
        count = at if self.cum_count is None else self.cum_count[at]
        out = {"count": count.astype(np.int32 if self.total < 2**31 else np.int64)}
        if self.cum_weight is not None:
            out["weight"] = self.cum_weight[at]
        # gap j holds the sorted values from at[j - 1] to at[j] (from 0 for the first):
        # each gap's sum in one pass, in sorted order (a sum only guides the next probes,
        # a gap of one row's sum is its value in any order, and a value is known only
        # once its gap has width one); reduceat gives an empty run its first term, so
        # empty gaps are set to zero
        starts = np.concatenate([[0], at])
        sums = np.add.reduceat(self.sorted_terms, starts)[:len(probes)]
        sums[starts[:-1] >= at] = 0.0
        out["sum"] = sums
        return out
