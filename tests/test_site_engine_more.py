"""The last sums over rows an engine serves (issue 38): the discrete models' terms and
meats, a GLM's cluster inference, the IPW survival counts (their per-time dominance
check merged across partitions), a formula's extremes and the data checks, at a site
whose dataset lives on a Dask cluster (1 and 3 Parquet partitions) against the
in-memory site of the same rows; the merged per-group audit decides as one process."""

import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

from skfed.federation import dominance  # noqa: E402
from skfed.sites.host import SiteHost  # noqa: E402
from skfed.sites.policy import load_config  # noqa: E402

from . import test_site_engine as _engine  # noqa: E402
from .test_site_engine import (_decide_merged, _decide_whole, _fit_both,  # noqa: E402
                               _parts, assert_engine_answers_as_memory, assert_same, ask,
                               engine_hosts, write_site)
from .test_site_engine_counts import _rows  # noqa: E402

certs, services = _engine.certs, _engine.services  # its fixtures: the same certificates

PARTITIONINGS = {"one": [600], "three": [200, 250, 150]}
POLICY = "min_rows = 10\nmin_level_count = 5\nallow_exact_quantiles = true"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, certs):
    """``{name: SiteHost}``: the in-memory site and one engine site per partitioning."""
    out = engine_hosts(tmp_path_factory.mktemp("engine-more-sites"), _rows(), certs, PARTITIONINGS,
                       policy=POLICY, declare="")
    yield out
    for host in out.values():
        host.close()


#: the ordinal outcome ``grade`` (1, 2, 3) by ``z`` and ``treat``
DISCRETE = {"name": "rows", "drop": ["x", "ward", "sex", "w", "time", "event", "cause",
                                     "arm", "outcome"]}
LEVELS = [1.0, 2.0, 3.0]
SPEC = {"treatment": "treat", "outcome": "outcome", "covariates": ["z", "grade"],
        "estimand": "ATE", "stabilized": False, "truncate": None, "trim": None,
        "method": "ipw", "family": "gaussian", "scores": "logistic"}
THETA = [3.0, 1.0, -1.2, 0.25, -0.3]  # the arms' means, the propensity model
GRID = [0.005, 2.05, 5.05, 10.05, 20.05]  # no row before the first time
REQUESTS = [
    ("discrete.ordinal_terms", {"dataset": DISCRETE, "response": "grade", "levels": LEVELS,
                                "distr": "logit", "params": [0.1, 0.3, 0.2, 1.3]}),
    ("discrete.ordinal_terms", {"dataset": DISCRETE, "response": "grade", "levels": LEVELS,
                                "distr": "probit", "params": [-0.05, 0.2, -0.4, 0.6]}),
    ("discrete.mnlogit_terms", {"dataset": DISCRETE, "response": "grade", "levels": LEVELS,
                                "intercept": True,
                                "params": [0.2, -0.03, 0.1, -0.1, 0.02, 0.3]}),
    ("discrete.meat", {"dataset": DISCRETE, "model": "ordinal", "response": "grade",
                       "levels": LEVELS, "distr": "logit", "intercept": False,
                       "params": [0.1, 0.3, 0.2, 1.3]}),
    ("discrete.meat", {"dataset": DISCRETE, "model": "mnlogit", "response": "grade",
                       "levels": LEVELS, "distr": "logit", "intercept": True,
                       "params": [0.2, -0.03, 0.1, -0.1, 0.02, 0.3]}),
    ("discrete.cumulative_logits", {"dataset": DISCRETE, "response": "grade",
                                    "levels": LEVELS,
                                    "params": [0.4, 0.05, -0.2, -1.0, 0.04, 0.3]}),
    ("causal.weighted_survival_counts", {"dataset": {"name": "rows"}, "spec": SPEC,
                                         "theta": THETA, "time": "time", "event": "event",
                                         "times": GRID}),
    ("causal.weighted_life_table", {"dataset": {"name": "rows"}, "spec": SPEC,
                                    "theta": THETA, "time": "time", "event": "event",
                                    "cuts": [2.0, 5.0, 10.0, 20.0]}),
    ("formula.extremes", {"dataset": {"name": "rows"}, "columns": ["x", "z", "time"]}),
    ("data.check", {"dataset": {"name": "rows", "drop": ["x", "ward", "sex", "arm"]}}),
    ("data.inspect", {"dataset": {"name": "rows", "target": "event"},
                      "categorical": ["ward", "sex", "arm"]}),
]


@pytest.mark.parametrize("partitioning", sorted(PARTITIONINGS))
@pytest.mark.parametrize("op,args", REQUESTS, ids=[f"{op}-{k}" for k, (op, _) in
                                                   enumerate(REQUESTS)])
