"""The analyst's side of the site services: a dataset backend and an executor.

:meth:`FederatedDataset.from_sites <skfed.data.FederatedDataset.from_sites>`
connects to each site's service; every estimator then runs on it as on any
other dataset. Where the in-process and Dask paths call a site function
(``dataset.map(site_summary, ...)``, ``executor.map(client_monitor, ...)``, a
solver's ``client_update``), this backend calls the site operation declared
beside that function (:func:`skfed.federation.operations.operation_for`) with
its typed arguments. A function that is not a site operation is refused here,
before anything is sent: no closure or callable ever reaches a site service.
"""

import hashlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..exceptions import ClientFailure, ClientFailureError
from ..executors.base import Executor
from ..federation.operations import operation_for, step_for
from .codec import encode


def _operation(fn):
    op = operation_for(fn)
    if op is None:
        name = getattr(fn, "__qualname__", repr(fn))
        raise ValueError(
            f"{name!r} is not one of the site operations a site service runs (it runs only "
            "skfed's declared operations: skfed.federation.operations.operations()); custom "
            "code reaches rows only in the trusted Dask mode "
            "(FederatedDataset.from_sources).")
    return op.name


def _arguments(op, args):
    """A site function's positional arguments as the operation's named ones (its
    declaration's packing, :meth:`skfed.federation.operations.Operation.pack`)."""
    from ..federation.operations import operations

    return operations()[op].pack(args)


def _template(schema):
    """A zero-row table (or array) with a site's checked columns and dtypes."""
    if schema["columns"] is None:
        return np.empty((0, schema["width"]), dtype=np.dtype(schema["dtypes"][0]))
    import pandas as pd

    return pd.DataFrame({c: pd.Series([], dtype=d)
                         for c, d in zip(schema["columns"], schema["dtypes"])})


class RemoteObjective:
    """A client objective kept at a site service (a fit session's handle)."""

    __slots__ = ("connection", "session", "n_samples")

    def __init__(self, connection, session):
        self.connection, self.session, self.n_samples = connection, session, None


class SiteServices:
    """The :class:`~skfed.data.FederatedDataset` backend of site services.

    Parameters
    ----------
    connections : list of skfed.sites.transport.SiteConnection
    dataset : dict
        ``{"name", "target", "drop", "sample_weight"}``: what each site serves.
    """

    resident = True
    #: where the rows are (a dataset's repr), for every dataset reference derived too
    where = "at site services"

    def __init__(self, connections, dataset, owns=True):
        self.connections, self.dataset, self.owns = list(connections), dict(dataset), owns
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(16, len(self.connections))))

    def call_all(self, op, per_site):
        """``op`` at every site at once (``per_site[k]``: site ``k``'s arguments)."""
        futures = [self._pool.submit(conn.call, op, **args)
                   for conn, args in zip(self.connections, per_site)]
        return [f.result() for f in futures]

    def map(self, fn, args):
        op = _operation(fn)
        named = dict(_arguments(op, args), dataset=self.dataset)
        out = self.call_all(op, [named] * len(self.connections))
        return [_template(r) for r in out] if op == "preprocess.schema" else out

    def apply(self, fn, args):
        """A dataset whose reference asks each site to apply ``fn(site, *args)`` to its rows
        (one of skfed's declared row steps; nothing but its name and arguments travels)."""
        step = step_for(fn)
        if step is None:
            raise ValueError(
                f"transforming rows at a site with {getattr(fn, '__qualname__', fn)!r} is not "
                "an operation of the site service (it applies only skfed's declared row "
                "steps: holdout, column selection, scaling, one-hot encoding).")
        named = {a.name: v for a, v in zip(step.arguments, args)}
        steps = [*self.dataset.get("steps", ()), {"step": step.name, "args": named}]
        return SiteServices(self.connections, dict(self.dataset, steps=steps), owns=False)

    def subset(self, positions):
        return SiteServices([self.connections[k] for k in positions], self.dataset, owns=False)

    def holdout(self, test_size, seed, part):
        """The sites' training or held-out rows, drawn at each site (a dataset reference
        with a ``holdout``: nothing but the rule travels)."""
        if "holdout" in self.dataset:
            raise ValueError("this dataset is already one part of a holdout split.")
        dataset = dict(self.dataset, holdout={"test_size": float(test_size), "seed": int(seed),
                                              "part": part})
        return SiteServices(self.connections, dataset, owns=False)

    def build(self, fn, args):
        op = _operation(fn)
        named = dict(_arguments(op, args), dataset=self.dataset)
        handles = self.call_all(op, [named] * len(self.connections))
        return [RemoteObjective(conn, h) for conn, h in zip(self.connections, handles)]

    def executor_for(self, dataset, executor):
        return SiteServiceExecutor()

    def masking_parties(self):
        """The sites' side of this dataset's masked sums: a session at each service."""
        return ServiceParties(self)

    def close(self):
        if self.owns:
            for conn in self.connections:
                conn.close()
        self._pool.shutdown(wait=False)

    @property
    def bytes_sent(self):
        return sum(c.bytes_sent for c in self.connections)

    @property
    def bytes_received(self):
        return sum(c.bytes_received for c in self.connections)


