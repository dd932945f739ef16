"""How the flat parameter vector theta = [coef.ravel(), intercept] is laid out.

Solvers only see flat float64 vectors; datafits and penalties see the blocks.
The intercept block is never penalized or projected.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .wire import wire_class


@wire_class(role="layout")
@dataclass(frozen=True)
class Layout:
    """Shapes of the coefficient and intercept blocks of ``theta``.

    Parameters
    ----------
    n_outputs : int
        Number of linear outputs (1 for a single regression target or a
        binary classifier, ``n_classes`` for multinomial, ``q`` for a
        multi-output regression).
    n_features : int
        Number of input features (after flattening matrix covariates).
    fit_intercept : bool
        Whether ``theta`` ends with one intercept per output.
    coef_shape : tuple of int or None
        Shape the penalty sees the coefficients in (for example ``(d1, d2)``
        for matrix covariates under a nuclear norm). Defaults to
        ``(n_outputs, n_features)``.
    """

    n_outputs: int
    n_features: int
    fit_intercept: bool = True
    coef_shape: tuple | None = None

    @cached_property  # read on every local step
    def n_coef(self):
        return self.n_outputs * self.n_features

    @cached_property  # read on every local step
    def n_intercept(self):
        return self.n_outputs if self.fit_intercept else 0

    @cached_property  # read on every local step
    def size(self):
        return self.n_coef + self.n_intercept

    @property
    def penalty_shape(self):
        return self.coef_shape or (self.n_outputs, self.n_features)

    def coef(self, theta):
        """Coefficients as a ``(n_outputs, n_features)`` view of ``theta``."""
        return theta[: self.n_coef].reshape(self.n_outputs, self.n_features)

    def intercept(self, theta):
        """Intercepts, shape ``(n_outputs,)`` (zeros when not fitted)."""
        if not self.fit_intercept:
            return np.zeros(self.n_outputs)
        return theta[self.n_coef :]

    def pack(self, coef, intercept=None):
        """Build ``theta`` from a coefficient array and intercepts."""
        theta = np.zeros(self.size)
        theta[: self.n_coef] = np.asarray(coef, dtype=float).ravel()
        if self.fit_intercept and intercept is not None:
            theta[self.n_coef :] = np.asarray(intercept, dtype=float).ravel()
        return theta

    def zeros(self):
        return np.zeros(self.size)

    def block_vector(self, coef_value, intercept_value):
        """A vector equal to ``coef_value`` on coefficients, ``intercept_value`` on intercepts."""
        out = np.empty(self.size)
        out[: self.n_coef] = coef_value
        out[self.n_coef :] = intercept_value
        return out

    def apply_prox(self, penalty, theta, step):
        """``prox_{step * psi}`` on the coefficient block; intercepts pass through."""
        out = theta.copy()
        if penalty is None:
            return out
        if not np.all(np.isfinite(theta)):
            # an SVD or a projection would fail obscurely (or return NaN) on these
            raise FloatingPointError(
                "the iterates diverged (a non-finite model reached the proximal step); "
                "lower the step size (client_lr, lr or server_lr).")
        block = theta[: self.n_coef].reshape(self.penalty_shape)
        out[: self.n_coef] = np.asarray(penalty.prox(block, step)).ravel()
        return out

    def penalty_value(self, penalty, theta):
        if penalty is None:
            return 0.0
        return float(penalty.value(theta[: self.n_coef].reshape(self.penalty_shape)))
