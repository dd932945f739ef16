"""A GLMM's groups with a vector of random effects (intercept and slopes), at a site.

Group ``g`` has ``eta = X b + Z_g L v_g`` with ``v_g ~ N(0, I_q)`` (lme4's
spherical random effects; ``L`` lower triangular, its packed rows ``theta``,
lme4's ``theta``). Its Laplace contribution to the marginal log-likelihood is
``h(v*) - log det(D) / 2`` with ``h(v) = sum_j log p(y_j | eta_j) - v'v / 2``,
``v*`` the mode of ``h`` and ``D = I + L'Z'WZL`` (lme4's ``nAGQ = 1``). The
site differentiates the sum over its groups itself, by central differences of
that value (no extra round): the gradient and Hessian of a smooth function of a
few parameters, the modes solved to 1e-12 so the differences are clean.
"""

import numpy as np

from ..federation.operations import check_deadline


def unpack(theta, q):
    """``L`` from its packed rows (row-major lower triangle)."""
    L = np.zeros((q, q))
    L[np.tril_indices(q)] = theta
    return L


class SlopeGroups:
    """A site's rows, grouped (``groups``: the scalar model's row data), with ``Z``;
    ``row_terms(eta)``: each row's ``log p``, its derivative and weight."""

    def __init__(self, groups, Z, row_terms):
        self.groups, self.Z, self.row_terms = groups, Z, row_terms
        self.q = Z.shape[1]

    def _terms(self, b, L, V):
        eta = self.groups.X @ b + np.einsum("iq,iq->i", self.Z, V[self.groups.codes] @ L.T)
        return self.row_terms(eta)

    def _h(self, b, L, V):
        logp, _, _ = self._terms(b, L, V)
        return self.groups.sum(logp) - 0.5 * np.einsum("gq,gq->g", V, V)

    def modes(self, b, L, V=None, max_iter=100):
        """Each group's mode ``v*`` (Newton, steps halved per group) and ``D``."""
        G, q = self.groups.n_groups, self.q
        V = np.zeros((G, q)) if V is None else V.copy()
        value = self._h(b, L, V)
        ZL = self.Z @ L
        for _ in range(max_iter):
            check_deadline()
            _, d1, w = self._terms(b, L, V)
            grad = self.groups.sum(ZL * d1[:, None]) - V
            D = np.eye(q) + self.groups.sum(np.einsum("ia,ib->iab", ZL, ZL * w[:, None]))
            step = np.linalg.solve(D, grad[:, :, None])[:, :, 0]
            for _ in range(60):
                trial = self._h(b, L, V + step)
                worse = trial < value - 1e-12 * np.abs(value)
                if not worse.any():
                    break
                step = np.where(worse[:, None], 0.5 * step, step)
            V, value = V + step, trial
            if np.max(np.abs(step)) <= 1e-12 * (1.0 + np.max(np.abs(V))):
                break
        _, _, w = self._terms(b, L, V)
        D = np.eye(q) + self.groups.sum(np.einsum("ia,ib->iab", ZL, ZL * w[:, None]))
        return V, D

    def laplace(self, params, start=None):
        """The sum over the groups of the Laplace log-likelihood at ``(b, theta)``,
        and the modes."""
        q = self.q
        k = q * (q + 1) // 2
        b, L = params[:-k], unpack(params[-k:], q)
        with np.errstate(over="ignore", invalid="ignore"):  # a trial step too far: -inf
            V, D = self.modes(b, L, start)
            value = self._h(b, L, V) - 0.5 * np.linalg.slogdet(D)[1]
        return float(value.sum()), V

    def terms(self, params):
        """The value, and its gradient and Hessian by central differences."""
        value, V = self.laplace(params)
        n = params.size
        step = 1e-4 * np.maximum(1.0, np.abs(params))

        def at(shift):
            return self.laplace(params + shift, V)[0]

        grad, hess = np.empty(n), np.empty((n, n))
        E = np.diag(step)
        ends = [(at(E[i]), at(-E[i])) for i in range(n)]
        for i in range(n):
            grad[i] = (ends[i][0] - ends[i][1]) / (2.0 * step[i])
            hess[i, i] = (ends[i][0] - 2.0 * value + ends[i][1]) / step[i] ** 2
            for j in range(i):
                cross = (at(E[i] + E[j]) - at(E[i] - E[j]) - at(E[j] - E[i])
                         + at(-E[i] - E[j]))
                hess[i, j] = hess[j, i] = cross / (4.0 * step[i] * step[j])
        return value, grad, hess, V
