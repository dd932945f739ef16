"""DaskExecutor: same model as every other executor, data resident, honest bytes.

Runs on an in-process ``LocalCluster(processes=False)``; one ``slow`` test
uses worker processes. Skipped with the reason when ``skfed[dask]`` is not
installed (``.ci/run`` installs it).
"""

import re
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

distributed = pytest.importorskip(
    "distributed", reason="the Dask executor needs the optional extra: pip install 'skfed[dask]'")

from dask.sizeof import sizeof  # noqa: E402

from skfed import FedLasso, FedLogisticRegression  # noqa: E402
from skfed.datafits import ClientObjective, Quadratic  # noqa: E402
from skfed.federation.layout import Layout  # noqa: E402
from skfed.executors import DaskExecutor, LokyExecutor  # noqa: E402
from skfed.executors import dask_executor  # noqa: E402
from skfed.solvers import SOLVERS  # noqa: E402

from .conftest import fit_quietly  # noqa: E402


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)[:240]
    return X, y[:240], np.arange(240) % 6


def _participation(name):
    return 1.0 if SOLVERS[name].requires_full_participation else 0.5


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_same_coef_on_every_executor_for_every_solver(dask_client, cancer, name):
    """Same random_state, same model: sequential, threads, loky and Dask."""
    X, y, clients = cancer
    coefs = []
    for executor in ["sequential", "threads", LokyExecutor(n_jobs=2), DaskExecutor()]:
        est = FedLogisticRegression(C=1.0, solver=name, participation=_participation(name),
                                    max_rounds=4, tol=0, executor=executor, n_jobs=2,
                                    random_state=3)
        fit_quietly(est, X, y, clients=clients)
        coefs.append(np.r_[est.coef_.ravel(), est.intercept_])
        assert est.n_iter_ == 4
    for other in coefs[1:]:
        np.testing.assert_allclose(other, coefs[0], rtol=1e-12, atol=1e-14)


def _estimator_cases():
    from sklearn.datasets import load_iris

    from skfed import FedElasticNet, FedLinearSVC, FedLowRank

    X, y = load_iris(return_X_y=True)
    clients = np.arange(len(y)) % 5
    rng = np.random.default_rng(0)
    Y = X @ rng.normal(size=(4, 3))
    return [
        (FedElasticNet(alpha=0.05, l1_ratio=0.5, solver="feddyn", participation=0.6), X, Y[:, 0]),
        (FedLinearSVC(loss="hinge", C=0.1, solver="dualfl"), X, y),    # sample-sized dual state
        (FedLinearSVC(loss="hinge", penalty="l1", C=0.1, solver="fedmls"), X, y),
        (FedLogisticRegression(C=0.5, solver="scaffold"), X, y),         # multinomial
        (FedLowRank(alpha=0.1, solver="fedadmm"), X, Y),
    ], clients


@pytest.mark.parametrize("case", range(5))
def test_every_estimator_gives_the_same_model_on_dask(dask_client, case):
    cases, clients = _estimator_cases()
    est, X, y = cases[case]
    coefs = []
    for executor in ["sequential", DaskExecutor()]:
        est.set_params(executor=executor, max_rounds=6, tol=0, random_state=0)
        fit_quietly(est, X, y, clients=clients)
        coefs.append(np.r_[np.ravel(est.coef_), np.ravel(est.intercept_)])
    np.testing.assert_allclose(coefs[1], coefs[0], rtol=1e-12, atol=1e-14)


def test_executor_by_name_uses_the_running_client(dask_client, cancer):
    X, y, clients = cancer
    a = fit_quietly(FedLasso(alpha=0.05, max_rounds=5, tol=0, executor="dask"), X, y,
                    clients=clients)
    b = fit_quietly(FedLasso(alpha=0.05, max_rounds=5, tol=0), X, y, clients=clients)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-12, atol=1e-14)
    assert a.history_.placement_bytes >= X.nbytes  # the data went to the workers once
    assert b.history_.placement_bytes == 0


def _objectives(n_clients=4, n=30, d=5, seed=0):
    rng = np.random.default_rng(seed)
    lay = Layout(1, d)
    return [ClientObjective(Quadratic(), rng.normal(size=(n + j, d)), rng.normal(size=(n + j, 1)),
                            np.ones(n + j), lay) for j in range(n_clients)]


