"""Counts, level names, cross-tables, preprocessing summaries and survival counts at a
site whose dataset lives on a Dask cluster (Parquet partitions), against the in-memory
site of the same rows: counts the same integers, float sums to round-off, and every
small-count rule decided on the whole dataset, never per partition (a level of 2 rows
split across partitions is refused or hidden as in memory)."""

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

from skfed.sites.policy import load_config  # noqa: E402

from ._sites import serving  # noqa: E402
from .test_site_engine import (assert_engine_answers_as_memory, assert_same, ask,  # noqa: E402
                               engine_hosts, write_site)

#: rows per partition; the rare ward's two rows (rows 300 and 500) in different ones
PARTITIONINGS = {"one": [600], "three": [200, 250, 150], "ragged": [2, 300, 1, 97, 200]}
POLICY = ('min_rows = 10\nmin_level_count = 5\nallow_exact_quantiles = true\n'
          'finer_sums = ["stats.table_counts", "stats.table_sums", "fit.risk_sets", '
          '"fit.cox_baseline", "survival.schoenfeld_sums"]')


def _rows(n=600, seed=3):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "x": rng.normal(50.0, 10.0, size=n), "z": rng.gamma(2.0, 3.0, size=n),
        "ward": rng.choice(["A", "B", "C"], size=n),
        "sex": rng.choice(["f", "m"], size=n),
        "grade": rng.integers(1, 4, size=n).astype(float),
        "w": rng.uniform(0.5, 2.0, size=n)})
    frame.loc[[300, 500], "ward"] = "D"  # held by 2 rows: never released on its own
    frame.loc[rng.choice(n, 20, replace=False), "x"] = np.nan
    frame.loc[rng.choice(n, 9, replace=False), "sex"] = None
    frame["time"] = np.round(rng.exponential(10.0, size=n) + 0.1, 1)  # ties
    frame["event"] = (rng.random(n) < 0.7).astype(int)
    frame["cause"] = np.where(frame["event"] == 1, rng.integers(1, 3, size=n), 0)
    frame["arm"] = rng.choice(["a", "b", "c"], size=n)
    # six censored rows before every other time: three in each of two partitions
    frame.loc[[100, 110, 120], ["time", "event", "cause"]] = [0.01, 0, 0]
    frame.loc[[430, 440, 450], ["time", "event", "cause"]] = [0.015, 0, 0]
    frame.loc[[100, 110, 120, 430, 440, 450], "arm"] = "a"
    # a treatment by the covariates z and grade, and an outcome (a causal analysis)
    logit = -0.3 + 0.25 * (frame["z"] - 6.0) - 0.3 * (frame["grade"] - 2.0)
    frame["treat"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    frame["outcome"] = 1.0 + 2.0 * frame["treat"] + 0.3 * frame["z"] + rng.normal(size=n)
    return frame


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    from skfed.deploy import make_certificates

    root = tmp_path_factory.mktemp("engine-counts-certs")
    return make_certificates(root, ["memory", "other", "twin", "ragged"])


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, certs):
    """``{name: SiteHost}``: the in-memory site and one engine site per partitioning."""
    out = engine_hosts(tmp_path_factory.mktemp("engine-count-sites"), _rows(), certs,
                       PARTITIONINGS, policy=POLICY, declare="")
    yield out
    for host in out.values():
        host.close()


DATA = {"name": "rows"}
GRID = [0.05, 2.05, 5.05, 10.05, 20.05]  # between the times (on a 0.1 lattice)
SPEC = {"treatment": "treat", "outcome": "outcome", "covariates": ["z", "grade"],
        "estimand": "ATE", "stabilized": False, "truncate": None, "trim": None,
        "method": "ipw", "family": "gaussian", "scores": "logistic"}
