"""What runs at a site for :class:`~skfed.survival.FedCoxPH`: module-level functions.

On a site's rows (:class:`~skfed.data.SiteData`, its target ``(event, time[,
stratum code])``) or on the client objective a fit session keeps there. Each
returns counts or sums, never a row; each is a named site operation
(:mod:`skfed.sites.operations`).
"""

import numpy as np

from ..data.site import SiteError, Targets, survival_array
from ..datafits.cox import (_expand, baseline_increments, cox_terms, event_grid,
                            risk_set_sums, score_residuals)
from ..solvers.newton import pack_upper
from ..stats._site import _coarsen
from ._grid import passing_cut_points
from ._pairs import concordance_counts


def site_event_times(site, time_grid, min_count):
    """The site's distinct event times per stratum, with their numbers of events.

    ``time_grid`` (cut points): times are first replaced by their interval's
    index. ``min_count``: adjacent times are merged (from the earliest on)
    until each bin holds at least that many events, all reported at the
    bin's last time (the Kaplan-Meier operation's rule, for the quantiles of
    ``time_grid=k``). Returns ``{"strata", "times", "events"}``: the stratum
    code of each entry, its time and its number of events.
    """
    y = survival_array(site.y)
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


def client_cox_baseline(client, theta, cuts, min_count=None):
    """At a site whose rows are their own strata: Breslow's cumulative baseline
    hazard per stratum, at its own event times (``cuts=None``), only at the
    grid's cut points, or (``cuts=None`` with ``min_count``) only at cut points
    the site chooses in each stratum, every interval holding 0 or at least
    ``min_count`` of its events and rows (:func:`~skfed.survival._grid.
    passing_cut_points`; a stratum without such a grid raises a
    :class:`~skfed.data.SiteError`)."""
    Y = client.Y
    grid = event_grid(Y)
    sums = risk_set_sums(client.X, client.raw(theta)[:, 0], Y, client.sample_weight, grid,
                         order=0)
    h, _ = baseline_increments(sums)
    strata, times, cumhaz = [], [], []
    start = 0
    for code in sorted(grid):
        t = grid[code]
        H = np.cumsum(h[start:start + len(t)])
        start += len(t)
        at = cuts
        if cuts is None and min_count is not None:  # the site's own coarsened grid
            rows = Y[:, 2] == code
            at = passing_cut_points(Y[rows, 0], Y[rows, 1] > 0, int(min_count))
            if at is None:
                raise SiteError(getattr(client, "site", "this site"),
                                f"no time grid with each interval holding 0 or at least "
                                f"{int(min_count)} events and rows in a stratum here.")
        if at is not None:  # the step function at the cut points only
            k = np.searchsorted(t, at, side="right") - 1
            t, H = np.asarray(at, dtype=float), np.where(k >= 0, H[np.maximum(k, 0)], 0.0)
        strata += [code] * len(t)
        times += list(t)
        cumhaz += list(H)
    return {"strata": np.asarray(strata, dtype=float), "times": np.asarray(times, dtype=float),
            "cumhaz": np.asarray(cumhaz, dtype=float)}


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


def risk_set_means(sums, ties):
    """The risk-set means the Schoenfeld residuals subtract, at each grid time:
    Efron's average over the ``d`` tie terms of ``(S1 - f_l T1) / (S0 - f_l T0)``
    (lifelines' ``_compute_schoenfeld_within_strata``), Breslow's ``S1 / S0``;
    zero where the time has no event."""
    rep, f, _, den = _expand(sums, ties)
    K, p = sums["s1"].shape
    terms = np.bincount(rep, minlength=K)
    out = np.zeros((K, p))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.add.at(out, rep, (sums["s1"][rep] - f[:, None] * sums["t1"][rep]) / den[:, None])
    has = terms > 0
    out[has] /= terms[has, None]
    return out


def _schoenfeld_design(site, coef, time_grid):
    """The site's covariates, encoded target (interval indices on a time grid) and
    weights, as the fit's client objective holds them."""
    from ..data.site import numeric_matrix

    X = numeric_matrix(site)
    coef = np.asarray(coef, dtype=float)
    if coef.shape != (X.shape[1],):
        raise SiteError(site.site, f"{X.shape[1]} covariates here, {coef.size} coefficients.")
    Y, sw = Targets("survival", time_grid=time_grid).encode(site.y, site.weights())
    return X, np.asarray(X @ coef).ravel(), Y, sw


def _event_covariate_sums(X, Y, grid):
    """At each grid time: the number of events and the (unweighted) sum of their
    covariates (lifelines' residuals are per event row, not weighted)."""
    ones = np.ones(len(Y))
    sums = risk_set_sums(X, np.zeros(len(Y)), Y, ones, grid, order=1)
    return sums["d"], sums["t1"]


