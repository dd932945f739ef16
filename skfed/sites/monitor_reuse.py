"""The fused monitor's gradient, reused by the step that starts at its model.

A plain round's ``fit.step`` request carries the ``fit.monitor`` request of the model
it starts from: the monitor computes the site's mean loss and gradient at ``theta``
under the dominance audit, and a local-update solver's first gradient is the gradient
at the same ``theta``. :class:`MonitorTap` stands for the session's objective while the
monitor runs and keeps what it computed, with the number of audit checks that saw it;
:class:`Reusing` stands for it while that request's step runs and answers a gradient
at exactly that model (the same dtype, shape and bytes, all rows) from what was kept,
crediting the step's audit with the monitor's checks. Anything else goes to the
objective itself. The numbers are the same bits:
:meth:`~skfed.datafits.base.ClientObjective.gradient` is the gradient of
:meth:`~skfed.datafits.base.ClientObjective.value_and_gradient` from the same pass,
so only that class's objectives are tapped (an engine's sums are its partitions').
Both live for one request only: nothing is kept between requests.
"""

import numpy as np

from ..datafits.base import ClientObjective
from ..federation import dominance


class Kept:
    """A monitor's value and gradient at one model, and the audit that saw them."""

    def __init__(self, objective, theta, value, grad, audit, checks):
        self.objective = objective
        self.key = (theta.dtype.str, theta.shape, theta.tobytes())
        self.value, self.grad = value, np.array(grad, copy=True)
        self.rule = (type(audit), audit.min_rows, audit.share)
        self.checks = checks

    def matches(self, objective, theta, rows):
        """Whether a call on ``objective`` at ``theta`` on ``rows`` is the kept one."""
        return (rows is None and objective is self.objective
                and isinstance(theta, np.ndarray)
                and (theta.dtype.str, theta.shape, theta.tobytes()) == self.key)


class _Standing:
    """Stands for a client objective: every attribute is the objective's own."""

    def __init__(self, objective):
        self._objective = objective

    def __getattr__(self, name):
        return getattr(self._objective, name)


class MonitorTap(_Standing):
    """The session's objective while a fused monitor runs: keeps its value and gradient
    at ``theta`` (:attr:`kept`) when an audit saw them and passed."""

    kept = None

    @staticmethod
    def taps(objective):
        """Whether ``objective``'s gradient is its value-and-gradient's, bit for bit."""
        return type(objective) is ClientObjective

    def value_and_gradient(self, theta, rows=None):
        audit = dominance.active()
        before = audit.checks if audit is not None else 0
        value, grad = self._objective.value_and_gradient(theta, rows)
        # kept only when an audit saw these sums (it raised had it refused them)
        if rows is None and audit is not None and audit.checks > before and \
                isinstance(theta, np.ndarray):
            self.kept = Kept(self._objective, theta, value, grad, audit,
                             audit.checks - before)
        return value, grad


class Reusing(_Standing):
    """The session's objective while the step of the same request runs: the gradient at
    the kept model is the kept one (a copy: solvers add to it in place), and the step's
    audit counts the monitor's checks of it. Used only under an audit of the same rule."""

    def __init__(self, objective, kept):
        super().__init__(objective)
        self._kept = kept

    def _reused(self, theta, rows):
        kept = self._kept
        if not kept.matches(self._objective, theta, rows):
            return False
        audit = dominance.active()
        if audit is None or (type(audit), audit.min_rows, audit.share) != kept.rule:
            return False
        audit.checks += kept.checks  # these sums were audited once, by the monitor
        return True

    def gradient(self, theta, rows=None):
        if self._reused(theta, rows):
            return self._kept.grad.copy()
        return self._objective.gradient(theta, rows)

    def value_and_gradient(self, theta, rows=None):
        if self._reused(theta, rows):
            return self._kept.value, self._kept.grad.copy()
        return self._objective.value_and_gradient(theta, rows)
