"""Site-resident data against the scatter path: bytes on the network, rounds, time.

For 4, 16 and 64 sites (one Dask worker per site, named after it) the same
FedLasso fit runs twice, side by side in one run:

- **resident**: ``FederatedDataset.from_sources`` — each site's worker builds
  its own rows (a callable run there; a real site would read a file), the
  fit runs where they are. Nothing but metadata and the algorithm's
  messages cross the network.
- **scatter**: the rows are in the analyst's process and
  ``DaskExecutor(placement=...)`` ships each site's rows to its worker once
  (``history_.placement_bytes``), then the same rounds run.

Reported per fit: placement bytes (the rows shipped), algorithm bytes
(``bytes_up + bytes_down``), monitoring and setup bytes, rounds, and wall
time (data loading / placement included). The two fits give the same model
(the maximum coefficient difference is printed).

The workers are in-process (``LocalCluster(processes=False)``): 64 worker
processes do not fit a 2-core machine, and the bytes counted are the same.

Run: python benchmarks/bench_sites.py [--sites 4 16 64] [--rows 2000] [--features 50]
     [--markdown FILE]
"""

import argparse
import functools
import time
import warnings

import numpy as np

from skfed import FedLasso
from skfed.data import FederatedDataset
from skfed.executors import DaskExecutor


def site_rows(k, n_rows, n_features, seed=0):
    """Site ``k``'s rows, made where this runs (site-specific mean shift)."""
    rng = np.random.default_rng([seed, k])
    X = rng.normal(loc=0.5 * rng.normal(size=n_features), size=(n_rows, n_features))
    w = np.zeros(n_features)
    w[:5] = [2.0, -1.0, 1.0, 0.5, -0.5]
    return X, X @ w + rng.normal(size=n_rows)


def _bytes(est):
    h = est.history_
    return {"placement": int(h.placement_bytes), "algorithm": int(h["bytes_up"].sum()
                                                                 + h["bytes_down"].sum()),
            "monitoring": int(h["monitor_bytes"].sum()), "setup": int(h.setup_bytes),
            "rounds": int(est.n_iter_)}


def run(n_sites, n_rows, n_features, alpha=0.05):
    import distributed

    names = [f"site-{k:02d}" for k in range(n_sites)]
    workers = {n: {"cls": distributed.Worker, "options": {"name": n, "nthreads": 1}}
               for n in names}
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": None}}
    rows = {}
    with distributed.SpecCluster(workers=workers, scheduler=scheduler, asynchronous=False) as cl, \
            distributed.Client(cl) as client:
        client.wait_for_workers(n_sites)
        est = FedLasso(alpha=alpha, tol=1e-8, max_rounds=2000)

        start = time.perf_counter()
        data = FederatedDataset.from_sources(
            {n: functools.partial(site_rows, k, n_rows, n_features) for k, n in enumerate(names)},
            client=client)
        resident = est.__class__(**est.get_params()).fit(data)
        rows["resident"] = {**_bytes(resident), "time": time.perf_counter() - start}
        data.close()

        start = time.perf_counter()
        parts = [site_rows(k, n_rows, n_features) for k in range(n_sites)]
        X = np.vstack([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        site = np.repeat(names, n_rows)
        scatter = est.__class__(**est.get_params()).set_params(
            executor=DaskExecutor(placement={n: n for n in names})).fit(X, y, clients=site)
        rows["scatter"] = {**_bytes(scatter), "time": time.perf_counter() - start}
    diff = float(np.max(np.abs(resident.coef_ - scatter.coef_)))
    return rows, diff


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--rows", type=int, default=2000, help="rows per site")
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", UserWarning)  # Dask's port chatter
    head = ("| sites | path | placement bytes | algorithm bytes | monitoring bytes | "
            "setup bytes | rounds | wall time (s) | max coef diff |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    print(head)
    for n_sites in args.sites:
        rows, diff = run(n_sites, args.rows, args.features)
        for path, r in rows.items():
            line = (f"| {n_sites} | {path} | {r['placement']:,} | {r['algorithm']:,} | "
                    f"{r['monitoring']:,} | {r['setup']:,} | {r['rounds']} | {r['time']:.2f} | "
                    f"{diff:.1e} |")
            lines.append(line)
            print(line, flush=True)
        ratio = rows["scatter"]["time"] / rows["resident"]["time"]
        print(f"  scatter / resident wall time: {ratio:.2f}x; rows shipped by scatter: "
              f"{rows['scatter']['placement']:,} bytes, by resident: "
              f"{rows['resident']['placement']:,}", flush=True)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
