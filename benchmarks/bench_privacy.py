"""What privacy costs: per-round time and bytes, and utility against epsilon.

Part 1, cost (``--part cost``): the same fit plain, under
``SecureAggregation()`` and under ``DifferentialPrivacy(epsilon=4)``, with 4,
16 and 64 sites, side by side in one run: milliseconds per round (the
simulation runs every site in this process, so a site's own share is the
time divided by the number of sites), algorithm bytes per round, monitoring
bytes per round and one-time setup bytes. Two solvers: FedAvg (``p + 1``
floats a message) and FedNewton (``p (p + 1) / 2 + p + 1``; secure
aggregation only: Newton cannot carry the DP guarantee here).

Part 2, utility (``--part utility``): ``FedLogisticRegression`` (breast
cancer) and ``FedLasso`` (diabetes), standardized with training statistics,
75/25 split, 16 sites of equal size, ``client_weighting="uniform"``, DP-FedAvg
with hyper-parameters fixed in advance (not tuned on the results, which would
itself spend privacy): 20 rounds, one full-batch local step, ``client_lr=1``
(logistic) / ``0.5`` (Lasso, ``alpha=0.05`` on a standardized target),
``clip_norm=0.5``, ``delta=1e-5``,
distributed noise. For epsilon in 0.5, 1, 2, 4, 8 and infinity (clipping and
secure aggregation, no noise), over 10 noise seeds: held-out accuracy / R2 and
the relative objective gap against the non-private pooled optimum
(scikit-learn, tight; the training rows are cut to a multiple of 16 so that
the uniform-weight objective is the pooled one), beside that optimum's own
held-out score.

Run: python benchmarks/bench_privacy.py [--part cost utility] [--seeds 10] [--markdown FILE]
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, make_classification
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from skfed import FedLasso, FedLogisticRegression
from skfed.privacy import DifferentialPrivacy, SecureAggregation
from skfed.solvers import FedAvg

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, np.inf)
DELTA = 1e-5
ROUNDS = 20


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def cost_rows(sites=(4, 16, 64), rounds=10):
    lines = ["| solver | sites | mode | ms / round (all sites) | ms / round per site "
             "| algorithm bytes / round | monitoring bytes / round | setup bytes |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for solver_name in ("fedavg", "newton"):
        for n in sites:
            X, y = make_classification(n_samples=100 * n, n_features=20, random_state=0)
            clients = np.arange(len(y)) % n
            modes = [("plain", None), ("secure aggregation", SecureAggregation())]
            if solver_name == "fedavg":
                modes.append(("DP (eps 4) + secure aggregation",
                              DifferentialPrivacy(4.0, delta=DELTA, random_state=0)))
            for mode, privacy in modes:
                solver = FedAvg(client_lr=0.5) if solver_name == "fedavg" else "newton"
                est = FedLogisticRegression(solver=solver, client_weighting="uniform",
                                            max_rounds=rounds, tol=0, privacy=privacy)
                start = time.perf_counter()
                _quiet(lambda: est.fit(X, y, clients=clients))
                seconds = time.perf_counter() - start
                h, r = est.history_, est.n_iter_
                algo = (np.nansum(h["bytes_up"]) + np.nansum(h["bytes_down"])) / r
                line = (f"| {solver_name} | {n} | {mode} | {1e3 * seconds / r:.1f} | "
                        f"{1e3 * seconds / r / n:.2f} | {algo:,.0f} | "
                        f"{np.nansum(h['monitor_bytes']) / r:,.0f} | {h.setup_bytes:,} |")
                lines.append(line)
                print(line, flush=True)
    return lines


def _problems():
    Xb, yb = load_breast_cancer(return_X_y=True)
    Xd, yd = load_diabetes(return_X_y=True)
    return [
        ("FedLogisticRegression, breast cancer (accuracy)", Xb, yb, "logistic"),
        ("FedLasso, diabetes (R2)", Xd, yd, "lasso"),
    ]


def _estimator(kind, **kwargs):
    if kind == "logistic":
        return FedLogisticRegression(C=1.0, client_weighting="uniform", **kwargs)
    return FedLasso(alpha=0.05, client_weighting="uniform", **kwargs)


def _objective(kind, X, y, coef, intercept):
    """scikit-learn's objective of the model, per sample (``LogisticRegression(C=1)`` divided
    by ``n``; ``Lasso(alpha=0.05)``): with sites of equal size it is the uniform-weight
    federated objective."""
    z = X @ np.ravel(coef) + float(np.ravel(intercept)[0])
    if kind == "logistic":
        s = 2 * y - 1
        return np.mean(np.logaddexp(0, -s * z)) + 0.5 * np.sum(coef * coef) / len(y)
    return 0.5 * np.mean((y - z) ** 2) + 0.05 * np.abs(coef).sum()


def utility_rows(seeds=10, n_sites=16):
    lines = ["| problem | model | " + " | ".join(f"eps {e:g}" for e in EPSILONS) + " |",
             "|---|---|" + "---|" * len(EPSILONS)]
    print("\n".join(lines), flush=True)
    for title, X, y, kind in _problems():
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0)
        keep = len(y_tr) - len(y_tr) % n_sites  # sites of equal size
        X_tr, y_tr = X_tr[:keep], y_tr[:keep]
        scaler = StandardScaler().fit(X_tr)
        X_tr, X_te = scaler.transform(X_tr), scaler.transform(X_te)
        if kind == "lasso":  # the target standardized too (training statistics)
            y_mean, y_sd = y_tr.mean(), y_tr.std()
            y_tr, y_te = (y_tr - y_mean) / y_sd, (y_te - y_mean) / y_sd
        clients = np.arange(len(y_tr)) % n_sites
        pooled = (LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000) if kind == "logistic"
                  else Lasso(alpha=0.05, tol=1e-14, max_iter=1_000_000)).fit(X_tr, y_tr)
        best = _objective(kind, X_tr, y_tr, pooled.coef_, pooled.intercept_)
        lr, clip = (1.0, 0.5) if kind == "logistic" else (0.5, 0.5)
        scores, gaps = [], []
        for eps in EPSILONS:
            s_eps, g_eps = [], []
            for seed in range(seeds if np.isfinite(eps) else 1):
                est = _quiet(lambda: _estimator(
                    kind, solver=FedAvg(client_lr=lr), max_rounds=ROUNDS, tol=0,
                    privacy=DifferentialPrivacy(eps, delta=DELTA, clip_norm=clip,
                                                random_state=seed)).fit(
                    X_tr, y_tr, clients=clients))
                s_eps.append(est.score(X_te, y_te))
                g_eps.append((_objective(kind, X_tr, y_tr, est.coef_, est.intercept_) - best)
                             / abs(best))
            scores.append((np.mean(s_eps), np.std(s_eps)))
            gaps.append((np.median(g_eps), np.max(g_eps)))
        rows = [
            f"| {title} | DP-FedAvg, held-out score (mean ± sd) | "
            + " | ".join(f"{m:.3f} ± {s:.3f}" for m, s in scores) + " |",
            f"| {title} | DP-FedAvg, objective gap (median / max) | "
            + " | ".join(f"{m:.2g} / {x:.2g}" for m, x in gaps) + " |",
            f"| {title} | non-private pooled optimum: {pooled.score(X_te, y_te):.3f} |"
            + " |" * len(EPSILONS),
        ]
        for row in rows:
            lines.append(row)
            print(row, flush=True)
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", nargs="+", default=["cost", "utility"],
                        choices=["cost", "utility"])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--markdown", default=None, help="also write the tables here")
    args = parser.parse_args(argv)
    lines = []
    if "cost" in args.part:
        lines += cost_rows() + [""]
    if "utility" in args.part:
        lines += utility_rows(seeds=args.seeds)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
