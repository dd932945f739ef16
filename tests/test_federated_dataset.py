"""FederatedDataset: the same numbers from rows that never leave their sites.

Simulated datasets (rows in this process) must give exactly the model of
``fit(X, y, clients=site)``; resident datasets are loaded by the sites' own
Dask worker processes from files in directories only those workers know, and
the driver process runs under an audit hook that records any open of a site
file.
"""

import os
import sys
import threading
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.preprocessing import StandardScaler

from skfed import FedElasticNet, FedLasso, FedLinearSVC, FedLogisticRegression, FedLowRank
from skfed.data import FederatedDataset, SiteError

from .conftest import enet_objective, fit_quietly, relative_gap

distributed = pytest.importorskip(
    "distributed", reason="resident data needs the optional extra: pip install 'skfed[dask]'")

SITES = ["site-a", "site-b", "site-c"]


# -- data ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)[:, :8]
    return X, y


@pytest.fixture(scope="module")
def diabetes_data():
    X, y = load_diabetes(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _iid(n, k=3):
    return np.arange(n) % k


def _skewed(X, y, k=3):
    """Label-skewed sites for a classifier (one site holds a single class), or
    quantile sites of the first feature for a regressor."""
    if len(np.unique(y)) == 2:
        site = np.where(y == 0, 0, 1 + np.arange(len(y)) % (k - 1))
        return site
    return np.searchsorted(np.quantile(X[:, 0], [1 / 3, 2 / 3]), X[:, 0])


ESTIMATORS = [
    ("lasso", lambda s: FedLasso(alpha=0.05, solver=s), ["dualfl", "feddualavg", "feddyn"]),
    ("enet", lambda s: FedElasticNet(alpha=0.05, l1_ratio=0.0, solver=s), ["dualfl", "scaffold"]),
    ("lowrank", lambda s: FedLowRank(alpha=0.5, solver=s), ["dualfl", "fedmid"]),
    ("logistic", lambda s: FedLogisticRegression(C=0.5, solver=s, class_weight="balanced"),
     ["dualfl", "feddyn", "fedavg"]),
    ("svc", lambda s: FedLinearSVC(C=0.5, solver=s), ["dualfl", "fedprox"]),
    ("hinge", lambda s: FedLinearSVC(C=0.5, loss="hinge", solver=s), ["fedmls", "dualfl"]),
]


def _task(name, cancer, diabetes_data):
    if name in ("logistic", "svc", "hinge"):
        return cancer
    X, y = diabetes_data
    if name == "lowrank":
        return X, np.column_stack([y, X[:, :2] @ [1.0, -2.0]])
    return X, y


def _params(est):
    return np.r_[np.ravel(est.coef_), np.ravel(est.intercept_)]


# -- simulated: exactly the array fit ------------------------------------------
@pytest.mark.parametrize("name,make,solvers", ESTIMATORS, ids=[e[0] for e in ESTIMATORS])
def test_fit_on_a_dataset_is_the_array_fit(name, make, solvers, cancer, diabetes_data):
    X, y = _task(name, cancer, diabetes_data)
    sw = 0.5 + (np.arange(len(y)) % 3)
    for split in (_iid(len(y)), _skewed(X, y if y.ndim == 1 else y[:, 0])):
        for solver in solvers:
            a = fit_quietly(make(solver).set_params(max_rounds=15, random_state=0), X, y,
                            clients=split, sample_weight=sw)
            data = FederatedDataset.from_arrays(X, y, split, sw)
            b = fit_quietly(make(solver).set_params(max_rounds=15, random_state=0), data)
            np.testing.assert_array_equal(_params(a), _params(b))
            assert a.n_iter_ == b.n_iter_
            np.testing.assert_array_equal(a.clients_, b.clients_)
            assert a.history_.setup_bytes == b.history_.setup_bytes


def test_dataframe_sites_keep_column_names(cancer):
    X, y = cancer
    frame = pd.DataFrame(X, columns=[f"f{k}" for k in range(X.shape[1])])
    est = FedLasso(alpha=0.05).fit(FederatedDataset.from_arrays(frame, y, _iid(len(y))))
    assert list(est.feature_names_in_) == list(frame.columns)
    assert est.n_features_in_ == X.shape[1]


def test_predict_and_score_run_at_the_sites(cancer, diabetes_data):
    X, y = cancer
    site = _skewed(X, y)
    data = FederatedDataset.from_arrays(X, y, site)
    est = FedLogisticRegression(C=0.5).fit(data)
    per_site = est.predict(data)
    assert list(per_site) == [0, 1, 2]
    for s in per_site:
        np.testing.assert_array_equal(per_site[s], est.predict(X[site == s]))
    assert est.score(data) == pytest.approx(est.score(X, y), abs=1e-15)
    scores = est.decision_function(data)
    np.testing.assert_allclose(scores[1], est.decision_function(X[site == 1]))

    X, y = diabetes_data
    sw = 1.0 + np.arange(len(y)) % 4
    site = _skewed(X, y)
    reg = FedLasso(alpha=0.05).fit(X, y, clients=site, sample_weight=sw)
    data = FederatedDataset.from_arrays(X, y, site, sw)
    assert reg.score(data) == pytest.approx(reg.score(X, y, sample_weight=sw), rel=1e-12)
    with pytest.raises(ValueError, match="carries its own target"):
        reg.score(data, y)


def test_a_dataset_refuses_y_clients_and_weights_beside_it(cancer):
    X, y = cancer
    data = FederatedDataset.from_arrays(X, y, _iid(len(y)))
    with pytest.raises(ValueError, match="do not pass clients="):
        FedLasso().fit(data, clients=_iid(len(y)))
    with pytest.raises(ValueError, match="needs a target"):
        FedLasso().fit(FederatedDataset.from_arrays(X, None, _iid(len(y))))


def test_subset_keeps_rows_at_their_sites(cancer):
    X, y = cancer
    site = _iid(len(y))
    data = FederatedDataset.from_arrays(X, y, site)
    sub = data.subset([0, 2])
    assert sub.sites == [0, 2]
    a = FedLasso(alpha=0.05).fit(sub)
    b = FedLasso(alpha=0.05).fit(X[site != 1], y[site != 1], clients=site[site != 1])
    np.testing.assert_array_equal(a.coef_, b.coef_)
    with pytest.raises(ValueError, match="unknown sites"):
        data.subset([7])


# -- resident: loaded and kept by each site's worker process ---------------------
class _OpenAudit:
    """Records every ``open`` of a path under ``root`` by this process while active.

    Audit hooks cannot be removed, so the hook stays installed and checks a
    flag; worker processes are started before it is set (and are spawned, so
    they never see it).
    """

    hook_installed = False
    active = None

    def __init__(self, root):
        self.root, self.opened = os.path.realpath(root), []

    def __enter__(self):
        if not _OpenAudit.hook_installed:
            sys.addaudithook(_OpenAudit._hook)
            _OpenAudit.hook_installed = True
        _OpenAudit.active = self
        return self

    def __exit__(self, *exc):
        _OpenAudit.active = None
        return False

    @staticmethod
    def _hook(event, args):
        audit = _OpenAudit.active
        if audit is None or event != "open" or not args:
            return
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            path = os.fsdecode(path)
            if os.path.realpath(path).startswith(audit.root):
                audit.opened.append((path, threading.current_thread().name))


@pytest.fixture(scope="module")
def site_dirs(tmp_path_factory, cancer, diabetes_data):
    """Per site a data directory holding ``cancer.csv`` and ``diabetes.parquet``."""
    root = tmp_path_factory.mktemp("sites")
    Xc, yc = cancer
    Xd, yd = diabetes_data
    sc, sd = _skewed(Xc, yc), _skewed(Xd, yd)
    dirs = {}
    for k, site in enumerate(SITES):
        d = root / site
        d.mkdir()
        frame = pd.DataFrame(Xc[sc == k], columns=[f"x{j}" for j in range(Xc.shape[1])])
        frame["label"] = yc[sc == k]
        frame.to_csv(d / "cancer.csv", index=False)
        frame = pd.DataFrame(Xd[sd == k], columns=[f"x{j}" for j in range(Xd.shape[1])])
        frame["target"] = yd[sd == k]
        frame["w"] = 1.0 + np.arange(len(frame)) % 3
        frame.to_parquet(d / "diabetes.parquet")
        dirs[site] = d
    return root, dirs, (sc, sd)


@pytest.fixture(scope="module")
def site_cluster(site_dirs):
    """Three worker processes named after the sites, each told only its own
    data directory (``SKFED_DATA_DIR``)."""
    _, dirs, _ = site_dirs
    workers = {site: {"cls": distributed.Nanny,
                      "options": {"name": site, "nthreads": 1,
                                  "env": {"SKFED_DATA_DIR": str(dirs[site])}}}
               for site in SITES}
    scheduler = {"cls": distributed.Scheduler,
                 "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # port choice chatter
        with distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster, \
                distributed.Client(cluster) as client:
            client.wait_for_workers(len(SITES))
            yield client


def test_resident_fit_never_reads_a_site_file_in_the_driver(site_cluster, site_dirs, cancer,
                                                            diabetes_data):
    root, _, (sc, sd) = site_dirs
    with _OpenAudit(root) as audit:
        cancer_data = FederatedDataset.from_sources(
            {s: "cancer.csv" for s in SITES}, target="label", client=site_cluster)
        diabetes_sites = FederatedDataset.from_sources(
            {s: "diabetes.parquet" for s in SITES}, target="target", sample_weight="w",
            client=site_cluster)
        assert cancer_data.resident and cancer_data.sites == SITES
        logistic = FedLogisticRegression(C=0.5, tol=1e-10, max_rounds=3000).fit(cancer_data)
        lasso = FedLasso(alpha=0.05, tol=1e-10, max_rounds=3000).fit(diabetes_sites)
        pooled_score = lasso.score(diabetes_sites)
        site_predictions = logistic.predict(cancer_data)
    assert audit.opened == []
    assert lasso.history_.placement_bytes == 0  # nothing was shipped to the workers

    # the pooled optimum, from rows the driver never read
    Xc, yc = cancer
    order = np.argsort(sc, kind="stable")
    ref = LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000).fit(Xc[order], yc[order])
    np.testing.assert_allclose(logistic.coef_, ref.coef_, atol=2e-6)
    assert list(logistic.feature_names_in_) == [f"x{j}" for j in range(Xc.shape[1])]
    np.testing.assert_array_equal(site_predictions["site-b"], logistic.predict(
        pd.DataFrame(Xc[sc == 1], columns=logistic.feature_names_in_)))

    Xd, yd = diabetes_data
    sw = np.concatenate([1.0 + np.arange((sd == k).sum()) % 3 for k in range(3)])
    rows = np.concatenate([np.flatnonzero(sd == k) for k in range(3)])
    Xp, yp = Xd[rows], yd[rows]
    ref = Lasso(alpha=0.05, tol=1e-14, max_iter=100_000).fit(Xp, yp, sample_weight=sw)
    f_ref = enet_objective(Xp, yp, ref.coef_, ref.intercept_, 0.05, sample_weight=sw)
    f_fed = enet_objective(Xp, yp, lasso.coef_, lasso.intercept_, 0.05, sample_weight=sw)
    assert relative_gap(f_fed, f_ref) < 1e-8
    np.testing.assert_array_equal(np.sign(lasso.coef_), np.sign(ref.coef_))
    assert pooled_score == pytest.approx(lasso.score(Xp, yp, sample_weight=sw), rel=1e-12)


@pytest.mark.parametrize("solver", ["dualfl", "feddyn", "scaffold"])
def test_resident_fit_equals_the_array_fit(site_cluster, site_dirs, cancer, solver):
    _, _, (sc, _) = site_dirs
    Xc, yc = cancer
    data = FederatedDataset.from_sources({s: "cancer.csv" for s in SITES}, target="label",
                                         client=site_cluster)
    frame = pd.DataFrame(Xc, columns=[f"x{j}" for j in range(Xc.shape[1])])
    names = np.array(SITES)[sc]
    a = fit_quietly(FedLogisticRegression(C=0.5, solver=solver, max_rounds=8, random_state=1),
                    frame, yc, clients=names)
    b = fit_quietly(FedLogisticRegression(C=0.5, solver=solver, max_rounds=8, random_state=1),
                    data)
    # CSV round trip: rows identical to float64 repr, so the fits are identical
    np.testing.assert_allclose(_params(a), _params(b), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(a.clients_, b.clients_)
    scattered = FederatedDataset.from_arrays(frame, yc, names).scatter(
        site_cluster, placement={s: s for s in SITES})
    c = fit_quietly(FedLogisticRegression(C=0.5, solver=solver, max_rounds=8, random_state=1),
                    scattered)
    np.testing.assert_allclose(_params(a), _params(c), rtol=1e-12, atol=1e-12)


def _loader_with_text_column():
    frame = pd.DataFrame({f"x{j}": [0.5, 1.0] for j in range(8)} | {"label": [0, 1]})
    frame["x3"] = ["1.5", "high"]
    return frame


def _loader_failing():
    raise RuntimeError("the database is down")


@pytest.mark.parametrize("source,match", [
    ("missing.csv", "site 'site-b': no file .*missing.csv"),
    ("", "site 'site-b': its source path is empty"),
    ("cancer.json", "site 'site-b': cannot read 'cancer.json'"),
    (_loader_failing, "site 'site-b': its data loader raised RuntimeError: the database is down"),
])
def test_a_site_that_cannot_load_is_named(site_cluster, source, match):
    sources = {"site-a": "cancer.csv", "site-b": source, "site-c": "cancer.csv"}
    with pytest.raises(SiteError, match=match):
        FederatedDataset.from_sources(sources, target="label", client=site_cluster)


def _other_schema():
    return pd.DataFrame({"x0": [0.1, 0.2], "age": [30, 40], "label": [0, 1]})


def _empty():
    return pd.DataFrame({f"x{j}": [] for j in range(8)} | {"label": []})


def test_schema_and_content_errors_name_the_site_and_column(site_cluster):
    base = {"site-a": "cancer.csv", "site-c": "cancer.csv"}
    with pytest.raises(ValueError, match="site 'site-b' has a column 'age'|site 'site-b' lacks"):
        FederatedDataset.from_sources(base | {"site-b": _other_schema}, target="label",
                                      client=site_cluster)
    with pytest.raises(ValueError, match="site 'site-b' has no rows"):
        FederatedDataset.from_sources(base | {"site-b": _empty}, target="label",
                                      client=site_cluster)
    with pytest.raises(ValueError, match="site 'site-a': no target column 'outcome'"):
        FederatedDataset.from_sources(base | {"site-b": "cancer.csv"}, target="outcome",
                                      client=site_cluster)
    with pytest.raises(ValueError, match="no worker named 'site-z'"):
        FederatedDataset.from_sources({"site-z": "cancer.csv"}, target="label",
                                      client=site_cluster)


def test_a_text_value_in_a_numeric_column_names_site_and_column(site_cluster):
    sources = {"site-a": "cancer.csv", "site-b": _loader_with_text_column,
               "site-c": "cancer.csv"}
    with pytest.raises(ValueError, match="site 'site-b': column 'x3' is text there but number"):
        FederatedDataset.from_sources(sources, target="label", client=site_cluster)


def test_nan_at_a_site_is_refused_before_round_one(site_cluster, cancer):
    def with_nan():
        X, y = cancer
        frame = pd.DataFrame(X[:20], columns=[f"x{j}" for j in range(X.shape[1])])
        frame.iloc[3, 2] = np.nan
        frame["label"] = y[:20]
        return frame

    data = FederatedDataset.from_sources(
        {"site-a": "cancer.csv", "site-b": with_nan, "site-c": "cancer.csv"}, target="label",
        client=site_cluster)
    est = FedLogisticRegression()
    with pytest.raises(SiteError, match="site 'site-b': column 'x2' contains NaN"):
        est.fit(data)
    assert not hasattr(est, "coef_")  # nothing half-fitted


def test_command_line_remote_form_reads_files_at_the_sites(site_cluster, site_dirs, capsys):
    from skfed.cli.main import main

    root, _, _ = site_dirs
    address = site_cluster.scheduler.address
    with _OpenAudit(root) as audit:
        code = main(["fit", "--scheduler", address, "--target", "target", "--drop", "w",
                     "--model", "lasso", "--alpha", "0.05", "--tol", "1e-8"]
                    + [f"--site={s}=diabetes.parquet" for s in SITES])
    out = capsys.readouterr().out
    assert code == 0 and audit.opened == []
    assert "3 sites" in out and "site-b" in out and "converged" in out
    assert "pooled model: not fitted (the rows never leave their sites)" in out
    for bad, match in [(["--scheduler", address, "--site", "site-a"], "--site takes NAME=PATH"),
                       (["--site", "site-a=x.csv"], "needs both --scheduler"),
                       (["--scheduler", "tls://127.0.0.1:1", "--site", "a=b.csv"],
                        "needs --tls-ca-file")]:
        assert main(["fit", "--target", "target", "--model", "lasso"] + bad) == 2
        assert match in capsys.readouterr().err


@pytest.mark.parametrize("name,make,solvers", ESTIMATORS, ids=[e[0] for e in ESTIMATORS])
def test_every_estimator_on_worker_processes_equals_the_array_fit(
        name, make, solvers, site_cluster, cancer, diabetes_data):
    """Rows on the sites' worker processes (scattered there once), rounds run there."""
    X, y = _task(name, cancer, diabetes_data)
    split = _skewed(X, y if y.ndim == 1 else y[:, 0])
    sites = np.array(SITES)[split]
    solver = solvers[-1]
    a = fit_quietly(make(solver).set_params(max_rounds=6, random_state=0), X, y, clients=sites)
    data = FederatedDataset.from_arrays(X, y, sites).scatter(
        site_cluster, placement={s: s for s in SITES})
    b = fit_quietly(make(solver).set_params(max_rounds=6, random_state=0), data)
    # same arithmetic in another process: BLAS there runs one thread (Dask's
    # workers set OMP_NUM_THREADS=1), so sums may round differently in the last bits
    np.testing.assert_allclose(_params(a), _params(b), rtol=1e-12, atol=1e-12)
    assert b.score(data) == pytest.approx(a.score(X, y), rel=1e-12)


def test_scatter_onto_a_local_cluster_whose_workers_are_numbered(dask_client, cancer):
    """A LocalCluster names its workers 0, 1, ...: scatter places the sites on them (Dask
    read the name's text "0" as an address and refused), and a fit there is the array
    fit; a placement naming no worker is a clear error."""
    X, y = cancer
    sites = np.array(SITES)[np.arange(len(y)) % 3]
    data = FederatedDataset.from_arrays(X, y, sites)
    scattered = data.scatter(dask_client)
    assert scattered.resident
    a = fit_quietly(FedLogisticRegression(solver="fedavg", max_rounds=4), X, y, clients=sites)
    b = fit_quietly(FedLogisticRegression(solver="fedavg", max_rounds=4), scattered)
    np.testing.assert_array_equal(_params(a), _params(b))
    placed = data.scatter(dask_client, placement={s: 1 for s in SITES})
    assert set(placed._backend.workers) == {1}
    with pytest.raises(ValueError, match="placement names worker 'nowhere'"):
        data.scatter(dask_client, placement={s: "nowhere" for s in SITES})
