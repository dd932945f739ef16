"""The profiled (RE)ML of a linear mixed model from per-group sums (server side).

Group ``g`` has ``y_g = X_g b + Z_g u_g + e_g`` with ``u_g ~ N(0, s2 Psi)`` and
``e_g ~ N(0, s2 I)``, so ``cov(y_g) = s2 S_g`` with ``S_g = I + Z_g Psi Z_g'``.
Everything below depends on the rows only through

- totals over every row: ``C = X'X``, ``d = X'y``, ``s = y'y`` and ``N``;
- per group: ``A_g = Z_g'Z_g``, ``B_g = Z_g'X_g``, ``c_g = Z_g'y_g`` (and ``n_g``),

because ``S_g^{-1} = I - Z_g K_g Z_g'`` with ``K_g = L (L'A_g L + I)^{-1} L'``
(``Psi = L L'``, ``L`` lower triangular). The optimiser's variable is the
packed lower triangle of ``L`` (``theta``, statsmodels' ``use_sqrt`` packing);
the standard errors use the Hessian in ``(b, lower triangle of Psi)``, the
parameterisation of statsmodels' ``MixedLM.hessian``. See docs/mixed-models.md.
"""

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize


@dataclass
class GroupSums:
    """What the server holds: totals over the rows and the per-group blocks.

    Parameters
    ----------
    C : ndarray of shape (p, p)
        ``X'X`` over every row.
    d : ndarray of shape (p,)
        ``X'y``.
    s : float
        ``y'y``.
    n : ndarray of shape (G,)
        Rows per group.
    A : ndarray of shape (G, q, q)
        ``Z_g'Z_g``.
    B : ndarray of shape (G, q, p)
        ``Z_g'X_g``.
    c : ndarray of shape (G, q)
        ``Z_g'y_g``.
    vc_slots : ndarray of shape (q - k_re,), default=empty
        The variance component of each column after the first ``k_re`` (the
        columns of a variance component share one variance, statsmodels'
        ``vc_formula``; a group with fewer levels has zero columns there).
    n_vc : int, default=0
        The number of variance components.
    """

    C: np.ndarray
    d: np.ndarray
    s: float
    n: np.ndarray
    A: np.ndarray
    B: np.ndarray
    c: np.ndarray
    vc_slots: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    n_vc: int = 0

    @property
    def n_obs(self):
        return int(self.n.sum())

    @property
    def k_fe(self):
        return self.C.shape[0]

    @property
    def q(self):
        """Columns of ``Z``: the covariance block's, then the variance components'."""
        return self.A.shape[1]

    @property
    def k_re(self):
        """Columns of the random effects with a full covariance matrix (``cov_re``)."""
        return self.A.shape[1] - self.vc_slots.size

    @property
    def n_theta(self):
        """Variance parameters: the lower triangle of ``cov_re``, then one per component."""
        return self.k_re * (self.k_re + 1) // 2 + self.n_vc


def factor_from_theta(theta, q):
    """The lower-triangular ``L`` whose packed (row-major) lower triangle is ``theta``."""
    L = np.zeros((q, q))
    L[np.tril_indices(q)] = theta
    return L


def theta_from_cov(psi):
    """The packed Cholesky factor of ``psi`` (its diagonal's square roots when
    ``psi`` is singular, as statsmodels packs it)."""
    try:
        L = np.linalg.cholesky(psi)
    except np.linalg.LinAlgError:
        L = np.diag(np.sqrt(np.clip(np.diag(psi), 0, None)))
    return L[np.tril_indices(psi.shape[0])]


def factor(theta, sums):
    """``L`` of ``Psi = L L'``: the packed Cholesky factor of the covariance block,
    then each variance component's standard deviation on its columns' diagonal."""
    k = sums.k_re
    m = k * (k + 1) // 2
    L = np.zeros((sums.q, sums.q))
    L[:k, :k] = factor_from_theta(theta[:m], k)
    slots = np.arange(k, sums.q)
    L[slots, slots] = np.asarray(theta[m:])[sums.vc_slots]
    return L


def theta_of(psi, sums):
    """``theta`` (packed ``L`` of the block, standard deviations of the components)
    of a structured ``Psi``."""
    k = sums.k_re
    sd = np.zeros(sums.n_vc)
    diagonal = np.diag(psi)[k:]
    for j in range(sums.n_vc):
        sd[j] = np.sqrt(max(diagonal[sums.vc_slots == j].max(initial=0.0), 0.0))
    return np.concatenate([theta_from_cov(psi[:k, :k]) if k else np.zeros(0), sd])


