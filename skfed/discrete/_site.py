"""What an ordinal or multinomial model asks of a site: sums over its rows, never a row.

At broadcast parameters a site returns its rows' log-likelihood, its gradient and
its Hessian, each summed over the site's rows (so they add across sites, and a
masked sum can carry them), and its row count:

- :func:`site_ordinal_terms`: the proportional-odds (cumulative link) model
  ``P(y <= j | x) = F(c_j - x'b)`` with ``F`` the logistic or normal distribution,
  in the parameters ``(b, c)`` (the cut points themselves: the server maps them to
  statsmodels' first cut point and log increments);
- :func:`site_mnlogit_terms`: the multinomial logit ``P(y = j | x) ∝ exp(x'b_j)``,
  ``b_0 = 0`` for the reference (first) level, the parameters level by level.

The response is the site's target, or a column of its table (a formula's kept
response); its values are coded by the broadcast levels (every value must be one
of them). A site with no row of a level still answers: its sums for that level
are zero.
"""

import numpy as np
import pandas as pd
from scipy import special, stats

from .._messages import show
from ..data.site import SiteError, numeric_matrix
from ..federation import dominance
from ..federation.combine import Combine
from ..federation.operations import SUMS, Arg, site_operation

#: the most outcome levels a model may have (bounds a site's work: a Hessian of
#: (levels - 1)^2 blocks for the multinomial logit)
MAX_LEVELS = 64
#: the most parameters a request may carry
MAX_PARAMS = 1 << 16
#: the distributions of the ordinal model's latent variable (statsmodels' ``distr``)
DISTRIBUTIONS = ("logit", "probit")


def plain(value):
    """A level as a plain Python value (how it travels)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        return str(value)
    raise TypeError(f"an outcome level is text, a number or a boolean, not "
                    f"{type(value).__name__}")


def _levels_form(value):
    if not isinstance(value, (list, tuple)) or not 2 <= len(value) <= MAX_LEVELS:
        return f"levels are a list of 2 to {MAX_LEVELS} values"
    for v in value:
        if type(v) not in (str, int, float, bool) or (type(v) is str and len(v) > 256):
            return "a level is a short text, a number or a boolean"
        if type(v) is float and not np.isfinite(v):
            return "a level is finite"
    if len(set(value)) != len(value):
        return "the levels are distinct"
    return None


_RESPONSE = Arg("response", "name", nullable=True)
_LEVELS = Arg("levels", "value", check=_levels_form, convert=list)
_PARAMS = Arg("params", "floats", most=MAX_PARAMS)


def response_codes(site, response, levels):
    """``(X, codes)``: the site's covariates (float) and each row's outcome level index.

    ``response``: ``None`` (the target) or a column of the site's table (moved out of
    the covariates)."""
    if site.n_samples == 0:
        raise SiteError(site.site, "no rows.")
    if site.sample_weight is not None or site.offset is not None:
        raise SiteError(site.site, "has sample weights or offsets; ordinal and multinomial "
                                   "models are fitted unweighted, without offsets.")
    if response is None:
        if site.y is None:
            raise SiteError(site.site, "no target (y): the outcome.")
        values, rest = np.asarray(site.y, dtype=object), site
        if values.ndim != 1:
            raise SiteError(site.site, f"the outcome is one column; got shape {values.shape}.")
    else:
        columns = getattr(site.X, "columns", ())
        if response not in columns:
            raise SiteError(site.site, f"no column {show(response)}: the outcome.")
        values = site.X[response].astype(object).to_numpy()
        rest = site.replace(X=site.X.drop(columns=[response]))
    missing = pd.isna(values)
    if missing.any():
        raise SiteError(site.site, f"the outcome has {int(missing.sum())} missing value(s) "
                                   "(NaN); drop those rows first.")
    index = {level: k for k, level in enumerate(levels)}
    try:
        codes = np.array([index.get(plain(v), -1) for v in values], dtype=np.intp)
    except TypeError as exc:
        raise SiteError(site.site, f"the outcome holds a value that is no level ({exc}).") \
            from None
    if np.any(codes < 0):
        raise SiteError(site.site, f"the outcome has {int(np.sum(codes < 0))} value(s) that "
                                   "are not among the pooled levels.")
    return numeric_matrix(rest), codes


# --- the proportional-odds model ----------------------------------------------------
def _cdf_pdf(distr, z):
    """``F(z)``, ``F(-z)``, ``f(z)`` and ``f'(z)`` (zero at infinite ``z``)."""
    finite = np.isfinite(z)
    zf = np.where(finite, z, 0.0)
    if distr == "logit":
        cdf, sf = special.expit(z), special.expit(-z)
        pdf = np.where(finite, special.expit(zf) * special.expit(-zf), 0.0)
        slope = pdf * np.where(finite, special.expit(-zf) - special.expit(zf), 0.0)
    else:
        cdf, sf = special.ndtr(z), special.ndtr(-z)
        pdf = np.where(finite, stats.norm.pdf(zf), 0.0)
        slope = -zf * pdf
    return cdf, sf, pdf, slope


