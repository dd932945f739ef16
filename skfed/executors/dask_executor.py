"""Dask executor: each client's data and solver state resident on one worker.

Needs the optional extra ``skfed[dask]`` (``dask[distributed]``), imported
only when a fit starts. The cluster is the user's: the executor finds the
running ``distributed.Client`` (or connects to ``address``) when ``fit``
starts and never stores it as a parameter, so estimators holding a
``DaskExecutor`` still clone and pickle.

What travels, per fit and per round::

    open         each client's data, once, scattered to its worker (pinned)
    each round   one task per worker over its resident clients: the solver's
                 messages go in, only the replies come back; the clients'
                 solver states stay in a store on the worker; the solver is
                 named by its digest (sent again only when it changes); a
                 stateless fit's round also carries the monitor of the model
                 it starts from (one task per worker and round, not two)
    close        the states come back once (for warm_start); the store and
                 the data are released
"""

import functools
import hashlib
import numbers
import pickle
import uuid
from concurrent.futures import CancelledError

import numpy as np

from .._messages import show
from ..exceptions import ClientFailure, ClientFailureError
from .base import Executor, client_round, client_round_monitored


class ResidentClient:
    """A client object that lives on a Dask worker (a future to ``{index: object}``).

    Built by a site-resident :class:`~skfed.FederatedDataset` (its rows loaded by
    the site's own worker); :class:`DaskExecutor` runs its rounds there and never
    moves it. Also importable as ``skfed.data.ResidentClient``.

    Parameters
    ----------
    future : distributed.Future
        The ``{index: client object}`` held by the worker.
    worker : str
        The worker's name (the site).
    n_samples : int or None
        The client's number of rows, where known.
    """

    __slots__ = ("future", "worker", "n_samples")

    def __init__(self, future, worker, n_samples):
        self.future, self.worker, self.n_samples = future, worker, n_samples


#: errors that mean "the worker (and what it held) is gone", not "the client raised"
_WORKER_LOST = ("FutureCancelledError", "KilledWorker", "CommClosedError", "CancelledError",
                "StreamClosedError")


class _Jobs:
    """A worker's part of a round, wrapped so that Dask does not walk it.

    Dask searches task arguments that are lists, tuples or dicts for futures,
    item by item; with hundreds of clients per worker that search cost ~10 ms
    per task. The jobs hold no futures (the data shards are passed apart).
    ``monitor``: the model at which a round's task also runs each client's
    monitor (``None``: the round alone).
    """

    __slots__ = ("items", "monitor")

    def __init__(self, items, monitor=None):
        self.items, self.monitor = items, monitor


class _Fused:
    """A client's reply to a round that carried the monitor: the step's reply and
    ``client_monitor``'s at the round's model (``None`` if the monitor raised: the
    round loop then runs it as a pass of its own, which reports the error)."""

    __slots__ = ("reply", "monitored")

    def __init__(self, reply, monitored):
        self.reply, self.monitored = reply, monitored


# --- worker side (module level: pickled by reference) -------------------------------
def _store(token):
    """This worker's dict of client solver states for the fit ``token``."""
    from distributed import get_worker

    stores = get_worker().__dict__.setdefault("_skfed_states", {})
    return stores.setdefault(token, {})


def _put_states(token, states, *anchors):
    """``anchors``: the data shards the states sit beside (dependencies only)."""
    _store(token).update(states)
    return len(states)


def _take_states(token, indices, remove, *anchors):
    """``anchors``: the data shards beside the states (so a dead worker cancels the task)."""
    store = _store(token)
    return {j: (store.pop(j) if remove else store[j]) for j in indices}


def _drop_store(token, dask_worker=None):
    dask_worker.__dict__.get("_skfed_states", {}).pop(token, None)


def _merge(shards):
    """The worker's clients by index, from the data shards it holds."""
    return {j: client for shard in shards for j, client in shard.items()}


