"""Per-round cost of each executor over the sequential one, and the bytes moved.

For 8, 64 and 512 clients, on small data (~1 MB in all) and on large data
(>= 50 MB in all), a FedLasso fit runs a fixed number of FedDualAvg rounds
(one local step: the client compute is one gradient) on each executor. The
per-round time comes from ``history_.wall_time`` (placement excluded: it is
timed separately), and the overhead is that time minus the sequential
executor's. For Dask, the workers' own compute per round (the slowest
worker's task, from Dask's task stream) is shown too: what is left of the
round is dispatch, transfer and the server's aggregation. Bytes per round are the solver's messages (``bytes_up`` +
``bytes_down``) plus monitoring; placement is the one-time data shipping.

The Dask executor runs on a ``LocalCluster`` of worker processes (2 workers,
1 thread each), the setting of a real deployment on this machine.

Run: python benchmarks/bench_executors.py [--rounds 20] [--clients 8 64 512]
     [--executors sequential threads loky dask] [--markdown FILE]
"""

import argparse
import contextlib
import re
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from skfed import FedLasso
from skfed.executors import DaskExecutor, LokyExecutor
from skfed.solvers import FedDualAvg

SIZES = {"small": 1e6, "large": 56e6}  # total bytes of X
N_FEATURES = 100


def make_data(n_clients, total_bytes, seed=0):
    rng = np.random.default_rng(seed)
    n = max(int(total_bytes / (8 * N_FEATURES)), 4 * n_clients)
    X = rng.normal(size=(n, N_FEATURES))
    y = X[:, :5].sum(axis=1) + rng.normal(size=n)
    return X, y, np.arange(n) % n_clients


def executor_for(name):
    if name == "loky":
        return LokyExecutor(n_jobs=2)
    if name == "dask":
        return DaskExecutor()
    return name


def worker_compute(task_stream, rounds):
    """Critical-path compute of the rounds on the workers, ms per round.

    Each dispatch (a round's client updates, or a monitoring pass) is one task
    per worker, running in parallel; its compute is the slowest of those.
    """
    slowest = {}
    for task in task_stream:
        match = re.match(r"skfed-\w+-(\d+)-(round\d+|client_monitor)-", str(task["key"]))
        if match is None:
            continue
        spent = sum(s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
        slowest[match.group(1)] = max(slowest.get(match.group(1), 0.0), spent)
    return 1e3 * sum(slowest.values()) / rounds


def run(name, X, y, clients, rounds):
    est = FedLasso(alpha=0.01, solver=FedDualAvg(local_steps=1), max_rounds=rounds, tol=0,
                   executor=executor_for(name), n_jobs=2)
    start = time.perf_counter()
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore", ConvergenceWarning)
        if name == "dask":
            from distributed import get_task_stream

            stream = stack.enter_context(get_task_stream())
        est.fit(X, y, clients=clients)
    total = time.perf_counter() - start
    compute = worker_compute(stream.data, rounds) if name == "dask" else float("nan")
    h = est.history_
    per_round = h["wall_time"][-1] / rounds
    traffic = (h["bytes_up"][1:].sum() + h["bytes_down"][1:].sum()) / rounds
    monitor = h["monitor_bytes"][1:].sum() / rounds
    return {"per_round_ms": 1e3 * per_round, "setup_s": total - h["wall_time"][-1],
            "algo_bytes": traffic, "monitor_bytes": monitor,
            "placement_bytes": h.placement_bytes, "coef": est.coef_, "compute_ms": compute}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--executors", nargs="+",
                        default=["sequential", "threads", "loky", "dask"])
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args(argv)

    cluster = client = None
    if "dask" in args.executors:
        import distributed

        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0")
        client = distributed.Client(cluster)
    header = ("| clients | data | executor | ms/round | overhead ms/round "
              "| worker compute ms/round | setup s | algorithm KB/round | monitor KB/round "
              "| placement MB |")
    lines = [header, "|" + "---|" * 10]
    print(header, flush=True)
    print(lines[1], flush=True)
    try:
        for size in args.sizes:
            for n_clients in args.clients:
                X, y, clients = make_data(n_clients, SIZES[size])
                base = None
                for name in args.executors:
                    r = run(name, X, y, clients, args.rounds)
                    if name == "sequential":
                        base = r
                    elif base is not None:  # same model on every executor
                        np.testing.assert_allclose(r["coef"], base["coef"], rtol=1e-10)
                    over = r["per_round_ms"] - base["per_round_ms"] if base else float("nan")
                    line = (f"| {n_clients} | {size} ({X.nbytes / 1e6:.0f} MB) | {name} "
                            f"| {r['per_round_ms']:.1f} | {over:+.1f} | {r['compute_ms']:.1f} "
                            f"| {r['setup_s']:.2f} "
                            f"| {r['algo_bytes'] / 1e3:.1f} | {r['monitor_bytes'] / 1e3:.1f} "
                            f"| {r['placement_bytes'] / 1e6:.1f} |")
                    lines.append(line)
                    print(line, flush=True)
    finally:
        if client is not None:
            client.close()
            cluster.close()
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
