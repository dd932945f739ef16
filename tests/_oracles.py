"""Independent pooled optima, written without skfed's solvers.

Each function returns the optimal objective value of the pooled problem in the
estimator's own units (the scikit-learn objective), computed by scikit-learn,
scipy (HiGHS, L-BFGS) or a plain centralized FISTA written here.
"""

import numpy as np
from scipy.optimize import linprog, minimize
from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression
from sklearn.svm import SVC, LinearSVC


# --- objectives in scikit-learn's units --------------------------------------
def ls_objective(X, Y, W, b):
    R = Y - X @ W.T - b
    return 0.5 * np.sum(R * R) / len(X)


def logistic_objective(X, y01, coef, intercept, C, l1_ratio):
    """Binary LogisticRegression objective (y in {0, 1})."""
    s = 2 * y01 - 1
    z = X @ coef.ravel() + float(np.ravel(intercept)[0])
    pen = l1_ratio * np.abs(coef).sum() + 0.5 * (1 - l1_ratio) * np.sum(coef * coef)
    return C * np.sum(np.logaddexp(0, -s * z)) + (pen if np.isfinite(C) else 0.0)


def multinomial_objective(X, y, coef, intercept, C, l1_ratio):
    Z = X @ coef.T + intercept
    Z = Z - Z.max(axis=1, keepdims=True)
    logp = Z - np.log(np.exp(Z).sum(axis=1, keepdims=True))
    pen = l1_ratio * np.abs(coef).sum() + 0.5 * (1 - l1_ratio) * np.sum(coef * coef)
    return -C * logp[np.arange(len(y)), y].sum() + pen


def svc_objective(X, y01, coef, intercept, C, loss, penalty):
    s = 2 * y01 - 1
    slack = np.maximum(0, 1 - s * (X @ coef.ravel() + float(np.ravel(intercept)[0])))
    data = np.sum(slack ** 2) if loss == "squared_hinge" else np.sum(slack)
    pen = 0.5 * coef.ravel() @ coef.ravel() if penalty == "l2" else np.abs(coef).sum()
    return C * data + pen


# --- optima ---------------------------------------------------------------
def lasso_optimum(X, y, alpha, l1_ratio=1.0):
    cls = Lasso(alpha=alpha, tol=1e-14, max_iter=100000) if l1_ratio == 1 else ElasticNet(
        alpha=alpha, l1_ratio=l1_ratio, tol=1e-14, max_iter=100000)
    ref = cls.fit(X, y)
    w = ref.coef_
    return (ls_objective(X, y[:, None], w[None], ref.intercept_) + alpha * l1_ratio
            * np.abs(w).sum() + 0.5 * alpha * (1 - l1_ratio) * w @ w)


def l1_ball_ls_optimum(X, y, radius):
    """min LS s.t. ||w||_1 <= radius: the Lasso whose solution has ||w||_1 = radius
    (bisection on alpha), when the unconstrained solution lies outside the ball."""
    lo, hi = 0.0, float(np.max(np.abs(X.T @ (y - y.mean())))) / len(y)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        w = Lasso(alpha=mid, tol=1e-14, max_iter=100000).fit(X, y)
        lo, hi = (mid, hi) if np.abs(w.coef_).sum() > radius else (lo, mid)
    ref = Lasso(alpha=hi, tol=1e-14, max_iter=100000).fit(X, y)
    assert abs(np.abs(ref.coef_).sum() - radius) < 1e-6
    return ls_objective(X, y[:, None], ref.coef_[None], ref.intercept_)


def logistic_optimum(X, y01, C, l1_ratio):
    kw = dict(solver="lbfgs") if l1_ratio == 0 else dict(solver="saga")
    ref = LogisticRegression(C=C, l1_ratio=l1_ratio, tol=1e-12, max_iter=100000, **kw).fit(X, y01)
    return logistic_objective(X, y01, ref.coef_, ref.intercept_, C, l1_ratio), ref


