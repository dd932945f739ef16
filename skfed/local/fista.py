"""FISTA with gradient restart for a client's composite local problem.

Minimizes ``S(theta) + psi(coef)`` where ``S`` is smooth with per-block
smoothness ``1 / step`` (a theta-sized vector of step sizes) and ``psi`` has a
prox. Used by the solvers whose clients solve a local subproblem to a
tolerance (DualFL, FedPD, FedADMM, FedDyn, A-FedPD).
"""

import numpy as np

from ..federation.operations import check_deadline


def fista(grad_fn, theta0, steps, prox_fn, *, strong_convexity=0.0, tol=1e-10,
          max_iter=1000, reference=None, rtol=0.0):
    """Accelerated proximal gradient with adaptive (gradient) restart.

    Parameters
    ----------
    grad_fn : callable
        ``grad_fn(theta)`` -> gradient of the smooth part.
    theta0 : ndarray
        Starting point (warm start).
    steps : ndarray
        Per-coordinate step sizes ``1 / L_block``.
    prox_fn : callable
        ``prox_fn(v, steps)`` -> proximal map of the non-smooth part scaled by
        ``steps``.
    strong_convexity : float, default=0.0
        Lower bound of ``mu_block * step_block`` over blocks (0 if unknown):
        gives the constant momentum of strongly convex FISTA; gradient
        restart is kept either way.
    tol : float, default=1e-10
        Stop when the norm of the gradient mapping falls below
        ``tol * reference`` (an absolute target) ...
    max_iter : int, default=1000
    reference : float or None
        Scale of ``tol``; default: the gradient-mapping norm at ``theta0``.
    rtol : float, default=0.0
        ... or below ``rtol`` times its value at ``theta0`` (a relative
        target, which tightens by itself as warm starts improve).

    Returns
    -------
    theta : ndarray
    n_iter : int
    reference : float
        The reference used (so a caller can keep it fixed across calls).
    """
    x = np.array(theta0, dtype=float)
    y = x.copy()
    t = 1.0
    q = float(np.clip(strong_convexity, 0.0, 1.0))
    constant_momentum = (1 - np.sqrt(q)) / (1 + np.sqrt(q)) if q > 0 else None
    n_iter = 0
    target = None
    for n_iter in range(1, max_iter + 1):
        check_deadline()  # at a site: a request past its time stops here
        g = grad_fn(y)
        x_new = prox_fn(y - steps * g, steps)
        mapping = np.linalg.norm((y - x_new) / steps)
        if target is None:
            if reference is None:
                reference = max(mapping, np.finfo(float).tiny)
            target = max(tol * reference, rtol * mapping)
        if mapping <= target:
            x = x_new
            break
        if constant_momentum is None:
            t_new = 0.5 * (1 + np.sqrt(1 + 4 * t * t))
            momentum = (t - 1) / t_new
        else:
            t_new, momentum = t, constant_momentum
        # gradient restart: drop momentum when it points uphill
        if np.dot(y - x_new, x_new - x) > 0:
            t_new, momentum = 1.0, 0.0
        y = x_new + momentum * (x_new - x)
        x, t = x_new, t_new
    return x, n_iter, reference
