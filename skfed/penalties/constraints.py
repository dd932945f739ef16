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


class Constrained(Penalty):
    """A penalty restricted to a ball: ``psi(w) = penalty(w) + indicator_ball(w)``.

    The prox is the ball's projection after the penalty's prox. That
    composition is exact for an L1 penalty with either ball (soft
    thresholding and both projections keep the sign pattern; the L1-ball
    projection is itself a soft threshold) and for a ridge penalty (a
    scaling) with either ball; other combinations are refused. Solvers
    split off the smooth part first, so an elastic net only ever sees the
    composition with its L1 part.

    Parameters
    ----------
    penalty : L1, L2, ElasticNet or None
    constraint : L1Ball or L2Ball
    """

    indicator = True

    def __init__(self, penalty, constraint):
        from .norms import L1, L2, ElasticNet

        if not isinstance(constraint, (L1Ball, L2Ball)):
            raise TypeError(f"constraint must be an L1Ball or L2Ball; got {constraint!r}.")
        if penalty is not None and not isinstance(penalty, (L1, L2, ElasticNet)):
            raise TypeError(f"a ball constraint combines with an L1, L2 or elastic-net "
                            f"penalty; got {penalty!r}.")
        self.penalty = penalty
        self.constraint = constraint

    def value(self, W):
        inner = 0.0 if self.penalty is None else self.penalty.value(W)
        return inner + self.constraint.value(W)

    def prox(self, W, step):
        from .norms import ElasticNet

        if isinstance(self.penalty, ElasticNet) and 0 < self.penalty.l1_ratio < 1:
            raise TypeError("the prox of an elastic net inside a ball is not a composition; "
                            "split off its smooth part first (split_smooth).")
        inner = W if self.penalty is None else self.penalty.prox(W, step)
        return self.constraint.prox(inner)

    def split_smooth(self):
        if self.penalty is None:
            return self.constraint, None
        nonsmooth, smooth = self.penalty.split_smooth()
        return (Constrained(nonsmooth, self.constraint) if nonsmooth is not None
                else self.constraint), smooth