def test_engine_equals_in_memory(hosts, partitioning, op, args):
    assert_engine_answers_as_memory(hosts, partitioning, op, args)


def test_inspect_blanks_on_the_whole(hosts):
    """``data.inspect``'s small counts are blanked on the combined counts: x's 20
    missing values are released whole (no partition's share is blanked), the 9
    missing ``sex`` values as in memory."""
    args = {"dataset": {"name": "rows"}, "categorical": ["ward", "sex", "arm"]}
    memory = ask(hosts["memory"], "data.inspect", **args)["ok"]
    assert memory["columns"]["x"][0] == 20 and memory["incomplete"] == 29 - _both(hosts)
    for name in PARTITIONINGS:
        assert ask(hosts[name], "data.inspect", **args)["ok"] == memory


def _both(hosts):
    frame = _rows()
    return int((frame["x"].isna() & frame["sex"].isna()).sum())


@pytest.mark.parametrize("op,args", [
    ("data.check", {"dataset": {"name": "rows", "drop": ["ward", "sex", "arm"]}}),  # x NaN
    ("data.check", {"dataset": {"name": "rows", "drop": ["x", "sex", "arm"]}}),  # text
    ("formula.extremes", {"dataset": {"name": "rows"}, "columns": ["ward"]}),
])
def test_engine_refuses_as_in_memory(hosts, op, args):
    memory = ask(hosts["memory"], op, **args)
    assert "error" in memory, memory
    for name in PARTITIONINGS:
        engine = ask(hosts[name], op, **args)
        assert engine["error"] == memory["error"]


def test_still_refused_naming_the_reason(hosts):
    """What needs a sort stays refused on an engine with its reason."""
    reply = ask(hosts["three"], "stats.describe", dataset={"name": "rows"}, columns=["z"],
                by=None, quantiles=[0.5], min_count=1)
    assert reply["error"]["rule"] == "engine" and "sort" in reply["error"]["message"]


# --- the per-group audit merged across partitions -----------------------------------
@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("after", [False, True])
def test_merged_group_audit_decides_as_one_process(seed, after):
    """Heavy-tailed values in a few groups, split at random (parts of one row, parts
    without some groups): the merged per-group decision is the one-process one."""
    rng = np.random.default_rng(seed)
    n, min_rows = int(rng.integers(15, 80)), int(rng.integers(2, 8))
    share, n_groups = float(rng.uniform(0.3, 0.95)), int(rng.integers(1, 8))
    v = rng.pareto(1.0, size=n) * (rng.random(n) < 0.8)
    g = rng.integers(0, n_groups, size=n)

    def case(rows):
        dominance.check_groups(v[rows], g[rows], n_groups, at_or_after=after)

    whole = _decide_whole(min_rows, share, lambda: case(np.arange(n)))
    merged = _decide_merged(min_rows, share,
                            [lambda r=r: case(r) for r in _parts(n, rng)])
    assert whole == merged


def test_merged_group_audit_sees_both_outcomes():
    seen = set()
    for seed in range(40):
        for after in (False, True):
            rng = np.random.default_rng(seed)
            n, min_rows = int(rng.integers(15, 80)), int(rng.integers(2, 8))
            share, n_groups = float(rng.uniform(0.3, 0.95)), int(rng.integers(1, 8))
            v = rng.pareto(1.0, size=n) * (rng.random(n) < 0.8)
            g = rng.integers(0, n_groups, size=n)
            seen.add(_decide_whole(min_rows, share, lambda: dominance.check_groups(
                v, g, n_groups, at_or_after=after)))
    assert seen == {"ok", "dominance"}


def _attack_rows(heavy):
    """20 treated events at time 7.77, spread over the partitions (rows 0-599 by 30);
    with ``heavy`` one of them (row 330, in the second of three partitions) has a
    propensity of about 1e-3: its IPW weight makes up that time's weighted events,
    though not its arm's total."""
    frame = _rows()
    at = np.arange(0, 600, 30)
    frame.loc[at, ["time", "event", "treat"]] = [7.77, 1, 1.0]
    frame.loc[at, ["z", "grade"]] = [6.0, 2.0]
    if heavy:
        frame.loc[330, ["z", "grade"]] = [-20.0, 1.0]
    return frame


