"""The Dask executor's round near its floor (issue 37, item 5).

One task per worker and round on resident data and states: the solver named by
its key (sent again only when its digest changes) and, for a stateless fit, the
monitoring pass of a model carried by the next round's tasks. Every figure is
the in-process fit's bit for bit. Runs on an in-process ``LocalCluster``;
``benchmarks/bench_dask_rounds.py`` times it against a no-op Dask round.
"""

import re
import time

import numpy as np
import pytest

distributed = pytest.importorskip(
    "distributed", reason="the Dask executor needs the optional extra: pip install 'skfed[dask]'")

from skfed import FedLasso  # noqa: E402
from skfed.data import FederatedDataset  # noqa: E402
from skfed.datafits import ClientObjective, Quadratic  # noqa: E402
from skfed.exceptions import ClientDroppedWarning, ClientFailure  # noqa: E402
from skfed.executors import DaskExecutor, dask_executor  # noqa: E402
from skfed.executors.base import client_round  # noqa: E402
from skfed.federation.layout import Layout  # noqa: E402
from skfed.federation.rounds import client_monitor  # noqa: E402
from skfed.federation.session import payload_nbytes  # noqa: E402
from skfed.solvers import FedAvg  # noqa: E402

from .conftest import fit_quietly  # noqa: E402

@pytest.fixture(scope="module")
def sites():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(180, 12))
    y = X[:, :4] @ [1.5, -1.0, 0.5, 2.0] + rng.normal(size=180)
    return X, y, np.array([f"site-{k}" for k in np.arange(180) % 6])


class _Dispatches:
    """Counts the executor's dispatches: rounds (with or without the monitor) and
    monitoring passes, each with its number of tasks (one per worker used)."""

    def __init__(self, monkeypatch):
        self.calls = []
        original = DaskExecutor._dispatch

        def spy(executor, func, head, jobs, label, monitor=None):
            workers = {executor._where[job[0]] for job in jobs}
            kind = ("monitor" if func is dask_executor._worker_map and head[0] is client_monitor
                    else "round+monitor" if monitor is not None
                    else "round" if func is dask_executor._worker_round else "other")
            self.calls.append((kind, len(workers)))
            return original(executor, func, head, jobs, label, monitor)

        monkeypatch.setattr(DaskExecutor, "_dispatch", spy)

    def count(self, kind):
        return sum(1 for k, _ in self.calls if k == kind)


def _history(est):
    h = est.history_
    return np.column_stack([h["objective"], h["stationarity"], h["bytes_up"],
                            h["bytes_down"], h["monitor_bytes"]])


def _same_fit(a, b):
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.intercept_, b.intercept_)
    np.testing.assert_array_equal(_history(a), _history(b))  # NaN where both are NaN
    assert a.n_iter_ == b.n_iter_


@pytest.mark.parametrize("solver", ["fedavg", "fedprox", "feddualavg"])
def test_a_stateless_round_is_one_task_per_worker_bit_for_bit(dask_client, sites, monkeypatch,
                                                              solver):
    """Each round is one dispatch (its step and the previous model's monitor), one task
    per worker; the monitoring passes of their own do not grow with the rounds; the
    fit, its history and its byte counts are the in-process fit's exactly."""
    X, y, site = sites
    spied = []
    for max_rounds in (4, 8):
        reference = fit_quietly(FedLasso(alpha=0.05, solver=solver, max_rounds=max_rounds,
                                         tol=0), X, y, clients=site)
        dispatches = _Dispatches(monkeypatch)
        executor = DaskExecutor()
        est = fit_quietly(FedLasso(alpha=0.05, solver=solver, max_rounds=max_rounds, tol=0,
                                   executor=executor), X, y, clients=site)
        monkeypatch.undo()
        _same_fit(est, reference)
        rounds_run = [c for c in dispatches.calls if c[0].startswith("round")]
        assert len(rounds_run) == max_rounds  # no retries, no extra round
        assert dispatches.count("round+monitor") == max_rounds - 1  # the first has no model
        assert all(tasks == 2 for _, tasks in rounds_run)  # one per worker, 6 sites on 2
        assert executor.solver_scatters_ == 1
        spied.append(dispatches.count("monitor"))
    assert spied[0] == spied[1] <= 3  # the start, the last round (and the polish)


