"""Peer comparison: the same L2 logistic regression, pooled, with Flower, and with skfed.

One problem, one run: scikit-learn's breast-cancer data (75% training rows,
standardized with the training rows' scaler; 25% held out, stratified), the
training rows split over 5 sites by label skew (``simulate_clients``,
Dirichlet alpha=0.5: sites from 14% to 84% positive), and scikit-learn's
``LogisticRegression`` objective on the training rows
(``C * sum_i loss_i + ||w||^2 / 2``, ``C=1``, intercept not penalized), fitted

- pooled, with scikit-learn's ``LogisticRegression`` (lbfgs, default tol): the
  pooled model, whose held-out accuracy is the accuracy target and whose fit
  time every ratio is taken against (a second row: the loosest tol reaching a
  1e-6 gap). ``P*`` is the better of lbfgs and newton-cholesky at ``tol=1e-14``;
- with Flower's simulation engine (``flwr.simulation.run_simulation``, a
  ``ServerApp`` running the message-API ``FedAvg`` strategy over 5 virtual
  SuperNodes on Ray), each ``ClientApp`` a scikit-learn ``LogisticRegression``
  with ``warm_start=True`` and ``max_iter`` lbfgs iterations per round, the
  global ``coef_`` / ``intercept_`` set before and read after the local fit, as
  Flower's own scikit-learn example (``examples/sklearn-logreg-mnist``) does.
  Three settings: the example's (every client ``C=1``, ``max_iter=1``), more
  local work (``max_iter=5``), and the clients' ``C`` rescaled to
  ``C * n / n_k`` (so that FedAvg's weighted mean of the client objectives is
  the pooled objective; with ``C=1`` on every client the penalty weighs
  ``n / n_k`` times more against a site's loss than in the pooled objective);
- with skfed's ``FedLogisticRegression``: ``solver="auto"`` (FedNewton here),
  ``"dualfl"`` (skfed's exact gradients-only method), ``"fedavg"`` (one
  full-batch local step: gradient descent on the pooled objective) and
  ``FedAvg(local_steps=5)`` (the classical FedAvg, the algorithm of the
  Flower rows with skfed's step size).

For each method: the rounds and the wall time to the pooled model's held-out
accuracy and to a 1e-3 and a 1e-6 relative objective gap ``(P - P*) / P*``,
the gap at Flower's last round and at the method's last round, and the bytes
up to the 1e-6 gap (or over all rounds run). Flower's global model is
measured each round by a server-side ``evaluate_fn`` computing the objective
on the pooled training rows and the held-out accuracy: a measurement only (a
real server has no pooled data), whose time is subtracted. Flower's times run
from the strategy's start (Ray, the actors and two warm-up rounds are already
done; that start-up is printed separately); skfed's are whole ``fit`` calls of
exactly the rounds needed (setup included; best of 5), as in the other
benchmarks. Bytes: Flower's, the serialized arrays of the train messages both
ways (message envelopes not counted); skfed's, all of ``history_`` (setup,
rounds, monitor pass). Last, a check of *why* Flower's FedAvg stalls: one
round of each setting started at the pooled optimum (in-process, the same
client update).

Flower is never a dependency of skfed: install it in its own environment
(measured with flwr 1.41; ``run_simulation`` is deprecated there in favour of
the ``flwr run`` command line but works)::

    python3 -m venv /tmp/flwr-venv
    /tmp/flwr-venv/bin/pip install "flwr[simulation]" scikit-learn numpy scipy
    /tmp/flwr-venv/bin/pip install -e .
    nice -n 10 /tmp/flwr-venv/bin/python benchmarks/bench_flower.py

(options: ``--rounds`` for Flower, 150; ``--skfed-rounds`` for skfed's
first-order rows, 3000; ``--markdown FILE``).

About two minutes on two cores. Without flwr the script says so and exits 0.
"""

