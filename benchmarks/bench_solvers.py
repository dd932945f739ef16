"""Every solver on the same heterogeneous problems: rounds, time and bytes to a 1e-6 gap.

Two problems over 16 heterogeneous clients (the FCO paper's generator: each
client's features share their own random mean): a Lasso and a ridge
least squares. For each solver the table gives the rounds to a 1e-6 relative
objective gap, the wall time of those rounds (the one-time setup excluded),
the bytes the algorithm sent up to then (both directions, setup excluded) and
the final gap after ``max_rounds``. Prints Markdown.

Run: python benchmarks/bench_solvers.py [--max-rounds 3000] [--markdown FILE]
(the tables of docs/index.md, *Measured comparison*)
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ElasticNet

from skfed import FedElasticNet
from skfed.datasets import make_federated_lasso
from skfed.solvers import SOLVERS, FedMLS

TARGET = 1e-6


def problem():
    X, y, clients, _ = make_federated_lasso("I", n_features=100, n_clients=16,
                                            n_samples_per_client=100, n_informative=10,
                                            random_state=0)
    return X, y, clients


def objective(X, y, coef, b, alpha, l1_ratio):
    r = y - X @ coef - b
    return (0.5 * np.mean(r**2) + alpha * l1_ratio * np.abs(coef).sum()
            + 0.5 * alpha * (1 - l1_ratio) * coef @ coef)


def solvers_for(l1_ratio):
    for name, cls in sorted(SOLVERS.items()):
        if l1_ratio > 0 and cls.penalty_support == "smooth":
            continue
        yield name, (FedMLS(t0=0.3) if name == "fedmls" else name)


def run(title, X, y, clients, alpha, l1_ratio, max_rounds):
    ref = ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-14, max_iter=500_000).fit(X, y)
    f_star = objective(X, y, ref.coef_, ref.intercept_, alpha, l1_ratio)
    rows = []
    for name, solver in solvers_for(l1_ratio):
        est = FedElasticNet(alpha=alpha, l1_ratio=l1_ratio, solver=solver,
                            max_rounds=max_rounds if name != "fedmls" else min(max_rounds, 600),
                            tol=1e-11, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            t = time.perf_counter()
            est.fit(X, y, clients=clients)
            fit_time = time.perf_counter() - t
        h = est.history_.set_reference(f_star)
        hit = np.flatnonzero(h["suboptimality"] <= TARGET)
        final = objective(X, y, est.coef_, est.intercept_, alpha, l1_ratio)
        if hit.size:
            r = int(hit[0])
            traffic = int(h["bytes_up"][: r + 1].sum() + h["bytes_down"][: r + 1].sum())
            rows.append((name, str(r), f"{h['wall_time'][r]:.2f}", f"{traffic / 1e6:.2f}",
                         f"{(final - f_star) / f_star:.1e}", f"{fit_time:.1f}"))
        else:
            rows.append((name, f"> {est.n_iter_}", "-", "-",
                         f"{(final - f_star) / f_star:.1e}", f"{fit_time:.1f}"))
    head = ("solver", f"rounds to {TARGET:g}", "time (s)", "MB sent", "final gap", "fit (s)")
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-rounds", type=int, default=3000)
    parser.add_argument("--markdown", help="also write the tables to this file")
    args = parser.parse_args()
    X, y, clients = problem()
    tables = [
        run(f"Lasso (alpha=0.5), n={len(y)}, d={X.shape[1]}, 16 clients", X, y, clients, 0.5,
            1.0, args.max_rounds),
        run(f"Ridge least squares (alpha=0.05), n={len(y)}, d={X.shape[1]}, 16 clients", X, y,
            clients, 0.05, 0.0, args.max_rounds),
    ]
    text = "\n\n".join(tables)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
