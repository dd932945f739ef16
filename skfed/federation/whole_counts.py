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
