"""A site whose dataset lives on a Dask cluster (Parquet partitions): every operation
the engine serves against the in-memory site on the same rows, under several
partitionings (one with partitions of fewer rows than min_rows); the dominance audit
merged across partitions decides as one process does; the operations it does not
serve refused with the reason; fits through site services equal the in-memory
site's and statsmodels' on the pooled rows."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

from skfed.federation import dominance  # noqa: E402
from skfed.sites.codec import decode, encode  # noqa: E402
from skfed.sites.host import SiteHost  # noqa: E402
from skfed.sites.policy import load_config  # noqa: E402

from ._sites import serving, site_config  # noqa: E402

#: rows per partition: one file; a few; and ragged, with partitions under min_rows
PARTITIONINGS = {"one": [600], "three": [200, 250, 150], "ragged": [2, 300, 1, 97, 200]}
ENGINE = 'engine = "dask"\nscheduler = "local"'
DECLARE = 'weights = ["w"]'


def _rows(n=600, seed=7):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2", "x3"])
    frame["y"] = X @ [0.5, -1.0, 0.25, 0.0] + rng.normal(size=n)
    frame["c"] = rng.poisson(np.exp(0.4 * X[:, 0] - 0.3 * X[:, 1]))
    frame["b"] = (rng.random(n) < 1 / (1 + np.exp(-X[:, 0] + 0.5 * X[:, 2]))).astype(int)
    frame["w"] = rng.uniform(0.5, 2.0, size=n)
    frame.loc[[3, n - 5], "w"] = 0.0  # rows a weight leaves out
    return frame


def write_site(folder, name, frame, certs, sizes=None, *, policy="min_rows = 10",
               declare=DECLARE, extra=""):
    """A site's configuration: the rows in one CSV, or (``sizes``) in Parquet
    partitions on a local Dask cluster."""
    folder.mkdir(parents=True, exist_ok=True)
    if sizes is None:
        frame.to_csv(folder / "rows.csv", index=False)
        path, more = "rows.csv", declare
    else:
        (folder / "parts").mkdir(exist_ok=True)
        cuts = np.cumsum([0, *sizes])
        for k in range(len(sizes)):
            frame.iloc[cuts[k]:cuts[k + 1]].to_parquet(folder / "parts" / f"p{k:03d}.parquet")
        path, more = "parts/*.parquet", declare + "\n" + ENGINE
    return site_config(folder, name, certs=certs, datasets={"rows": (path, None)},
                       policy=policy, declare=more, extra=extra)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    from skfed.deploy import make_certificates

    root = tmp_path_factory.mktemp("engine-certs")
    return make_certificates(root, ["memory", "one", "three", "ragged", "other", "twin"])


def engine_hosts(root, frame, certs, partitionings, **site_options):
    """``{name: SiteHost}``: the in-memory site of ``frame`` and one engine site per
    partitioning (``{name: partition sizes}``), all under one name and one secret (a
    held-out draw is seeded by both: the same held-out rows everywhere)."""
    secret = json.dumps({"rows": "ab" * 32})
    for name in ("memory", *partitionings):
        (root / name).mkdir()
        (root / name / "partition-secrets.json").write_text(secret)
    out = {"memory": SiteHost(load_config(write_site(root / "memory", "memory", frame, certs,
                                                     **site_options)))}
    for name, sizes in partitionings.items():
        out[name] = SiteHost(load_config(write_site(root / name, "memory", frame, certs,
                                                    sizes, **site_options)))
    return out


def assert_engine_answers_as_memory(hosts, partitioning, op, args):
    """``op`` answered by the engine site of ``partitioning`` as by the in-memory site."""
    memory, engine = ask(hosts["memory"], op, **args), ask(hosts[partitioning], op, **args)
    assert "ok" in memory, memory
    assert "ok" in engine, engine
    assert_same(memory["ok"], engine["ok"])


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, certs):
    """``{name: SiteHost}``: the in-memory site and one engine site per partitioning."""
    out = engine_hosts(tmp_path_factory.mktemp("engine-sites"), _rows(), certs,
                       PARTITIONINGS)
    yield out
    for host in out.values():
        host.close()


def ask(host, op, **args):
    return decode(host.handle("analyst", encode({"op": op, "args": args})))


def assert_same(a, b, rtol=1e-12):
    """Counts (integers, names) the same bits; floats to round-off."""
    if isinstance(a, dict):
        assert set(a) == set(b)
        for key in a:
            assert_same(a[key], b[key], rtol)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y, rtol)
    elif isinstance(a, (float, np.floating)) or (isinstance(a, np.ndarray) and
                                                 a.dtype.kind == "f"):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=0)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    else:
        assert a == b and type(a) is type(b)


REQUESTS = [
    ("dataset.describe", {"dataset": {"name": "rows", "target": "y"}}),
    ("data.summary", {"dataset": {"name": "rows", "target": "y", "drop": ["b", "c"]},
                      "task": "regression"}),
    ("data.summary", {"dataset": {"name": "rows", "target": "b", "drop": ["y", "c"]},
                      "task": "classification"}),
    ("data.summary", {"dataset": {"name": "rows", "target": "y", "sample_weight": "w"},
                      "task": "regression"}),
    ("data.summary", {"dataset": {"name": "rows", "target": "b", "sample_weight": "w"},
                      "task": "none"}),
    ("evaluate.response_sums", {"dataset": {"name": "rows", "target": "c",
                                            "sample_weight": "w"}}),
    ("data.check_target", {"dataset": {"name": "rows", "target": "c"},
                           "family_name": "Poisson", "lower": 0.0, "strict": False}),
    # a held-out part: whole partitions of the site's secret, by the global row index
    ("data.summary", {"dataset": {"name": "rows", "target": "y", "sample_weight": "w",
                                  "holdout": {"test_size": 0.3, "seed": 4, "part": "test"}},
                      "task": "regression"}),
    ("evaluate.response_sums", {"dataset": {"name": "rows", "target": "c", "holdout": {
        "test_size": 0.3, "seed": 4, "part": "train"}}}),
]


@pytest.mark.parametrize("partitioning", sorted(PARTITIONINGS))
@pytest.mark.parametrize("op,args", REQUESTS, ids=[f"{op}-{k}" for k, (op, _) in
                                                   enumerate(REQUESTS)])
def test_engine_equals_in_memory(hosts, partitioning, op, args):
    assert_engine_answers_as_memory(hosts, partitioning, op, args)


def test_engine_errors_as_in_memory(hosts):
    """A target outside a family's range: the same error rule from both."""
    args = {"dataset": {"name": "rows", "target": "c"}, "family_name": "Poisson",
            "lower": 0.0, "strict": True}
    memory, engine = ask(hosts["memory"], "data.check_target", **args), \
        ask(hosts["ragged"], "data.check_target", **args)
    assert memory["error"]["rule"] == engine["error"]["rule"] == "data"


