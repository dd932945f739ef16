"""Smoothness of the pooled loss, estimated federatedly before round one.

Each client's own constant ``L_j`` is cheap to compute locally, but their
weighted average can overestimate the pooled constant badly: on the FCO
paper's sets every client's data share a mean with ``||mu_j||^2 ~ d``, so
``L_j ~ 1000`` while the pooled Hessian's top eigenvalue is ~26 (client means
point in different directions). A step of ``1 / mean(L_j)`` would then be 40x
too small. The server therefore runs a Lanczos iteration whose matrix-vector
products are federated: each is one round in which every client returns
``H_j v`` for the broadcast ``v`` (an ``n_features`` vector; no data leaves a
client). About 20-40 such rounds, counted in ``history_.setup_bytes``.
"""

import numpy as np

from ..datafits.base import joint_factor

# Lanczos converges to the top eigenvalue from below; a small margin keeps the
# step safe, and the result is never allowed below a provable lower bound.
_MARGIN = 1e-3
_DENSE_BELOW = 16


def client_curvature_matvec(client, v):
    return client.curvature_matvec(v)


def client_feature_mean(client):
    return client.feature_mean()


def pooled_smoothness(executor, problem):
    """Block smoothness constants of ``sum_j a_j L_j``.

    Returns
    -------
    constants : dict
        ``coef``, ``intercept`` and ``joint`` as in
        :meth:`~skfed.datafits.ClientObjective.lipschitz`, for the pooled loss.
    n_bytes : int
        Traffic spent (both directions, all clients).
    n_rounds : int
        Communication rounds spent.
    """
    curv = problem.datafit.step_curvature
    if curv is None:
        return {"coef": np.inf, "intercept": np.inf, "joint": 1.0}, 0, 0
    N, d, weights = problem.n_clients, problem.layout.n_features, problem.weights
    spent = {"bytes": 0, "rounds": 0}

    def federated_matvec(v):
        v = np.asarray(v, dtype=float).ravel()
        parts = executor.map(client_curvature_matvec, [(j, (v,)) for j in range(N)])
        spent["bytes"] += 2 * N * v.nbytes
        spent["rounds"] += 1
        return sum(a * p for a, p in zip(weights, parts))

    lower = max(a * l["coef"] for a, l in zip(weights, problem.lipschitz))
    upper = float(sum(a * l["coef"] for a, l in zip(weights, problem.lipschitz)))
    if d == 0 or upper <= 0:
        L_coef = 0.0
    elif d < _DENSE_BELOW:
        H = np.column_stack([federated_matvec(e) for e in np.eye(d)])
        L_coef = float(np.linalg.eigvalsh(0.5 * (H + H.T))[-1]) * (1 + 1e-9)  # round-off
    else:
        from scipy.sparse.linalg import LinearOperator, eigsh

        op = LinearOperator((d, d), matvec=federated_matvec, dtype=float)
        v0 = np.random.default_rng(0).standard_normal(d)  # deterministic across fits
        L_coef = float(eigsh(op, k=1, which="LA", tol=1e-6, v0=v0,
                             return_eigenvectors=False)[0]) * (1 + _MARGIN)
    L_coef = float(np.clip(L_coef, lower, upper))
    L_int = curv if problem.layout.fit_intercept else 0.0
    joint = 1.0
    if problem.layout.fit_intercept:
        means = executor.map(client_feature_mean, [(j, ()) for j in range(N)])
        spent["bytes"] += N * 8 * d
        spent["rounds"] += 1
        joint = joint_factor(curv, sum(a * m for a, m in zip(weights, means)), L_coef, L_int)
    return {"coef": L_coef, "intercept": L_int, "joint": joint}, spent["bytes"], spent["rounds"]
