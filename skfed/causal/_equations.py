"""The stacked estimating equations of inverse probability weighting and AIPW, per row.

For one site's rows (design ``Z = [1, X]``, treatment ``A`` in {0, 1}, outcome
``Y``) and the stacked parameters ``theta``, :func:`stacked` returns the per-row
contributions ``psi_i`` (``n x k``) and the summed derivative ``sum_i d psi_i /
d theta`` (``k x k``). The pooled estimate solves ``sum_i psi_i = 0`` over every
site's rows, and the sandwich is ``D^{-1} (sum_i psi_i psi_i') D^{-T}`` with ``D``
the summed derivative: pooled sums, so the rows stay where they are.

The parameters, in order (:func:`parameter_names`):

- ``mu1, mu0``: the arms' potential-outcome means;
- ``pi`` (stabilised weights only): the share of treated rows;
- ``beta``: the propensity model's logistic coefficients (intercept first);
- ``gamma1, gamma0`` (AIPW only): the outcome model's coefficients in each arm
  (a GLM with the family's canonical link, intercept first);
- ``nu`` (AIPW for the ATT or ATC): the other arm's normalised weighted residual.

Hajek weighting: ``psi_mu_a = s_a w_a(e) (Y - mu_a)`` with the estimand's
weights (ATE ``A/e``, ``(1-A)/(1-e)``; ATT ``A``, ``(1-A) e/(1-e)``; ATC
``A(1-e)/e``, ``1-A``; ATO ``A(1-e)``, ``(1-A)e``), ``s_a`` the arm's share
when stabilised. AIPW (ATE): ``psi_mu1 = m1 + A (Y - m1)/e - mu1``,
``psi_mu0 = m0 + (1-A)(Y - m0)/(1-e) - mu0`` (delicatessen's ``ee_aipw``). AIPW
(ATT): ``psi_mu1 = A (Y - mu1)``, ``psi_nu = (1-A) e/(1-e) (Y - m0 - nu)``,
``psi_mu0 = A (m0 + nu - mu0)``: the treated rows' mean of the controls' outcome model
plus the controls' normalised weighted residual, doubly robust (the ATC likewise, the
arms swapped, weights ``(1-e)/e``).
Truncation clips the score into ``[lo, hi]`` (delicatessen's ``truncate``:
its derivative is zero where clipped); trimming gives rows whose score is
outside ``[lo, hi]`` no weight in the means (the propensity model keeps them).
"""

import numpy as np
from scipy.special import expit

ESTIMANDS = ("ATE", "ATT", "ATC", "ATO")
FAMILIES = ("gaussian", "binomial", "poisson")


def outcome_width(spec, q):
    """The outcome models' design width: ``1 + len(outcome_covariates)``, else ``q``
    (the propensity model's covariates)."""
    names = spec.get("outcome_covariates")
    return q if names is None else 1 + len(names)


def parameter_names(spec, covariates):
    """The stacked parameters' names, in the order of ``theta``."""
    design = ["Intercept"] + list(covariates)
    outcome = design if spec.get("outcome_covariates") is None else ["Intercept"] + list(
        spec["outcome_covariates"])
    names = ["E[Y(1)]", "E[Y(0)]"] + (["P(A=1)"] if spec["stabilized"] else [])
    if spec["scores"] == "model":
        return names
    names += [f"ps[{c}]" for c in design]
    if spec["method"] == "aipw":
        names += [f"y1[{c}]" for c in outcome] + [f"y0[{c}]" for c in outcome]
        if spec["estimand"] != "ATE":
            names.append("resid[Y(0)]" if spec["estimand"] == "ATT" else "resid[Y(1)]")
    return names


def blocks(spec, q):
    """``{block: slice}`` of theta (``q``: the design's width, intercept included)."""
    at = 3 if spec["stabilized"] else 2
    if spec["scores"] == "model":
        q = 0
    out = {"mu": slice(0, 2), "beta": slice(at, at + q)}
    if spec["stabilized"]:
        out["pi"] = slice(2, 3)
    if spec["method"] == "aipw":
        r, at = outcome_width(spec, q), at + q
        out["gamma1"] = slice(at, at + r)
        out["gamma0"] = slice(at + r, at + 2 * r)
        if spec["estimand"] != "ATE":  # the normalised weighted residual of the other arm
            out["nu"] = slice(at + 2 * r, at + 2 * r + 1)
    return out


