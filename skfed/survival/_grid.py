"""Time grids that pass a site's small-count rule for a Cox model's baseline hazard.

A site that does not release exact event times (a site service without
``allow_event_times``) reports a baseline hazard only at cut points
``c_1 < ... < c_m`` whose every interval ``(c_{k-1}, c_k]`` (the first from
minus infinity, the last, after ``c_m``, to infinity) holds 0 or at least
``min_count`` of its events and 0 or at least ``min_count`` of its rows: the
rule a site service applies to ``fit.cox_baseline`` and ``fit.risk_sets``
(:mod:`skfed.survival._site`). The functions here run at the site, on its own rows:

- :func:`passing_cut_points` chooses the site's own cut points (each interval
  closed as soon as it holds ``min_count`` events and rows);
- :func:`intervals_pass` is the check itself.

What a grid chosen here discloses: each cut point lies between the last time
of a group of at least ``min_count`` events (and rows) and the next time at
the site, at the roundest number there (:func:`roundest_between`), so a cut
point is one of the site's times only where the times themselves are that
coarse (whole weeks); the number of cut points bounds the site's number of
events (at least ``min_count`` per interval). The same rule decides a
life table's cut points (``stats.life_table``, :mod:`skfed.stats._survival_site`).
"""

import math

import numpy as np


def roundest_between(low, high):
    """The number with the fewest significant digits in ``[low, high)``.

    Tried in the order ``10^e, 5 10^(e-1), 2 10^(e-1), 10^(e-1), ...`` from
    the power of ten above ``high``: the first multiple of a step inside the
    interval; ``low`` itself if none is (``high`` within rounding of ``low``).

    Parameters
    ----------
    low : float
    high : float
        Larger than ``low`` (may be infinite: then ``low`` is returned, so
        that no cut point is placed beyond the site's last time).

    Returns
    -------
    float
    """
    if not math.isfinite(high) or high <= low:
        return float(low)
    top = math.ceil(math.log10(max(abs(high), abs(low), high - low, 1e-300)))
    for exponent in range(top, top - 17, -1):
        for factor in (1.0, 0.5, 0.2):
            step = factor * 10.0 ** exponent
            digits = max(0, 1 - exponent)  # a clean decimal, without float noise
            value = math.ceil(low / step) * step
            for candidate in (round(value - step, digits), round(value, digits),
                              round(value + step, digits)):
                if low <= candidate < high:
                    return float(candidate)
    return float(low)


def _is_small(count, min_count):
    """A count the rule refuses: 1 to ``min_count - 1``."""
    return 0 < count < min_count


def _greedy(events, rows, min_count, accept_empty, allowed):
    """The atoms after which a cut is placed (indices into the atoms where ``allowed``):
    an interval is closed once it holds ``min_count`` events and rows (``accept_empty``:
    also when it holds no event and no row)."""
    kept, n_events, n_rows = [], 0, 0
    for k in range(len(events)):
        n_events, n_rows = n_events + events[k], n_rows + rows[k]
        if not allowed[k]:
            continue
        full = n_events >= min_count and n_rows >= min_count
        if full or (accept_empty and n_events == 0 and n_rows == 0):
            kept.append(k)
            n_events = n_rows = 0
    return kept


def _passes(kept, events, rows, min_count):
    """Whether every interval of the cuts after the atoms ``kept`` passes."""
    bounds = [0, *(k + 1 for k in kept), len(events)]
    return all(not _is_small(sum(events[a:b]), min_count)
               and not _is_small(sum(rows[a:b]), min_count)
               for a, b in zip(bounds[:-1], bounds[1:]))


def _close_after_last_event(kept, events, rows, min_count, allowed):
    """The cuts ``kept`` with the last one moved to just after the last event, so that
    no event is left beyond the last cut (its hazard would not be released); ``None``
    when no cut is allowed there or the rows after it do not pass."""
    last_event = int(np.flatnonzero(events)[-1]) if np.any(events) else None
    if last_event is None or not allowed[last_event]:
        return None
    for candidate in (kept + [last_event], kept[:-1] + [last_event]):
        candidate = [k for k in candidate if k <= last_event]
        if candidate and candidate[-1] == last_event and sorted(set(candidate)) == candidate \
                and _passes(candidate, events, rows, min_count):
            return candidate
    return None


