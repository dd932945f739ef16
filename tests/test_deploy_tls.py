"""Mutual TLS for a cross-silo federation: real certificates, a real TLS cluster.

The cluster (one scheduler, one worker *process* per site, loopback only) is
started once for the module. Members with certificates from the federation's
CA get in under their site names; clients and workers without one, or with
one from another CA, are refused.
"""

import asyncio
import datetime
import ipaddress
import operator
import os
import socket
import ssl
import subprocess
import sys
import time

import numpy as np
import pytest

distributed = pytest.importorskip(
    "distributed", reason="TLS deployment needs the optional extra: pip install 'skfed[dask]'")
pytest.importorskip("cryptography", reason="certificates need 'cryptography' (skfed[dask])")

from cryptography import x509  # noqa: E402
from cryptography.exceptions import InvalidSignature  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402
from cryptography.x509.verification import PolicyBuilder, Store  # noqa: E402

from skfed import FedLasso  # noqa: E402
from skfed.deploy import local_tls_cluster, make_certificates, tls_security  # noqa: E402
from skfed.executors import DaskExecutor  # noqa: E402

from .conftest import fit_quietly  # noqa: E402

SITES = ["site-a", "site-b"]


def _load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def _address_of(client, name):
    return next(a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()
                if str(w["name"]) == name)


def _names(client):
    return sorted(str(w["name"]) for w in client.scheduler_info(n_workers=-1)["workers"].values())


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    # site-c is for a worker that joins later, from the command line
    return make_certificates(tmp_path_factory.mktemp("tls") / "certs", [*SITES, "site-c"])


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """A second federation: well-formed certificates from a CA nobody here trusts."""
    return make_certificates(tmp_path_factory.mktemp("tls") / "other", ["site-a", "site-d"])


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("site-a-data")