def ordinal_row_terms(distr, eta, cuts, codes):
    """Per row: the log-probability of its level, its derivatives in its upper and lower
    cut points (``u1``, ``-u0``) and the second derivatives ``(h_bb, h_aa, h_ab)``."""
    upper = np.append(cuts, np.inf)[codes] - eta
    lower = np.append(-np.inf, cuts)[codes] - eta
    F1, S1, f1, d1 = _cdf_pdf(distr, upper)
    F0, S0, f0, d0 = _cdf_pdf(distr, lower)
    # the interval's probability without cancellation in either tail
    prob = np.where(lower > 0, S0 - S1, F1 - F0)
    with np.errstate(divide="ignore"):
        logp = np.log(prob)
    u1, u0 = f1 / prob, f0 / prob
    return logp, u1, u0, (d1 / prob - u1 * u1, -d0 / prob - u0 * u0, u1 * u0)


def _pair_sums(codes, values, n_cuts, offset):
    """``M[j - offset, j]`` summed over the rows of level ``j``, as a matrix."""
    sums = np.bincount(codes, weights=values, minlength=n_cuts + 1)
    out = np.zeros((n_cuts, n_cuts))
    for j in range(offset, n_cuts):
        out[j - offset, j] = sums[j]
    return out


def ordinal_terms(X, codes, n_levels, distr, params):
    """The log-likelihood, gradient and Hessian in ``(b, c)`` of rows ``X``, ``codes``."""
    p, n_cuts = X.shape[1], n_levels - 1
    beta, cuts = params[:p], params[p:]
    eta = X @ beta
    logp, u1, u0, (h_bb, h_aa, h_ab) = ordinal_row_terms(distr, eta, cuts, codes)
    upper = np.eye(n_levels)[codes][:, :n_cuts]   # the row's upper cut point, if any
    lower = np.eye(n_levels)[codes][:, 1:]        # its lower one
    h_ee = h_bb + 2.0 * h_ab + h_aa
    h_eb, h_ea = -(h_bb + h_ab), -(h_ab + h_aa)
    if dominance.active() is not None:
        dominance.check_rows(np.column_stack([logp, upper * u1[:, None], lower * u0[:, None]]),
                             "an ordinal model's log-likelihood and gradient")
        dominance.check_products(X, (u0 - u1)[:, None], what="an ordinal model's gradient")
        dominance.check_products(X, X, h_ee, what="an ordinal model's Hessian")
        dominance.check_products(X, upper * h_eb[:, None] + lower * h_ea[:, None],
                                 what="an ordinal model's Hessian")
    grad = np.concatenate([X.T @ (u0 - u1), upper.T @ u1 - lower.T @ u0])
    cross = _pair_sums(codes, h_ab, n_cuts, 1)
    hess_cc = (np.diag(upper.T @ h_bb + lower.T @ h_aa) + cross + cross.T)
    hess_bc = X.T @ (upper * h_eb[:, None] + lower * h_ea[:, None])
    hess = np.block([[(X * h_ee[:, None]).T @ X, hess_bc], [hess_bc.T, hess_cc]])
    return {"loglike": float(logp.sum()), "grad": grad, "hess": hess,
            "n": float(X.shape[0])}


def _check_size(site, params, size, what):
    if params.size != size:
        raise SiteError(site.site, f"{params.size} parameters for {what} of {size}.")


@site_operation(
    "discrete.ordinal_terms", releases=SUMS, maskable=True, reads_design=True,
    combine="sum",  # sums over rows: an engine's partitions add up
    describes="at the broadcast coefficients and cut points of a proportional-odds model: "
              "the site's log-likelihood, its gradient and Hessian and its row count, "
              "summed over its rows, under the dominance rule",
    arguments=(_RESPONSE, _LEVELS, Arg("distr", "choice", choices=DISTRIBUTIONS), _PARAMS))
