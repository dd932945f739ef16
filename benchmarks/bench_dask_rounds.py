"""A Dask executor round against a no-op Dask round of the same fan-out (issue 37, item 5).

For 4, 16 and 64 sites (``--rows`` rows each, ``--features`` features) a
FedLasso FedAvg fit runs ``--rounds`` rounds on a ``LocalCluster`` of
``--workers`` workers of one thread each (2 worker processes by default: the
realistic setting on this 2-core machine; ``--processes=False`` for threads in
this process; ``--workers sites`` for one worker per site, each site pinned
to its own, the cross-silo layout of ``docs/deployment.md`` and the setting of
issue 37's 175 ms, which ``bench_site_service.py`` measured on in-process
workers). Reported per number of sites:

- **Dask round**: the median milliseconds per round of the fit (the median gap
  between ``history_["wall_time"]`` records: a round with its monitoring);
- **no-op round**: one trivial task per site on the worker that holds that
  site, submitted and gathered, timed beside the fit (the same workers, the
  same fan-out; the median of ``--rounds`` such rounds); the goal is a Dask
  round of at most 2x this;
- **no-op dispatch**: one trivial task per worker used, gathered: the floor of
  one dispatch of the executor (it runs a worker's sites in one task);
- **in process**: the sequential executor's round, and whether the Dask fit
  is the in-process fit bit for bit (coefficients, intercept, objective and
  stationarity of every round);
- the executor's dispatches (Dask round trips) per round, the monitoring
  passes of their own included (the first model's and the last's), and how
  many times the solver was sent to the workers.

Each of the ``--repeat`` passes (five by default) runs the fit, the no-op
rounds, the no-op dispatches and the in-process fit in turn (interleaved, so a
change of the machine's load falls on all); the tables give the medians over
passes, BLAS/OpenMP pinned to ``--threads`` (one) here and in the workers.

Run: python benchmarks/bench_dask_rounds.py [--sites 4 16 64] [--rows 100]
     [--features 20] [--rounds 20] [--repeat 5] [--threads 1]
     [--processes True] [--workers 2 | --workers sites]

Measured on 28 November 2026 on the shared 2-core machine (issue 37, item 5),
100 rows x 20 features per site, 20 rounds, one BLAS thread; ms per round,
medians of 5 passes (``python benchmarks/bench_dask_rounds.py``, load average
3.9-5.8 while it ran), every fit the in-process one bit for bit:

=====  ==========  ===========  =====  ==============  ===========
sites  Dask round  no-op round  ratio  no-op dispatch  in process
=====  ==========  ===========  =====  ==============  ===========
4      13.8        21.2         0.65x  13.1            0.4
16     13.3        37.1         0.36x  12.1            1.2
64     18.3        95.1         0.19x  14.9            4.4
=====  ==========  ===========  =====  ==============  ===========

A round is now 1.10 dispatches (20 rounds, plus the first model's and the last
model's monitoring passes), each about one no-op dispatch (1.05-1.23x), and the
solver is sent once per fit. Before (the executor of 963c80d, medians of 3,
load average 9-10): 31.2 ms a round at 16 sites against a 49.4 ms no-op round
(0.63x), 2.05 dispatches a round (the steps, then the monitoring pass). With one
in-process worker per site (``--workers sites --processes False --sites 16``,
medians of 3), the setting closest to the issue's 175 ms: 65.7 ms before
(1.87x a 35.1 ms no-op round), 42.9 ms after (1.32x a 32.5 ms no-op round).
The no-op round of one task per site is the issue's floor; the executor runs a
worker's sites in one task, so with two workers its round beats that floor, and
its own floor is the no-op dispatch beside it. Fits whose clients keep solver
state (FedDyn, DualFL, SCAFFOLD...) still make two dispatches a round: their
monitor keeps its own pass (``DaskExecutor.fuses_monitor``).
"""

import argparse
import statistics
import time
import warnings

import numpy as np

from _measure import Goal, add_options, pinned_threads, print_goals

