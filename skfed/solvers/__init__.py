"""Federated solvers. ``solver="name"`` in an estimator looks the class up here."""

from sklearn.base import clone

from .base import FederatedSolver
from .dual_averaging import FedDualAvg, FedDualAvgOSP
from .control_variates import LocalGECL, Scaffold
from .decentralized import DSGD
from .dualfl import DualFL
from .fedmls import FedMLS
from .local_primal import FedAvg, FedMID, FedMIDOSP, FedProx
from .primal_dual import AFedPD, FedADMM, FedDyn, FedPD

_SOLVERS = (DualFL, FedDualAvg, FedDualAvgOSP, FedMID, FedMIDOSP, FedAvg, FedProx, FedPD,
            FedADMM, FedDyn, AFedPD, Scaffold, LocalGECL, DSGD, FedMLS)
SOLVERS = {cls.name: cls for cls in _SOLVERS}


def resolve_solver(solver):
    """A fresh solver instance from a name or a solver object (never mutated)."""
    if isinstance(solver, str):
        key = solver.lower()
        if key not in SOLVERS:
            raise ValueError(
                f"unknown solver {solver!r}; available: {', '.join(sorted(SOLVERS))}."
            )
        return SOLVERS[key]()
    if isinstance(solver, FederatedSolver):
        return clone(solver)
    raise TypeError(
        f"solver must be a name ({', '.join(sorted(SOLVERS))}) or a FederatedSolver "
        f"instance; got {type(solver).__name__}."
    )


__all__ = ["FederatedSolver", "DualFL", "FedDualAvg", "FedDualAvgOSP", "FedMID", "FedMIDOSP",
           "FedAvg", "FedProx", "FedPD", "FedADMM", "FedDyn", "AFedPD", "Scaffold", "LocalGECL", "DSGD", "FedMLS", "SOLVERS",
           "resolve_solver"]
