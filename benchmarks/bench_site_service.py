"""Per-round cost of the site service against the in-process and Dask paths.

For 4, 16 and 64 sites the same FedLasso fit (``solver="fedavg"``, a fixed
number of rounds, each followed by the monitoring pass) runs three ways, in
one run:

- **in-process**: ``fit(X, y, clients=site)``, the sequential executor;
- **Dask**: the same sites scattered to named in-process Dask workers
  (``LocalCluster(processes=False)``, as ``bench_sites.py``);
- **site service**: one real ``skfed site serve`` process per site on
  127.0.0.1, gRPC over mutual TLS, the analyst connected with
  ``FederatedDataset.from_sites``.

Reported per path: milliseconds per round (the median gap between
``history_["wall_time"]`` records: the round and its monitoring pass), the
algorithm's and the monitor's bytes per round (``history_``), and for the
service the bytes its transport really carried per round (typed messages,
requests and replies). The models agree (max coefficient difference
printed). Then one end-to-end three-site fit with secure aggregation:
rounds, time and bytes from the first connection to the fitted model.

Run: python benchmarks/bench_site_service.py [--sites 4 16 64] [--rows 500]
     [--features 20] [--rounds 20]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from skfed import FedLasso
from skfed.data import FederatedDataset
from skfed.deploy import make_certificates

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests._sites import site_config, start_site, stop_sites  # noqa: E402


def site_frame(k, n_rows, n_features, seed=0):
    rng = np.random.default_rng([seed, k])
    X = rng.normal(loc=0.5 * rng.normal(size=n_features), size=(n_rows, n_features))
    w = np.zeros(n_features)
    w[:5] = [2.0, -1.0, 1.0, 0.5, -0.5]
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(n_features)])
    frame["y"] = X @ w + rng.normal(size=n_rows)
    return frame


def per_round(est):
    h = est.history_
    wall = np.asarray(h["wall_time"], dtype=float)
    rounds = len(wall) - 1
    return {"ms": 1e3 * float(np.median(np.diff(wall))),
            "algorithm": (h["bytes_up"].sum() + h["bytes_down"].sum()) / rounds,
            "monitor": h["monitor_bytes"][1:].sum() / rounds}


def model(rounds):
    return FedLasso(alpha=0.05, solver="fedavg", max_rounds=rounds, tol=0)


def start_federation(root, names, frames, certs):
    processes, addresses = [], {}
    configs = []
    for name, frame in zip(names, frames):
        folder = root / name
        folder.mkdir()
        frame.to_csv(folder / "rows.csv", index=False)
        configs.append(site_config(folder, name, certs=certs,
                                   datasets={"rows": ("rows.csv", None)}))
    # start them all, then wait for each (imports overlap)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    pending = [subprocess.Popen([sys.executable, "-m", "skfed", "site", "serve", str(c)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env) for c in configs]
    for name, proc in zip(names, pending):
        line = proc.stdout.readline()
        processes.append(proc)
        addresses[name] = f"127.0.0.1:{int(line.split(' on port ')[1].split(';')[0])}"
    return processes, addresses


def run(n_sites, n_rows, n_features, rounds, root):
    import distributed

    names = [f"site-{k:02d}" for k in range(n_sites)]
    frames = [site_frame(k, n_rows, n_features) for k in range(n_sites)]
    pooled = pd.concat(frames, ignore_index=True)
    X, y = pooled.drop(columns="y").to_numpy(), pooled["y"].to_numpy()
    site = np.repeat(names, n_rows)
    certs = make_certificates(root / "certs", names)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = model(rounds).fit(X, y, clients=site)
        out["in-process"] = per_round(local)

        workers = {n: {"cls": distributed.Worker, "options": {"name": n, "nthreads": 1}}
                   for n in names}
        with distributed.SpecCluster(workers=workers, scheduler={
                "cls": distributed.Scheduler, "options": {"dashboard_address": None}},
                asynchronous=False) as cluster, distributed.Client(cluster) as client:
            data = FederatedDataset.from_arrays(X, y, site).scatter(
                client, placement={n: n for n in names})
            dask_fit = model(rounds).fit(data)
            out["dask"] = per_round(dask_fit)

        processes, addresses = start_federation(root, names, frames, certs)
        try:
            data = FederatedDataset.from_sites(
                addresses, dataset="rows", target="y", ca_file=certs.ca.cert,
                cert_file=certs.client.cert, key_file=certs.client.key)
            backend = data._backend
            before = backend.bytes_sent + backend.bytes_received
            remote = model(rounds).fit(data)
            out["site service"] = per_round(remote)
            out["site service"]["transport"] = (
                backend.bytes_sent + backend.bytes_received - before) / rounds
            data.close()
        finally:
            stop_sites(processes)
    diff = max(np.max(np.abs(local.coef_ - dask_fit.coef_)),
               np.max(np.abs(local.coef_ - remote.coef_)))
    return out, diff


def end_to_end(root, n_rows=500, n_features=20):
    from skfed.privacy import SecureAggregation

    names = ["hospital-a", "hospital-b", "hospital-c"]
    frames = [site_frame(k, n_rows, n_features, seed=1) for k in range(3)]
    certs = make_certificates(root / "e2e-certs", names)
    root = root / "e2e"
    root.mkdir()
    processes, addresses = start_federation(root, names, frames, certs)
    try:
        start = time.perf_counter()
        data = FederatedDataset.from_sites(
            addresses, dataset="rows", target="y", ca_file=certs.ca.cert,
            cert_file=certs.client.cert, key_file=certs.client.key)
        est = FedLasso(alpha=0.05, privacy=SecureAggregation()).fit(data)
        elapsed = time.perf_counter() - start
        backend = data._backend
        transport = backend.bytes_sent + backend.bytes_received
        data.close()
    finally:
        stop_sites(processes)
    pooled = pd.concat(frames, ignore_index=True)
    site = np.repeat(names, n_rows)
    plain = FedLasso(alpha=0.05).fit(pooled.drop(columns="y"), pooled["y"], clients=site)
    h = est.history_
    return {"rounds": int(est.n_iter_), "seconds": elapsed, "transport": transport,
            "algorithm": int(h["bytes_up"].sum() + h["bytes_down"].sum()),
            "diff": float(np.max(np.abs(est.coef_ - plain.coef_)))}


def main(argv=None):
    import logging

    logging.getLogger("distributed").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"FedLasso, fedavg, {args.rounds} rounds (each with its monitoring pass), "
          f"{args.rows} rows x {args.features} features per site\n")
    print("| sites | path | ms / round | x in-process | algorithm B / round | "
          "monitor B / round | transport B / round |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sites:
            root = Path(tmp) / f"n{n}"
            root.mkdir()
            out, diff = run(n, args.rows, args.features, args.rounds, root)
            base = out["in-process"]["ms"]
            for path, r in out.items():
                transport = f"{r['transport']:,.0f}" if "transport" in r else "–"
                print(f"| {n} | {path} | {r['ms']:.1f} | {r['ms'] / base:.1f} | "
                      f"{r['algorithm']:,.0f} | {r['monitor']:,.0f} | {transport} |")
            print(f"|   | max coefficient difference | {diff:.1e} | | | | |", flush=True)
        e2e = end_to_end(Path(tmp))
    print(f"\nend to end, three site services, FedLasso (Newton) with secure aggregation: "
          f"{e2e['rounds']} round(s), {e2e['seconds']:.2f} s from the first connection to the "
          f"model (key agreement included), {e2e['transport']:,} bytes carried "
          f"({e2e['algorithm']:,} of them the algorithm's, by history_); max coefficient "
          f"difference to the unmasked in-process fit {e2e['diff']:.1e}")


if __name__ == "__main__":
    main()