def test_a_fit_stopped_by_a_carried_monitor_is_the_in_process_fit(dask_client, sites):
    """tol > 0: the round whose carried monitor meets the stopping rule is spent on
    monitoring only, on Dask as in process (whose rounds carry the monitor too): same
    rounds, same model, same history, the last record's monitor bytes counting that
    round's step, which was really sent (the round loop's accounting of a fused
    monitor)."""
    X, y, site = sites
    kwargs = dict(alpha=0.05, solver="fedprox", max_rounds=300, tol=1e-4)
    reference = fit_quietly(FedLasso(**kwargs), X, y, clients=site)
    est = fit_quietly(FedLasso(**kwargs, executor=DaskExecutor()), X, y, clients=site)
    assert 1 < est.n_iter_ < 300  # stopped by the rule, not the cap
    np.testing.assert_array_equal(est.coef_, reference.coef_)
    np.testing.assert_array_equal(est.intercept_, reference.intercept_)
    ours, theirs = _history(est), _history(reference)
    np.testing.assert_array_equal(ours, theirs)
    step = est.history_["bytes_up"][-1] + est.history_["bytes_down"][-1]  # any round's
    assert ours[-1, 4] == ours[-2, 4] + step  # the monitor's pass and the spent step


@pytest.mark.parametrize("solver", ["feddyn", "dualfl"])
def test_a_stateful_fit_keeps_its_monitoring_pass(dask_client, sites, monkeypatch, solver):
    """Clients holding solver state (duals): a step after the round that stops the fit
    would change them, so the monitor keeps its own pass; the fit and a warm start
    from its states are the in-process ones bit for bit."""
    X, y, site = sites
    fits = []
    for executor in ["sequential", DaskExecutor()]:
        dispatches = _Dispatches(monkeypatch)
        est = fit_quietly(FedLasso(alpha=0.05, solver=solver, max_rounds=4, tol=0,
                                   warm_start=True, executor=executor), X, y, clients=site)
        first = est.coef_.copy()
        fit_quietly(est.set_params(max_rounds=3), X, y, clients=site)  # from the states
        monkeypatch.undo()
        fits.append((first, est))
    assert dispatches.count("round+monitor") == 0 and dispatches.count("round") == 7
    np.testing.assert_array_equal(fits[1][0], fits[0][0])
    _same_fit(fits[1][1], fits[0][1])


def test_site_resident_rounds_carry_the_monitor(dask_client, sites, monkeypatch):
    """Rows scattered to named workers (the site-resident path: a site's client is
    pinned to its worker): one dispatch per round, and the model of the same path
    with a monitoring pass of its own, bit for bit."""
    X, y, site = sites
    workers = {name: {"cls": distributed.Worker, "options": {"name": name, "nthreads": 1}}
               for name in ("north", "south")}
    fits = []
    with distributed.SpecCluster(workers=workers, scheduler={
            "cls": distributed.Scheduler, "options": {"dashboard_address": None}}) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        for fused in (True, False):
            data = FederatedDataset.from_arrays(X, y, site).scatter(
                client, placement={f"site-{k}": ("north", "south")[k % 2] for k in range(6)})
            dispatches = _Dispatches(monkeypatch)
            if not fused:
                monkeypatch.setattr(DaskExecutor, "fuses_monitor", False)
            fits.append(fit_quietly(FedLasso(alpha=0.05, solver="fedavg", max_rounds=5,
                                             tol=0), data))
            monkeypatch.undo()
            assert dispatches.count("round+monitor") == (4 if fused else 0)
            assert dispatches.count("monitor") == (2 if fused else 6)
    _same_fit(*fits)


