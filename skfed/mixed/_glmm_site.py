"""What a GLMM asks of a site: its groups' marginal log-likelihood, gradient and Hessian.

Group ``g`` has ``eta_j = x_j'b + sigma v_g`` (``v_g ~ N(0, 1)``, the random
intercept ``u_g = sigma v_g`` on lme4's spherical scale, so ``sigma = 0`` is
an ordinary point) and a binomial (logit) or Poisson (log) response. Its
contribution to the marginal log-likelihood is the integral over ``v_g``,
approximated by adaptive Gauss-Hermite quadrature around the mode ``v*`` of
``h(v) = sum_j log p(y_j | eta_j) - v^2/2 - log(2 pi)/2`` with scale
``tau = (-h''(v*))^(-1/2)``; one node is the Laplace approximation (lme4's
``nAGQ``). The gradient is exact: it differentiates through the mode and
the scale (implicit differentiation; see docs/mixed-models.md). The Hessian
is the central difference of that gradient, taken here at the site (no
extra round). A site returns sums over its groups only.
"""

import numpy as np
from scipy.special import gammaln

from .._messages import show
from ..data.site import SiteError, numeric_matrix
from ..federation import dominance
from ..federation.operations import COUNTS, SUMS, Arg, check_deadline, site_operation
from ._glmm_slopes import SlopeGroups, unpack
from ._site import _DESIGN, _check_group_sizes, _group_labels, design_rules

#: the most quadrature nodes a request may ask for (bounds the site's work)
MAX_QUADRATURE_NODES = 64