def site_schoenfeld_sums(site, coef, grid, time_grid):
    """The sums a proportional-hazards test needs from a site, under a baseline shared
    across sites (see :func:`~skfed.survival.proportional_hazard_test`).

    At each time of the public ``grid`` (the fit's pooled event times, or its
    time grid's intervals, per stratum): the risk-set sums of the fit at
    ``coef`` (``s0, s1`` over the rows at risk, ``t0, t1`` over the events,
    ``d`` their number: what every Newton round of the fit sent) and the
    plain sum of the events' covariates ``event_x``; and at the union of the
    grid's times over strata, the weighted rows at risk and weighted events
    (``km_at_risk``, ``km_events``: the pooled Kaplan-Meier). Sums over rows
    only.
    """
    X, eta, Y, sw = _schoenfeld_design(site, coef, time_grid)
    sums = risk_set_sums(X, eta, Y, sw, grid, order=1)
    _, event_x = _event_covariate_sums(X, Y, grid)
    union = {0.0: np.unique(np.concatenate([np.asarray(t, dtype=float)
                                            for t in grid.values()]))}
    pooled = np.column_stack([Y[:, :2], np.zeros(len(Y))])  # the strata merged
    km = risk_set_sums(None, np.zeros(len(Y)), pooled, sw, union, order=0)
    out = {k: sums[k] for k in ("s0", "s1", "t0", "t1", "d", "w")}
    out.update(event_x=event_x, km_at_risk=km["s0"], km_events=km["w"])
    return out


def site_schoenfeld_moments(site, coef, ties):
    """The sums a proportional-hazards test needs from a site that is its own
    stratum (``strata="site"``): its Schoenfeld residuals at its own event
    times, summed over its events, plain and times ``g(t)`` for the
    transforms ``identity`` and ``log``, with ``sum g`` and ``sum g^2`` over
    its events and their number. No event time leaves the site."""
    X, eta, Y, sw = _schoenfeld_design(site, coef, None)
    grid = event_grid(Y)
    sums = risk_set_sums(X, eta, Y, sw, grid, order=1)
    d, event_x = _event_covariate_sums(X, Y, grid)
    resid = event_x - d[:, None] * risk_set_means(sums, ties)
    times = np.concatenate([grid[code] for code in sorted(grid)]) if grid else np.zeros(0)
    out = {"n_events": float(d.sum()), "resid": resid.sum(axis=0)}
    with np.errstate(divide="ignore"):
        for name, g in (("identity", times), ("log", np.log(times))):
            out[f"{name}_resid"] = g @ resid
            out[f"{name}_sum"] = float(d @ g)
            out[f"{name}_sq"] = float(d @ (g * g))
    return out


def site_concordance(site, coef, edges=None):
    """Harrell's concordance counts of the risk scores ``X @ coef`` on the site's rows.

    Without ``edges``: the counts of concordant, discordant, tied-risk and
    comparable pairs among its own rows, and the moments of its risk scores
    and log follow-up times (``n``, sums and sums of squares). With
    ``edges`` (bin edges ``{"time": ..., "risk": ...}``, public, from those
    moments): only the histograms of its rows and of its events over (time
    bin, risk bin), from which the server counts the pairs of rows at two
    different sites, to within the pairs that share a bin.
    """
    from ..data.site import numeric_matrix

    y = survival_array(site.y)
    X = numeric_matrix(site)
    coef = np.asarray(coef, dtype=float)
    if coef.shape != (X.shape[1],):
        raise SiteError(site.site, f"{X.shape[1]} covariates here, {coef.size} coefficients.")
    event, time = y[:, 0] > 0, y[:, 1]
    risk = np.asarray(X @ coef).ravel()
    lt = np.log1p(time)
    if edges is None:  # the first pass: the site's own pairs and the pooled moments' parts
        out = {k: float(v) for k, v in concordance_counts(event, time, risk).items()}
        out.update(n=float(len(risk)), risk_sum=float(risk.sum()), risk_sq=float(risk @ risk),
                   time_sum=float(lt.sum()), time_sq=float(lt @ lt))
        return out
    a = np.searchsorted(np.asarray(edges["time"], dtype=float), lt, side="right")
    b = np.searchsorted(np.asarray(edges["risk"], dtype=float), risk, side="right")
    shape = (len(edges["time"]) + 1, len(edges["risk"]) + 1)
    rows = np.zeros(shape)
    np.add.at(rows, (a, b), 1.0)
    events = np.zeros(shape)
    np.add.at(events, (a[event], b[event]), 1.0)
    return {"rows": rows, "events": events}


def _strata_column(site, column):
    X = site.X
    if not hasattr(X, "columns") or column not in X.columns:
        raise SiteError(site.site, f"no strata column {column!r} among the site's columns.")
    values = X[column]
    if values.isna().any():
        raise SiteError(site.site, f"strata column {column!r} has {int(values.isna().sum())} "
                                   "missing value(s); give them a level or drop the rows.")
    return values.astype(str).to_numpy()


def site_stratum_levels(site, column):
    """The levels of the strata column at the site, with their row counts."""
    levels, counts = np.unique(_strata_column(site, column), return_counts=True)
    return {"levels": levels.astype(str), "counts": counts.astype(float)}


def move_strata_to_target(site, column, levels):
    """A row step: the strata column leaves the covariates, and each row's level (its
    index in the public, sorted ``levels``) becomes the target's third column."""
    values = _strata_column(site, column)
    levels = np.asarray(levels, dtype=str)
    codes = np.searchsorted(levels, values)
    if np.any(codes >= levels.size) or np.any(levels[np.minimum(codes, levels.size - 1)]
                                               != values):
        raise SiteError(site.site, f"a level of strata column {column!r} is not among the "
                                   "pooled levels.")
    y = survival_array(site.y)[:, :2]
    return site.replace(X=site.X.drop(columns=[column]),
                        y=np.column_stack([y, codes.astype(float)]))