@dataclass
class _Fit:
    """The GLS solution at one ``Psi`` and the per-group pieces derived from it."""

    psi: np.ndarray
    fe_params: np.ndarray
    r2: float           # the residual quadratic form r'S^{-1}r at the GLS estimate
    xsx: np.ndarray     # X'S^{-1}X
    logdet_s: float     # sum_g log det S_g
    K: np.ndarray       # (G, q, q): L (L'A_g L + I)^{-1} L'

    def z_products(self, sums):
        """``Z'S^{-1}Z``, ``Z'S^{-1}X`` and ``Z'S^{-1}r`` of every group (stacked)."""
        AK = sums.A @ self.K
        zsz = sums.A - AK @ sums.A
        zsx = sums.B - AK @ sums.B
        zr = sums.c - np.einsum("gqp,p->gq", sums.B, self.fe_params)
        zsr = zr - np.einsum("gab,gb->ga", AK, zr)
        return zsz, zsx, zsr


def gls(psi_factor, sums):
    """GLS at ``Psi = L L'`` from the sums (``psi_factor`` is ``L``).

    Returns
    -------
    fit : _Fit
    """
    L = psi_factor
    q = L.shape[0]
    inner = np.swapaxes(L.T @ sums.A, 1, 2)  # A_g L (A symmetric): then L' A_g L
    inner = L.T @ inner + np.eye(q)
    M = np.linalg.cholesky(inner)
    T = np.linalg.solve(M, np.broadcast_to(L.T, M.shape))  # M_g^{-1} L'
    P = T @ sums.B
    w = np.einsum("gab,gb->ga", T, sums.c)
    xsx = sums.C - np.einsum("gqa,gqb->ab", P, P)
    xsy = sums.d - np.einsum("gqa,gq->a", P, w)
    ysy = sums.s - np.einsum("gq,gq->", w, w)
    fe_params = np.linalg.solve(xsx, xsy)
    r2 = float(ysy - xsy @ fe_params)
    logdet_s = 2.0 * float(np.log(np.diagonal(M, axis1=1, axis2=2)).sum())
    K = np.swapaxes(T, 1, 2) @ T
    return _Fit(L @ L.T, fe_params, r2, xsx, logdet_s, K)


def residual_df(sums, reml):
    """``N - p`` (REML) or ``N`` (ML): the divisor of the scale."""
    return sums.n_obs - (sums.k_fe if reml else 0)


def loglike(fit, sums, reml):
    """The scale-profiled (RE)ML log-likelihood at a GLS fit (statsmodels'
    ``MixedLM.loglike``; lme4's REML criterion or deviance divided by -2)."""
    m = residual_df(sums, reml)
    value = -0.5 * (fit.logdet_s + m * (1.0 + np.log(2.0 * np.pi * fit.r2 / m)))
    if reml:
        value -= 0.5 * np.linalg.slogdet(fit.xsx)[1]
    return float(value)


def psi_gradient(fit, sums, reml):
    """``d loglik / d Psi`` (a symmetric ``q x q`` matrix, entries taken as free),
    with the fixed effects profiled out (they drop out: ``r2`` is stationary in b)."""
    m = residual_df(sums, reml)
    zsz, zsx, zsr = fit.z_products(sums)
    grad = -0.5 * zsz.sum(axis=0) + (m / (2.0 * fit.r2)) * np.einsum("ga,gb->ab", zsr, zsr)
    if reml:
        xsx_inv = np.linalg.inv(fit.xsx)
        grad += 0.5 * np.einsum("gap,pr,gbr->ab", zsx, xsx_inv, zsx)
    return grad


def objective(theta, sums, reml):
    """``-loglik / N`` and its gradient in ``theta`` (what the server minimises)."""
    L = factor(theta, sums)
    try:
        fit = gls(L, sums)
    except np.linalg.LinAlgError:
        return np.inf, np.zeros_like(theta)
    if not fit.r2 > 0:
        return np.inf, np.zeros_like(theta)
    gpsi = psi_gradient(fit, sums, reml)
    grad_L = 2.0 * gpsi @ L  # d tr(G L L') / dL for a symmetric G
    k = sums.k_re
    # a component's sd sits on the diagonal of each of its columns
    grad_vc = np.bincount(sums.vc_slots, weights=np.diag(grad_L)[k:], minlength=sums.n_vc)
    n = sums.n_obs
    grad = np.concatenate([grad_L[:k, :k][np.tril_indices(k)], grad_vc])
    return -loglike(fit, sums, reml) / n, -grad / n


