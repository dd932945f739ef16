"""Federated Poisson regression with its regression table against the pooled references.

A rate model with exposure offsets on rows split over heterogeneous sites:
``FedPoissonRegressor(alpha=0)`` (Newton, then the inference pass) fit plus
``summary()``, against statsmodels' pooled ``GLM(..., Poisson(), offset=)`` fit
plus ``summary()`` (the same table) and scikit-learn's ``PoissonRegressor``
(which has no offset: fitted with ``alpha=0`` on the rows without the offset,
timing only). Prints rounds, bytes (algorithm, monitoring, setup and the
inference passes), wall time (best of ``--repeat``) and the ratios, and the
largest relative difference of the standard errors against statsmodels.

Run: python benchmarks/bench_glm.py [--rows 200000] [--features 20] [--sites 16]
      [--repeat 3]
"""

import argparse
import time
import warnings

import numpy as np
import statsmodels.api as sm
from sklearn.linear_model import PoissonRegressor

from skfed import FedPoissonRegressor
from skfed.datasets import simulate_clients


def make_data(n, d, sites, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    # covariate shift across sites: site s shifts the first feature
    site = simulate_clients(X, X[:, 0], sites, scheme="quantile", random_state=0)
    years = rng.uniform(0.5, 10.0, n)
    beta = rng.normal(0, 0.2, d)
    y = rng.poisson(years * np.exp(-2.0 + X @ beta)).astype(float)
    return X, y, np.log(years), site


def best_time(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--sites", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    X, y, offset, site = make_data(args.rows, args.features, args.sites)
    A = sm.add_constant(X)

    def federated():
        est = FedPoissonRegressor(alpha=0, cov_type="cluster").fit(X, y, clients=site,
                                                                    offset=offset)
        return est, est.summary()

    def pooled_statsmodels():
        res = sm.GLM(y, A, family=sm.families.Poisson(), offset=offset).fit(
            cov_type="cluster", cov_kwds={"groups": site})
        return res, res.summary()

    def pooled_sklearn():
        return PoissonRegressor(alpha=0, solver="newton-cholesky").fit(X, y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_fed, (est, _) = best_time(federated, args.repeat)
        t_sm, (res, _) = best_time(pooled_statsmodels, args.repeat)
        t_sk, _ = best_time(pooled_sklearn, args.repeat)

    h = est.history_
    algo = int(np.nansum(h["bytes_up"]) + np.nansum(h["bytes_down"]))
    monitor = int(np.nansum(h["monitor_bytes"]))
    bse_gap = float(np.max(np.abs(est.bse_ / res.bse - 1)))
    coef_gap = float(np.max(np.abs(est.params_ - res.params)) / np.max(np.abs(res.params)))
    print(f"# Poisson rate model: {args.rows} rows, {args.features} features + intercept, "
          f"{args.sites} sites (quantile split), exposure offsets, cluster-robust by site\n")
    print("| fit + summary | rounds | bytes | seconds | ratio to statsmodels |")
    print("|---|---|---|---|---|")
    print(f"| skfed FedPoissonRegressor (newton + inference pass) | {est.n_iter_} + "
          f"{h.setup_rounds} setup + {h.inference_rounds} inference | {algo:,} algorithm + "
          f"{monitor:,} monitor + {h.setup_bytes:,} setup + {h.inference_bytes:,} inference "
          f"| {t_fed:.3f} | {t_fed / t_sm:.2f} |")
    print(f"| statsmodels GLM (pooled, IRLS) | - | - | {t_sm:.3f} | 1.00 |")
    print(f"| scikit-learn PoissonRegressor (pooled, newton-cholesky, no offset, no "
          f"table) | - | - | {t_sk:.3f} | {t_sk / t_sm:.2f} |")
    print(f"\nskfed / scikit-learn time: {t_fed / t_sk:.2f}")
    print(f"largest relative difference to statsmodels: coefficients {coef_gap:.1e}, "
          f"standard errors {bse_gap:.1e}")


if __name__ == "__main__":
    main()
