"""FedCoxPH through real site services (gRPC, mutual TLS): the same numbers as in
process, under the sites' disclosure rules for event times."""

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
lifelines = pytest.importorskip("lifelines")

from skfed import FederatedDataset  # noqa: E402
from skfed.deploy import make_certificates  # noqa: E402
from skfed.privacy import SecureAggregation  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.policy import load_config  # noqa: E402
from skfed.sites.transport import SiteServer  # noqa: E402
from skfed.survival import FedCoxPH, concordance_index, survival_target  # noqa: E402

from ._sites import ROSSI_POLICY, SITES, site_config, split_frames  # noqa: E402

COVARIATES = ["fin", "age", "race", "wexp", "mar", "paro", "prio"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs"), list(SITES))


@pytest.fixture
def rossi_sites(tmp_path, certs):
    """lifelines' rossi data at three site services (split by age: shifted sites)."""
    from lifelines.datasets import load_rossi

    frame = load_rossi()
    servers = []

    def start(policy="", base=ROSSI_POLICY):
        policy = f"{base}\n{policy}"
        addresses, parts = {}, split_frames(frame, 3, by="age")
        for k, name in enumerate(SITES):
            folder = tmp_path / f"{name}-{len(servers)}"
            folder.mkdir()
            parts[k].to_csv(folder / "rossi.csv", index=False)
            path = site_config(folder, name, certs=certs, datasets={"rossi": ("rossi.csv", None)},
                               policy=policy)
            servers.append(SiteServer(load_config(path)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        data = FederatedDataset.from_sites(addresses, dataset="rossi", target=["arrest", "week"],
                                           ca_file=certs.ca.cert, cert_file=certs.client.cert,
                                           key_file=certs.client.key)
        pooled = pd.concat(parts, ignore_index=True)
        site = np.repeat(list(SITES), [len(p) for p in parts])
        return data, pooled, site, folder.parent

    yield start
    for server in servers:
        server.stop()


def _local(pooled, site, **params):
    y = survival_target(pooled["arrest"], pooled["week"])
    return FedCoxPH(**params).fit(pooled[COVARIATES], y, clients=site)


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secure"])
@pytest.mark.parametrize("cov_type", ["nonrobust", "cluster"])
def test_cox_stratified_by_site_through_services(rossi_sites, secure, cov_type):
    data, pooled, site, root = rossi_sites()
    privacy = SecureAggregation() if secure else None
    remote = FedCoxPH(strata="site", cov_type=cov_type, privacy=privacy).fit(data)
    local = _local(pooled, site, strata="site", cov_type=cov_type, privacy=privacy)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9)
    np.testing.assert_allclose(remote.bse_, local.bse_, rtol=1e-8)
    # rossi's weeks are tied: statsmodels' robust covariance is the reference (lifelines
    # breaks ties in its score residuals by row order); the fit itself is lifelines'
    from statsmodels.duration.hazard_regression import PHReg

    ref = PHReg(pooled["week"].to_numpy(float), pooled[COVARIATES].to_numpy(float),
                status=pooled["arrest"].to_numpy(float), strata=site, ties="efron").fit(
        **({} if cov_type == "nonrobust" else {"groups": site}))
    np.testing.assert_allclose(remote.coef_, ref.params, rtol=1e-8)
    np.testing.assert_allclose(remote.bse_, ref.bse, rtol=1e-6)
    # the concordance index over each site's own pairs: four counts per site
    result = concordance_index(remote, data)
    assert 0.5 < result["pooled"] < 1 and set(result["per_site"]) == set(SITES)
    # the (time, risk) histograms have cells of fewer than min_level_count rows: the
    # sites keep them, and the index is over the pairs within sites
    assert not result["exact"] and not result["cross_site_pairs"]
    y = survival_target(pooled["arrest"], pooled["week"])
    for name in SITES:
        rows = site == name
        assert result["per_site"][name] == pytest.approx(
            remote.score(pooled[COVARIATES][rows], y[rows]), rel=1e-12)
    lines = read_audit(root / f"{SITES[0]}-0" / "audit.jsonl")
    ops = {line["operation"] for line in lines if line["outcome"] == "ok"}
    assert {"fit.step", "evaluate.concordance"} <= ops
    assert ("fit.cox_inference" in ops) is not secure  # masked: a "sums" step of fit.step
    data.close()


def test_cox_shared_baseline_needs_event_times_permission(rossi_sites):
    data, pooled, site, _ = rossi_sites()
    with pytest.raises(SiteRefusal) as info:
        FedCoxPH().fit(data)
    assert info.value.rule == "allow_event_times"
    data.close()


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secure"])
def test_cox_shared_baseline_exact_when_the_sites_allow_it(rossi_sites, secure):
    data, pooled, site, root = rossi_sites("allow_event_times = true")
    privacy = SecureAggregation() if secure else None
    remote = FedCoxPH(cov_type="robust", privacy=privacy).fit(data)
    local = _local(pooled, site, cov_type="robust", privacy=privacy)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9)
    np.testing.assert_allclose(remote.bse_, local.bse_, rtol=1e-8)
    times = [10.0, 30.0, 50.0]
    np.testing.assert_allclose(remote.predict_survival_function(pooled[COVARIATES][:5], times),
                               local.predict_survival_function(pooled[COVARIATES][:5], times),
                               rtol=1e-8)
    # sites that allow event times send their (time, risk) histograms: pairs across sites
    y = survival_target(pooled["arrest"], pooled["week"])
    remote_c = concordance_index(remote, data)
    local_c = concordance_index(local, FederatedDataset.from_arrays(pooled[COVARIATES], y, site))
    assert remote_c["cross_site_pairs"]
    assert remote_c["pooled"] == pytest.approx(local_c["pooled"], rel=1e-12)
    exact = local.score(pooled[COVARIATES], y)
    assert remote_c["lower"] <= exact <= remote_c["upper"]
    assert remote_c["pooled"] == pytest.approx(exact, abs=5e-3)
    data.close()


def test_cox_time_grid_under_the_small_count_rule(rossi_sites):
    data, pooled, site, _ = rossi_sites("min_level_count = 5")
    # weekly intervals: some weeks hold one or two arrests at a site -> refused
    with pytest.raises(SiteRefusal) as info:
        FedCoxPH(time_grid=np.arange(1, 53)).fit(data)
    assert info.value.rule == "min_level_count"
    # two half-years hold enough events and leavers at every site
    grid = np.array([26.0])
    remote = FedCoxPH(time_grid=grid).fit(data)
    local = _local(pooled, site, time_grid=grid)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9)
    np.testing.assert_allclose(remote.bse_, local.bse_, rtol=1e-8)
    data.close()


