"""What runs at a site for a Fine-Gray model: its rows expanded as R's ``finegray`` expands
them, given the pooled censoring curve, and the weighted Cox model's sums on them.

R's ``survival::finegray`` keeps each row that ends in a competing event in the risk
set after its event, with the weight ``G(t-) / G(T-)`` at a later time ``t`` (``G`` the
Kaplan-Meier curve of censoring, a censoring at a time counted after the events
there), in one extra row per interval between censoring times that holds an event of
the cause; ``coxph(Surv(fgstart, fgstop, fgstatus) ~ x, weights = fgwt)`` then fits
the expanded rows. Here the public censoring curve (its times and values, from the
pooled counts) reaches every site, and each site expands its own rows in memory:

- ``survival.finegray_sums``: at each pooled event time of the cause, at broadcast
  coefficients, the weighted risk-set sums of order 0, 1 and 2 of the expanded rows
  and the same sums over the events there (Efron's ties), and the events' count and
  covariate sum: the pooled partial likelihood's value, gradient and information;
- ``survival.finegray_meat``: at the fit, given the pooled per-time terms of the
  score residuals, the sum over the site's expanded rows of ``w^2 U U'`` (the robust
  sandwich's meat, each expanded row its own cluster, as R's ``coxph`` with weights).

Both need the site's exact event and censoring times (``allow_event_times``); the
per-time sums are finer than the dominance rule admits (``finer_sums``), or masked.
"""

import numpy as np
import pandas as pd

from .._messages import show
from ..data.site import SiteError
from ..federation import dominance
from ..federation.operations import SUMS, Arg, Refused, site_operation
from ..stats._competing_site import competing_rows
from ..stats._survival_site import MAX_TIMES, _column

#: the most covariates of a Fine-Gray model
MAX_COVARIATES = 256
PER_TIME = ("per-time sums at each event time of the cause: the events there and the "
            "expanded rows at risk, at any count (needs allow_event_times)")


def _finite(value):
    values = np.asarray(value, dtype=np.float64)
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        return "a finite vector"
    return None


def _increasing(value):
    values = np.asarray(value, dtype=np.float64)
    if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(np.diff(values) <= 0):
        return "finite increasing times"
    return None


def _array(most, check=_finite):
    return dict(kind="value", check=lambda v: (None if np.size(v) <= most else
                                               f"at most {most} entries") or check(v),
                convert=lambda v: np.asarray(v, dtype=np.float64))


_ARGS = (Arg("time", "name"), Arg("event", "name"), Arg("cause", "int", low=1, high=1 << 30),
         Arg("covariates", "names", most=MAX_COVARIATES),
         Arg("coef", **_array(MAX_COVARIATES)),
         Arg("times", **_array(MAX_TIMES, _increasing)),
         Arg("censor_times", **_array(MAX_TIMES, _increasing)),
         Arg("censor_curve", **_array(MAX_TIMES)))


def _needs_event_times(site, values, rules):
    if not rules.allow_event_times:
        raise Refused("allow_event_times", "a Fine-Gray model needs the sites' exact event "
                      "and censoring times (its censoring weights change at each); ask the "
                      "sites to set allow_event_times", public=True)


def finegray_design(site, time, event, covariates):
    """The site's times, event codes and covariate matrix (numeric, no missing value)."""
    tv, codes = competing_rows(site, time, event)
    columns = []
    for name in covariates:
        col = _column(site, name, "covariate")
        if not pd.api.types.is_numeric_dtype(col.dtype):
            raise SiteError(site.site, f"covariate column {show(name)} is not numeric (dtype "
                                       f"{col.dtype}); code its levels as 0/1 columns.")
        values = col.to_numpy(dtype=np.float64, na_value=np.nan)
        if not np.all(np.isfinite(values)):
            raise SiteError(site.site, f"covariate column {show(name)} has missing or "
                                       "infinite values.")
        columns.append(values)
    return tv, codes, np.column_stack(columns) if columns else np.zeros((tv.size, 0))


def expanded_weights(tv, codes, cause, times, censor_times, censor_curve):
    """``(W, row)`` of shape (n_rows, n_times): each row's weight in the risk set at each
    event time of the cause (0 out of it), and which of its expanded rows (R's
    ``finegray``: 0 the original, extended to the next censoring time; ``j + 1`` the
    extra row of the censoring interval ``j``) holds it there."""
    ends = np.append(censor_times, np.inf)
    before = np.concatenate([[1.0], censor_curve])  # G on each interval, before its end
    j0 = np.searchsorted(ends, tv, side="left")
    jt = np.searchsorted(ends, times, side="left")
    competing = (codes > 0) & (codes != cause)
    W = (tv[:, None] >= times[None, :]).astype(np.float64)
    later = competing[:, None] & (times[None, :] > tv[:, None])
    W = np.where(later, before[jt][None, :] / before[j0][:, None], W)
    row = np.where(later & (times[None, :] > ends[j0][:, None]), jt[None, :] + 1, 0)
    return W, row


