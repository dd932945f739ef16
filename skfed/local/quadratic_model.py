"""The sub-problem of (quasi-)Newton methods: a quadratic model plus the penalty.

    minimize over d    g'd + 1/2 d'Bd + psi(coef(x + d))

``B`` is a dense Hessian (:class:`DenseModel`) or a limited-memory BFGS
matrix in compact form (:class:`CompactModel`). The solver depends on psi
(only its non-smooth part: a ridge part is already in ``g`` and ``B``):

- none: a linear solve (Cholesky; least squares when ``B`` is singular, as
  the multinomial Hessian is along a common shift of the intercepts);
- L1: cyclic coordinate descent with an active set, as glmnet does on its
  quadratic approximation (Friedman, Hastie & Tibshirani 2010);
- any other penalty with a prox (L1 / L2 balls, the nuclear norm, L1 inside
  a ball): accelerated proximal gradient (FISTA with restart) with that prox.

Each is solved to ``tol`` times the norm of the sub-problem's
proximal-gradient mapping at ``d = 0`` (which is the outer problem's own
stationarity at ``x``), with a floor at the round-off of the model's gradient.
"""

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, eigh, lstsq

from ..penalties import L1
from ..federation.operations import check_deadline
from ..federation.wire import wire_class
from .fista import fista

#: relative size below which a pivot or singular value of B counts as zero
SINGULAR = 1e-12
#: relative Levenberg damping of a singular Hessian
DAMPING = 1e-10
#: the model's gradient g + B d cannot be known better than this, relatively
ROUNDOFF = 1e-14


@wire_class(role="value")
class DenseModel:
    """A dense symmetric positive semi-definite ``B`` (Newton's Hessian)."""

    def __init__(self, H):
        self.H = np.asarray(H, dtype=float)

    def matvec(self, v):
        return self.H @ v

    def diagonal(self):
        return np.diag(self.H).copy()

    def norm_bound(self):
        """Largest eigenvalue (FISTA's step is its inverse)."""
        p = self.H.shape[0]
        top = eigh(self.H, eigvals_only=True, subset_by_index=[p - 1, p - 1],
                   check_finite=False)[0]
        return float(top) * (1 + 1e-12)

    def solve(self, r):
        """``B^{-1} r`` by Cholesky of the equilibrated ``D^-1/2 B D^-1/2`` (``D`` the
        diagonal), so that the singularity test and the damping are relative to
        each coordinate's own scale: raw covariates of very different
        magnitudes (incomes in the thousands beside an intercept) give a
        Hessian whose diagonal spans many decades without being singular, and a
        test against the largest diagonal would damp the small coordinates'
        steps (Newton then crawls). A (numerically) singular ``B`` gets a tiny
        Levenberg damping ``DAMPING`` of the unit diagonal: the step then has
        no component along the null space (where ``r`` has none but round-off,
        as the multinomial gradient along a common intercept shift), and
        elsewhere differs from the exact step by that relative amount; the
        least-squares solution is the last resort."""
        H = self.H
        if not H.size:
            return np.zeros_like(r)
        diag = np.diag(H)
        scale = np.sqrt(np.where(diag > SINGULAR * max(float(np.max(diag)), np.finfo(float).tiny),
                                 diag, 1.0))
        Hs = H / scale[:, None] / scale[None, :]
        rs = r / scale
        for damping in (0.0, DAMPING):
            try:
                factor = cho_factor(Hs + damping * np.eye(len(Hs)) if damping else Hs,
                                    lower=False, check_finite=False)
            except LinAlgError:
                continue
            if damping or np.min(np.diag(factor[0])) ** 2 > SINGULAR:
                return cho_solve(factor, rs, check_finite=False) / scale
        return lstsq(Hs, rs, cond=SINGULAR, lapack_driver="gelsy",
                     check_finite=False)[0] / scale

    def restrict(self, idx):
        """The model of the coordinates ``idx`` (the others held fixed)."""
        return DenseModel(self.H[np.ix_(idx, idx)])

    # coordinate descent keeps the whole gradient g + B d up to date: O(p) a move
    def cd_start(self, g):
        self._grad = np.array(g, dtype=float)

    def cd_gradient(self, j):
        return self._grad[j]

    def cd_move(self, j, delta):
        self._grad += delta * self.H[j]  # a row of the symmetric B: contiguous

    def cd_full_gradient(self):
        return self._grad