@pytest.mark.parametrize("op,args,why", [
    ("stats.describe", {"columns": ["x0"], "by": None, "quantiles": [0.5], "min_count": 1},
     "sort"),
])
def test_engine_refuses_naming_the_reason(hosts, op, args, why):
    reply = ask(hosts["three"], op, dataset={"name": "rows"}, **args)
    assert reply["error"]["rule"] == "engine"
    assert why in reply["error"]["message"] and op in reply["error"]["message"]
    assert "ok" in ask(hosts["memory"], op, dataset={"name": "rows"}, **args)


@pytest.mark.parametrize("name,why", [
    ("fit.cox_inference", "sorted by time"), ("survival.schoenfeld_sums", "sorted by time"),
    ("evaluate.concordance", "pairs of rows"), ("stats.describe", "whole columns"),
    ("mixed.totals", "shuffle by group"), ("gee.terms", "shuffle by cluster"),
    ("boosting.sketch", "a sort"),
    ("evaluate.local_baseline", "not declared to combine")])
def test_every_refusal_names_its_reason(name, why):
    """Each declared operation an engine does not serve is refused with its reason."""
    import importlib

    from skfed.federation.operations import operations

    for package in ("causal", "ensemble", "gee", "mixed", "model_selection", "stats",
                    "survival"):
        importlib.import_module(f"skfed.{package}")  # each declares its operations
    from skfed.sites.engine import refusal

    operation = operations()[name]
    assert operation.combine is None
    refused = refusal(operation)
    assert refused.rule == "engine" and why in refused.detail and refused.public


