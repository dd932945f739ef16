"""A failing client, a dying worker, an interrupt or a timeout never corrupts the model.

Faults are injected by patching a solver's ``client_update`` at class level:
the in-process Dask cluster runs in this process, so the patched function
(module level, pickled by reference) runs on its workers too.
"""

import time
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from skfed import FedLasso
from skfed.exceptions import ClientDroppedWarning, ClientFailureError
from skfed.solvers import DualFL, FedAvg, FedDyn, FedMID

from .conftest import fit_quietly

SIZES = np.arange(20, 28)  # one size per client, so a client is known by its size
TARGET = 23                # the faulty client (label "site-3")
_CALLS = {}                # client_update calls per client size (one per round when all take part)
_FIRST_WORKER = {}
_FAULTS = []


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    labels = np.repeat([f"site-{k}" for k in range(len(SIZES))], SIZES)
    X = rng.normal(size=(len(labels), 12)) + rng.normal(size=(len(SIZES), 12)).repeat(SIZES, 0)
    y = X[:, :3].sum(axis=1) + rng.normal(size=len(labels))
    _CALLS.clear()
    _FIRST_WORKER.clear()
    _FAULTS.clear()
    return X, y, labels


def _worker_name():
    try:
        from distributed import get_worker

        return get_worker().name
    except (ImportError, ValueError):
        return None


def _patch(monkeypatch, solver_cls, should_fail, exc=RuntimeError):
    """Make ``solver_cls.client_update`` raise for the target client when asked."""
    original = solver_cls.client_update

    def client_update(self, client, state, message, rng):
        n = client.n_samples
        _CALLS[n] = _CALLS.get(n, 0) + 1
        if n == TARGET and should_fail(_CALLS[n]):
            _FAULTS.append(_CALLS[n])
            raise exc(f"injected fault in call {_CALLS[n]}")
        return original(self, client, state, message, rng)

    monkeypatch.setattr(solver_cls, "client_update", client_update)


def _executors():
    return ["sequential", "dask"]  # the Dask cases skip, with the reason, without the extra


@pytest.fixture
def cluster():
    distributed = pytest.importorskip(
        "distributed", reason="Dask faults need the optional extra: pip install 'skfed[dask]'")
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cl, distributed.Client(cl) as client:
        yield client


def _executor(name, request):
    if name == "dask":
        request.getfixturevalue("cluster")
    return name


