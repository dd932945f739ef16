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

Up to ``_GRAM_UP_TO`` features, one request instead: every client returns its
products along the ``n_features`` unit vectors (``H_j`` itself, which today's
requests along each unit vector would release too: the same operation, its
class ``sums``, each product audited by the dominance rule as it is formed), and
the server runs the same iteration on the pooled ``sum_j a_j H_j`` (the same
constants to round-off).
"""

import numpy as np
import scipy.sparse as sp

from ..datafits.base import joint_factor
from .operations import SUMS, Arg, Refused, check_deadline, site_operation

# Lanczos converges to the top eigenvalue from below; a small margin keeps the
# step safe, and the result is never allowed below a provable lower bound.
_MARGIN = 1e-3
_DENSE_BELOW = 16
#: the most features whose curvature products travel as one block: a site's ``H_j`` is
#: ``d**2`` floats (32 KiB at 64), a Lanczos run 20-40 products of ``2 d``; over a
#: hospital network 20-40 round trips cost more than those bytes
_GRAM_UP_TO = 64


def _feature_vectors(client, values, rules):
    d, vs = client.X.shape[1], values["v"]
    if vs.shape != (d,) and not (vs.ndim == 2 and vs.shape[1] == d and vs.shape[0] <= d):
        raise Refused("message", f"expected a float vector of {d} entries, or a block of "
                                 f"at most {d} of them")


@site_operation(
    "fit.curvature", releases=SUMS, target="fit", combine="sum",
    describes="the mean loss's curvature along each of at most n_features broadcast "
              "vectors (the weighted Gram times them: along the unit vectors, the Gram "
              "itself), each product under the dominance rule",
    arguments=(Arg("v", "array", most=1 << 24),), checks=(_feature_vectors,))
def client_curvature_matvec(client, v):
    """``H_j v`` for one vector ``v``, or one product per row of a block ``v`` (each
    formed and audited as a request of its own would form it)."""
    if v.ndim == 1:
        return client.curvature_matvec(v)
    out = np.empty(v.shape, dtype=float)
    for k, row in enumerate(v):
        check_deadline()
        out[k] = client.curvature_matvec(row)
    return out


@site_operation("fit.feature_mean", releases=SUMS, target="fit", combine="sum",
                describes="the weighted mean of the features, under the dominance rule")
def client_feature_mean(client):
    return client.feature_mean()


@site_operation(
    "fit.smoothness_sums", releases=SUMS, target="fit", maskable=True, combine="sum",
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
    phase counts their rounds and bytes): one request per site up to ``_GRAM_UP_TO``
    features, else one per product."""
    curv = problem.datafit.step_curvature
    if curv is None:
        return {"coef": np.inf, "intercept": np.inf, "joint": 1.0}
    d, weights = problem.layout.n_features, problem.weights
    lower = max(a * l["coef"] for a, l in zip(weights, problem.lipschitz))
    upper = float(sum(a * l["coef"] for a, l in zip(weights, problem.lipschitz)))
    if d == 0 or upper <= 0:
        L_coef = 0.0
    else:
        L_coef = _top_eigenvalue(_pooled_products(session, d, weights), d)
    L_coef = float(np.clip(L_coef, lower, upper))
    L_int = curv if problem.layout.fit_intercept else 0.0
    joint = 1.0
    if problem.layout.fit_intercept:
        mean = session.sum(client_feature_mean, coefficients=weights, phase="setup")
        joint = joint_factor(curv, mean, L_coef, L_int)
    return {"coef": L_coef, "intercept": L_int, "joint": joint}


def _pooled_products(session, d, weights):
    """``v -> sum_j a_j H_j v``: from the pooled block of every unit vector's products
    (one request per site) up to ``_GRAM_UP_TO`` features, else one request per ``v``."""
    if d <= _GRAM_UP_TO:
        H = session.sum(client_curvature_matvec, np.eye(d), coefficients=weights,
                        phase="setup").T  # column i: sum_j a_j H_j e_i
        return lambda v: H @ np.asarray(v, dtype=float).ravel()

    def federated_matvec(v):
        v = np.asarray(v, dtype=float).ravel()
        return session.sum(client_curvature_matvec, v, coefficients=weights, phase="setup")
    return federated_matvec


def _top_eigenvalue(matvec, d):
    """The top eigenvalue of the pooled curvature (from below, with a margin)."""
    if d < _DENSE_BELOW:
        H = np.column_stack([matvec(e) for e in np.eye(d)])
        return float(np.linalg.eigvalsh(0.5 * (H + H.T))[-1]) * (1 + 1e-9)  # round-off
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((d, d), matvec=matvec, dtype=float)
    v0 = np.random.default_rng(0).standard_normal(d)  # deterministic across fits
    return float(eigsh(op, k=1, which="LA", tol=1e-6, v0=v0,
                       return_eigenvectors=False)[0]) * (1 + _MARGIN)


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