def test_engine_refuses_row_steps(hosts):
    reference = {"name": "rows", "target": "y",
                 "steps": [{"step": "data.complete_cases", "args": {}}]}
    reply = ask(hosts["three"], "data.summary", dataset=reference, task="regression")
    assert reply["error"]["rule"] == "engine"
    assert "row steps" in reply["error"]["message"]


def test_held_out_parts_differ(hosts):
    """The two parts of a holdout are the complement of each other over the dataset."""
    sizes = [ask(hosts["ragged"], "data.summary", task="none", dataset={
        "name": "rows", "holdout": {"test_size": 0.3, "seed": 4, "part": part}})["ok"][
            "n_samples"] for part in ("train", "test")]
    assert sum(sizes) == 600 and 0 < sizes[1] < sizes[0]


def test_engine_unreadable_partition_named(tmp_path, certs):
    """A partition that is not Parquet: the dataset could not be read (rule
    ``datasets``), as an in-memory site says of a file it cannot parse; no path shown."""
    config = write_site(tmp_path / "e", "memory", _rows(40), certs, [20, 20])
    (tmp_path / "e" / "parts" / "p001.parquet").write_text("not parquet")
    host = SiteHost(load_config(config))
    try:
        reply = ask(host, "dataset.describe", dataset={"name": "rows"})
    finally:
        host.close()
    assert reply["error"]["rule"] == "datasets"
    assert "could not be read" in reply["error"]["message"]
    assert str(tmp_path) not in reply["error"]["message"]


def test_engine_min_rows_on_the_whole_dataset(tmp_path, certs):
    """Counts rules on whole-dataset numbers: partitions of 2 and 1 rows pass (the
    dataset has 600), and a dataset of 8 rows in partitions is refused as in memory."""
    small = _rows(8)
    hosts = [SiteHost(load_config(write_site(tmp_path / "m", "memory", small, certs))),
             SiteHost(load_config(write_site(tmp_path / "e", "ragged", small, certs,
                                             [3, 5])))]
    try:
        replies = [ask(h, "data.summary", dataset={"name": "rows", "target": "y"},
                       task="regression") for h in hosts]
        assert [r["error"]["rule"] for r in replies] == ["min_rows", "min_rows"]
    finally:
        for h in hosts:
            h.close()


def test_engine_dominance_as_in_memory(tmp_path, certs):
    """One row's weight dominating the whole weight sum is refused on the engine as in
    memory, though it sits in a partition of 300 rows; a partition of 2 rows (dominated
    within itself by construction) does not refuse a sum the whole dataset carries."""
    frame = _rows()
    frame.loc[100, "w"] = 1e6
    args = {"dataset": {"name": "rows", "target": "y", "sample_weight": "w"},
            "task": "regression"}
    hosts = [SiteHost(load_config(write_site(tmp_path / "m", "memory", frame, certs))),
             SiteHost(load_config(write_site(tmp_path / "e", "ragged", frame, certs,
                                             PARTITIONINGS["ragged"])))]
    try:
        assert [ask(h, "data.summary", **args)["error"]["rule"] for h in hosts] == [
            "dominance", "dominance"]
    finally:
        for h in hosts:
            h.close()


# --- the merged audit, against one process's -------------------------------------------
def _decide_whole(min_rows, share, check):
    try:
        with dominance.audit(min_rows, share):
            check()
    except Exception as exc:  # Refused
        return exc.rule
    return "ok"


