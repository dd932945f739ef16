"""Shared hyper-parameters and step-size rules of local-update solvers."""

import numbers

import numpy as np

from .._messages import show
from ..local import LocalSchedule
from .base import FederatedSolver, check_positive

LR_SCHEDULES = ("constant", "inverse_sqrt")


class LocalUpdateSolver(FederatedSolver):
    """Base of solvers whose clients take gradient steps between rounds.

    Parameters (shared by subclasses)
    ---------------------------------
    client_lr : float or "auto"
        Client learning rate ``eta_c``. ``"auto"`` derives one step size per
        block (coefficients, intercept) from the smoothness constants the
        clients computed locally: ``1 / (joint * L_block)`` with the constants
        of the averaged loss for one full-batch step under full participation
        (then one round is one proximal-gradient step, the exact regime), and
        with the largest client's constants otherwise; for minibatches, with
        a bound valid for any batch (see
        :meth:`~skfed.federation.problem.FederatedProblem.minibatch_steps`).
    server_lr : float
        Server learning rate ``eta_s``.
    local_steps : int
        Local steps per round (ignored when ``local_epochs`` is set).
    local_epochs : float or None
        Local passes over the data; with ``batch_size`` gives
        ``ceil(local_epochs * n_j / batch_size)`` steps.
    batch_size : int or None
        Minibatch size; ``None`` is the deterministic full client batch.
    client_lr_schedule : {"constant", "inverse_sqrt"}
        ``"inverse_sqrt"`` uses ``eta_c / sqrt(r + 1)`` in round ``r``.
    """

    _wire_attributes = ("schedule_", "steps_", "coef_step_")  # see FederatedSolver

    def _check_local_params(self):
        check_positive(self.client_lr, "client_lr", allow_auto=True)
        check_positive(self.server_lr, "server_lr")
        if self.local_epochs is None:
            if not isinstance(self.local_steps, numbers.Integral) or self.local_steps < 1:
                raise ValueError(
                    f"local_steps must be an integer >= 1; got {show(self.local_steps)}.")
        else:
            check_positive(self.local_epochs, "local_epochs")
        if self.batch_size is not None and (
            not isinstance(self.batch_size, numbers.Integral) or self.batch_size < 1
        ):
            raise ValueError(
                f"batch_size must be an integer >= 1 or None; got {show(self.batch_size)}.")
        if self.client_lr_schedule not in LR_SCHEDULES:
            raise ValueError(
                f"client_lr_schedule must be one of {LR_SCHEDULES}; "
                f"got {show(self.client_lr_schedule)}."
            )

    def guarantee(self, problem, participation=1.0):
        self._check_local_params()
        schedule = LocalSchedule(self.local_steps, self.local_epochs, self.batch_size)
        one_step = (self.batch_size is None and participation >= 1.0
                    and schedule.n_steps(int(np.max(problem.n_samples))) == 1)
        if not one_step:
            return "biased", ("several local steps, minibatches or client sampling: its "
                              "fixed point moves with client drift")
        return self._one_step_guarantee(problem)

    def _one_step_guarantee(self, problem):
        return "exact", "one full-batch step per round: a proximal-gradient method"

    def setup(self, problem, participation=1.0):
        self._check_local_params()
        super().setup(problem, participation)
        self.schedule_ = LocalSchedule(self.local_steps, self.local_epochs, self.batch_size)
        layout = problem.layout
        if isinstance(self.client_lr, str):
            n_min = int(np.min(problem.n_samples))
            one_exact_step = (
                self.batch_size is None
                and self.schedule_.n_steps(n_min) == 1
                and participation >= 1.0
            )
            if self.batch_size is not None and self.batch_size < np.max(problem.n_samples):
                steps = problem.minibatch_steps(self.batch_size)
            else:
                steps = problem.block_steps(worst_client=not one_exact_step)
            steps = steps * self._auto_lr_factor(problem)
        else:
            steps = layout.block_vector(self.client_lr, self.client_lr)
        self.steps_ = steps
        # coefficient-block step: what the penalty's prox is scaled by
        self.coef_step_ = float(steps[0]) if layout.n_coef else float(steps[-1])
        return self

    def _auto_lr_factor(self, problem):
        """Extra factor on the automatic step (a hook for solvers whose local
        objective adds curvature, e.g. FedProx's proximal term)."""
        return 1.0

    def _local_gradient(self, client, w, rows):
        """Gradient of ``L_j + psi_smooth`` at ``w`` on ``rows`` (all rows if None)."""
        return self.problem_.add_smooth_gradient(client.gradient(w, rows), w)

    def _lr_scale(self, rnd):
        if self.client_lr_schedule == "inverse_sqrt":
            return 1.0 / np.sqrt(rnd + 1.0)
        return 1.0