import argparse
import logging
import os
import sys
import time
import warnings
from pathlib import Path

# single-threaded BLAS everywhere (here and in Flower's Ray actors, which inherit
# the environment): the problem is tiny, and on a shared machine threads only add noise
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skfed import FedLogisticRegression  # noqa: E402
from skfed.datasets import simulate_clients  # noqa: E402
from skfed.solvers import FedAvg as SkfedFedAvg  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import _oracles as orc  # noqa: E402  (the independent objective)

C = 1.0
N_SITES = 5
TARGETS = (1e-3, 1e-6)
INSTALL = ('install flwr in a separate environment: python3 -m venv /tmp/flwr-venv && '
           '/tmp/flwr-venv/bin/pip install "flwr[simulation]" scikit-learn numpy scipy && '
           '/tmp/flwr-venv/bin/pip install -e . && '
           '/tmp/flwr-venv/bin/python benchmarks/bench_flower.py')
#: Flower rows: (label, lbfgs iterations per round, rescale C to C * n / n_k)
FLOWER_VARIANTS = [
    ("Flower FedAvg, sklearn clients C=1, max_iter=1 (the example)", 1, False),
    ("Flower FedAvg, sklearn clients C=1, max_iter=5", 5, False),
    ("Flower FedAvg, sklearn clients C=C*n/n_k, max_iter=1", 1, True),
]


def problem():
    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    scaler = StandardScaler().fit(Xtr)
    Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
    sites = simulate_clients(Xtr, ytr, N_SITES, scheme="dirichlet", alpha=0.5, random_state=1)
    return Xtr, ytr, Xte, yte, sites


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fn()


def _accuracy(X, y, coef, intercept):
    return float(np.mean(((X @ np.ravel(coef) + float(np.ravel(intercept)[0])) > 0) == y))


class Trace:
    """One method's per-round record: round 0 is the initial model."""

    def __init__(self, label):
        self.label = label
        self.seconds, self.objective, self.accuracy, self.nbytes = [], [], [], []
        self.hits = {}  # target -> round, where measured otherwise than round by round

    def add(self, seconds, objective, accuracy, nbytes):
        self.seconds.append(seconds)
        self.objective.append(objective)
        self.accuracy.append(accuracy)
        self.nbytes.append(nbytes)

    def first(self, ok):
        """First round (>= 1) where ``ok`` holds, or None."""
        hit = [r for r in range(1, len(self.objective)) if ok(r)]
        return hit[0] if hit else None


# --- pooled ------------------------------------------------------------------
def pooled(Xtr, ytr, Xte, yte, repeat=7):
    """P* and its model; the default pooled fit (time, gap, accuracy, iterations) and
    the one at the loosest tol reaching 1e-6 (times: best of ``repeat``)."""
    obj = lambda m: orc.logistic_objective(Xtr, ytr, m.coef_, m.intercept_, C, 0.0)  # noqa: E731
    tight = [_quiet(lambda: LogisticRegression(C=C, solver=s, tol=1e-14,
                                               max_iter=100_000).fit(Xtr, ytr))
             for s in ("lbfgs", "newton-cholesky")]
    best = min(tight, key=obj)
    star, w_star = obj(best), (best.coef_, best.intercept_)

    def timed(make):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            model = _quiet(lambda: make().fit(Xtr, ytr))
            times.append(time.perf_counter() - start)
        return min(times), model  # the least disturbed run on a shared machine

    t_default, default = timed(lambda: LogisticRegression(C=C))
    rows = [("scikit-learn LogisticRegression, pooled (lbfgs, default tol=1e-4)", t_default,
             (obj(default) - star) / star, default.score(Xte, yte), default.n_iter_[0])]
    for tol in (1e-5, 1e-6, 1e-7, 1e-8, 1e-10):
        t, model = timed(lambda: LogisticRegression(C=C, tol=tol))
        if (obj(model) - star) / star <= TARGETS[-1]:
            rows.append((f"scikit-learn LogisticRegression, pooled (lbfgs, tol={tol:g})", t,
                         (obj(model) - star) / star, model.score(Xte, yte), model.n_iter_[0]))
            break
    return star, w_star, rows


