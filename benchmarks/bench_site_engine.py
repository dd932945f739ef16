"""A site whose dataset lives on a Dask cluster, against the same site in memory.

Issue 38 (items 3 and 4): a site of 10 million rows x 20 features in Parquet
partitions on a local Dask cluster (``[datasets.visits] engine = "dask"``), the
round times of a GLM (Poisson, Newton: each round one pass of the loss, gradient and
Hessian sums) and of FedLasso (``solver="fedavg"``, fixed rounds: each round a few
local gradient steps, each one pass over the partitions) against the in-memory
floor: the same rows read whole into the site service's process (the Parquet
partitions read as one table), the same site functions, the same gate.

Both sites are real site services in this process (gRPC over mutual TLS on
127.0.0.1, :class:`skfed.sites.transport.SiteServer`), one at a time, the analyst
connected with ``FederatedDataset.from_sites``. Reported per site: the time to the
first reply (the rows read: whole, or by the cluster's workers), the GLM's and
FedLasso's milliseconds per round (the median gap of ``history_["wall_time"]``,
medians over ``--repeat`` fits), the ratio engine / in memory, and the peak
resident memory of this process. The coefficients of the two sites agree to
round-off (printed).

Measured on the shared 2-core machine (one fit each, BLAS pinned to one thread, the
local cluster's worker running two partitions at once; load 3 to 20): at 10 million
rows the engine's first reply 29 s against 57 s in memory, a GLM round 5.2 s against
13.3 s (0.39x), a FedLasso round 2.9 s against 3.2 s (0.88x), peak memory 4.5 GB
against 13.0 GB; at 1 million rows 0.45 s against 1.24 s (GLM) and 0.30 s against
0.41 s (FedLasso). Coefficients equal to 1e-15 (GLM) and 1e-13 (FedLasso) relative.

Boosting (``--only boosting``, or after the linear fits): a regressor of ``--trees``
trees of depth ``--depth`` on its own dataset of ``--boosting-rows`` rows (1 million
by default; the same features, ``y``), at both sites: its setup (the schema, the
totals, the exact bins: scikit-learn's 200,000-row draw replayed at the site), its
milliseconds per tree and per round (a round: one request of node histograms), and
whether the engine's trees are the in-memory site's bit for bit (printed, with the
baselines and the largest leaf value difference). Measured (1 million rows, 4
partitions, 5 trees of depth 4, load 13-18): a round 123 ms on the engine against 48
ms in memory (2.6x), the setup 4.8 s against 5.1 s, the trees bit for bit; under a
load of 18-48 the ratio was 4.9x to 10.9x (20 partitions cost more than 4: each
request's checks and kernels run once per partition). At 10 million rows (10
partitions, 3 trees of depth 4, a quiet machine): a round 823 ms against 521 ms
(1.58x), the setup 8.3 s against 10.1 s, the trees bit for bit.

Not in the test suite. Usage::

    python benchmarks/bench_site_engine.py                  # 10 million rows x 20
    python benchmarks/bench_site_engine.py --rows 1000000   # smaller
    python benchmarks/bench_site_engine.py --scheduler 10.0.0.5:8786   # a cluster
    python benchmarks/bench_site_engine.py --only boosting --partitions 4  # the trees

``--partitions`` sets the number of Parquet files; ``--scheduler`` an existing
cluster's address (its workers must read the temporary folder, ``--folder``).
"""

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._measure import add_options, pinned_threads  # noqa: E402