def _unit_directions(sums):
    """``dPsi / dpsi_k`` for each variance parameter: the packed lower-triangle
    entries of the covariance block, then each component's variance."""
    q, k = sums.q, sums.k_re
    rows, cols = np.tril_indices(k)
    E = np.zeros((sums.n_theta, q, q))
    for m, (i, j) in enumerate(zip(rows, cols)):
        E[m, i, j] = E[m, j, i] = 1.0
    slots = np.arange(k, q)
    E[rows.size + sums.vc_slots, slots, slots] = 1.0
    return E


def hessian(fit, sums, reml):
    """The Hessian of the scale-profiled (RE)ML log-likelihood in ``(b, tril Psi)``
    at the GLS estimate (statsmodels' ``MixedLM.hessian``; its negative inverse
    is ``cov_params``)."""
    fac = residual_df(sums, reml)
    r2 = fit.r2
    zsz, zsx, zsr = fit.z_products(sums)
    E = _unit_directions(sums)
    Er = np.einsum("kab,gb->gka", E, zsr)                    # E_k rho_g
    quad = np.einsum("gka,ga->k", Er, zsr)                   # sum_g rho' E_k rho
    cross = np.einsum("gka,gab,glb->kl", Er, zsz, Er)        # sum_g rho' E_k Gam E_l rho
    trace = np.einsum("kab,gbc,lcd,gda->kl", E, zsz, E, zsz)  # sum_g tr(E_k Gam E_l Gam)
    h_re = 0.5 * trace - 0.5 * fac * (2.0 * cross / r2 - np.outer(quad, quad) / r2 ** 2)
    h_fere = -fac / r2 * np.einsum("gap,gka->kp", zsx, Er)
    if reml:
        h_re -= 0.5 * _reml_logdet_hessian(fit.xsx, zsx, zsz, E)
    p = sums.k_fe
    H = np.zeros((p + len(E), p + len(E)))
    H[:p, :p] = -fac * fit.xsx / r2
    H[p:, :p] = h_fere
    H[:p, p:] = h_fere.T
    H[p:, p:] = h_re
    return H


def _reml_logdet_hessian(xsx, zsx, zsz, E):
    """Second derivatives of ``log det X'S^{-1}X`` in the entries of ``Psi``."""
    xsx_inv = np.linalg.inv(xsx)
    EX = np.einsum("kab,gbp->gkap", E, zsx)                   # E_k Xi_g
    first = -np.einsum("gap,gkar->kpr", zsx, EX)              # dXSX_k = -sum Xi'E_k Xi
    second = np.einsum("gkap,gab,glbr->klpr", EX, zsz, EX)    # sum Xi'E_k Gam E_l Xi
    second = second + np.swapaxes(second, 0, 1)
    Q = np.einsum("ab,kbc->kac", xsx_inv, first)              # XSX^{-1} dXSX_k
    return (np.einsum("ab,klba->kl", xsx_inv, second)
            - np.einsum("kab,lba->kl", Q, Q))


def random_effects(fit, sums):
    """The BLUPs ``Psi Z_g'S_g^{-1}(y_g - X_g b)`` and their conditional covariances
    over ``s2`` (``Psi - Psi Z_g'S_g^{-1}Z_g Psi``), one row per group."""
    zsz, _, zsr = fit.z_products(sums)
    psi = fit.psi
    blups = zsr @ psi
    cond = psi - psi @ zsz @ psi
    return blups, cond


def packed_psi_gradient(fit, sums, reml):
    """``d loglik / d psi_k`` for each variance parameter (an off-diagonal entry
    stands for both of its places, a component for each of its columns)."""
    return np.einsum("kab,ab->k", _unit_directions(sums), psi_gradient(fit, sums, reml))


def profiled_hessian(fit, sums, reml):
    """The Hessian of the (RE)ML log-likelihood in ``tril Psi`` with the fixed
    effects profiled out (the Schur complement of :func:`hessian`)."""
    H = hessian(fit, sums, reml)
    p = sums.k_fe
    return H[p:, p:] - H[p:, :p] @ np.linalg.solve(H[:p, :p], H[:p, p:])


