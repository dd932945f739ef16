"""What runs at a site for :class:`~skfed.survival.FedCoxPH`: module-level functions.

On a site's rows (:class:`~skfed.data.SiteData`, its target ``(event, time[,
stratum code])``) or on the client objective a fit session keeps there. Each
returns counts or sums, never a row; each is a named site operation
(:mod:`skfed.sites.operations`).
"""

import numpy as np

from ..data.site import SiteError, Targets
from ..datafits.cox import (baseline_increments, cox_terms, event_grid, risk_set_sums,
                            score_residuals)
from ..solvers.newton import pack_upper
from ..stats._site import _coarsen


def site_event_times(site, time_grid, min_count):
    """The site's distinct event times per stratum, with their numbers of events.

    ``time_grid`` (cut points): times are first replaced by their interval's
    index. ``min_count``: adjacent times are merged (from the earliest on)
    until each bin holds at least that many events, all reported at the
    bin's last time (the Kaplan-Meier operation's rule, for the quantiles of
    ``time_grid=k``). Returns ``{"strata", "times", "events"}``: the stratum
    code of each entry, its time and its number of events.
    """
    y = np.asarray(site.y, dtype=float).reshape(site.n_samples, -1)
    Y, _ = Targets("survival", time_grid=time_grid).encode(y, site.weights())
    strata, times, events = [], [], []
    for code in np.unique(Y[:, 2]):
        rows = (Y[:, 2] == code) & (Y[:, 1] > 0)
        t, counts = np.unique(Y[rows, 0], return_counts=True)
        if min_count is not None and t.size:
            if rows.sum() < min_count:
                raise SiteError(site.site, f"{int(rows.sum())} events in a stratum: fewer "
                                           f"than {int(min_count)}, so no event time is sent.")
            t, counts = _merge(t, counts, int(min_count))
        strata += [code] * t.size
        times += list(t)
        events += list(counts)
    return {"strata": np.asarray(strata, dtype=float), "times": np.asarray(times, dtype=float),
            "events": np.asarray(events, dtype=float)}


def _merge(times, counts, min_count):
    """The Kaplan-Meier table's coarsening, on event counts."""
    ends, index = np.unique(_coarsen(times, counts, min_count), return_inverse=True)
    return ends, np.bincount(index, weights=counts)


def client_cox_inference(client, theta, cov_type):
    """At a site whose rows are their own strata (``strata="site"``): its
    information, log partial likelihoods (at ``theta`` and at zero) and the
    sandwich's meat from its own score residuals (``"robust"``: their
    outer products summed; ``"cluster"``: the outer product of their sum)."""
    X, Y, sw = client.X, client.Y, client.sample_weight
    eta = client.raw(theta)[:, 0]
    grid = event_grid(Y)
    sums = risk_set_sums(X, eta, Y, sw, grid, order=2)
    value, grad, H = cox_terms(sums, client.datafit.ties)
    null = cox_terms(risk_set_sums(X, np.zeros_like(eta), Y, sw, grid, order=0),
                     client.datafit.ties, order=0)[0]
    out = {"information": pack_upper(H), "loglike": -value, "loglike_null": -null}
    if cov_type != "nonrobust":
        h, xbar = baseline_increments(sums)
        r = score_residuals(X, eta, Y, sw, grid, h, xbar)
        s = r.sum(axis=0)
        out["meat"] = pack_upper(np.outer(s, s) if cov_type == "cluster" else r.T @ r)
    return out


def client_cox_baseline(client, theta):
    """At a site whose rows are their own strata: Breslow's baseline hazard
    increments at its own event times (on a coarsened grid: its intervals)."""
    Y = client.Y
    grid = event_grid(Y)
    sums = risk_set_sums(client.X, client.raw(theta)[:, 0], Y, client.sample_weight, grid,
                         order=0)
    h, _ = baseline_increments(sums)
    strata = np.concatenate([[s] * len(grid[s]) for s in sorted(grid)]) if grid else []
    times = np.concatenate([grid[s] for s in sorted(grid)]) if grid else []
    return {"strata": np.asarray(strata, dtype=float), "times": np.asarray(times, dtype=float),
            "hazard": h}


def client_cox_residual_meat(client, theta, grid, h, xbar, cov_type):
    """At a site, under a shared baseline: the sandwich's meat from its rows'
    score residuals at the broadcast baseline increments ``h`` and risk-set
    means ``xbar`` (sums over its rows; ``"cluster"``: the outer product of
    their sum, the site being the cluster)."""
    eta = client.raw(theta)[:, 0]
    r = score_residuals(client.X, eta, client.Y, client.sample_weight, grid, np.asarray(h),
                        np.asarray(xbar))
    s = r.sum(axis=0)
    return {"meat": pack_upper(np.outer(s, s) if cov_type == "cluster" else r.T @ r)}


def site_concordance(site, coef):
    """Harrell's concordance counts of the risk scores ``X @ coef`` on the site's
    rows: concordant, discordant, tied-risk and comparable pairs (four numbers)."""
    from ..data.site import numeric_matrix
    from ._concordance import concordance_counts

    y = np.asarray(site.y, dtype=float).reshape(site.n_samples, -1)
    X = numeric_matrix(site)
    coef = np.asarray(coef, dtype=float)
    if coef.shape != (X.shape[1],):
        raise SiteError(site.site, f"{X.shape[1]} covariates here, {coef.size} coefficients.")
    counts = concordance_counts(y[:, 0] > 0, y[:, 1], np.asarray(X @ coef).ravel())
    return {k: float(v) for k, v in counts.items()}