# -- the executor's round itself -----------------------------------------------------
class _Scaled:
    """A minimal stateless solver: each client replies ``k`` times its column sums
    (``k`` an attribute the server may change between rounds)."""

    requires_full_participation = False

    def __init__(self, k):
        self.k = k

    def client_update(self, client, state, message, rng):
        return {"s": self.k * message["w"] * client.X.sum(axis=0)}, state


class _BrokenMonitor(ClientObjective):
    """A client whose loss cannot be evaluated (its step still runs)."""

    def value_and_gradient(self, theta):
        raise RuntimeError("no loss here")


def _objectives(n=5, d=4, broken=()):
    rng = np.random.default_rng(3)
    layout = Layout(1, d)
    return [(_BrokenMonitor if j in broken else ClientObjective)(
        Quadratic(), rng.normal(size=(20 + j, d)), rng.normal(size=(20 + j, 1)),
        np.ones(20 + j), layout) for j in range(n)]


def _jobs(n, w=1.0):
    return [(j, {"w": w}, 11 + j) for j in range(n)]


def test_a_round_carrying_the_monitor_answers_both_exactly(dask_client):
    """The monitor a round carries is ``client_monitor`` at its model and the replies
    are ``client_round``'s, bit for bit; a client whose monitor raises still steps and
    is left out of the monitored (the round loop then runs a pass of its own)."""
    objs = _objectives(broken={3})
    theta = np.linspace(-1.0, 1.0, objs[0].layout.size)
    solver = _Scaled(2.0)
    ex = DaskExecutor()
    ex.open(objs)
    try:
        ex.place_states([None] * len(objs))
        assert ex.fuses_monitor
        replies, failures, monitored = ex.run_round_monitored(solver, 1, _jobs(5), theta)
    finally:
        ex.close()
    assert failures == {} and sorted(monitored) == [0, 1, 2, 4]
    for j, obj in enumerate(objs):
        expected, _ = client_round(obj, solver, None, {"w": 1.0}, 11 + j)
        np.testing.assert_array_equal(replies[j]["s"], expected["s"])
        if j != 3:
            value, grad = client_monitor(obj, theta)
            assert monitored[j][0] == value
            np.testing.assert_array_equal(monitored[j][1], grad)


def test_the_solver_travels_once_and_again_when_it_changes(dask_client):
    """Rounds name the scattered solver by its key; a solver the server changed
    between rounds is sent again (its digest differs), so no worker runs a stale copy."""
    objs = _objectives()
    solver = _Scaled(2.0)
    ex = DaskExecutor()
    ex.open(objs)
    try:
        ex.place_states([None] * len(objs))
        first, _ = ex.run_round(solver, 1, _jobs(5))
        again, _ = ex.run_round(solver, 2, _jobs(5))
        assert ex.solver_scatters_ == 1
        solver.k = 3.0  # the same object, changed in place
        changed, _ = ex.run_round(solver, 3, _jobs(5))
        assert ex.solver_scatters_ == 2
        held = [k for k in dask_client.who_has() if str(k).startswith("skfed-solver-")]
    finally:
        ex.close()
    for j in range(5):
        np.testing.assert_array_equal(again[j]["s"], first[j]["s"])
        np.testing.assert_array_equal(changed[j]["s"], 1.5 * first[j]["s"])
    assert len(held) == 1  # the stale copy was released


def test_a_stateful_executor_does_not_fuse(dask_client):
    objs = _objectives(2)
    ex = DaskExecutor()
    assert not ex.fuses_monitor  # before a fit opens
    ex.open(objs)
    try:
        ex.place_states([{"dual": np.zeros(4)}, {"dual": np.ones(4)}])
        assert not ex.fuses_monitor
        ex.place_states([None, None])
        assert ex.fuses_monitor
    finally:
        ex.close()


def _transfer_log(client):
    logs = client.run(lambda dask_worker: list(dask_worker.transfer_outgoing_log))
    return [entry for log in logs.values() for entry in log]