def _decide_merged(min_rows, share, checks, passes=None):
    """Each part's checks recorded, merged once, further passes for what the bounds
    could not clear (as :class:`skfed.sites.engine.DaskEngine` runs them)."""
    audit = dominance.Audit(min_rows, share)

    def record(wanted=None):
        if passes is not None:
            passes.append(wanted)
        records = []
        for check in checks:
            with dominance.Recording(min_rows, share, wanted) as part:
                check()
            records.append(part.records)
        return records

    try:
        wanted = dominance.merge(audit, record())
        while wanted:
            wanted = dominance.merge(audit, record(wanted), wanted)
    except Exception as exc:
        return exc.rule
    return "ok"


def _parts(n, rng):
    cuts = np.sort(rng.choice(np.arange(1, n), size=rng.integers(1, 6), replace=False))
    return np.split(np.arange(n), cuts)


@pytest.mark.parametrize("seed", range(40))
def test_merged_audit_decides_as_one_process(seed):
    """Heavy-tailed designs and weights, split at random (parts of one row included):
    the merged decision on sums of rows and of products is the one-process decision."""
    rng = np.random.default_rng(seed)
    n, min_rows = int(rng.integers(15, 60)), int(rng.integers(2, 8))
    share = float(rng.uniform(0.3, 0.95))
    A = rng.standard_t(1.5, size=(n, 3)) * (rng.random((n, 3)) < 0.6)
    B = rng.standard_t(1.5, size=(n, 2))
    w = rng.pareto(1.0, size=n)
    parts = _parts(n, rng)
    cases = [(lambda rows: dominance.check_rows(A[rows] * w[rows, None])),
             (lambda rows: dominance.check_products(A[rows], B[rows], w[rows])),
             (lambda rows: dominance.check_products(A[rows], A[rows], w[rows]))]
    for case in cases:
        whole = _decide_whole(min_rows, share, lambda: case(np.arange(n)))
        merged = _decide_merged(min_rows, share, [lambda r=r: case(r) for r in parts])
        assert whole == merged


def test_merged_audit_sees_both_outcomes():
    """The random cases above hold refusals and releases, and reach each pass: the
    rearrangement bound and the exact contributions."""
    seen, asked = set(), set()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n, min_rows = int(rng.integers(15, 60)), int(rng.integers(2, 8))
        share = float(rng.uniform(0.3, 0.95))
        A = rng.standard_t(1.5, size=(n, 3)) * (rng.random((n, 3)) < 0.6)
        B = rng.standard_t(1.5, size=(n, 2))
        w = rng.pareto(1.0, size=n)
        passes = []
        seen.add(_decide_merged(min_rows, share, [
            lambda r=r: dominance.check_products(A[r], B[r], w[r]) for r in _parts(n, rng)],
            passes))
        asked |= {"bounds" if isinstance(v, str) else "exact"
                  for wanted in passes if wanted for v in wanted.values()}
    assert seen == {"ok", "dominance"} and asked == {"bounds", "exact"}


def test_merged_audit_refuses_parts_that_differ():
    audit = dominance.Audit(3, 0.9)
    parts = []
    for q in (1, 2):
        with dominance.Recording(3, 0.9) as part:
            dominance.check_rows(np.ones((5, q)))
        parts.append(part.records)
    with pytest.raises(Exception, match="different sums"):
        dominance.merge(audit, parts)


# --- the configuration ---------------------------------------------------------------
@pytest.mark.parametrize("lines,problem", [
    ('engine = "spark"\nscheduler = "local"', 'engine must be "dask"'),
    ('engine = "dask"', "needs scheduler"),
    ('scheduler = "127.0.0.1:8786"', "no engine is named"),
])
def test_engine_configuration_named(tmp_path, certs, lines, problem):
    config = site_config(tmp_path, "memory", certs=certs,
                         datasets={"rows": ("parts/*.parquet", None)}, declare=lines)
    with pytest.raises(ValueError, match=problem):
        load_config(config)


