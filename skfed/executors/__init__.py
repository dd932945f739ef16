"""Where client work runs: in process, on threads, in processes (Dask: skfed[dask])."""

from .._messages import show
from .base import Executor
from .dask_executor import DaskExecutor
from .local import SequentialExecutor, ThreadExecutor
from .loky import LokyExecutor

#: ``executor="dask"`` uses the running Dask client (needs ``skfed[dask]``)
EXECUTORS = {"sequential": SequentialExecutor, "threads": ThreadExecutor, "loky": LokyExecutor,
             "dask": DaskExecutor}


def resolve_executor(executor, n_jobs=None):
    """An executor instance from a name or an :class:`Executor` (used as given)."""
    if isinstance(executor, Executor):
        return executor
    if isinstance(executor, str) and executor in EXECUTORS:
        return EXECUTORS[executor](n_jobs=n_jobs)
    raise ValueError(
        f"executor must be one of {sorted(EXECUTORS)} or an Executor instance; "
        f"got {show(executor)}."
    )


__all__ = ["Executor", "SequentialExecutor", "ThreadExecutor", "LokyExecutor", "DaskExecutor",
           "EXECUTORS", "resolve_executor"]