# --- skfed -------------------------------------------------------------------
def skfed_trace(label, make, data, star, rounds, acc_target):
    """Rounds to each target: the first round where a fit stopped there meets it
    (accuracy: scanned; objective: from one probe fit's history, then checked by
    fits stopped there, moving on a round while they miss it); then the time of a
    whole fit of exactly those rounds (setup included; best of 5)."""
    Xtr, ytr, Xte, yte, sites = data
    obj = lambda e: orc.logistic_objective(Xtr, ytr, e.coef_, e.intercept_, C, 0.0)  # noqa: E731

    def fit(r):
        return _quiet(lambda: make().set_params(max_rounds=r, tol=1e-13).fit(Xtr, ytr,
                                                                             clients=sites))

    probe = fit(rounds)
    h = probe.history_
    hist = np.asarray(h["objective"])
    scale = obj(probe) / hist[-1]  # skfed's objective is scikit-learn's / (C n)
    per_round = (np.asarray(h["bytes_up"]) + np.asarray(h["bytes_down"])
                 + np.asarray(h["monitor_bytes"]))
    nbytes = h.setup_bytes + np.cumsum(per_round)
    trace = Trace(label)
    trace.solver = type(probe.solver_).__name__
    for r in range(len(hist)):
        trace.add(np.nan, hist[r] * scale, np.nan, int(nbytes[r]))
    # accuracy: the model of a fit stopped at r (deterministic, full participation),
    # scanned until the target is reached (300 rounds at most)
    for r in range(1, min(len(hist), 301)):
        trace.accuracy[r] = fit(r).score(Xte, yte)
        if trace.accuracy[r] >= acc_target:
            trace.hits["accuracy"] = r
            break
    # objective: some solvers' last round returns a slightly different model than
    # the same round of a longer run (DualFL), so the probe's round is checked
    for t in TARGETS:
        r = trace.first(lambda r, t=t: (trace.objective[r] - star) / star <= t)
        for _ in range(25):
            if r is None or (obj(fit(r)) - star) / star <= t:
                break
            r = r + 1 if r < len(hist) - 1 else None
        else:
            r = None
        trace.hits[t] = r
    for r in sorted({r for r in trace.hits.values() if r is not None}):
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fit(r)
            times.append(time.perf_counter() - start)
        trace.seconds[r] = min(times)
    return trace


