"""A site's link to its own Dask cluster over mutual TLS (``scheduler = "tls://..."``
with ``scheduler_ca``, ``scheduler_cert``, ``scheduler_key``): the configuration refused
naming the problem (a clear address where TLS is asked for, missing or unreadable files, a
key not the certificate's); a GLM through a site service whose dataset is on a TLS
cluster (a scheduler and a worker process) equal to the in-memory site's and to
statsmodels' on the pooled rows; a client without a certificate of the site's CA, and
one in the clear, refused by that scheduler."""

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

from skfed.sites.policy import check_config, load_config  # noqa: E402

from ._sites import site_config  # noqa: E402
from .test_site_engine import _rows, write_site  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    from skfed.deploy import make_certificates

    return make_certificates(tmp_path_factory.mktemp("tls-certs"), ["other", "twin", "engine"])


def _engine_lines(scheduler, certs, keys=("ca", "cert", "key")):
    """A dataset's engine keys: the site's certificate is its client one for its cluster."""
    files = {"ca": certs.ca.cert, "cert": certs.sites["engine"].cert,
             "key": certs.sites["engine"].key}
    return "\n".join(['engine = "dask"', f'scheduler = "{scheduler}"',
                      *(f'scheduler_{k} = "{files[k]}"' for k in keys)])


def _problems(tmp_path, certs, lines):
    config = site_config(tmp_path, "engine", certs=certs,
                         datasets={"rows": ("parts/*.parquet", None)}, declare=lines)
    return check_config(config)


# --- the configuration ---------------------------------------------------------------
@pytest.mark.parametrize("scheduler,keys,problem", [
    ("tcp://10.0.0.5:8786", ("ca", "cert", "key"), "must be reached over TLS"),
    ("10.0.0.5:8786", ("ca", "cert", "key"), "must be reached over TLS"),
    ("local", ("ca",), "must be reached over TLS"),
    ("tls://10.0.0.5:8786", (), "needs scheduler_ca, scheduler_cert, scheduler_key"),
    ("tls://10.0.0.5:8786", ("ca", "cert"), "needs scheduler_key"),
])
def test_tls_configuration_named(tmp_path, certs, scheduler, keys, problem):
    config, problems = _problems(tmp_path, certs, _engine_lines(scheduler, certs, keys))
    assert config is None and len(problems) == 1
    assert problem in problems[0] and "[datasets.rows]" in problems[0]


def test_unreadable_and_mismatched_files_named(tmp_path, certs):
    good = _engine_lines("tls://10.0.0.5:8786", certs)
    missing = good.replace(str(certs.ca.cert), str(tmp_path / "nowhere.pem"))
    _, problems = _problems(tmp_path, certs, missing)
    assert problems and "scheduler_ca" in problems[0] and "cannot be read" in problems[0]
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    _, problems = _problems(tmp_path, certs, good.replace(str(certs.ca.cert),
                                                          str(tmp_path / "junk.pem")))
    assert problems and "is not a PEM CA certificate" in problems[0]
    # another site's key with this site's certificate: not a pair
    wrong = good.replace(str(certs.sites["engine"].key), str(certs.sites["other"].key))
    _, problems = _problems(tmp_path, certs, wrong)
    assert problems and "not a PEM certificate and its key" in problems[0]
    config, problems = _problems(tmp_path, certs, good)
    assert problems == [] and config.datasets["rows"].scheduler_tls == (
        certs.ca.cert, certs.sites["engine"].cert, certs.sites["engine"].key)