# --- fits through site services --------------------------------------------------------
@pytest.fixture(scope="module")
def services(tmp_path_factory, certs):
    """Three site services: ``other`` (in memory), and the same rows at ``twin`` (in
    memory) and at ``ragged`` (Parquet partitions on a local Dask cluster)."""
    from skfed.sites.transport import SiteServer

    root, frame = tmp_path_factory.mktemp("engine-services"), _rows(900, seed=11)
    first, second = frame.iloc[:400], frame.iloc[400:].reset_index(drop=True)
    servers = {
        "other": SiteServer(load_config(write_site(root / "o", "other", first, certs))),
        "twin": SiteServer(load_config(write_site(root / "t", "twin", second, certs))),
        "ragged": SiteServer(load_config(write_site(root / "r", "ragged", second, certs,
                                                    [3, 197, 1, 299])))}
    with serving(servers):
        yield servers, frame


def _dataset(services, certs, pair, target, drop):
    from skfed import FederatedDataset

    servers, _ = services
    return FederatedDataset.from_sites(
        {name: f"127.0.0.1:{servers[name].port}" for name in pair}, dataset="rows",
        target=target, drop=drop, ca_file=certs.ca.cert, cert_file=certs.client.cert,
        key_file=certs.client.key)


def _fit_both(services, certs, make, target, drop):
    fits = []
    for pair in (("other", "twin"), ("other", "ragged")):
        data = _dataset(services, certs, pair, target, drop)
        try:
            fits.append(make().fit(data))
        finally:
            data.close()
    return fits


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver", ["auto", "fedavg"])
def test_lasso_through_an_engine_site(services, certs, solver):
    """The normal equations' sums (``auto``), and local gradient steps with the
    curvature products (``fedavg``), summed over the partitions."""
    from skfed.linear_model import FedLasso

    memory, engine = _fit_both(
        services, certs, lambda: FedLasso(alpha=0.05, solver=solver, max_rounds=20),
        "y", ["b", "c", "w"])
    np.testing.assert_allclose(engine.coef_, memory.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(engine.intercept_, memory.intercept_, rtol=1e-10)
    assert engine.n_iter_ == memory.n_iter_
    scores = []
    for pair, est in ((("other", "twin"), memory), (("other", "ragged"), engine)):
        data = _dataset(services, certs, pair, "y", ["b", "c", "w"])
        try:
            scores.append(est.score(data))  # evaluate.score's sums
        finally:
            data.close()
    np.testing.assert_allclose(scores[1], scores[0], rtol=1e-12)
    from sklearn.metrics import r2_score

    frame = services[1]
    pooled = r2_score(frame["y"], engine.predict(frame[["x0", "x1", "x2", "x3"]]))
    np.testing.assert_allclose(scores[1], pooled, rtol=1e-12)
    if solver == "auto":
        assert np.count_nonzero(memory.coef_) < memory.coef_.size  # the penalty bites


@pytest.mark.parametrize("cov_type", ["nonrobust", "HC0"])
def test_poisson_glm_through_an_engine_site(services, certs, cov_type):
    """The engine site's GLM equals the in-memory site's (rounds, coefficients,
    standard errors) and statsmodels' on the pooled rows."""
    import statsmodels.api as sm

    from skfed.linear_model import FedPoissonRegressor

    memory, engine = _fit_both(
        services, certs, lambda: FedPoissonRegressor(alpha=0.0, cov_type=cov_type), "c",
        ["b", "y", "w"])
    assert engine.n_iter_ == memory.n_iter_
    np.testing.assert_allclose(engine.coef_, memory.coef_, rtol=1e-10)
    np.testing.assert_allclose(engine.bse_, memory.bse_, rtol=1e-10)
    scores = []
    for pair, est in ((("other", "twin"), memory), (("other", "ragged"), engine)):
        data = _dataset(services, certs, pair, "c", ["b", "y", "w"])
        try:
            scores.append(est.score(data))  # D^2: evaluate.response_sums, deviances
        finally:
            data.close()
    np.testing.assert_allclose(scores[1], scores[0], rtol=1e-12)
    frame = services[1]
    X = sm.add_constant(frame[["x0", "x1", "x2", "x3"]].to_numpy())
    ref = sm.GLM(frame["c"].to_numpy(), X, family=sm.families.Poisson()).fit(
        tol=1e-12, cov_type=cov_type)
    np.testing.assert_allclose(engine.coef_, ref.params[1:], rtol=1e-6)
    np.testing.assert_allclose(engine.intercept_, ref.params[0], rtol=1e-6)
    np.testing.assert_allclose(engine.bse_, ref.bse, rtol=1e-6)  # intercept first
    from sklearn.metrics import d2_tweedie_score

    np.testing.assert_allclose(scores[1], d2_tweedie_score(frame["c"], ref.predict(X),
                                                           power=1), rtol=1e-8)


# --- sites that require protection ---------------------------------------------------
PROTECTED = 'min_rows = 10\nrequire = ["secure_aggregation"]\nconsortium = ["other", "twin", ' \
    '"ragged"]'


@pytest.fixture(scope="module")
def protected(tmp_path_factory, certs):
    """``other`` and ``twin`` in memory, and ``ragged`` twice: in memory, and on an engine
    (the same rows, the same name and certificate, two services)."""
    from skfed.sites.transport import SiteServer

    root, frame = tmp_path_factory.mktemp("engine-protected"), _rows(900, seed=5)
    parts = [frame.iloc[:300], frame.iloc[300:550], frame.iloc[550:].reset_index(drop=True)]
    servers = {
        "other": SiteServer(load_config(write_site(root / "o", "other", parts[0], certs,
                                                   policy=PROTECTED))),
        "twin": SiteServer(load_config(write_site(root / "t", "twin", parts[1], certs,
                                                  policy=PROTECTED))),
        "memory": SiteServer(load_config(write_site(root / "m", "ragged", parts[2], certs,
                                                    policy=PROTECTED))),
        "engine": SiteServer(load_config(write_site(root / "e", "ragged", parts[2], certs,
                                                    [1, 150, 2, 197], policy=PROTECTED)))}
    with serving(servers):
        yield servers, frame


def _protected_data(protected, certs, home):
    from skfed import FederatedDataset

    servers, _ = protected
    ports = {"other": servers["other"].port, "twin": servers["twin"].port,
             "ragged": servers[home].port}
    return FederatedDataset.from_sites(
        {name: f"127.0.0.1:{port}" for name, port in ports.items()}, dataset="rows",
        target="c", drop=["b", "y", "w"], ca_file=certs.ca.cert,
        cert_file=certs.client.cert, key_file=certs.client.key)


def test_secure_aggregation_exact_through_an_engine_site(protected, certs):
    """Where the sites require secure aggregation, a plain fit is refused by the engine
    site as by the in-memory one, and the masked GLM (its Newton sums and its
    inference's sums masked) equals the in-memory site's."""
    from skfed.linear_model import FedPoissonRegressor
    from skfed.privacy import SecureAggregation
    from skfed.sites import SiteRefusal

    fits, rules = {}, {}
    for home in ("memory", "engine"):
        data = _protected_data(protected, certs, home)
        try:
            with pytest.raises(SiteRefusal) as info:
                FedPoissonRegressor(alpha=0.0).fit(data)
            rules[home] = info.value.rule
            fits[home] = FedPoissonRegressor(alpha=0.0, privacy=SecureAggregation()).fit(data)
        finally:
            data.close()
    assert rules == {"memory": "require", "engine": "require"}
    memory, engine = fits["memory"], fits["engine"]
    assert engine.history_.privacy["secure_aggregation"]
    assert engine.n_iter_ == memory.n_iter_
    np.testing.assert_allclose(engine.coef_, memory.coef_, rtol=1e-10)
    np.testing.assert_allclose(engine.bse_, memory.bse_, rtol=1e-10)


def test_differential_privacy_through_an_engine_site(tmp_path, certs):
    """Where the sites require differential privacy, a masked fit without noise is
    refused by the engine site as by the in-memory one (rule ``require``, naming
    differential privacy); a noised FedAvg runs on the engine, its site's noise added
    and charged to the site's ledger."""
    pytest.importorskip("dp_accounting")
    from skfed import FederatedDataset
    from skfed.linear_model import FedLogisticRegression
    from skfed.privacy import DifferentialPrivacy, SecureAggregation
    from skfed.sites import SiteRefusal
    from skfed.sites.transport import SiteServer
    from skfed.solvers import FedAvg

    policy = PROTECTED.replace("secure_aggregation", "differential_privacy") + \
        "\nepsilon_budget = 10.0"
    frame = _rows(900, seed=3)
    parts = [frame.iloc[:300], frame.iloc[300:550], frame.iloc[550:].reset_index(drop=True)]
    servers = {
        "other": SiteServer(load_config(write_site(tmp_path / "o", "other", parts[0], certs,
                                                   policy=policy))),
        "twin": SiteServer(load_config(write_site(tmp_path / "t", "twin", parts[1], certs,
                                                  policy=policy))),
        "memory": SiteServer(load_config(write_site(tmp_path / "m", "ragged", parts[2],
                                                    certs, policy=policy))),
        "engine": SiteServer(load_config(write_site(tmp_path / "e", "ragged", parts[2],
                                                    certs, [2, 200, 148], policy=policy)))}
    rules, private = {}, None
    try:
        for server in servers.values():
            server.start()
        for home in ("memory", "engine"):
            ports = {"other": servers["other"].port, "twin": servers["twin"].port,
                     "ragged": servers[home].port}
            data = FederatedDataset.from_sites(
                {n: f"127.0.0.1:{p}" for n, p in ports.items()}, dataset="rows",
                target="b", drop=["c", "y", "w"], ca_file=certs.ca.cert,
                cert_file=certs.client.cert, key_file=certs.client.key)
            try:
                with pytest.raises(SiteRefusal, match="differential privacy") as info:
                    FedLogisticRegression(solver=FedAvg(client_lr=0.5), max_rounds=3,
                                          privacy=SecureAggregation()).fit(data)
                rules[home] = info.value.rule
                if home == "engine":
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        private = FedLogisticRegression(
                            solver=FedAvg(client_lr=0.5), max_rounds=3, tol=0,
                            client_weighting="uniform",
                            privacy=DifferentialPrivacy(2.0, delta=1e-5, clip_norm=0.5,
                                                        random_state=0)).fit(data)
            finally:
                data.close()
    finally:
        for server in servers.values():
            server.stop()
    assert rules == {"memory": "require", "engine": "require"}
    assert private.n_iter_ == 3 and private.history_.privacy["noise_multiplier"] > 0
    ledger = json.loads((tmp_path / "e" / "privacy-ledger.json").read_text())
    assert 0 < ledger["rows"]["epsilon"] <= 2.0 * (1 + 1e-9)


def test_row_sets_recorded_as_in_memory(services, certs):
    """A fit with an indicator feature records the rows and the indicator's support
    over the whole dataset at the engine site as the in-memory site records them."""
    from skfed.linear_model import FedPoissonRegressor

    memory, engine = _fit_both(services, certs, lambda: FedPoissonRegressor(alpha=0.0),
                               "c", ["y", "w"])
    np.testing.assert_allclose(engine.coef_, memory.coef_, rtol=1e-10)
    servers, _ = services
    recorded = [{bytes(m) for m in servers[name].host.rows.record(
        servers[name].host.config.datasets["rows"]).sets} for name in ("twin", "ragged")]
    assert recorded[0] == recorded[1] and len(recorded[0]) >= 1  # b's support


def test_logistic_regression_through_an_engine_site(services, certs):
    """A classifier: the classes from data.summary's union over the partitions, the
    binary target encoded per partition, Newton's sums added; its accuracy score."""
    from skfed.linear_model import FedLogisticRegression

    memory, engine = _fit_both(services, certs, lambda: FedLogisticRegression(C=10.0),
                               "b", ["c", "y", "w"])
    np.testing.assert_array_equal(engine.classes_, memory.classes_)
    assert engine.n_iter_ == memory.n_iter_
    np.testing.assert_allclose(engine.coef_, memory.coef_, rtol=1e-10)
    np.testing.assert_allclose(engine.intercept_, memory.intercept_, rtol=1e-10)
