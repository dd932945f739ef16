"""The proportional-hazards test from site sums equals lifelines' on the pooled rows.

``skfed.survival.proportional_hazard_test(cox, X, y, clients=site,
time_transform=...)`` against ``lifelines.statistics.proportional_hazard_test(cph,
df, time_transform=...)`` with ``cph`` fitted on the pooled rows to machine
precision (``LIFELINES_FIT``, see ``tests/test_cox.py``): per-covariate statistics
and p-values to a relative ``RTOL``, for the transforms ``km``, ``identity``,
``log`` and ``rank``, with a baseline shared by the sites, a strata column and
each site its own stratum, with weights and on a coarsened time grid.

- lifelines' summary rows are sorted by name: compared by name.
- ``rank`` with tied event times: lifelines numbers tied events in its row
  order (``np.cumsum(events)``), skfed gives them their average rank (R's
  ``rank``; an order that no site knows). The reference there is lifelines'
  test with that transform given as a function; on the tie-free
  ``regression`` data lifelines' own ``"rank"`` is the reference.
- The global test (R's ``cox.zph`` before survival 3.0) has no lifelines
  counterpart: its reference is computed with numpy from lifelines' own
  Schoenfeld residuals, variance matrix and event times.
"""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from skfed.data import FederatedDataset
from skfed.linear_model import InferenceError
from skfed.survival import FedCoxPH, proportional_hazard_test, survival_target
from skfed.survival._site import site_schoenfeld_moments, site_schoenfeld_sums

from . import _cox_oracle as O

lifelines = pytest.importorskip("lifelines")
from lifelines.statistics import proportional_hazard_test as lifelines_ph  # noqa: E402

RTOL = 1e-9
LIFELINES_FIT = {"precision": 1e-20, "r_precision": 1e-20, "max_steps": 500}
TRANSFORMS = ["km", "identity", "log", "rank"]


def _frame(name):
    X, ev, tm = O.load(name)
    return X, ev, tm, X.assign(T=tm, E=ev.astype(float))


def _average_rank(durations, events, weights):
    """R's rank of the event times (ties averaged), as a lifelines transform."""
    times = durations.to_numpy()[events.to_numpy().astype(bool)]
    ranks = [np.sum(times < t) + (np.sum(times == t) + 1) / 2 for t in durations.to_numpy()]
    return pd.Series(ranks, index=durations.index)


def _reference(cph, df, transform, names, ties=True):
    how = _average_rank if transform == "rank" and ties else transform
    return lifelines_ph(cph, df, time_transform=how).summary.loc[names]


def _assert_equal(ours, ref):
    np.testing.assert_allclose(ours["test_statistic"].to_numpy()[:-1],
                               ref["test_statistic"].to_numpy(), rtol=RTOL)
    np.testing.assert_allclose(ours["p"].to_numpy()[:-1], ref["p"].to_numpy(), rtol=RTOL)


@pytest.fixture(scope="module")
def rossi():
    X, ev, tm, df = _frame("rossi")
    site = O.split_sites(X, "quantile", column="age")
    cox = FedCoxPH(tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    cph = lifelines.CoxPHFitter().fit(df, "T", "E", fit_options=LIFELINES_FIT)
    return X, ev, tm, df, site, cox, cph


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_shared_baseline_equals_lifelines(rossi, transform):
    X, ev, tm, df, site, cox, cph = rossi
    ours = proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                    time_transform=transform)
    _assert_equal(ours, _reference(cph, df, transform, list(X.columns)))
    assert list(ours.index) == list(X.columns) + ["GLOBAL"]
    assert ours.attrs == {"time_transform": transform, "n_events": int(ev.sum())}


def test_rank_without_ties_is_lifelines_own_rank():
    X, ev, tm, df = _frame("regression")
    assert np.unique(tm[ev]).size == ev.sum()  # no tied event times
    site = O.split_sites(X, "iid")
    cox = FedCoxPH(tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    cph = lifelines.CoxPHFitter().fit(df, "T", "E", fit_options=LIFELINES_FIT)
    ours = proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site)
    _assert_equal(ours, lifelines_ph(cph, df, time_transform="rank").summary.loc[list(X.columns)])


@pytest.mark.parametrize("transform", ["identity", "km"])
def test_global_test_is_grambsch_therneau_from_lifelines_residuals(rossi, transform):
    X, ev, tm, df, site, cox, cph = rossi
    residuals = cph.compute_residuals(df, "schoenfeld").to_numpy()
    events = cph.event_observed.to_numpy().astype(bool)
    g = lifelines.statistics.TimeTransformers().get(transform)(
        cph.durations, cph.event_observed, cph.weights).to_numpy()[events]
    g = g - g.mean()
    u = g @ residuals
    V = cph.variance_matrix_.to_numpy()
    expected = events.sum() * (u @ V @ u) / (g @ g)
    ours = proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                    time_transform=transform).loc["GLOBAL"]
    np.testing.assert_allclose(ours["test_statistic"], expected, rtol=RTOL)
    assert ours["df"] == X.shape[1]
    np.testing.assert_allclose(ours["p"], stats.chi2.sf(expected, X.shape[1]), rtol=RTOL)


