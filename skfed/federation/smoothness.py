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
import scipy.sparse as sp

from ..datafits.base import joint_factor
from .operations import SUMS, Arg, Refused, site_operation

# Lanczos converges to the top eigenvalue from below; a small margin keeps the
# step safe, and the result is never allowed below a provable lower bound.
_MARGIN = 1e-3
_DENSE_BELOW = 16


def _feature_vector(client, values, rules):
    if values["v"].shape != (client.X.shape[1],):
        raise Refused("message", f"expected a float vector of {client.X.shape[1]} entries")


@site_operation(
    "fit.curvature", releases=SUMS, target="fit",
    describes="the mean loss's curvature along one broadcast vector (the weighted Gram "
              "times it), under the dominance rule",
    arguments=(Arg("v", "floats", most=1 << 24),), checks=(_feature_vector,))
def client_curvature_matvec(client, v):
    return client.curvature_matvec(v)


@site_operation("fit.feature_mean", releases=SUMS, target="fit",
                describes="the weighted mean of the features, under the dominance rule")
def client_feature_mean(client):
    return client.feature_mean()


@site_operation(
    "fit.smoothness_sums", releases=SUMS, target="fit", maskable=True,
    describes="the sums of w ||x||^2 and of w x over the rows (the trace bound of a "
              "protected fit's pooled constants; summed masked)")
def client_smoothness_sums(client):
    """A site's part of the pooled loss's trace-bound constants, as sums over its rows:
    ``sum_i w_i ||x_i||^2`` and ``sum_i w_i x_i`` (summed masked over the sites, then
    divided by the public total weight: :func:`masked_smoothness`)."""
    X, sw = client.X, client.sample_weight
    squares = X.multiply(X).sum(axis=1) if sp.issparse(X) else np.einsum("ij,ij->i", X, X)
    return {"squares": np.atleast_1d(float(sw @ np.asarray(squares).ravel())),
            "features": np.asarray(X.T @ sw, dtype=float).ravel()}


def pooled_smoothness(session, problem):
    """Block smoothness constants of ``sum_j a_j L_j``: ``coef``, ``intercept`` and
    ``joint`` as in :meth:`~skfed.datafits.ClientObjective.lipschitz`, for the pooled
    loss, by federated matrix-vector products through ``session`` (its ``setup``
    phase counts their rounds and bytes)."""
    curv = problem.datafit.step_curvature
    if curv is None:
        return {"coef": np.inf, "intercept": np.inf, "joint": 1.0}
    d, weights = problem.layout.n_features, problem.weights

    def federated_matvec(v):
        v = np.asarray(v, dtype=float).ravel()
        return session.sum(client_curvature_matvec, v, coefficients=weights, phase="setup")

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
        mean = session.sum(client_feature_mean, coefficients=weights, phase="setup")
        joint = joint_factor(curv, mean, L_coef, L_int)
    return {"coef": L_coef, "intercept": L_int, "joint": joint}


def masked_smoothness(session, problem):
    """The pooled loss's trace-bound smoothness constants (those of
    :meth:`ClientObjective.lipschitz` with ``exact=False``, pooled over the rows) from
    one sum of the sites' :func:`client_smoothness_sums` (masked under secure
    aggregation: no site's own constant is sent)."""
    curvature = problem.datafit.step_curvature
    if curvature is None:  # a non-smooth loss: no constants (as each site would say)
        return {"coef": np.inf, "intercept": np.inf, "joint": 1.0}
    sums = session.sum(client_smoothness_sums, phase="setup",
                       scale=1.0 / problem.weight_total)
    W = problem.weight_total
    L_coef = curvature * float(np.ravel(sums["squares"])[0]) / W
    L_int = curvature if problem.layout.fit_intercept else 0.0
    joint = (joint_factor(curvature, np.asarray(sums["features"]) / W, L_coef, L_int)
             if problem.layout.fit_intercept else 1.0)
    return {"coef": L_coef, "intercept": L_int, "joint": joint}
