"""The regularizer psi: value, proximal map, and what solvers may ask of it.

Penalties act on the coefficient block only, seen in ``Layout.penalty_shape``.
With the Euclidean distance-generating function, the dual-averaging
("primal retrieval") map of FedDualAvg is ``prox`` at the accumulated step, so
``prox`` is all a composite solver needs.
"""

from abc import ABC, abstractmethod

import numpy as np

from .._messages import show
from ..federation.wire import register_subclasses


class Penalty(ABC):
    """Base class of a closed convex penalty ``psi``.

    Class attributes
    ----------------
    smooth : bool
        ``psi`` is differentiable everywhere (then :meth:`gradient` exists).
    indicator : bool
        ``psi`` is the indicator of a convex set (a constraint).
    """

    smooth = False
    indicator = False
    #: a sum of one term per output row of ``W`` (then, with a loss of the same
    #: kind, every output is a problem of its own)
    separable_outputs = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_subclasses(Penalty, "penalty")(cls)  # a penalty a site message may carry

    @abstractmethod
    def value(self, W):
        """``psi(W)`` (``inf`` outside a constraint set)."""

    @abstractmethod
    def prox(self, W, step):
        """``argmin_U step * psi(U) + ||U - W||^2 / 2``."""

    def subgradient(self, W):
        """One element of the subdifferential of ``psi`` at ``W``.

        Used by the subgradient baseline (FedAvg). Indicators have none that
        is useful, so they raise.
        """
        raise TypeError(f"{self!r} has no usable subgradient (it is a constraint).")

    def split_smooth(self):
        """``(nonsmooth, smooth)`` parts with ``psi = nonsmooth + smooth`` (either may be None).

        Solvers put the smooth part in the loss (its gradient joins the
        client gradient) and keep only the non-smooth part in the prox: dual
        averaging with a strongly convex ``psi`` would otherwise shrink its
        effective step like ``1 / r`` and converge sublinearly.
        """
        return (None, self) if self.smooth else (self, None)

    #: curvature the smooth part adds to the loss (``alpha`` of a ridge term)
    curvature = 0.0

    def gradient(self, W):
        if not self.smooth:
            raise TypeError(f"{self!r} is not differentiable.")
        return self.subgradient(W)

    def __repr__(self):
        args = ", ".join(f"{k}={show(v)}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    __hash__ = None


def soft_threshold(z, tau):
    """``sign(z) * max(|z| - tau, 0)``, elementwise (zeros are +0.0, not -0.0).

    Made as ``z - clip(z, -tau, tau)``: the same bits in two passes instead of five
    (``z - tau`` and ``-((-z) - tau)`` round alike), once per local step of the
    proximal solvers."""
    out = z - np.clip(z, -tau, tau)
    out += 0.0  # where z is -0.0 the difference may be -0.0
    return out
