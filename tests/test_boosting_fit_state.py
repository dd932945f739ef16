"""A boosting fit's state kept at the sites between requests (issue 37, item 1).

A request names the fit's context and the model it extends by digest and carries
only the trees the site lacks (:mod:`skfed.ensemble._model_chain`); a site that
lost the state says so and the analyst resends it once, the trees unchanged; the
state is one analyst's, capped, evicted oldest first (:mod:`skfed.ensemble._fit_state`).
"""

import socket

import numpy as np
import pytest

from skfed.ensemble import FedHistGradientBoostingRegressor
from skfed.ensemble._fit_state import STORE, FitStateLost
from skfed.ensemble._model_chain import (ChainedModel, FitWire, chain_start, concat_packed,
                                         tree_digests)
from skfed.ensemble._tree import pack_trees
from skfed.federation.operations import Refused, Requester, requester

from .test_boosting_masked import assert_bitwise_same

PARAMS = dict(max_iter=12, max_leaf_nodes=8, early_stopping=False, random_state=0)


@pytest.fixture(autouse=True)
def _one_pass_per_site(monkeypatch):
    """The sites' protocol, one request per site as on Dask and at site services (in
    process the rows' passes pool: tests/test_boosting_pooled.py)."""
    from skfed.ensemble._fit import BoostingRun

    monkeypatch.setattr(BoostingRun, "pools_sites", False)


