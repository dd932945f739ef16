"""Harrell's concordance on arrays: the pair counts and the index read from them."""

import numpy as np

#: events compared at a time against every row: the chunk bounds the memory used
_CHUNK = 512


def concordance_counts(event, time, risk):
    """Harrell's pair counts: ``concordant``, ``discordant``, ``tied_risk`` and
    ``comparable``.

    A pair is comparable when the row with the earlier time had the event
    (an event and a censoring at the same time count too, the censored row
    having outlived; two events at one time do not): scikit-survival's
    ``concordance_index_censored`` and lifelines' ``concordance_index``.
    The row with the event should have the higher risk.
    """
    event = np.asarray(event, dtype=bool)
    time = np.asarray(time, dtype=float)
    risk = np.asarray(risk, dtype=float)
    out = {"concordant": 0, "discordant": 0, "tied_risk": 0, "comparable": 0}
    rows = np.flatnonzero(event)
    for start in range(0, rows.size, _CHUNK):
        i = rows[start:start + _CHUNK]
        ti, ri = time[i, None], risk[i, None]
        comparable = (time[None, :] > ti) | ((time[None, :] == ti) & ~event[None, :])
        out["concordant"] += int(np.sum(comparable & (risk[None, :] < ri)))
        out["discordant"] += int(np.sum(comparable & (risk[None, :] > ri)))
        out["tied_risk"] += int(np.sum(comparable & (risk[None, :] == ri)))
        out["comparable"] += int(np.sum(comparable))
    return out


def index_from_counts(counts):
    """``(concordant + tied_risk / 2) / comparable`` (NaN without comparable pairs)."""
    if not counts["comparable"]:
        return float("nan")
    return (counts["concordant"] + 0.5 * counts["tied_risk"]) / counts["comparable"]