def test_data_is_placed_once_and_pinned(dask_client):
    workers = dask_client.scheduler_info()["workers"]
    names = {str(w["name"]): addr for addr, w in workers.items()}
    objs = _objectives()
    ex = DaskExecutor(placement={"site-b": "1", "site-d": names["0"]})
    ex.open(objs, labels=["site-a", "site-b", "site-c", "site-d"])
    try:
        where = {j: dask_client.who_has(ex._data[j])[ex._data[j].key] for j in range(4)}
        assert all(len(w) == 1 for w in where.values())  # one copy, on one worker
        assert where[1] == [names["1"]] and where[3] == [names["0"]]
        # unpinned clients balance the rows over the workers
        assert {where[0][0], where[2][0]} == set(names.values())
        assert ex.map(lambda c, k: c.n_samples * k, [(2, (2,)), (0, (1,))]) == [64, 30]
        assert ex.placement_bytes_ == sum(sizeof(o) for o in objs)
        assert ex.placement_bytes_ >= sum(o.X.nbytes + o.Y.nbytes for o in objs)
    finally:
        ex.close()


@pytest.mark.parametrize("placement, match", [
    ({"site-z": "0"}, "placement names clients \\['site-z'\\]"),
    ({"site-a": "no-such-worker"}, "placement names workers \\['no-such-worker'\\]"),
])
def test_placement_errors(dask_client, placement, match):
    ex = DaskExecutor(placement=placement)
    with pytest.raises(ValueError, match=match):
        ex.open(_objectives(2), labels=["site-a", "site-b"])
    ex.close()


def test_no_running_client_is_a_clear_error(cancer, monkeypatch):
    X, y, clients = cancer

    def no_client():
        raise ValueError("No clients found")

    monkeypatch.setattr(distributed, "get_client", no_client)
    with pytest.raises(ValueError, match="found no running Dask client"):
        FedLasso(alpha=0.05, max_rounds=2, executor=DaskExecutor()).fit(X, y, clients=clients)


def test_bad_timeout(dask_client):
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        DaskExecutor(timeout=-1).open(_objectives(2))


def _worker_logs(client, which):
    logs = client.run(lambda dask_worker: list(getattr(dask_worker, which)))
    return [entry for log in logs.values() for entry in log]


_RECEIVED = []  # sizes of the messages the workers received (same process: inproc cluster)
_ORIGINAL_ROUND = dask_executor._worker_round


def _spy_round(token, solver, shards, jobs):
    """The worker's round task, measuring with Dask's sizeof what arrived."""
    _RECEIVED.extend(sizeof(message) for _, message, _ in jobs.items)
    return _ORIGINAL_ROUND(token, solver, shards, jobs)


