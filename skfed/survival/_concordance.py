"""Harrell's concordance index of risk scores, on arrays and over sites."""

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


def concordance_index(estimator, data):
    """Harrell's concordance index of a fitted :class:`FedCoxPH` on a federated dataset.

    Each site counts the concordant, discordant, tied and comparable pairs
    among its own rows (four numbers; :func:`~skfed.survival._site.site_concordance`)
    and the server adds them. Pairs of rows at two different sites are not
    compared: that would need one site's times and risk scores at the
    other. So ``"pooled"`` is the concordance over the pairs within sites
    (with one site, exactly the pooled index; with several, an estimate of
    it from a subset of the pairs: ``"exact"`` says which).

    Parameters
    ----------
    estimator : FedCoxPH
        Fitted.
    data : FederatedDataset
        Rows with a survival target (``target=[event, time]``).

    Returns
    -------
    result : dict
        ``"pooled"`` (float), ``"per_site"`` (``{site: float}``), ``"exact"``
        (bool: one site), ``"comparable_pairs"`` (int).
    """
    from ._site import site_concordance

    terms = data.map(site_concordance, np.asarray(estimator.coef_, dtype=float))
    total = {k: sum(t[k] for t in terms) for k in terms[0]}
    return {"pooled": index_from_counts(total),
            "per_site": {s: index_from_counts(t) for s, t in zip(data.sites, terms)},
            "exact": len(terms) == 1, "comparable_pairs": int(total["comparable"])}
