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

import math
from operator import mul

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
    cap = (scale * client.sample_weight / client.weight_sum).tolist()
    D = np.asarray(D, dtype=float)
    if beta is None:
        beta = np.zeros((n, K))
    theta = np.empty(lay.size)
    stop = _Stop(rtol, tol, reference)
    for k in range(K):
        idx = np.r_[k * d:(k + 1) * d, lay.n_coef + k:lay.n_coef + k + (Xt.shape[1] - d)]
        m_inv = 1.0 / (D[idx] + np.r_[np.full(d, problem.smooth_curvature),
                                      np.zeros(Xt.shape[1] - d)])
        y = client.Y[:, k]
        w = m_inv * (linear[idx] + Xt.T @ (beta[:, k] * y))
        beta[:, k] = _ascend(Xt, m_inv, y, cap, beta[:, k], w, max_epochs, stop)
        # recompute from the duals: no drift from the incremental updates
        theta[idx] = m_inv * (linear[idx] + Xt.T @ (beta[:, k] * y))
    return theta, beta, stop.reference


class _Stop:
    """The stopping rule across a call's outputs: the first epoch's largest violation
    (over outputs) sets this call's start and, at a client's first call, its reference."""

    def __init__(self, rtol, tol, reference):
        self.rtol, self.tol, self.reference, self.start = rtol, tol, reference, None

    def __call__(self, epoch, worst):
        if epoch == 0:
            self.start = worst if self.start is None else max(self.start, worst)
            if self.reference is None:
                self.reference = max(worst, np.finfo(float).tiny)
        return self.met(worst)

    def met(self, worst):
        """Whether a sweep's largest violation ``worst`` meets the rule."""
        return worst <= max(self.rtol * self.start, self.tol * self.reference)


#: the share of the last whole sweep's violation at which the kept duals are all swept
#: again
_RECHECK = 0.1


#: the widest rows (features and intercept) whose products run on Python floats: a numpy
#: call costs about a microsecond, more than a few Python multiplications (DualFL hinge
#: fits, benchmarks/bench_hinge_dual.py: 1.9-2.7x faster at 3-6 columns, 1.0-1.9x at
#: 11-21, 0.94-1.20x at 31 in five runs, 0.73-0.83x at 46)
_PYTHON_WIDTH = 24


def _row_operations(Xt, steps, w):
    """``(margin, move)``: ``margin(i) = xt_i . w`` and ``move(i, c)``, ``w += c steps_i``,
    on a Python list copy of ``w`` for narrow rows (:data:`_PYTHON_WIDTH`), on ``w``
    itself otherwise (the caller recomputes ``w`` from the duals either way)."""
    if Xt.shape[1] <= _PYTHON_WIDTH:
        rows, step_rows, w = Xt.tolist(), steps.tolist(), w.tolist()
        columns = range(len(w))

        def margin(i):
            return sum(map(mul, rows[i], w))

        def move(i, c):
            step = step_rows[i]
            for k in columns:
                w[k] += c * step[k]
    else:
        def margin(i):
            return float(Xt[i] @ w)

        def move(i, c):
            np.add(w, c * steps[i], out=w)
    return margin, move


def _ascend(Xt, m_inv, y, cap, b, w, max_epochs, stop):
    """Coordinate ascent on one output's duals ``b`` from ``w = M^-1 (l + Xt' (b y))``,
    with liblinear's shrinking (Hsieh et al., 2008, Algorithm 3).

    A dual at a bound whose gradient points out of the box by more than the last
    epoch's largest violation in that direction leaves the sweeps (most duals sit at a
    bound: 0 beyond the margin, the cap inside it); once the kept ones meet the stopping
    rule, or improve tenfold on the last whole sweep, every dual is swept again, and the
    rule is read on whole sweeps only, so the stop is the unshrunk rule's. The scalars
    are Python floats and each row's step ``M^-1 xt_i`` is made once: a numpy scalar
    costs about a microsecond an operation, most of an epoch on narrow rows (whose
    products run on Python floats too, :func:`_row_operations`)."""
    steps = Xt * m_inv
    Q = np.einsum("ij,ij->i", Xt, steps).tolist()
    y, b = y.tolist(), b.tolist()
    margin, move = _row_operations(Xt, steps, w)
    active = [i for i, q in enumerate(Q) if q > 0.0]
    every = len(active)
    low, high = -math.inf, math.inf  # the shrinking thresholds (none at first)
    for epoch in range(max_epochs):
        check_deadline()
        worst, kept, least, most = 0.0, [], math.inf, -math.inf
        for i in active:
            g = 1.0 - y[i] * margin(i)
            if b[i] <= 0.0:
                if g < low:  # held at 0 by more than any move of the last epoch
                    continue
                pg = max(g, 0.0)
            elif b[i] >= cap[i]:
                if g > high:  # held at the cap likewise
                    continue
                pg = min(g, 0.0)
            else:
                pg = g
            kept.append(i)
            least, most = min(least, pg), max(most, pg)
            worst = max(worst, abs(pg))
            if pg != 0.0:
                new = min(max(b[i] + g / Q[i], 0.0), cap[i])
                move(i, (new - b[i]) * y[i])
                b[i] = new
        whole = len(kept) == every  # no dual was left out of this sweep
        if whole:
            if stop(epoch, worst):
                break
            recheck = _RECHECK * worst
        elif stop.met(worst) or worst <= recheck:
            # the kept duals meet the rule, or improved tenfold since all were swept
            # (a dual shrunk at the wrong bound is found there, not after a slow
            # convergence without it): sweep them all again
            active = [i for i, q in enumerate(Q) if q > 0.0]
            low, high = -math.inf, math.inf
            continue
        active = kept
        low = least if least < 0.0 else -math.inf
        high = most if most > 0.0 else math.inf
    return b
