"""Errors and warnings about clients that fail during a federated fit, and about sites
that refuse or do not answer."""

import traceback
from dataclasses import dataclass


class ClientFailureError(RuntimeError):
    """A client could not complete its work and the fit cannot go on without it.

    Raised when a solver that needs every client in every round (DualFL,
    FedPD, SCAFFOLD, FedMLS, Local G-ECL) loses one and no retry succeeded,
    when every participant of a round failed, or when a client's solver
    state (duals, control variates) was lost with its worker. The estimator
    keeps what it had before ``fit`` was called.
    """


class ClientDroppedWarning(UserWarning):
    """A client failed in a round and the round went on without it.

    Only solvers that allow partial participation drop clients; the dropped
    clients are listed in ``history_.dropped``.
    """


@dataclass
class ClientFailure:
    """What a failed client task reports instead of a reply (never aggregated)."""

    error: str
    traceback: str = ""
    worker: str = None
    #: the worker running the client died (its data went with it)
    worker_lost: bool = False
    #: the client's solver state is gone (its worker died), so it cannot be retried
    state_lost: bool = False
    #: the local iterates became non-finite (a step size too large): not a fault
    #: to retry or drop, since the same round would diverge again anywhere
    diverged: bool = False

    @classmethod
    def from_exception(cls, exc, worker=None):
        return cls(error=f"{type(exc).__name__}: {exc}",
                   traceback="".join(traceback.format_exception(exc)), worker=worker,
                   diverged=isinstance(exc, FloatingPointError))


class SiteRefusal(PermissionError):
    """A site's policy refused a request; ``rule`` names the rule."""

    def __init__(self, site, rule, message):
        self.site, self.rule = site, rule
        super().__init__(message)


class SiteServiceError(RuntimeError):
    """A site could not run an operation (its message names no row value or path)."""

    def __init__(self, site, message):
        self.site = site
        super().__init__(f"site {site!r}: {message}")


class SiteUnavailable(ConnectionError):
    """A site service did not answer (down, unreachable, or past the timeout)."""

    def __init__(self, site, detail):
        self.site = site
        super().__init__(f"site {site!r} did not answer: {detail}")
