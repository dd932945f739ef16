"""Hinge losses of linear SVMs, one binary problem per output (one-vs-rest); ``Y`` in {-1, +1}."""

import numpy as np

from .base import Datafit


class SquaredHinge(Datafit):
    """``max(0, 1 - y z)^2``: scikit-learn's ``LinearSVC`` default loss (smooth)."""

    smooth = True
    #: second derivative 2 where the margin is violated, 0 elsewhere
    curvature = 2.0
    target_kind = "binary"

    def loss_sum(self, Z, Y, sw):
        slack = np.maximum(0.0, 1.0 - Y * Z)
        return float(np.sum(sw[:, None] * slack * slack))

    def loss_rows(self, Z, Y, sw):
        slack = np.maximum(0.0, 1.0 - Y * Z)
        return sw * (slack * slack).sum(axis=1)

    def raw_gradient(self, Z, Y, sw):
        return -2.0 * Y * np.maximum(0.0, 1.0 - Y * Z) * sw[:, None]

    def raw_hessian(self, Z, Y, sw):
        # the generalized Hessian: 2 where the margin is violated (0 at the kink)
        return 2.0 * (Y * Z < 1.0) * sw[:, None]


class Hinge(Datafit):
    """``max(0, 1 - y z)``: the (non-smooth) SVM hinge loss.

    ``raw_gradient`` returns a subgradient (``-y`` where the margin is
    violated, 0 elsewhere, including the kink). The loss has no smoothness
    constant; ``scale_curvature`` sets the scale subgradient solvers use for
    their automatic steps (that of the Gram matrix, as if the curvature were 1).
    """

    smooth = False
    curvature = None
    scale_curvature = 1.0
    target_kind = "binary"
    #: local problems ``s L_j + quadratic`` can be solved exactly in the dual
    #: (coordinate ascent on the box-constrained dual, see skfed.local.sdca)
    dual_coordinate = True

    def loss_sum(self, Z, Y, sw):
        return float(np.sum(sw[:, None] * np.maximum(0.0, 1.0 - Y * Z)))

    def loss_rows(self, Z, Y, sw):
        return sw * np.maximum(0.0, 1.0 - Y * Z).sum(axis=1)

    def raw_gradient(self, Z, Y, sw):
        return -Y * (Y * Z < 1.0) * sw[:, None]
