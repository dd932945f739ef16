"""Federated solvers. ``solver="name"`` in an estimator looks the class up here."""

from sklearn.base import clone

from .base import FederatedSolver
from .dual_averaging import FedDualAvg, FedDualAvgOSP
from .control_variates import LocalGECL, Scaffold
from .decentralized import DSGD
from .dualfl import DualFL
from .fedmls import FedMLS
from .local_primal import FedAvg, FedMID, FedMIDOSP, FedProx
from .newton import FedNewton
from .primal_dual import AFedPD, FedADMM, FedDyn, FedPD

_SOLVERS = (DualFL, FedDualAvg, FedDualAvgOSP, FedMID, FedMIDOSP, FedAvg, FedProx, FedPD,
            FedADMM, FedDyn, AFedPD, Scaffold, LocalGECL, DSGD, FedMLS, FedNewton)
SOLVERS = {cls.name: cls for cls in _SOLVERS}


def resolve_solver(solver, participation=1.0, datafit=None, penalty=None):
    """A fresh solver instance from a name or a solver object (never mutated).

    ``"auto"``, for a smooth loss under full participation, is Newton's
    method (:class:`FedNewton`): each client sends its gradient and Hessian,
    and the pooled optimum is reached in the handful of rounds a pooled
    Newton solver needs (one for least squares). Its own ``hessian="auto"``
    switches to quasi-Newton (gradients only) when the Hessian message would
    exceed 8 MiB (about 1,450 parameters) or the loss has no second
    derivative. A Hessian reveals a site's second moments ``X'DX``, a
    gradient only a ``p``-vector: pass ``solver="dualfl"`` (or
    ``FedNewton(hessian="quasi-newton")``) where that matters.

    Under partial participation it is FedDyn (Newton and DualFL need every
    client every round; FedDyn was the fastest exact solver we measured at
    10% participation). For a non-smooth loss (hinge): DualFL (solving its
    local problems in the dual) when the penalty is smooth, FedMLS with an L1
    penalty, and subgradient FedAvg under partial participation (the only
    one of them that samples clients).
    """
    if isinstance(solver, str) and solver == "auto":
        if datafit is not None and not datafit.smooth:
            if participation < 1.0:
                return FedAvg()
            nonsmooth = penalty.split_smooth()[0] if penalty is not None else None
            return DualFL() if nonsmooth is None else FedMLS()
        return FedNewton() if participation >= 1.0 else FedDyn()
    if isinstance(solver, str):
        key = solver.lower()
        if key not in SOLVERS:
            raise ValueError(
                f"unknown solver {solver!r}; available: 'auto', {', '.join(sorted(SOLVERS))}."
            )
        return SOLVERS[key]()
    if isinstance(solver, FederatedSolver):
        return clone(solver)
    raise TypeError(
        f"solver must be a name ({', '.join(sorted(SOLVERS))}) or a FederatedSolver "
        f"instance; got {type(solver).__name__}."
    )


__all__ = ["FederatedSolver", "DualFL", "FedDualAvg", "FedDualAvgOSP", "FedMID", "FedMIDOSP",
           "FedAvg", "FedProx", "FedPD", "FedADMM", "FedDyn", "AFedPD", "Scaffold", "LocalGECL",
           "DSGD", "FedMLS", "FedNewton", "SOLVERS", "resolve_solver"]