@wire_class(role="value")
class CompactModel:
    """``B = diag(D) - U M^{-1} U'`` with ``U`` of a few columns (compact L-BFGS).

    Parameters
    ----------
    D : ndarray of shape (p,)
        The diagonal of the initial matrix ``B_0``.
    U : ndarray of shape (p, k)
    M : ndarray of shape (k, k)
        Symmetric and invertible (``k = 0`` is allowed: ``B = diag(D)``).
    """

    def __init__(self, D, U, M):
        self.D = np.asarray(D, dtype=float)
        self.U = np.asarray(U, dtype=float).reshape(self.D.size, -1)
        self.M = np.asarray(M, dtype=float).reshape(self.U.shape[1], self.U.shape[1])
        k = self.U.shape[1]
        self.V = np.linalg.solve(self.M, self.U.T).T if k else np.zeros_like(self.U)  # U M^-1

    @classmethod
    def from_pairs(cls, pairs, gamma):
        """The L-BFGS matrix of the curvature pairs ``(s_i, y_i)`` (oldest
        first) from ``B_0 = gamma I`` (Byrd, Nocedal & Schnabel 1994, eq. 2.17)."""
        S = np.column_stack([s for s, _ in pairs])
        Y = np.column_stack([y for _, y in pairs])
        SY = S.T @ Y
        lower = np.tril(SY, -1)
        M = np.block([[gamma * (S.T @ S), lower], [lower.T, -np.diag(np.diag(SY))]])
        return cls(np.full(S.shape[0], float(gamma)), np.hstack([gamma * S, Y]), M)

    def matvec(self, v):
        return self.D * v - self.V @ (self.U.T @ v)

    def diagonal(self):
        return self.D - np.einsum("ij,ij->i", self.V, self.U)

    def norm_bound(self):
        """An upper bound of the largest eigenvalue (Weyl): ``max D`` plus that of
        ``-U M^{-1} U'``, computed on the ``k x k`` matrix ``-R M^{-1} R'``
        (``U = QR``)."""
        top = float(np.max(self.D))
        if self.U.shape[1]:
            R = np.linalg.qr(self.U, mode="r")
            small = -R @ np.linalg.solve(self.M, R.T)
            top += max(0.0, float(np.linalg.eigvalsh(0.5 * (small + small.T))[-1]))
        return top * (1 + 1e-12)

    def solve(self, r):
        """``B^{-1} r`` by the Woodbury identity (a ``k x k`` solve)."""
        Dinv_r = r / self.D
        if not self.U.shape[1]:
            return Dinv_r
        DinvU = self.U / self.D[:, None]
        small = -self.M + self.U.T @ DinvU
        return Dinv_r - DinvU @ np.linalg.solve(small, self.U.T @ Dinv_r)

    def restrict(self, idx):
        """The model of the coordinates ``idx`` (the others held fixed)."""
        return CompactModel(self.D[idx], self.U[idx], self.M)

    # coordinate descent keeps U'd up to date: O(k) a move, O(k) a coordinate
    def cd_start(self, g):
        self._g = np.array(g, dtype=float)
        self._d = np.zeros_like(self._g)
        self._r = np.zeros(self.U.shape[1])

    def cd_gradient(self, j):
        return self._g[j] + self.D[j] * self._d[j] - self.V[j] @ self._r

    def cd_move(self, j, delta):
        self._d[j] += delta
        self._r += delta * self.U[j]

    def cd_full_gradient(self):
        return self._g + self.D * self._d - self.V @ self._r


def solve_quadratic_model(model, g, x, penalty, layout, *, tol=1e-12, max_iter=10000):
    """The step ``d`` minimizing ``g'd + d'Bd / 2 + psi(coef(x + d))``.

    Parameters
    ----------
    model : DenseModel or CompactModel
        The curvature ``B`` (positive semi-definite).
    g : ndarray of shape (p,)
        Gradient of the smooth part at ``x``.
    x : ndarray of shape (p,)
        The current point, in the layout of ``theta``.
    penalty : Penalty or None
        The non-smooth part of the penalty, on the coefficient block
        (intercepts are never penalized).
    layout : Layout
    tol : float, default=1e-12
        Stop when the sub-problem's proximal-gradient mapping is below
        ``tol`` times its value at ``d = 0``.
    max_iter : int, default=10000
        Coordinate-descent sweeps or FISTA iterations at most.

    Returns
    -------
    d : ndarray of shape (p,)
    """
    g = np.asarray(g, dtype=float)
    x = np.asarray(x, dtype=float)
    if penalty is None:
        return model.solve(-g)
    diag = model.diagonal()
    floor = ROUNDOFF * (np.linalg.norm(g) + max(float(np.max(diag)), 0.0) * np.linalg.norm(x))
    if type(penalty) is L1:
        lam = layout.block_vector(penalty.alpha, 0.0)
        return _coordinate_descent(model, g, x, lam, diag, tol, floor, max_iter)
    return _proximal_gradient(model, g, x, penalty, layout, tol, floor, max_iter)