def ball_logistic_optimum(X, y01, C, radius):
    """Logistic loss + ridge inside an L2 ball: centralized projected FISTA."""
    n, d = X.shape
    A = np.column_stack([X, np.ones(n)])
    s = 2 * y01 - 1
    L = C * 0.25 * np.linalg.eigvalsh(A.T @ A)[-1] + 1.0

    def grad(t):
        z = A @ t
        g = C * A.T @ (-s / (1 + np.exp(s * z)))
        g[:d] += t[:d]
        return g

    def project(t):
        t = t.copy()
        norm = np.linalg.norm(t[:d])
        if norm > radius:
            t[:d] *= radius / norm
        return t

    x = y = np.zeros(d + 1)
    tk = 1.0
    for _ in range(20000):
        x_new = project(y - grad(y) / L)
        t_new = 0.5 * (1 + np.sqrt(1 + 4 * tk * tk))
        y = x_new + (tk - 1) / t_new * (x_new - x)
        x, tk = x_new, t_new
    return logistic_objective(X, y01, x[:d][None], x[d:], C, 0.0)


def svc_optimum(X, y01, C, loss, penalty, fit_intercept):
    """LinearSVC without intercept (same objective), SVC(kernel='linear') for the
    hinge with an unpenalized intercept, L-BFGS for the squared hinge with one,
    and an LP (HiGHS) for the hinge with an L1 penalty."""
    n, d = X.shape
    s = 2 * y01 - 1
    if loss == "hinge" and penalty == "l1":
        # variables [w+, w-, b+, b-, xi]: min sum(w+ + w-) + C sum(xi)
        nb = 2 if fit_intercept else 0
        c = np.r_[np.ones(2 * d), np.zeros(nb), C * np.ones(n)]
        Sx = s[:, None] * X
        A = np.hstack([-Sx, Sx] + ([-s[:, None], s[:, None]] if fit_intercept else [])
                      + [-np.eye(n)])
        res = linprog(c, A_ub=A, b_ub=-np.ones(n), bounds=(0, None), method="highs")
        assert res.status == 0
        return res.fun
    if not fit_intercept:
        # liblinear's dual coordinate descent visits the rows in a random order: a fixed
        # one makes the oracle the same every run (an unseeded run once stopped 1.5e-4
        # above the optimum; twelve seeds agree to 3e-14)
        ref = LinearSVC(C=C, loss=loss, penalty=penalty, dual=(penalty == "l2"),
                        fit_intercept=False, tol=1e-12, max_iter=1000000,
                        random_state=0).fit(X, y01)
        return svc_objective(X, y01, ref.coef_, 0.0, C, loss, penalty)
    if loss == "hinge":
        ref = SVC(kernel="linear", C=C, tol=1e-12).fit(X, y01)
        return svc_objective(X, y01, ref.coef_, ref.intercept_, C, loss, penalty)

    if penalty == "l2":
        def fun(t):
            slack = np.maximum(0, 1 - s * (X @ t[:d] + t[d]))
            g = -2 * C * np.r_[X.T @ (s * slack), np.sum(s * slack)]
            g[:d] += t[:d]
            return C * slack @ slack + 0.5 * t[:d] @ t[:d], g

        res = minimize(fun, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                       options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 100000})
        return res.fun

    # L1: w = p - q with p, q >= 0 makes the objective smooth on a box
    def fun(t):
        w = t[:d] - t[d:2 * d]
        slack = np.maximum(0, 1 - s * (X @ w + t[-1]))
        gw = -2 * C * X.T @ (s * slack)
        g = np.r_[gw + 1, -gw + 1, -2 * C * np.sum(s * slack)]
        return C * slack @ slack + t[:2 * d].sum(), g

    bounds = [(0, None)] * (2 * d) + [(None, None)]
    res = minimize(fun, np.zeros(2 * d + 1), jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 100000})
    return res.fun


