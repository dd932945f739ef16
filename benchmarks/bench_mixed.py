"""Federated mixed models against statsmodels' MixedLM on the pooled rows, and two stages against one.

1. Fit time: FedMixedLM (sites' sums + the server's optimiser, in process)
   against statsmodels' ``MixedLM.fit()`` (its default: BFGS, then L-BFGS and
   CG if BFGS stops early) on the same pooled rows, best of ``--repeat`` runs;
   the ratio statsmodels / skfed (> 1: skfed is faster), the exchanges with
   the sites and their bytes, and the largest differences in log-likelihood,
   fixed effects and the random-effects covariance (relative). Data: dietox
   (861 rows, 72 pigs nested in 3 sites; random intercept, then random
   intercept and slope of Time) and a simulation of ``--sites`` hospitals of
   very different sizes with patients nested in them.
2. One stage against two: sites whose intercepts and slopes differ
   (random site effects), the one-stage model (random intercept and slope by
   site) against the two-stage analysis (each site's least squares, then a
   REML random-effects meta-analysis of each coefficient): estimates, standard
   errors, and the distance of each to the simulated population slope.
3. FedMixedGLM on lme4's cbpp (Laplace and 25-node AGQ): Newton rounds,
   bytes and time.

Run: python benchmarks/bench_mixed.py [--sites 20] [--repeat 3]
"""

import argparse
import os
import time
import warnings

import numpy as np
import pandas as pd
import statsmodels
import statsmodels.formula.api as smf

from skfed.mixed import FedMixedGLM, FedMixedLM, compare_two_stage


def best_time(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def dietox():
    path = os.path.join(os.path.dirname(statsmodels.__file__), "regression", "tests",
                        "results", "dietox.csv")
    data = pd.read_csv(path)
    return data.rename(columns={"Weight": "y", "Time": "x", "Pig": "g", "Cu": "site"})[
        ["y", "x", "g", "site"]]


def hospitals(n_sites, seed=0):
    """Patients nested in hospitals: sizes from 10 to 120 patients, 2 to 15 visits each,
    covariates shifted by hospital; random intercept and slope per patient."""
    rng = np.random.default_rng(seed)
    frames = []
    for s in range(n_sites):
        n_patients = int(rng.integers(10, 121))
        sizes = rng.integers(2, 16, size=n_patients)
        g = np.repeat(np.arange(n_patients), sizes)
        x = rng.normal(loc=0.3 * (s % 5), scale=1 + 0.2 * (s % 3), size=g.size)
        u = rng.multivariate_normal([0, 0], [[1.5, 0.2], [0.2, 0.3]], size=n_patients)
        y = 1 + 0.5 * x + u[g, 0] + u[g, 1] * x + rng.normal(size=g.size)
        frames.append(pd.DataFrame({"y": y, "x": x, "g": [f"{s}-{k}" for k in g],
                                    "site": s}))
    return pd.concat(frames, ignore_index=True)


def compare_fit(name, data, slopes, repeat):
    re_formula = "1 + x" if slopes else None
    model = smf.mixedlm("y ~ x", data, groups=data["g"], re_formula=re_formula)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_sm, ref = best_time(lambda: model.fit(), repeat)
        t_fed, est = best_time(lambda: FedMixedLM(["x"] if slopes else None).fit(
            data[["x", "g"]], data["y"], clients=data["site"], groups="g"), repeat)
    setup = est.ledger_["setup"]
    cov = np.max(np.abs(est.cov_re_.to_numpy() / ref.cov_re.to_numpy() - 1))
    fe = np.max(np.abs(est.fe_params_.to_numpy() / ref.fe_params.to_numpy() - 1))
    print(f"{name:<28} {len(data):>6} {est.n_groups_:>6} {t_sm:>8.3f} {t_fed:>8.3f} "
          f"{t_sm / t_fed:>6.1f} {setup['rounds']:>4} {setup['bytes']:>8} "
          f"{est.llf_ - ref.llf:>+10.2e} {fe:>8.1e} {cov:>8.1e} "
          f"{'yes' if ref.converged else 'NO':>5}")


def site_effects(n_sites, seed=1):
    """Sites with their own intercepts and slopes (population slope 0.5)."""
    rng = np.random.default_rng(seed)
    frames = []
    for s in range(n_sites):
        n = int(rng.integers(40, 400))
        x = rng.normal(loc=0.5 * rng.normal(), size=n)
        a, b = 1 + rng.normal(scale=1.0), 0.5 + rng.normal(scale=0.25)
        y = a + b * x + rng.normal(scale=0.5 + rng.uniform(), size=n)
        frames.append(pd.DataFrame({"y": y, "x": x, "site": s}))
    return pd.concat(frames, ignore_index=True)


def one_vs_two_stage(n_sites):
    data = site_effects(n_sites)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comparison = compare_two_stage(data[["x"]], data["y"], clients=data["site"],
                                       re_columns=["x"])
    print(f"\n{n_sites} sites with their own intercepts and slopes (population slope 0.5; "
          "one stage: random intercept and slope by site, REML; two stages: per-site "
          "least squares, REML meta-analysis)")
    table = comparison.table.copy()
    table["one_stage_error"] = table["one_stage"] - np.array([1.0, 0.5])
    table["two_stage_error"] = table["two_stage"] - np.array([1.0, 0.5])
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))


