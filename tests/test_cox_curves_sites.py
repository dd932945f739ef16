"""Survival curves of a Cox model stratified by site, through real site services.

A site that does not release its event times reports its baseline hazard at
cut points it chooses under its small-count rule (every interval 0 or at
least ``min_level_count`` events and rows), so ``predict_survival_function``
works without a grid; at those cut points the curves are the exact Breslow
curves of the in-process fit. A grid the analyst gives that breaks the rule is
refused with the subset of its cut points that would pass, and that subset
passes. A modified client asking for finer cuts than the rule allows gets the
site's floor, never single events.
"""

import re

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
lifelines = pytest.importorskip("lifelines")

from skfed import FederatedDataset  # noqa: E402
from skfed.datafits.cox import CoxPartialLikelihood  # noqa: E402
from skfed.data.site import Targets  # noqa: E402
from skfed.deploy import make_certificates  # noqa: E402
from skfed.federation.layout import Layout  # noqa: E402
from skfed.linear_model._inference import InferenceError  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.policy import load_config  # noqa: E402
from skfed.sites.transport import SiteConnection, SiteServer  # noqa: E402
from skfed.survival import FedCoxPH, survival_target  # noqa: E402
from skfed.survival._grid import intervals_pass, roundest_between  # noqa: E402

from ._sites import ROSSI_POLICY, SITES, site_config, split_frames  # noqa: E402

COVARIATES = ["fin", "age", "race", "wexp", "mar", "paro", "prio"]
FLOOR = 5  # the services' min_level_count (the default)


