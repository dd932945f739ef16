"""Three real site services (gRPC over mutual TLS, in this process) for the command line's
tests: each serves its share of a frame as one dataset, and the analyst's options that
reach them (``--site-service NAME=HOST:PORT ... --dataset --tls-*``)."""

from contextlib import contextmanager
from pathlib import Path

from ._sites import SITES, site_config


@contextmanager
def cli_services(root, frame, *, clients, dataset="rows", policy="", declare=""):
    """Serve ``frame``'s rows of each site (column ``clients``, one of :data:`SITES`) at
    its own service (``policy``, and the dataset's declarations ``declare``); yields the
    options ``skfed ... --site-service`` takes."""
    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    root = Path(root)
    certs = make_certificates(root / "certs", list(SITES))
    servers, argv = [], []
    try:
        for name in SITES:
            folder = root / name
            folder.mkdir()
            frame[frame[clients] == name].drop(columns=clients).to_csv(
                folder / f"{dataset}.csv", index=False)
            path = site_config(folder, name, certs=certs,
                               datasets={dataset: (f"{dataset}.csv", None)}, policy=policy,
                               declare=declare)
            servers.append(SiteServer(load_config(path)).start())
            argv += ["--site-service", f"{name}=127.0.0.1:{servers[-1].port}"]
        yield argv + ["--dataset", dataset, "--tls-ca-file", str(certs.ca.cert),
                      "--tls-cert", str(certs.client.cert), "--tls-key",
                      str(certs.client.key)]
    finally:
        for server in servers:
            server.stop()