class ServiceParties:
    """The sites' side of an analysis's masked sums at site services
    (:class:`skfed.privacy.masked_sums.MaskedSums`): each service keeps its own key
    pair in a session of masked sums (:mod:`skfed.sites.masked_operations`)."""

    def __init__(self, services):
        self.services, self.handles = services, None

    def _on_sessions(self, op, per_site):
        return self.services.call_all(op, [dict(args, session=h)
                                           for h, args in zip(self.handles, per_site)])

    def keys(self, session, fixed_point):
        services = self.services
        code = {"key_session": np.frombuffer(bytes(session), dtype=np.uint8),
                "dataset": services.dataset}
        replies = services.call_all("sums.open", [dict(code, party=j) for j in range(
            len(services.connections))])
        self.handles = [r["handle"] for r in replies]
        return replies

    def key_list(self, public, proofs):
        self._on_sessions("sums.key_list", [{"keys": public, "proofs": proofs}]
                          * len(self.handles))

    def masked(self, fn, args, message):
        op = _operation(fn)
        request = dict(message, operation=op, args=_arguments(op, args))
        return self._on_sessions("sums.masked", [request] * len(self.handles))

    def close(self):
        if self.handles is None:
            return
        try:
            self._on_sessions("sums.close", [{}] * len(self.handles))
        except Exception:  # a lost site's session ends with its process
            pass
        self.handles = None


class SiteServiceExecutor(Executor):
    """Runs a fit's client work as site operations on :class:`RemoteObjective` sessions.

    The clients' solver states stay at the sites (their initial state is
    sent with a client's first step), as under secure aggregation: a warm
    start resumes from the model. A site that does not answer within its
    connection's timeout is a failed client: solvers that allow partial
    participation go on without it (the rounds and the monitor then cover the
    sites left, and ``history_.dropped`` says which site was lost when), the
    others stop naming it. A refusal by a site's policy stops the fit at once,
    naming the site and the rule.
    """

    keeps_states_at_sites = True
    #: a step may carry the monitor's request (:meth:`run_round_monitored`)
    fuses_monitor = True

    def _start(self):
        self._sent_state, self._solver_sent = set(), {}
        #: sites that stopped answering during a round: left out of the next rounds and of
        #: the monitor (the round loop stops the fit instead for a solver needing everyone)
        self.lost = set()
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(16, len(self.clients))))

    def _submit(self, j, op, args):
        client = self.clients[j]
        return self._pool.submit(client.connection.call, op, session=client.session, **args)

    def map(self, fn, tasks):
        from . import SiteRefusal

        op = _operation(fn)
        futures = [(j, self._submit(j, op, _arguments(op, args))) for j, args in tasks]
        out = []
        for j, future in futures:
            try:
                out.append(future.result())
            except SiteRefusal:
                raise
            except Exception as exc:  # a lost site: the map needs every one
                raise ClientFailureError(f"client {self.labels[j]!r} could not run {op!r}: "
                                         f"{exc}") from None
        return out

    def run_round(self, solver, rnd, jobs, *, retry=False):
        replies, failures, _ = self._round(solver, jobs, None)
        return replies, failures

    def run_round_monitored(self, solver, rnd, jobs, theta, *, retry=False):
        """:meth:`run_round` whose requests also carry the monitor's at ``theta`` (the
        ``fit.monitor`` request, answered under its own rules): one request per site.
        Returns ``(replies, failures, monitored)``, ``monitored[j]`` site ``j``'s
        ``client_monitor`` reply (the sites that answered)."""
        return self._round(solver, jobs, {"theta": np.asarray(theta, dtype=float)})

    def _round(self, solver, jobs, monitor):
        from . import SiteRefusal

        # the solver travels when it changes (its first round, or a server-side
        # update of its attributes); otherwise only its digest
        blob = np.frombuffer(encode(solver), dtype=np.uint8)
        digest = hashlib.sha256(blob).hexdigest()
        futures, failures = [], {}
        for j, message, seed in jobs:
            if j in self.lost:  # not asked again: it did not answer within the timeout
                failures[j] = ClientFailure(error=f"site {self.labels[j]!r} was lost in an "
                                                  "earlier round", worker=self.labels[j])
                continue
            args = {"solver_digest": digest, "message": message, "seed": int(seed),
                    "client": int(j)}
            if self._solver_sent.get(j) != digest:
                args["solver"] = blob
            if j not in self._sent_state:
                args["state"] = self._states[j]
            if monitor is not None:
                args["monitor"] = monitor
            futures.append((j, self._submit(j, "fit.step", args)))
        replies, monitored = {}, {}
        for j, future in futures:
            try:
                reply = future.result()
                if monitor is not None:
                    monitored[j], reply = reply["monitor"], reply["reply"]
                replies[j] = reply
                self._sent_state.add(j)
                self._solver_sent[j] = digest
            except SiteRefusal:
                raise
            except Exception as exc:
                from . import SiteUnavailable

                if isinstance(exc, SiteUnavailable):
                    self.lost.add(j)
                failures[j] = ClientFailure(error=str(exc), worker=self.labels[j])
        return replies, failures, monitored

    def collect_states(self):
        return None

    def close(self):
        clients, pool = self.clients, getattr(self, "_pool", None)
        if clients is not None and pool is not None:
            futures = [pool.submit(c.connection.call, "fit.close", session=c.session)
                       for c in clients]
            for f in futures:  # a lost site's session ends with its process
                try:
                    f.result()
                except Exception:
                    pass
            pool.shutdown(wait=False)
        super().close()
