"""Sites that only dial out, through a relay (issue 38): real ``skfed site serve``
processes with ``[site] relay`` and no listening socket, a relay in this process that
records and tampers, and the same sites' rows at direct services for the comparison.

What a relay could break is tested first: its forwarded bytes hold no payload in the
clear; a forged, replayed or held-back request is refused at the site and audited; a
drop is seen by the analyst; the site process listens on nothing; a stream broken
mid-fit reconnects and the fit goes on. Then a Lasso, a GLM with its table, Table 1 and
a masked fit through the relay equal the same through direct connections.
"""

import os
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
psutil = pytest.importorskip("psutil")

from sklearn.datasets import load_diabetes  # noqa: E402

from skfed import FederatedDataset, FedLasso  # noqa: E402
from skfed.deploy import make_certificates  # noqa: E402
from skfed.privacy import SecureAggregation  # noqa: E402
from skfed.sites import SiteServiceError, SiteUnavailable  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.codec import encode  # noqa: E402
from skfed.sites.envelope import REFUSAL, Sealer  # noqa: E402
from skfed.sites.policy import check_config, load_config  # noqa: E402
from skfed.sites.relay_connection import RelayConnection  # noqa: E402
from skfed.sites.transport import SiteServer  # noqa: E402

from ._relay import (ConnectProxy, TestRelay, relay_site_config, relay_toml,  # noqa: E402
                     start_dialout_site, start_relay_process, wait_until)
from ._sites import SITES, site_config, split_frames, stop_sites  # noqa: E402

POLICY = "min_rows = 10\nallow_exact_quantiles = true"
#: analyst-b may only describe: the gate must read who asks from the envelope
ACCESS = '[access.analyst-b]\noperations = ["dataset.describe"]'
REF = {"name": "visits", "target": "target", "drop": [], "sample_weight": None,
       "offset": None}


def _frame():
    frame = load_diabetes(as_frame=True).frame
    frame["sex"] = np.where(frame["sex"] > 0, "M", "F")
    frame["high"] = (frame["target"] > frame["target"].median()).astype(int)
    return frame


class _CountingRelay(TestRelay):
    """The test relay, counting each site's streams (a reconnect opens a second)."""

    __test__ = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.streams, self.break_after = Counter(), None

    async def _connect(self, replies, context):
        from skfed.sites.transport import peer_identity

        self.streams[peer_identity(context)[1]] += 1
        await super()._connect(replies, context)

    def forward(self, site, envelope, timeout):
        if self.break_after is not None:
            self.break_after -= 1
            if self.break_after == 0:
                self.break_after = None
                self.set_mode("break")
        return super().forward(site, envelope, timeout)


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("relay")
    certs = make_certificates(root / "certs", list(SITES), analysts=["analyst-b"],
                              relays=["relay"])
    relay = _CountingRelay(listen="127.0.0.1:0", ca=certs.ca.cert,
                           cert=certs.relays["relay"].cert, key=certs.relays["relay"].key)
    relay.start()
    address = f"127.0.0.1:{relay.port}"
    frames = split_frames(_frame(), len(SITES), by="bmi")
    processes, servers, direct, folders = [], [], {}, {}
    try:
        for name, part in zip(SITES, frames):
            folder = folders[name] = root / name
            folder.mkdir()
            part.to_csv(folder / "visits.csv", index=False)
            options = dict(certs=certs, datasets={"visits": ("visits.csv", None)},
                           policy=POLICY, extra=ACCESS)
            # the same folder (rows, partition secrets) served directly, for comparison
            direct_toml = site_config(folder, name, **options).rename(folder / "direct.toml")
            servers.append(SiteServer(load_config(direct_toml)).start())
            direct[name] = f"127.0.0.1:{servers[-1].port}"
            processes.append(start_dialout_site(relay_site_config(folder, name, address,
                                                                  **options)))
        assert wait_until(lambda: relay.connected() == sorted(SITES))
        yield {"certs": certs, "relay": relay, "address": address, "direct": direct,
               "processes": dict(zip(SITES, processes)), "folders": folders,
               "frames": frames}
    finally:
        stop_sites(processes)
        for server in servers:
            server.stop()
        relay.stop()