THETA = [3.0, 1.0, -1.2, 0.25, -0.3]  # the arms' means, the propensity model
LAYOUT = {"strata": ["f", "m"], "levels": {"ward": ["A", "B", "C", "D"]}}
REQUESTS = [
    ("stats.levels", {"columns": ["x", "sex", "grade"], "by": "sex",
                      "categorical": ["grade"]}),
    ("stats.table_counts", {"columns": ["x", "ward"], "by": "sex", "layout": LAYOUT}),
    ("stats.table_sums", {"columns": ["x", "z"], "by": "sex", "layout": LAYOUT,
                          "centers": [[50.0, 49.0, 0.0, 50.0], [6.0, 6.0, 6.0, 6.0]],
                          "power": 2}),
    ("stats.crosstab", {"row": "sex", "col": "grade", "min_count": 5}),
    ("stats.crosstab", {"row": "sex", "col": "grade", "min_count": 60}),
    ("formula.levels", {"columns": ["sex", "grade"], "min_count": 5}),
    ("stats.survival_grid", {"time": "time", "event": "event", "group": "arm",
                             "event_times": False}),
    # the first interval holds 6 rows: 3 in one partition, 3 in another
    ("stats.survival_counts", {"time": "time", "event": "event", "group": "arm",
                               "levels": ["a", "b", "c"], "times": GRID}),
    ("stats.survival_counts", {"time": "time", "event": "event", "group": None,
                               "levels": None, "times": GRID}),
    ("stats.life_table", {"time": "time", "event": "event", "group": None,
                          "levels": None, "cuts": [0.02, 2.0, 5.0, 10.0, 20.0]}),
    ("stats.competing_counts", {"time": "time", "event": "cause", "cause": 2,
                                "times": [0.02, 2.0, 5.0, 10.0, 20.0], "intervals": True}),
    ("data.summary", {"dataset": {"name": "rows", "target": ["event", "time"],
                                  "drop": ["x", "ward", "sex", "arm"]}, "task": "survival"}),
    ("survival.event_times", {"dataset": {"name": "rows", "target": ["event", "time"],
                                          "drop": ["x", "ward", "sex", "arm"]},
                              "time_grid": [0.02, 2.0, 5.0, 10.0, 20.0], "min_count": None}),
    # the quantiles of a time grid: the events' bins coarsened on the whole dataset
    ("survival.event_times", {"dataset": {"name": "rows", "target": ["event", "time"],
                                          "drop": ["x", "ward", "sex", "arm"]},
                              "time_grid": None, "min_count": 40}),
    ("causal.ee_sums", {"spec": SPEC, "theta": THETA}),
    ("causal.balance_sums", {"spec": SPEC, "theta": THETA}),
    # bins of 1 to 4 rows hidden on the whole dataset's counts
    ("causal.overlap_counts", {"spec": SPEC, "theta": THETA, "n_bins": 40,
                               "threshold": 4.0, "min_count": 5}),
    ("stats.count_below", {"by": "arm", "queries": [["a", "x"], [None, "z"], ["c", "time"]],
                           "thresholds": [50.0, 6.0, 3.0]}),
]


@pytest.mark.parametrize("partitioning", sorted(PARTITIONINGS))
@pytest.mark.parametrize("op,args", REQUESTS, ids=[f"{op}-{k}" for k, (op, _) in
                                                   enumerate(REQUESTS)])
def test_engine_counts_equal_in_memory(hosts, partitioning, op, args):
    args = {"dataset": DATA, **args}
    assert_engine_answers_as_memory(hosts, partitioning, op, args)


def test_crosstab_hides_on_the_whole_table(hosts):
    """A cross-table's small cells are hidden on the combined cells: a per-partition
    hiding would hide cells the whole dataset holds many rows of."""
    args = {"row": "sex", "col": "grade", "min_count": 60}
    memory = ask(hosts["memory"], "stats.crosstab", dataset=DATA, **args)["ok"]
    assert memory["suppressed"]  # some cells are hidden ...
    assert any(v is not None and v < 200 for v in memory["counts"].values())
    engine = ask(hosts["ragged"], "stats.crosstab", dataset=DATA, **args)["ok"]
    assert engine == memory  # ... and the same ones, though partitions hold under 60


