"""Local solvers and schedules reused by the federated algorithms."""

from .schedule import LocalSchedule

__all__ = ["LocalSchedule"]
