"""A three-site federation of site services on 127.0.0.1, for tests and benchmarks.

Each site is a real ``skfed site serve CONFIG`` process with its own
certificate, data folder, policy and audit log; the analyst connects over
gRPC with mutual TLS.
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

SITES = ("hospital-a", "hospital-b", "hospital-c")
#: lifelines' rossi split by age: the youngest third holds 5 married patients, and the
#: Hessian's cross terms of two binary covariates count fewer rows still (a few married
#: and with work experience), so under min_rows = 10 the dominance rule refuses the fit's
#: sums there (tests/test_cox_sites.py shows it); these services take min_rows = 3, with
#: which every sum of the fits passes (their numbers are what these tests compare)
ROSSI_POLICY = "min_rows = 3"


def site_config(folder, name, *, certs, datasets, policy="", listen="127.0.0.1:0", extra="",
                declare=""):
    """Write ``folder/site.toml`` for site ``name``; ``datasets``: {name: (file, columns)};
    ``extra``: more TOML (``[access.<analyst>]`` tables); ``declare``: TOML lines every
    dataset's table holds (``domains = { age = [18, 110] }``, ``weights = ["w"]``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["[site]", f'name = "{name}"', f'listen = "{listen}"', "[tls]",
             f'ca = "{certs.ca.cert}"', f'cert = "{certs.sites[name].cert}"',
             f'key = "{certs.sites[name].key}"']
    for dname, (path, columns) in datasets.items():
        lines += [f"[datasets.{dname}]", f'path = "{path}"']
        if columns is not None:
            lines.append("columns = [" + ", ".join(f'"{c}"' for c in columns) + "]")
        lines.append(declare)
    lines += ["[policy]", policy, "[audit]", 'path = "audit.jsonl"', extra]
    path = folder / "site.toml"
    path.write_text("\n".join(lines) + "\n")
    for dname in datasets:  # held-out rows the same in every run (a test's may override)
        fix_partition_secret(folder, dname, hashlib.sha256(f"{name}/{dname}".encode())
                             .hexdigest(), replace=False)
    return path


def spawn_services(argvs, ready, env=None, timeout=60):
    """Start each of ``argvs`` (``skfed ... serve`` commands) at once, then wait for each;
    returns ``[(process, line)]`` once each one's first line of output holds ``ready``.

    Their stderr goes to temporary files, not pipes: a pipe nobody reads fills at 64 KB
    (gRPC's C core writes a line a refused handshake, warnings a line each) and then
    blocks the service mid-request, hanging the test. The first lines are awaited for at
    most ``timeout`` seconds (a service that neither starts nor dies fails the test)."""
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    started, readers = [], []
    for argv in argvs:
        errors = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, text=True,
                                env=env)
        proc.errors, proc.first = errors, []
        readers.append(threading.Thread(
            target=lambda p=proc: p.first.append(p.stdout.readline()), daemon=True))
        readers[-1].start()
        started.append(proc)
    deadline = time.monotonic() + timeout
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    failed = [(argv, p) for argv, p in zip(argvs, started)
              if not p.first or ready not in p.first[0]]
    if failed:
        argv, proc = failed[0]
        waited = f" within {timeout} s" if not proc.first else ""
        for p in started:
            p.kill()
        proc.wait()
        proc.errors.seek(0)
        message = (f"{' '.join(argv[2:5]) or argv[0]} did not start{waited}: "
                   f"{(proc.first or [''])[0]!r} {proc.errors.read()}")
        stop_sites(started)
        raise RuntimeError(message)
    return [(p, p.first[0]) for p in started]


def spawn_service(argv, ready, env=None, timeout=60):
    """:func:`spawn_services` of one command."""
    return spawn_services([argv], ready, env, timeout)[0]


def close_service(proc):
    """Close what the test holds of a stopped service: its stdout pipe, its stderr file."""
    for stream in (proc.stdout, getattr(proc, "errors", None)):
        if stream is not None and not stream.closed:
            stream.close()


def start_site(config, timeout=60):
    """Start ``skfed site serve config``; returns ``(process, port)`` once it listens."""
    proc, line = spawn_service([sys.executable, "-m", "skfed", "site", "serve", str(config)],
                               "serving", timeout=timeout)
    return proc, int(line.split(" on port ")[1].split(";")[0])


def stop_sites(processes):
    """Stop the processes, then close what the test holds of them (no unclosed files)."""
    for proc in processes:
        proc.terminate()
    for proc in processes:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        close_service(proc)


