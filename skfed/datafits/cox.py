"""The Cox partial likelihood (Breslow and Efron ties, strata, sample weights).

The loss of a client is minus its log partial likelihood. With ``D_t`` the
rows with an event at the distinct event time ``t`` (per stratum), ``R_t``
the rows still at risk (time >= t), ``d`` the number of events at ``t``,
``W`` their weight sum and ``phi_i = w_i exp(eta_i)``:

    -log PL = sum_t [ -sum_{D_t} w_i eta_i + (W / d) sum_{l<d} log(S0 - f_l T0) ]

with ``S0 = sum_{R_t} phi``, ``T0 = sum_{D_t} phi``, ``f_l = l / d`` for
Efron and ``0`` for Breslow (lifelines' weighted Efron: the weight of a tie is
spread evenly over its ``d`` terms).

Everything is assembled from **risk-set sums** at a grid of event times
(:func:`risk_set_sums`): ``S0, S1 = sum phi x, S2 = sum phi x x'`` over the
rows at risk and ``T0, T1, T2`` over the events at each time. They add over
sites, so the same two functions serve a site's own strata (its own event
times: nothing leaves the site but the result) and a baseline shared across
sites (the sums at the pooled event times, added at the server:
:class:`~skfed.solvers.risk_sets.RiskSetNewton`).

The target a site holds for this loss is encoded by
:class:`~skfed.data.site.Targets` (``kind="survival"``) as three columns:
time (or its interval index on a coarsened grid), event indicator, stratum
code.
"""

import numpy as np
import scipy.sparse as sp

from .base import Datafit

TIES = ("efron", "breslow")


def _packed_outer(X):
    """Each row's ``x x'``, upper triangle packed: ``(n, p (p + 1) / 2)``."""
    i, j = np.triu_indices(X.shape[1])
    return X[:, i] * X[:, j]


def _unpack(packed, p):
    H = np.zeros((p, p))
    H[np.triu_indices(p)] = packed
    return H + np.triu(H, 1).T


def event_grid(Y):
    """``{stratum: sorted distinct event times}`` of encoded targets ``Y``."""
    time, event, stratum = Y[:, 0], Y[:, 1] > 0, Y[:, 2]
    return {float(s): np.unique(time[event & (stratum == s)])
            for s in np.unique(stratum[event])}


def grid_positions(grid, Y):
    """For each row, in the grid's layout (strata sorted, times increasing): the index
    of the last grid time at or below its time in its stratum (``-1``: none, or a
    stratum without events), and the index where its stratum's times start."""
    time, stratum = Y[:, 0], Y[:, 2]
    pos = np.full(len(time), -1)
    first = np.zeros(len(time), dtype=int)
    start = 0
    for s in sorted(grid):
        rows = stratum == s
        k = np.searchsorted(grid[s], time[rows], side="right") - 1
        pos[rows] = np.where(k >= 0, k + start, -1)
        first[rows] = start
        start += len(grid[s])
    return pos, first


def _prefix_sums(values, pos, first):
    """Each row's sum of ``values`` over its stratum's grid times up to ``pos``
    (the grid times at which it was at risk)."""
    values = np.asarray(values, dtype=float)
    cum = np.concatenate([np.zeros((1,) + values.shape[1:]), np.cumsum(values, axis=0)])
    out = cum[pos + 1] - cum[first]
    out[pos < 0] = 0.0
    return out


