"""A whole TLS federation on this machine: for tests, examples and demonstrations.

One scheduler with the coordinator's certificate, and one worker *process*
per site, named after the site and presenting the site's own certificate,
all on the loopback interface. A real deployment runs the same roles on
separate machines (``docs/deployment.md``).
"""

import logging

from ..data.sources import DATA_DIR_ENV
from .certificates import Certificates, _check_sites, tls_security


def local_tls_cluster(directory, sites, *, data_dirs=None, silence_logs=logging.WARNING):
    """Start a mutual-TLS Dask cluster with one named worker process per site.

    The scheduler listens on ``tls://127.0.0.1:<random port>`` with the
    coordinator's certificate (no dashboard; Dask's remaining HTTP status
    pages on a random loopback port); each site's worker is a
    :class:`distributed.Nanny` process with one thread, ``name=<site>`` and
    the site's certificate, so ``DaskExecutor(placement={label: site})`` and
    site-resident datasets find it by name.

    Parameters
    ----------
    directory : str, os.PathLike or Certificates
        Certificates from :func:`make_certificates` that include every site.
    sites : list of str
        The sites to start a worker for, one process each.
    data_dirs : dict of str to path, optional
        ``{site: directory}``: the worker's ``SKFED_DATA_DIR``, where its
        relative data paths are read (the site's local data directory).
    silence_logs : int, default=logging.WARNING
        Log level of the cluster's processes.

    Returns
    -------
    cluster : distributed.SpecCluster
        Started; use it as a context manager to close it. Connect with
        ``distributed.Client(cluster.scheduler_address,
        security=tls_security(directory, "client"))``.

    Raises
    ------
    ValueError
        Invalid or repeated site names, or ``data_dirs`` naming other sites.
    FileNotFoundError
        A certificate or key is missing.
    """
    from distributed import Nanny, Scheduler, SpecCluster

    sites = _check_sites(sites)
    directory = directory.directory if isinstance(directory, Certificates) else directory
    data_dirs = dict(data_dirs or {})
    unknown = sorted(set(data_dirs) - set(sites))
    if unknown:
        raise ValueError(f"data_dirs names sites {unknown} that are not in sites={sites}.")
    # resolve every certificate first: a missing file fails here, before any process starts
    coordinator = tls_security(directory, "scheduler")
    site_security = {s: tls_security(directory, "worker", s) for s in sites}
    # dashboard=False still serves plain-HTTP status pages (not covered by TLS):
    # keep them on loopback, on a free port
    loopback = {"host": "127.0.0.1", "protocol": "tls://", "dashboard": False,
                "dashboard_address": "127.0.0.1:0"}
    scheduler = {"cls": Scheduler, "options": {**loopback, "port": 0, "security": coordinator}}
    workers = {}
    for site in sites:
        options = {**loopback, "name": site, "nthreads": 1, "security": site_security[site],
                   "silence_logs": silence_logs}
        if site in data_dirs:
            options["env"] = {DATA_DIR_ENV: str(data_dirs[site])}
        workers[site] = {"cls": Nanny, "options": options}
    # SpecCluster, the base of LocalCluster: it lets each worker carry its own
    # Security (LocalCluster gives every worker the cluster's one)
    return SpecCluster(scheduler=scheduler, workers=workers, security=coordinator,
                       silence_logs=silence_logs, name="skfed-tls")