def _tls(certs, who=None):
    who = who or certs.client
    return {"ca_file": certs.ca.cert, "cert_file": who.cert, "key_file": who.key}


def _data(federation, through, **options):
    options = {"dataset": "visits", "target": "target", **options}
    if through == "relay":
        return FederatedDataset.from_sites(list(SITES), relay=federation["address"],
                                           **_tls(federation["certs"]), **options)
    return FederatedDataset.from_sites(federation["direct"], **_tls(federation["certs"]),
                                       **options)


def _envelope_refusals(federation, site):
    return [line for line in read_audit(federation["folders"][site] / "audit.jsonl")
            if line.get("rule") == "envelope"]


def test_the_site_process_listens_on_nothing(federation):
    relay_port = federation["relay"].port
    for name, proc in federation["processes"].items():
        process = psutil.Process(proc.pid)
        sockets = process.net_connections(kind="inet")
        assert not [s for s in sockets if s.status == psutil.CONN_LISTEN], name
        assert any(s.status == psutil.CONN_ESTABLISHED and s.raddr and
                   s.raddr.port == relay_port for s in sockets), name
    assert federation["relay"].connected() == sorted(SITES)


def test_a_lasso_a_glm_and_table_1_through_the_relay_equal_direct(federation):
    from skfed.formula import glm
    from skfed.stats import describe

    relay, recorded_before = federation["relay"], len(federation["relay"].recorded)
    results = {}
    for through in ("relay", "direct"):
        data = _data(federation, through, drop=["sex"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lasso = FedLasso(alpha=0.5, max_rounds=30, random_state=0).fit(data)
        data.close()
        frame = _data(federation, through, target=None)
        model = glm("high ~ bmi + bp + s5 + C(sex)", frame, family="binomial")
        table = describe(frame, by="sex", columns=["age", "bmi", "bp"])
        frame.close()
        results[through] = (lasso, model, table)
    (lasso, model, table), (lasso_d, model_d, table_d) = results["relay"], results["direct"]
    assert lasso.n_iter_ == lasso_d.n_iter_
    np.testing.assert_array_equal(lasso.coef_, lasso_d.coef_)
    assert lasso.intercept_ == lasso_d.intercept_
    assert model.param_names == model_d.param_names
    np.testing.assert_array_equal(model.params, model_d.params)
    np.testing.assert_array_equal(model.bse, model_d.bse)
    pd.testing.assert_frame_equal(model.summary_frame(), model_d.summary_frame())
    pd.testing.assert_frame_equal(table.table, table_d.table)
    pd.testing.assert_frame_equal(table.mask, table_d.mask)
    # and the relay's copy of every byte it forwarded holds none of it in the clear
    recorded = relay.recorded[recorded_before:]
    assert len(recorded) > 30
    _assert_no_payload(recorded, federation["frames"],
                       [lasso.coef_[lasso.coef_ != 0], np.asarray(model.params),
                        np.asarray(model.bse), table.table.to_numpy(dtype=float).ravel()])


def _assert_no_payload(recorded, frames, numbers):
    blob = b"\0".join(recorded)
    # names as messages carry them (quoted: two random bytes of ciphertext may read "bp"):
    # the dataset's, its columns, the operations', the analyst's
    for name in ("visits", "bmi", "bp", "s5", "high", "sex", "target", "fit.step",
                 "dataset.describe", "analyst", "C(sex)"):
        assert f'"{name}"'.encode() not in blob, name
    assert b'"bmi"' in encode({"ok": {"columns": ["bmi"]}})  # the check can fail
    values = [v for array in numbers for v in np.asarray(array, dtype=float) if v != 0]
    values += [v for part in frames for v in part["bmi"].to_numpy()[:30]]
    assert len(values) > 40
    for v in values:  # as the codec writes them, and as text
        assert np.float64(v).tobytes() not in blob, v
        assert repr(float(v)).encode() not in blob, v
    # the check can fail: a message in the clear holds the same bytes
    assert np.float64(values[0]).tobytes() in encode({"ok": np.asarray(values)})


def test_a_masked_fit_through_the_relay_equals_direct(federation):
    fits = []
    for through in ("relay", "direct"):
        data = _data(federation, through, drop=["sex"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(FedLasso(alpha=0.5, max_rounds=20, random_state=0,
                                 privacy=SecureAggregation()).fit(data))
        data.close()
    assert fits[0].history_.privacy["secure_aggregation"]
    assert fits[0].n_iter_ == fits[1].n_iter_
    np.testing.assert_array_equal(fits[0].coef_, fits[1].coef_)


def test_a_tampering_relay_is_refused_at_the_site_and_logged(federation):
    relay, certs = federation["relay"], federation["certs"]
    conn = RelayConnection("hospital-a", federation["address"], timeout=3, **_tls(certs))
    try:
        assert conn.call("dataset.describe", dataset=REF)["n_samples"] > 0
        before = len(_envelope_refusals(federation, "hospital-a"))
        # forge: one byte changed in transit
        relay.set_mode("forge")
        with pytest.raises(SiteServiceError, match=r"refused the envelope \(tampered\)"):
            conn.call("dataset.describe", dataset=REF)
        # replay: the same request a second time
        relay.set_mode("replay")
        assert conn.call("dataset.describe", dataset=REF)["n_samples"] > 0
        assert relay.extra[-1].startswith(REFUSAL) and b"(sequence)" in relay.extra[-1]
        # drop: the analyst sees no reply to that request number
        relay.set_mode("hold")
        with pytest.raises(SiteUnavailable, match=r"no reply to request \d+ within 3 s"):
            conn.call("dataset.describe", dataset=REF)
        assert conn.call("dataset.describe", dataset=REF)["n_samples"] > 0
        # reorder: the held request, sent after its successor (and after its expiry,
        # the analyst's timeout: expired is checked first; a reorder within the lifetime
        # is refused by its sequence number, tests/test_envelope.py)
        late = relay.release()
        assert late.startswith(REFUSAL) and b"(expired)" in late
        # forge from scratch: the relay's own key cannot act as an analyst
        site_cert = certs.sites["hospital-a"].cert.read_bytes()
        own = Sealer("hospital-a", site_cert, certs.relays["relay"].cert.read_bytes(),
                     certs.relays["relay"].key.read_bytes())
        forged = relay.forward("hospital-a", own.seal(encode({"op": "dataset.describe",
                                                              "args": {"dataset": REF}}),
                                                      30)[0], 30)
        assert forged.startswith(REFUSAL) and b"(analyst)" in forged
    finally:
        conn.close()
    lines = _envelope_refusals(federation, "hospital-a")[before:]
    reasons = [line["reason"].split(":")[0] for line in lines]
    assert reasons == ["tampered", "sequence", "expired", "analyst"]
    # a request whose signature held names its analyst; the others name none
    assert [line["analyst"] for line in lines] == [None, "analyst", "analyst", None]


def test_the_analyst_at_the_site_is_the_envelopes_signer(federation):
    from skfed.sites import SiteRefusal
    from skfed.stats import describe

    certs = federation["certs"]
    conn = RelayConnection("hospital-b", federation["address"],
                           **_tls(certs, certs.analysts["analyst-b"]))
    try:
        conn.call("dataset.describe", dataset=REF)
    finally:
        conn.close()
    last = [line for line in read_audit(federation["folders"]["hospital-b"] / "audit.jsonl")
            if line.get("operation") == "dataset.describe"][-1]
    assert last["analyst"] == "analyst-b" and last["outcome"] == "ok"
    # the site's [access.analyst-b] rule applies to analyst-b's envelopes, not the relay's
    data = FederatedDataset.from_sites(list(SITES), relay=federation["address"],
                                       dataset="visits", target=None,
                                       **_tls(certs, certs.analysts["analyst-b"]))
    with pytest.raises(SiteRefusal) as info:
        describe(data, columns=["age", "bmi"])
    assert info.value.rule == "access"
    data.close()
    data = _data(federation, "relay", target=None)  # the analyst may
    assert describe(data, columns=["age", "bmi"]).table.shape[0] > 0
    data.close()


def test_a_fit_goes_on_across_a_reconnect(federation):
    relay = federation["relay"]
    streams = sum(relay.streams.values())
    fits = []
    for through in ("relay", "direct"):
        data = _data(federation, through, drop=["sex"])
        # through the relay: a request in the fit's rounds breaks its site's stream after
        # the reply; the site reconnects (backoff) and the next round waits for it
        relay.break_after = 12 if through == "relay" else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(FedLasso(alpha=0.5, solver="fedavg", max_rounds=15,
                                 random_state=0).fit(data))
        data.close()
    assert relay.break_after is None and sum(relay.streams.values()) == streams + 1
    assert fits[0].n_iter_ == fits[1].n_iter_ == 15
    np.testing.assert_array_equal(fits[0].coef_, fits[1].coef_)


def test_the_site_configuration_says_relay_or_listen(tmp_path, federation):
    folder = tmp_path / "site"
    path = relay_site_config(folder, "hospital-a", "relay.example:7443",
                             certs=federation["certs"],
                             datasets={"visits": ("visits.csv", None)})
    (folder / "visits.csv").write_text("a,b\n1,2\n")
    config, problems = check_config(path)
    assert problems == [] and config.relay == "relay.example:7443" and config.listen is None
    Path(path).write_text(Path(path).read_text().replace(
        'relay = "relay.example:7443"', 'relay = "relay.example:7443"\nlisten = "0.0.0.0:1"'))
    assert any("both listen and relay" in p for p in check_config(path)[1])


@pytest.mark.slow
def test_a_site_behind_an_http_proxy_through_a_relay_process(tmp_path, federation):
    """``skfed relay serve`` as a process; a site whose only way out is a CONNECT proxy."""
    certs = federation["certs"]
    relay, port = start_relay_process(relay_toml(tmp_path / "relay.toml", certs))
    proxy, site = ConnectProxy(), None
    try:
        folder = tmp_path / "hospital-c"
        folder.mkdir()
        federation["frames"][2].to_csv(folder / "visits.csv", index=False)
        config = relay_site_config(folder, "hospital-c", f"127.0.0.1:{port}", certs=certs,
                                   datasets={"visits": ("visits.csv", None)}, policy=POLICY)
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env["HTTPS_PROXY"] = f"http://127.0.0.1:{proxy.port}"
        site = start_dialout_site(config, env=env)
        assert wait_until(lambda: proxy.requests)
        assert proxy.requests[0] == f"127.0.0.1:{port}"
        data = FederatedDataset.from_sites(["hospital-c"], relay=f"127.0.0.1:{port}",
                                           dataset="visits", target="target", **_tls(certs))
        assert data.n_samples == len(federation["frames"][2])
        data.close()
        assert (folder / "relay-replay.json").exists()
    finally:
        stop_sites([p for p in (site, relay) if p is not None])
        proxy.close()


def test_the_relay_checks_its_configuration_and_certificate(tmp_path, federation, capsys):
    from skfed.cli.main import main
    from skfed.sites.relay import RelayServer, load_relay_config

    certs = federation["certs"]
    path = relay_toml(tmp_path / "relay.toml", certs)
    assert load_relay_config(path)["listen"] == "127.0.0.1:0"
    with pytest.raises(ValueError, match="not 'relay'"):  # a site's certificate
        RelayServer(listen="127.0.0.1:0", ca=certs.ca.cert, cert=certs.sites["hospital-a"].cert,
                    key=certs.sites["hospital-a"].key)
    path.write_text(path.read_text().replace("[relay]", "[relay]\nlisten_port = 1"))
    with pytest.raises(ValueError, match="unknown key 'listen_port'"):
        load_relay_config(path)
    assert main(["relay", "serve", str(path)]) == 2
    assert "unknown key 'listen_port'" in capsys.readouterr().err
    # a site's stream from an analyst's certificate is refused by the relay
    import grpc

    from skfed.deploy.certificates import RELAY_HOST

    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs.ca.cert.read_bytes(), private_key=certs.client.key.read_bytes(),
        certificate_chain=certs.client.cert.read_bytes())
    with grpc.secure_channel(federation["address"], credentials, options=[
            ("grpc.ssl_target_name_override", RELAY_HOST)]) as channel:
        stream = channel.stream_stream("/skfed.Relay/Connect")(iter([]), timeout=10)
        with pytest.raises(grpc.RpcError) as info:
            list(stream)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "analyst" not in federation["relay"].connected()


@pytest.mark.slow
def test_a_restarted_site_refuses_what_it_answered_before(tmp_path, federation):
    """The replay record outlives the site's process; the analyst's connection goes on
    (the restarted site has the connection start over)."""
    certs = federation["certs"]
    relay = TestRelay(listen="127.0.0.1:0", ca=certs.ca.cert,
                      cert=certs.relays["relay"].cert, key=certs.relays["relay"].key).start()
    folder, site, conn = tmp_path / "hospital-a", None, None
    try:
        folder.mkdir()
        federation["frames"][0].to_csv(folder / "visits.csv", index=False)
        config = relay_site_config(folder, "hospital-a", f"127.0.0.1:{relay.port}",
                                   certs=certs, datasets={"visits": ("visits.csv", None)},
                                   policy=POLICY)
        site = start_dialout_site(config)
        conn = RelayConnection("hospital-a", f"127.0.0.1:{relay.port}", **_tls(certs))
        n = conn.call("dataset.describe", dataset=REF)["n_samples"]
        first = relay.recorded[0]
        conn.call("dataset.describe", dataset=REF)
        stop_sites([site])
        site = start_dialout_site(config)
        assert wait_until(lambda: relay.connected() == ["hospital-a"])
        replayed = relay.forward("hospital-a", first, 30)
        assert replayed.startswith(REFUSAL) and b"(sequence)" in replayed
        assert conn.call("dataset.describe", dataset=REF)["n_samples"] == n
    finally:
        if conn is not None:
            conn.close()
        stop_sites([site] if site is not None else [])
        relay.stop()
    reasons = [line["reason"].split(":")[0] for line in read_audit(folder / "audit.jsonl")
               if line.get("rule") == "envelope"]
    assert reasons == ["sequence", "session-unknown"]


@pytest.mark.slow
def test_a_connection_goes_on_after_the_relay_restarts(tmp_path, federation):
    """The analyst's stream to the relay ends with the relay; its next request opens
    another (the site's stream reconnects by itself)."""
    certs = federation["certs"]
    tls = {"ca": certs.ca.cert, "cert": certs.relays["relay"].cert,
           "key": certs.relays["relay"].key}
    relay = TestRelay(listen="127.0.0.1:0", **tls).start()
    address = f"127.0.0.1:{relay.port}"
    folder, site, conn = tmp_path / "hospital-a", None, None
    try:
        folder.mkdir()
        federation["frames"][0].to_csv(folder / "visits.csv", index=False)
        config = relay_site_config(folder, "hospital-a", address, certs=certs,
                                   datasets={"visits": ("visits.csv", None)}, policy=POLICY)
        site = start_dialout_site(config)
        conn = RelayConnection("hospital-a", address, timeout=20, **_tls(certs))
        n = conn.call("dataset.describe", dataset=REF)["n_samples"]
        relay.stop()
        relay = TestRelay(listen=address, **tls).start()
        assert wait_until(lambda: relay.connected() == ["hospital-a"])
        assert conn.call("dataset.describe", dataset=REF)["n_samples"] == n
        assert len(relay.recorded) == 2  # one request and its reply, on a new stream
    finally:
        if conn is not None:
            conn.close()
        stop_sites([site] if site is not None else [])
        relay.stop()
