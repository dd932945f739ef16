"""Process executor: joblib's loky pool, client data memory-mapped once per fit."""

import os
import shutil
import tempfile

import joblib
from joblib import Parallel, delayed

from .base import Executor


class LokyExecutor(Executor):
    """Runs clients in worker processes (joblib's loky backend).

    :meth:`open` dumps every client's data to a temporary folder once and
    loads it back memory-mapped; what crosses to a worker each round is then
    a reference to the file (joblib pickles memmaps by name; nothing else is
    auto-memmapped, so small broadcasts are not written to disk), the broadcast
    and the client's solver state (duals, control variates), never the data.
    The pool stays open for the fit.

    Parameters
    ----------
    n_jobs : int or None
        Number of worker processes (``None``: all cores).
    temp_folder : str or None
        Where to place the memory-mapped data (default: the system's).
    """

    def __init__(self, n_jobs=None, temp_folder=None):
        super().__init__(n_jobs)
        self.temp_folder = temp_folder

    def _start(self):
        self._dir = tempfile.mkdtemp(prefix="skfed-", dir=self.temp_folder)
        for j, client in enumerate(self.clients):
            path = os.path.join(self._dir, f"client{j}.joblib")
            joblib.dump(client, path)
            self.placement_bytes_ += os.path.getsize(path)
            self.clients[j] = joblib.load(path, mmap_mode="r")
        self._pool = Parallel(n_jobs=self.n_jobs or -1, backend="loky", max_nbytes=None)
        self._pool.__enter__()

    def map(self, fn, tasks):
        return self._pool(delayed(fn)(self.clients[j], *args) for j, args in tasks)

    def close(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.__exit__(None, None, None)
        self._pool = None
        super().close()
        if getattr(self, "_dir", None):
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
