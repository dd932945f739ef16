"""
A secured federation on one machine: three sites whose files the analyst never reads
====================================================================================

The deployment of ``docs/deployment.md``, in one script: a certificate
authority and certificates for a coordinator, an analyst and three hospitals;
a Dask scheduler and one worker *process* per hospital, all speaking mutual
TLS on the loopback interface; each hospital's rows in a directory that only
its own worker is told about (its ``SKFED_DATA_DIR``). The analyst names the
files by their name *within* each site's directory, fits a sparse logistic
regression and a leave-one-site-out validation, and no row ever reaches the
analyst's process (``history_.placement_bytes`` is 0). A client without a
certificate from the federation's authority is refused.

Run: python examples/deploy_local_tls_sites.py
"""

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from distributed import Client
from sklearn.datasets import load_breast_cancer

from skfed import FedLogisticRegression
from skfed.data import FederatedDataset
from skfed.deploy import local_tls_cluster, make_certificates, tls_security
from skfed.model_selection import LeaveOneSiteOut, cross_validate_sites

SITES = ["hospital-a", "hospital-b", "hospital-c"]


def main():
    # %%
    # What each hospital holds (made here for the demonstration; in a real
    # federation each file already exists on its hospital's machine only).
    root = Path(tempfile.mkdtemp(prefix="skfed-federation-"))
    data = load_breast_cancer(as_frame=True)
    frame = data.frame.rename(columns=lambda c: c.replace(" ", "_"))
    site_of_row = np.random.default_rng(0).integers(0, 3, len(frame))
    data_dirs = {}
    for k, site in enumerate(SITES):
        directory = root / "sites" / site
        directory.mkdir(parents=True, mode=0o700)
        frame[site_of_row == k].to_csv(directory / "patients.csv", index=False)
        data_dirs[site] = directory

    # %%
    # The federation's certificates, and the cluster: a TLS scheduler and one
    # worker process per hospital, named after it and told only its own data
    # directory.
    certs = make_certificates(root / "certs", SITES)
    with local_tls_cluster(certs, SITES, data_dirs=data_dirs) as cluster:
        address = cluster.scheduler_address
        print(f"coordinator at {address}; sites: {', '.join(SITES)}")

        # %%
        # The analyst connects with its certificate and opens the sites' files
        # where they are: only row counts, column names and dtypes come back.
        with Client(address, security=tls_security(certs, "client")) as client:
            patients = FederatedDataset.from_sources(
                {site: "patients.csv" for site in SITES}, target="target", client=client)
            print(patients)

            model = FedLogisticRegression(C=0.05, l1_ratio=1.0).fit(patients)
            print(f"fitted in {model.n_iter_} rounds with solver {model.solver_.name!r}; "
                  f"{int(np.count_nonzero(model.coef_))} of {model.n_features_in_} features kept")
            print(f"pooled accuracy, from per-site counts: {model.score(patients):.3f}")
            print(f"rows shipped to or from the sites: {model.history_.placement_bytes} bytes; "
                  f"algorithm messages: {int(model.history_['bytes_up'].sum()):,} bytes up")

            # %%
            # How well does a model fitted at two hospitals do at the third?
            cv = cross_validate_sites(FedLogisticRegression(C=0.05, l1_ratio=1.0), patients,
                                      cv=LeaveOneSiteOut())
            for sites, score in zip(cv["test_sites"], cv["test_score"]):
                print(f"  trained without {sites[0]}: accuracy there {score:.3f}")

        # %%
        # Without a certificate from the federation's authority, no connection.
        other = make_certificates(root / "other-ca", ["intruder"])
        try:
            Client(address, security=tls_security(other, "client"), timeout=5)
        except (OSError, TimeoutError) as exc:
            print(f"a client with a foreign certificate was refused ({type(exc).__name__})")
        else:  # pragma: no cover - would be a security hole
            raise RuntimeError("a client with a foreign certificate connected")


# worker processes start by importing this file: the federation runs only when it is the
# program itself
if __name__ == "__main__":
    main()