def site_ordinal_terms(site, response, levels, distr, params):
    """At ``params = (b, c)``: the sums over the site's rows of the ordinal model's
    log-likelihood, gradient and Hessian (see the module)."""
    X, codes = response_codes(site, response, levels)
    params = np.asarray(params, dtype=np.float64)
    _check_size(site, params, X.shape[1] + len(levels) - 1, "an ordinal model")
    return ordinal_terms(X, codes, len(levels), distr, params)


# --- the multinomial logit ------------------------------------------------------------
def mnlogit_terms(X, codes, n_levels, params):
    """The log-likelihood, gradient and Hessian of the multinomial logit (parameters
    level by level, the first level the reference)."""
    p, m = X.shape[1], n_levels - 1
    B = params.reshape(m, p)
    eta = np.column_stack([np.zeros(X.shape[0]), X @ B.T])
    logp = eta - special.logsumexp(eta, axis=1, keepdims=True)
    P = np.exp(logp)[:, 1:]
    resid = np.eye(n_levels)[codes][:, 1:] - P
    rows = logp[np.arange(X.shape[0]), codes]
    if dominance.active() is not None:
        dominance.check_rows(rows, "a multinomial logit's log-likelihood")
        dominance.check_products(X, resid, what="a multinomial logit's gradient")
    hess = np.empty((m * p, m * p))
    for a in range(m):
        for b in range(a, m):
            w = P[:, a] * ((a == b) - P[:, b])
            if dominance.active() is not None:
                dominance.check_products(X, X, w, what="a multinomial logit's Hessian")
            block = -(X * w[:, None]).T @ X
            hess[a * p:(a + 1) * p, b * p:(b + 1) * p] = block
            hess[b * p:(b + 1) * p, a * p:(a + 1) * p] = block.T
    return {"loglike": float(rows.sum()), "grad": (resid.T @ X).ravel(), "hess": hess,
            "n": float(X.shape[0])}


@site_operation(
    "discrete.mnlogit_terms", releases=SUMS, maskable=True, reads_design=True,
    combine="sum",  # sums over rows: an engine's partitions add up
    describes="at the broadcast coefficients of a multinomial logit: the site's "
              "log-likelihood, its gradient and Hessian and its row count, summed over its "
              "rows, under the dominance rule",
    arguments=(_RESPONSE, _LEVELS, Arg("intercept", "bool"), _PARAMS))
def site_mnlogit_terms(site, response, levels, intercept, params):
    """At ``params`` (level by level): the sums over the site's rows of the multinomial
    logit's log-likelihood, gradient and Hessian (see the module); ``intercept``: a
    column of ones before the covariates."""
    X, codes = response_codes(site, response, levels)
    if intercept:
        X = np.hstack([np.ones((X.shape[0], 1)), X])
    params = np.asarray(params, dtype=np.float64)
    _check_size(site, params, X.shape[1] * (len(levels) - 1), "a multinomial logit")
    return mnlogit_terms(X, codes, len(levels), params)


# --- the sandwich's meat ----------------------------------------------------------------
def row_scores(model, X, codes, n_levels, distr, params):
    """Each row's score (its log-likelihood's gradient): in ``(b, c)`` for the ordinal
    model, level by level for the multinomial logit."""
    if model == "ordinal":
        p = X.shape[1]
        _, u1, u0, _ = ordinal_row_terms(distr, X @ params[:p], params[p:], codes)
        onehot = np.eye(n_levels)[codes]
        return np.hstack([X * (u0 - u1)[:, None],
                          onehot[:, :-1] * u1[:, None] - onehot[:, 1:] * u0[:, None]])
    m, p = n_levels - 1, X.shape[1]
    eta = np.column_stack([np.zeros(X.shape[0]), X @ params.reshape(m, p).T])
    resid = np.eye(n_levels)[codes][:, 1:] - special.softmax(eta, axis=1)[:, 1:]
    return (resid[:, :, None] * X[:, None, :]).reshape(X.shape[0], m * p)