@pytest.mark.parametrize("op,args", [
    ("stats.levels", {"columns": ["ward"], "by": None}),
    ("stats.crosstab", {"row": "ward", "col": "sex", "min_count": 5}),
    ("formula.levels", {"columns": ["ward"], "min_count": 5}),
])
@pytest.mark.parametrize("partitioning", sorted(PARTITIONINGS))
def test_rare_level_split_across_partitions(hosts, partitioning, op, args):
    """Attack: the ward held by 2 rows, one in each of two partitions (each partition
    alone holds no level under min_level_count there but that one). The engine site
    hides or refuses it as the in-memory site does, never releasing its name."""
    memory = ask(hosts["memory"], op, dataset=DATA, **args)
    engine = ask(hosts[partitioning], op, dataset=DATA, **args)
    assert ("ok" in memory) == ("ok" in engine), (memory, engine)
    if "ok" in memory:
        assert_same(memory["ok"], engine["ok"])
        if op == "stats.crosstab":  # the rare ward's cells and margin hidden
            assert engine["ok"]["counts"][("D", None)] is None
        else:
            assert "D" in str(engine["ok"])  # the level check passed: named with its rows
    else:
        assert memory["error"]["rule"] == engine["error"]["rule"]
        assert memory["error"]["message"] == engine["error"]["message"]
        assert "'D'" not in engine["error"]["message"]


def test_identifier_like_column_refused_on_the_whole(hosts, tmp_path, certs):
    """A column whose values are each held by one row is refused (its level names are
    identifiers) on an engine as in memory, whatever the partitioning."""
    args = {"columns": ["time"], "by": None, "categorical": ["time"]}
    replies = {name: ask(hosts[name], "stats.levels", dataset=DATA, **args)
               for name in ("memory", "three")}
    assert replies["memory"]["error"]["rule"] == replies["three"]["error"]["rule"] == \
        "min_level_count"


# --- through site services: the transformers and their references -----------------------
@pytest.fixture(scope="module")
def services(tmp_path_factory, certs):
    """``other`` (in memory) with rows 0-249, and rows 250-599 at ``twin`` (in memory)
    and at ``ragged`` (Parquet partitions on a local Dask cluster, the rare ward's two
    rows in different partitions)."""
    from skfed.sites.transport import SiteServer

    root, frame = tmp_path_factory.mktemp("engine-count-services"), _rows()
    first, second = frame.iloc[:250], frame.iloc[250:].reset_index(drop=True)
    servers = {
        "other": SiteServer(load_config(write_site(root / "o", "other", first, certs,
                                                   policy=POLICY, declare=""))),
        "twin": SiteServer(load_config(write_site(root / "t", "twin", second, certs,
                                                  policy=POLICY, declare=""))),
        "ragged": SiteServer(load_config(write_site(root / "r", "ragged", second, certs,
                                                    [2, 150, 1, 197], policy=POLICY,
                                                    declare="")))}
    with serving(servers):
        yield servers, frame


def _dataset(services, certs, pair, drop):
    from skfed import FederatedDataset

    servers, _ = services
    return FederatedDataset.from_sites(
        {name: f"127.0.0.1:{servers[name].port}" for name in pair}, dataset="rows",
        target="event", drop=drop, ca_file=certs.ca.cert, cert_file=certs.client.cert,
        key_file=certs.client.key)


def _fit_both(services, certs, make, drop):
    """``make().fit`` on (other, twin) and on (other, ragged): the same rows."""
    fits = []
    for pair in (("other", "twin"), ("other", "ragged")):
        data = _dataset(services, certs, pair, drop)
        try:
            fits.append(make().fit(data))
        finally:
            data.close()
    return fits


NUMERIC = ["x", "z", "grade"]
NOT_NUMERIC = ["time", "cause", "ward", "sex", "w", "arm", "treat", "outcome"]


def test_scaler_through_an_engine_site(services, certs):
    """FedStandardScaler's moments: the engine site's (Chan's update over partitions)
    equal the in-memory site's and scikit-learn's on the pooled rows."""
    from sklearn.preprocessing import StandardScaler

    from skfed.preprocessing import FedStandardScaler

    memory, engine = _fit_both(services, certs, FedStandardScaler, NOT_NUMERIC)
    ref = StandardScaler().fit(services[1][NUMERIC])
    for fit in (memory, engine):
        np.testing.assert_allclose(fit.mean_, ref.mean_, rtol=1e-12)
        np.testing.assert_allclose(fit.var_, ref.var_, rtol=1e-12)
        np.testing.assert_array_equal(fit.n_samples_seen_, ref.n_samples_seen_)
    np.testing.assert_allclose(engine.var_, memory.var_, rtol=1e-12)


