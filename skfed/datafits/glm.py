"""Half deviances of generalized linear models with a log link: Poisson, Gamma, Tweedie.

With the client mean these are scikit-learn's ``PoissonRegressor``,
``GammaRegressor`` and ``TweedieRegressor`` datafits, ``1 / (2 sum(s)) sum_i
s_i d(y_i, mu_i)`` with ``mu_i = exp(z_i)`` and ``z_i`` the raw prediction
(the linear predictor, offset included). The value includes the terms that
depend on ``y`` only, so that the objective is scikit-learn's to the last digit.

The second derivative of these losses in ``z`` grows like ``exp(z)`` (or
``y exp(-z)``): there is no global curvature bound (``curvature = None``), so
only solvers that globalize their steps by a line search (``"newton"``) apply;
the others are refused before round one (``requires_curvature_bound``).
``scale_curvature = 1`` only scales the monitor's proximal-gradient mapping.
"""

import numpy as np
from scipy.special import xlogy

from .base import Datafit


class Tweedie(Datafit):
    """Half Tweedie deviance with power ``power`` and a log link.

    ``power=0``: normal, 1: Poisson, in (1, 2): compound Poisson-Gamma, 2:
    Gamma, 3: inverse Gaussian. Powers in (0, 1) have no distribution, and
    negative ones are not supported (refused by the estimators).

    For ``1 <= power <= 2`` the loss is convex in the raw prediction and
    :meth:`raw_hessian` is its second derivative (Newton's method). For
    ``power = 0`` or ``power > 2`` the log-link loss is not convex where
    ``y`` is small against ``mu``: :meth:`raw_hessian` then returns the
    expected (Fisher) information ``s mu^(2 - power)``, which is positive, and
    Newton's method becomes Fisher scoring (IRLS, as statsmodels and glm fit
    GLMs), still globalized by the line search on the true objective.
    """

    smooth = True
    curvature = None
    scale_curvature = 1.0
    target_kind = "continuous"

    def __init__(self, power=1.5):
        self.power = float(power)

    def __repr__(self):
        return f"{type(self).__name__}(power={self.power:g})"

    @property
    def convex(self):
        return 1.0 <= self.power <= 2.0

    def unit_half_deviance(self, Z, Y):
        """``d(y, mu) / 2`` per row and output, ``mu = exp(Z)``."""
        p = self.power
        mu = np.exp(Z)
        if p == 0:
            return 0.5 * (Y - mu) ** 2
        if p == 1:
            return xlogy(Y, Y) - Y * Z - Y + mu
        if p == 2:
            return Z - np.log(Y) + Y * np.exp(-Z) - 1.0
        with np.errstate(divide="ignore"):
            y_term = np.where(Y > 0, np.power(np.maximum(Y, 0.0), 2 - p), 0.0) / (
                (1 - p) * (2 - p))
        return (y_term - Y * np.exp((1 - p) * Z) / (1 - p) + np.exp((2 - p) * Z) / (2 - p))

    def loss_sum(self, Z, Y, sw):
        with np.errstate(over="ignore"):
            return float(np.sum(sw[:, None] * self.unit_half_deviance(Z, Y)))

    def loss_rows(self, Z, Y, sw):
        with np.errstate(over="ignore"):
            return sw * self.unit_half_deviance(Z, Y).sum(axis=1)

    def raw_gradient(self, Z, Y, sw):
        p = self.power
        with np.errstate(over="ignore"):
            g = np.exp((2 - p) * Z) - Y * np.exp((1 - p) * Z)
        return g * sw[:, None]

    def raw_hessian(self, Z, Y, sw):
        p = self.power
        with np.errstate(over="ignore"):
            if self.convex:
                h = (2 - p) * np.exp((2 - p) * Z) + (p - 1) * Y * np.exp((1 - p) * Z)
            else:  # the expected information (Fisher scoring): positive everywhere
                h = np.exp((2 - p) * Z)
        return h * sw[:, None]


class Poisson(Tweedie):
    """Half Poisson deviance ``y log(y / mu) - y + mu`` with ``mu = exp(z)``
    (scikit-learn's ``PoissonRegressor`` datafit); ``y >= 0``."""

    def __init__(self):
        super().__init__(power=1.0)

    def __repr__(self):
        return "Poisson()"


class Gamma(Tweedie):
    """Half Gamma deviance ``log(mu / y) + y / mu - 1`` with ``mu = exp(z)``
    (scikit-learn's ``GammaRegressor`` datafit); ``y > 0``."""

    def __init__(self):
        super().__init__(power=2.0)

    def __repr__(self):
        return "Gamma()"
