"""Nuclear (trace) norm: the convex surrogate of rank."""

import numpy as np

from .base import Penalty, soft_threshold


class NuclearNorm(Penalty):
    """``psi(W) = alpha * sum_i sigma_i(W)`` for a coefficient matrix ``W``.

    The prox is singular-value thresholding. ``W`` arrives in the layout's
    ``penalty_shape`` (``(n_targets, n_features)`` or ``(d1, d2)``).
    """

    def __init__(self, alpha):
        self.alpha = float(alpha)

    def value(self, W):
        return self.alpha * float(np.linalg.svd(np.atleast_2d(W), compute_uv=False).sum())

    def prox(self, W, step):
        W2 = np.atleast_2d(W)
        U, s, Vt = np.linalg.svd(W2, full_matrices=False)
        s = soft_threshold(s, step * self.alpha)
        return ((U * s) @ Vt).reshape(np.shape(W))

    def subgradient(self, W):
        W2 = np.atleast_2d(W)
        U, s, Vt = np.linalg.svd(W2, full_matrices=False)
        keep = s > 0
        return (self.alpha * U[:, keep] @ Vt[keep]).reshape(np.shape(W))