@pytest.fixture(scope="module")
def rossi_services(tmp_path_factory):
    """lifelines' rossi data at three site services (split by age), default policy."""
    from lifelines.datasets import load_rossi

    root = tmp_path_factory.mktemp("curves")
    certs = make_certificates(root / "certs", list(SITES))
    parts = split_frames(load_rossi(), 3, by="age")
    servers, addresses = [], {}
    try:
        for name, part in zip(SITES, parts):
            folder = root / name
            folder.mkdir()
            part.to_csv(folder / "rossi.csv", index=False)
            path = site_config(folder, name, certs=certs,
                               datasets={"rossi": ("rossi.csv", None)}, policy=ROSSI_POLICY)
            servers.append(SiteServer(load_config(path)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        yield {"addresses": addresses, "certs": certs, "parts": dict(zip(SITES, parts))}
    finally:
        for server in servers:
            server.stop()


def _data(services):
    certs = services["certs"]
    return FederatedDataset.from_sites(services["addresses"], dataset="rossi",
                                       target=["arrest", "week"], ca_file=certs.ca.cert,
                                       cert_file=certs.client.cert, key_file=certs.client.key)


def _local(services, **params):
    parts = services["parts"]
    pooled = pd.concat(parts.values(), ignore_index=True)
    site = np.repeat(list(parts), [len(p) for p in parts.values()])
    y = survival_target(pooled["arrest"], pooled["week"])
    return FedCoxPH(**params).fit(pooled[COVARIATES], y, clients=site), pooled, site


def _passes_at(part, cuts):
    return intervals_pass(part["week"].to_numpy(float), part["arrest"].to_numpy() > 0, cuts,
                          FLOOR)


def test_curves_without_a_grid_at_cut_points_the_sites_choose(rossi_services):
    with _data(rossi_services) as data:
        remote = FedCoxPH(strata="site", tol=1e-10).fit(data)
    local, pooled, site = _local(rossi_services, strata="site", tol=1e-10)
    X = pooled[COVARIATES]
    curves = remote.predict_survival_function(X, strata=site)  # no grid given: it works
    assert curves.shape[0] == len(X) and np.all((curves > 0) & (curves <= 1))
    for name, part in rossi_services["parts"].items():
        cuts = remote.baseline_times_[name]
        events = part.loc[part["arrest"] > 0, "week"]
        # coarser than the site's event times, every interval under the site's rule, and
        # no event left beyond the last cut (its hazard is in the curve)
        assert 2 <= len(cuts) < events.nunique() and _passes_at(part, cuts)
        assert cuts[-1] >= events.max()
        # at the cut points: the exact Breslow curves of the same model in process
        rows = site == name
        np.testing.assert_allclose(
            remote.predict_survival_function(X[rows], cuts, strata=site[rows]),
            local.predict_survival_function(X[rows], cuts, strata=site[rows]), rtol=1e-8)
    # and lifelines' stratified fit on the pooled rows gives the same curves there
    frame = pooled[COVARIATES + ["arrest", "week"]].assign(site=site)
    ref = lifelines.CoxPHFitter().fit(frame, "week", "arrest", strata=["site"])
    name = SITES[0]
    cuts = remote.baseline_times_[name]
    mine = remote.predict_survival_function(X[site == name][:3], cuts,
                                            strata=site[site == name][:3])
    rows = frame[site == name][:3]  # one stratum: lifelines keeps the rows' order
    theirs = ref.predict_survival_function(rows, times=cuts)[rows.index].to_numpy().T
    np.testing.assert_allclose(mine, theirs, rtol=1e-6)


def _curves_or_refusal(fit, rows):
    """The fitted model's curves at week 20 for ``rows`` of the first site, or the
    refusal's message (a refused baseline leaves the fit standing)."""
    try:
        return fit.predict_survival_function(rows, [20.0], strata=[SITES[0]] * len(rows))
    except InferenceError as refusal:
        return str(refusal)


def test_a_refused_grid_says_the_rule_only(rossi_services):
    """A grid of single weeks breaks the rule at a site: the refusal says which rule,
    never which intervals hold few events (that would be the site's event times); the
    fit stands, and without a grid each site chooses cut points that pass."""
    weekly = np.arange(1.0, 53.0)
    rows = rossi_services["parts"][SITES[0]][COVARIATES][:2]
    with _data(rossi_services) as data:
        answer = _curves_or_refusal(FedCoxPH(strata="site", time_grid=weekly).fit(data), rows)
        assert isinstance(answer, str) and "min_level_count" in answer
        assert set(re.findall(r"\d+", answer)) <= {str(FLOOR)}  # no week, no count
        curves = _curves_or_refusal(FedCoxPH(strata="site").fit(data), rows)
        assert not isinstance(curves, str) and curves.shape == (2, 1)
        with pytest.raises(SiteRefusal) as info:  # a shared baseline's grid: the same rule
            FedCoxPH(time_grid=weekly).fit(data)
        assert info.value.rule == "min_level_count"
        assert set(re.findall(r"\d+", str(info.value))) <= {str(FLOOR)}


def test_a_modified_client_cannot_ask_for_finer_cut_points(rossi_services):
    """Raw ``fit.cox_baseline`` calls, as a modified client would send them."""
    name = SITES[1]
    part = rossi_services["parts"][name]
    certs = rossi_services["certs"]
    conn = SiteConnection(name, rossi_services["addresses"][name], ca_file=certs.ca.cert,
                          cert_file=certs.client.cert, key_file=certs.client.key)
    try:
        session = conn.call("fit.open", dataset={"name": "rossi", "target": ["arrest", "week"],
                                                  "drop": []},
                            datafit=CoxPartialLikelihood("efron"),
                            layout=Layout(1, len(COVARIATES), fit_intercept=False),
                            targets=Targets("survival"))
        theta = np.full(len(COVARIATES), 0.05)
        events = part["arrest"].to_numpy() > 0
        # asking for groups of one event: the site groups at least its floor
        for min_count in (1, None):
            reply = conn.call("fit.cox_baseline", session=session, theta=theta, cuts=None,
                              min_count=min_count)
            cuts = reply["times"]
            assert len(cuts) < part.loc[events, "week"].nunique() and _passes_at(part, cuts)
            # the finest grid the rule allows is no finer than this one
            assert not _passes_at(part, np.unique(part.loc[events, "week"]))
        # a grid of single weeks: refused, saying the rule only
        with pytest.raises(SiteRefusal) as info:
            conn.call("fit.cox_baseline", session=session, theta=theta,
                      cuts=np.arange(1.0, 53.0))
        assert info.value.rule == "min_level_count"
        # a grid that passes here (the cut points the site chose) is answered at them
        reply = conn.call("fit.cox_baseline", session=session, theta=theta, cuts=cuts)
        np.testing.assert_array_equal(reply["times"], cuts)
        with pytest.raises(SiteRefusal) as info:  # not an integer
            conn.call("fit.cox_baseline", session=session, theta=theta, cuts=None,
                      min_count=True)
        assert info.value.rule == "message"
        # an unsorted grid would check intervals other than those of the times released
        # (H(31) - H(30): the events of one week)
        with pytest.raises(SiteRefusal) as info:
            conn.call("fit.cox_baseline", session=session, theta=theta,
                      cuts=np.array([30.0, 10.0, 31.0]))
        assert info.value.rule == "message"
    finally:
        conn.close()


def test_cut_points_are_the_roundest_numbers_between_two_times():
    assert roundest_between(17.0, 18.0) == 17.0  # whole weeks: a week
    assert roundest_between(16.2, 19.0) == 18.0
    assert roundest_between(123.4, 123.45) == 123.4
    assert roundest_between(2358.0, 2400.0) == 2360.0
    assert roundest_between(0.31, 0.35) == 0.32
    assert roundest_between(5.0, np.inf) == 5.0