def test_site_check_names_a_clear_address(tmp_path, certs):
    """``skfed site check`` (and so the service's start) refuses it, exit 2."""
    path = site_config(tmp_path, "engine", certs=certs,
                       datasets={"rows": ("parts/*.parquet", None)},
                       declare=_engine_lines("tcp://10.0.0.5:8786", certs))
    out = subprocess.run([sys.executable, "-m", "skfed", "site", "check", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out
    assert "must be reached over TLS" in out.stdout + out.stderr
    with pytest.raises(ValueError, match="must be reached over TLS"):
        load_config(path)


def test_an_unreachable_scheduler_is_a_clear_refusal(tmp_path, certs, caplog):
    """A scheduler that does not answer (here: nothing listens on its port) reaches the
    analyst as a refusal that says so, not as an internal error; the address and the
    cause go to the site's log only, and the next request tries again."""
    import logging
    import socket

    import dask

    from skfed.sites.host import SiteHost

    from .test_site_engine import ask

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = write_site(tmp_path / "e", "engine", _rows(40), certs, [20, 20])
    config.write_text(config.read_text().replace(
        'scheduler = "local"', _engine_lines(f"tls://127.0.0.1:{port}", certs)
        .replace('engine = "dask"\n', "")))
    host = SiteHost(load_config(config))
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
                caplog.at_level(logging.WARNING, logger="skfed.site"):
            replies = [ask(host, "dataset.describe", dataset={"name": "rows"})
                       for _ in range(2)]
    finally:
        host.close()
    for reply in replies:
        error = reply["error"]
        assert error["kind"] == "policy" and error["rule"] == "engine", error
        assert "did not answer" in error["message"]
        assert str(port) not in error["message"] and str(tmp_path) not in error["message"]
    logged = [r.getMessage() for r in caplog.records if "did not answer" in r.getMessage()]
    assert len(logged) == 2 and all(f"127.0.0.1:{port}" in m for m in logged)


# --- a TLS cluster -------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(certs):
    """A scheduler requiring mutual TLS (the CA's coordinator certificate) and one worker
    process (the site's certificate: the cluster is the site's)."""
    from distributed import LocalCluster
    from distributed.security import Security

    coordinator, site = certs.scheduler, certs.sites["engine"]
    security = Security(
        tls_ca_file=str(certs.ca.cert), tls_scheduler_cert=str(coordinator.cert),
        tls_scheduler_key=str(coordinator.key), tls_worker_cert=str(site.cert),
        tls_worker_key=str(site.key), tls_client_cert=str(coordinator.cert),
        tls_client_key=str(coordinator.key), require_encryption=True)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, protocol="tls",
                      host="127.0.0.1", security=security,
                      dashboard_address="127.0.0.1:0") as local:
        yield local.scheduler_address


def _keeps_talking(address, ca, pair=None):
    """Whether the scheduler keeps a TLS connection open to a client showing ``pair``
    (none: Dask's own client will not try without one)."""
    import socket
    import ssl

    host, port = address.removeprefix("tls://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    if pair is not None:
        context.load_cert_chain(str(pair.cert), str(pair.key))
    try:
        with socket.create_connection((host, int(port)), timeout=5) as raw, \
                context.wrap_socket(raw) as tls:
            tls.settimeout(2)
            tls.sendall(b"\0" * 8)  # half a frame header: the scheduler waits for more
            return tls.recv(16) != b""  # TLS 1.3: the refusal comes on the first read
    except TimeoutError:
        return True
    except (ssl.SSLError, ConnectionError):
        return False


@pytest.mark.slow  # a TLS cluster of worker processes
def test_clients_without_the_sites_certificate_refused(tmp_path, certs, cluster):
    """The attack fails: a client with a certificate of another CA, one with none, and
    one in the clear reach no scheduler; the site's own files do."""
    from distributed import Client
    from distributed.security import Security

    from skfed.deploy import make_certificates

    assert cluster.startswith("tls://")
    other = make_certificates(tmp_path / "rogue", ["engine"])
    attempts = [
        (cluster, Security(tls_ca_file=str(certs.ca.cert),  # this CA trusted, not trusting
                           tls_client_cert=str(other.sites["engine"].cert),
                           tls_client_key=str(other.sites["engine"].key),
                           require_encryption=True)),
        (cluster.replace("tls://", "tcp://"), None)]
    for address, security in attempts:
        with pytest.raises((OSError, TimeoutError)):
            Client(address, security=security, timeout=5, set_as_default=False)
    assert _keeps_talking(cluster, certs.ca.cert) is False
    assert _keeps_talking(cluster, certs.ca.cert, other.sites["engine"]) is False
    assert _keeps_talking(cluster, certs.ca.cert, certs.sites["engine"]) is True
    # the site's own files reach it
    with Client(cluster, security=Security(
            tls_ca_file=str(certs.ca.cert), tls_client_cert=str(certs.sites["engine"].cert),
            tls_client_key=str(certs.sites["engine"].key), require_encryption=True),
            timeout=20, set_as_default=False) as client:
        assert client.submit(sum, [1, 2]).result() == 3


@pytest.mark.slow  # a TLS cluster of worker processes
def test_glm_through_a_site_on_a_tls_cluster(tmp_path, certs, cluster):
    """The engine site over its TLS cluster equals the in-memory site (rounds,
    coefficients, standard errors) and statsmodels on the pooled rows."""
    import statsmodels.api as sm

    from skfed import FederatedDataset
    from skfed.linear_model import FedPoissonRegressor
    from skfed.sites.transport import SiteServer

    frame = _rows(900, seed=11)
    first, second = frame.iloc[:400], frame.iloc[400:].reset_index(drop=True)
    engine_config = write_site(tmp_path / "e", "engine", second, certs, [3, 197, 1, 299])
    text = engine_config.read_text().replace('scheduler = "local"',
                                             _engine_lines(cluster, certs)
                                             .replace('engine = "dask"\n', ""))
    engine_config.write_text(text)
    servers = {"other": write_site(tmp_path / "o", "other", first, certs),
               "twin": write_site(tmp_path / "t", "twin", second, certs),
               "engine": engine_config}
    servers = {name: SiteServer(load_config(path)) for name, path in servers.items()}
    assert servers["engine"].config.datasets["rows"].scheduler_tls is not None
    fits = []
    try:
        for server in servers.values():
            server.start()
        for pair in (("other", "twin"), ("other", "engine")):
            data = FederatedDataset.from_sites(
                {name: f"127.0.0.1:{servers[name].port}" for name in pair}, dataset="rows",
                target="c", drop=["b", "y", "w"], ca_file=certs.ca.cert,
                cert_file=certs.client.cert, key_file=certs.client.key)
            try:
                fits.append(FedPoissonRegressor(alpha=0.0).fit(data))
            finally:
                data.close()
    finally:
        for server in servers.values():
            server.stop()
    memory, engine = fits
    assert engine.n_iter_ == memory.n_iter_
    np.testing.assert_allclose(engine.coef_, memory.coef_, rtol=1e-10)
    np.testing.assert_allclose(engine.intercept_, memory.intercept_, rtol=1e-10)
    np.testing.assert_allclose(engine.bse_, memory.bse_, rtol=1e-10)
    X = sm.add_constant(frame[["x0", "x1", "x2", "x3"]].to_numpy())
    ref = sm.GLM(frame["c"].to_numpy(), X, family=sm.families.Poisson()).fit(tol=1e-12)
    np.testing.assert_allclose(engine.coef_, ref.params[1:], rtol=1e-6)
    np.testing.assert_allclose(engine.intercept_, ref.params[0], rtol=1e-6)
    np.testing.assert_allclose(engine.bse_, ref.bse, rtol=1e-6)