@pytest.mark.parametrize("strategy", ["mean", "median", "most_frequent"])
def test_imputer_through_an_engine_site(services, certs, strategy):
    from sklearn.impute import SimpleImputer

    from skfed.preprocessing import FedSimpleImputer

    # a mode of continuous values would release them: refused (min_level_count)
    columns = ["grade"] if strategy == "most_frequent" else NUMERIC
    drop = NOT_NUMERIC + [c for c in NUMERIC if c not in columns]
    memory, engine = _fit_both(services, certs, lambda: FedSimpleImputer(strategy=strategy),
                               drop)
    ref = SimpleImputer(strategy=strategy).fit(services[1][columns])
    for fit in (memory, engine):
        np.testing.assert_allclose(fit.statistics_, ref.statistics_, rtol=1e-12)
    if strategy != "mean":  # order statistics: the pooled column's values themselves
        # (bit for bit from Parquet; the in-memory site's CSV read may move a last bit)
        np.testing.assert_array_equal(engine.statistics_, ref.statistics_)


def test_one_hot_through_an_engine_site(services, certs):
    from sklearn.preprocessing import OneHotEncoder

    from skfed.preprocessing import FedOneHotEncoder

    drop = ["x", "z", "time", "cause", "ward", "w", "sex", "treat", "outcome"]
    memory, engine = _fit_both(services, certs, FedOneHotEncoder, drop)
    ref = OneHotEncoder().fit(services[1][["grade", "arm"]])
    for fit in (memory, engine):
        for a, b in zip(fit.categories_, ref.categories_):
            np.testing.assert_array_equal(a, b)


def test_one_hot_rare_level_split_across_partitions(services, certs):
    """Attack: the ward of 2 rows, one in each of two partitions of ``ragged``: the
    encoder's categories are refused there (min_level_count) as at ``twin``."""
    from skfed.preprocessing import FedOneHotEncoder
    from skfed.sites import SiteRefusal

    drop = ["x", "z", "time", "cause", "sex", "grade", "w", "arm", "treat", "outcome"]
    rules = []
    for pair in (("other", "twin"), ("other", "ragged")):
        data = _dataset(services, certs, pair, drop)
        try:
            with pytest.raises(SiteRefusal) as info:
                FedOneHotEncoder().fit(data)
            rules.append((info.value.rule, pair[1] in str(info.value)))
        finally:
            data.close()
    assert rules == [("min_level_count", True)] * 2


@pytest.mark.parametrize("op,args", [
    ("stats.life_table", {"time": "time", "event": "event", "group": None, "levels": None,
                          "cuts": [0.012, 0.02, 2.0, 5.0, 10.0]}),
    ("stats.survival_counts", {"time": "time", "event": "event", "group": None,
                               "levels": None, "times": [0.012, 2.05, 5.05]}),
    ("stats.competing_counts", {"time": "time", "event": "cause", "cause": 1,
                                "times": [0.012, 2.0, 5.0], "intervals": True}),
    ("stats.survival_grid", {"time": "time", "event": "event", "group": "ward",
                             "event_times": False}),
])
@pytest.mark.parametrize("partitioning", ["three", "ragged"])
def test_survival_rules_on_the_whole_dataset(hosts, partitioning, op, args):
    """Three rows leave the risk set before 0.012, three more before 0.02 (in another
    partition): an interval of 3 rows is refused on an engine as in memory, and one of
    6 rows (3 + 3 across partitions) is served (GRID above). The ward of 2 rows split
    across partitions is refused as a curve's level."""
    memory = ask(hosts["memory"], op, dataset=DATA, **args)
    engine = ask(hosts[partitioning], op, dataset=DATA, **args)
    assert memory["error"]["rule"] == engine["error"]["rule"] == "min_level_count"
    assert memory["error"]["message"] == engine["error"]["message"]


