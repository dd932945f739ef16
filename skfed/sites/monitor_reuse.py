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
Both live for one request only: nothing is kept between requests. The classes without
the audit, used in process and on Dask, are :mod:`skfed.federation.monitor_reuse`'s.
"""

import numpy as np

from ..federation import dominance
from ..federation import monitor_reuse as plain


class Kept(plain.Kept):
    """A monitor's value and gradient at one model, and the audit that saw them."""

    def __init__(self, objective, theta, value, grad, audit, checks):
        super().__init__(objective, theta, value, grad)
        self.rule = (type(audit), audit.min_rows, audit.share)
        self.checks = checks


class MonitorTap(plain.Standing):
    """The session's objective while a fused monitor runs: keeps its value and gradient
    at ``theta`` (:attr:`kept`) when an audit saw them and passed."""

    kept = None
    taps = staticmethod(plain.reusable)

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


class Reusing(plain.Reusing):
    """The session's objective while the step of the same request runs: the gradient at
    the kept model is the kept one (a copy: solvers add to it in place), and the step's
    audit counts the monitor's checks of it. Used only under an audit of the same rule."""

    def _reused(self, theta, rows):
        kept = self._kept
        if not super()._reused(theta, rows):
            return False
        audit = dominance.active()
        if audit is None or (type(audit), audit.min_rows, audit.share) != kept.rule:
            return False
        audit.checks += kept.checks  # these sums were audited once, by the monitor
        return True