def unpack_psi(psi_packed, sums):
    """``Psi`` from its variance parameters (:func:`packed_psi`'s inverse)."""
    return np.einsum("k,kab->ab", psi_packed, _unit_directions(sums))


def packed_psi(psi, sums):
    """The variance parameters of a structured ``Psi``: the covariance block's lower
    triangle, then each component's variance."""
    k = sums.k_re
    vc = np.zeros(sums.n_vc)
    np.maximum.at(vc, sums.vc_slots, np.diag(psi)[k:])
    return np.concatenate([psi[:k, :k][np.tril_indices(k)], vc])


@dataclass
class Optimum:
    """Where the server's optimiser ended, and how."""

    fit: _Fit
    theta: np.ndarray
    converged: bool
    n_iter: int          # quasi-Newton iterations and Newton steps
    n_evaluations: int   # likelihood evaluations (each free: no round)
    gradient_norm: float  # sup-norm of the gradient of -loglik/N in theta
    message: str


def maximize(sums, reml, *, start_psi, tol, max_iter):
    """Maximise the profiled (RE)ML over ``theta`` (packed ``L``, ``Psi = L L'``).

    BFGS with the analytic gradient (statsmodels' first method, from its start
    ``Psi = I``), then Newton steps in ``tril Psi`` with the exact profiled
    Hessian to polish an interior optimum below BFGS's line-search noise: the
    likelihood is flat in the variances, so a loose stop leaves ~1e-4 relative
    error in them. ``converged`` means ``|grad(-loglik/N)|_inf <= tol``.
    """
    theta0 = theta_of(np.asarray(start_psi, dtype=float), sums)
    bfgs = minimize(objective, theta0, args=(sums, reml), jac=True, method="BFGS",
                    options={"gtol": tol, "maxiter": max_iter})
    theta, steps, evaluations = _newton_polish(bfgs.x, sums, reml,
                                               max_steps=min(20, max_iter - int(bfgs.nit)))
    _, grad = objective(theta, sums, reml)
    norm = float(np.max(np.abs(grad))) if grad.size else 0.0
    converged = bool(np.isfinite(norm) and norm <= tol)
    message = bfgs.message if not converged else "converged"
    fit = gls(factor(theta, sums), sums)
    return Optimum(fit, theta, converged, int(bfgs.nit) + steps,
                   int(bfgs.nfev) + evaluations + 1, norm, str(message))


def _pd_theta(psi_packed, sums):
    """``theta`` of a positive definite ``Psi`` (LinAlgError when it is not)."""
    k, m = sums.k_re, sums.n_theta - sums.n_vc
    vc = psi_packed[m:]
    if np.any(vc <= 0):
        raise np.linalg.LinAlgError("a variance component at or below zero")
    P = unpack_psi(psi_packed, sums)[:k, :k]
    block = np.linalg.cholesky(P)[np.tril_indices(k)] if k else np.zeros(0)
    return np.concatenate([block, np.sqrt(vc)])


def _newton_polish(theta, sums, reml, max_steps=20):
    """Newton steps in ``tril Psi`` (step-halved, kept positive definite) while the
    profiled Hessian is negative definite; ``(theta, steps, evaluations)``."""
    fit = gls(factor(theta, sums), sums)
    value = loglike(fit, sums, reml)
    psi = packed_psi(fit.psi, sums)
    steps = evaluations = 0
    for _ in range(max_steps):
        H = profiled_hessian(fit, sums, reml)
        if not np.all(np.linalg.eigvalsh(H) < 0):
            break  # not a local maximum's neighbourhood (e.g. on the boundary)
        step = -np.linalg.solve(H, packed_psi_gradient(fit, sums, reml))
        for t in (1.0, 0.5, 0.25, 0.125):
            try:
                trial_theta = _pd_theta(psi + t * step, sums)
                trial = gls(factor(trial_theta, sums), sums)
            except np.linalg.LinAlgError:
                continue
            evaluations += 1
            trial_value = loglike(trial, sums, reml)
            if trial_value >= value - 1e-12 * abs(value):
                break
        else:
            break
        fit, value, psi, theta = trial, trial_value, psi + t * step, trial_theta
        steps += 1
        if np.max(np.abs(t * step)) <= 1e-10 * (1.0 + np.max(np.abs(psi))):
            break
    return theta, steps, evaluations