@pytest.fixture(scope="module")
def cluster(certs, data_dir):
    with local_tls_cluster(certs, SITES, data_dirs={"site-a": data_dir}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def client(cluster, certs):
    with distributed.Client(cluster.scheduler_address, security=tls_security(certs, "client"),
                            timeout=30) as client:
        client.wait_for_workers(len(SITES), timeout=60)
        yield client


# --- certificates ------------------------------------------------------------------
def test_files_and_permissions(certs):
    pairs = [certs.ca, certs.scheduler, certs.client, *certs.sites.values()]
    names = sorted(str(p.relative_to(certs.directory)) for pair in pairs
                   for p in (pair.cert, pair.key))
    listed = sorted(str(p.relative_to(certs.directory)) for p in certs.directory.rglob("*")
                    if p.is_file())
    assert names == listed
    # the CA key apart from what is handed out, in a folder only its owner opens
    assert certs.ca.key.parent.name == "ca-private"
    assert os.stat(certs.ca.key.parent).st_mode & 0o077 == 0
    assert {p.cert.name for p in pairs} >= {"ca.pem", "coordinator.pem", "analyst.pem",
                                            "site-a.pem", "site-b.pem", "site-c.pem"}
    for pair in pairs:
        assert os.stat(pair.key).st_mode & 0o777 == 0o600
        assert os.stat(pair.cert).st_mode & 0o022 == 0  # nobody else can replace a certificate
    assert os.stat(certs.directory).st_mode & 0o077 == 0
    for pair in pairs:  # each key belongs to its certificate
        key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
        assert key.public_key() == _load(pair.cert).public_key()


def test_chain_verifies_against_the_ca(certs, foreign):
    ca = _load(certs.ca.cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca.verify_directly_issued_by(ca)  # self-signed
    store = Store([ca])
    for name, pair in [("coordinator", certs.scheduler), ("analyst", certs.client),
                       *certs.sites.items()]:
        leaf = _load(pair.cert)
        assert leaf.issuer == ca.subject
        assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name
        leaf.verify_directly_issued_by(ca)  # raises on a wrong signature or issuer
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usages)
        # the whole path, as a TLS peer would check it, both ways
        PolicyBuilder().store(store).build_server_verifier(x509.DNSName("localhost")).verify(
            leaf, [])
        PolicyBuilder().store(store).build_client_verifier().verify(leaf, [])
        remaining = leaf.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
        assert datetime.timedelta(days=29) < remaining <= datetime.timedelta(days=30)
    # the other CA has the very same name; only its key differs, and that is enough
    assert _load(foreign.ca.cert).subject == ca.subject
    stranger = _load(foreign.sites["site-a"].cert)
    with pytest.raises(InvalidSignature):
        stranger.verify_directly_issued_by(ca)
    with pytest.raises(x509.verification.VerificationError):
        PolicyBuilder().store(store).build_client_verifier().verify(stranger, [])


def test_subject_alternative_names(certs, tmp_path):
    for name, pair in [(None, certs.scheduler), (None, certs.client), *certs.sites.items()]:
        san = _load(pair.cert).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
        # a site's certificate names the site too (the site service's identity)
        assert san.get_values_for_type(x509.DNSName) == ["localhost"] + ([name] if name else [])
        assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    other = make_certificates(tmp_path, ["h"], hosts=["coordinator.example.org", "::1"], days=2)
    san = _load(other.sites["h"].cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["coordinator.example.org", "h"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("::1")]


@pytest.mark.parametrize("sites, match", [
    ([], "at least one site"),
    ("site-a", "list of site names"),
    ([""], "non-empty string"),
    ([3], "non-empty string"),
    (["a/b"], "cannot name a certificate file"),
    (["../evil"], "cannot name a certificate file"),
    ([".hidden"], "cannot name a certificate file"),
    (["two words"], "cannot name a certificate file"),
    (["x" * 65], "cannot name a certificate file"),
    (["ca"], "reserved"),
    (["Analyst"], "reserved"),
    (["site-a", "site-a"], "unique"),
    (["Site-A", "site-a"], "unique"),
])
def test_bad_site_names(tmp_path, sites, match):
    with pytest.raises(ValueError, match=match):
        make_certificates(tmp_path / "c", sites)
    assert not (tmp_path / "c").exists()  # nothing written


def test_bad_arguments_and_overwrite(tmp_path, certs):
    with pytest.raises(ValueError, match="days"):
        make_certificates(tmp_path, ["a"], days=0)
    with pytest.raises(ValueError, match="hosts is empty"):
        make_certificates(tmp_path, ["a"], hosts=[])
    with pytest.raises(FileExistsError, match="overwrite=True"):
        make_certificates(certs.directory, ["site-a"])
    first = make_certificates(tmp_path, ["a"])
    old = first.ca.cert.read_bytes()
    make_certificates(tmp_path, ["a"], overwrite=True)
    assert first.ca.cert.read_bytes() != old
    assert os.stat(first.ca.key).st_mode & 0o777 == 0o600


def test_tls_security_roles(certs, tmp_path):
    expected = {"scheduler": "coordinator", "client": "analyst"}
    for role, stem in expected.items():
        sec = tls_security(certs.directory, role)
        assert sec.require_encryption
        assert sec.tls_ca_file == str(certs.ca.cert)
        assert getattr(sec, f"tls_{role}_cert").endswith(f"{stem}.pem")
        assert getattr(sec, f"tls_{role}_key").endswith(f"{stem}.key")
    worker = tls_security(certs, "worker", "site-b")
    assert worker.tls_worker_cert == str(certs.sites["site-b"].cert)
    assert worker.tls_worker_key == str(certs.sites["site-b"].key)
    with pytest.raises(ValueError, match="role must be one of"):
        tls_security(certs, "analyst")
    with pytest.raises(ValueError, match="needs name"):
        tls_security(certs, "worker")
    with pytest.raises(ValueError, match="only for role='worker'"):
        tls_security(certs, "client", "site-a")
    with pytest.raises(ValueError, match="cannot name a certificate file"):
        tls_security(certs, "worker", "../ca")
    with pytest.raises(FileNotFoundError, match="site-z.pem"):
        tls_security(certs, "worker", "site-z")
    with pytest.raises(FileNotFoundError, match="ca.pem"):
        tls_security(tmp_path, "client")


def test_local_tls_cluster_checks_before_starting(certs):
    with pytest.raises(ValueError, match="data_dirs names sites"):
        local_tls_cluster(certs, ["site-a"], data_dirs={"site-b": "/tmp"})
    with pytest.raises(FileNotFoundError, match="site-z"):
        local_tls_cluster(certs, ["site-z"])


# --- the cluster -------------------------------------------------------------------
def _where_am_i():
    return str(distributed.get_worker().name), os.getpid(), os.environ.get("SKFED_DATA_DIR")


def test_sites_join_under_their_names_and_run_tasks(client, data_dir):
    assert _names(client) == SITES
    assert client.scheduler.address.startswith("tls://127.0.0.1:")
    for addr in client.scheduler_info(n_workers=-1)["workers"]:
        assert addr.startswith("tls://127.0.0.1:")
    for site in SITES:  # a task pinned by worker name runs in that site's own process
        name, pid, data = client.submit(_where_am_i, workers=[site], pure=False).result(30)
        assert name == site and pid != os.getpid()
        assert data == (str(data_dir) if site == "site-a" else None)
    assert client.submit(sum, [1, 2, 3]).result(30) == 6


async def _connect(address, security):
    client = distributed.Client(address, security=security, timeout=5, asynchronous=True)
    try:
        await client
    finally:  # closed inside its loop, also when refused
        await client.close()


def test_clients_without_the_federations_certificate_are_refused(cluster, foreign, certs):
    address = cluster.scheduler_address
    attempts = [
        (address, distributed.Security()),                      # no TLS: refused locally
        (address.replace("tls://", "tcp://"), None),            # plain TCP to the TLS port
        (address, tls_security(foreign, "client")),             # another CA's analyst
    ]
    for addr, security in attempts:
        start = time.monotonic()
        with pytest.raises((OSError, TimeoutError, TypeError)):
            # asynchronous: a synchronous Client starts an IO-loop thread of its
            # own, whose start (10 s limit) failed under CI load, not the refusal
            asyncio.run(_connect(addr, security))
        assert time.monotonic() - start < 15


def test_scheduler_demands_a_client_certificate(cluster, certs):
    """A TLS client that trusts the CA but shows no certificate is cut off."""
    host, port = cluster.scheduler_address.split("://")[1].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(certs.ca.cert))
    context.check_hostname = False
    with pytest.raises(OSError):  # ssl.SSLError: certificate required
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with context.wrap_socket(raw) as tls:
                tls.sendall(b"\0" * 8)
                if not tls.recv(1):
                    raise ConnectionResetError("closed without a reply")


def test_fedlasso_over_tls_equals_sequential(cluster, client, certs):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 8))
    y = X @ np.r_[1.5, -2.0, np.zeros(6)] + 0.1 * rng.normal(size=120)
    site = np.where(np.arange(120) < 70, "site-a", "site-b")
    # no timeout=: with it, DaskExecutor._wait calls distributed.wait, which goes through
    # the process's *default* client (the fixture's), not the executor's, and then each
    # round takes ~5 s
    executor = DaskExecutor(address=cluster.scheduler_address,
                            security=tls_security(certs, "client"),
                            placement={s: s for s in SITES})
    assert "security=Security(" in repr(executor)
    kwargs = dict(alpha=0.1, solver="feddualavg", max_rounds=30, random_state=0)
    tls_fit = fit_quietly(FedLasso(**kwargs, executor=executor), X, y, clients=site)
    seq_fit = fit_quietly(FedLasso(**kwargs), X, y, clients=site)
    np.testing.assert_allclose(tls_fit.coef_, seq_fit.coef_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(tls_fit.intercept_, seq_fit.intercept_, rtol=0, atol=1e-10)
    assert tls_fit.history_.placement_bytes > 0  # the rows went to the sites' workers
    assert _names(client) == SITES


def _dask_worker(address, certs, name, log):
    """``dask worker`` as a site administrator would start it (docs/deployment.md)."""
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    pair = certs.sites[name]
    return subprocess.Popen(
        [dask, "worker", address, "--name", name, "--nworkers", "1", "--nthreads", "1",
         "--host", "127.0.0.1", "--no-dashboard", "--death-timeout", "20",
         "--tls-ca-file", str(certs.ca.cert), "--tls-cert", str(pair.cert),
         "--tls-key", str(pair.key)],
        stdout=log, stderr=subprocess.STDOUT)


def test_command_line_workers_join_only_with_the_federations_certificate(
        cluster, client, certs, foreign, tmp_path):
    with open(tmp_path / "good.log", "w") as good_log, open(tmp_path / "bad.log", "w") as bad_log:
        good = _dask_worker(cluster.scheduler_address, certs, "site-c", good_log)
        bad = _dask_worker(cluster.scheduler_address, foreign, "site-d", bad_log)
        try:
            client.wait_for_workers(3, timeout=45)
            assert _names(client) == [*SITES, "site-c"]
            # the stranger is refused at the TLS handshake and gives up on its own
            assert bad.wait(timeout=45) != 0
            assert "TLS" in (tmp_path / "bad.log").read_text()
            assert _names(client) == [*SITES, "site-c"]
            # (a function of this module would not unpickle there: the tests are not
            # importable from a command-line worker; operator.add is)
            task = client.submit(operator.add, 1, 2, workers=["site-c"], pure=False)
            assert task.result(30) == 3
            assert client.who_has(task)[task.key] == (_address_of(client, "site-c"),)
        finally:
            for proc in (good, bad):
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
    deadline = time.monotonic() + 20
    while "site-c" in _names(client) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _names(client) == SITES