def _deaths(tv, codes, cause, times):
    return ((codes == cause)[:, None] & (tv[:, None] == times[None, :])).astype(np.float64)


@site_operation(
    "survival.finegray_sums", releases=SUMS, finer=PER_TIME, maskable=True,
    describes="a Fine-Gray model's sums at broadcast coefficients, the site's rows expanded "
              "by the public censoring curve (R's finegray): at each event time of the "
              "cause, the weighted risk-set sums of order 0, 1 and 2 and the same sums over "
              "the events there, the events' count, and the events' covariate sum (only "
              "with allow_event_times)",
    arguments=_ARGS, checks=(_needs_event_times,))
def site_finegray_sums(site, time, event, cause, covariates, coef, times, censor_times,
                       censor_curve):
    """The site's Fine-Gray risk-set sums at ``coef``.

    Returns
    -------
    sums : dict
        ``S0`` (n_times,), ``S1`` (n_times, p), ``S2`` (n_times, p, p) over the
        expanded rows at risk, weighted; ``E0``, ``E1``, ``E2`` the same over the
        events of the cause at each time (weight 1); ``d`` (n_times,) their count;
        ``xsum`` (p,) the events' covariate sum.
    """
    tv, codes, X = finegray_design(site, time, event, covariates)
    W, _ = expanded_weights(tv, codes, cause, times, censor_times, censor_curve)
    risk = np.exp(X @ coef)
    Wr, Dr = W * risk[:, None], _deaths(tv, codes, cause, times) * risk[:, None]
    n, p = X.shape
    outer = (X[:, :, None] * X[:, None, :]).reshape(n, p * p)
    return {"S0": Wr.sum(0), "S1": Wr.T @ X, "S2": (Wr.T @ outer).reshape(-1, p, p),
            "E0": Dr.sum(0), "E1": Dr.T @ X, "E2": (Dr.T @ outer).reshape(-1, p, p),
            "d": _deaths(tv, codes, cause, times).sum(0),
            "xsum": X[codes == cause].sum(0)}


def _terms(value):
    if not isinstance(value, dict) or set(value) != {"dH", "dXH", "mh1", "mh2", "mh3"}:
        return "the score residuals' per-time terms dH, dXH, mh1, mh2, mh3"
    arrays = [np.asarray(v, dtype=np.float64) for v in value.values()]
    if any(a.size > MAX_TIMES * MAX_COVARIATES or not np.all(np.isfinite(a)) for a in arrays):
        return "finite per-time terms"
    return None


@site_operation(
    "survival.finegray_meat", releases=SUMS, maskable=True,
    describes="at a fitted Fine-Gray model, given the pooled per-time terms of its score "
              "residuals: the p x p sum over the site's expanded rows of w^2 U U' (the "
              "robust sandwich's meat), under the dominance rule (only with "
              "allow_event_times)",
    arguments=_ARGS + (Arg("terms", "value", check=_terms,
                           convert=lambda v: {k: np.asarray(a, dtype=np.float64)
                                              for k, a in v.items()}),),
    checks=(_needs_event_times,))
def site_finegray_meat(site, time, event, cause, covariates, coef, times, censor_times,
                       censor_curve, terms):
    """The site's share of the robust variance's meat: R's score residuals (Efron's
    ties, ``agscore3``) of its expanded rows.

    Returns
    -------
    sums : dict
        ``meat`` (p, p): ``sum_r w_r^2 U_r U_r'``.
    """
    tv, codes, X = finegray_design(site, time, event, covariates)
    W, row = expanded_weights(tv, codes, cause, times, censor_times, censor_curve)
    risk = np.exp(X @ coef)
    dH, dXH = terms["dH"], terms["dXH"].reshape(times.size, -1)
    mh1, mh2 = terms["mh1"], terms["mh2"].reshape(times.size, -1)
    mh3 = terms["mh3"].reshape(times.size, -1)
    held = (W > 0).ravel()
    D = _deaths(tv, codes, cause, times)
    # each expanded row at risk: (row of the data, which expanded row); one residual each
    keys = (np.arange(tv.size)[:, None] * (censor_times.size + 2) + row).ravel()[held]
    expanded, which = np.unique(keys, return_inverse=True)
    weight = np.zeros(expanded.size)
    weight[which] = W.ravel()[held]  # one weight per expanded row
    U = np.empty((expanded.size, X.shape[1]))
    for j, x in enumerate(X.T):  # one covariate at a time: n x n_times, not x p
        C = -risk[:, None] * (x[:, None] * dH[None, :] - dXH[None, :, j])
        C += D * ((x[:, None] - mh3[None, :, j]) + risk[:, None] * (
            x[:, None] * mh1[None, :] - mh2[None, :, j]))
        U[:, j] = np.bincount(which, weights=C.ravel()[held], minlength=expanded.size)
    weighted = U * weight[:, None]
    dominance.check_products(weighted, weighted, what="a sandwich's meat")
    return {"meat": weighted.T @ weighted}