def split_frames(frame, n_sites, *, by=None):
    """Row groups of ``frame``: round robin, or quantiles of column ``by`` (shift)."""
    if by is None:
        site = np.arange(len(frame)) % n_sites
    else:
        rank = frame[by].rank(method="first").to_numpy() - 1
        site = (rank * n_sites // len(frame)).astype(int)
    return [frame[site == k] for k in range(n_sites)]


def fix_partition_secret(folder, dataset, secret="ab" * 32, *, replace=True):
    """Give the site in ``folder`` a fixed secret for ``dataset``'s held-out partitions
    (a service draws one at random when it first needs it): a test whose held-out rows
    meet a site's small-count rules then meets them in every run (``replace=False``:
    unless the site has one already)."""
    import json

    path = Path(folder) / "partition-secrets.json"
    secrets = json.loads(path.read_text()) if path.exists() else {}
    if replace or dataset not in secrets:
        path.write_text(json.dumps(dict(secrets, **{dataset: secret})))


def with_site_partitions(local, folders, dataset, min_rows=10):
    """The in-process dataset ``local`` (sites' rows in their files' order) with the fixed
    partitions each site service draws from its own secret for ``dataset``: the held-out
    parts of both homes are then the same rows (the test reads the sites' secret files,
    which no analyst can)."""
    import json

    secrets = {name: bytes.fromhex(json.loads(
        (Path(folder) / "partition-secrets.json").read_text())[dataset])
        for name, folder in folders.items()}
    return local.apply(_attach_partitions, secrets, min_rows)


def _attach_partitions(site, secrets, min_rows):
    from skfed.data.site import SitePartitions

    partitions = SitePartitions.draw(secrets[site.site], site.n_samples, min_rows)
    return site.replace(meta=dict(site.meta, row_ids=np.arange(site.n_samples),
                                  partitions=partitions))


@contextmanager
def diabetes_service(root, policy):
    """One service (in this process, gRPC over mutual TLS) for hospital-a, serving 120
    diabetes rows as dataset ``visits`` under ``policy``; yields a raw analyst connection
    (``SiteConnection``: what a modified client would send through)."""
    from sklearn.datasets import load_diabetes

    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteConnection, SiteServer

    root = Path(root)
    certs = make_certificates(root / "certs", ["hospital-a"], analysts=["analyst-b"])
    load_diabetes(as_frame=True).frame.iloc[:120].to_csv(root / "visits.csv", index=False)
    path = site_config(root, "hospital-a", certs=certs,
                       datasets={"visits": ("visits.csv", None)}, policy=policy)
    server = SiteServer(load_config(path)).start()
    conn = SiteConnection("hospital-a", f"127.0.0.1:{server.port}", ca_file=certs.ca.cert,
                          cert_file=certs.client.cert, key_file=certs.client.key)
    try:
        yield conn
    finally:
        conn.close()
        server.stop()


@contextmanager
def serving(servers):
    """Start ``servers`` (``{name: SiteServer}``), yield them, stop them on exit."""
    try:
        for server in servers.values():
            server.start()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@contextmanager
def services_of(root, frames, *, policy="min_rows = 10", dataset="rows", declare="",
                **options):
    """Three services in this process (gRPC over mutual TLS), site ``k`` serving
    ``frames[k]`` as ``dataset`` under ``policy`` (and the dataset's declarations
    ``declare``); yields ``FederatedDataset.from_sites`` of them with ``options``
    (``target=``...), closed with the services on exit."""
    from skfed import FederatedDataset
    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    root = Path(root)
    certs = make_certificates(root / "certs", list(SITES), analysts=["analyst-b"])
    servers, addresses = [], {}
    try:
        for name, frame in zip(SITES, frames):
            folder = root / name
            folder.mkdir()
            frame.to_csv(folder / f"{dataset}.csv", index=False)
            path = site_config(folder, name, certs=certs,
                               datasets={dataset: (f"{dataset}.csv", None)}, policy=policy,
                               declare=declare)
            servers.append(SiteServer(load_config(path)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        data = FederatedDataset.from_sites(addresses, dataset=dataset, ca_file=certs.ca.cert,
                                           cert_file=certs.client.cert,
                                           key_file=certs.client.key, **options)
        try:
            yield data
        finally:
            data.close()
    finally:
        for server in servers:
            server.stop()


@contextmanager
def policy_federations(root, frames, policies, *, dataset="rows", analysts=()):
    """One federation of three services (in this process, gRPC over mutual TLS) per
    policy: ``frames`` ``{site name: DataFrame}`` served as ``dataset`` under each of
    ``policies`` ``{policy name: policy TOML}``; yields ``({policy name: (addresses,
    folders)}, certs)`` (the form :func:`policy_data` reads), the services stopped on
    exit; ``analysts``: more analysts' certificates (as ``make_certificates``)."""
    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    root = Path(root)
    certs = make_certificates(root / "certs", list(frames), analysts=list(analysts))
    servers, out = [], {}
    try:
        for policy, text in policies.items():
            addresses, folders = {}, {}
            for name, frame in frames.items():
                folder = root / policy / name
                folder.mkdir(parents=True)
                frame.to_csv(folder / f"{dataset}.csv", index=False)
                path = site_config(folder, name, certs=certs, policy=text,
                                   datasets={dataset: (f"{dataset}.csv", None)})
                servers.append(SiteServer(load_config(path)).start())
                addresses[name] = f"127.0.0.1:{servers[-1].port}"
                folders[name] = folder
            out[policy] = (addresses, folders)
        yield out, certs
    finally:
        for server in servers:
            server.stop()


def policy_data(federations, policy, *, dataset="rows"):
    """``FederatedDataset.from_sites`` of the services of ``policy`` (no target)."""
    from skfed import FederatedDataset

    found, certs = federations
    return FederatedDataset.from_sites(found[policy][0], dataset=dataset, target=None,
                                       ca_file=certs.ca.cert, cert_file=certs.client.cert,
                                       key_file=certs.client.key)