# --- Flower ------------------------------------------------------------------
def local_update(Xk, yk, coef, intercept, c_k, max_iter):
    """One Flower client's round, as Flower's scikit-learn example does it: a
    ``LogisticRegression`` warm-started from the global ``coef_`` / ``intercept_``,
    ``max_iter`` lbfgs iterations on the site's rows, the new ``coef_`` / ``intercept_``."""
    model = LogisticRegression(C=c_k, max_iter=max_iter, warm_start=True)
    model.classes_ = np.array([0, 1])
    model.coef_, model.intercept_ = np.array(coef, dtype=float), np.array(intercept, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning: max_iter is small on purpose
        model.fit(Xk, yk)
    return model.coef_, model.intercept_


def _client_C(rescale, n_total, n_k):
    return C * n_total / n_k if rescale else C


def fixed_point_check(data, star, w_star):
    """Relative gap after one FedAvg round (each Flower setting, same client update,
    in-process) started *at* the pooled optimum, and the clients' step lengths."""
    Xtr, ytr, _, _, sites = data
    out = []
    for label, local_iters, rescale in FLOWER_VARIANTS:
        coef, intercept = w_star
        new, steps = [], []
        for k in range(N_SITES):
            Xk, yk = Xtr[sites == k], ytr[sites == k]
            c, b = local_update(Xk, yk, coef, intercept, _client_C(rescale, len(ytr), len(yk)),
                                local_iters)
            new.append((len(yk), c, b))
            steps.append(np.linalg.norm(np.r_[(c - coef).ravel(), b - intercept]))
        c = sum(n * c for n, c, _ in new) / len(ytr)
        b = sum(n * b for n, _, b in new) / len(ytr)
        gap = (orc.logistic_objective(Xtr, ytr, c, b, C, 0.0) - star) / star
        out.append((label, gap, steps))
    return out


def flower_traces(data, star, rounds):
    """All Flower variants in one simulation (Ray starts once). Returns the traces,
    the simulation's start-up seconds and the clients' fit seconds per variant."""
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    Xtr, ytr, Xte, yte, sites = data
    site_data = {k: (Xtr[sites == k], ytr[sites == k]) for k in range(N_SITES)}
    n_total, d = len(ytr), Xtr.shape[1]

    client = ClientApp()

    @client.train()
    def train(msg, context):
        # the site's rows travel with the (pickled) app, as a simulation's data loader would
        Xk, yk = site_data[int(context.node_config["partition-id"])]
        config = msg.content["config"]
        coef, intercept = msg.content["arrays"].to_numpy_ndarrays()
        start = time.perf_counter()
        coef, intercept = local_update(Xk, yk, coef, intercept,
                                       _client_C(bool(config["rescale-C"]), n_total, len(yk)),
                                       int(config["local-iters"]))
        seconds = time.perf_counter() - start
        content = RecordDict({"arrays": ArrayRecord([coef, intercept]),
                              "metrics": MetricRecord({"num-examples": len(yk),
                                                       "fit-seconds": seconds})})
        return Message(content=content, reply_to=msg)

    def array_bytes(record):
        return sum(len(a.data) for a in record.values())

    class CountingFedAvg(FedAvg):
        """FedAvg that counts the serialized arrays of its train messages and sums
        the clients' local fit times."""

        def __init__(self):
            super().__init__(fraction_train=1.0, fraction_evaluate=0.0,
                             min_train_nodes=N_SITES, min_available_nodes=N_SITES)
            self.nbytes, self.fit_seconds = 0, 0.0

        def configure_train(self, server_round, arrays, config, grid):
            messages = list(super().configure_train(server_round, arrays, config, grid))
            self.nbytes += sum(array_bytes(m.content["arrays"]) for m in messages)
            return messages

        def aggregate_train(self, server_round, replies):
            replies = [m for m in replies if m.has_content()]
            self.nbytes += sum(array_bytes(m.content["arrays"]) for m in replies)
            self.fit_seconds += sum(m.content["metrics"]["fit-seconds"] for m in replies)
            return super().aggregate_train(server_round, replies)

    def zeros():
        return ArrayRecord([np.zeros((1, d)), np.zeros(1)])

    traces, fit_seconds, clock = [], [], {}
    server = ServerApp()

    @server.main()
    def main(grid, context):
        # warm-up, counted as start-up: the actors start and import scikit-learn
        # on their first messages
        CountingFedAvg().start(grid=grid, num_rounds=2, initial_arrays=zeros(),
                               train_config=ConfigRecord({"local-iters": 1, "rescale-C": 0}))
        clock["main"] = time.perf_counter()
        for label, local_iters, rescale in FLOWER_VARIANTS:
            trace, strategy, clock_ = Trace(label), CountingFedAvg(), {"eval": 0.0}

            def evaluate(server_round, arrays, trace=trace, strategy=strategy, clock_=clock_):
                # measurement only: the pooled objective on the pooled training rows;
                # the time spent here is subtracted from Flower's times
                entered = time.perf_counter()
                coef, intercept = arrays.to_numpy_ndarrays()
                objective = orc.logistic_objective(Xtr, ytr, coef, intercept, C, 0.0)
                accuracy = _accuracy(Xte, yte, coef, intercept)
                seconds = (entered - clock_["start"] - clock_["eval"]) if server_round else 0.0
                trace.add(seconds, objective, accuracy, strategy.nbytes)
                if server_round == 0:
                    clock_["start"] = time.perf_counter()
                else:
                    clock_["eval"] += time.perf_counter() - entered
                return MetricRecord({"objective": objective, "accuracy": accuracy})

            strategy.start(grid=grid, num_rounds=rounds, initial_arrays=zeros(),
                           train_config=ConfigRecord({"local-iters": local_iters,
                                                      "rescale-C": int(rescale)}),
                           evaluate_fn=evaluate)
            traces.append(trace)
            fit_seconds.append(strategy.fit_seconds)

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # run_simulation's deprecation notice
        run_simulation(server_app=server, client_app=client, num_supernodes=N_SITES,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                       "init_args": {"logging_level": "ERROR",
                                                     "log_to_driver": False}})
    if len(traces) != len(FLOWER_VARIANTS):
        raise RuntimeError("the Flower simulation ended early; run with FLWR_LOG_LEVEL=INFO "
                           "to see why")
    return traces, clock["main"] - start, fit_seconds


