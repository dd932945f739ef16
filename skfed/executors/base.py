"""Executors run client work where the clients' data lives.

Data is shipped once per fit (:meth:`Executor.open`); each round only the
broadcast message and the replies travel. Tasks are returned in the order
given, so aggregation (and thus the fitted model) does not depend on the
executor.
"""

from abc import ABC, abstractmethod


class Executor(ABC):
    """Base class: ``open(clients)``, then ``map(fn, tasks)`` each round, then ``close()``.

    ``tasks`` is a list of ``(client_index, args)``; the executor calls
    ``fn(client, *args)`` with the client object it holds and returns the
    results in task order.
    """

    def __init__(self, n_jobs=None):
        self.n_jobs = n_jobs

    @abstractmethod
    def open(self, clients):
        """Place the client objects (once per fit)."""

    @abstractmethod
    def map(self, fn, tasks):
        """Run ``fn(client, *args)`` for each ``(index, args)``, results in order."""

    def close(self):
        """Release workers and placed data."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"{type(self).__name__}(n_jobs={self.n_jobs!r})"