def _data(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X[::17, 2] = np.nan
    y = X[:, 0] + np.sin(X[:, 1]) + np.nan_to_num(X[:, 2]) + rng.normal(size=n) * 0.3
    return X, y, np.arange(n) % 3


@pytest.fixture(scope="module")
def reference():
    X, y, site = _data()
    return X, y, site, FedHistGradientBoostingRegressor(**PARAMS).fit(X, y, clients=site)


class _Recorder:
    """Wraps :meth:`FitWire._arguments` to record what each request carried."""

    def __init__(self, monkeypatch, before_call=None):
        self.calls, original, recorder = [], FitWire._arguments, self

        def arguments(wire, args, *, whole):
            if before_call is not None:
                before_call(len(recorder.calls))
            out = original(wire, args, whole=whole)
            recorder.calls.append((whole, out))
            return out

        monkeypatch.setattr(FitWire, "_arguments", arguments)

    def models(self):
        return [(whole, a) for whole, out in self.calls for a in out
                if isinstance(a, dict) and "trees" in a]


def test_requests_carry_only_the_trees_the_sites_lack(monkeypatch, reference):
    """After the first, no request carries more than one iteration's trees, and each
    names the digest it extends; the context travels whole once (per context)."""
    X, y, site, expected = reference
    seen = _Recorder(monkeypatch)
    fitted = FedHistGradientBoostingRegressor(**PARAMS).fit(X, y, clients=site)
    assert_bitwise_same(fitted, expected)
    models = seen.models()
    whole = [m for _, m in models if m["extends"] is None]
    assert len(whole) == 1 and len(whole[0]["trees"]["start"]) == 1  # no tree yet
    carried = [len(m["trees"]["start"]) - 1 for _, m in models]
    assert max(carried) == 1 and sum(carried) == PARAMS["max_iter"]
    contexts = [a for _, out in seen.calls for a in out[:1]]
    assert sum("order" in c for c in contexts) == 2  # before and after the bins
    assert all(set(c) == {"fit", "name"} for c in contexts if "order" not in c)


def test_the_digest_chain_is_the_same_however_trees_are_grouped(reference):
    *_, model = reference
    trees = [t for iteration in model._predictors for t in iteration]
    start = chain_start("a" * 64, model._baseline_prediction)
    at_once = tree_digests(start, pack_trees(trees))
    parts = [pack_trees(trees[:5]), pack_trees(trees[5:])]
    in_two = tree_digests(start, parts[0]) + tree_digests(at_once[4], parts[1])
    assert at_once == in_two and len(set(at_once)) == len(trees)
    merged = concat_packed(parts)
    for key, value in pack_trees(trees).items():
        np.testing.assert_array_equal(merged[key], value)
    assert chain_start("b" * 64, model._baseline_prediction) != start


def test_a_site_that_lost_the_state_gets_it_once_and_the_trees_do_not_change(
        monkeypatch, reference):
    """Every state dropped mid-fit (a restart, an eviction): the next request is refused
    with rule ``fit_state``, the analyst resends the context and model whole, once."""
    X, y, site, expected = reference

    def drop(n_calls):
        if n_calls == 40:
            STORE.states.clear()

    seen = _Recorder(monkeypatch, before_call=drop)
    fitted = FedHistGradientBoostingRegressor(**PARAMS).fit(X, y, clients=site)
    assert_bitwise_same(fitted, expected)
    resent = [out for whole, out in seen.calls if whole]
    assert len(resent) == 1
    assert "order" in resent[0][0] and resent[0][1]["extends"] is None
    assert len(resent[0][1]["trees"]["start"]) > 2  # the whole model so far


def test_the_state_is_the_analysts_own_and_capped(reference):
    """Another analyst naming the same fit and digest finds nothing; above a fit's cap
    the request is refused naming the rule; above an analyst's, the oldest state goes."""
    from skfed.ensemble._site import site_loss

    X, y, site, model = reference
    from skfed import FederatedDataset

    part = FederatedDataset.from_arrays(X, y, clients=site)._backend.parts[0]
    context = dict(model._context, fit="f" * 32, name="e" * 64)
    whole = {"extends": None, "baseline": model._baseline_prediction.ravel(),
             "trees": pack_trees([t for it in model._predictors for t in it])}
    with requester(Requester("analyst-a")):
        first = site_loss(part, context, whole)
        state = STORE.get(part, "f" * 32, create=False)
        digest = state.digests[-1]
        empty = {"extends": digest, "trees": pack_trees([])}
        assert site_loss(part, {"fit": "f" * 32, "name": "e" * 64}, empty) == first
    with requester(Requester("analyst-b")), pytest.raises(FitStateLost):
        site_loss(part, {"fit": "f" * 32, "name": "e" * 64}, empty)
    with requester(Requester("analyst-c", fit_state_mb=0.01)), \
            pytest.raises(Refused, match="fit_state_mb = 0.01 MB") as info:
        site_loss(part, context, whole)
    assert info.value.rule == "fit_state_mb"
    one = state.nbytes / 2 ** 20
    with requester(Requester("analyst-d", analyst_state_mb=2.5 * one)):
        for k in range(4):
            site_loss(part, dict(context, fit=f"{k:032x}"), whole)
        held = [key[2] for key in STORE.states if key[0] == "analyst-d"]
        assert held == [f"{2:032x}", f"{3:032x}"]  # the oldest evicted first
        with pytest.raises(FitStateLost):
            site_loss(part, {"fit": f"{0:032x}", "name": "e" * 64}, empty)


def test_a_chained_model_packs_what_the_fit_grew(reference):
    *_, model = reference
    chained = ChainedModel(model._baseline_prediction)
    for iteration in model._predictors:
        chained = chained.extended(iteration)
    assert chained.n_trees == len(model._predictors)
    whole = chained.whole()
    for key, value in pack_trees([t for it in model._predictors for t in it]).items():
        np.testing.assert_array_equal(whole["trees"][key], value)


# -- at site services ----------------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _site_configs(root, frames, policy):
    """Three sites' configurations on fixed ports (so that a site can restart on its own)."""
    from skfed.deploy import make_certificates

    from ._sites import SITES, site_config

    certs = make_certificates(root / "certs", list(SITES), analysts=["analyst-b"])
    configs, addresses = {}, {}
    for name, frame in zip(SITES, frames):
        folder = root / name
        folder.mkdir()
        frame.to_csv(folder / "rows.csv", index=False)
        port = _free_port()
        configs[name] = site_config(folder, name, certs=certs,
                                    datasets={"rows": ("rows.csv", None)}, policy=policy,
                                    listen=f"127.0.0.1:{port}")
        addresses[name] = f"127.0.0.1:{port}"
    return certs, configs, addresses


def test_a_site_restarted_mid_fit_gives_the_same_trees(tmp_path, monkeypatch):
    """A real site process killed and started again between two requests of a fit: it
    refuses the next request (rule ``fit_state``, in its audit log), the analyst resends
    the model once, and the trees equal the in-process fit's."""
    pytest.importorskip("grpc")
    from skfed.data import FederatedDataset
    from skfed.sites.audit import read_audit

    from ._sites import SITES, close_service, start_site, stop_sites
    from .test_boosting_sites import OPEN, PARAMS as SITE_PARAMS, _as_read, _frames

    certs, configs, addresses = _site_configs(tmp_path, _frames(), OPEN)
    params, restarted, processes = dict(SITE_PARAMS, max_iter=6), [], {}
    pooled, labels = _as_read(tmp_path)
    here = FedHistGradientBoostingRegressor(**params).fit(
        pooled.drop(columns=["y", "label"]), pooled["y"], clients=labels)
    try:
        for name, config in configs.items():
            processes[name], _ = start_site(config)
        remote = FederatedDataset.from_sites(addresses, dataset="rows", target="y",
                                             drop=["label"], ca_file=certs.ca.cert,
                                             cert_file=certs.client.cert,
                                             key_file=certs.client.key)

        def restart(n_calls):
            if n_calls == 14:  # in the third of six iterations
                proc = processes["hospital-b"]
                proc.kill()
                proc.wait(timeout=10)
                close_service(proc)
                processes["hospital-b"], _ = start_site(configs["hospital-b"])
                restarted.append(n_calls)

        seen = _Recorder(monkeypatch, before_call=restart)
        through = FedHistGradientBoostingRegressor(**params).fit(remote)
        remote.close()
    finally:
        monkeypatch.undo()  # no restart after the processes are stopped
        stop_sites(list(processes.values()))
    assert_bitwise_same(through, here)
    assert restarted == [14]
    assert sum(whole for whole, _ in seen.calls) == 1
    rules = [line.get("rule") for line in read_audit(tmp_path / SITES[1] / "audit.jsonl")]
    assert rules.count("fit_state") == 1
    assert all(rule is None for site in (SITES[0], SITES[2])
               for rule in [line.get("rule") for line in
                            read_audit(tmp_path / site / "audit.jsonl")])


def test_another_analysts_digest_is_refused_at_a_service(tmp_path):
    """Analyst B names, through a raw connection, the fit and digest analyst A's requests
    built at the same site: refused (rule ``fit_state``), nothing computed for B. Nor can
    B end A's state by working on other rows: B's fits on as many other dataset
    references as the site keeps rows for evict B's own kept rows, not A's."""
    pytest.importorskip("grpc")
    from skfed.sites import SiteRefusal
    from skfed.sites.policy import Policy
    from skfed.sites.transport import SiteConnection

    from ._sites import SITES, services_of
    from .test_boosting_sites import OPEN, PARAMS as SITE_PARAMS, _frames

    with services_of(tmp_path, _frames(), policy=OPEN, target="y", drop=["label"]) as remote:
        model = FedHistGradientBoostingRegressor(**dict(SITE_PARAMS, max_iter=2)).fit(remote)
        address = remote._backend.connections[0].address
        certs = tmp_path / "certs"
        context = dict(model._context, fit="a" * 32, name="b" * 64)
        trees = pack_trees([t for it in model._predictors for t in it])
        whole = {"extends": None, "baseline": model._baseline_prediction.ravel(),
                 "trees": trees}
        dataset = {"name": "rows", "target": "y", "drop": ["label"]}
        start = chain_start("b" * 64, whole["baseline"])
        digest = tree_digests(start, trees)[-1]
        reference = {"fit": "a" * 32, "name": "b" * 64}
        delta = {"extends": digest, "trees": pack_trees([])}
        a = SiteConnection(SITES[0], address, ca_file=certs / "ca.pem",
                           cert_file=certs / "analyst.pem", key_file=certs / "analyst.key")
        b = SiteConnection(SITES[0], address, ca_file=certs / "ca.pem",
                           cert_file=certs / "analyst-b.pem", key_file=certs / "analyst-b.key")
        try:
            own = a.call("boosting.loss", dataset=dataset, context=context, model=whole)
            assert a.call("boosting.loss", dataset=dataset, context=reference,
                          model=delta) == own
            with pytest.raises(SiteRefusal, match="holds no state") as info:
                b.call("boosting.loss", dataset=dataset, context=reference, model=delta)
            assert info.value.rule == "fit_state"
            with pytest.raises(SiteRefusal) as info:  # a digest A's state does not hold
                a.call("boosting.loss", dataset=dataset, context=reference,
                       model={"extends": "c" * 64, "trees": pack_trees([])})
            assert info.value.rule == "fit_state"
            for bad, what in [({"fit": "A" * 32, "name": "b" * 64}, "hexadecimal"),
                              ({"fit": "a" * 32}, "lacks its key"),
                              (dict(context, fit="a" * 31), "32 lower-case")]:
                with pytest.raises(SiteRefusal, match=what):
                    a.call("boosting.loss", dataset=dataset, context=bad, model=whole)
            with pytest.raises(SiteRefusal, match="whole model extends no digest"):
                a.call("boosting.loss", dataset=dataset, context=context,
                       model=dict(whole, extends=digest))
            for k in range(Policy.kept_datasets + 1):  # B's fits, each on rows of its own
                other = dict(dataset, drop=["label", f"no-such-column-{k}"])
                b.call("boosting.loss", dataset=other, model=whole,
                       context=dict(model._context, fit=f"{k:032x}", name="b" * 64))
            assert a.call("boosting.loss", dataset=dataset, context=reference,
                          model=delta) == own  # A's rows and state still kept
        finally:
            a.close()
            b.close()