def test_secure_shared_baseline_and_a_server_that_rescales_one_site(rossi_sites, monkeypatch):
    """Sites that require secure aggregation fit a shared baseline on a grid masked; a
    server that gives one site another scale (to tell its sums from the others') is
    refused by that site."""
    from skfed.sites.remote import SiteServiceExecutor

    data, pooled, site, _ = rossi_sites('require = ["secure_aggregation"]\n'
                                        'consortium = ["hospital-a", "hospital-b", '
                                        '"hospital-c"]')
    grid = np.array([26.0])
    with pytest.raises(SiteRefusal) as info:
        FedCoxPH(time_grid=grid).fit(data)
    assert info.value.rule == "require"
    remote = FedCoxPH(time_grid=grid, privacy=SecureAggregation()).fit(data)
    local = _local(pooled, site, time_grid=grid)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-8)
    np.testing.assert_allclose(remote.bse_, local.bse_, rtol=1e-7)

    original = SiteServiceExecutor.run_round

    def rescale_first_site(self, solver, rnd, jobs, *, retry=False):
        jobs = [(j, dict(m, inner=dict(m["inner"], sum_scale=1.0))
                 if j == 0 and isinstance(m, dict) and m.get("kind") == "round" else m, seed)
                for j, m, seed in jobs]
        return original(self, solver, rnd, jobs, retry=retry)

    monkeypatch.setattr(SiteServiceExecutor, "run_round", rescale_first_site)
    with pytest.raises(SiteRefusal) as info:
        FedCoxPH(time_grid=grid, privacy=SecureAggregation()).fit(data)
    assert info.value.rule == "require" and "scale" in str(info.value)
    data.close()


def test_cox_strata_column_through_services(rossi_sites):
    """strata on a column of the sites' tables: each site moves the column into its
    target (a declared row step) after the pooled levels are known."""
    data, pooled, site, root = rossi_sites()
    remote = FedCoxPH(strata=["site", "wexp"]).fit(data)
    local = _local(pooled, site, strata=["site", "wexp"])
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9)
    np.testing.assert_allclose(remote.bse_, local.bse_, rtol=1e-8)
    assert "wexp" not in remote.feature_names_in_
    ref = lifelines.CoxPHFitter().fit(pooled.assign(site=site), "week", "arrest",
                                      strata=["site", "wexp"],
                                      fit_options={"precision": 1e-16, "r_precision": 0})
    np.testing.assert_allclose(remote.coef_, ref.params_.to_numpy(), rtol=1e-8)
    lines = read_audit(root / f"{SITES[0]}-0" / "audit.jsonl")
    assert any(line["operation"] == "survival.strata_levels" and line["outcome"] == "ok"
               for line in lines)
    # a level held by fewer than min_level_count rows at a site is refused there
    with pytest.raises(SiteRefusal) as info:
        FedCoxPH(strata=["site", "prio"]).fit(data)
    assert info.value.rule == "min_level_count"
    data.close()


@pytest.mark.parametrize("transform", ["km", "identity", "rank"])
def test_proportional_hazards_test_through_services(rossi_sites, transform):
    """The PH test's sums are operations of the sites' table: the same table as in
    process (a shared baseline, at sites that allow exact event times)."""
    from skfed.survival import proportional_hazard_test

    data, pooled, site, _ = rossi_sites("allow_event_times = true")
    remote = FedCoxPH().fit(data)
    local = _local(pooled, site)
    through = proportional_hazard_test(remote, data, time_transform=transform)
    y = survival_target(pooled["arrest"], pooled["week"])
    here = proportional_hazard_test(local, pooled[COVARIATES], y, clients=site,
                                    time_transform=transform)
    np.testing.assert_allclose(np.asarray(through["test_statistic"], dtype=float),
                               np.asarray(here["test_statistic"], dtype=float),
                               rtol=1e-8)


def test_proportional_hazards_test_respects_the_event_time_rule(rossi_sites):
    """Without allow_event_times, a time of the pooled grid with 1 to min_level_count - 1
    events at a site is refused, as the fit's risk sets are."""
    from skfed.survival import proportional_hazard_test

    data, pooled, site, _ = rossi_sites("allow_event_times = true")
    fitted = FedCoxPH().fit(data)
    strict, _, _, _ = rossi_sites("")
    with pytest.raises(SiteRefusal, match="fewer than"):
        proportional_hazard_test(fitted, strict, time_transform="km")
