"""R survival 3.x's ``cox.zph``: the score test of time-varying coefficients, from the
sums the sites send.

survival 3.0 replaced the Grambsch-Therneau approximation (lifelines' test,
:mod:`skfed.survival._ph_test`) by a score test: the Cox model with the
covariates ``x`` and ``x g(t)`` (``g`` a transform of time, centred at its mean
over the event rows), tested at ``(beta_hat, 0)``. At the fitted coefficients
the score of ``beta`` is zero (R sets it so) and that of the new coefficients
is ``u = sum_t g_t r_t``, ``r_t`` the weighted Schoenfeld residuals summed over
the events at ``t``. Since ``g`` is constant in each risk set, the
information of the ``2p`` coefficients is

    [[sum_t V_t, sum_t g_t V_t], [sum_t g_t V_t, sum_t g_t^2 V_t]],

``V_t`` the fit's information at ``t`` (Efron's or Breslow's). A term's
statistic is ``(0, u_j)' I[kk, kk]^-1 (0, u_j)`` over all ``p`` coefficients
and its own columns' new ones (``kk``), ``chi2`` with as many df as its
columns; the global test takes all. (survival's ``cox.zph`` and its C routine
``zph1``.) Every piece is a pooled sum at the fit's event times: the
risk-set sums of order 2 the fit's Newton rounds exchanged, the events'
weighted covariate sums, and for the transforms R's unweighted Kaplan-Meier
(``km``: one minus its left limit at the time), the rank of the time among all
rows (``rank``: ties averaged, censored rows included) or the time itself.
"""

import numpy as np
from scipy import stats

from ..datafits.cox import _expand, _packed_outer, _unpack

#: R's transforms (its default first)
TRANSFORMS = ("km", "rank", "identity", "log")


def zph_sums_args(estimator, transforms):
    """The arguments of :func:`~skfed.survival._site.site_schoenfeld_sums` for the test."""
    return (estimator.coef_, estimator._fit_grid, estimator.time_grid_, True,
            "rank" in transforms)


def zph_pieces(estimator, sums, transform):
    """``(u, information)`` of the score test for one transform, from the pooled sums."""
    d = np.asarray(sums["d"], dtype=float)
    V, resid = per_time_terms(sums, estimator.ties)
    g = _transform(estimator, sums, estimator._fit_grid, transform)[d > 0]
    if not np.all(np.isfinite(g)):
        raise ValueError(
            f"time_transform={transform!r} is not finite at an event time (the logarithm "
            "of a time 0, or the open last interval of a time grid, whose right end is "
            "infinite); use 'km' or 'rank', or a time grid whose last cut point follows "
            "the last event.")
    g = g - d[d > 0] @ g / d.sum()  # R centres at the mean over the event rows
    centred = np.zeros(d.size)
    centred[d > 0] = g
    p = resid.shape[1]
    return centred @ resid, _blocks(*[_unpack(centred ** k @ V, p) for k in (0, 1, 2)])


def zph_pieces_by_site(moments, transform):
    """``(u, information)`` from the sums of sites that are their own strata
    (:func:`~skfed.survival._site.site_schoenfeld_moments` with ``information``): the
    centring at the pooled mean of ``g`` over the event rows is done here."""
    total = float(moments[f"{transform}_sum"])
    if not np.isfinite(total):
        raise ValueError(f"time_transform={transform!r} is not finite at an event time (the "
                         "logarithm of a time 0); use another transform.")
    centre = total / float(moments["n_events"])
    p = np.asarray(moments["wresid"]).size
    V0, V1, V2 = (_unpack(np.asarray(moments[key], dtype=float), p) for key in (
        "information", f"{transform}_information", f"{transform}_information_sq"))
    u = np.asarray(moments[f"{transform}_wresid"]) - centre * np.asarray(moments["wresid"])
    return u, _blocks(V0, V1 - centre * V0, V2 - 2 * centre * V1 + centre ** 2 * V0)


def _blocks(V0, V1, V2):
    return np.block([[V0, V1], [V1, V2]])


def per_time_terms(sums, ties):
    """At each grid time: the fit's information ``V_t`` (packed upper triangles) and
    the events' weighted Schoenfeld residuals summed, ``r_t`` (``event_wx`` less the
    events' weight times Efron's or Breslow's risk-set means)."""
    rep, f, c, den = _expand(sums, ties)
    K, p = sums["s1"].shape
    v = sums["s1"][rep] - f[:, None] * sums["t1"][rep]
    a = c / den
    terms = (a[:, None] * (sums["s2"][rep] - f[:, None] * sums["t2"][rep])
             - (a / den)[:, None] * _packed_outer(v))
    V = np.zeros((K, terms.shape[1]))
    np.add.at(V, rep, terms)
    resid = np.asarray(sums["event_wx"], dtype=float).copy()
    np.add.at(resid, rep, -a[:, None] * v)
    return V, resid


def _transform(estimator, sums, grid, transform):
    """``g`` at each grid entry (strata laid out as the sums), over all strata's rows."""
    entries = np.concatenate([np.asarray(grid[code], dtype=float) for code in sorted(grid)])
    union = np.unique(entries)
    where = np.searchsorted(union, entries)
    if transform == "identity":
        return estimator._time_of(entries)
    if transform == "log":
        with np.errstate(divide="ignore"):
            return np.log(estimator._time_of(entries))
    at_risk = np.asarray(sums["rows_at_risk"], dtype=float)
    if transform == "rank":  # rows before the time, and the average rank of those at it
        at = np.asarray(sums["rows_at"], dtype=float)
        return (float(sums["n_rows"]) - at_risk + (at + 1) / 2)[where]
    survival = np.cumprod(1.0 - np.asarray(sums["row_events"], dtype=float) / at_risk)
    return 1.0 - np.concatenate([[1.0], survival[:-1]])[where]  # the left limit


def zph_terms(names, terms):
    """``[(term name, column indices)]``: ``terms`` (name -> design column names), or
    one term per column."""
    if terms is None:
        return [(name, [k]) for k, name in enumerate(names)]
    position = {name: k for k, name in enumerate(names)}
    out = [(term, [position[c] for c in columns if c in position])
           for term, columns in terms.items()]
    out = [(term, idx) for term, idx in out if idx]
    covered = sorted(k for _, idx in out for k in idx)
    if covered != list(range(len(names))):
        raise ValueError(f"the terms {list(terms)} do not cover the columns {list(names)} "
                         "once each.")
    return out


def zph_rows(u, information, groups):
    """``[(name, chi-square, df, p)]`` per term and ``GLOBAL`` (R's score tests)."""
    p = u.size
    rows = []
    for name, columns in [*groups, ("GLOBAL", list(range(p)))]:
        kk = np.r_[np.arange(p), p + np.asarray(columns)]
        score = np.r_[np.zeros(p), u[columns]]
        value = float(score @ np.linalg.solve(information[np.ix_(kk, kk)], score))
        rows.append((name, value, len(columns), float(stats.chi2.sf(value, len(columns)))))
    return rows
