"""Re-run a paper's headline experiment with skfed: figures and a CSV.

    python benchmarks/reproduce.py dualfl-digits      # DualFL paper: robustness to N and rho
    python benchmarks/reproduce.py fedmls-svm         # FedMLS paper, linear SVM on breast cancer
    python benchmarks/reproduce.py local-gecl         # Local G-ECL paper: heterogeneity, ring
    python benchmarks/reproduce.py afedpd-participation   # A-FedPD paper: partial participation
    python benchmarks/reproduce.py fco-lasso          # FCO paper: LASSO sets I-IV, F1 and density
    python benchmarks/reproduce.py fco-low-rank       # FCO paper: nuclear-norm sets I-IV, rank
    python benchmarks/reproduce.py fco-sparse-logistic    # FCO paper: l1 logistic, fMRI-like silos
    python benchmarks/reproduce.py NAME --tiny        # seconds: what the default tests run
    python benchmarks/reproduce.py NAME --replot      # redraw NAME.png from the saved CSV

Each run writes ``benchmarks/results/NAME/NAME.csv`` (one row per setting,
solver, round and metric: ``sweep, value, solver, round, metric, number``)
and ``NAME.png``, and prints the numbers that ``docs/reproductions.md`` puts
beside the paper's claims. Data come from scikit-learn's bundled datasets
and skfed's generators only (``skfed.datasets``). The FCO experiments live
in ``repro_fco.py``, the shared pieces in ``_repro.py``.
"""

import argparse
import csv
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from _repro import curve, fit_or_none, fit_quietly as _fit, lasso_objective, relative, tune
from repro_fco import fco_lasso, fco_low_rank, fco_sparse_logistic
from skfed import FedLasso, FedLinearSVC, FedLogisticRegression
from skfed.datasets import simulate_clients
from skfed.solvers import DualFL, FedMLS

RESULTS = Path(__file__).resolve().parent / "results"


def _even_split(n, n_clients, seed=0):
    """Rows dealt evenly (after a shuffle) over ``n_clients`` clients, as the paper does."""
    rng = np.random.default_rng(seed)
    clients = np.empty(n, dtype=int)
    clients[rng.permutation(n)] = np.arange(n) % n_clients
    return clients


def _ridge_multinomial_energy(X, y, coef, intercept, mu):
    """Mean cross-entropy + (mu/2) ||W||^2, written independently of skfed."""
    Z = X @ coef.T + intercept
    Z = Z - Z.max(axis=1, keepdims=True)
    logp = Z - np.log(np.exp(Z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(y)), y].mean() + 0.5 * mu * np.sum(coef * coef)


