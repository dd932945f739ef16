"""How far survival curves on a grid are from the exact ones (docs/statistics.md).

lifelines' gbsg2 in three hospitals split by tumour size; each site's rule
``min_level_count = 5``. Prints, against lifelines on the pooled rows: the exact
curves (what site services allowing event times give: equal bit for bit, tested in
tests/test_survival_curves_sites.py), the release issue 36 found (each site's bins of
at least 5 rows reported at their last time), the actuarial life table and the
Kaplan-Meier estimate of the grouped times on several grids (whether each passes every
site's rule), and the log-rank test of the grouped times.

    python benchmarks/bench_survival_grid.py
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from lifelines import KaplanMeierFitter
from lifelines.datasets import load_gbsg2
from lifelines.statistics import multivariate_logrank_test
from lifelines.utils import restricted_mean_survival_time as lifelines_rmst

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from skfed.stats import (kaplan_meier, logrank_test, median_survival,  # noqa: E402
                         restricted_mean_survival_time)
from skfed.stats._site import _coarsen  # noqa: E402
from tests._sites import SITES, split_frames  # noqa: E402

FLOOR = 5


def _passes(parts, cuts, group=None):
    """Whether every interval of ``cuts`` holds 0 or >= FLOOR events and rows at each
    site (per level of ``group``): the sites' rule."""
    for part in parts:
        for level in [None] if group is None else part[group].unique():
            rows = part if level is None else part[part[group] == level]
            k = np.searchsorted(cuts, rows.time.to_numpy(dtype=float), side="left")
            for counts in (np.bincount(k), np.bincount(k[rows.cens.to_numpy() == 1])):
                if np.any((counts > 0) & (counts < FLOOR)):
                    return False
    return True


def _old_release(parts, group=None, level=None):
    """The times each site released before: bins of >= FLOOR rows at their last time."""
    times, events = [], []
    for part in parts:
        rows = part if level is None else part[part[group] == level]
        distinct, inverse = np.unique(rows.time.to_numpy(dtype=float), return_inverse=True)
        times.append(_coarsen(distinct, np.bincount(inverse), FLOOR)[inverse])
        events.append(rows.cens.to_numpy())
    return np.concatenate(times), np.concatenate(events)


def _grouped_km(T, E, cuts):
    """The Kaplan-Meier estimate of the times grouped into the intervals (d / n)."""
    k = np.searchsorted(cuts, T, side="left")
    d = np.bincount(k, weights=E, minlength=cuts.size + 1)
    r = np.bincount(k, minlength=cuts.size + 1)
    n = T.size - np.concatenate([[0], np.cumsum(r)[:-1]])
    return np.cumprod(1 - d / n)[:-1]


def main():
    parts = split_frames(load_gbsg2(), 3, by="tsize")
    df = pd.concat(parts, ignore_index=True)
    site = np.repeat(SITES, [len(p) for p in parts])
    T, E = df.time.to_numpy(dtype=float), df.cens.to_numpy()
    km = KaplanMeierFitter().fit(T, E)
    exact_lr = multivariate_logrank_test(T, df.horTh, E)
    print(f"rows per site {[len(p) for p in parts]}, events {int(E.sum())}")
    table = kaplan_meier(df, time="time", event="cens", clients=site)
    t = table.index.to_numpy()
    print(f"exact: S(1095) {km.predict(1095.0):.4f}, median {km.median_survival_time_:g}, "
          f"RMST(1460) {lifelines_rmst(km, 1460.0):.1f}, log-rank "
          f"{exact_lr.test_statistic:.3f} (p {exact_lr.p_value:.4f}); largest error of S "
          f"{np.abs(table.survival - km.survival_function_at_times(t).to_numpy()).max():.1g}")
    old_T, old_E = _old_release(parts)
    old = KaplanMeierFitter().fit(old_T, old_E)
    at = km.event_table.index[km.event_table.observed > 0]
    by = [_old_release(parts, "horTh", level) for level in ("no", "yes")]
    old_lr = multivariate_logrank_test(np.concatenate([b[0] for b in by]),
                                       np.repeat(["no", "yes"], [len(b[0]) for b in by]),
                                       np.concatenate([b[1] for b in by]))
    error = np.abs(old.survival_function_at_times(at).to_numpy()
                   - km.survival_function_at_times(at).to_numpy()).max()
    print(f"issue 36's release: S(1095) {old.predict(1095.0):.4f}, median "
          f"{old.median_survival_time_:g}, log-rank {old_lr.test_statistic:.3f}; largest "
          f"error of S at the event times {error:.3f}")
    for name, step, count in [("yearly to 4 y", 365.0, 4), ("yearly to 5 y", 365.0, 5),
                              ("yearly to 7 y", 365.0, 7), ("half-yearly to 4 y", 182.5, 8),
                              ("quarterly to 4 y", 91.25, 16)]:
        cuts = np.arange(1, count + 1) * step
        lt = kaplan_meier(df, time="time", event="cens", clients=site, time_grid=cuts)
        reference = km.survival_function_at_times(lt.index.to_numpy()).to_numpy()
        grouped = _grouped_km(T, E, cuts)
        print(f"{name}: passes {_passes(parts, cuts)}; life table: largest error "
              f"{np.abs(lt.survival.to_numpy() - reference).max():.4f}, S(1095) "
              f"{np.interp(1095.0, lt.index.to_numpy(), lt.survival.to_numpy()):.4f}, RMST("
              f"{cuts[-1]:g}) {restricted_mean_survival_time(lt, cuts[-1]):.1f} (exact "
              f"{lifelines_rmst(km, cuts[-1]):.1f}), median "
              f"{median_survival(lt).loc['all', 'median']:.0f}; grouped Kaplan-Meier: "
              f"largest error {np.abs(grouped - reference[1:]).max():.4f}")
    for cuts in ([1095.0], [730.0, 1460.0], [365.0, 730.0, 1095.0]):
        result = logrank_test(df, time="time", event="cens", group="horTh", clients=site,
                              time_grid=cuts)
        print(f"log-rank grouped at {cuts}: passes {_passes(parts, np.asarray(cuts), 'horTh')}"
              f"; {result.statistic:.3f} (p {result.p_value:.4f})")


if __name__ == "__main__":
    main()
