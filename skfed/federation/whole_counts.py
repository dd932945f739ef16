"""Smallest-count rules decided on all of a dataset's rows, when they are partitions.

A declared check that counts rows (``min_rows`` for a boosting node and its sibling,
``min_level_count`` for a categorical column's levels) calls :func:`at_least`. In one
process it decides at once. On a partition of a dataset on an engine
(:mod:`skfed.sites.engine`) it records the counts instead (under :class:`Recording`),
and the site adds every partition's counts key by key and decides once
(:func:`decide`): a level held by 3 rows of one partition and 7 of another is held by
10 rows of the dataset, as an in-memory site counts it.

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

    def __init__(self):
        self.records = {}
        self.floats = None  # (the terms' absolute sum, their smallest exponent)

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