# --- DualFL: ridge multinomial logistic regression on digits ---------------------------
def dualfl_digits(tiny=False):
    """(E(theta) - E*) / E* against rounds: solvers x N, and DualFL's rho sweep.

    E(theta) = mean cross-entropy + (mu/2) ||W||^2, mu = 1e-2, no intercept
    (the paper's ridge covers every parameter). E* is scikit-learn's lbfgs
    solution at tol=1e-12, evaluated with the formula written here.
    """
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    if tiny:
        X, y = X[:300], y[:300]
    mu, n = 1e-2, len(y)
    C = 1.0 / (mu * n)  # LogisticRegression's C for the objective above

    ref = LogisticRegression(C=C, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y)
    e_star = _ridge_multinomial_energy(X, y, ref.coef_, 0.0, mu)
    rounds = 8 if tiny else 100
    sizes = [4] if tiny else [8, 32]
    solvers = ["dualfl", "fedpd", "feddyn", "fedadmm", "feddualavg", "scaffold"]
    # the paper's DualFL: no proximal term on this strongly convex problem
    # (skfed's default adds one, adapted to the curvature; docs/algorithms/dualfl.md)
    paper = {"dualfl": DualFL(proximal=0.0)}
    rows = []
    for N in sizes:
        clients = _even_split(n, N)
        for name in solvers:
            est = FedLogisticRegression(C=C, fit_intercept=False, solver=paper.get(name, name),
                                        max_rounds=rounds, tol=0, random_state=0)
            start = time.perf_counter()
            _fit(est, X, y, clients)
            rel = relative(est.history_["objective"], e_star)
            rows += curve("N", N, name, "relative_error", rel)
            print(f"N={N:3d} {name:<11} rounds {rounds}: rel. error {rel[-1]:.2e} "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
    clients = _even_split(n, sizes[0])
    for rho in ([0.0, 3e-3] if tiny else [0.0, 1e-3, 3e-3, 1e-2, 3e-2]):
        est = FedLogisticRegression(C=C, fit_intercept=False, solver=DualFL(rho=rho, proximal=0.0),
                                    max_rounds=rounds, tol=0, random_state=0)
        _fit(est, X, y, clients)
        rel = relative(est.history_["objective"], e_star)
        rows += curve("rho", rho, "dualfl", "relative_error", rel)
        print(f"rho={rho:<6g} dualfl: rel. error {rel[-1]:.2e}", flush=True)
    return rows + _dualfl_without_strong_convexity(rounds=10 if tiny else 100)


def _dualfl_without_strong_convexity(rounds):
    """Beyond the paper: DualFL on a Lasso (no strong convexity), 8 BMI-quantile sites.

    The paper's analysis needs every f_j strongly convex; skfed's DualFL
    re-centres its proximal term so that it still reaches the optimum. The
    reference is scikit-learn's Lasso at tol=1e-14.
    """
    X, y = load_diabetes(return_X_y=True)
    clients = simulate_clients(X, y, 8, scheme="quantile", feature=2)
    alpha = 0.1
    pooled = Lasso(alpha=alpha, tol=1e-14, max_iter=1_000_000).fit(X, y)
    p_star = lasso_objective(X, y, pooled.coef_, pooled.intercept_, alpha)
    rows = []
    for name in ["dualfl", "fedpd", "fedadmm", "feddualavg"]:
        est = _fit(FedLasso(alpha=alpha, solver=name, max_rounds=rounds, tol=0), X, y, clients)
        rel = relative(est.history_["objective"], p_star)
        rows += curve("lasso (mu=0)", "diabetes", name, "relative_error", rel)
        print(f"lasso, no strong convexity: {name:<11} rel. error {rel[-1]:.2e}", flush=True)
    return rows


# --- FedMLS: linear SVM (hinge) on breast cancer, 10 k-means clients ------------------
def fedmls_svm(tiny=False):
    """(P(x) - P*) / P* against rounds for the solvers that accept the hinge loss.

    P is FedLinearSVC's objective (hinge, l2, intercept not penalized); P* is
    libsvm's ``SVC(kernel="linear")`` optimum of the same problem. FedMLS runs
    the paper's schedules (T_k = k local steps, lambda_k = lambda0 / k),
    deterministic and with 10 % minibatches averaged over seeds.
    """
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clients = simulate_clients(X, y, 10, scheme="kmeans", random_state=0)
    C = 1.0
    ref = SVC(kernel="linear", C=C, tol=1e-10).fit(X, y)  # 0.5||w||^2 + C sum hinge
    w, b = ref.coef_.ravel(), float(ref.intercept_[0])
    s = 2 * y - 1

    def primal(coef, intercept):  # FedLinearSVC's objective divided by C * n
        return np.mean(np.maximum(0, 1 - s * (X @ coef + intercept))) + 0.5 / (C * len(y)) * \
            coef @ coef

    p_star = primal(w, b)
    rounds = 10 if tiny else 400
    seeds = [0] if tiny else [0, 1, 2, 3, 4]
    rows = []
    runs = [("fedmls", lambda seed: FedMLS()),
            ("fedmls-stochastic", lambda seed: FedMLS(batch_fraction=0.1)),
            ("fedavg", lambda seed: "fedavg"),
            ("dualfl", lambda seed: "dualfl")]
    for label, make in runs:
        curves = []
        for seed in (seeds if "stochastic" in label else [0]):
            est = FedLinearSVC(loss="hinge", C=C, solver=make(seed), max_rounds=rounds, tol=0,
                               random_state=seed)
            _fit(est, X, y, clients)
            curves.append(relative(est.history_["objective"], p_star))
        mean = np.mean(curves, axis=0)
        rows += curve("solver", label, label, "relative_error", mean)
        print(f"{label:<18} rounds {rounds}: rel. suboptimality {mean[-1]:.2e} "
              f"(best {mean.min():.2e})", flush=True)
    return rows


# --- shared: digits multinomial logistic regression with a small ridge -----------------
def _digits_problem(tiny, mu=1e-3, seed=0):
    """Train/test digits, ``C`` for ``mean CE + (mu/2)||W||^2`` and the pooled optimum E*."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    X, y = X[order], y[order]
    if tiny:
        X, y = X[:400], y[:400]
    n_train = int(0.8 * len(y))
    Xtr, ytr, Xte, yte = X[:n_train], y[:n_train], X[n_train:], y[n_train:]
    C = 1.0 / (mu * n_train)
    ref = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(Xtr, ytr)
    e_star = _ridge_multinomial_energy(Xtr, ytr, ref.coef_, ref.intercept_, mu)
    return Xtr, ytr, Xte, yte, C, e_star


def _split(X, y, n_clients, h, seed=0):
    """Dirichlet(h) label skew over ``n_clients``; ``h = inf`` is an IID split."""
    if np.isinf(h):
        return simulate_clients(X, y, n_clients, scheme="iid", random_state=seed)
    return simulate_clients(X, y, n_clients, scheme="dirichlet", alpha=h, random_state=seed)


def _tuned_fit(label, make, values, fit, e_star):
    """Best ``make(value)`` of ``values`` and "auto" by final suboptimality: ``(est, value)``."""
    candidates = {f"{v:g}" if v != "auto" else "auto": v for v in ["auto", *values]}
    est, description = tune(label, candidates, lambda v: fit(make(v)),
                            lambda est: est.history_["objective"][-1] - e_star)
    return est, candidates[description]


# --- Local G-ECL: robustness to heterogeneity, ring and centralized -------------------
def local_gecl(tiny=False):
    """Relative suboptimality against rounds for h in {0.1, 0.5, 1, inf} on 10 nodes.

    Ring: decentralized Local G-ECL vs gossip SGD (DSGD); centralized: Local
    G-ECL vs SCAFFOLD vs FedAvg; K = 8 local steps, and K in {1, 8, 64} at
    h = 0.1. Every method's step size is tuned per setting on the paper's
    grid {0.2 / 4^i} (plus skfed's theory-safe "auto"), keeping the lowest
    final objective, as the paper does. Also prints the held-out accuracy.
    """
    from skfed.solvers import DSGD, FedAvg, LocalGECL, Scaffold

    Xtr, ytr, Xte, yte, C, e_star = _digits_problem(tiny)
    rounds = 6 if tiny else 300
    hs = [0.1, np.inf] if tiny else [0.1, 0.5, 1.0, np.inf]
    ks = [1, 8] if tiny else [1, 8, 64]
    lrs = [0.2, 0.05] if tiny else [0.2 / 4 ** i for i in range(4)]

    def methods(K):
        return {"local-gecl (ring)": lambda lr: LocalGECL(topology="ring", local_steps=K, lr=lr),
                "dsgd (ring)": lambda lr: DSGD(topology="ring", local_steps=K, lr=lr),
                "local-gecl (centralized)": lambda lr: LocalGECL(local_steps=K, lr=lr),
                "scaffold": lambda lr: Scaffold(local_steps=K, lr=lr),
                "fedavg": lambda lr: FedAvg(local_steps=K, client_lr=lr)}

    tuned = {}  # (h, K, method) -> (est, lr): h = 0.1, K = 8 is in both sweeps

    def runs(sweep, value, h, K):
        clients = _split(Xtr, ytr, 10, h)

        def fit(solver):
            return fit_or_none(FedLogisticRegression(C=C, solver=solver, max_rounds=rounds,
                                                     tol=0, random_state=0), Xtr, ytr, clients)
        rows = []
        for label, make in methods(K).items():
            if (h, K, label) not in tuned:
                tuned[h, K, label] = _tuned_fit(f"{label}, h={h}, K={K}", make, lrs, fit,
                                                e_star)
            est, lr = tuned[h, K, label]
            rel = relative(est.history_["objective"], e_star)
            rows += curve(sweep, value, label, "relative_error", rel)
            rows += curve(sweep, value, label, "test_accuracy", [est.score(Xte, yte)],
                          rounds=[rounds])
            lr_text = lr if lr == "auto" else f"{lr:g}"  # "auto" may win the tuning
            print(f"{sweep}={value:<4} {label:<26} lr={lr_text:<8} rel. subopt. {rel[-1]:.2e}  "
                  f"test accuracy {est.score(Xte, yte):.4f}", flush=True)
        return rows

    rows = []
    for h in hs:
        rows += runs("h", h, h, K=8)
    for K in ks:
        rows += runs("K", K, hs[0], K=K)
    return rows


# --- A-FedPD: partial participation on 100 clients ---------------------------------------
def afedpd_participation(tiny=False):
    """Relative suboptimality against rounds under client sampling, 100 clients.

    Dirichlet(0.3) label skew. Each method's parameter is tuned at
    participation 0.1 on the A-FedPD paper's grid (rho in {1e-3, 1e-2, 0.1,
    1} for the primal-dual methods, the lr grid {0.2 / 4^i} for SCAFFOLD and
    FedAvg with K = 10; skfed's "auto" too), lowest final objective, then kept
    for participation in {0.05, 0.1, 0.2, 0.5}; and the number of local steps
    (exact local solves, or K = 1, 10, 50 gradient steps) for A-FedPD and
    FedDyn at participation 0.1 with their tuned rho.
    """
    from skfed.solvers import AFedPD, FedADMM, FedAvg, FedDyn, Scaffold

    Xtr, ytr, Xte, yte, C, e_star = _digits_problem(tiny)
    n_clients = 20 if tiny else 100
    clients = _split(Xtr, ytr, n_clients, 0.3)
    rounds = 6 if tiny else 400
    rates = [0.2] if tiny else [0.05, 0.1, 0.2, 0.5]
    tune_rate = rates[min(1, len(rates) - 1)]
    rhos = [1e-2, 0.1] if tiny else [1e-3, 1e-2, 0.1, 1.0]
    lrs = [0.2, 0.05] if tiny else [0.2 / 4 ** i for i in range(4)]
    methods = {"afedpd": (lambda v: AFedPD(rho=v), rhos),
               "feddyn": (lambda v: FedDyn(rho=v), rhos),
               "fedadmm": (lambda v: FedADMM(rho=v), rhos),
               "scaffold": (lambda v: Scaffold(local_steps=10, lr=v), lrs),
               "fedavg": (lambda v: FedAvg(local_steps=10, client_lr=v), lrs)}

    def fitter(p):
        def fit(solver):
            return fit_or_none(FedLogisticRegression(C=C, solver=solver, participation=p,
                                                     max_rounds=rounds, tol=0, random_state=0),
                               Xtr, ytr, clients)
        return fit

    rows, tuned, best = [], {}, {}
    for label, (make, grid) in methods.items():
        best[label], tuned[label] = _tuned_fit(label, make, grid, fitter(tune_rate), e_star)
    for p in rates:
        for label, (make, _) in methods.items():
            # the tuning already ran each method's best setting at tune_rate
            est = best[label] if p == tune_rate else fitter(p)(make(tuned[label]))
            rel = relative(est.history_["objective"], e_star)
            rows += curve("participation", p, label, "relative_error", rel)
            rows += curve("participation", p, label, "test_accuracy", [est.score(Xte, yte)],
                          rounds=[rounds])
            print(f"participation={p:<5} {label:<9} ({tuned[label]}) rel. subopt. "
                  f"{rel[-1]:.2e}  test accuracy {est.score(Xte, yte):.4f}", flush=True)
    for steps in ([None, 10] if tiny else [None, 1, 10, 50]):
        for label, cls in {"afedpd": AFedPD, "feddyn": FedDyn}.items():
            # exact local solves at tune_rate: the tuned run itself
            est = best[label] if steps is None else fitter(tune_rate)(
                cls(rho=tuned[label], local_steps=steps))
            rel = relative(est.history_["objective"], e_star)
            tag = "exact" if steps is None else steps
            rows += curve("local_steps", tag, label, "relative_error", rel)
            print(f"local steps {str(tag):<5} {label:<7} rel. subopt. {rel[-1]:.2e}", flush=True)
    return rows


REPRODUCTIONS = {"dualfl-digits": dualfl_digits, "fedmls-svm": fedmls_svm,
                 "local-gecl": local_gecl, "afedpd-participation": afedpd_participation,
                 "fco-lasso": fco_lasso, "fco-low-rank": fco_low_rank,
                 "fco-sparse-logistic": fco_sparse_logistic}

# how each metric is drawn: log scale for errors, linear for scores and counts
LOG_METRICS = {"relative_error", "recovery_error", "validation_loss"}
FINAL_METRICS = {"test_accuracy"}
# sweeps drawn with one panel per setting (the papers' layout), and the metrics shown
PER_SETTING = {"fco-lasso": ({"config"}, ("f1", "density", "recovery_error", "relative_error")),
               "fco-low-rank": ({"config"}, ("rank", "recovery_error", "relative_error")),
               "local-gecl": ({"h", "K"}, ("relative_error",)),
               "afedpd-participation": ({"participation"}, ("relative_error",))}


def _panels(name, curves):
    """Rows of panels ``(sweep, value or None, metric)``; None: every value in one panel."""
    split, metrics = PER_SETTING.get(name, (set(), ()))
    rows, shared = [], []
    for sweep in dict.fromkeys(k[0] for k in curves):
        values = list(dict.fromkeys(k[1] for k in curves if k[0] == sweep))
        found = list(dict.fromkeys(k[2] for k in curves if k[0] == sweep))
        finals = [(sweep, None, m) for m in found if m in FINAL_METRICS]
        if sweep in split and len(metrics) > 1:  # a row per setting, a column per metric
            rows += [[(sweep, v, m) for m in metrics] for v in values]
        elif sweep in split:  # a row of settings, then the final metrics against them
            rows.append([(sweep, v, metrics[0]) for v in values] + finals)
        else:
            shared += [(sweep, None, m) for m in found]
    return rows + ([shared] if shared else [])


def _plot_final(ax, sweep, metric, curves):
    """A metric measured once per run (held-out accuracy), against the sweep's values."""
    values = list(dict.fromkeys(k[1] for k in curves if k[0] == sweep and k[2] == metric))
    for solver in dict.fromkeys(k[3] for k in curves if k[0] == sweep and k[2] == metric):
        ax.plot(range(len(values)), [curves[(sweep, v, metric, solver)][-1][1] for v in values],
                marker="o", label=solver)
    ax.set_xticks(range(len(values)), [str(v) for v in values])
    ax.set(xlabel=sweep, ylabel=metric, title=f"final {metric} by {sweep}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)


def _plot(name, rows, path):
    """The figure of one reproduction: the panels of :func:`_panels`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {}
    for sweep, value, solver, rnd, metric, number in rows:
        curves.setdefault((sweep, value, metric, solver), []).append((rnd, number))
    panels = _panels(name, curves)
    width = max(len(row) for row in panels)
    fig, axes = plt.subplots(len(panels), width, squeeze=False,
                             figsize=(4.6 * width, 3.4 * len(panels)))
    for ax_row, panel_row in zip(axes, panels):
        for ax in ax_row[len(panel_row):]:
            ax.set_visible(False)
        for ax, (sweep, value, metric) in zip(ax_row, panel_row):
            if metric in FINAL_METRICS:  # one number per run: against the setting
                _plot_final(ax, sweep, metric, curves)
                continue
            for (s, v, m, solver), pts in curves.items():
                if s != sweep or m != metric or (value is not None and v != value):
                    continue
                rr, vv = zip(*pts)
                style = dict(ls=":", color="k") if len(pts) == 2 else {}
                single = value is not None or len({k[1] for k in curves if k[0] == s}) == 1
                label = solver if single or sweep == "solver" else f"{solver}, {sweep}={v}"
                if metric in LOG_METRICS:
                    ax.semilogy(rr, np.maximum(vv, 1e-16), label=label, **style)
                else:
                    ax.plot(rr, vv, label=label, **style)
            title = f"{sweep} {value}: {metric}" if value is not None else f"by {sweep}: {metric}"
            ax.set(xlabel="round", ylabel=metric, title=title)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


CSV_HEADER = ["sweep", "value", "solver", "round", "metric", "number"]


def run(name, tiny=False, out=None, replot=False):
    """Run one reproduction (or, with ``replot``, redraw its saved CSV); returns the paths."""
    if name not in REPRODUCTIONS:
        raise SystemExit(f"unknown reproduction {name!r}; choose from {sorted(REPRODUCTIONS)}")
    out = Path(out) if out else RESULTS / name
    out.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out / f"{name}.csv", out / f"{name}.png"
    if replot:
        with open(csv_path, newline="") as fh:
            rows = [(r["sweep"], r["value"], r["solver"], int(r["round"]), r["metric"],
                     float(r["number"])) for r in csv.DictReader(fh)]
    else:
        rows = REPRODUCTIONS[name](tiny=tiny)
        with open(csv_path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(CSV_HEADER)
            writer.writerows(rows)
    _plot(name, rows, png_path)
    print(f"wrote {png_path}" if replot else f"wrote {csv_path} and {png_path}")
    return csv_path, png_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=sorted(REPRODUCTIONS))
    parser.add_argument("--tiny", action="store_true", help="a seconds-long version")
    parser.add_argument("--out", help="output folder (default benchmarks/results/NAME)")
    parser.add_argument("--replot", action="store_true",
                        help="redraw the figure from the saved CSV without re-running")
    args = parser.parse_args(argv)
    run(args.name, tiny=args.tiny, out=args.out, replot=args.replot)


if __name__ == "__main__":
    main()