@pytest.mark.parametrize("executor", _executors())
@pytest.mark.parametrize("solver", [FedAvg(local_steps=2), FedDyn()], ids=["fedavg", "feddyn"])
def test_a_raising_client_is_dropped_from_its_round(data, monkeypatch, request, executor, solver):
    """Partial-participation solvers go on without the client, and still reach the optimum."""
    X, y, labels = data
    exact = isinstance(solver, FedDyn)
    est = FedLasso(alpha=0.05, solver=solver, max_rounds=300 if exact else 30,
                   tol=1e-9 if exact else 0, executor=_executor(executor, request))
    clean = fit_quietly(est.set_params(executor="sequential"), X, y, clients=labels).coef_.copy()

    _patch(monkeypatch, type(solver), lambda call: call == 3)
    est.set_params(executor=_executor(executor, request))
    with pytest.warns(ClientDroppedWarning, match="round 3 went on without 1 failed client"):
        fit_quietly(est, X, y, clients=labels)
    assert [(d["round"], d["client"]) for d in est.history_.dropped] == [(3, "site-3")]
    assert "injected fault" in est.history_.dropped[0]["error"]
    assert est.history_["n_dropped"][3] == 1 and est.history_["n_participants"][3] == 7
    assert est.history_["n_dropped"].sum() == 1
    if exact:  # exact solver: a dropped round leaves the fixed point alone
        np.testing.assert_allclose(est.coef_, clean, rtol=1e-6, atol=1e-8)
    else:  # FedAvg is biased by client drift; the drop must not break it
        assert np.all(np.isfinite(est.coef_))
        np.testing.assert_allclose(est.coef_, clean, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("executor", _executors())
def test_a_solver_needing_everyone_stops_with_the_client_and_round(data, monkeypatch, request,
                                                                   executor):
    X, y, labels = data
    fitted = fit_quietly(FedLasso(alpha=0.05, solver="dualfl", max_rounds=5, tol=0), X, y,
                         clients=labels)
    before = (fitted.coef_.copy(), fitted.n_iter_, fitted.history_)
    _patch(monkeypatch, DualFL, lambda call: call >= 2)  # fails wherever it runs
    fresh = FedLasso(alpha=0.05, solver="dualfl", max_rounds=5, tol=0,
                     executor=_executor(executor, request))
    with pytest.raises(ClientFailureError, match="round 2 failed: client 'site-3'.*injected fault"
                                                 ".*'dualfl' needs every client"):
        fresh.fit(X, y, clients=labels)
    with pytest.raises(NotFittedError):
        check_is_fitted(fresh)
    fitted.set_params(executor=_executor(executor, request), max_rounds=8)
    with pytest.raises(ClientFailureError):
        fitted.fit(X, y, clients=labels)
    np.testing.assert_array_equal(fitted.coef_, before[0])  # the previous fit, untouched
    assert fitted.n_iter_ == before[1] and fitted.history_ is before[2]


def test_dask_retries_a_failed_client_on_another_worker(data, monkeypatch, cluster):
    """DualFL needs everyone: a client failing on one worker is run again elsewhere,
    its dual state moved with it, and the model is the same as without the fault."""
    X, y, labels = data

    def fails_on_its_first_worker(call):
        first = _FIRST_WORKER.setdefault(TARGET, _worker_name())
        return call >= 2 and _worker_name() == first

    est = FedLasso(alpha=0.05, solver="dualfl", max_rounds=6, tol=0)
    clean = fit_quietly(est, X, y, clients=labels).coef_.copy()
    _patch(monkeypatch, DualFL, fails_on_its_first_worker)
    faulty = fit_quietly(FedLasso(alpha=0.05, solver="dualfl", max_rounds=6, tol=0,
                                  executor="dask"), X, y, clients=labels)
    assert _FAULTS == [2]  # failed once, in round 2, then ran on the other worker
    assert faulty.history_.dropped == []
    np.testing.assert_allclose(faulty.coef_, clean, rtol=1e-12, atol=1e-14)


class _KillingDaskExecutor:
    """Builds a DaskExecutor that closes a worker just before round ``kill_round``."""

    def __new__(cls, kill_round, worker_name, **kwargs):
        from skfed.executors import DaskExecutor

        class Killing(DaskExecutor):
            def run_round(self, solver, rnd, jobs, *, retry=False):
                if rnd == kill_round:
                    _kill(self._client, worker_name)
                return super().run_round(solver, rnd, jobs, retry=retry)

            def run_round_monitored(self, solver, rnd, jobs, theta, *, retry=False):
                if rnd == kill_round:  # a round carrying the monitor (stateless solvers)
                    _kill(self._client, worker_name)
                return super().run_round_monitored(solver, rnd, jobs, theta, retry=retry)

        return Killing(**kwargs)


def _kill(client, name):
    cluster = client.cluster
    worker = cluster.workers[name]
    held = set(worker.data)
    client.sync(worker.close)
    deadline = time.time() + 10  # until the scheduler has noticed
    while time.time() < deadline and any(
            w["name"] == name for w in client.scheduler_info()["workers"].values()):
        time.sleep(0.05)
    assert held, "the killed worker held no client data; the test would show nothing"


def test_a_dead_worker_s_clients_move_when_the_solver_is_stateless(data, cluster):
    X, y, labels = data
    clean = fit_quietly(FedLasso(alpha=0.05, solver="fedavg", max_rounds=6, tol=0), X, y,
                        clients=labels)
    est = FedLasso(alpha=0.05, solver="fedavg", max_rounds=6, tol=0,
                   executor=_KillingDaskExecutor(kill_round=3, worker_name=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClientDroppedWarning)  # nothing is dropped: re-placed
        fit_quietly(est, X, y, clients=labels)
    np.testing.assert_allclose(est.coef_, clean.coef_, rtol=1e-12, atol=1e-14)
    # the lost clients' data was sent again: more placement than the first time
    assert est.history_.placement_bytes > X.nbytes + y.nbytes
    assert len(cluster.scheduler_info()["workers"]) == 2


@pytest.mark.parametrize("solver", ["dualfl", "feddyn"])
def test_a_dead_worker_s_lost_solver_state_stops_the_fit(data, cluster, solver):
    X, y, labels = data
    est = FedLasso(alpha=0.05, solver=solver, max_rounds=6, tol=0,
                   executor=_KillingDaskExecutor(kill_round=3, worker_name=0))
    with pytest.raises(ClientFailureError, match="round 3 failed: client 'site-\\d'.*solver state"
                                                 ".*lost with its worker"):
        est.fit(X, y, clients=labels)
    with pytest.raises(NotFittedError):
        check_is_fitted(est)


def test_a_pinned_client_is_not_moved_off_its_dead_worker(data, cluster):
    X, y, labels = data
    workers = {w["name"]: a for a, w in cluster.scheduler_info()["workers"].items()}
    est = FedLasso(alpha=0.05, solver="fedavg", max_rounds=6, tol=0,
                   executor=_KillingDaskExecutor(kill_round=3, worker_name=0,
                                                 placement={"site-3": workers[0]}))
    with pytest.warns(ClientDroppedWarning, match="round 3 .*'site-3'.*pinned to worker"), \
            pytest.raises(ClientFailureError, match="client 'site-3'.*pinned to worker"):
        est.fit(X, y, clients=labels)
    with pytest.raises(NotFittedError):
        check_is_fitted(est)


@pytest.mark.parametrize("executor", _executors())
def test_keyboard_interrupt_leaves_the_estimator_as_it_was(data, monkeypatch, request, executor):
    X, y, labels = data
    fitted = fit_quietly(FedLasso(alpha=0.05, solver="fedavg", max_rounds=4, tol=0), X, y,
                         clients=labels)
    coef, history = fitted.coef_.copy(), fitted.history_
    original = FedAvg.aggregate
    rounds = []

    def interrupted(self, server, replies, weights, participants):
        rounds.append(1)
        if len(rounds) == 3:  # Ctrl-C lands in the server's loop, mid-fit
            raise KeyboardInterrupt
        return original(self, server, replies, weights, participants)

    monkeypatch.setattr(FedAvg, "aggregate", interrupted)
    fresh = FedLasso(alpha=0.05, solver="fedavg", max_rounds=10, tol=0,
                     executor=_executor(executor, request))
    with pytest.raises(KeyboardInterrupt):
        fresh.fit(X, y, clients=labels)
    with pytest.raises(NotFittedError):
        check_is_fitted(fresh)
    rounds.clear()
    fitted.set_params(max_rounds=10, executor=_executor(executor, request))
    with pytest.raises(KeyboardInterrupt):
        fitted.fit(X, y, clients=labels)
    np.testing.assert_array_equal(fitted.coef_, coef)
    assert fitted.history_ is history
    if executor == "dask":  # nothing left behind on the cluster
        client = request.getfixturevalue("cluster")
        deadline = time.time() + 5  # releases reach the scheduler asynchronously
        while any(client.has_what().values()) and time.time() < deadline:
            time.sleep(0.05)
        assert not any(client.has_what().values())
        stores = client.run(lambda dask_worker: dask_worker.__dict__.get("_skfed_states", {}))
        assert not any(stores.values())


def test_dask_round_timeout(data, monkeypatch, cluster):
    from skfed.executors import DaskExecutor

    X, y, labels = data
    original = FedAvg.client_update

    def slow(self, client, state, message, rng):
        if client.n_samples == TARGET and message["round"] == 1:
            time.sleep(2.0)
        return original(self, client, state, message, rng)

    monkeypatch.setattr(FedAvg, "client_update", slow)
    est = FedLasso(alpha=0.05, solver="fedavg", max_rounds=5, tol=0,
                   executor=DaskExecutor(timeout=0.5))
    with pytest.raises(TimeoutError, match="round 2: no reply within timeout=0.5 s from "
                                           "client") as info:
        est.fit(X, y, clients=labels)
    assert "'site-3'" in str(info.value)  # the late site is named
    with pytest.raises(NotFittedError):
        check_is_fitted(est)


@pytest.mark.parametrize("solver", ["fedmid", "fedmid-osp", "feddualavg"])
def test_a_diverging_client_stops_the_fit_instead_of_being_dropped(solver):
    """Too large a step is not a fault: the fit raises FloatingPointError, drops nothing.

    The nuclear norm's SVD used to fail on the non-finite local iterate with
    LinAlgError, which partial participation then treated as a failed client
    and dropped, round after round.
    """
    from skfed import FedLowRank
    from skfed.datasets import make_federated_low_rank
    from skfed.solvers import SOLVERS

    X, y, clients, _ = make_federated_low_rank("II", matrix_shape=(8, 8), n_clients=6,
                                               n_samples_per_client=30, random_state=0)
    est = FedLowRank(alpha=0.1, solver=SOLVERS[solver](client_lr=5.0, batch_size=5,
                                                       local_epochs=1),
                     participation=0.5, max_rounds=30, tol=0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClientDroppedWarning)
        with pytest.raises(FloatingPointError, match="diverged.*lower the step size|diverged"):
            fit_quietly(est, X, y, clients=clients)
    with pytest.raises(NotFittedError):
        check_is_fitted(est)


def test_a_non_finite_model_never_reaches_a_prox():
    from skfed.federation.layout import Layout
    from skfed.penalties import NuclearNorm

    layout = Layout(n_outputs=1, n_features=4, fit_intercept=True, coef_shape=(2, 2))
    theta = np.array([1.0, np.nan, 0.0, 2.0, 0.5])
    with pytest.raises(FloatingPointError, match="lower the step size"):
        layout.apply_prox(NuclearNorm(0.1), theta, 0.1)


def test_a_diverging_client_message_names_round_client_and_remedy_once(data):
    """The error says where it diverged and what to do, without repeating itself."""
    X, y, labels = data
    est = FedLasso(alpha=0.1, solver=FedMID(client_lr=1e3, local_steps=3), participation=0.5,
                   max_rounds=50, tol=0, random_state=0)
    with pytest.raises(FloatingPointError) as info:
        fit_quietly(est, X, y, clients=labels)
    message = str(info.value).split("Traceback")[0]
    assert "diverged" in message and message.count("step size") == 1
    assert ".." not in message