def _settle_tail(kept, events, rows, min_count, own, allowed):
    """The cuts ``kept`` made to pass at the end: for the site's own grid (``own``)
    the last interval closed just after the last event where the rows allow it; else
    cuts dropped from the end (their intervals merged) until the interval after the
    last cut passes. ``None``: no grid passes."""
    if own:
        start = kept[-1] + 1 if kept else 0
        if kept and not any(events[start:]) and _passes(kept, events, rows, min_count):
            return kept
        closed = _close_after_last_event(kept, events, rows, min_count, allowed)
        if closed is not None:
            return closed
    kept = list(kept)
    while not _passes(kept, events, rows, min_count):
        if not kept:
            return None
        kept.pop()
    return kept


def passing_cut_points(time, event, min_count, cuts=None):
    """Cut points whose every interval holds 0 or ``min_count`` events and rows here.

    Parameters
    ----------
    time : ndarray of shape (n_rows,)
        The rows' follow-up times (one stratum of one site).
    event : ndarray of bool of shape (n_rows,)
    min_count : int
    cuts : array-like of float or None, default=None
        ``None``: the site's own cut points (an interval closed as soon as it
        holds ``min_count`` events and rows, each cut at the roundest number
        between the interval's last time and the next; at the site's largest
        time only when ``min_count`` rows share it; the last interval closed
        just after the last event where the rows allow it). Otherwise the
        analyst's increasing cut points, of which the largest subset found
        by merging intervals from the first on is kept.

    Returns
    -------
    ndarray or None
        The cut points (of the analyst's, possibly none: one interval), or
        ``None`` when no grid passes (the rows hold 1 to ``min_count - 1``
        events or rows; for the site's own grid: no grid with a cut point).
    """
    time = np.asarray(time, dtype=float)
    event = np.asarray(event, dtype=bool)
    own, min_count = cuts is None, int(min_count)
    if own:
        atoms, index = np.unique(time, return_inverse=True)
        values = [roundest_between(a, b) for a, b in zip(atoms[:-1], atoms[1:])]
        values.append(atoms[-1] if atoms.size else np.nan)
    else:
        values = np.asarray(cuts, dtype=float)
        index = np.searchsorted(values, time, side="left")
        atoms = np.arange(values.size + 1)
    events = np.bincount(index[event], minlength=len(atoms))
    rows = np.bincount(index, minlength=len(atoms))
    # a cut after the last atom: never an analyst's (none is there); the site's own only
    # at a time shared by min_count rows (else it would be one row's time, the largest)
    allowed = np.ones(len(atoms), dtype=bool)
    allowed[-1] = own and rows[-1] >= min_count
    kept = _settle_tail(_greedy(events, rows, min_count, not own, allowed), events, rows,
                        min_count, own, allowed)
    if kept is None or (own and not kept):  # the site's own grid has at least one cut
        return None
    return np.asarray([values[k] for k in kept], dtype=float)


def intervals_pass(time, event, cuts, min_count):
    """Whether every interval of ``cuts`` holds 0 or ``min_count`` events and rows.

    Parameters
    ----------
    time : ndarray of shape (n_rows,)
    event : ndarray of bool of shape (n_rows,)
    cuts : array-like of float
        Increasing cut points; interval ``k`` is ``(c_{k-1}, c_k]``.
    min_count : int

    Returns
    -------
    bool
    """
    index = np.searchsorted(np.asarray(cuts, dtype=float), np.asarray(time, dtype=float),
                            side="left")
    event = np.asarray(event, dtype=bool)
    for counts in (np.bincount(index[event]), np.bincount(index)):
        if np.any((counts > 0) & (counts < min_count)):
            return False
    return True