def test_bytes_match_dask_transfer_counters(dask_client, monkeypatch):
    """bytes_up is what Dask's workers report sending; bytes_down what they receive."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 2000))
    y = X[:, :5].sum(axis=1) + rng.normal(size=240)
    clients = np.arange(240) % 6
    received = _RECEIVED
    received.clear()
    monkeypatch.setattr(dask_executor, "_worker_round", _spy_round)
    # the plain round's bytes (a round carrying the monitor: tests/test_dask_rounds.py)
    monkeypatch.setattr(DaskExecutor, "fuses_monitor", False)
    before = {e["stop"] for e in _worker_logs(dask_client, "transfer_outgoing_log")}
    est = fit_quietly(FedLasso(alpha=0.1, solver="fedavg", max_rounds=6, tol=0,
                               executor=DaskExecutor()), X, y, clients=clients)
    sent = [e for e in _worker_logs(dask_client, "transfer_outgoing_log")
            if e["stop"] not in before and any(re.search(r"^skfed-\w+-\d+-round\d+-", str(k))
                                               for k in e["keys"])]
    dask_up = sum(e["total"] for e in sent)
    ours_up = int(est.history_["bytes_up"].sum())
    ours_down = int(est.history_["bytes_down"].sum())
    n_messages = 6 * 6
    # Dask adds only container overhead (dicts, keys) to the arrays we count
    assert 0 <= dask_up - ours_up <= 1000 * n_messages
    assert ours_up > 0.95 * dask_up
    assert len(received) == n_messages
    assert 0 <= sum(received) - ours_down <= 1000 * n_messages
    # no client data crossed between workers during the rounds
    moved = _worker_logs(dask_client, "transfer_incoming_log")
    assert not any("skfed-data" in str(k) for e in moved for k in e["keys"])


def test_grid_search_on_the_dask_joblib_backend(dask_client, synthetic):
    """Coarse parallelism: whole fits as Dask tasks, through joblib."""
    import joblib
    from sklearn.model_selection import GridSearchCV, GroupKFold

    X, y, clients, _ = synthetic
    grid = {"alpha": [0.01, 0.1]}
    searches = []
    for backend in ["dask", "loky"]:
        search = GridSearchCV(FedLasso(max_rounds=500, tol=1e-4), grid, cv=GroupKFold(3),
                              n_jobs=-1)
        with joblib.parallel_config(backend=backend):
            search.fit(X, y, groups=clients, clients=clients)
        searches.append(search)
    np.testing.assert_allclose(searches[0].cv_results_["mean_test_score"],
                               searches[1].cv_results_["mean_test_score"], rtol=1e-12)
    assert searches[0].best_params_ == searches[1].best_params_


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dualfl", "feddyn", "scaffold", "feddualavg"])
def test_same_coef_with_worker_processes(cancer, name):
    X, y, clients = cancer
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster):
        coefs = []
        for executor in ["sequential", DaskExecutor()]:
            est = FedLogisticRegression(C=1.0, solver=name, participation=_participation(name),
                                        max_rounds=10, tol=0, executor=executor, random_state=0)
            coefs.append(fit_quietly(est, X, y, clients=clients).coef_)
    np.testing.assert_allclose(coefs[1], coefs[0], rtol=1e-12, atol=1e-14)


@pytest.mark.slow
def test_a_worker_killed_while_states_are_placed_costs_nothing(cancer, monkeypatch):
    """A real fault at the one moment the analyst still holds every client's data
    and solver state: a worker process exits after the data was shipped and before
    the states are placed. Its clients are shipped again to the live worker and
    the fit is the fault-free one exactly (this once hung CI: the state task waited
    for a worker address that no longer existed)."""
    import os
    import time

    X, y, clients = cancer
    kwargs = dict(C=1.0, solver="scaffold", max_rounds=5, tol=0, random_state=0)
    clean = fit_quietly(FedLogisticRegression(**kwargs), X, y, clients=clients).coef_
    place = DaskExecutor.place_states
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        victim = sorted(client.scheduler_info()["workers"])[0]

        def place_after_a_death(self, states):
            try:
                client.run(os._exit, 1, workers=[victim])
            except Exception:  # noqa: BLE001 - the worker dies before it can answer
                pass
            deadline = time.monotonic() + 60
            while victim in client.scheduler_info()["workers"]:
                assert time.monotonic() < deadline, "the scheduler never saw the worker die"
                time.sleep(0.05)
            return place(self, states)

        monkeypatch.setattr(DaskExecutor, "place_states", place_after_a_death)
        est = fit_quietly(FedLogisticRegression(**kwargs, executor=DaskExecutor()),
                          X, y, clients=clients)
    assert est.n_iter_ == 5
    assert est.history_.placement_bytes > X.nbytes  # the victim's clients were sent again
    np.testing.assert_allclose(est.coef_, clean, rtol=1e-12, atol=1e-14)


@pytest.mark.slow
def test_a_killed_worker_process_is_survived_by_a_stateless_solver(cancer):
    """A real fault: a worker process exits mid-fit; its nanny restarts it empty,
    the clients' data is sent again and the fit ends with the fault-free model."""
    import os
    import threading

    X, y, clients = cancer
    # rounds enough to outlast the 3 s before the fault (a round is ~12 ms here)
    clean = fit_quietly(FedLogisticRegression(C=1.0, solver="fedavg", max_rounds=500, tol=0),
                        X, y, clients=clients).coef_
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        victim = sorted(client.scheduler_info()["workers"])[0]
        def kill():
            try:
                client.run(os._exit, 1, workers=[victim])
            except Exception:  # noqa: BLE001 - the worker dies before it can answer
                pass

        timer = threading.Timer(3.0, kill)
        timer.start()
        est = FedLogisticRegression(C=1.0, solver="fedavg", max_rounds=500, tol=0,
                                    executor=DaskExecutor())
        with warnings.catch_warnings(record=True):  # a round in flight may drop clients
            warnings.simplefilter("always")
            fit_quietly(est, X, y, clients=clients)
        timer.join()
        assert est.history_["wall_time"][-1] > 3.0, "the fit ended before the fault"
    assert est.n_iter_ == 500
    assert est.history_.placement_bytes > X.nbytes  # the victim's clients were sent again
    np.testing.assert_allclose(est.coef_, clean, rtol=0.02, atol=0.02)
