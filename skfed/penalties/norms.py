"""L1, squared L2 and elastic-net penalties (scikit-learn's parametrization)."""

import numpy as np

from .base import Penalty, soft_threshold


class L1(Penalty):
    """``psi(w) = alpha * ||w||_1``."""

    separable_outputs = True

    def __init__(self, alpha):
        self.alpha = float(alpha)

    def value(self, W):
        return self.alpha * float(np.abs(W).sum())

    def prox(self, W, step):
        return soft_threshold(W, step * self.alpha)

    def subgradient(self, W):
        return self.alpha * np.sign(W)


class L2(Penalty):
    """``psi(w) = (alpha / 2) * ||w||_2^2`` (ridge)."""

    separable_outputs = True

    smooth = True

    def __init__(self, alpha):
        self.alpha = float(alpha)

    @property
    def curvature(self):
        return self.alpha

    def value(self, W):
        return 0.5 * self.alpha * float(np.sum(W * W))

    def prox(self, W, step):
        return W / (1.0 + step * self.alpha)

    def subgradient(self, W):
        return self.alpha * W


class ElasticNet(Penalty):
    """``psi(w) = alpha * l1_ratio * ||w||_1 + alpha * (1 - l1_ratio) / 2 * ||w||_2^2``.

    The parametrization of :class:`sklearn.linear_model.ElasticNet`.
    """

    separable_outputs = True

    def __init__(self, alpha, l1_ratio=0.5):
        self.alpha = float(alpha)
        self.l1_ratio = float(l1_ratio)

    @property
    def smooth(self):
        return self.l1_ratio == 0.0 or self.alpha == 0.0

    def split_smooth(self):
        a1, a2 = self.alpha * self.l1_ratio, self.alpha * (1.0 - self.l1_ratio)
        return (L1(a1) if a1 > 0 else None), (L2(a2) if a2 > 0 else None)

    def value(self, W):
        a1, a2 = self.alpha * self.l1_ratio, self.alpha * (1.0 - self.l1_ratio)
        return a1 * float(np.abs(W).sum()) + 0.5 * a2 * float(np.sum(W * W))

    def prox(self, W, step):
        a1, a2 = self.alpha * self.l1_ratio, self.alpha * (1.0 - self.l1_ratio)
        return soft_threshold(W, step * a1) / (1.0 + step * a2)

    def subgradient(self, W):
        a1, a2 = self.alpha * self.l1_ratio, self.alpha * (1.0 - self.l1_ratio)
        return a1 * np.sign(W) + a2 * W
