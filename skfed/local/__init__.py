"""Local solvers and schedules reused by the federated algorithms."""

from .fista import fista
from .quadratic_model import CompactModel, DenseModel, solve_quadratic_model
from .schedule import LocalSchedule
from .subproblem import (LOCAL_SOLVERS, local_steps, resolve_local_solver, solve_direct,
                         solve_fista)

__all__ = ["LocalSchedule", "fista", "CompactModel", "DenseModel", "solve_quadratic_model",
           "LOCAL_SOLVERS", "local_steps", "resolve_local_solver", "solve_direct", "solve_fista"]
