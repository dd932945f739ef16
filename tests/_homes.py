"""The three homes of a site's rows, for one test: in this process, on a Dask worker
named after the site, and at a real site service (gRPC over mutual TLS).

:func:`homes` writes each site's rows to its own CSV file and opens the same
rows in every home; :func:`assert_same_fit` compares two fitted estimators
(coefficients, intercepts, rounds, objective, and the regression table where
there is one).
"""

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from skfed import FederatedDataset

from ._sites import site_config

HOMES = ("in-process", "dask", "site-service")


@contextmanager
def homes(root, frames, *, target, policy="min_rows = 10"):
    """``{home: FederatedDataset}`` of the same rows (``frames``: ``{site: DataFrame}``)
    in each home; everything is closed on exit."""
    import distributed

    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    root, names = Path(root), list(frames)
    certs = make_certificates(root / "certs", names)
    servers, addresses = [], {}
    workers = {n: {"cls": distributed.Worker, "options": {"name": n, "nthreads": 1}}
               for n in names}
    try:
        for name, frame in frames.items():
            (root / name).mkdir(exist_ok=True)
            frame.to_csv(root / name / "rows.csv", index=False)
            config = site_config(root / name, name, certs=certs,
                                 datasets={"rows": ("rows.csv", None)}, policy=policy)
            servers.append(SiteServer(load_config(config)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        # read as the sites read it (round-trip floats: skfed.data.sources)
        pooled = pd.concat([pd.read_csv(root / n / "rows.csv", float_precision="round_trip")
                            for n in names], ignore_index=True)
        site = np.repeat(names, [len(frames[n]) for n in names])
        # the target as a named Series: each home then knows its column's name
        local = FederatedDataset.from_arrays(pooled.drop(columns=[target]), pooled[target],
                                             site)
        with distributed.SpecCluster(workers=workers, scheduler={
                "cls": distributed.Scheduler, "options": {"dashboard_address": ":0"}},
                asynchronous=False) as cluster, distributed.Client(cluster) as client:
            remote = FederatedDataset.from_sites(
                addresses, dataset="rows", target=target, ca_file=certs.ca.cert,
                cert_file=certs.client.cert, key_file=certs.client.key)
            try:
                yield {"in-process": local,
                       "dask": FederatedDataset.from_sources(
                           {n: str(root / n / "rows.csv") for n in names}, target=target,
                           client=client),
                       "site-service": remote}
            finally:
                remote.close()
    finally:
        for server in servers:
            server.stop()


def assert_same_fit(est, reference, *, rtol=1e-9, atol=1e-10):
    """The same model, fitted in two homes: coefficients, intercept, rounds and the
    objective (and standard errors where the estimator reports them)."""
    np.testing.assert_allclose(est.coef_, reference.coef_, rtol=rtol, atol=atol)
    if hasattr(reference, "intercept_"):
        np.testing.assert_allclose(est.intercept_, reference.intercept_, rtol=rtol, atol=atol)
    assert est.n_iter_ == reference.n_iter_
    np.testing.assert_allclose(est.objective_, reference.objective_, rtol=rtol, atol=atol)
    bse = getattr(reference, "_inference", None) and reference.bse_
    if bse is not None:
        np.testing.assert_allclose(est.bse_, bse, rtol=rtol, atol=atol)
