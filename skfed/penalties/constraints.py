"""Indicator penalties: L1-ball and L2-ball constraints (FCO paper, App. B.5)."""

import numpy as np

from .base import Penalty


class L1Ball(Penalty):
    """``psi(w) = 0`` if ``||w||_1 <= radius`` else ``inf``; prox = Euclidean projection."""

    indicator = True

    def __init__(self, radius=1.0):
        self.radius = float(radius)

    def value(self, W):
        return 0.0 if np.abs(W).sum() <= self.radius * (1 + 1e-9) + 1e-12 else np.inf

    def prox(self, W, step=None):
        return project_l1_ball(W, self.radius)


class L2Ball(Penalty):
    """``psi(w) = 0`` if ``||w||_2 <= radius`` else ``inf``; prox = radial projection."""

    indicator = True

    def __init__(self, radius=1.0):
        self.radius = float(radius)

    def value(self, W):
        return 0.0 if np.linalg.norm(W) <= self.radius * (1 + 1e-9) + 1e-12 else np.inf

    def prox(self, W, step=None):
        norm = np.linalg.norm(W)
        return W if norm <= self.radius else W * (self.radius / norm)


def project_l1_ball(W, radius):
    """Euclidean projection onto ``{||w||_1 <= radius}`` (sort-based, Duchi et al. 2008)."""
    W = np.asarray(W, dtype=float)
    v = np.abs(W).ravel()
    if v.sum() <= radius:
        return W.copy()
    if radius <= 0:
        return np.zeros_like(W)
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    k = np.arange(1, u.size + 1)
    rho = np.nonzero(u * k > css - radius)[0][-1]
    theta = (css[rho] - radius) / (rho + 1.0)
    return np.sign(W) * np.maximum(np.abs(W) - theta, 0.0)
