"""Exact local solves for the hinge loss by dual coordinate ascent.

The local subproblem of the solving solvers (see :mod:`skfed.local.subproblem`)
with a hinge loss and no non-smooth penalty inside,

    minimize  s/S sum_i sw_i sum_k h(Y_ik xt_i . theta_k) + 1/2 theta' M theta - <l, theta>

(``xt_i = [x_i, 1]`` with an intercept, ``M`` diagonal and positive: the
proximal/augmented term plus the ridge part of the penalty), is a linear SVM
with a diagonal metric. Its dual is a box-constrained quadratic program in
``beta_ik in [0, c_i]`` (``c_i = s sw_i / S``) with
``theta_k = M_k^{-1} (l_k + sum_i beta_ik Y_ik xt_i)``; coordinate ascent on it
(Hsieh et al., 2008, with the metric ``M``) converges linearly and the duals
warm-start across rounds (the box does not depend on the round).
"""

import numpy as np
import scipy.sparse as sp

from ..federation.operations import check_deadline


def solve_hinge_dual(client, problem, j, D, linear, beta, *, tol, rtol, max_epochs, reference):
    """Minimize the hinge local problem; returns ``(theta, beta, reference)``.

    Stops when the largest projected-gradient violation of the dual falls
    below ``rtol`` times its value at the start of this call or ``tol`` times
    ``reference`` (its value at the client's first call).
    """
    lay = client.layout
    X = client.X.toarray() if sp.issparse(client.X) else np.asarray(client.X)
    n, d, K = X.shape[0], lay.n_features, lay.n_outputs
    Xt = np.column_stack([X, np.ones(n)]) if lay.fit_intercept else X
    scale = problem.n_clients * problem.weights[j]
    cap = scale * client.sample_weight / client.weight_sum
    D = np.asarray(D, dtype=float)
    if beta is None:
        beta = np.zeros((n, K))
    theta = np.empty(lay.size)
    violation_start = None
    for k in range(K):
        idx = np.r_[k * d:(k + 1) * d, lay.n_coef + k:lay.n_coef + k + (Xt.shape[1] - d)]
        m_inv = 1.0 / (D[idx] + np.r_[np.full(d, problem.smooth_curvature),
                                      np.zeros(Xt.shape[1] - d)])
        y = client.Y[:, k]
        Q = np.einsum("ij,ij,j->i", Xt, Xt, m_inv)
        w = m_inv * (linear[idx] + Xt.T @ (beta[:, k] * y))
        b = beta[:, k]
        for epoch in range(max_epochs):
            check_deadline()
            worst = 0.0
            for i in range(n):
                if Q[i] <= 0.0:
                    continue
                g = 1.0 - y[i] * (Xt[i] @ w)
                # projected gradient: no move possible at an active bound
                pg = max(g, 0.0) if b[i] <= 0.0 else (min(g, 0.0) if b[i] >= cap[i] else g)
                worst = max(worst, abs(pg))
                if pg != 0.0:
                    new = min(max(b[i] + g / Q[i], 0.0), cap[i])
                    w += (new - b[i]) * y[i] * m_inv * Xt[i]
                    b[i] = new
            if epoch == 0:
                violation_start = worst if violation_start is None else max(violation_start, worst)
                if reference is None:
                    reference = max(worst, np.finfo(float).tiny)
            if worst <= max(rtol * violation_start, tol * reference):
                break
        # recompute from the duals: no drift from the incremental updates
        theta[idx] = m_inv * (linear[idx] + Xt.T @ (b * y))
    return theta, beta, reference