def generate(folder, rows, features, partitions, seed=0, name="visits"):
    """``folder/<name>.parquet/part-*.parquet``: features, a Poisson count ``c`` and a
    continuous ``y``, partition by partition (never all rows in memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = folder / f"{name}.parquet"
    out.mkdir(parents=True, exist_ok=True)
    beta = np.random.default_rng(seed).normal(scale=0.15, size=features)
    names = [f"x{j:02d}" for j in range(features)]
    for k, n in enumerate(np.diff(np.linspace(0, rows, partitions + 1).astype(int))):
        rng = np.random.default_rng([seed, k])
        X = rng.normal(size=(n, features))
        eta = X @ beta
        columns = {name: X[:, j] for j, name in enumerate(names)}
        columns["c"] = rng.poisson(np.exp(eta)).astype(np.float64)
        columns["y"] = eta + rng.normal(size=n)
        pq.write_table(pa.table(columns), out / f"part-{k:04d}.parquet")
    return out


#: a site of this size allows a request more time than the default 100 s (a shared
#: machine's setup passes over 10 million rows); boosting's exact bins and its node
#: histograms in the clear allowed (a site that trusts the analyst with them)
POLICY = ('min_rows = 10\nmax_request_seconds = 3600\nallow_exact_quantiles = true\n'
          'finer_sums = ["boosting.histograms"]')


def site_configs(folder, certs, scheduler, names=("visits", "trees")):
    from tests._sites import site_config

    memory = site_config(folder / "memory", "memory", certs=certs,
                         datasets={n: (str(folder / f"{n}.parquet"), None) for n in names},
                         policy=POLICY)
    engine = site_config(folder / "engine", "engine", certs=certs,
                         datasets={n: (str(folder / f"{n}.parquet" / "*.parquet"), None)
                                   for n in names},
                         policy=POLICY,
                         declare=f'engine = "dask"\nscheduler = "{scheduler}"')
    return {"memory": memory, "engine": engine}


def per_round(est):
    wall = np.asarray(est.history_["wall_time"], dtype=float)
    return float(np.median(np.diff(wall))) if wall.size > 1 else float("nan")


def run_boosting(dataset, args):
    """A boosted regressor of ``args.trees`` trees on the ``trees`` dataset: its setup
    (schema, totals, the bins: scikit-learn's 200,000-row draw replayed), its time per
    tree and per round (a round: one request of node histograms to the site)."""
    from skfed.ensemble import FedHistGradientBoostingRegressor

    data = dataset("y", ["c"], "trees")
    start = time.perf_counter()
    est = FedHistGradientBoostingRegressor(max_iter=args.trees, max_depth=args.depth,
                                           early_stopping=False, random_state=0).fit(data)
    total = time.perf_counter() - start
    data.close()
    wall = np.asarray(est.history_["wall_time"], dtype=float)
    rounds = np.asarray(est.history_["rounds"], dtype=float)[1:]
    tree = float(np.median(np.diff(wall))) if wall.size > 1 else float("nan")
    return {"setup": total - float(wall[-1]), "tree": tree,
            "round": tree / float(np.median(rounds)), "est": est}


def same_trees(a, b):
    """Whether two boosted models' trees are the same bits, every field of every node."""
    return all(np.array_equal(x.nodes, y.nodes) for s, t in zip(a._predictors,
                                                                 b._predictors)
               for x, y in zip(s, t)) and np.array_equal(a._baseline_prediction,
                                                         b._baseline_prediction)


def leaf_gap(a, b):
    """The largest relative difference of two models' node values (NaN if their trees
    differ in shape)."""
    gaps = [np.max(np.abs(x.nodes["value"] - y.nodes["value"])
                   / np.maximum(np.abs(y.nodes["value"]), 1e-300))
            for s, t in zip(a._predictors, b._predictors) for x, y in zip(s, t)
            if x.nodes.shape == y.nodes.shape]
    return float(max(gaps)) if gaps else float("nan")


def run_site(name, config, certs, args):
    """One site service: its first reply's time, then the fits' rounds."""
    from skfed import FederatedDataset
    from skfed.linear_model import FedLasso, FedPoissonRegressor
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    server = SiteServer(load_config(config)).start()
    address = {name: f"127.0.0.1:{server.port}"}

    def dataset(target, drop, which="visits"):
        return FederatedDataset.from_sites(address, dataset=which, target=target,
                                           drop=drop, ca_file=certs.ca.cert,
                                           cert_file=certs.client.cert,
                                           key_file=certs.client.key)
    try:
        if args.only == "boosting":
            return {"boosting": run_boosting(dataset, args)}
        start = time.perf_counter()
        dataset("c", ["y"]).close()  # the rows read (whole, or by the workers)
        first = time.perf_counter() - start
        glm, lasso, fits = [], [], {}
        for _ in range(args.repeat):
            data = dataset("c", ["y"])
            fits["glm"] = FedPoissonRegressor(alpha=0.0, tol=1e-10, max_rounds=args.rounds,
                                              monitor_every=1).fit(data)
            data.close()
            glm.append(per_round(fits["glm"]))
            data = dataset("y", ["c"])
            fits["lasso"] = FedLasso(alpha=0.01, solver="fedavg", max_rounds=args.rounds,
                                     tol=0.0).fit(data)
            data.close()
            lasso.append(per_round(fits["lasso"]))
        out = {"first": first, "glm": float(np.median(glm)),
               "lasso": float(np.median(lasso)), "fits": fits}
        if args.only == "all":
            out["boosting"] = run_boosting(dataset, args)
        return out
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each fit")
    parser.add_argument("--boosting-rows", type=int, default=1_000_000,
                        help="rows of the boosting dataset (its own Parquet files)")
    parser.add_argument("--trees", type=int, default=5, help="trees of the boosting fit")
    parser.add_argument("--depth", type=int, default=4, help="the trees' max_depth")
    parser.add_argument("--only", choices=("all", "linear", "boosting"), default="all")
    parser.add_argument("--scheduler", default="local",
                        help='"local" (a cluster in the site\'s process) or host:port')
    parser.add_argument("--folder", default=None, help="where the Parquet files go")
    add_options(parser)
    args = parser.parse_args()
    from skfed.deploy import make_certificates

    with tempfile.TemporaryDirectory(dir=args.folder) as tmp, pinned_threads(args.threads):
        folder = Path(tmp)
        start = time.perf_counter()
        if args.only != "boosting":
            generate(folder, args.rows, args.features, args.partitions)
            print(f"{args.rows} rows x {args.features} features in {args.partitions} "
                  f"Parquet files: written in {time.perf_counter() - start:.1f} s")
        if args.only != "linear":
            generate(folder, args.boosting_rows, args.features, args.partitions, seed=1,
                     name="trees")
        names = {"all": ("visits", "trees"), "linear": ("visits",),
                 "boosting": ("trees",)}[args.only]
        certs = make_certificates(folder / "certs", ["memory", "engine"])
        configs = site_configs(folder, certs, args.scheduler, names)
        results = {}
        for name in ("engine", "memory"):  # the engine first: its peak is its own
            results[name] = run_site(name, configs[name], certs, args)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{name}: {summary(results[name])}; peak RSS so far {peak:.0f} MB")
        report(results, args)


def summary(result):
    parts = []
    if "first" in result:
        parts.append(f"first reply {result['first']:.2f} s, GLM {1e3 * result['glm']:.0f} "
                     f"ms/round, FedLasso {1e3 * result['lasso']:.0f} ms/round")
    if "boosting" in result:
        b = result["boosting"]
        parts.append(f"boosting setup {b['setup']:.2f} s, {1e3 * b['tree']:.0f} ms/tree, "
                     f"{1e3 * b['round']:.0f} ms/round")
    return "; ".join(parts)


def report(results, args):
    """The table of engine against in memory, and how far their models agree."""
    e, m = results["engine"], results["memory"]
    rows = []
    if "first" in e:
        rows += [(e["first"], m["first"], "first reply (rows read), s"),
                 (1e3 * e["glm"], 1e3 * m["glm"], "GLM round (Newton), ms"),
                 (1e3 * e["lasso"], 1e3 * m["lasso"], "FedLasso round (fedavg), ms")]
    if "boosting" in e:
        eb, mb = e["boosting"], m["boosting"]
        what = f"{args.boosting_rows} rows"
        rows += [(eb["setup"], mb["setup"], f"boosting setup ({what}; bins), s"),
                 (1e3 * eb["tree"], 1e3 * mb["tree"], f"boosting tree ({what}), ms"),
                 (1e3 * eb["round"], 1e3 * mb["round"], f"boosting round ({what}), ms")]
    print("\n| measure | engine | in memory (floor) | ratio |\n|---|---|---|---|")
    for engine, memory, what in rows:
        print(f"| {what} | {engine:.1f} | {memory:.1f} | {engine / memory:.2f}x |")
    for key in ("glm", "lasso") if "fits" in e else ():
        a, b = e["fits"][key], m["fits"][key]
        gap = np.max(np.abs(a.coef_ - b.coef_) / np.maximum(np.abs(b.coef_), 1e-12))
        print(f"{key}: largest relative coefficient difference engine vs memory "
              f"{gap:.1e}; rounds {a.n_iter_} and {b.n_iter_}")
    if "boosting" in e:
        a, b = e["boosting"]["est"], m["boosting"]["est"]
        print("boosting: the engine's trees the in-memory site's bit for bit: "
              f"{same_trees(a, b)}; baselines {a._baseline_prediction.ravel()[0]!r} and "
              f"{b._baseline_prediction.ravel()[0]!r}; largest leaf value difference "
              f"{leaf_gap(a, b):.1e}")


if __name__ == "__main__":
    main()
