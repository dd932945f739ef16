"""Federated solvers. ``solver="name"`` in an estimator looks the class up here."""

import re
import threading

from sklearn.base import clone
from sklearn.utils._param_validation import StrOptions

from .._messages import closest, did_you_mean, show
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


def _normalize(name):
    """Case and separators (``-``, ``_``, spaces) do not matter in a solver name."""
    return re.sub(r"[\s_-]+", "", name).lower()


# every accepted spelling, normalized, -> the canonical name: the name
# ("local-gecl", "newton") and the class name ("LocalGECL", "FedNewton")
_ALIASES = {"auto": "auto"}
for _cls in _SOLVERS:
    _ALIASES.setdefault(_normalize(_cls.name), _cls.name)
    _ALIASES.setdefault(_normalize(_cls.__name__), _cls.name)
del _cls


def _unknown_solver(name):
    """The message for a solver name nothing matches: the closest names, then all."""
    near = closest(name, _ALIASES, normalize=_normalize)
    available = ", ".join(f"'{n}'" for n in ["auto", *sorted(SOLVERS)])
    return (f"unknown solver {show(name)}{did_you_mean(near) or ';'} "
            f"{'Available' if near else 'available'}: {available} (any case; '-', '_' and "
            "spaces are ignored, so class names such as 'DualFL' or 'LocalGECL' work too)")


def solver_name(name):
    """The canonical name of a solver spelled ``name``.

    Case and separators are ignored, and class names are accepted:
    ``"LocalGECL"``, ``"local_gecl"`` and ``"Local G-ECL"`` are all
    ``"local-gecl"``; ``"FedNewton"`` is ``"newton"``. An unknown name raises
    a ValueError naming the closest valid names.
    """
    key = _normalize(name) if isinstance(name, str) else None
    if key not in _ALIASES:
        raise ValueError(_unknown_solver(name) + ".")
    return _ALIASES[key]


_rejected = threading.local()


class _SolverNames(StrOptions):
    """The ``solver`` parameter's names, in any spelling :func:`solver_name` accepts.

    scikit-learn's parameter validation builds its message from ``str()`` of
    the constraints after asking each one about the value: the name this
    constraint last rejected (in this thread) is kept for that message, so it
    can say which names are close.
    """

    def __init__(self):
        super().__init__(set(SOLVERS) | {"auto"})

    def is_satisfied_by(self, val):
        ok = isinstance(val, str) and _normalize(val) in _ALIASES
        _rejected.name = val if isinstance(val, str) and not ok else None
        return ok

    def __str__(self):
        name = getattr(_rejected, "name", None)
        if name is None:
            names = ", ".join(f"'{n}'" for n in ["auto", *sorted(SOLVERS)])
            return "a solver name among {" + names + "} (any case; '-', '_' and spaces are ignored)"
        return "a solver name: " + _unknown_solver(name)


#: the ``solver`` entry of an estimator's ``_parameter_constraints``
SOLVER_CONSTRAINTS = [FederatedSolver, _SolverNames()]


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
    if isinstance(solver, str):
        name = solver_name(solver)  # "DualFL", "local_gecl", ...: any spelling
        if name != "auto":
            return SOLVERS[name]()
        if datafit is not None and not datafit.smooth:
            if participation < 1.0:
                return FedAvg()
            nonsmooth = penalty.split_smooth()[0] if penalty is not None else None
            return DualFL() if nonsmooth is None else FedMLS()
        return FedNewton() if participation >= 1.0 else FedDyn()
    if isinstance(solver, FederatedSolver):
        return clone(solver)
    raise TypeError(
        f"solver must be a name ({', '.join(sorted(SOLVERS))}) or a FederatedSolver "
        f"instance; got {type(solver).__name__}."
    )


__all__ = ["FederatedSolver", "DualFL", "FedDualAvg", "FedDualAvgOSP", "FedMID", "FedMIDOSP",
           "FedAvg", "FedProx", "FedPD", "FedADMM", "FedDyn", "AFedPD", "Scaffold", "LocalGECL",
           "DSGD", "FedMLS", "FedNewton", "SOLVERS", "SOLVER_CONSTRAINTS", "resolve_solver",
           "solver_name"]
