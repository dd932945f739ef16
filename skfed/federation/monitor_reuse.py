"""The fused monitor's gradient, reused by the step that starts at its model.

A round may carry the monitor of the model it starts from (the round loop's
``requests_fused``: one call per client and round instead of two): the monitor
computes the client's mean loss and gradient at ``theta``, and a local-update
solver's first gradient (FedAvg's, FedMID's and FedDualAvg's one step) is the
gradient at the same ``theta``. :class:`Reusing` stands for the client objective
while that round's step runs and answers a gradient at exactly that model (the
same dtype, shape and bytes, all rows) from what the monitor computed
(:class:`Kept`); anything else goes to the objective itself. The numbers are the
same bits: :meth:`~skfed.datafits.base.ClientObjective.gradient` is the gradient of
:meth:`~skfed.datafits.base.ClientObjective.value_and_gradient` from the same pass,
so only that class's objectives are reused (:func:`reusable`).

In process and on Dask nothing audits the sums; a site service adds its dominance
audit on top (:mod:`skfed.sites.monitor_reuse`). A kept gradient lives for one
round's call only.
"""

import numpy as np

from ..datafits.base import ClientObjective


def reusable(objective):
    """Whether ``objective``'s gradient is its value-and-gradient's, bit for bit."""
    return type(objective) is ClientObjective


class Kept:
    """A monitor's value and gradient at one model."""

    def __init__(self, objective, theta, value, grad):
        self.objective = objective
        self.key = (theta.dtype.str, theta.shape, theta.tobytes())
        self.value, self.grad = value, np.array(grad, copy=True)

    def matches(self, objective, theta, rows):
        """Whether a call on ``objective`` at ``theta`` on ``rows`` is the kept one."""
        return (rows is None and objective is self.objective
                and isinstance(theta, np.ndarray)
                and (theta.dtype.str, theta.shape, theta.tobytes()) == self.key)


class Standing:
    """Stands for a client objective: every attribute is the objective's own."""

    def __init__(self, objective):
        self._objective = objective

    def __getattr__(self, name):
        return getattr(self._objective, name)


class Reusing(Standing):
    """The client objective while the step of the monitored round runs: the gradient at
    the kept model is the kept one (a copy: solvers add to it in place)."""

    def __init__(self, objective, kept):
        super().__init__(objective)
        self._kept = kept

    def _reused(self, theta, rows):
        return self._kept.matches(self._objective, theta, rows)

    def gradient(self, theta, rows=None):
        if self._reused(theta, rows):
            return self._kept.grad.copy()
        return self._objective.gradient(theta, rows)

    def value_and_gradient(self, theta, rows=None):
        if self._reused(theta, rows):
            return self._kept.value, self._kept.grad.copy()
        return self._objective.value_and_gradient(theta, rows)


def reusing(objective, theta, monitored):
    """``objective``, or its :class:`Reusing` stand-in when the monitor's reply
    ``monitored`` (``(value, gradient)`` at ``theta``, ``None`` if it raised) can be
    reused by the step."""
    if monitored is None or not reusable(objective) or not isinstance(theta, np.ndarray):
        return objective
    return Reusing(objective, Kept(objective, theta, *monitored))