@pytest.fixture(scope="module")
def timed(tmp_path_factory, certs):
    """All the rows at ``twin`` (in memory) and at ``ragged`` (partitions), with
    ``allow_event_times``: exact curves."""
    from skfed.sites.transport import SiteServer

    root, frame = tmp_path_factory.mktemp("engine-timed"), _rows()
    policy = POLICY + "\nallow_event_times = true"
    servers = {
        "twin": SiteServer(load_config(write_site(root / "t", "twin", frame, certs,
                                                  policy=policy, declare=""))),
        "ragged": SiteServer(load_config(write_site(root / "r", "ragged", frame, certs,
                                                    PARTITIONINGS["ragged"], policy=policy,
                                                    declare="")))}
    with serving(servers):
        yield servers, frame


def _one_site(timed, certs, name):
    from skfed import FederatedDataset

    servers, _ = timed
    return FederatedDataset.from_sites({name: f"127.0.0.1:{servers[name].port}"},
                                       dataset="rows", ca_file=certs.ca.cert,
                                       cert_file=certs.client.cert, key_file=certs.client.key)


def test_kaplan_meier_and_logrank_through_an_engine_site(timed, certs):
    """Exact Kaplan-Meier curves (the event times' union over partitions, counts at risk
    and of events added) and the log-rank test: the engine site's equal the in-memory
    site's and lifelines' on the pooled rows."""
    from lifelines import KaplanMeierFitter
    from lifelines.statistics import multivariate_logrank_test

    from skfed.stats import kaplan_meier, logrank_test

    out = {}
    for name in ("twin", "ragged"):
        data = _one_site(timed, certs, name)
        try:
            out[name] = (kaplan_meier(data, time="time", event="event"),
                         kaplan_meier(data, time="time", event="event", by="arm"),
                         logrank_test(data, time="time", event="event", group="arm"))
        finally:
            data.close()
    rows = timed[1]
    for km, by, test in out.values():
        ref = KaplanMeierFitter().fit(rows["time"], rows["event"])
        np.testing.assert_allclose(km["survival"], ref.survival_function_at_times(
            km.index).to_numpy(), rtol=1e-12)
        events = km.index.intersection(ref.event_table.index[ref.event_table["observed"] > 0])
        assert len(events) > 100
        np.testing.assert_array_equal(km.loc[events, "at_risk"],
                                      ref.event_table.loc[events, "at_risk"])
        lr = multivariate_logrank_test(rows["time"], rows["arm"], rows["event"])
        np.testing.assert_allclose(test.statistic, lr.test_statistic, rtol=1e-12)
        np.testing.assert_allclose(test.p_value, lr.p_value, rtol=1e-12)
    pd.testing.assert_frame_equal(out["twin"][0], out["ragged"][0], check_exact=True)
    pd.testing.assert_frame_equal(out["twin"][1], out["ragged"][1], check_exact=True)


PROTECTED = ('min_rows = 10\nmin_level_count = 5\nrequire = ["secure_aggregation"]\n'
             'consortium = ["other", "twin", "ragged"]')


@pytest.fixture(scope="module")
def protected(tmp_path_factory, certs):
    """Sites that require secure aggregation: ``other`` and ``twin`` in memory, and the
    third site's rows (``ragged``) three times: in memory, on an engine in one
    partition, and on an engine in three."""
    from skfed.sites.transport import SiteServer

    root, frame = tmp_path_factory.mktemp("engine-count-protected"), _rows()
    parts = [frame.iloc[:200], frame.iloc[200:400], frame.iloc[400:].reset_index(drop=True)]
    homes = {"other": (parts[0], None), "twin": (parts[1], None), "memory": (parts[2], None),
             "one": (parts[2], [200]), "three": (parts[2], [60, 1, 139])}
    servers = {}
    for home, (rows, sizes) in homes.items():
        name = home if home in ("other", "twin") else "ragged"
        servers[home] = SiteServer(load_config(write_site(
            root / home, name, rows, certs, sizes, policy=PROTECTED, declare="")))
        servers[home].start()
    yield servers, frame
    for server in servers.values():
        server.stop()