def test_a_fused_round_sends_the_replies_and_monitors_and_nothing_else(dask_client,
                                                                       monkeypatch):
    """What the workers send back for a round is the solver's replies plus the monitor
    replies it carried (Dask's container overhead aside), measured by Dask itself."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 1500))
    y = X[:, :5].sum(axis=1) + rng.normal(size=240)
    carried = []
    original = DaskExecutor.run_round_monitored

    def spy(self, solver, rnd, jobs, theta, *, retry=False):
        out = original(self, solver, rnd, jobs, theta, retry=retry)
        carried.extend(payload_nbytes(reply) for reply in out[2].values())
        return out

    monkeypatch.setattr(DaskExecutor, "run_round_monitored", spy)
    before = {e["stop"] for e in _transfer_log(dask_client)}
    est = fit_quietly(FedLasso(alpha=0.1, solver="fedavg", max_rounds=6, tol=0,
                               executor=DaskExecutor()), X, y, clients=np.arange(240) % 6)
    sent = [e for e in _transfer_log(dask_client) if e["stop"] not in before
            and any(re.search(r"^skfed-\w+-\d+-round\d+-", str(k)) for k in e["keys"])]
    dask_up = sum(e["total"] for e in sent)
    ours = int(est.history_["bytes_up"].sum()) + sum(carried)
    assert len(carried) == 5 * 6  # rounds 2..6 carried round 1..5's monitors
    assert 0 <= dask_up - ours <= 1000 * (6 * 6 + len(carried))
    assert ours > 0.95 * dask_up


def test_a_failed_step_in_a_fused_round_is_reported_not_monitored(dask_client):
    """A client whose step raises: a failure for the round loop (which drops or
    stops), and no monitor from it, so the loop runs the monitor's pass of its own."""
    objs = _objectives(3)

    class Failing(_Scaled):
        def client_update(self, client, state, message, rng):
            if client.n_samples == 21:
                raise ValueError("injected")
            return super().client_update(client, state, message, rng)

    ex = DaskExecutor()
    ex.open(objs)
    try:
        ex.place_states([None] * 3)
        replies, failures, monitored = ex.run_round_monitored(
            Failing(1.0), 1, _jobs(3), np.zeros(objs[0].layout.size))
    finally:
        ex.close()
    assert sorted(replies) == [0, 2] and sorted(monitored) == [0, 2]
    assert isinstance(failures[1], ClientFailure) and "injected" in failures[1].error


class _WorkerDiesInRound(FedAvg):
    """FedAvg whose client with ``victim`` rows closes its own worker while its task
    runs the message of round index ``when`` (the loop's round ``when + 1``): a worker
    lost under a round, its data with it."""

    def __init__(self, when, victim, **kwargs):
        super().__init__(**kwargs)
        self.when, self.victim = when, victim

    def client_update(self, client, state, message, rng):
        if message["round"] == self.when and client.n_samples == self.victim:
            worker = distributed.get_worker()
            worker.loop.add_callback(worker.close)
            time.sleep(1.0)  # the worker closes under the task
        return super().client_update(client, state, message, rng)


def test_a_worker_lost_under_a_fused_round_is_survived(sites):
    """The worker holding a site dies while the round that carries the monitor runs
    (its futures come back cancelled, its data forgotten): the round goes on without
    its clients (FedAvg allows it), their rows are sent to the other worker, and the
    monitor of the round's model is a pass of its own over every site."""
    X, y, site = sites
    X, y, site = X[:-1], y[:-1], site[:-1]  # site-5 has 29 rows: the victim
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        est = FedLasso(alpha=0.05, solver=_WorkerDiesInRound(2, 29), max_rounds=6, tol=0,
                       executor=DaskExecutor(cluster.scheduler_address))
        with pytest.warns(ClientDroppedWarning, match="round 3 went on without"):
            fit_quietly(est, X, y, clients=site)
        assert len(client.scheduler_info()["workers"]) == 1
    assert est.n_iter_ == 6 and [d["round"] for d in est.history_.dropped] == [3] * 3
    assert est.history_.placement_bytes > X.nbytes  # the lost sites' rows, sent again
    assert np.all(np.isfinite(est.history_["objective"]))  # every round monitored