def _parameters(value):
    value = np.asarray(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if value is None or value.ndim != 1 or not 1 <= value.size <= 4096 or \
            value.dtype.kind not in "iuf" or not np.all(np.isfinite(value)):
        return "parameters are a finite vector"
    return None


_PARAMS = Arg("params", "value", check=_parameters,
              convert=lambda p: np.asarray(p, dtype=np.float64))


def _audit_rows(groups, b, sigma, v):
    """The dominance rule on the rows' conditional terms at their groups' modes (the
    parts the groups' marginal terms are made of: a proxy of each row's share)."""
    if dominance.active() is None:
        return
    logp, d1, w, _ = groups.terms(b, sigma, v)
    dominance.check_rows(logp[:, 0], "a GLMM's log-likelihood")
    dominance.check_products(groups.X, d1, what="a GLMM's gradient")
    dominance.check_products(groups.X, groups.X, w[:, 0], what="a GLMM's Hessian")


def _audit_slope_rows(slopes, params, V):
    """The dominance rule on the rows' conditional terms at the modes (random slopes)."""
    if dominance.active() is None:
        return
    k = slopes.q * (slopes.q + 1) // 2
    logp, d1, w = slopes._terms(params[:-k], unpack(params[-k:], slopes.q), V)
    X = slopes.groups.X
    dominance.check_rows(logp, "a GLMM's log-likelihood")
    dominance.check_products(X, d1[:, None], what="a GLMM's gradient")
    dominance.check_products(X, X, w, what="a GLMM's Hessian")


FAMILIES = ("binomial", "poisson")


def glmm_design(site, design):
    """``(X, y, trials, codes, labels)`` of a site's rows, checked at the site.

    ``design``: ``groups`` (column or ``None``), ``trials`` (the binomial
    trials' column or ``None`` for 0/1 outcomes), ``family``,
    ``fit_intercept``, ``min_group_rows``.
    """
    if site.n_samples == 0:
        raise SiteError(site.site, "no rows.")
    if site.sample_weight is not None:
        raise SiteError(site.site, "has sample weights; the GLMM is fitted unweighted.")
    if site.y is None:
        raise SiteError(site.site, "no target (y).")
    codes, labels = _group_labels(site, design["groups"])
    drop = [c for c in (design["groups"], design["trials"]) if c is not None]
    features = site.X.drop(columns=drop) if drop else site.X
    F = numeric_matrix(site.replace(X=features))
    X = np.hstack([np.ones((F.shape[0], 1)), F]) if design["fit_intercept"] else F
    trials = (np.ones(F.shape[0]) if design["trials"] is None
              else np.asarray(site.X[design["trials"]], dtype=np.float64))
    y = _response(site, design["family"], trials)
    _check_group_sizes(site, codes, labels, design["min_group_rows"])
    order = np.argsort(codes, kind="stable")  # rows grouped: per-group sums by reduceat
    return X[order], y[order], trials[order], codes[order], labels


def _response(site, family, trials):
    try:
        y = np.asarray(site.y, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise SiteError(site.site, "the target is not numeric.") from None
    if y.shape[0] != trials.shape[0] or not np.all(np.isfinite(y)):
        raise SiteError(site.site, "the target contains NaN or infinity, or has the wrong "
                                   "length.")
    if family == "binomial":
        if not np.all(np.isfinite(trials)) or np.any(trials < 1) or np.any(trials % 1):
            raise SiteError(site.site, "binomial trials must be whole numbers >= 1.")
        if np.any(y < 0) or np.any(y > trials) or np.any(y % 1):
            raise SiteError(site.site, "a binomial outcome must be a whole number of "
                                       "successes between 0 and its trials (0/1 without "
                                       f"trials); got e.g. {show(y[(y < 0) | (y > trials)][:1])}.")
    elif np.any(y < 0) or np.any(y % 1):
        raise SiteError(site.site, "a Poisson outcome must be a whole count >= 0.")
    return y


def _log_normaliser(family, y, trials):
    """The part of ``log p(y | eta)`` free of ``eta`` (log binomial coefficient,
    ``-log y!``): lme4's Laplace ``logLik`` includes it."""
    if family == "binomial":
        return gammaln(trials + 1) - gammaln(y + 1) - gammaln(trials - y + 1)
    return -gammaln(y + 1)


def _row_terms(family, eta, y, trials, constant):
    """``log p(y | eta)``, its first derivative, ``w = -d2`` and ``dw``."""
    if family == "binomial":
        mu = 0.5 * (1.0 + np.tanh(0.5 * eta))  # the logistic function, without overflow
        logp = y * eta - trials * np.logaddexp(0.0, eta) + constant
        w = trials * mu * (1.0 - mu)
        return logp, y - trials * mu, w, w * (1.0 - 2.0 * mu)
    mu = np.exp(eta)
    return y * eta - mu + constant, y - mu, mu, mu


class _Groups:
    """A site's rows, grouped, with the sums over each group's rows."""

    def __init__(self, X, y, trials, codes, family):
        self.X, self.y, self.trials, self.family = X, y, trials, family
        self.constant = _log_normaliser(family, y, trials)[:, None]
        self.codes = codes
        sizes = np.bincount(codes)
        self.n_groups = sizes.size
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def sum(self, rows):
        return np.add.reduceat(rows, self.starts, axis=0)

    def terms(self, b, sigma, v):
        """Row terms at ``eta = Xb + sigma v[group]`` (``v``: one value per group,
        or per group and node)."""
        eta = (self.X @ b)[:, None] + sigma * v.reshape(self.n_groups, -1)[self.codes]
        return _row_terms(self.family, eta, self.y[:, None], self.trials[:, None],
                          self.constant)

    def modes(self, b, sigma, v=None, max_iter=100):
        """Each group's mode ``v*`` of ``h`` (Newton with step halving: ``h`` is
        strictly concave) and ``D = -h''(v*)``."""
        v = np.zeros(self.n_groups) if v is None else v.copy()
        value = self._h(b, sigma, v)
        for _ in range(max_iter):
            check_deadline()
            _, d1, w, _ = self.terms(b, sigma, v)
            D = 1.0 + sigma ** 2 * self.sum(w[:, 0])
            step = (sigma * self.sum(d1[:, 0]) - v) / D
            for _ in range(60):  # halve the steps of the groups whose h fell
                trial = self._h(b, sigma, v + step)
                worse = trial < value - 1e-12 * np.abs(value)
                if not worse.any():
                    break
                step = np.where(worse, 0.5 * step, step)
            v, value = v + step, trial
            if np.max(np.abs(step)) <= 1e-12 * (1.0 + np.max(np.abs(v))):
                break
        _, _, w, _ = self.terms(b, sigma, v)
        return v, 1.0 + sigma ** 2 * self.sum(w[:, 0])

    def _h(self, b, sigma, v):
        logp, _, _, _ = self.terms(b, sigma, v)
        return self.sum(logp[:, 0]) - 0.5 * v * v


def _value_and_gradient(groups, b, sigma, nodes, weights, start=None):
    """Sum over the groups of the AGQ log-likelihood and its exact gradient in
    ``(b, sigma)``; also the modes (to warm-start the next evaluation)."""
    v, D = groups.modes(b, sigma, start)
    tau = D ** -0.5
    a = v[:, None] + np.sqrt(2.0) * tau[:, None] * nodes[None, :]      # (G, Q) nodes
    logp, d1, _, _ = groups.terms(b, sigma, a)
    h = groups.sum(logp) - 0.5 * a * a - 0.5 * np.log(2.0 * np.pi)    # h at the nodes
    log_terms = np.log(weights) + nodes ** 2 + h
    top = log_terms.max(axis=1, keepdims=True)
    pi = np.exp(log_terms - top)
    total = pi.sum(axis=1, keepdims=True)
    value = np.log(np.sqrt(2.0) * tau) + top[:, 0] + np.log(total[:, 0])
    pi /= total
    s1 = groups.sum(d1)                                                # (G, Q)
    h_b = groups.sum(groups.X * (d1 * pi[groups.codes]).sum(axis=1)[:, None])
    h_s = (pi * a * s1).sum(axis=1)
    h_v = sigma * s1 - a                                               # dh/dv at the nodes
    mean_hv = (pi * h_v).sum(axis=1)
    dtau_coef = 1.0 / tau + (pi * h_v * np.sqrt(2.0) * nodes).sum(axis=1)
    dv, dD = _mode_derivatives(groups, b, sigma, v, D)
    dtau = -0.5 * tau[:, None] * dD / D[:, None]
    grad = np.column_stack([h_b, h_s]) + mean_hv[:, None] * dv + dtau_coef[:, None] * dtau
    return value.sum(), grad.sum(axis=0), v


def _mode_derivatives(groups, b, sigma, v, D):
    """``dv*/dtheta`` and ``dD/dtheta`` per group, ``theta = (b, sigma)`` (implicit
    differentiation of ``h'(v*) = 0``)."""
    _, d1, w, dw = groups.terms(b, sigma, v)
    d1, w, dw = d1[:, 0], w[:, 0], dw[:, 0]
    W, dW = groups.sum(w), groups.sum(dw)
    h_vb = -sigma * groups.sum(w[:, None] * groups.X)
    h_vs = groups.sum(d1) - sigma * v * W
    dv = np.column_stack([h_vb, h_vs]) / D[:, None]
    h_vvb = -sigma ** 2 * groups.sum(dw[:, None] * groups.X)
    h_vvs = -2.0 * sigma * W - sigma ** 2 * v * dW
    h_vvv = -sigma ** 3 * dW
    dD = -(np.column_stack([h_vvb, h_vvs]) + h_vvv[:, None] * dv)
    return dv, dD


def _site_groups(site, design):
    X, y, trials, codes, labels = glmm_design(site, design)
    return _Groups(X, y, trials, codes, design["family"]), labels


def _slope_groups(groups, design):
    """The groups with their random slopes' columns (``None``: an intercept only)."""
    positions = list(design.get("re_columns", []))
    if not positions:
        return None
    offset = 1 if design["fit_intercept"] else 0
    X = groups.X
    Z = np.column_stack([np.ones(X.shape[0]), X[:, [offset + p for p in positions]]])
    return SlopeGroups(groups, Z, lambda eta: tuple(
        t[:, 0] for t in _row_terms(groups.family, eta[:, None], groups.y[:, None],
                                    groups.trials[:, None], groups.constant)[:3]))


@site_operation(
    "mixed.glmm_groups", releases=COUNTS,
    describes="per group of the site (each of >= min_rows rows): its label and row count",
    arguments=(_DESIGN,), checks=(design_rules,), counts=lambda out: [out["n"]])
def site_glmm_groups(site, design):
    """The site's group labels and sizes (checked), before the first round."""
    groups, labels = _site_groups(site, design)
    return {"labels": np.asarray(labels, dtype=object),
            "n": np.bincount(groups.codes).astype(np.float64)}


@site_operation(
    "mixed.glmm_totals", releases=SUMS, reads_design=True,
    describes="two numbers: the sums of the outcome and of the trials, under the dominance "
              "rule",
    arguments=(_DESIGN,), checks=(design_rules,))
def site_glmm_totals(site, design):
    """The site's sums of the outcome and of the trials (rows for 0/1 or counts):
    the server's starting intercept."""
    groups, _ = _site_groups(site, design)
    dominance.check_rows(np.column_stack([groups.y, groups.trials]), "a GLMM's totals")
    return {"y": float(groups.y.sum()), "trials": float(groups.trials.sum())}


@site_operation(
    "mixed.glmm_terms", releases=SUMS, reads_design=True,
    describes="at the broadcast parameters, the site's groups' marginal log-likelihood, "
              "its gradient and Hessian, summed over its groups (each group of >= "
              "min_rows rows; the rows' conditional terms at their groups' modes under the "
              "dominance rule)",
    arguments=(_DESIGN, _PARAMS, Arg("n_nodes", "int", low=1, high=MAX_QUADRATURE_NODES)),
    checks=(design_rules,))
def site_glmm_terms(site, design, params, n_nodes):
    """At ``params = (b, sigma)``: the sums over the site's groups of the AGQ
    log-likelihood (``n_nodes`` nodes; 1: Laplace), its gradient, and its Hessian
    by central differences of the gradient (computed here: no extra round)."""
    groups, _ = _site_groups(site, design)
    params = np.asarray(params, dtype=np.float64)
    slopes = _slope_groups(groups, design)
    if slopes is not None:  # random slopes: the Laplace value, differenced here
        value, grad, hess, V = slopes.terms(params)
        _audit_slope_rows(slopes, params, V)
        return {"loglike": value, "grad": grad, "hess": 0.5 * (hess + hess.T)}
    nodes, weights = np.polynomial.hermite.hermgauss(int(n_nodes))
    value, grad, modes = _value_and_gradient(groups, params[:-1], params[-1], nodes, weights)
    _audit_rows(groups, params[:-1], params[-1], modes)
    hess = np.empty((params.size, params.size))
    for k in range(params.size):
        step = 1e-5 * max(1.0, abs(params[k]))
        ends = []
        for sign in (1.0, -1.0):
            moved = params.copy()
            moved[k] += sign * step
            ends.append(_value_and_gradient(groups, moved[:-1], moved[-1], nodes, weights,
                                             start=modes)[1])
        hess[k] = (ends[0] - ends[1]) / (2.0 * step)
    return {"loglike": value, "grad": grad, "hess": 0.5 * (hess + hess.T)}


@site_operation(
    "mixed.glmm_modes", releases=SUMS, reads_design=True,
    describes="per group of the site (each of >= min_rows rows): the conditional mode and "
              "standard deviation of its random intercept, and slopes if any (the rows' "
              "conditional terms at the modes under the dominance rule)",
    arguments=(_DESIGN, _PARAMS), checks=(design_rules,))
def site_glmm_modes(site, design, params):
    """Each of the site's groups' conditional mode of its random intercept
    (``sigma v*``, lme4's ``ranef``) and conditional standard deviation
    (``sigma / sqrt(D)``)."""
    groups, labels = _site_groups(site, design)
    params = np.asarray(params, dtype=np.float64)
    slopes = _slope_groups(groups, design)
    if slopes is not None:  # the modes of L v and their conditional sds
        k = slopes.q * (slopes.q + 1) // 2
        L = unpack(params[-k:], slopes.q)
        V, D = slopes.modes(params[:-k], L)
        _audit_slope_rows(slopes, params, V)
        cond = L @ np.linalg.inv(D) @ L.T
        return {"labels": np.asarray(labels, dtype=object), "mode": V @ L.T,
                "sd": np.sqrt(np.diagonal(cond, axis1=1, axis2=2))}
    v, D = groups.modes(params[:-1], params[-1])
    _audit_rows(groups, params[:-1], params[-1], v)
    sigma = abs(params[-1])
    return {"labels": np.asarray(labels, dtype=object), "mode": np.sign(params[-1]) * sigma * v,
            "sd": sigma / np.sqrt(D)}