def _protected_data(protected, certs, home):
    from skfed import FederatedDataset

    servers, _ = protected
    return FederatedDataset.from_sites(
        {name: f"127.0.0.1:{servers[name if name != 'ragged' else home].port}"
         for name in ("other", "twin", "ragged")}, dataset="rows", ca_file=certs.ca.cert,
        cert_file=certs.client.cert, key_file=certs.client.key)


def test_masked_table_one_and_life_table_through_an_engine_site(protected, certs):
    """Under required secure aggregation the engine site masks its combined counts and
    sums as the in-memory site masks its own: a Table 1 and a life table decoded from
    the masked sums are the same numbers with the third site in memory, in one
    partition or in three: bit for bit between one and three partitions (counts, and
    the Table 1's sums exact until rounded once), to round-off against the in-memory
    site (its rows read from CSV)."""
    from skfed.privacy import SecureAggregation
    from skfed.sites import SiteRefusal
    from skfed.stats import describe, kaplan_meier

    out = {}
    for home in ("memory", "one", "three"):
        data = _protected_data(protected, certs, home)
        try:
            with pytest.raises(SiteRefusal) as info:  # in the clear: refused, as in memory
                describe(data, by="sex", columns=["x", "ward"], quantiles=(), privacy=None)
            assert info.value.rule == "require"
            out[home] = (describe(data, by="sex", columns=["x", "z", "arm"], quantiles=(),
                                  privacy=SecureAggregation()),
                         kaplan_meier(data, time="time", event="event",
                                      time_grid=[2.0, 5.0, 10.0, 20.0],
                                      privacy=SecureAggregation()))
        finally:
            data.close()
    rows = protected[1]
    for table, life in out.values():
        assert table.masked and life.approximate
        assert str(int(rows["sex"].eq("f").sum())) in str(table.table)  # pooled, decoded
    tables = {home: (pd.DataFrame(t.table), pd.DataFrame(life)) for home, (t, life) in
              out.items()}
    for k in range(2):
        # the same bits in one and three partitions: counts, and sums exact until rounded
        pd.testing.assert_frame_equal(tables["one"][k], tables["three"][k], check_exact=True)
        pd.testing.assert_frame_equal(tables["memory"][k], tables["three"][k],
                                      check_exact=False, rtol=1e-12, atol=0)