@pytest.mark.parametrize("heavy", [True, False])
def test_group_dominated_by_one_row_refused_as_in_memory(tmp_path, certs, heavy):
    """A time's weighted events dominated by one row of one partition are refused on
    the engine as in memory; without that row the same time passes on the whole
    dataset, though the first partition of two rows holds 1 of its 20 rows (a part
    dominated within itself does not refuse)."""
    frame = _attack_rows(heavy)
    sites = {"memory": None, "three": [200, 250, 150], "ragged": [2, 327, 1, 120, 150]}
    args = {"dataset": {"name": "rows"}, "spec": SPEC, "theta": THETA, "time": "time",
            "event": "event", "times": [0.005, 2.05, 5.05, 7.77, 10.05, 20.05]}
    replies = {}
    for name, sizes in sites.items():
        host = SiteHost(load_config(write_site(tmp_path / name, "memory", frame, certs,
                                               sizes, policy=POLICY, declare="")))
        try:
            replies[name] = ask(host, "causal.weighted_survival_counts", **args)
        finally:
            host.close()
    if heavy:
        for reply in replies.values():
            assert reply["error"]["rule"] == "dominance", reply
            assert "weighted events" not in reply["error"]["message"]  # the fixed text
        return
    for name in ("three", "ragged"):
        assert "ok" in replies[name], replies[name]
        assert_same(replies["memory"]["ok"], replies[name]["ok"])
    assert replies["memory"]["ok"]["events"][0][3] == 20


def test_group_refusal_is_the_group_check(certs):
    """The heavy row's refusal above comes from the per-time check, not the arm's
    total (which it does not dominate): decided in one process on its rows."""
    from skfed.causal._survival_site import site_weighted_survival_counts
    from skfed.data.sources import split_table

    frame = _attack_rows(True)
    rows = split_table("memory", frame, target=None)
    grid = np.array([0.005, 2.05, 5.05, 7.77, 10.05, 20.05])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="dominated") as refused:
            with dominance.audit(10, 0.95):
                site_weighted_survival_counts(rows, SPEC, np.asarray(THETA), "time",
                                              "event", grid)
    assert "weighted events" in refused.value.detail


# --- a GLM's cluster inference through site services --------------------------------
def test_cluster_inference_through_an_engine_site(services, certs):
    """``cov_type="cluster"``: the site's meat is the outer product of its whole score
    sum (the partitions' score sums added first): the engine site's standard errors
    equal the in-memory site's and statsmodels' with the sites as the groups."""
    import statsmodels.api as sm

    from skfed.linear_model import FedPoissonRegressor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # two clusters: few, and said so
        memory, engine = _fit_both(
            services, certs, lambda: FedPoissonRegressor(alpha=0.0, cov_type="cluster"),
            "c", ["b", "y", "w"])
    np.testing.assert_allclose(engine.coef_, memory.coef_, rtol=1e-10)
    np.testing.assert_allclose(engine.bse_, memory.bse_, rtol=1e-10)
    frame = services[1]
    X = sm.add_constant(frame[["x0", "x1", "x2", "x3"]].to_numpy())
    groups = np.repeat([0, 1], [400, len(frame) - 400])
    ref = sm.GLM(frame["c"].to_numpy(), X, family=sm.families.Poisson()).fit(
        tol=1e-12, cov_type="cluster", cov_kwds={"groups": groups})
    np.testing.assert_allclose(engine.coef_, ref.params[1:], rtol=1e-6)
    np.testing.assert_allclose(engine.bse_, ref.bse, rtol=1e-6)


# --- the discrete models through site services --------------------------------------
def _data(servers, certs, ports, target="b", drop=("c", "y", "w")):
    from skfed import FederatedDataset

    return FederatedDataset.from_sites(
        {name: f"127.0.0.1:{servers[home].port}" for name, home in ports.items()},
        dataset="rows", target=target, drop=list(drop), ca_file=certs.ca.cert,
        cert_file=certs.client.cert, key_file=certs.client.key)


def test_discrete_models_through_an_engine_site(services, certs):
    """FedMNLogit (HC0, and the sites as clusters) through a site on an engine equals the
    in-memory site's fit, and statsmodels' on the pooled rows with the sites as the
    groups (the ordinal model's terms and meats, of three levels, are held equal to the
    in-memory site's above: this data's outcome has two)."""
    import statsmodels.api as sm

    from skfed.discrete import FedMNLogit

    fits = {}
    for home in ("twin", "ragged"):
        data = _data(services[0], certs, {"other": "other", home: home})
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # two clusters: few, and said so
                fits[home] = (FedMNLogit(cov_type="cluster").fit(data),
                              FedMNLogit(cov_type="HC0").fit(data))
        finally:
            data.close()
    for memory, engine in zip(fits["twin"], fits["ragged"]):
        np.testing.assert_allclose(engine.params_, memory.params_, rtol=1e-10)
        np.testing.assert_allclose(engine.bse_, memory.bse_, rtol=1e-10)
        assert abs(engine.llf_ - memory.llf_) < 1e-9
    frame = services[1]
    groups = np.repeat([0, 1], [400, len(frame) - 400])
    ref = sm.MNLogit(frame["b"], sm.add_constant(frame[["x0", "x1", "x2", "x3"]])).fit(
        method="newton", tol=1e-12, disp=0, cov_type="cluster", cov_kwds={"groups": groups})
    np.testing.assert_allclose(fits["ragged"][0].params_, ref.params.to_numpy().ravel(
        order="F"), atol=1e-6)
    np.testing.assert_allclose(fits["ragged"][0].bse_, ref.bse.to_numpy().ravel(order="F"),
                               rtol=1e-6)
    ref = sm.MNLogit(frame["b"], sm.add_constant(frame[["x0", "x1", "x2", "x3"]])).fit(
        method="newton", tol=1e-12, disp=0, cov_type="HC0")
    np.testing.assert_allclose(fits["ragged"][1].bse_, ref.bse.to_numpy().ravel(order="F"),
                               rtol=1e-6)