#: issue 37's figure for today, and its goal
TODAY = "175 ms at 16 sites (159x in process)"
GOAL = 2.0


def _flag(text):
    value = str(text).strip().lower()
    if value not in ("1", "0", "true", "false", "yes", "no"):
        raise argparse.ArgumentTypeError(f"--processes is True or False, got {text!r}")
    return value in ("1", "true", "yes")


def _workers(text):
    if text == "sites":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers is a number or 'sites', got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"--workers must be at least 1, got {value}")
    return value


def make_sites(n_sites, n_rows, n_features, seed=0):
    """Rows of ``n_sites`` sites, each its own mean shift; a sparse linear target."""
    rng = np.random.default_rng(seed)
    shift = rng.normal(scale=0.5, size=(n_sites, n_features))
    site = np.repeat(np.arange(n_sites), n_rows)
    X = rng.normal(size=(n_sites * n_rows, n_features)) + shift[site]
    w = np.zeros(n_features)
    w[:5] = [2.0, -1.0, 1.0, 0.5, -0.5]
    y = X @ w + rng.normal(size=len(site))
    return X, y, np.array([f"site-{k:02d}" for k in site])


def _noop(k):
    return k


def _counting_executor():
    """``DaskExecutor`` counting its round trips of the rounds: the clients' steps
    (with or without the monitor they carry) and the monitoring passes."""
    from skfed.executors import DaskExecutor

    class Counting(DaskExecutor):
        round_trips = 0

        def _dispatch(self, func, head, jobs, label, *args, **kwargs):
            if label.startswith("round") or label == "client_monitor":
                self.round_trips += 1
            return super()._dispatch(func, head, jobs, label, *args, **kwargs)

    return Counting


def _ms_per_round(est):
    return 1e3 * float(np.median(np.diff(np.asarray(est.history_["wall_time"], float))))


def _trace(est):
    h = est.history_
    return np.r_[est.coef_.ravel(), np.ravel(est.intercept_), h["objective"],
                 h["stationarity"]]


class Bench:
    """One cluster's measurements at one number of sites."""

    def __init__(self, client, X, y, site, rounds, pinned):
        self.client, self.X, self.y, self.site, self.rounds = client, X, y, site, rounds
        names = sorted(set(site))
        workers = client.scheduler_info(n_workers=-1)["workers"]
        by_name = {str(w.get("name", a)): a for a, w in workers.items()}
        addresses = sorted(workers)
        # where the executor puts each site: its own worker (site k on worker k), or
        # (equal rows) the sorted workers in turn, as its least-loaded placement does
        self.where = ([by_name[str(k)] for k in range(len(names))] if pinned else
                      [addresses[k % len(addresses)] for k in range(len(names))])
        self.placement = {n: str(k) for k, n in enumerate(names)} if pinned else None

    def model(self, executor):
        from skfed import FedLasso

        return FedLasso(alpha=0.05, solver="fedavg", max_rounds=self.rounds, tol=0,
                        executor=executor)

    def dask_fit(self):
        executor = _counting_executor()(placement=self.placement)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = self.model(executor).fit(self.X, self.y, clients=self.site)
        return est, executor

    def in_process(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.model("sequential").fit(self.X, self.y, clients=self.site)

    def noop_round(self, where):
        """Median ms of ``rounds`` rounds of one trivial task per entry of ``where``."""
        times = []
        for _ in range(self.rounds):
            start = time.perf_counter()
            futures = [self.client.submit(_noop, k, workers=[w], allow_other_workers=False,
                                          pure=False) for k, w in enumerate(where)]
            self.client.gather(futures)
            times.append(time.perf_counter() - start)
        return 1e3 * float(np.median(times))

    def run(self, repeat):
        out = {k: [] for k in ("dask", "noop", "dispatch", "local")}
        identical, dispatches, scatters = True, [], []
        for _ in range(repeat):
            est, executor = self.dask_fit()
            out["dask"].append(_ms_per_round(est))
            out["noop"].append(self.noop_round(self.where))
            out["dispatch"].append(self.noop_round(sorted(set(self.where))))
            local = self.in_process()
            out["local"].append(_ms_per_round(local))
            identical &= bool(np.array_equal(_trace(est), _trace(local), equal_nan=True))
            dispatches.append(executor.round_trips)
            scatters.append(getattr(executor, "solver_scatters_", float("nan")))
        medians = {k: statistics.median(v) for k, v in out.items()}
        spread = {k: (min(v), max(v)) for k, v in out.items()}
        return medians, spread, identical, max(dispatches), max(scatters)


def cluster(n_workers, processes, threads):
    """A ``LocalCluster`` of ``n_workers`` one-thread workers (named 0, 1, ...)."""
    import distributed

    with pinned_threads(threads):  # the worker processes read it when they start
        return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                        processes=processes, dashboard_address=None)