def test_several_transforms_in_one_table_and_a_federated_dataset(rossi):
    X, ev, tm, df, site, cox, cph = rossi
    data = FederatedDataset.from_arrays(X, survival_target(ev, tm), site)
    table = proportional_hazard_test(cox, data, time_transform="all")
    assert table.index.names == ["covariate", "transform"]
    for transform in TRANSFORMS:
        alone = proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                         time_transform=transform)
        np.testing.assert_allclose(table.xs(transform, level="transform").to_numpy(),
                                   alone.to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_strata_column_shared_across_sites(rossi, transform):
    # the Kaplan-Meier and the ranks are over all strata (R); lifelines' "rank" under
    # strata numbers rows sorted by stratum first, so the reference is R's average rank
    X, ev, tm, df, site, _, _ = rossi
    cox = FedCoxPH(strata="wexp", tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    cph = lifelines.CoxPHFitter(strata=["wexp"]).fit(df, "T", "E", fit_options=LIFELINES_FIT)
    names = [c for c in X.columns if c != "wexp"]
    ours = proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                    time_transform=transform)
    _assert_equal(ours, _reference(cph, df, transform, names))


@pytest.mark.parametrize("transform", ["identity", "log"])
def test_each_site_its_own_stratum(rossi, transform):
    X, ev, tm, df, site, _, _ = rossi
    cox = FedCoxPH(strata="site", tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    cph = lifelines.CoxPHFitter(strata=["site"]).fit(df.assign(site=site), "T", "E",
                                                     fit_options=LIFELINES_FIT)
    ours = proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                    time_transform=transform)
    _assert_equal(ours, _reference(cph, df.assign(site=site), transform, list(X.columns)))


def test_site_strata_refuse_the_transforms_that_need_pooled_event_times(rossi):
    X, ev, tm, df, site, _, _ = rossi
    cox = FedCoxPH(strata="site").fit(X, survival_target(ev, tm), clients=site)
    for transform in ("rank", "km"):
        with pytest.raises(ValueError, match="pooled distribution of the event times"):
            proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                     time_transform=transform)
    with pytest.raises(ValueError, match="sites it was fitted on"):
        proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site + 10,
                                 time_transform="log")


def test_case_weights(rossi):
    X, ev, tm, df, site, _, _ = rossi
    w = 1.0 + np.arange(len(tm)) % 3
    cox = FedCoxPH(tol=1e-12).fit(X, survival_target(ev, tm), clients=site, sample_weight=w)
    cph = lifelines.CoxPHFitter().fit(df.assign(w=w), "T", "E", weights_col="w",
                                      fit_options=LIFELINES_FIT)
    for transform in ("km", "identity"):
        ours = proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                        sample_weight=w, time_transform=transform)
        _assert_equal(ours, _reference(cph, df.assign(w=w), transform, list(X.columns)))


def test_coarsened_time_grid_is_the_test_of_the_grouped_times(rossi):
    # each time becomes its interval's right end, as the fit sees it
    X, ev, tm, df, site, _, _ = rossi
    cuts = np.linspace(4.0, 52.0, 13)
    cox = FedCoxPH(time_grid=cuts, tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    grouped = df.assign(T=cuts[O.coarsen(tm, cuts).astype(int)])
    cph = lifelines.CoxPHFitter().fit(grouped, "T", "E", fit_options=LIFELINES_FIT)
    for transform in ("km", "identity", "rank"):
        ours = proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                        time_transform=transform)
        _assert_equal(ours, _reference(cph, grouped, transform, list(X.columns)))


def test_open_last_interval_has_no_time_for_identity(rossi):
    X, ev, tm, df, site, _, _ = rossi
    cox = FedCoxPH(time_grid=np.array([10.0, 20.0, 30.0])).fit(
        X, survival_target(ev, tm), clients=site)
    with pytest.raises(ValueError, match="open last interval"):
        proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                 time_transform="identity")
    assert np.isfinite(proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                                time_transform="km")["p"]).all()


def test_no_test_without_standard_errors_and_bad_transforms(rossi):
    X, ev, tm, df, site, _, _ = rossi
    lasso = FedCoxPH(alpha=0.01, l1_ratio=1.0).fit(X, survival_target(ev, tm), clients=site)
    with pytest.raises(InferenceError, match="L1 part"):
        proportional_hazard_test(lasso, X, survival_target(ev, tm), clients=site)
    with pytest.raises(ValueError, match="time_transform must be one of"):
        proportional_hazard_test(rossi[5], X, survival_target(ev, tm), clients=site,
                                 time_transform="sqrt")


def test_the_site_functions_return_sums_over_rows(rossi):
    # under a shared baseline, a site's reply for two groups of rows is the sum of the
    # replies for each (sums over rows, never a row); a site that is its own stratum
    # sends p + 7 numbers, whatever its number of rows
    X, ev, tm, df, site, cox, _ = rossi
    whole = FederatedDataset.from_arrays(X, survival_target(ev, tm), np.zeros(len(tm)))
    parts = FederatedDataset.from_arrays(X, survival_target(ev, tm), np.arange(len(tm)) % 2)
    args = (cox.coef_, cox._fit_grid, None)
    one, two = whole.map(site_schoenfeld_sums, *args)[0], parts.map(site_schoenfeld_sums, *args)
    K = sum(len(t) for t in cox._fit_grid.values())
    for key, value in one.items():
        np.testing.assert_allclose(np.asarray(two[0][key]) + np.asarray(two[1][key]), value,
                                   rtol=1e-12, atol=1e-12)
        assert np.shape(value)[0] == K and np.ndim(value) <= 2
    reply = whole.map(site_schoenfeld_moments, cox.coef_, "efron")[0]
    assert sum(np.size(v) for v in reply.values()) == 3 * X.shape[1] + 5