def low_rank_optimum(X, Y, alpha, shape):
    """Nuclear-norm least squares by centralized FISTA with singular-value thresholding."""
    n, p = X.shape
    q = Y.shape[1]
    A = np.column_stack([X, np.ones(n)])
    L = np.linalg.eigvalsh(A.T @ A / n)[-1]

    def split(T):
        return T[:p].T, T[p]  # W (q, p), b (q,)

    def prox(T, step):
        W, b = split(T)
        U, sv, Vt = np.linalg.svd(W.reshape(shape), full_matrices=False)
        W = ((U * np.maximum(sv - step * alpha, 0)) @ Vt).reshape(q, p)
        return np.vstack([W.T, b[None]])

    x = yk = np.zeros((p + 1, q))
    tk = 1.0
    for _ in range(30000):
        g = A.T @ (A @ yk - Y) / n
        x_new = prox(yk - g / L, 1 / L)
        t_new = 0.5 * (1 + np.sqrt(1 + 4 * tk * tk))
        yk = x_new + (tk - 1) / t_new * (x_new - x)
        x, tk = x_new, t_new
    W, b = split(x)
    return ls_objective(X, Y, W, b) + alpha * np.linalg.svd(W.reshape(shape), compute_uv=False).sum()


# --- GLMs (log link) ---------------------------------------------------------------
def glm_objective(X, y, coef, intercept, power, alpha, l1_ratio=0.0):
    """scikit-learn's Poisson / Gamma / Tweedie objective (half mean deviance), plus
    skfed's elastic-net extension."""
    from sklearn.metrics import mean_tweedie_deviance

    w = np.ravel(coef)
    mu = np.exp(X @ w + float(np.ravel(intercept)[0]))
    return (mean_tweedie_deviance(y, mu, power=power) / 2
            + alpha * (l1_ratio * np.abs(w).sum() + 0.5 * (1 - l1_ratio) * w @ w))


def glm_optimum(X, y, power, alpha, l1_ratio=0.0):
    """The pooled optimum: scikit-learn's Newton-Cholesky for the L2 penalty; with
    an L1 part, L-BFGS-B on the smooth split ``w = u - v`` (``u, v >= 0``)."""
    from sklearn.linear_model import TweedieRegressor

    if l1_ratio == 0:
        ref = TweedieRegressor(power=power, link="log", alpha=alpha, solver="newton-cholesky",
                               tol=1e-12, max_iter=1000).fit(X, y)
        return glm_objective(X, y, ref.coef_, ref.intercept_, power, alpha)
    n, d = X.shape

    def f(z):
        u, v, b = z[:d], z[d:2 * d], z[-1]
        w = u - v
        eta = X @ w + b
        # the half deviance up to terms in y only, and its derivative in eta
        if power == 1:
            dev, g = np.mean(np.exp(eta) - y * eta), (np.exp(eta) - y) / n
        elif power == 2:
            dev, g = np.mean(eta + y * np.exp(-eta)), (1 - y * np.exp(-eta)) / n
        else:
            p = power
            dev = np.mean(np.exp((2 - p) * eta) / (2 - p) - y * np.exp((1 - p) * eta) / (1 - p))
            g = (np.exp((2 - p) * eta) - y * np.exp((1 - p) * eta)) / n
        gw = X.T @ g + alpha * (1 - l1_ratio) * w
        val = dev + alpha * (l1_ratio * (u.sum() + v.sum()) + 0.5 * (1 - l1_ratio) * w @ w)
        return val, np.r_[gw + alpha * l1_ratio, -gw + alpha * l1_ratio, g.sum()]

    res = minimize(f, np.zeros(2 * d + 1), jac=True, method="L-BFGS-B",
                   bounds=[(0, None)] * (2 * d) + [(None, None)],
                   options={"ftol": 1e-16, "gtol": 1e-13, "maxiter": 100000, "maxcor": 50})
    w = res.x[:d] - res.x[d:2 * d]
    return glm_objective(X, y, w, res.x[-1], power, alpha, l1_ratio)