def _worker_round(token, solver, shards, jobs):
    """Run a round for this worker's clients; states are updated in place on success.

    With ``jobs.monitor``, each client's monitor at that model runs first in the
    same task (it reads the client's rows only) and its reply is a ``_Fused``.
    """
    store, data = _store(token), _merge(shards)
    if jobs.monitor is not None:
        _register_sizeof()  # in this worker's process too: Dask measures what it holds
    out = {}
    for j, message, seed in jobs.items:
        if j not in store:  # the data moved here without its state
            out[j] = ClientFailure(error="its solver state is not on this worker",
                                   state_lost=True)
            continue
        if jobs.monitor is None:
            monitored, result = None, client_round(data[j], solver, store[j], message, seed)
        else:  # the monitor first, its gradient reused by a one-step solver's step
            monitored, result = client_round_monitored(data[j], solver, store[j], message,
                                                       seed, jobs.monitor)
        if isinstance(result, ClientFailure):
            out[j] = result  # state untouched: as if the client had not taken part
            continue
        out[j], store[j] = result
        if jobs.monitor is not None:
            out[j] = _Fused(out[j], monitored)
    return out


def _worker_map(fn, shards, jobs):
    data, out = _merge(shards), {}
    for j, args in jobs.items:
        try:
            out[j] = fn(data[j], *args)
        except Exception as exc:  # reported per client, raised on the server
            out[j] = ClientFailure.from_exception(exc)
    return out


@functools.cache
def _register_sizeof():
    """Tell Dask how big a client is (its arrays), for memory limits and accounting."""
    from dask.sizeof import sizeof

    from ..datafits import ClientObjective

    @sizeof.register(ClientObjective)
    def _sizeof_client(client):
        return sum(sizeof(v) for v in vars(client).values())

    @sizeof.register(_Fused)
    def _sizeof_fused(fused):  # a round's result held by its worker: its arrays
        return sizeof(fused.reply) + sizeof(fused.monitored)

    return sizeof


