"""Federated Cox model against lifelines' CoxPHFitter on the pooled rows.

rossi (432 rows, tied weeks) and whas500 (500 rows, days), each split into 4
sites by the quartiles of age (heterogeneous sites), Efron ties. FedCoxPH with
one exact shared baseline (strata=None), with each site its own baseline
(strata="site"), and with the shared baseline on a coarsened time grid (monthly
cut points; 20 quantile bins), against lifelines on the pooled rows (strata
["site"] for the stratified fit, the exact unstratified fit for the grids).
Prints rounds (n_iter_), bytes (history_ bytes_up + bytes_down), wall time
(one run each) and its ratio to lifelines, the largest coefficient difference
relative to lifelines, and the coarsened fits' error against the exact
shared-baseline fit (largest relative coefficient and standard-error
differences, and the coefficient difference in standard errors).

Run: python benchmarks/bench_cox.py [--sites 4]
"""

import argparse
import time
import warnings

import numpy as np
import pandas as pd
from lifelines import CoxPHFitter

from skfed.survival import FedCoxPH, survival_target

LIFELINES_FIT = {"precision": 1e-20, "r_precision": 1e-20, "max_steps": 500}


def load(name):
    if name == "rossi":
        from lifelines.datasets import load_rossi

        df = load_rossi()
        X = df.drop(columns=["week", "arrest"]).astype(float)
        return X, df["arrest"].to_numpy(bool), df["week"].to_numpy(float), np.linspace(0, 52, 13)
    from sksurv.datasets import load_whas500

    X, y = load_whas500()
    X = X[["age", "gender", "hr", "bmi", "sysbp", "chf", "afb", "sho"]].astype(float)
    time_ = y["lenfol"].astype(float)
    months = np.arange(0, time_.max() + 30.4375, 30.4375)
    return X.reset_index(drop=True), y["fstat"].astype(bool), time_, months


def quartile_sites(values, k):
    return np.searchsorted(np.quantile(values, np.arange(1, k) / k), values, side="right")


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def total_bytes(est):
    h = est.history_.to_dict()
    return int(sum(np.nansum(np.asarray(h.get(k, [0]), float)) for k in ("bytes_up", "bytes_down")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=4)
    args = parser.parse_args(argv)

    for name in ("rossi", "whas500"):
        X, event, time_, months = load(name)
        site = quartile_sites(X["age"].to_numpy(), args.sites)
        y = survival_target(event, time_)
        df = X.assign(T=time_, E=event)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_ll, ll_exact = timed(lambda: CoxPHFitter().fit(df, "T", "E",
                                                             fit_options=LIFELINES_FIT))
            t_ll_site, ll_site = timed(lambda: CoxPHFitter(strata=["site"]).fit(
                df.assign(site=site), "T", "E", fit_options=LIFELINES_FIT))

        runs = [("strata=None (exact shared baseline)", dict(), ll_exact, t_ll),
                ('strata="site"', dict(strata="site"), ll_site, t_ll_site),
                (f"time_grid monthly ({len(months)} cut points)", dict(time_grid=months),
                 ll_exact, t_ll),
                ("time_grid=20 (quantile bins)", dict(time_grid=20), ll_exact, t_ll)]
        print(f"\n# {name}: {len(time_)} rows, {X.shape[1]} covariates, {int(event.sum())} "
              f"events, {len(np.unique(time_))} distinct times, {args.sites} sites by age "
              f"quartile, Efron ties\n")
        print("| FedCoxPH | rounds | bytes | seconds | ratio to lifelines | max rel coef diff "
              "to lifelines |")
        print("|---|---|---|---|---|---|")
        fits = {}
        for label, params, ref, t_ref in runs:
            t_fed, est = timed(lambda: FedCoxPH(**params).fit(X, y, clients=site))
            fits[label] = est
            ref_coef = ref.params_.to_numpy()
            gap = np.max(np.abs(est.coef_ - ref_coef) / np.abs(ref_coef))
            print(f"| {label} | {est.n_iter_} | {total_bytes(est):,} | {t_fed:.3f} | "
                  f"{t_fed / t_ref:.2f} | {gap:.1e} |")
        print(f"| lifelines CoxPHFitter (pooled) | - | - | {t_ll:.3f} | 1.00 | - |")

        exact = fits[runs[0][0]]
        print("\ncoarsened grid against the exact shared-baseline fit:")
        for label, *_ in runs[2:]:
            est = fits[label]
            rel = np.max(np.abs(est.coef_ / exact.coef_ - 1))
            in_se = np.max(np.abs(est.coef_ - exact.coef_) / exact.bse_)
            se_rel = np.max(np.abs(est.bse_ / exact.bse_ - 1))
            print(f"  {label}: max relative coef difference {rel:.2e} ({in_se:.3f} SE), "
                  f"max relative SE difference {se_rel:.2e}")
        table = pd.DataFrame({"exact": exact.coef_,
                              **{label.split(" (")[0]: fits[label].coef_ for label, *_ in runs[2:]}},
                             index=X.columns)
        print(table.round(4).to_string())


if __name__ == "__main__":
    main()
