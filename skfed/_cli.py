"""Command line: ``python -m skfed demo`` (also installed as ``skfed``)."""

import argparse
import sys
import warnings

import numpy as np


def _r2(y, pred):
    return 1.0 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2)


def run_demo(alpha=0.1, n_sites=5, out=None):
    """Federated Lasso on the diabetes data split into heterogeneous "hospitals".

    Sites are contiguous quantiles of BMI (strong covariate shift). Prints the
    pooled, local-only and federated models side by side and the convergence.
    Returns the fitted federated estimator.
    """
    from sklearn.datasets import load_diabetes
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import Lasso

    from . import FedLasso
    from .datasets import simulate_clients

    data = load_diabetes()
    X, y, names = data.data, data.target, data.feature_names
    site = simulate_clients(X, y, n_sites, scheme="quantile", feature=names.index("bmi"))
    rng = np.random.default_rng(0)
    test = np.zeros(len(y), dtype=bool)
    for s in range(n_sites):  # hold out 20% of every site
        idx = np.flatnonzero(site == s)
        test[rng.choice(idx, size=len(idx) // 5, replace=False)] = True
    Xtr, ytr, str_, Xte, yte = X[~test], y[~test], site[~test], X[test], y[test]

    def objective(coef, b):
        return 0.5 * np.mean((ytr - Xtr @ coef - b) ** 2) + alpha * np.abs(coef).sum()

    out = sys.stdout if out is None else out
    p = lambda *a, **k: print(*a, **k, file=out)  # noqa: E731
    p(f"skfed demo: Lasso(alpha={alpha}) on the diabetes data held by {n_sites} sites")
    p(f"  sites = quantiles of BMI (strong covariate shift); sizes "
      f"{np.bincount(str_).tolist()} train, {test.sum()} held-out rows\n")

    pooled = Lasso(alpha=alpha, tol=1e-12, max_iter=100_000).fit(Xtr, ytr)
    f_star = objective(pooled.coef_, pooled.intercept_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fed = FedLasso(alpha=alpha, max_rounds=5000, tol=1e-9).fit(Xtr, ytr, clients=str_)
    fed.history_.set_reference(f_star)

    p(f"{'model':<26}{'held-out R2':>12}{'objective':>14}{'non-zeros':>11}")
    p(f"{'pooled (sklearn Lasso)':<26}{_r2(yte, pooled.predict(Xte)):>12.4f}"
      f"{f_star:>14.6f}{np.count_nonzero(pooled.coef_):>11d}")
    local_r2 = []
    for s in range(n_sites):
        m = Lasso(alpha=alpha, tol=1e-10, max_iter=100_000).fit(Xtr[str_ == s], ytr[str_ == s])
        local_r2.append(_r2(yte, m.predict(Xte)))
        p(f"{'local-only, site ' + str(s):<26}{local_r2[-1]:>12.4f}{'':>14}"
          f"{np.count_nonzero(m.coef_):>11d}")
    p(f"{'federated (FedLasso)':<26}{_r2(yte, fed.predict(Xte)):>12.4f}"
      f"{fed.objective_:>14.6f}{np.count_nonzero(fed.coef_):>11d}")
    gap = (fed.objective_ - f_star) / f_star
    same = np.array_equal(np.sign(fed.coef_), np.sign(pooled.coef_))
    p(f"\nfederated vs pooled: relative objective gap {gap:.2e}, "
      f"max |coef difference| {np.max(np.abs(fed.coef_ - pooled.coef_)):.2e}, "
      f"same support: {same}")
    h = fed.history_
    p(f"solver {fed.solver_.name}: {fed.n_iter_} rounds, "
      f"{int(h['bytes_up'].sum()):,} bytes up, {int(h['bytes_down'].sum()):,} bytes down "
      f"(+{int(h['monitor_bytes'].sum()):,} monitoring)\n")
    p(f"{'round':>7}{'suboptimality':>16}{'stationarity':>15}{'non-zeros':>11}")
    rounds = sorted(set(np.unique(np.geomspace(1, fed.n_iter_, 8).astype(int))) | {0})
    for r in rounds:
        p(f"{r:>7d}{h['suboptimality'][r]:>16.3e}{h['stationarity'][r]:>15.3e}{h['nnz'][r]:>11d}")
    p("\nselected features: " + ", ".join(n for n, c in zip(names, fed.coef_) if c != 0))
    return fed


def main(argv=None):
    parser = argparse.ArgumentParser(prog="skfed", description="Federated convex estimators.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="federated Lasso on a built-in heterogeneous dataset")
    demo.add_argument("--alpha", type=float, default=0.1, help="L1 strength (default 0.1)")
    demo.add_argument("--sites", type=int, default=5, help="number of sites (default 5)")
    sub.add_parser("support-matrix",
                   help="print the estimator x solver support matrix (Markdown), from the code")
    args = parser.parse_args(argv)
    if args.command == "demo":
        run_demo(alpha=args.alpha, n_sites=args.sites)
    elif args.command == "support-matrix":
        from ._support import format_support_matrix, support_matrix

        print(format_support_matrix(support_matrix()), end="")
    return 0