# --- report ------------------------------------------------------------------
def _ratio(x):
    return f"{x:,.0f}x" if x >= 100 else f"{x:.3g}x"


def _cell(trace, r, t_pool):
    if r is None:
        return f"not in {len(trace.objective) - 1} rounds"
    s = trace.seconds[r]
    return f"{r} / {s:.3f} s / {_ratio(s / t_pool)}"


def _bytes(n):
    return f"{n / 1e3:.1f} kB" if n < 1e6 else f"{n / 1e6:.2f} MB"


def report(traces, pooled_rows, star, acc_target, rounds):
    t_pool = pooled_rows[0][1]
    lines = [f"Cells: rounds / wall time / time over the pooled scikit-learn fit "
             f"({t_pool * 1e3:.2f} ms); for the pooled rows, lbfgs iterations. Targets: "
             f"held-out accuracy {acc_target:.4f} (the pooled default fit's); relative "
             f"objective gap (P - P*) / P* on the training rows, P* = {star:.6f}.", "",
             f"| method | to pooled accuracy | to 1e-3 gap | to 1e-6 gap | gap at round {rounds} "
             "| last gap (rounds run) | bytes to 1e-6 (or all rounds) |",
             "|---|---|---|---|---|---|---|"]
    for label, t, gap, acc, n_iter in pooled_rows:
        cell = f"{n_iter} it / {t * 1e3:.2f} ms / {_ratio(t / t_pool)}"
        cells = [cell if acc >= acc_target else f"no (accuracy {acc:.4f})"]
        cells += [cell if gap <= target else "no" for target in TARGETS]
        lines.append(f"| {label} | {' | '.join(cells)} | | {gap:.1e} | (pooled) |")
    for tr in traces:
        gaps = (np.asarray(tr.objective) - star) / star
        r_acc = tr.hits.get("accuracy", tr.first(lambda r: tr.accuracy[r] >= acc_target))
        r_obj = [tr.hits.get(t, tr.first(lambda r, t=t: gaps[r] <= t)) for t in TARGETS]
        last = len(gaps) - 1
        nbytes = tr.nbytes[r_obj[-1] if r_obj[-1] is not None else last]
        at = f"{gaps[rounds]:.1e}" if last >= rounds else f"(stopped at {last})"
        lines.append(f"| {tr.label} | {_cell(tr, r_acc, t_pool)} | {_cell(tr, r_obj[0], t_pool)} "
                     f"| {_cell(tr, r_obj[1], t_pool)} | {at} | {gaps[last]:.1e} ({last}) "
                     f"| {_bytes(nbytes)} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150,
                        help="Flower's rounds (about 0.1-0.2 s each in its simulation)")
    parser.add_argument("--skfed-rounds", type=int, default=3000,
                        help="round budget of skfed's first-order rows (Newton: 100)")
    parser.add_argument("--markdown", default=None, help="also write the table here")
    args = parser.parse_args(argv)
    try:
        import flwr
        import flwr.simulation  # noqa: F401  (needs flwr[simulation], i.e. Ray)
    except ImportError as exc:
        print(f"bench_flower: Flower is not importable ({exc}); {INSTALL}")
        return 0
    # not every round at INFO, nor the notices that run_simulation is deprecated (for
    # the `flwr run` command line) and that client-side evaluation is off
    logging.getLogger("flwr").setLevel(logging.ERROR)

    data = problem()
    Xtr, ytr, Xte, yte, sites = data
    star, w_star, pooled_rows = pooled(Xtr, ytr, Xte, yte)
    acc_target = pooled_rows[0][3]
    print(f"breast cancer: {len(ytr)} training rows over {N_SITES} sites by label skew "
          f"(Dirichlet 0.5; rows {np.bincount(sites).tolist()}, positives "
          f"{[int(ytr[sites == k].sum()) for k in range(N_SITES)]}), {len(yte)} held out; "
          f"LogisticRegression objective, C={C:g}, L2; flwr {flwr.__version__}", flush=True)

    traces = []
    skfed_rows = [
        ('skfed FedLogisticRegression, solver="auto"', lambda: FedLogisticRegression(C=C), 100),
        ('skfed FedLogisticRegression, solver="dualfl" (gradients only)',
         lambda: FedLogisticRegression(C=C, solver="dualfl"), args.skfed_rounds),
        ('skfed FedLogisticRegression, solver="fedavg" (1 local step)',
         lambda: FedLogisticRegression(C=C, solver="fedavg"), args.skfed_rounds),
        ("skfed FedLogisticRegression, solver=FedAvg(local_steps=5)",
         lambda: FedLogisticRegression(C=C, solver=SkfedFedAvg(local_steps=5)),
         args.skfed_rounds),
    ]
    for label, make, rounds in skfed_rows:
        tr = skfed_trace(label, make, data, star, rounds, acc_target)
        if tr.solver.lower() not in label.lower():
            tr.label = f"{label}, i.e. {tr.solver}"
        traces.append(tr)
    flower, startup, fit_seconds = flower_traces(data, star, args.rounds)
    lines = report(flower + traces, pooled_rows, star, acc_target, args.rounds)

    per_round = [tr.seconds[-1] / (len(tr.seconds) - 1) for tr in flower]
    lines += ["", f"Flower: simulation start-up (Ray, {N_SITES} SuperNodes, 2 actors of 1 CPU, "
                  f"warm-up rounds) {startup:.1f} s, not in the times above. A round took "
                  f"{', '.join(f'{1e3 * s:.0f}' for s in per_round)} ms (the three settings), of "
                  "which the five clients' local fits took "
                  f"{', '.join(f'{1e3 * f / args.rounds:.1f}' for f in fit_seconds)} ms together: "
                  "the rest is the simulation runtime passing messages (it polls for them "
                  "every 0.1 s). Its objective and accuracy are measured by a server-side "
                  "evaluate_fn on the pooled training rows and the held-out rows "
                  "(measurement only; its time is subtracted)."]
    check = fixed_point_check(data, star, w_star)
    lines += ["", "Is the pooled optimum a fixed point of Flower's FedAvg? One round started "
                  "at w* (same client update, in-process):"]
    for label, gap, steps in check:
        lines.append(f"- {label}: gap after the round {gap:.1e}; client steps |w_k - w*| "
                     f"{', '.join(f'{s:.2f}' for s in steps)} (|w*| = "
                     f"{np.linalg.norm(np.r_[w_star[0].ravel(), w_star[1]]):.2f})")
    print("\n".join(lines), flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
