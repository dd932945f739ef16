"""Harrell's concordance index of a fitted Cox model over sites: each site's own pairs
(:func:`~skfed.survival._site.site_concordance`), and the pairs across sites from the
sites' histograms. The pair counts on arrays are in :mod:`skfed.survival._pairs`."""

import numpy as np

from ..federation.session import FederationSession
from ._pairs import index_from_counts
from ._site import site_concordance

#: bins per axis of the histograms that count the pairs of rows at two sites
N_BINS = 128


def _edges(total, prefix):
    """Bin edges at the normal quantiles of the pooled moments (no row's value)."""
    from scipy.stats import norm

    n = total["n"]
    mean = total[f"{prefix}_sum"] / n
    sd = np.sqrt(max(total[f"{prefix}_sq"] / n - mean * mean, 0.0))
    if not sd > 0:
        return np.array([mean])
    return mean + sd * norm.ppf(np.arange(1, N_BINS) / N_BINS)


def _cross_site_pairs(histograms):
    """Pairs of an event at one site and a row at another, from the sites' histograms
    over (time bin, risk bin): ``(concordant, discordant, same risk bin, same time bin)``.

    A later time bin makes a pair comparable, the same time bin leaves it
    undecided; within comparable pairs a lower risk bin is concordant, the
    same risk bin undecided."""
    rows_total = sum(h["rows"] for h in histograms)
    out = np.zeros(4)
    for h in histograms:
        E, N = h["events"], rows_total - h["rows"]  # the other sites' rows
        later = np.cumsum(N[::-1], axis=0)[::-1]  # rows in time bins >= a ...
        later = np.vstack([later[1:], np.zeros((1, N.shape[1]))])  # ... strictly after a
        below = np.cumsum(later, axis=1) - later  # and in a lower risk bin
        above = later.sum(axis=1, keepdims=True) - below - later
        out += [np.sum(E * below), np.sum(E * above), np.sum(E * later),
                np.sum(E * N.sum(axis=1, keepdims=True))]
    return out


def concordance_index(estimator, data):
    """Harrell's concordance index of a fitted :class:`FedCoxPH` on a federated dataset.

    No row leaves a site. Each site counts the concordant, discordant, tied
    and comparable pairs among its own rows (exact), and sends the
    histograms of its rows and of its events over a grid of (log time,
    risk score) bins whose edges come from pooled moments. The server
    counts the pairs of rows at two different sites from the histograms:
    exactly, except the pairs that share a time bin or a risk bin, which
    give the bounds ``"lower"`` and ``"upper"`` (all of them discordant, or
    all concordant). ``"pooled"`` counts the pairs sharing a risk bin as
    ties and half of those sharing a time bin as comparable. With one site
    everything is exact. A site service sends its histograms only when each
    nonzero cell holds ``min_level_count`` rows (or it allows event times);
    otherwise ``"pooled"`` is over the pairs within sites
    (``"cross_site_pairs": False``).

    Parameters
    ----------
    estimator : FedCoxPH
        Fitted.
    data : FederatedDataset
        Rows with a survival target (``target=[event, time]``).

    Returns
    -------
    result : dict
        ``"pooled"``, ``"lower"``, ``"upper"`` (floats), ``"per_site"``
        (``{site: float}``, exact), ``"exact"`` (bool), ``"cross_site_pairs"``
        (bool).
    """
    coef = np.asarray(estimator.coef_, dtype=float)
    session = FederationSession.for_dataset(data)
    terms = session.per_site(site_concordance, coef, None, phase="analysis")
    keys = ("concordant", "discordant", "tied_risk", "comparable")
    within = {k: sum(t[k] for t in terms) for k in keys}
    per_site = {s: index_from_counts(t) for s, t in zip(data.sites, terms)}
    if len(terms) == 1:
        c = index_from_counts(within)
        return {"pooled": c, "lower": c, "upper": c, "per_site": per_site, "exact": True,
                "cross_site_pairs": True}
    moments = {k: sum(t[k] for t in terms) for k in ("n", "risk_sum", "risk_sq", "time_sum",
                                                     "time_sq")}
    edges = {"time": _edges(moments, "time"), "risk": _edges(moments, "risk")}
    histograms = session.per_site(site_concordance, coef, edges, phase="analysis")
    if any("rows" not in h for h in histograms):
        # a site service kept its histograms (cells of fewer than min_level_count rows):
        # the pairs within sites only
        c = index_from_counts(within)
        return {"pooled": c, "lower": float("nan"), "upper": float("nan"),
                "per_site": per_site, "exact": False, "cross_site_pairs": False}
    conc, disc, same_risk, same_time = _cross_site_pairs(histograms)
    sure_conc = within["concordant"] + 0.5 * within["tied_risk"] + conc
    sure = within["comparable"] + conc + disc
    undecided = same_risk + same_time
    pooled = (sure_conc + 0.5 * same_risk + 0.25 * same_time) / (sure + same_risk
                                                                 + 0.5 * same_time)
    return {"pooled": float(pooled), "lower": float(sure_conc / (sure + undecided)),
            "upper": float((sure_conc + undecided) / (sure + undecided)),
            "per_site": per_site, "exact": False, "cross_site_pairs": True}