def risk_set_sums(X, eta, Y, sw, grid, order=2):
    """The risk-set sums of one site's rows at the grid's event times.

    Parameters
    ----------
    X : ndarray of shape (n, p) or None
        The design (``None`` with ``order=0``).
    eta : ndarray of shape (n,)
        Linear predictors.
    Y : ndarray of shape (n, 3)
        Encoded targets: time, event (0/1), stratum code.
    sw : ndarray of shape (n,)
    grid : dict
        ``{stratum: increasing event times}``; the sums are laid out stratum
        by stratum in sorted stratum order, times increasing.
    order : {0, 1, 2}
        0: the scalar sums (``s0, t0``, event counts ``d`` and weights
        ``w``, and ``lin = sum_D w eta``); 1: also ``s1, t1`` and ``ex =
        sum_D w x``; 2: also ``s2, t2`` (packed upper triangles).

    Returns
    -------
    sums : dict of ndarray
    """
    time, event = Y[:, 0], Y[:, 1] > 0
    strata = sorted(grid)
    K = sum(len(grid[s]) for s in strata)
    # each row's last grid time at or below its own time (its risk sets run up to it)
    pos, _ = grid_positions(grid, Y)
    at_risk = pos >= 0
    if np.any(event & ~at_risk):  # an event before its stratum's first grid time
        raise ValueError("an event time is not on the grid of event times.")
    is_event = event & at_risk
    if np.any(is_event):
        ends = np.concatenate([grid[s] for s in strata]) if K else np.zeros(0)
        if not np.array_equal(ends[pos[is_event]], time[is_event]):
            raise ValueError("an event time is not on the grid of event times.")
    with np.errstate(over="ignore"):
        phi = sw * np.exp(eta)

    def binned(values, rows):
        """Per grid time: the sum of ``values`` over ``rows`` (at risk: cumulated)."""
        out = np.zeros((K,) + values.shape[1:])
        np.add.at(out, pos[rows], values[rows])
        return out

    def risk(values):  # rows at risk at grid time k: time >= t_k, within the stratum
        b = binned(values, at_risk)
        starts = np.cumsum([0] + [len(grid[s]) for s in strata])
        for a, z in zip(starts[:-1], starts[1:]):
            b[a:z] = b[a:z][::-1].cumsum(axis=0)[::-1]
        return b

    out = {"s0": risk(phi), "t0": binned(phi, is_event),
           "d": binned(np.ones(len(time)), is_event), "w": binned(sw, is_event),
           "lin": float(np.sum((sw * eta)[is_event]))}
    if order >= 1:
        Xd = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=float)
        px = phi[:, None] * Xd
        out.update(s1=risk(px), t1=binned(px, is_event),
                   ex=np.asarray((sw[is_event, None] * Xd[is_event]).sum(axis=0)))
        if order >= 2:
            pxx = phi[:, None] * _packed_outer(Xd)
            out.update(s2=risk(pxx), t2=binned(pxx, is_event))
    return out


def _expand(sums, ties):
    """Per term of the tie sums (Efron: ``d`` terms a time; Breslow: one):
    the time index, ``f_l``, the weight ``W / d`` (Breslow: ``W``) and the
    denominator ``S0 - f_l T0``."""
    d, w = sums["d"], sums["w"]
    has = d > 0
    idx = np.flatnonzero(has)
    if ties == "efron":
        counts = np.rint(d[idx]).astype(int)
        rep = np.repeat(idx, counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        f = (np.arange(rep.size) - first) / d[rep]
        c = w[rep] / d[rep]
    else:
        rep, f, c = idx, np.zeros(idx.size), w[idx]
    den = sums["s0"][rep] - f * sums["t0"][rep]
    return rep, f, c, den


def cox_terms(sums, ties, order=2):
    """``(-log PL, its gradient in beta, its Hessian)`` from (pooled) risk-set sums.

    ``order`` as in :func:`risk_set_sums` (lower orders give ``None``s).
    The log partial likelihood's linear term ``sum_D w eta`` is ``lin``.
    """
    # a diverging model (a covariate that separates the events) overflows exp: the
    # values are then inf or nan, which the line search rejects
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rep, f, c, den = _expand(sums, ties)
        value = -float(sums["lin"]) + float(c @ np.log(den))
        if order < 1:
            return value, None, None
        v = sums["s1"][rep] - f[:, None] * sums["t1"][rep]
        a = c / den
        grad = -np.asarray(sums["ex"], dtype=float) + a @ v
        if order < 2:
            return value, grad, None
        p = v.shape[1]
        second = a @ (sums["s2"][rep] - f[:, None] * sums["t2"][rep])
        H = _unpack(second, p) - (v * (a / den)[:, None]).T @ v
    return value, grad, H


def baseline_increments(sums):
    """Breslow's baseline hazard increments ``W_t / S0_t`` and the risk-set means
    ``x_bar_t = S1_t / S0_t`` at each grid time (0 and 0 where no event)."""
    s0 = sums["s0"]
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(sums["d"] > 0, sums["w"] / s0, 0.0)
        xbar = None if "s1" not in sums else np.where(s0[:, None] > 0,
                                                      sums["s1"] / s0[:, None], 0.0)
    return h, xbar


def score_residuals(X, eta, Y, sw, grid, h, xbar):
    """Each row's score residual at the fit (the sandwich's per-row scores).

    ``r_i = w_i [e_i (x_i - xbar(T_i)) - exp(eta_i) sum_{t <= T_i} h_t (x_i - xbar_t)]``
    with Breslow's increments ``h`` and the risk-set means ``xbar`` at the
    grid (:func:`baseline_increments`). These are lifelines' residuals for
    untied times; at tied times lifelines breaks ties by row order, here
    every tied row sees the same risk set (the definition that does not
    depend on how rows are ordered or split over sites).
    """
    event = Y[:, 1] > 0
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=float)
    pos, first = grid_positions(grid, Y)
    H = _prefix_sums(h, pos, first)
    M = _prefix_sums(h[:, None] * xbar, pos, first)
    with np.errstate(over="ignore"):
        risk = np.exp(eta)
    r = -risk[:, None] * (Xd * H[:, None] - M)
    ev = event & (pos >= 0)
    r[ev] += Xd[ev] - xbar[pos[ev]]
    return r * sw[:, None]


