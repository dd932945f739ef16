"""Local solvers and schedules reused by the federated algorithms."""

from .fista import fista
from .schedule import LocalSchedule

__all__ = ["LocalSchedule", "fista"]