@site_operation(
    "discrete.meat", releases=SUMS, maskable=True, reads_design=True,
    describes="at the fitted coefficients of an ordinal or multinomial model: the sum over "
              "the site's rows of the outer products of their scores (a robust sandwich's "
              "meat) and the outer product of the site's score sum (the sites as clusters), "
              "under the dominance rule",
    arguments=(Arg("model", "choice", choices=("ordinal", "mnlogit")), _RESPONSE, _LEVELS,
               Arg("distr", "choice", choices=DISTRIBUTIONS), Arg("intercept", "bool"),
               _PARAMS),
    # an engine's partitions add s_i s_i' and the score sum; S S' on the whole site's S
    combine=Combine("sum", part=lambda *a: _meat_sums(*a),
                    finish=lambda sums, args, site: _meat_of(sums)))
def site_meat(site, model, response, levels, distr, intercept, params):
    """At the fit: ``sum_i s_i s_i'`` over the site's rows and ``S S'`` of its score sum
    ``S`` (the sandwich's meat, per row and with the site as a cluster)."""
    return _meat_of(_meat_sums(site, model, response, levels, distr, intercept, params))


def _meat_sums(site, model, response, levels, distr, intercept, params):
    """``sum_i s_i s_i'`` and the score sum ``S`` over the site's rows."""
    X, codes = response_codes(site, response, levels)
    if intercept:
        X = np.hstack([np.ones((X.shape[0], 1)), X])
    params = np.asarray(params, dtype=np.float64)
    size = (X.shape[1] + len(levels) - 1 if model == "ordinal"
            else X.shape[1] * (len(levels) - 1))
    _check_size(site, params, size, f"a{'n ordinal' if model == 'ordinal' else ' multinomial'}"
                                    " model")
    scores = row_scores(model, X, codes, len(levels), distr, params)
    if dominance.active() is not None:
        dominance.check_products(scores, scores, what="a sandwich's meat")
        dominance.check_rows(scores, "a score sum")
    return {"meat": scores.T @ scores, "score": scores.sum(axis=0)}


def _meat_of(sums):
    """The meats from the sums: per row, and with the site as a cluster (``S S'``)."""
    return {"meat": sums["meat"], "cluster_meat": np.outer(sums["score"], sums["score"])}


# --- the proportional-odds test (Brant's) ------------------------------------------------
@site_operation(
    "discrete.cumulative_logits", releases=SUMS, maskable=True, reads_design=True,
    combine="sum",  # sums over rows: an engine's partitions add up
    describes="at the broadcast coefficients of the binary logits of y above each cut "
              "point: their log-likelihoods, gradients, and the p x p sums X' diag(w_jl) X "
              "for every pair of cut points (w_jl = p_l - p_j p_l; Brant's test), summed "
              "over the site's rows, under the dominance rule",
    arguments=(_RESPONSE, _LEVELS, _PARAMS))
def site_cumulative_logits(site, response, levels, params):
    """At ``params`` (one intercept-and-slopes vector per cut point ``j``, for the binary
    logit of ``y > j``): the summed log-likelihood, gradient and the cross information
    blocks ``X' diag(p_l - p_j p_l) X`` (``j <= l``; ``p_j(1 - p_j)`` on the diagonal)."""
    X, codes = response_codes(site, response, levels)
    X = np.hstack([np.ones((X.shape[0], 1)), X])
    m, p = len(levels) - 1, X.shape[1]
    params = np.asarray(params, dtype=np.float64)
    _check_size(site, params, m * p, "the cumulative logits")
    eta = X @ params.reshape(m, p).T
    above = (codes[:, None] > np.arange(m)[None, :]).astype(np.float64)
    prob = special.expit(eta)
    rows = above * eta - np.logaddexp(0.0, eta)
    cross = np.empty((m * p, m * p))
    for j in range(m):
        for k in range(j, m):
            w = prob[:, k] - prob[:, j] * prob[:, k]
            if dominance.active() is not None:
                dominance.check_products(X, X, w, what="a cumulative logit's information")
            block = (X * w[:, None]).T @ X
            cross[j * p:(j + 1) * p, k * p:(k + 1) * p] = block
            cross[k * p:(k + 1) * p, j * p:(j + 1) * p] = block.T
    if dominance.active() is not None:
        dominance.check_rows(rows, "a cumulative logit's log-likelihood")
        dominance.check_products(X, above - prob, what="a cumulative logit's gradient")
    return {"loglike": float(rows.sum()), "grad": ((above - prob).T @ X).ravel(),
            "cross": cross}