def test_causal_estimators_through_an_engine_site(services, certs):
    """FedIPW (its stacked estimating equations' sums, the balance sums, the overlap
    counts) and FedAIPW through an engine site: the in-memory site's numbers, and
    delicatessen's Hajek IPW on the pooled rows."""
    import warnings

    from skfed.causal import FedAIPW, FedIPW

    delicatessen = pytest.importorskip("delicatessen")
    from delicatessen.estimating_equations import ee_ipw

    fits = {}
    for pair in (("other", "twin"), ("other", "ragged")):
        data = _dataset(services, certs, pair, ["x", "time", "event", "cause", "ward", "sex",
                                                "w", "arm"])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the extreme-weight counts
                fits[pair[1]] = (FedIPW().fit(data, treatment="treat", outcome="outcome"),
                                 FedAIPW().fit(data, treatment="treat", outcome="outcome"))
        finally:
            data.close()
    for memory, engine in zip(fits["twin"], fits["ragged"]):
        np.testing.assert_allclose(engine.params_, memory.params_, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(engine.cov_params_, memory.cov_params_, rtol=1e-10)
    rows = services[1]
    W = np.column_stack([np.ones(len(rows)), rows[["z", "grade"]]])
    m = delicatessen.MEstimator(lambda theta: ee_ipw(
        theta, rows["outcome"], rows["treat"], W, weight_type="hajek"), init=[0.0] * 6)
    m.estimate(solver="lm", tolerance=1e-13, deriv_method="exact")
    ipw = fits["ragged"][0]
    np.testing.assert_allclose(ipw.effect_, m.theta[0], rtol=1e-9)
    np.testing.assert_allclose(ipw.std_err_ ** 2, m.variance[0, 0], rtol=1e-6)


def test_overlap_counts_hidden_on_the_whole(hosts):
    """The overlap table's small bins are hidden on the combined counts: some are hidden
    in memory, the same ones on an engine (a per-partition hiding would hide more)."""
    args = {"spec": SPEC, "theta": THETA, "n_bins": 40, "threshold": 4.0, "min_count": 5}
    memory = ask(hosts["memory"], "causal.overlap_counts", dataset=DATA, **args)["ok"]
    assert memory["hidden"].sum() > 0 and (memory["counts"] >= 5).sum() > 5
    for name in ("three", "ragged"):
        engine = ask(hosts[name], "causal.overlap_counts", dataset=DATA, **args)["ok"]
        assert_same(memory, engine)


@pytest.mark.parametrize("ties", ["efron", "breslow"])
def test_cox_shared_baseline_through_an_engine_site(timed, certs, ties):
    """FedCoxPH with a shared baseline (risk-set sums at the event times: they add over
    partitions) through an engine site: the in-memory site's coefficients and robust
    standard errors (from the score residuals' sums) to 1e-10, and statsmodels' PHReg
    on the pooled rows (Breslow and Efron, its sandwich over full risk sets)."""
    import statsmodels.api as sm

    from skfed import FederatedDataset
    from skfed.survival import FedCoxPH

    servers, rows = timed
    fits = {}
    for name in ("twin", "ragged"):
        data = FederatedDataset.from_sites(
            {name: f"127.0.0.1:{servers[name].port}"}, dataset="rows",
            target=["event", "time"], drop=["x", "ward", "sex", "w", "cause", "arm", "treat",
                                             "outcome"],
            ca_file=certs.ca.cert, cert_file=certs.client.cert, key_file=certs.client.key)
        try:
            fits[name] = FedCoxPH(ties=ties, cov_type="robust", tol=1e-12).fit(data)
        finally:
            data.close()
    memory, engine = fits["twin"], fits["ragged"]
    np.testing.assert_allclose(engine.coef_, memory.coef_, rtol=1e-10)
    np.testing.assert_allclose(engine.bse_, memory.bse_, rtol=1e-10)
    # statsmodels' PHReg: Breslow and Efron, its sandwich over full risk sets (with tied
    # times lifelines' robust residuals depend on the row order: tests/test_cox.py)
    # (statsmodels' sandwich is NaN with rows censored before the first event; they are
    # in no risk set of an event and have no score residual: left out, nothing changes)
    rows = rows[rows["time"] > 0.02]
    ref = sm.PHReg(rows["time"].to_numpy(), rows[["z", "grade"]].to_numpy(),
                   status=rows["event"].to_numpy(), ties=ties).fit(
                       groups=np.arange(len(rows)))
    np.testing.assert_allclose(engine.coef_, ref.params, rtol=1e-8)
    np.testing.assert_allclose(engine.bse_, np.sqrt(np.diag(ref.cov_params())), rtol=1e-6)


def test_cox_time_grid_through_an_engine_site(services, certs):
    """FedCoxPH on a time grid (no event time released; each interval's events and rows
    decided on the whole dataset) through an engine site equals the in-memory site's."""
    from skfed import FederatedDataset
    from skfed.survival import FedCoxPH

    fits = []
    for pair in (("other", "twin"), ("other", "ragged")):
        servers, _ = services
        data = FederatedDataset.from_sites(
            {name: f"127.0.0.1:{servers[name].port}" for name in pair}, dataset="rows",
            target=["event", "time"], drop=["x", "ward", "sex", "w", "cause", "arm", "treat",
                                             "outcome"],
            ca_file=certs.ca.cert, cert_file=certs.client.cert, key_file=certs.client.key)
        try:
            fits.append(FedCoxPH(time_grid=[2.0, 5.0, 10.0, 20.0], tol=1e-12).fit(data))
        finally:
            data.close()
    np.testing.assert_allclose(fits[1].coef_, fits[0].coef_, rtol=1e-10)
    np.testing.assert_allclose(fits[1].bse_, fits[0].bse_, rtol=1e-10)