def n_parameters(spec, q):
    """The length of theta for a design of width ``q`` (intercept included); a
    propensity model without estimating equations (``spec["scores"] == "model"``)
    has no coefficients in the stack."""
    if spec["scores"] == "model":
        return 2 + int(spec["stabilized"])
    if spec["method"] == "aipw":
        return (2 + int(spec["stabilized"]) + q + 2 * outcome_width(spec, q)
                + int(spec["estimand"] != "ATE"))
    return 2 + int(spec["stabilized"]) + q


def arm_weights(e, A, estimand):
    """``(w1, w0, dw1/de, dw0/de)`` of the estimand's Hajek weights."""
    A1, A0 = A, 1.0 - A
    if estimand == "ATE":
        return A1 / e, A0 / (1 - e), -A1 / e ** 2, A0 / (1 - e) ** 2
    if estimand == "ATT":
        return A1, A0 * e / (1 - e), np.zeros_like(e), A0 / (1 - e) ** 2
    if estimand == "ATC":
        return A1 * (1 - e) / e, A0, -A1 / e ** 2, np.zeros_like(e)
    if estimand == "ATO":
        return A1 * (1 - e), A0 * e, -A1, A0.copy()
    raise ValueError(f"unknown estimand {estimand!r}; one of {ESTIMANDS}.")


def scores(Z, beta, spec, e=None):
    """``(e, e_used, de_used/deta, keep)``: the fitted score, the score the weights use
    (truncated), its derivative in the linear predictor, and the rows not trimmed; ``e``
    given: a model's scores (held fixed: no derivative)."""
    if e is None:
        e = expit(Z @ beta)
        slope = e * (1 - e)
    else:
        slope = np.zeros_like(e)
    used = e
    if spec.get("truncate") is not None:
        lo, hi = spec["truncate"]
        used = np.clip(e, lo, hi)
        slope = np.where((e < lo) | (e > hi), 0.0, slope)
    keep = np.ones_like(e)
    if spec.get("trim") is not None:
        lo, hi = spec["trim"]
        keep = ((e >= lo) & (e <= hi)).astype(float)
    return e, used, slope, keep


def glm_mean(eta, family):
    """``(mu, dmu/deta)`` of the family's canonical link."""
    if family == "gaussian":
        return eta, np.ones_like(eta)
    if family == "binomial":
        mu = expit(eta)
        return mu, mu * (1 - mu)
    mu = np.exp(eta)
    return mu, mu


def stacked(Z, A, Y, theta, spec, e_model=None, V=None):
    """``(psi, D)``: the rows' contributions ``(n, k)`` and their summed derivative
    ``(k, k)`` at ``theta`` (see the module); ``e_model``: a model's scores, which
    the stack holds fixed (no propensity equations); ``V``: the outcome models'
    design (``None``: ``Z``)."""
    n, q = Z.shape
    k = theta.size
    at = blocks(spec, q)
    beta = theta[at["beta"]]
    e, used, slope, keep = scores(Z, beta, spec, e_model)
    psi = np.zeros((n, k))
    D = np.zeros((k, k))
    if e_model is None:
        psi[:, at["beta"]] = Z * (A - e)[:, None]
        D[at["beta"], at["beta"]] = -(Z * (e * (1 - e))[:, None]).T @ Z
    # a score of 0 or 1 (separation) gives infinities: Newton's check reports it
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if spec["method"] == "aipw":
            _aipw_rows(Z, A, Y, theta, spec, at, (used, slope), psi, D,
                       Z if V is None else V)
        else:
            _ipw_rows(Z, A, Y, theta, spec, at, (used, slope, keep), psi, D)
    return psi, D