class DaskExecutor(Executor):
    """Runs clients on a Dask cluster, each client's data resident on one worker.

    Parameters
    ----------
    address : str or None
        Scheduler address to connect to when a fit starts (a new
        ``distributed.Client`` that the executor closes after the fit).
        ``None`` (default) uses the current client, ``distributed.get_client()``.
    security : distributed.security.Security or None
        TLS credentials for the connection to ``address`` (a ``tls://``
        scheduler with mutual TLS), e.g.
        ``skfed.deploy.tls_security(directory, "client")``. ``None`` (default)
        uses Dask's configuration. Ignored when ``address`` is ``None`` (the
        current client already has its own).
    placement : dict or None
        ``{client label: worker}`` pins named clients to named workers (the
        worker's ``name`` or its address): the cross-silo case where a site's
        worker runs on the site's own machine. A pinned client only ever runs
        there; if that worker leaves, the client's data is not moved elsewhere.
        Other clients are spread over the workers, balancing rows.
    timeout : float or None, default=600
        Seconds to wait for one round's (or monitoring pass's) replies; on
        expiry the fit stops with ``TimeoutError`` naming the sites that did
        not reply, and the estimator keeps what it had before ``fit``.
        ``None`` waits indefinitely (a killed site then hangs the fit).
    n_jobs : None
        Ignored (the cluster's workers set the parallelism); accepted so that
        ``executor="dask"`` resolves like the other names.

    Notes
    -----
    Faults. A client whose code raises in a round is reported by its worker;
    a worker that dies takes its clients' data and states with it. The round
    loop then drops the client from that round (solvers that allow partial
    participation; ``history_.dropped`` records it and a
    :class:`~skfed.exceptions.ClientDroppedWarning` is issued), or, for
    solvers that need every client, the executor runs it again on another
    worker, re-sending its data from this process (unless it is pinned), and
    moving its solver state from the old worker if that worker is alive. A
    client whose state died with its worker cannot be continued exactly: the
    fit stops with :class:`~skfed.exceptions.ClientFailureError` naming the
    client, its worker and the round. Stateless solvers (FedAvg, FedProx,
    FedDualAvg, FedMID) just re-place the data on a surviving worker.

    Rounds. A round is one task per worker over the clients it holds, on their
    resident data and states. The solver is scattered to every worker once and
    then named by its key; it is sent again only if its digest changes. When
    the clients hold no solver state (FedAvg, FedProx, FedDualAvg, FedMID), the
    round loop's monitoring pass of a model rides the next round's tasks
    (:meth:`run_round_monitored`): one dispatch per round instead of two. A
    stateful fit keeps the pass of its own: a fit that stops on a fused monitor
    discards that round's step, which must then have changed no client state.

    Accounting. ``history_`` counts in ``bytes_up`` / ``bytes_down`` only the
    solver's messages, as with every executor; the one-time data and state
    placement is ``history_.placement_bytes`` (Dask's ``sizeof``).

    Attributes
    ----------
    solver_scatters_ : int
        How many times the solver was sent to the workers during the current fit
        (once, unless the server changed it between rounds).
    """

    def __init__(self, address=None, *, security=None, placement=None, timeout=600.0,
                 n_jobs=None):
        super().__init__(n_jobs)
        self.address = address
        self.security = security
        self.placement = placement
        self.timeout = timeout

    def __repr__(self):
        return (f"DaskExecutor(address={self.address!r}, security={self.security!r}, "
                f"placement={self.placement!r}, timeout={self.timeout!r})")

    @classmethod
    def for_dataset(cls, dataset, executor=None):
        """The executor of a fit on site-resident data: the dataset's own cluster
        and connection, each site's client pinned to the site's worker. A
        ``DaskExecutor`` passed as ``executor`` lends its ``timeout``; any other
        executor cannot reach the rows and is replaced (the rows never move)."""
        out = cls(timeout=executor.timeout) if isinstance(executor, DaskExecutor) else cls()
        out._bound = dataset.dask_client
        return out

    # -- placement -----------------------------------------------------------
    def _start(self):
        try:
            import distributed
        except ImportError as exc:  # pragma: no cover - exercised without the extra
            raise ImportError(
                "DaskExecutor needs the optional dependency 'dask[distributed]': "
                "pip install 'skfed[dask]'.") from exc
        if self.timeout is not None and not (isinstance(self.timeout, numbers.Real)
                                             and self.timeout > 0):
            raise ValueError("timeout must be a positive number or None; "
                             f"got {show(self.timeout)}.")
        self._sizeof = _register_sizeof()
        self._token = uuid.uuid4().hex
        self._data, self._where, self._solver, self._stateless = {}, {}, (None, None), True
        self.solver_scatters_ = 0
        self._owns_client = self.address is not None and getattr(self, "_bound", None) is None
        if getattr(self, "_bound", None) is not None:
            self._client = self._bound
        elif self._owns_client:
            self._client = distributed.Client(self.address, security=self.security)
        else:
            try:
                self._client = distributed.get_client()
            except ValueError as exc:
                raise ValueError(
                    "DaskExecutor found no running Dask client: create one first "
                    "(distributed.Client(...) or a LocalCluster), or pass "
                    "DaskExecutor(address='tcp://scheduler:8786').") from exc
        self._pins = self._resolve_pins()
        if self._adopt_resident():
            return
        load, workers = {}, self._workers()
        sizes = [c.n_samples for c in self.clients]
        # pinned clients first, then the largest unpinned ones to the least loaded worker
        order = sorted(range(len(self.clients)), key=lambda j: (j not in self._pins, -sizes[j], j))
        for j in order:
            worker = self._choose_worker(j, load, exclude=(), workers=workers)
            load[worker] = load.get(worker, 0) + sizes[j]
            self._where[j] = worker
        for worker in sorted(set(self._where.values())):
            self._scatter([j for j, w in self._where.items() if w == worker], worker)

    def _adopt_resident(self):
        """Clients built on their sites' workers (``ResidentClient``): nothing to
        ship; each is pinned to its worker, and never moved from it."""
        resident = [isinstance(c, ResidentClient) for c in self.clients]
        if not any(resident):
            return False
        if not all(resident):
            raise ValueError("a fit cannot mix site-resident and in-memory clients.")
        by_name = {name: addr for addr, name in self._workers().items()}
        for j, c in enumerate(self.clients):
            name = str(c.worker)  # workers are known by their names' text (_workers)
            if name not in by_name:
                raise ClientFailureError(f"client {self.labels[j]!r}: its worker {c.worker!r} "
                                         "is not in the cluster (its rows cannot move).")
            self._data[j], self._where[j], self._pins[j] = c.future, by_name[name], name
        from distributed import wait

        with self._client.as_current():  # wait() would otherwise use the default client
            wait([c.future for c in self.clients], timeout=self.timeout)
        for c in self.clients:  # a site that cannot build its objective says why (no rows move)
            if c.future.status == "error":
                raise c.future.exception()
        return True

    def _workers(self):
        """Live workers: ``{address: name}``."""
        info = self._client.scheduler_info(n_workers=-1)["workers"]
        return {addr: str(w.get("name", addr)) for addr, w in info.items()}

    def _resolve_pins(self):
        pins = dict(self.placement or {})
        by_label = {str(label): j for j, label in enumerate(self.labels)}
        unknown = [label for label in pins if str(label) not in by_label]
        if unknown:
            raise ValueError(f"placement names clients {unknown!r} that are not in this fit; "
                             f"clients are {list(self.labels)!r}.")
        workers = self._workers()
        known = set(workers) | set(workers.values())
        missing = sorted({str(w) for w in pins.values()} - known)
        if missing:
            raise ValueError(f"placement names workers {missing!r} that are not in the cluster; "
                             f"workers are {sorted(workers.values())!r} "
                             f"(names) at {sorted(workers)!r}.")
        return {by_label[str(label)]: str(w) for label, w in pins.items()}

    def _choose_worker(self, j, load, exclude, workers=None):
        """Where client ``j`` may run now: its pinned worker, or the least loaded one."""
        workers = self._workers() if workers is None else workers
        if j in self._pins:
            pin = self._pins[j]
            match = [a for a, name in workers.items() if pin in (a, name) and a not in exclude]
            return match[0] if match else None
        free = sorted(a for a in workers if a not in exclude)
        if not free:
            return None
        return min(free, key=lambda a: (load.get(a, 0), a))

    def _scatter(self, indices, worker):
        """Ship clients ``indices`` to ``worker`` as one shard (one Dask key, one dependency)."""
        shard = {j: self.clients[j] for j in indices}
        key = f"skfed-data-{self._token[:8]}-{uuid.uuid4().hex[:8]}"
        future = self._client.scatter({key: shard}, workers=[worker], hash=False)[key]
        self.placement_bytes_ += int(sum(self._sizeof(o) for o in shard.values()))
        for j in indices:
            self._data[j], self._where[j] = future, worker

    def place_states(self, states):
        """Put each client's solver state beside its data. A worker that dies
        meanwhile loses nothing the analyst does not still hold: its clients' data
        and states are shipped again to live workers (twice at most)."""
        self._stateless = all(s is None for s in states)
        pending = list(range(len(states)))
        for _ in range(3):
            self._reship_lost(pending)
            pending = self._put_states_by_worker({j: states[j] for j in pending})
            if not pending:
                break
        else:
            raise ClientFailureError(
                f"client(s) {', '.join(repr(self.labels[j]) for j in pending)}: their "
                "solver state could not be placed (their workers kept leaving the cluster).")
        self.placement_bytes_ += int(sum(self._sizeof(s) for s in states if s is not None))

    def _reship_lost(self, indices):
        """Before any state is placed: ship again the data of clients whose worker
        left (the analyst still holds it), or say which client cannot move."""
        workers = self._workers()
        for j in indices:
            if not self._lost(j) and self._where[j] in workers:
                continue
            new, failure = self._next_worker(j, f"its worker {self._where[j]} left the cluster")
            if failure is not None:
                raise ClientFailureError(f"client {self.labels[j]!r}: {failure.error}")
            self._scatter([j], new)

    def _put_states_by_worker(self, states):
        """Send ``states`` (``{j: state}``) to the clients' workers; returns the
        clients whose worker left under the task. Each task depends on the data
        shards it sits beside, so a dead worker cancels it instead of leaving it
        waiting for a worker that is gone."""
        by_worker = {}
        for j, state in states.items():
            by_worker.setdefault(self._where[j], {})[j] = state
        futures = {}
        for w, part in by_worker.items():
            anchors = list({self._data[j].key: self._data[j] for j in part}.values())
            futures[w] = self._client.submit(_put_states, self._token, part, *anchors,
                                             workers=[w], allow_other_workers=False,
                                             pure=False)
        self._wait(futures, "placing the solver states",
                   {w: [(j,) for j in part] for w, part in by_worker.items()})
        lost = []
        for w, future in futures.items():
            if future.status == "finished":
                continue
            exc = None if future.status == "cancelled" else future.exception()
            if exc is not None and type(exc).__name__ not in _WORKER_LOST \
                    and w in self._workers():
                raise exc
            lost.extend(by_worker[w])
        return sorted(lost)

    def _next_worker(self, j, reason):
        """A live worker other than client ``j``'s that may take it (its pin, or the
        least loaded): ``(worker, None)``, or ``(None, failure)`` when none can."""
        old, workers = self._where[j], self._workers()
        load = {}
        for k, w in self._where.items():
            load[w] = load.get(w, 0) + (self.clients[k].n_samples or 0)
        new = self._choose_worker(j, load, exclude=(old,), workers=workers)
        if new is None:
            pinned = f"pinned to worker {self._pins[j]!r}, " if j in self._pins else ""
            return None, ClientFailure(error=f"{reason}; it is {pinned}and no other worker "
                                             "can take its data", worker=old)
        return new, None

    def _move(self, j, reason, worker_dead=False):
        """Re-place client ``j`` on another live worker; returns a failure if it cannot."""
        old = self._where[j]
        alive = old in self._workers() and not worker_dead
        new, failure = self._next_worker(j, reason)
        if failure is not None:
            return failure
        if self._stateless:
            state = {j: None}
        elif alive:
            try:
                state = self._client.submit(_take_states, self._token, [j], True,
                                            workers=[old], allow_other_workers=False,
                                            pure=False).result(timeout=60)
            except Exception:  # noqa: BLE001 - the worker went down meanwhile
                return ClientFailure(error=f"{reason}, and its solver state could not be "
                                           "fetched from it", worker=old, state_lost=True)
        else:
            return ClientFailure(error=f"{reason}, and its solver state was lost with it",
                                 worker=old, state_lost=True)
        self._scatter([j], new)
        if self._put_states_by_worker(state):
            return ClientFailure(error=f"{reason}, and its new worker {new} left too",
                                 worker=new, state_lost=True)
        return None

    # -- rounds --------------------------------------------------------------
    def _dispatch(self, func, head, jobs, label, monitor=None):
        """Run ``func(*head, shards, part)`` on each worker over its part of ``jobs``.

        ``jobs`` are tuples starting with the client index (``part`` wraps them, with
        ``monitor``). Returns ``{j: result or ClientFailure}``; the clients of a
        worker that died under the task get a failure with ``worker_lost`` set.
        """
        by_worker = {}
        for job in jobs:
            by_worker.setdefault(self._where[job[0]], []).append(job)
        futures = {}
        self._n_dispatch = getattr(self, "_n_dispatch", 0) + 1
        for worker, part in by_worker.items():
            data = list({self._data[job[0]].key: self._data[job[0]] for job in part}.values())
            futures[worker] = self._client.submit(
                func, *head, data, _Jobs(part, monitor), workers=[worker],
                allow_other_workers=False,
                pure=False, key=self._key(label, self._n_dispatch))
        if self.timeout is not None:
            self._wait(futures, label, by_worker)
        # one trip: failed futures are skipped here and examined below
        results = self._client.gather(list(futures.values()), errors="skip")
        out = {}
        finished = {w: f for w, f in futures.items() if f.status == "finished"}
        for w, result in zip(finished, results):
            for j, value in result.items():
                if isinstance(value, ClientFailure):
                    value.worker = value.worker or w
                out[j] = value
        for worker, future in futures.items():
            if worker in finished:
                continue
            try:
                exc = future.exception()
            except BaseException as cancelled:  # a cancelled future raises instead
                exc = cancelled
            # a lost future may carry no exception; the worker's absence decides
            lost = (exc is None or type(exc).__name__ in _WORKER_LOST
                    or worker not in self._workers())
            for job in by_worker[worker]:
                failure = (ClientFailure(error=f"its worker was lost ({type(exc).__name__})"
                                         if exc is not None else "its worker was lost",
                                         worker=worker, worker_lost=True) if lost
                           else ClientFailure.from_exception(exc, worker))
                out[job[0]] = failure
        return out

    def _key(self, label, number):
        """Dask key of one task: fit, dispatch number, what it runs (read by benchmarks)."""
        tag = label.replace(" ", "")
        return f"skfed-{self._token[:8]}-{number:07d}-{tag}-{uuid.uuid4().hex[:8]}"

    def _wait(self, futures, label, by_worker):
        from distributed import wait

        try:
            with self._client.as_current():  # not the process's default client
                wait(list(futures.values()), timeout=self.timeout)
        except CancelledError:  # every future is done, some cancelled: a worker died under
            pass  # them (the data it held is forgotten); _dispatch reports those clients
        except TimeoutError:
            late = [w for w, f in futures.items() if f.status == "pending"]
            self._client.cancel(list(futures.values()))
            sites = [self.labels[job[0]] for w in late for job in by_worker[w]]
            raise TimeoutError(
                f"{label}: no reply within timeout={self.timeout} s from client(s) "
                f"{', '.join(repr(s) for s in sites) or '?'} (worker(s) "
                f"{', '.join(map(str, late))}); the fit was stopped (the estimator keeps "
                "what it had before fit).") from None

    def _lost(self, j):
        return self._data[j].status != "finished"

    def _replace_lost(self, indices, dead=()):
        """Re-place clients whose data future is gone, or whose worker is in ``dead``."""
        failures = {}
        for j in indices:
            if self._lost(j) or self._where[j] in dead:
                failure = self._move(j, f"its worker {self._where[j]} left the cluster",
                                     worker_dead=True)
                if failure is not None:
                    failures[j] = failure
        return failures

    @property
    def fuses_monitor(self):
        """Whether a round's tasks may carry the monitor of the model it starts from
        (:meth:`run_round_monitored`): when the clients hold no solver state. A fit
        that stops on that monitor discards the round's step, which then changed
        nothing a later fit (``warm_start``) would read."""
        return getattr(self, "_stateless", False)

    def run_round(self, solver, rnd, jobs, *, retry=False):
        replies, failures, _ = self._round(solver, rnd, jobs, retry, None)
        return replies, failures

    def run_round_monitored(self, solver, rnd, jobs, theta, *, retry=False):
        """:meth:`run_round` whose tasks also run each client's ``client_monitor`` at
        ``theta`` (one task per worker and round instead of two). Returns ``(replies,
        failures, monitored)``, ``monitored[j]`` client ``j``'s monitor reply (the
        clients whose step and monitor ran)."""
        return self._round(solver, rnd, jobs, retry, np.asarray(theta, dtype=float))

    def _round(self, solver, rnd, jobs, retry, monitor):
        head = (self._token, self._solver_future(solver))
        failures = self._replace_lost([j for j, _, _ in jobs])
        runnable = [job for job in jobs if job[0] not in failures]
        label = f"round {rnd}"
        results = self._dispatch(_worker_round, head, runnable, label, monitor)
        if retry:
            again = [job for job in runnable if isinstance(results[job[0]], ClientFailure)
                     and not (results[job[0]].state_lost or results[job[0]].diverged)]
            for job in again:
                j = job[0]
                failure = results[j]
                moved = (self._replace_lost([j], dead={failure.worker}).get(j)
                         if failure.worker_lost
                         else self._move(j, f"it failed on worker {failure.worker}"))
                if moved is not None:
                    failures[j] = moved
                    results.pop(j)
            retried = [job for job in again if job[0] in results]
            if retried:
                results.update(self._dispatch(_worker_round, head, retried, label, monitor))
        replies, monitored = {}, {}
        for j, value in results.items():
            if isinstance(value, _Fused):
                value, carried = value.reply, value.monitored
                if carried is not None:
                    monitored[j] = carried
            (failures if isinstance(value, ClientFailure) else replies)[j] = value
        return replies, failures, monitored

    def _solver_future(self, solver):
        """The solver, scattered to every worker when its digest changes (its first
        round, or a server-side change of its attributes); else the future of the
        copy already there: only its key travels with a round's tasks."""
        try:
            blob = pickle.dumps(solver, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - a solver of the user's (a lambda): Dask's pickler
            import cloudpickle

            blob = cloudpickle.dumps(solver)
        digest = hashlib.sha256(blob).hexdigest()
        if self._solver[0] != digest:  # the old copy is released with its future
            # a new key each time: a solver changed back must not meet its released copy
            key = f"skfed-solver-{self._token[:8]}-{self.solver_scatters_}-{digest[:16]}"
            future = self._client.scatter({key: solver}, broadcast=True, hash=False)[key]
            self._solver = (digest, future)
            self.solver_scatters_ += 1
        return self._solver[1]

    def map(self, fn, tasks):
        jobs = [(j, args) for j, args in tasks]
        failures = self._replace_lost(sorted({j for j, _ in jobs}))
        label = getattr(fn, "__name__", "map")
        results = self._dispatch(_worker_map, (fn,), [t for t in jobs if t[0] not in failures],
                                 label)
        lost = [j for j, v in results.items() if isinstance(v, ClientFailure) and v.worker_lost]
        if lost:  # a worker died under this call: re-place and run those again once
            failures.update(self._replace_lost(lost, dead={results[j].worker for j in lost}))
            again = [t for t in jobs if t[0] in lost and t[0] not in failures]
            results.update(self._dispatch(_worker_map, (fn,), again, label))
        failures.update({j: v for j, v in results.items() if isinstance(v, ClientFailure)})
        if failures:
            j = min(failures)
            raise ClientFailureError(
                f"client {self.labels[j]!r} could not run {getattr(fn, '__name__', fn)!r} on "
                f"worker {failures[j].worker}: {failures[j].error}\n{failures[j].traceback}")
        return [results[j] for j, _ in jobs]

    # -- end of fit ----------------------------------------------------------
    def collect_states(self):
        n = len(self.clients)
        if self._stateless:
            return [None] * n
        by_worker = {}
        for j in range(n):
            by_worker.setdefault(self._where[j], []).append(j)
        futures = {w: self._client.submit(
            _take_states, self._token, idx, False,
            *{self._data[j].key: self._data[j] for j in idx}.values(),
            workers=[w], allow_other_workers=False, pure=False)
            for w, idx in by_worker.items()}
        self._wait(futures, "collecting the solver states",
                   {w: [(j,) for j in idx] for w, idx in by_worker.items()})
        live = self._workers()
        gone = [j for w, idx in by_worker.items() for j in idx
                if futures[w].status != "finished" and w not in live]
        if gone:  # a worker that left at the very end took its clients' states with it
            raise ClientFailureError(
                f"client(s) {', '.join(repr(self.labels[j]) for j in gone)}: their solver "
                "state was lost with their worker after the last round.")
        states = {}
        for part in self._client.gather(list(futures.values())):
            states.update(part)
        return [states[j] for j in range(n)]

    def close(self):
        client = getattr(self, "_client", None)
        if client is not None:
            try:
                client.run(_drop_store, self._token)
                held = list({f.key: f for f in getattr(self, "_data", {}).values()}.values())
                if getattr(self, "_solver", (None, None))[1] is not None:
                    held.append(self._solver[1])
                client.cancel(held)
            finally:
                if self._owns_client:
                    client.close()
        self._client, self._data, self._solver = None, {}, (None, None)
        super().close()
