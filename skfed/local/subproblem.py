"""The local subproblem of the solvers whose clients solve rather than step.

    minimize  s * L_j(theta) + psi_s(theta) + 1/2 theta' diag(D) theta - <linear, theta>
              [+ psi_ns(coef) when composite]

with ``s = N a_j`` (so that ``P = mean_j f_j``), ``psi_s`` the smooth part of
the penalty and ``D`` a positive theta-sized vector: DualFL's proximal term
and dual shift, or the augmented-Lagrangian term of FedPD / FedADMM / FedDyn /
A-FedPD, all have this form.
"""

import numpy as np

from .._messages import show
from .fista import fista

LOCAL_SOLVERS = ("auto", "direct", "fista")


def direct_applies(problem, composite):
    """A linear system solves it exactly: quadratic loss, nothing non-smooth inside."""
    return bool(problem.datafit.quadratic and (problem.prox_penalty is None or not composite))


def resolve_local_solver(local_solver, problem, composite):
    """``True`` for the direct solve, ``False`` for FISTA (with a clear error)."""
    if local_solver not in LOCAL_SOLVERS:
        raise ValueError(f"local_solver must be one of {LOCAL_SOLVERS}; got {show(local_solver)}.")
    ok = direct_applies(problem, composite)
    if local_solver == "direct" and not ok:
        raise ValueError("local_solver='direct' needs a least-squares loss and no "
                         "non-smooth penalty inside the local problem; use 'fista'.")
    return ok and (local_solver == "direct" or (
        local_solver == "auto" and problem.layout.n_features < 2000))


def local_steps(problem, D):
    """Per-client FISTA step vectors ``1 / (N a_j L_j + ridge + D)`` per block."""
    lay, N = problem.layout, problem.n_clients
    out = []
    for a, l in zip(problem.weights, problem.lipschitz):
        smooth = lay.block_vector(N * a * l["coef"] * l["joint"] + problem.smooth_curvature,
                                  N * a * l["intercept"] * l["joint"]) + D
        out.append(1.0 / np.maximum(smooth, np.finfo(float).tiny))
    return out


def solve_direct(client, problem, j, D, linear):
    """Exact minimizer (quadratic loss), one linear system per output."""
    lay = client.layout
    G, B = client.normal_equations()
    scale = problem.n_clients * problem.weights[j]
    d, p1 = lay.n_features, G.shape[0]
    out = np.empty(lay.size)
    for o in range(lay.n_outputs):
        idx = np.r_[o * d:(o + 1) * d, lay.n_coef + o:lay.n_coef + o + (p1 - d)]
        diag = np.asarray(D, dtype=float)[idx].copy()
        diag[:d] += problem.smooth_curvature
        out[idx] = np.linalg.solve(scale * G + np.diag(diag), scale * B[:, o] + linear[idx])
    return out


def solve_fista(client, problem, j, D, linear, start, steps, *, composite, strong_convexity,
                tol, rtol, max_iter, reference):
    """FISTA with restart from ``start``; returns ``(theta, reference)``."""
    lay = client.layout
    scale = problem.n_clients * problem.weights[j]

    def grad(theta):
        g = scale * client.gradient(theta)
        problem.add_smooth_gradient(g, theta)
        return g + D * theta - linear

    if composite and problem.prox_penalty is not None:
        def prox(v, s):
            return lay.apply_prox(problem.prox_penalty, v, float(s[0]) if lay.n_coef else 0.0)
    else:
        def prox(v, s):
            return v

    theta, _, reference = fista(grad, start, steps, prox, strong_convexity=strong_convexity,
                                tol=tol, max_iter=max_iter, reference=reference, rtol=rtol)
    return theta, reference
