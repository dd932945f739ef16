"""Least-squares datafit (single and multi-output)."""

import numpy as np

from .base import Datafit


class Quadratic(Datafit):
    """Half squared error: ``loss(z, y) = ||z - y||^2 / 2``.

    With the client mean this gives scikit-learn's ``Lasso`` / ``ElasticNet``
    datafit ``(1 / (2 n)) ||y - X w - b||^2``; with several outputs it is the
    multi-output (Frobenius) version.
    """

    smooth = True
    curvature = 1.0
    target_kind = "continuous"
    #: the mean loss is a quadratic form: local problems without a non-smooth
    #: penalty are linear systems (see ClientObjective.normal_equations)
    quadratic = True

    def loss_sum(self, Z, Y, sw):
        return self.loss_and_raw_gradient(Z, Y, sw)[0]

    def loss_rows(self, Z, Y, sw):
        R = Z - Y
        return 0.5 * sw * np.einsum("ij,ij->i", R, R)

    def raw_gradient(self, Z, Y, sw):
        return (Z - Y) * sw[:, None]

    def loss_and_raw_gradient(self, Z, Y, sw, with_value=True):
        R = Z - Y
        dZ = R * sw[:, None]
        return (0.5 * float(np.vdot(dZ, R)) if with_value else None), dZ

    def raw_hessian(self, Z, Y, sw):
        return np.broadcast_to(sw[:, None], Z.shape).astype(float)
