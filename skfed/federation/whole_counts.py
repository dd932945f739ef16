"""What a site decides, and sums, on all of a dataset's rows when they are partitions.

Three things a site function or its checks do on its rows differ when the rows are
partitions of a dataset on an engine (:mod:`skfed.sites.engine`); each is done here,
the same in one process, and recorded on a partition (under :class:`Recording`) for
the site to finish on the whole:

- *smallest-count rules*: a declared check that counts rows (``min_rows`` for a
  boosting node and its sibling, ``min_level_count`` for a categorical column's
  levels) calls :func:`at_least`; the site adds every partition's counts key by key
  and decides once (:func:`decide`): a level held by 3 rows of one partition and 7 of
  another is held by 10 rows of the dataset, as an in-memory site counts it;
- *float32 terms summed in row order* (:func:`float_terms`): whether adding the
  partitions' sums can round (:func:`any_order_exact`); where it can, the engine sums
  partition after partition instead;
- *numpy's pairwise sums* (:func:`pairwise_sum`): the runs and boundary blocks of
  numpy's recursion over the whole array (:func:`pairwise_plan`), added at the site in
  numpy's order (:func:`finish_pairwise`): the in-memory site's bits.

Like :mod:`skfed.federation.operations`, this module imports nothing of skfed's but
that one, so the estimators' declarations and the site service both use it.
"""

import contextvars
import functools

import numpy as np

from .operations import Refused

_RECORDING = contextvars.ContextVar("skfed_whole_counts", default=None)


class Recording:
    """``with Recording() as recording:`` — the counts of :func:`at_least` recorded in
    ``recording.records`` (``{name: [floor, refusal, {key: (rows, positive rows)}]}``),
    not decided."""

    def __init__(self, plan=None):
        self.records = {}
        self.floats = None  # (the terms' absolute sum, their smallest exponent)
        self.plan, self.pairwise = plan, {}  # this partition's part of pairwise sums

    def __enter__(self):
        self._token = _RECORDING.set(self)
        return self

    def __exit__(self, *exc):
        _RECORDING.reset(self._token)
        return False


def recording():
    """Whether counts are recorded here (on a partition) rather than decided."""
    return _RECORDING.get() is not None


def at_least(name, counts, floor, refusal):
    """Refuse unless every key of ``counts`` (``{key: (rows, positive rows)}``) with
    rows has at least ``floor`` positive rows; ``refusal`` is ``(rule, detail)`` or
    ``(rule, detail, columns)`` (a public detail: it names no count). Recorded instead
    under :class:`Recording`."""
    recording = _RECORDING.get()
    if recording is None:
        _decide(counts, floor, refusal)
        return
    entry = recording.records.setdefault(name, [floor, tuple(refusal), {}])
    for key, value in counts.items():
        entry[2][key] = entry[2].get(key, 0) + np.asarray(value, dtype=np.int64)


def float_terms(values):
    """A site function's float sums add these float32 terms in float64, each sum's terms
    one by one in row order (a boosting histogram's cells). On a partition, records
    their absolute sum and smallest exponent (:func:`any_order_exact` decides from every
    partition's); elsewhere nothing."""
    recording = _RECORDING.get()
    if recording is None:
        return
    values = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    nonzero = values[values > 0]
    if not nonzero.size:
        return
    total, low = recording.floats or (0.0, np.inf)
    recording.floats = (total + float(values.sum()), min(low, int(np.frexp(nonzero.min())[1])))


def any_order_exact(floats):
    """Whether every sum of the recorded float32 terms (``floats``: each partition's
    :attr:`Recording.floats`) is exact in float64 whatever the order of its additions:
    a float32 of exponent ``e`` is a multiple of ``2**(e - 24)``, so every partial sum
    is a multiple of the smallest such unit below the terms' absolute sum; under
    ``2**53`` units, every one is a float64 and no addition rounds. Then the partitions'
    sums added equal the in-memory site's row-order sums bit for bit."""
    parts = [f for f in floats if f is not None]
    if not parts:
        return True
    total, low = sum(f[0] for f in parts), min(f[1] for f in parts)
    return total * (1 + 1e-9) < 2.0 ** (low - 24 + 53)