def _soft(z, tau):
    return np.sign(z) * np.maximum(np.abs(z) - tau, 0.0)


def _coordinate_descent(model, g, x, lam, diag, tol, floor, max_iter):
    """Cyclic coordinate descent on ``g'd + d'Bd/2 + sum_j lam_j |x_j + d_j|``.

    After each sweep the coordinate-wise optimality violation (the scaled
    one-coordinate prox-gradient mapping, in gradient units) is computed for
    every coordinate; the next sweep visits only the coordinates that are
    non-zero, unpenalized or violating (glmnet's active set, checked each
    sweep so that no coordinate is forgotten). Once a sweep leaves the
    support and the signs as they were, the model restricted to them is a
    linear system: solving it finishes exactly when its solution keeps the
    signs and satisfies the optimality conditions off the support (otherwise
    coordinate descent goes on from where it was).
    """
    p = x.size
    d = np.zeros(p)
    movable = diag > SINGULAR * max(float(np.max(diag)), np.finfo(float).tiny)
    inv = np.where(movable, 1.0 / np.where(movable, diag, 1.0), 0.0)

    def violation(d, grad):
        z = x + d
        return np.where(movable, (z - _soft(z - inv * grad, inv * lam)) * diag, 0.0)

    v = violation(d, g)
    goal = max(tol * np.linalg.norm(v), floor)
    if np.linalg.norm(v) <= goal:
        return d
    model.cd_start(g)
    visit = np.flatnonzero(movable)
    pattern, tried = None, None
    for _ in range(max_iter):
        check_deadline()
        for j in visit:
            zj = x[j] + d[j]
            u = zj - inv[j] * model.cd_gradient(j)
            t = lam[j] * inv[j]
            new = u - t if u > t else (u + t if u < -t else 0.0)
            delta = new - zj
            if delta != 0.0:
                d[j] += delta
                model.cd_move(j, delta)
        v = violation(d, model.cd_full_gradient())
        if np.linalg.norm(v) <= goal:
            break
        visit = np.flatnonzero(movable & ((x + d != 0) | (lam == 0) | (v != 0)))
        previous, pattern = pattern, np.sign(x + d) * movable
        if previous is not None and np.array_equal(previous, pattern) and (
                tried is None or not np.array_equal(tried, pattern)):
            tried = pattern
            finished = _solve_on_support(model, g, x, lam, pattern, movable)
            if finished is not None and np.linalg.norm(
                    violation(finished, g + model.matvec(finished))) <= goal:
                return finished
    return d


def _solve_on_support(model, g, x, lam, signs, movable):
    """The step with ``x + d`` zero off the support of ``signs`` and the model
    stationary on it for those signs, or ``None`` if a sign flips."""
    free = np.flatnonzero(movable & ((signs != 0) | (lam == 0)))
    d = np.where(movable & (signs == 0) & (lam > 0), -x, 0.0)  # off the support: x + d = 0
    if free.size:
        rhs = -(g + model.matvec(d) + lam * signs)[free]
        d[free] = model.restrict(free).solve(rhs)
    z = (x + d)[free]
    penalized = lam[free] > 0
    if np.any(np.sign(z[penalized]) != signs[free][penalized]):
        return None
    return d


def _proximal_gradient(model, g, x, penalty, layout, tol, floor, max_iter):
    """FISTA with restart on the model, in the variable ``z = x + d``."""
    L = model.norm_bound()
    if not L > 0:  # B = 0: the model is linear; one prox step is its minimizer's best guess
        L = 1.0
    steps = np.full(x.size, 1.0 / L)

    def grad(z):
        return g + model.matvec(z - x)

    def prox(v, s):
        return layout.apply_prox(penalty, v, float(s[0]))

    first = prox(x - steps * g, steps)
    mapping = np.linalg.norm((x - first) * L)
    if mapping <= floor:
        return np.zeros_like(x)
    z, _, _ = fista(grad, x, steps, prox, tol=tol, max_iter=max_iter,
                    reference=max(mapping, floor / tol))
    return z - x