protected = _engine.protected


def test_discrete_masked_through_an_engine_site(protected, certs):
    """Where the sites require secure aggregation, the plain multinomial logit is refused
    by the engine site as by the in-memory one; its masked sums (terms, null model,
    the cluster meat) give the in-memory site's fit."""
    from skfed.discrete import FedMNLogit
    from skfed.privacy import SecureAggregation
    from skfed.sites import SiteRefusal

    fits, rules = {}, {}
    for home in ("memory", "engine"):
        data = _data(protected[0], certs, {"other": "other", "twin": "twin",
                                           "ragged": home})
        try:
            with pytest.raises(SiteRefusal) as info:
                FedMNLogit().fit(data)
            rules[home] = info.value.rule
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # three clusters: few, and said so
                fits[home] = FedMNLogit(cov_type="cluster",
                                        privacy=SecureAggregation()).fit(data)
        finally:
            data.close()
    assert rules == {"memory": "require", "engine": "require"}
    np.testing.assert_allclose(fits["engine"].params_, fits["memory"].params_, rtol=1e-10)
    np.testing.assert_allclose(fits["engine"].bse_, fits["memory"].bse_, rtol=1e-10)


# --- the IPW survival counts, masked, through site services -------------------------
def test_ipw_survival_masked_through_an_engine_site(tmp_path, certs):
    """Where the sites require secure aggregation, the weighted curves (exact event
    times, and a life table on cut points) from masked counts through a site on an
    engine equal those through the in-memory site and in process; the plain counts
    are refused by both (rule ``require``)."""
    from skfed import FederatedDataset
    from skfed.causal import ipw_survival
    from skfed.privacy import SecureAggregation
    from skfed.sites import SiteRefusal
    from skfed.sites.transport import SiteServer

    from .test_causal_survival import _fit, _frame

    frame, site = _frame(n=900)
    parts = [frame[site == k].reset_index(drop=True) for k in range(3)]
    policy = ('min_rows = 10\nallow_event_times = true\nrequire = ["secure_aggregation"]\n'
              'consortium = ["other", "twin", "ragged"]')

    def serve(folder, name, rows, sizes=None):
        return SiteServer(load_config(write_site(tmp_path / folder, name, rows, certs, sizes,
                                                 policy=policy, declare="")))

    servers = {"other": serve("o", "other", parts[0]), "twin": serve("t", "twin", parts[1]),
               "memory": serve("m", "ragged", parts[2]),
               "engine": serve("e", "ragged", parts[2], [2, 150, 148])}
    local_data = FederatedDataset.from_arrays(frame.drop(columns=["y"]),
                                              frame["y"].to_numpy(), site)
    local = _fit(local_data)
    expected = [ipw_survival(local, local_data, time="t", event="e", cox=False),
                ipw_survival(local, local_data, time="t", event="e", cox=False,
                             time_grid=[0.25, 0.5, 1.0, 2.0])]
    try:
        for server in servers.values():
            server.start()
        for home in ("memory", "engine"):
            data = _data(servers, certs, {"other": "other", "twin": "twin", "ragged": home},
                         target="y", drop=())
            try:
                ipw = _fit(data, privacy=SecureAggregation())
                with pytest.raises(SiteRefusal) as info:
                    ipw_survival(ipw, data, time="t", event="e", cox=False)
                assert info.value.rule == "require"
                for grid, want in zip((None, [0.25, 0.5, 1.0, 2.0]), expected):
                    got = ipw_survival(ipw, data, time="t", event="e", cox=False,
                                       privacy=SecureAggregation(), time_grid=grid)
                    pd.testing.assert_frame_equal(got.curves, want.curves, rtol=1e-10)
                    pd.testing.assert_frame_equal(got.rmst, want.rmst, rtol=1e-10)
            finally:
                data.close()
    finally:
        for server in servers.values():
            server.stop()