class CoxPartialLikelihood(Datafit):
    """Minus the log partial likelihood of Cox's model, over one client's rows.

    Parameters
    ----------
    ties : {"efron", "breslow"}, default="efron"

    Notes
    -----
    The loss is not a sum over rows: a client's value is its own stratified
    partial likelihood (its strata, its event times). It is the loss of
    ``FedCoxPH(strata="site")``, where each site is its own stratum and the
    sum of the sites' losses is the pooled objective; a baseline shared
    across sites uses the same sums pooled first
    (:class:`~skfed.solvers.risk_sets.RiskSetNewton`). Newton's method is
    the solver: there is no curvature bound (``curvature = None``), and a
    subset of rows (a minibatch) has a different partial likelihood, so
    local-step solvers are refused.
    """

    smooth = True
    curvature = None
    scale_curvature = 1.0
    target_kind = "survival"
    #: the loss of a subset of rows is not the loss's restriction to them
    row_separable = False

    def __init__(self, ties="efron"):
        if ties not in TIES:
            raise ValueError(f"ties must be one of {TIES}; got {ties!r}.")
        self.ties = ties

    def __repr__(self):
        return f"{type(self).__name__}(ties={self.ties!r})"

    def loss_sum(self, Z, Y, sw):
        eta = np.asarray(Z)[:, 0]
        return cox_terms(risk_set_sums(None, eta, Y, sw, event_grid(Y), order=0),
                         self.ties, order=0)[0]

    def loss_rows(self, Z, Y, sw):
        """Each row's part of minus the log partial likelihood: an event row's
        ``-w_i eta_i`` plus its weight's share of its time's log-denominator terms (0 for
        a censored row); they sum to :meth:`loss_sum` (what the dominance rule audits)."""
        eta = np.asarray(Z)[:, 0]
        grid = event_grid(Y)
        sums = risk_set_sums(None, eta, Y, sw, grid, order=0)
        rep, _, c, den = _expand(sums, self.ties)
        with np.errstate(divide="ignore", invalid="ignore"):
            per_time = np.bincount(rep, weights=c * np.log(den), minlength=sums["s0"].size)
            pos, _ = grid_positions(grid, Y)
            event = (Y[:, 1] > 0) & (pos >= 0)
            out = np.zeros(len(eta))
            out[event] = sw[event] * (per_time[pos[event]] / sums["w"][pos[event]] - eta[event])
        return out

    def audited_hessian(self, Z, Y, sw):
        """The diagonal part of the Hessian in the linear predictors, ``phi_i sum_{t <=
        T_i} c_t / den_t`` (``(n, 1)``): the rows' weights in the part ``X' diag X`` of the
        information that the dominance rule audits (the risk sets couple the rest)."""
        eta = np.asarray(Z)[:, 0]
        grid = event_grid(Y)
        sums = risk_set_sums(None, eta, Y, sw, grid, order=0)
        rep, _, c, den = _expand(sums, self.ties)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ct = np.bincount(rep, weights=c / den, minlength=sums["s0"].size)
            phi = sw * np.exp(eta)
        pos, first = grid_positions(grid, Y)
        return (phi * _prefix_sums(ct, pos, first))[:, None]

    def raw_gradient(self, Z, Y, sw):
        """The derivative in each row's linear predictor:
        ``-w_i e_i + phi_i sum_{t <= T_i} c_t - e_i phi_i b_t`` with
        ``c_t = sum_l (W/d) / den_l`` and ``b_t = sum_l (W/d) f_l / den_l``."""
        eta = np.asarray(Z)[:, 0]
        grid = event_grid(Y)
        sums = risk_set_sums(None, eta, Y, sw, grid, order=0)
        rep, f, c, den = _expand(sums, self.ties)
        K = sums["s0"].size
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ct = np.bincount(rep, weights=c / den, minlength=K)
            bt = np.bincount(rep, weights=c * f / den, minlength=K)
        event = Y[:, 1] > 0
        with np.errstate(over="ignore"):
            phi = sw * np.exp(eta)
        pos, first = grid_positions(grid, Y)
        g = -sw * event + phi * _prefix_sums(ct, pos, first)
        ev = event & (pos >= 0)
        g[ev] -= phi[ev] * bt[pos[ev]]
        return g[:, None]

    def design_terms(self, X, Z, Y, sw, hessian=True):
        """``(loss sum, gradient, Hessian or None)`` in the coefficients, from the
        client's own risk-set sums (the Hessian is not ``X' D X``: the risk sets
        couple the rows)."""
        sums = risk_set_sums(X, np.asarray(Z)[:, 0], Y, sw, event_grid(Y),
                             order=2 if hessian else 1)
        return cox_terms(sums, self.ties, order=2 if hessian else 1)

    @property
    def has_hessian(self):
        return True