def cbpp_glmm(repeat):
    rows = [(1, 2, 14, 1), (1, 3, 12, 2), (1, 4, 9, 3), (1, 0, 5, 4), (2, 3, 22, 1),
            (2, 1, 18, 2), (2, 1, 21, 3), (3, 8, 22, 1), (3, 2, 16, 2), (3, 0, 16, 3),
            (3, 2, 20, 4), (4, 2, 10, 1), (4, 0, 10, 2), (4, 2, 9, 3), (4, 0, 6, 4),
            (5, 5, 18, 1), (5, 0, 25, 2), (5, 0, 24, 3), (5, 1, 4, 4), (6, 3, 17, 1),
            (6, 0, 17, 2), (6, 0, 18, 3), (6, 1, 20, 4), (7, 8, 16, 1), (7, 1, 10, 2),
            (7, 3, 9, 3), (7, 0, 5, 4), (8, 12, 34, 1), (9, 2, 9, 1), (9, 0, 6, 2),
            (9, 0, 8, 3), (9, 0, 6, 4), (10, 1, 22, 1), (10, 1, 22, 2), (10, 0, 18, 3),
            (10, 2, 22, 4), (11, 0, 25, 1), (11, 5, 27, 2), (11, 3, 22, 3), (11, 1, 22, 4),
            (12, 2, 10, 1), (12, 1, 8, 2), (12, 0, 6, 3), (12, 0, 5, 4), (13, 1, 21, 1),
            (13, 2, 24, 2), (13, 0, 19, 3), (13, 0, 23, 4), (14, 11, 19, 1), (14, 0, 2, 2),
            (14, 0, 3, 3), (14, 0, 2, 4), (15, 1, 19, 1), (15, 1, 15, 2), (15, 1, 15, 3),
            (15, 0, 15, 4)]
    data = pd.DataFrame(rows, columns=["herd", "incidence", "size", "period"])
    table = pd.get_dummies(data["period"], prefix="period", drop_first=True).astype(float)
    table["herd"], table["size"] = data["herd"], data["size"]
    sites = (data["herd"] - 1) // 5
    print("\nFedMixedGLM, lme4's cbpp (56 rows, 15 herds in 3 sites), binomial")
    print(f"{'method':<10} {'rounds':>6} {'bytes':>8} {'time s':>8} {'-2 loglik':>12}")
    for n_nodes in (1, 25):
        seconds, est = best_time(lambda: FedMixedGLM(
            trials="size", n_nodes=n_nodes, min_group_size=1).fit(
                table, data["incidence"], clients=sites, groups="herd"), repeat)
        spent = sum(v["bytes"] for v in est.ledger_.values())
        rounds = sum(v["rounds"] for v in est.ledger_.values())
        print(f"{est.results_.method:<10} {rounds:>6} {spent:>8} {seconds:>8.3f} "
              f"{-2 * est.llf_:>12.6f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sites", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("FedMixedLM against statsmodels' MixedLM.fit() (REML) on the pooled rows; "
          "ratio = statsmodels time / skfed time")
    print(f"{'data':<28} {'rows':>6} {'groups':>6} {'sm s':>8} {'skfed s':>8} {'ratio':>6} "
          f"{'exch':>4} {'bytes':>8} {'d llf':>10} {'d fe':>8} {'d cov':>8} {'smcvg':>5}")
    pigs = dietox()
    compare_fit("dietox, intercept", pigs, False, args.repeat)
    compare_fit("dietox, intercept + slope", pigs, True, args.repeat)
    many = hospitals(args.sites)
    compare_fit(f"{args.sites} hospitals, intercept", many, False, args.repeat)
    compare_fit(f"{args.sites} hospitals, int. + slope", many, True, args.repeat)
    one_vs_two_stage(8)
    cbpp_glmm(args.repeat)


if __name__ == "__main__":
    main()
