"""skfed.stats: federated Table 1, cross-tables, Kaplan-Meier and log-rank against pandas,
scipy and lifelines on the pooled rows."""

import numpy as np
import pandas as pd
import pytest
from lifelines import KaplanMeierFitter, NelsonAalenFitter
from lifelines.datasets import load_lung, load_rossi, load_waltons
from lifelines.statistics import logrank_test as lifelines_logrank
from lifelines.statistics import multivariate_logrank_test

from skfed.data import FederatedDataset, SiteError
from skfed.stats import kaplan_meier, logrank_test

RTOL = 1e-10


def _sites(n, n_sites=3, seed=0):
    return np.random.default_rng(seed).integers(0, n_sites, n)


def _survival_data(name):
    if name == "waltons":
        return load_waltons(), "T", "E", "group"
    if name == "rossi":
        return load_rossi(), "week", "arrest", "fin"
    lung = load_lung().dropna(subset=["time", "status", "sex"])
    lung = lung.assign(status=lung.status.astype(int))
    return lung, "time", "status", "sex"


def _check_km(table, durations, events, alpha=0.05):
    km = KaplanMeierFitter(alpha=alpha).fit(durations, events)
    na = NelsonAalenFitter(alpha=alpha).fit(durations, events)
    np.testing.assert_array_equal(table.index.to_numpy(), km.survival_function_.index.to_numpy())
    np.testing.assert_allclose(table["survival"], km.survival_function_.iloc[:, 0], rtol=RTOL,
                               atol=1e-14)
    np.testing.assert_allclose(table[["survival_lower", "survival_upper"]],
                               km.confidence_interval_.to_numpy(), rtol=RTOL, atol=1e-14)
    np.testing.assert_allclose(table["cumulative_hazard"], na.cumulative_hazard_.iloc[:, 0],
                               rtol=RTOL, atol=1e-14)
    np.testing.assert_allclose(table[["cumulative_hazard_lower", "cumulative_hazard_upper"]],
                               na.confidence_interval_.to_numpy(), rtol=RTOL, atol=1e-14)
    np.testing.assert_array_equal(table["at_risk"], km.event_table["at_risk"])
    np.testing.assert_array_equal(table["events"], km.event_table["observed"])


@pytest.mark.parametrize("name", ["waltons", "rossi", "lung"])
def test_kaplan_meier_equals_lifelines(name):
    df, time, event, _ = _survival_data(name)
    site = _sites(len(df))
    data = FederatedDataset.from_arrays(df, clients=site)
    _check_km(kaplan_meier(data, time=time, event=event), df[time], df[event])
    _check_km(kaplan_meier(df, time=time, event=event, clients=site, alpha=0.1),
              df[time], df[event], alpha=0.1)


@pytest.mark.parametrize("name", ["waltons", "rossi", "lung"])
def test_kaplan_meier_by_group_equals_lifelines(name):
    df, time, event, group = _survival_data(name)
    table = kaplan_meier(df, time=time, event=event, by=group, clients=_sites(len(df)))
    levels = sorted(df[group].unique())
    assert list(table.index.get_level_values(0).unique()) == levels
    for level in levels:
        rows = df[df[group] == level]
        _check_km(table.loc[level], rows[time], rows[event])


def test_kaplan_meier_min_count_is_exact_km_of_binned_times():
    df, time, event, _ = _survival_data("rossi")
    site = _sites(len(df))
    exact = kaplan_meier(df, time=time, event=event, clients=site)
    table = kaplan_meier(df, time=time, event=event, clients=site, min_count=10)
    assert len(table) < len(exact)
    # each site's released times: every one shared by >= 10 of its rows
    from skfed.stats._site import site_event_table
    data = FederatedDataset.from_arrays(df, clients=site)
    binned = []
    for reply, s in zip(data.map(site_event_table, time, event, None, 10), data.sites):
        times, d, c = reply[None]
        assert ((d + c) >= 10).all()
        rows = df[site == s]
        # each row's time becomes the first released time >= its own
        binned.append(times[np.searchsorted(times, rows[time].to_numpy())])
    binned_times = np.concatenate(binned)
    events = np.concatenate([df[event].to_numpy()[site == s] for s in data.sites])
    _check_km(table, binned_times, events)


@pytest.mark.parametrize("name", ["waltons", "rossi"])
def test_logrank_equals_lifelines(name):
    df, time, event, group = _survival_data(name)
    site = _sites(len(df))
    result = logrank_test(df, time=time, event=event, group=group, clients=site)
    a, b = (df[df[group] == g] for g in sorted(df[group].unique()))
    ref = lifelines_logrank(a[time], b[time], a[event], b[event])
    np.testing.assert_allclose(result.statistic, ref.test_statistic, rtol=RTOL)
    np.testing.assert_allclose(result.p_value, ref.p_value, rtol=RTOL)
    assert result.degrees_of_freedom == 1
    assert result.observed.sum() == df[event].sum()


def test_multivariate_logrank_equals_lifelines():
    df = load_rossi()
    result = logrank_test(df, time="week", event="arrest", group="prio",
                          clients=_sites(len(df), 4, seed=1))
    ref = multivariate_logrank_test(df.week, df.prio, df.arrest)
    np.testing.assert_allclose(result.statistic, ref.test_statistic, rtol=RTOL)
    np.testing.assert_allclose(result.p_value, ref.p_value, rtol=RTOL)
    assert result.degrees_of_freedom == df.prio.nunique() - 1
    np.testing.assert_allclose(result.observed.sum(), result.expected.sum(), rtol=1e-12)


@pytest.mark.parametrize("column, value, message", [
    ("T", -1.0, "negative"), ("T", np.nan, "missing"), ("E", 2, "not 0/1"),
    ("E", np.nan, "missing"), ("E", "yes", "not 0/1")])
def test_survival_bad_input(column, value, message):
    df = load_waltons()
    df[column] = df[column].astype(object if isinstance(value, str) else float)
    df.loc[5, column] = value
    with pytest.raises(SiteError, match=message):
        kaplan_meier(df, time="T", event="E", clients=_sites(len(df)))


def test_survival_bad_columns_and_groups():
    df = load_waltons()
    site = _sites(len(df))
    with pytest.raises(ValueError, match="group column 'arm'"):
        logrank_test(df, time="T", event="E", group="arm", clients=site)
    with pytest.raises(ValueError, match="time column 'time'"):
        kaplan_meier(df, time="time", event="E", clients=site)
    with pytest.raises(ValueError, match="at least two"):
        logrank_test(df.assign(one="a"), time="T", event="E", group="one", clients=site)
    with pytest.raises(ValueError, match="named columns"):
        kaplan_meier(df.to_numpy(), time="T", event="E", clients=site)
    with pytest.raises(ValueError, match="no rows|0 rows|empty"):
        kaplan_meier(df.iloc[:0], time="T", event="E", clients=np.array([]))