def _ipw_rows(Z, A, Y, theta, spec, at, score, psi, D):
    used, slope, keep = score
    w1, w0, dw1, dw0 = arm_weights(used, A, spec["estimand"])
    mu1, mu0 = theta[0], theta[1]
    s1 = s0 = 1.0
    if spec["stabilized"]:
        p = at["pi"].start
        pi = theta[p]
        s1, s0 = pi, 1.0 - pi
        psi[:, p] = A - pi
        D[p, p] = -float(A.size)
        D[0, p] = np.sum(keep * w1 * (Y - mu1))
        D[1, p] = -np.sum(keep * w0 * (Y - mu0))
    r1, r0 = keep * (Y - mu1), keep * (Y - mu0)
    psi[:, 0], psi[:, 1] = s1 * w1 * r1, s0 * w0 * r0
    D[0, 0], D[1, 1] = -s1 * np.sum(keep * w1), -s0 * np.sum(keep * w0)
    if at["beta"].stop > at["beta"].start:  # a model's scores: no coefficients here
        D[0, at["beta"]] = Z.T @ (s1 * r1 * dw1 * slope)
        D[1, at["beta"]] = Z.T @ (s0 * r0 * dw0 * slope)


def _aipw_rows(Z, A, Y, theta, spec, at, score, psi, D, V):
    e, slope = score
    family = spec["family"]
    g1, g0 = at["gamma1"], at["gamma0"]
    m1, v1 = glm_mean(V @ theta[g1], family)
    m0, v0 = glm_mean(V @ theta[g0], family)
    A0 = 1.0 - A
    psi[:, g1] = V * (A * (Y - m1))[:, None]
    psi[:, g0] = V * (A0 * (Y - m0))[:, None]
    D[g1, g1] = -(V * (A * v1)[:, None]).T @ V
    D[g0, g0] = -(V * (A0 * v0)[:, None]).T @ V
    if spec["estimand"] != "ATE":
        _aipw_treated_rows((Z, V), A, Y, theta, spec, at, (e, slope, m1, v1, m0, v0), psi,
                           D)
        return
    psi[:, 0] = m1 + A * (Y - m1) / e - theta[0]
    psi[:, 1] = m0 + A0 * (Y - m0) / (1 - e) - theta[1]
    D[0, 0] = D[1, 1] = -float(A.size)
    # d e / d eta = slope (zero where truncated)
    D[0, at["beta"]] = Z.T @ (-A * (Y - m1) / e ** 2 * slope)
    D[1, at["beta"]] = Z.T @ (A0 * (Y - m0) / (1 - e) ** 2 * slope)
    D[0, g1] = V.T @ ((1 - A / e) * v1)
    D[1, g0] = V.T @ ((1 - A0 / (1 - e)) * v0)


def _aipw_treated_rows(designs, A, Y, theta, spec, at, fitted, psi, D):
    """AIPW for the ATT (the ATC with the arms' roles swapped): the treated arm's mean
    ``mu1`` (``sum A (Y - mu1) = 0``), the controls' normalised weighted residual ``nu``
    (``sum (1-A) e/(1-e) (Y - m0 - nu) = 0``) and ``mu0`` the treated rows' mean of
    ``m0 + nu`` (``sum A (m0 + nu - mu0) = 0``)."""
    (Z, V), (e, slope, m1, v1, m0, v0) = designs, fitted
    nu = at["nu"].start
    if spec["estimand"] == "ATT":
        own, other, m, v, g, i, j = A, 1.0 - A, m0, v0, at["gamma0"], 0, 1
        w, dw = e / (1 - e), 1 / (1 - e) ** 2
    else:
        own, other, m, v, g, i, j = 1.0 - A, A, m1, v1, at["gamma1"], 1, 0
        w, dw = (1 - e) / e, -1 / e ** 2
    r = Y - m - theta[nu]
    psi[:, i] = own * (Y - theta[i])
    psi[:, nu] = other * w * r
    psi[:, j] = own * (m + theta[nu] - theta[j])
    D[i, i] = D[j, j] = -own.sum()
    D[j, nu] = own.sum()
    D[j, g] = V.T @ (own * v)
    D[nu, nu] = -np.sum(other * w)
    D[nu, g] = -V.T @ (other * w * v)
    D[nu, at["beta"]] = Z.T @ (other * dw * r * slope)
