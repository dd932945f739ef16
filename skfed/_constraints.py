"""Ball constraints an estimator may add to its penalty (``constraint=``, ``radius=``)."""

from numbers import Real

from sklearn.utils._param_validation import Interval, StrOptions

from .penalties import L1, Constrained, L1Ball, L2Ball

CONSTRAINT_PARAMETERS = {
    "constraint": [StrOptions({"l1_ball", "l2_ball"}), None],
    "radius": [Interval(Real, 0, None, closed="neither")],
}

CONSTRAINT_DOC = """
    constraint : {"l1_ball", "l2_ball"} or None, default=None
        Also require ``||w||_1 <= radius`` or ``||w||_2 <= radius`` (the
        coefficients, never the intercept): the penalty becomes the
        penalty plus the ball's indicator (FCO paper, App. B.5). Solvers
        that apply the penalty by its prox enforce it (FedDualAvg, FedMID,
        DualFL, FedDyn, ...); subgradient solvers are refused.
    radius : float > 0, default=1.0
        Radius of the ball (used only with ``constraint``).
"""


def constrain(penalty, constraint, radius):
    """``penalty`` restricted to the requested ball (``penalty`` may be None)."""
    if constraint is None:
        return penalty
    if isinstance(penalty, L1) and penalty.alpha == 0:  # alpha=0: the ball alone
        penalty = None
    ball = L1Ball(radius) if constraint == "l1_ball" else L2Ball(radius)
    return Constrained(penalty, ball)
