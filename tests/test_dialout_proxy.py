"""A dial-out site's proxy choice: ``NO_PROXY`` / ``no_proxy`` naming the relay (host,
domain, ``*``, host:port, IP, CIDR) takes the stream around the ``HTTPS_PROXY``
proxy. The forms against their meaning; then real ``skfed site serve`` processes and a
small CONNECT proxy: with ``NO_PROXY`` naming the relay the proxy sees no connection
(even with gRPC's own lower-case ``https_proxy`` set), without it the proxy sees one."""

import os

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from skfed.sites.proxy import bypasses_proxy, proxy_options  # noqa: E402

from ._relay import ConnectProxy, relay_site_config, start_dialout_site, wait_until  # noqa: E402
from ._sites import stop_sites  # noqa: E402


@pytest.mark.parametrize("target,no_proxy,bypass", [
    ("relay.example.org:7443", "*", True),
    ("relay.example.org:7443", "relay.example.org", True),
    ("relay.example.org:7443", "RELAY.Example.org.", True),  # case, a trailing dot
    ("relay.example.org:7443", "example.org", True),  # a domain: the names under it
    ("relay.example.org:7443", ".example.org", True),
    ("example.org:7443", ".example.org", True),  # a leading dot changes nothing
    ("relay.badexample.org:7443", "example.org", False),  # a suffix, not a domain
    ("relay.example.org:7443", "other.org, example.net", False),
    ("relay.example.org:7443", "intranet.local example.org", True),  # spaces separate
    ("relay.example.org:7443", "relay.example.org:7443", True),
    ("relay.example.org:7443", "relay.example.org:443", False),  # another port
    ("relay.example.org:7443", "", False),
    ("dns:///relay.example.org:7443", "example.org", True),  # a gRPC target's host
    ("10.0.0.5:7443", "10.0.0.5", True),
    ("10.0.0.5:7443", "10.0.0.6", False),
    ("10.0.0.5:7443", "10.0.0.5:7443", True),
    ("10.0.0.5:7443", "10.0.0.0/8", True),
    ("10.0.0.5:7443", "192.168.0.0/16", False),
    ("10.0.0.5:7443", "0.5", False),  # an IP address is not a domain
    ("relay.example.org:7443", "10.0.0.0/8", False),  # names are not resolved
    ("[fd00::5]:7443", "fd00::/8", True),
    ("[fd00::5]:7443", "fd00::5", True),
    ("[fd00::5]:7443", "[fd00::5]:7443", True),
    ("[fd00::5]:7443", "10.0.0.0/8", False),
    ("[::1]:7443", "not a cidr/x, ::1", True),  # a malformed entry matches nothing
])
def test_no_proxy_forms(target, no_proxy, bypass):
    assert bypasses_proxy(target, no_proxy) is bypass


def test_the_options_chosen():
    proxy = "http://proxy.example.org:3128"
    assert proxy_options("relay:7443", {}) == []
    assert proxy_options("relay:7443", {"NO_PROXY": "*"}) == []
    assert proxy_options("relay:7443", {"HTTPS_PROXY": proxy}) == [("grpc.http_proxy", proxy)]
    assert proxy_options("relay:7443", {"https_proxy": proxy, "NO_PROXY": "other"}) == [
        ("grpc.http_proxy", proxy)]
    # matched: gRPC's own lookup of https_proxy is turned off too
    for name in ("NO_PROXY", "no_proxy"):
        assert proxy_options("relay:7443", {"https_proxy": proxy, name: "relay"}) == [
            ("grpc.enable_http_proxy", 0)]


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    from skfed.deploy import make_certificates
    from skfed.sites.relay import RelayServer

    root = tmp_path_factory.mktemp("proxy")
    certs = make_certificates(root / "certs", ["hospital-a", "hospital-b", "hospital-c"],
                              relays=["relay"])
    server = RelayServer(listen="127.0.0.1:0", ca=certs.ca.cert,
                         cert=certs.relays["relay"].cert, key=certs.relays["relay"].key)
    server.start()
    yield server, certs, root
    server.stop()


@pytest.mark.slow  # site processes behind a CONNECT proxy
@pytest.mark.parametrize("site,variables,through_proxy", [
    ("hospital-a", {"HTTPS_PROXY": "{proxy}", "NO_PROXY": "example.org, {relay}"}, False),
    # gRPC reads lower-case https_proxy itself: the match must turn that off too
    ("hospital-b", {"https_proxy": "{proxy}", "NO_PROXY": "127.0.0.0/8"}, False),
    ("hospital-c", {"HTTPS_PROXY": "{proxy}", "NO_PROXY": "example.org"}, True),
])
def test_a_site_process_bypasses_the_proxy_when_no_proxy_names_the_relay(
        relay, site, variables, through_proxy):
    server, certs, root = relay
    address = f"127.0.0.1:{server.port}"
    folder = root / site
    folder.mkdir()
    (folder / "visits.csv").write_text("a,b\n1,2\n3,4\n")
    config = relay_site_config(folder, site, address, certs=certs,
                               datasets={"visits": ("visits.csv", None)})
    proxy, process = ConnectProxy(), None
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update({k: v.format(proxy=f"http://127.0.0.1:{proxy.port}", relay=address)
                for k, v in variables.items()})
    try:
        process = start_dialout_site(config, env=env)
        assert wait_until(lambda: site in server.connected())
        assert proxy.requests == ([address] if through_proxy else [])
    finally:
        stop_sites([process] if process is not None else [])
        proxy.close()


@pytest.mark.slow  # site processes behind a CONNECT proxy
@pytest.mark.parametrize("variables,through_proxy", [
    ({"HTTPS_PROXY": "{proxy}"}, True),
    ({"https_proxy": "{proxy}", "NO_PROXY": "{relay}"}, False),
])
def test_the_analyst_reaches_the_relay_through_its_proxy_unless_no_proxy_names_it(
        relay, monkeypatch, variables, through_proxy):
    """The analyst's side of a relay honours the same variables as a dial-out site:
    its stream to the relay goes through ``HTTPS_PROXY`` (a real CONNECT proxy sees
    it), and not when ``NO_PROXY`` names the relay; the site's rows are read either
    way."""
    from skfed.data import FederatedDataset

    server, certs, root = relay
    address = f"127.0.0.1:{server.port}"
    site = "hospital-a"
    folder = root / f"analyst-{through_proxy}"
    folder.mkdir()
    (folder / "visits.csv").write_text("a,b\n" + "".join(f"{k},{k % 3}\n" for k in range(12)))
    config = relay_site_config(folder, site, address, certs=certs,
                               datasets={"visits": ("visits.csv", None)})
    proxy, process = ConnectProxy(), None
    clean = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    try:
        process = start_dialout_site(config, env=clean)  # the site dials out directly
        assert wait_until(lambda: site in server.connected())
        for name in [k for k in os.environ if "proxy" in k.lower()]:
            monkeypatch.delenv(name)
        for name, value in variables.items():
            monkeypatch.setenv(name, value.format(proxy=f"http://127.0.0.1:{proxy.port}",
                                                  relay=address))
        data = FederatedDataset.from_sites(
            [site], relay=address, dataset="visits", target=None, ca_file=certs.ca.cert,
            cert_file=certs.client.cert, key_file=certs.client.key)
        try:
            assert data.n_samples == 12
        finally:
            data.close()
        assert proxy.requests == ([address] if through_proxy else [])
    finally:
        stop_sites([process] if process is not None else [])
        proxy.close()