def decide(records):
    """Every partition's recorded counts (in partition order) added key by key, then
    decided as one process would (the checks in the order the first partition met
    them)."""
    merged = {}
    for part in records:
        for name, (floor, refusal, counts) in (part or {}).items():
            entry = merged.setdefault(name, [floor, refusal, {}])
            for key, value in counts.items():
                entry[2][key] = entry[2].get(key, 0) + value
    for floor, refusal, counts in merged.values():
        _decide(counts, floor, refusal)


def _decide(counts, floor, refusal):
    for value in counts.values():
        rows, positive = (int(v) for v in np.asarray(value).reshape(2))
        if rows > 0 and positive < floor:
            raise Refused(refusal[0], refusal[1], columns=refusal[2] if len(refusal) > 2
                          else (), public=True)


def on_partitions(check):
    """A declared check that reads rows: on a dataset on an engine (a target with
    ``defer_check``) it runs on each partition, before the function there, its counts
    decided on the whole (:func:`at_least`); elsewhere, as written."""
    @functools.wraps(check)
    def checked(target, values, rules):
        defer = getattr(target, "defer_check", None)
        if defer is not None:
            return defer(check, values, rules)
        return check(target, values, rules)
    checked.on_partitions = True
    return checked


# --- numpy's pairwise sum of a dataset's terms, over its partitions -------------------
#: numpy's pairwise summation: blocks of at most this many terms are summed in eight
#: interleaved running sums; longer runs are split in two (the first half a multiple of 8)
PAIRWISE_BLOCK = 128


def pairwise_sum(name, terms):
    """``float(np.sum(terms))``: numpy's pairwise sum of a 1-D float64 array. On a
    partition of a dataset on an engine, also records what numpy's summation of the
    whole dataset's terms takes from this partition (:func:`pairwise_plan`): the sums
    of its ranges, and the terms of the blocks it shares with a neighbour; the site
    finishes the sum as numpy would (:func:`finish_pairwise`), to the bit."""
    terms = np.ascontiguousarray(terms, dtype=np.float64).ravel()
    recording = _RECORDING.get()
    if recording is not None and recording.plan is not None:
        ranges, pieces = recording.plan
        recording.pairwise[name] = ([float(np.sum(terms[a:b])) for a, b in ranges],
                                    [terms[a:b].copy() for a, b in pieces])
    return float(np.sum(terms))


def pairwise_plan(sizes):
    """How numpy sums the terms of partitions of ``sizes`` rows as one array:
    ``(parts, tree)``, each partition's ``(ranges, pieces)`` (local ``(start, stop)``
    of the runs it sums whole, and of its pieces of the blocks that span partitions),
    and the tree of additions (numpy's recursion: ``np.sum(a) == np.sum(a[:m]) +
    np.sum(a[m:])`` for ``len(a) > 128``, ``m`` half of it down to a multiple of 8)."""
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    parts = [([], []) for _ in sizes]

    def part_of(i):
        return int(np.searchsorted(starts, i, side="right")) - 1

    def plan(lo, hi):
        k = part_of(lo)
        if hi <= starts[k + 1]:  # inside one partition: its own np.sum
            parts[k][0].append((int(lo - starts[k]), int(hi - starts[k])))
            return ("range", k, len(parts[k][0]) - 1)
        if hi - lo <= PAIRWISE_BLOCK:  # a block across partitions: its terms
            refs, at = [], lo
            while at < hi:
                k = part_of(at)
                end = min(hi, starts[k + 1])
                parts[k][1].append((int(at - starts[k]), int(end - starts[k])))
                refs.append((k, len(parts[k][1]) - 1))
                at = end
            return ("block", refs)
        half = (hi - lo) // 2
        half -= half % 8
        return ("add", plan(lo, lo + half), plan(lo + half, hi))

    return parts, (plan(0, int(starts[-1])) if starts[-1] > 0 else ("block", []))


def finish_pairwise(tree, recorded):
    """The pairwise sum of :func:`pairwise_plan`'s ``tree`` from each partition's
    ``recorded`` ``(sums, pieces)``: numpy's additions, in its order."""
    kind = tree[0]
    if kind == "range":
        return recorded[tree[1]][0][tree[2]]
    if kind == "block":  # at most 128 terms: np.sum's blocked sum of them
        pieces = [recorded[k][1][j] for k, j in tree[1]]
        return float(np.sum(np.concatenate(pieces))) if pieces else 0.0
    return finish_pairwise(tree[1], recorded) + finish_pairwise(tree[2], recorded)