def measure_sites(args, n_sites, shared):
    import distributed

    X, y, site = make_sites(n_sites, args.rows, args.features)
    pinned = args.workers == "sites"
    made = cluster(n_sites, args.processes, args.threads) if pinned else shared
    try:
        with distributed.Client(made) as client, pinned_threads(args.threads):
            return Bench(client, X, y, site, args.rounds, pinned).run(args.repeat)
    finally:
        if pinned:
            made.close()


def _where(args):
    return ("one worker per site" if args.workers == "sites" else
            f"{args.workers} worker{'s' if args.workers != 1 else ''}")


def print_header(args):
    kind = "processes" if args.processes else "threads in this process"
    print(f"\nFedLasso FedAvg, {args.rows} rows x {args.features} features per site, "
          f"{args.rounds} rounds; {_where(args)} ({kind}), one thread each; medians of "
          f"{args.repeat} interleaved passes (min-max)")
    print(f"issue 37: today {TODAY}; goal: a round at most {GOAL:g}x a no-op Dask round "
          "of the same fan-out (one trivial task per site, gathered)")
    print("| sites | Dask round (ms) | no-op round (ms) | ratio | no-op dispatch (ms) "
          "| round / dispatch | in process (ms) | x in process | dispatches per round "
          "| solver sent | bit for bit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)


def print_row(args, n_sites, result):
    """One number of sites' row, printed as soon as it is measured."""
    m, s, identical, dispatches, scatters = result
    cell = {k: f"{m[k]:.1f} ({s[k][0]:.1f}-{s[k][1]:.1f})" for k in m}
    print(f"| {n_sites} | {cell['dask']} | {cell['noop']} | {m['dask'] / m['noop']:.2f}x | "
          f"{cell['dispatch']} | {m['dask'] / m['dispatch']:.2f}x | {cell['local']} | "
          f"{m['dask'] / m['local']:.0f}x | {dispatches / args.rounds:.2f} | {scatters} | "
          f"{'yes' if identical else 'NO'} |", flush=True)


def print_goal_rows(args, rows):
    goals = [Goal(f"Dask round, {n} sites, {_where(args)}", TODAY if n == 16 else "-",
                  m["dask"], m["noop"], "no-op round", GOAL, unit="ms", holds=identical,
                  condition="the in-process fit bit for bit")
             for n, (m, _, identical, _, _) in rows]
    print_goals(goals, args.repeat, args.threads)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--processes", type=_flag, default=True)
    parser.add_argument("--workers", type=_workers, default=2)
    add_options(parser)
    args = parser.parse_args()
    if min(args.sites) < 1 or args.rows < 2 or args.features < 5 or args.rounds < 2:
        parser.error("--sites >= 1, --rows >= 2, --features >= 5 and --rounds >= 2")
    warnings.simplefilter("ignore", UserWarning)  # Dask's port chatter
    shared = (None if args.workers == "sites"
              else cluster(args.workers, args.processes, args.threads))
    print_header(args)
    rows = []
    try:
        for n_sites in args.sites:
            rows.append((n_sites, measure_sites(args, n_sites, shared)))
            print_row(args, *rows[-1])
    finally:
        if shared is not None:
            shared.close()
    print_goal_rows(args, rows)


if __name__ == "__main__":
    main()
