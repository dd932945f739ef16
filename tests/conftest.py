"""Shared data and reference objectives for the test suite."""

import os
import warnings

import numpy as np
import pytest
import threadpoolctl
from sklearn.datasets import load_diabetes
from sklearn.exceptions import ConvergenceWarning

from skfed.datasets import make_federated_lasso, simulate_clients


def pytest_configure(config):
    """An xdist worker is one of the run's processes per core: its BLAS (and the site
    processes it starts) run one thread each, as two workers each spreading small
    products over both cores spent about a sixth more CPU waiting on each other."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        threadpoolctl.threadpool_limits(1)


def _measured_seconds(item):
    """A long test's measured length: its ``slow`` mark's ``seconds`` (0 if not given)."""
    mark = item.get_closest_marker("slow")
    return mark.kwargs.get("seconds", 0) if mark is not None else 0


@pytest.hookimpl(trylast=True)  # after -m has deselected: the halves are of what runs
def pytest_collection_modifyitems(config, items):
    """The tests whose length is marked go first, longest first, dealt alternately to the
    two halves that xdist's ``worksteal`` hands its two workers: each worker starts on
    its share of the longest and an idle one steals only short tests from the other's
    end. In collection order the paper reproductions came last, one worker ran them
    one after another while the other had finished."""
    timed = sorted((item for item in items if _measured_seconds(item)),
                   key=_measured_seconds, reverse=True)
    if not timed:
        return
    rest = [item for item in items if not _measured_seconds(item)]
    first, second = timed[0::2], timed[1::2]
    cut = max(0, len(items) // 2 - len(first))
    items[:] = first + rest[:cut] + second + rest[cut:]


def enet_objective(X, y, coef, intercept, alpha, l1_ratio=1.0, sample_weight=None):
    """scikit-learn's ElasticNet / Lasso objective, written out independently."""
    sw = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
    r = y - X @ coef - intercept
    return (0.5 * np.sum(sw * r**2) / sw.sum() + alpha * l1_ratio * np.abs(coef).sum()
            + 0.5 * alpha * (1 - l1_ratio) * coef @ coef)


def relative_gap(value, reference):
    return (value - reference) / abs(reference)


def fit_quietly(est, *args, **kwargs):
    """Fit, ignoring the ConvergenceWarning of runs with tol=0 (fixed rounds)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(*args, **kwargs)


@pytest.fixture(scope="module")
def dask_client():
    """An in-process Dask cluster of two one-thread workers, for one test module."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        yield client


@pytest.fixture(scope="session")
def diabetes():
    return load_diabetes(return_X_y=True)


@pytest.fixture(scope="session")
def synthetic():
    """A small instance of the FCO paper's heterogeneous sparse regression."""
    X, y, clients, w_true = make_federated_lasso(
        "III", n_features=40, n_clients=8, n_samples_per_client=30, n_informative=5,
        random_state=0)
    return X, y, clients, w_true


def make_split(X, y, scheme, n_clients=6):
    return simulate_clients(X, y, n_clients, scheme=scheme, random_state=0)


@pytest.fixture
def evaluations(monkeypatch):
    """Count the client objectives' passes over their rows for a loss or gradient (site
    services that run in this process included): ``{"value": ..., "gradient": ...}``."""
    from collections import Counter

    from skfed.datafits.base import ClientObjective

    counts = Counter()
    evaluate = ClientObjective._evaluate

    def counting(self, theta, rows, with_value):
        counts["value" if with_value else "gradient"] += 1
        return evaluate(self, theta, rows, with_value)
    monkeypatch.setattr(ClientObjective, "_evaluate", counting)
    return counts
