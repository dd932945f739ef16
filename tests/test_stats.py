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
from skfed.stats import (kaplan_meier, logrank_test, median_survival,
                         restricted_mean_survival_time)

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
    """Every time of ``table`` (0, each event time, the times the number at risk is asked
    at) against lifelines' fitters on the rows: survival, its interval, the cumulative
    hazard and its interval, the numbers at risk, of events and of censorings."""
    km = KaplanMeierFitter(alpha=alpha).fit(durations, events)
    na = NelsonAalenFitter(alpha=alpha).fit(durations, events)
    durations, events = np.asarray(durations, dtype=float), np.asarray(events, dtype=float)
    times = table.index.to_numpy(dtype=float)
    assert times[0] == 0 and set(durations[events > 0]) <= set(times)
    assert not table.approximate and table.note == "" and table.time_grid is None

    def at(frame):  # lifelines' step functions at the table's times
        return frame.reindex(times, method="ffill").to_numpy()

    np.testing.assert_allclose(table["survival"], at(km.survival_function_)[:, 0],
                               rtol=RTOL, atol=1e-14)
    np.testing.assert_allclose(table[["survival_lower", "survival_upper"]],
                               at(km.confidence_interval_), rtol=RTOL, atol=1e-14)
    np.testing.assert_allclose(table["cumulative_hazard"], at(na.cumulative_hazard_)[:, 0],
                               rtol=RTOL, atol=1e-14)
    np.testing.assert_allclose(table[["cumulative_hazard_lower", "cumulative_hazard_upper"]],
                               at(na.confidence_interval_), rtol=RTOL, atol=1e-14)
    np.testing.assert_array_equal(table["at_risk"], [(durations >= t).sum() for t in times])
    np.testing.assert_array_equal(table["events"], [((durations == t) & (events > 0)).sum()
                                                    for t in times])
    following = np.append(times[1:], np.inf)  # censored from a time until the next
    np.testing.assert_array_equal(table["censored"], [
        ((durations >= a) & (durations < b) & (events == 0)).sum()
        for a, b in zip(times, following)])


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


def _actuarial(durations, events, cuts):
    """The actuarial life table from lifelines' counts on the intervals ``[0, c_1], (c_1,
    c_2], ..., (c_m, inf)`` (its survival table collapsed on them): each interval's
    entering, events, censorings, and the survival at its start."""
    from lifelines.utils import survival_table_from_events

    edges = np.concatenate([[0.0], cuts, [np.inf]])
    counts = survival_table_from_events(durations, events, collapse=True, intervals=edges)
    n, d, c = (counts[k].to_numpy(dtype=float) for k in ("at_risk", "observed", "censored"))
    survival = np.concatenate([[1.0], np.cumprod(1 - d / (n - c / 2))[:-1]])
    return n, d, c, survival


def test_life_table_is_the_actuarial_table_of_lifelines_counts():
    df, time, event, group = _survival_data("rossi")
    site = _sites(len(df))
    cuts = np.array([8.0, 16.0, 26.0, 39.0, 51.5])
    table = kaplan_meier(df, time=time, event=event, clients=site, time_grid=list(cuts))
    assert table.approximate and np.array_equal(table.time_grid, cuts)
    assert table.note.startswith("Approximate: an actuarial life table on the cut points "
                                 "8, 16, 26, 39, 51.5") and table.note in repr(table)
    np.testing.assert_array_equal(table.index, np.concatenate([[0.0], cuts]))
    n, d, c, survival = _actuarial(df[time], df[event], cuts)
    np.testing.assert_array_equal(table["at_risk"], n)
    np.testing.assert_array_equal(table["events"], d)
    np.testing.assert_array_equal(table["censored"], c)
    np.testing.assert_allclose(table["survival"], survival, rtol=1e-13)
    np.testing.assert_array_equal(table["interval_end"], np.append(cuts, np.inf))
    # by group: each level's own table
    by = kaplan_meier(df, time=time, event=event, by=group, clients=site, time_grid=cuts)
    for level in sorted(df[group].unique()):
        rows = df[df[group] == level]
        n, d, c, survival = _actuarial(rows[time], rows[event], cuts)
        np.testing.assert_array_equal(by.loc[level, "at_risk"], n)
        np.testing.assert_allclose(by.loc[level, "survival"], survival, rtol=1e-13)
    assert by.approximate and by.loc[0].approximate  # what it is survives selection


def test_logrank_on_cut_points_is_lifelines_on_the_grouped_times():
    df, time, event, group = _survival_data("rossi")
    site = _sites(len(df))
    cuts = np.array([10.0, 20.0, 30.0, 45.0])
    result = logrank_test(df, time=time, event=event, group=group, clients=site,
                          time_grid=cuts)
    assert result.approximate and np.array_equal(result.time_grid, cuts)
    assert "grouped into the intervals of the cut points 10, 20, 30, 45" in result.note
    k = np.searchsorted(cuts, df[time].to_numpy(), side="left")
    grouped = np.append(cuts, cuts[-1] + 1)[k]  # every time of an interval: one time
    ref = multivariate_logrank_test(grouped, df[group], df[event])
    np.testing.assert_allclose(result.statistic, ref.test_statistic, rtol=RTOL)
    np.testing.assert_allclose(result.p_value, ref.p_value, rtol=RTOL)
    exact = logrank_test(df, time=time, event=event, group=group, clients=site)
    assert not exact.approximate and exact.note == "" and exact.time_grid is None


@pytest.mark.parametrize("name", ["waltons", "rossi", "lung"])
def test_median_and_rmst_equal_lifelines(name):
    from lifelines.utils import median_survival_times
    from lifelines.utils import restricted_mean_survival_time as lifelines_rmst

    df, time, event, group = _survival_data(name)
    site = _sites(len(df))
    for level, table in [(None, kaplan_meier(df, time=time, event=event, clients=site))] + [
            (level, kaplan_meier(df, time=time, event=event, by=group, clients=site).loc[level])
            for level in sorted(df[group].unique())]:
        rows = df if level is None else df[df[group] == level]
        km = KaplanMeierFitter().fit(rows[time], rows[event])
        medians = median_survival(table).loc["all"]
        assert medians["median"] == km.median_survival_time_
        ci = median_survival_times(km.confidence_interval_)
        np.testing.assert_array_equal(medians[["median_lower", "median_upper"]],
                                      ci.to_numpy().ravel())
        for t in np.quantile(rows[time], [0.3, 0.9]).tolist() + [rows[time].max() * 1.1]:
            mean, variance = restricted_mean_survival_time(table, t, return_variance=True)
            np.testing.assert_allclose(mean, lifelines_rmst(km, t=t), rtol=1e-12)
            # the variance lifelines defines, 2 int_0^t u S(u) du - RMST^2, from lifelines'
            # curve as E[min(T, t)^2] over its jumps (lifelines' own quad stops at 50
            # subdivisions of a step function)
            sf = km.survival_function_.iloc[:, 0]
            times, S = sf.index.to_numpy(dtype=float), sf.to_numpy()
            keep = times <= t
            mass = -np.diff(np.concatenate([[1.0], S[keep]]))
            second = np.sum(mass * times[keep] ** 2) + S[keep][-1] * t ** 2
            np.testing.assert_allclose(variance, second - mean ** 2, rtol=1e-10)


def test_median_and_rmst_per_group_and_of_a_life_table():
    df, time, event, group = _survival_data("rossi")
    site = _sites(len(df))
    by = kaplan_meier(df, time=time, event=event, by=group, clients=site)
    medians = median_survival(by)
    assert list(medians.index) == [0, 1] and medians.index.name == group
    assert medians.attrs["alpha"] == 0.05
    rmst = restricted_mean_survival_time(by, 40.0)
    for level in (0, 1):
        assert rmst.loc[level, "rmst"] == restricted_mean_survival_time(by.loc[level], 40.0)
    # a life table: its curve straight between cut points (the actuarial median)
    cuts = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    table = kaplan_meier(df, time=time, event=event, clients=site, time_grid=cuts)
    s = table["survival"].to_numpy()
    t = table.index.to_numpy()
    np.testing.assert_allclose(restricted_mean_survival_time(table, 50.0),
                               np.trapezoid(s, t), rtol=1e-13)
    np.testing.assert_allclose(restricted_mean_survival_time(table, 25.0),
                               np.trapezoid(np.append(s[:3], np.interp(25.0, t, s)),
                                            [0.0, 10.0, 20.0, 25.0]), rtol=1e-13)
    assert median_survival(table).loc["all", "median"] == np.inf  # S(50) > 0.5 on rossi
    lung, time, event, _ = _survival_data("lung")  # its survival crosses 0.5 near day 310
    half = kaplan_meier(lung, time=time, event=event, clients=_sites(len(lung)),
                        time_grid=[100.0, 200.0, 300.0, 400.0, 500.0])
    v = half["survival"].to_numpy()
    np.testing.assert_array_equal(half.index, [0.0, 100.0, 200.0, 300.0, 400.0, 500.0])
    assert v[3] > 0.5 >= v[4]
    expected = 300 + (v[3] - 0.5) / (v[3] - v[4]) * 100
    assert median_survival(half).loc["all", "median"] == pytest.approx(expected, rel=1e-14)
    with pytest.raises(ValueError, match="past the life table's last cut point 50"):
        restricted_mean_survival_time(table, 60.0)


def test_survival_summaries_and_grids_bad_input():
    df, time, event, _ = _survival_data("waltons")
    site = _sites(len(df))
    with pytest.raises(ValueError, match="give the cut points themselves"):
        kaplan_meier(df, time=time, event=event, clients=site, time_grid=5)
    for grid in ([0.0, 10.0], [10.0, 5.0], [np.nan], []):
        with pytest.raises(ValueError, match="positive, increasing cut points"):
            kaplan_meier(df, time=time, event=event, clients=site, time_grid=grid)
    with pytest.raises(ValueError, match="at_risk_times is for exact curves"):
        kaplan_meier(df, time=time, event=event, clients=site, time_grid=[10.0],
                     at_risk_times=[5.0])
    with pytest.raises(ValueError, match="at_risk_times must be"):
        kaplan_meier(df, time=time, event=event, clients=site, at_risk_times=[-1.0])
    with pytest.raises(ValueError, match="privacy must be None or SecureAggregation"):
        logrank_test(df, time=time, event=event, group="group", clients=site, privacy="yes")
    # differential privacy is a kind of secure aggregation: its noise must not be dropped
    from skfed.privacy import DifferentialPrivacy
    for analysis in (kaplan_meier, logrank_test):
        extra = {"group": "group"} if analysis is logrank_test else {}
        with pytest.raises(ValueError, match="no differential privacy"):
            analysis(df, time=time, event=event, clients=site, **extra,
                     privacy=DifferentialPrivacy(epsilon=1.0, delta=1e-6))
    table = kaplan_meier(df, time=time, event=event, clients=site)
    with pytest.raises(TypeError, match="takes the table skfed.stats.kaplan_meier returns"):
        median_survival(df)
    with pytest.raises(ValueError, match="t must be a positive, finite time"):
        restricted_mean_survival_time(table, -1.0)


def test_exact_table_gives_the_number_at_risk_at_round_times():
    df, time, event, _ = _survival_data("rossi")
    table = kaplan_meier(df, time=time, event=event, clients=_sites(len(df)))
    np.testing.assert_array_equal(table.at_risk_times, [0, 10, 20, 30, 40, 50])
    for t in table.at_risk_times:
        assert table.loc[t, "at_risk"] == (df[time] >= t).sum()
    chosen = kaplan_meier(df, time=time, event=event, clients=_sites(len(df)),
                          at_risk_times=[12.5, 3.0])
    np.testing.assert_array_equal(chosen.at_risk_times, [3.0, 12.5])
    assert chosen.loc[12.5, "at_risk"] == (df[time] >= 12.5).sum()
    _check_km(chosen, df[time], df[event])


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


# -- describe and crosstab ------------------------------------------------------
from skfed.stats import crosstab, describe  # noqa: E402
from skfed.stats._suppress import suppress, with_margins  # noqa: E402


def _table1_data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    site = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    df = pd.DataFrame({
        "age": np.round(rng.normal(60, 12, n)),  # many ties
        "bmi": rng.normal(27, 4, n) + 1e6 * (site == "c"),  # large offset at one site
        "dose": rng.exponential(2.0, n),
        "sex": rng.choice(["f", "m"], n),
        "smoker": rng.random(n) < 0.3,
        "stage": rng.choice(["I", "II", "III"], n),
    })
    df.loc[rng.random(n) < 0.1, "dose"] = np.nan
    df.loc[rng.random(n) < 0.05, "stage"] = None
    # a rare level at site "b" only: 2 rows
    rare = np.flatnonzero(site == "b")[:2]
    df.loc[rare, "stage"] = "IV"
    return df, site


NUMERIC, CATEGORICAL = ["age", "bmi", "dose"], ["sex", "smoker", "stage"]
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def _check_against_pandas(table, rows, group, site, *, shown_only=True):
    """Every shown cell of column (group, site) equals pandas on ``rows``."""
    column = table[(group, site)]
    checked = 0
    for c in NUMERIC:
        x = rows[c]
        expected = {"count": x.count(), "missing": x.isna().sum(), "mean": x.mean(),
                    "std": x.std()}
        expected.update({f"{100 * q:g}%": x.quantile(q) for q in QUANTILES})
        for stat, value in expected.items():
            got = column[(c, "", stat)]
            if np.isnan(got) and shown_only:
                continue
            if stat in ("mean", "std"):
                np.testing.assert_allclose(got, value, rtol=1e-12, err_msg=f"{c} {stat}")
            else:  # counts and quantiles: exactly pandas' numbers
                assert got == value, (c, stat, got, value)
            checked += 1
    for c in CATEGORICAL:
        counts = rows[c].value_counts()
        for (variable, level, stat), got in column.items():
            if variable != c or np.isnan(got):
                continue
            value = rows[c].isna().sum() if stat == "missing" else counts.get(level, 0)
            assert got == value, (c, level, stat, got, value)
            checked += 1
    return checked


def test_describe_equals_pandas_pooled_and_per_site():
    df, site = _table1_data()
    result = describe(df, clients=site, quantiles=QUANTILES, min_level_count=5, per_site=True)
    t = result.table
    assert _check_against_pandas(t, df, "all", "pooled") >= 30
    for s in "abc":
        assert _check_against_pandas(t, df[site == s], "all", s) >= 25
    assert t[("all", "pooled")][("N", "", "count")] == len(df)
    # nothing hidden when every count is allowed: then every cell is compared
    full = describe(FederatedDataset.from_arrays(df, clients=site), quantiles=QUANTILES,
                    min_level_count=1, per_site=True)
    assert not full.mask.to_numpy().any() and full.suppressed.empty
    n_cells = full.table.notna().to_numpy().sum()
    checked = sum(_check_against_pandas(full.table, df if s == "pooled" else df[site == s],
                                        "all", s, shown_only=False)
                  for s in ["a", "b", "c", "pooled"])
    assert checked + 4 == n_cells  # all cells but the N row


def test_describe_by_stratum_equals_pandas():
    df, site = _table1_data(seed=1)
    result = describe(df, by="sex", clients=site, quantiles=QUANTILES,
                      columns=NUMERIC + ["smoker", "stage"], per_site=True)
    t = result.table
    assert set(t.columns.get_level_values("group")) == {"all", "f", "m"}
    for level in ["f", "m"]:
        rows = df[df.sex == level]
        assert _check_against_pandas(t, rows, level, "pooled") >= 20
        for s in "abc":
            _check_against_pandas(t, rows[site[df.sex == level] == s], level, s)
        assert t[(level, "pooled")][("N", "", "count")] == len(rows)


def test_describe_suppresses_rare_level_and_its_complement():
    df, site = _table1_data()
    # the sites' released parts (privacy=None): each site suppresses its own cells
    result = describe(df, clients=site, columns=["stage", "age"], min_level_count=5,
                      per_site=True, privacy=None)
    t, mask, record = result.table, result.mask, result.suppressed
    # the 2 rows of level IV at site b: hidden there, and the pooled cell lacks b's part
    assert np.isnan(t[("all", "b")][("stage", "IV", "count")])
    assert np.isnan(t[("all", "pooled")][("stage", "IV", "count")])
    why = {(r.level, r.site): r.reason for r in record.itertuples()}
    assert why["IV", "b"] == "fewer than 5 rows at site 'b'"
    assert why["IV", "pooled"] == "not pooled: site 'b' suppressed its count"
    # complementary: another cell of site b's stage column is hidden too (else IV = N - rest)
    b_hidden = mask[("all", "b")].loc["stage"]
    assert b_hidden.sum() >= 2
    assert any(r.startswith("complementary at site 'b'") for r in record.reason)
    assert "suppressed" in result.note
    # every hidden cell is recorded, every recorded cell is hidden
    assert len(record) == int(mask.to_numpy().sum())
    # every pooled count shown is pandas' number; a hidden one lacks some site's part
    for (variable, level, stat), got in t[("all", "pooled")].items():
        if variable != "stage":
            continue
        value = df.stage.isna().sum() if stat == "missing" else (df.stage == level).sum()
        site_hidden = any(mask[("all", s)][(variable, level, stat)] for s in "abc")
        assert np.isnan(got) == site_hidden
        assert np.isnan(got) or got == value
    # no line (a site's levels with its total; a cell along the sites) has one hidden cell
    for s in ["a", "b", "c", "pooled"]:
        assert mask[("all", s)].loc["stage"].sum() != 1
    for row in mask.index:
        assert mask.loc[row, "all"].sum() != 1
    # age at the same sites is untouched and equal to pandas
    for s in "abc":
        assert not mask[("all", s)].loc["age"].any()
    assert "suppressed" in result.to_html()


def test_suppression_is_done_by_each_site():
    """The site function hides its own cells; the server only pools what it received."""
    from skfed.stats._site import site_describe

    df, site = _table1_data()
    data = FederatedDataset.from_arrays(df, clients=site)
    replies = data.map(site_describe, ["stage", "dose"], None, (0.5,), 5)
    b = replies[list(data.sites).index("b")]
    assert b["cells"][None, "stage"]["levels"]["IV"] is None
    hidden = {(x["column"], x["cell"]) for x in b["suppressed"]}
    assert ("stage", "IV") in hidden and len(hidden) >= 2
    assert all("at site 'b'" in x["reason"] for x in b["suppressed"])
    # a site whose numeric column has few values hides that count, its complement (the
    # missing count) and its statistics; a few missing values hide nothing
    # (tests/test_table1_compare.py)
    small = df.copy()
    rows_a = np.flatnonzero(site == "a")
    small.loc[rows_a[3:], "age"] = np.nan
    one = describe(small, clients=site, columns=["age"], min_level_count=5, per_site=True,
                   privacy=None)
    assert one.mask[("all", "a")].loc[("age", "", "missing")]
    for stat in ["count", "mean", "std", "50%"]:  # the statistics of a hidden count
        assert one.mask[("all", "a")].loc[("age", "", stat)]
        assert one.mask[("all", "pooled")].loc[("age", "", stat)]
    assert not one.mask[("all", "b")].loc["age"].any()


def test_suppression_leaves_no_line_with_one_hidden_cell():
    rng = np.random.default_rng(3)
    inner = rng.integers(0, 9, size=(4, 3, 5))
    table = with_margins(inner)
    mask, reasons = suppress(table, 5)
    assert ((table > 0) & (table < 5) <= mask).all()
    assert set(reasons) == {tuple(i) for i in np.argwhere(mask)}
    for axis in range(3):
        assert (mask.sum(axis=axis) != 1).all()
    assert mask.any() and not mask.all()


def test_crosstab_and_chi2_equal_pandas_and_scipy():
    from scipy.stats import chi2_contingency

    df, site = _table1_data()
    result = crosstab(df, "stage", "sex", clients=site, min_level_count=1, per_site=True)
    expected = pd.crosstab(df.stage, df.sex)
    pd.testing.assert_frame_equal(result.table, expected.astype(float), check_names=False)
    chi2, p, dof, exp = chi2_contingency(expected.to_numpy(), correction=False)
    np.testing.assert_allclose([result.chi2, result.p_value], [chi2, p], rtol=1e-12)
    assert result.dof == dof and result.n_missing == df.stage.isna().sum()
    for s in "abc":
        per_site = pd.crosstab(df.stage[site == s], df.sex[site == s])
        got = result.by_site.loc[s].iloc[:-1, :-1].loc[per_site.index]
        np.testing.assert_array_equal(got.to_numpy(), per_site.to_numpy())
    # with suppression at the sites: the rare level's cells are hidden, with complements
    # (the missing values are a level of each site's table), and the shown cells are
    # pandas' numbers; the chi-square test needs every pooled cell: not computed
    hidden = crosstab(df, "stage", "sex", clients=site, min_level_count=5, per_site=True)
    assert hidden.table.loc["IV"].isna().any()
    assert np.isnan(hidden.chi2) and "not computed" in hidden.note
    shown = hidden.table.notna().to_numpy()
    assert shown.sum() >= 3
    np.testing.assert_array_equal(hidden.table.to_numpy()[shown], expected.to_numpy()[shown])
    for s in ["a", "b", "c", "pooled"]:  # no line of a site's table has one hidden cell
        m = hidden.mask.loc[s].to_numpy()
        assert (m.sum(axis=0) != 1).all() and (m.sum(axis=1) != 1).all()
    assert hidden.suppressed.reason.str.contains("fewer than 5 rows at site 'b'").any()
    # without missing values and rare levels: the test on the suppressed table is scipy's
    full = df.dropna(subset=["stage"])
    keep = (full.stage != "IV").to_numpy()
    clean = crosstab(full[keep], "stage", "sex", clients=site[df.stage.notna()][keep])
    assert clean.suppressed.empty
    ref = chi2_contingency(pd.crosstab(full.stage[keep], full.sex[keep]), correction=False)
    np.testing.assert_allclose([clean.chi2, clean.p_value], ref[:2], rtol=1e-12)


def test_describe_and_crosstab_bad_input():
    df, site = _table1_data(n=100)
    with pytest.raises(ValueError, match="column 'weight'"):
        describe(df, clients=site, columns=["age", "weight"])
    with pytest.raises(ValueError, match="by column 'arm'"):
        describe(df, by="arm", clients=site)
    with pytest.raises(ValueError, match="quantiles"):
        describe(df, clients=site, quantiles=(0.5, 1.5))
    with pytest.raises(ValueError, match="min_level_count"):
        describe(df, clients=site, min_level_count=0)
    with pytest.raises(ValueError, match="no rows"):
        describe(df.iloc[:0], clients=np.array([]))
    with pytest.raises(ValueError, match="col column 'arm'"):
        crosstab(df, "sex", "arm", clients=site)
    with pytest.raises(ValueError, match="two levels"):
        crosstab(df.assign(one="x"), "sex", "one", clients=site)


@pytest.mark.parametrize("name", ["describe", "crosstab", "kaplan_meier", "logrank_test",
                                  "median_survival", "restricted_mean_survival_time"])
def test_public_functions_document_every_parameter(name):
    import inspect

    from sklearn.externals._numpydoc.docscrape import NumpyDocString

    import skfed.stats

    fn = getattr(skfed.stats, name)
    doc = NumpyDocString(inspect.getdoc(fn))
    documented = [n.strip() for p in doc["Parameters"] for n in p.name.split(",")]
    assert documented == list(inspect.signature(fn).parameters)
    assert doc["Returns"] and doc["Raises"] and doc["Summary"]


def test_kaplan_meier_per_site_through_subset():
    df, time, event, _ = _survival_data("rossi")
    site = _sites(len(df))
    data = FederatedDataset.from_arrays(df, clients=site)
    for s in data.sites:
        rows = df[site == s]
        _check_km(kaplan_meier(data.subset([s]), time=time, event=event), rows[time],
                  rows[event])


def test_group_with_missing_values_is_refused():
    df = load_waltons()
    df["group"] = df["group"].astype(object)
    df.loc[3, "group"] = None
    with pytest.raises(SiteError, match="group column 'group' has missing values"):
        logrank_test(df, time="T", event="E", group="group", clients=_sites(len(df)))


def test_kaplan_meier_with_events_at_time_zero():
    df = load_waltons()
    df.loc[[0, 5, 70], "T"] = 0.0
    table = kaplan_meier(df, time="T", event="E", clients=_sites(len(df)))
    assert table["events"].iloc[0] > 0
    _check_km(table, df["T"], df["E"])


@pytest.mark.filterwarnings("ignore:Port .* is already in use:UserWarning")
def test_same_numbers_with_rows_on_dask_workers():
    """The site functions run where the rows are (named in-process Dask workers)."""
    distributed = pytest.importorskip("distributed")
    df = load_rossi()
    site = np.array(["a", "b", "c"])[np.arange(len(df)) % 3]
    workers = {s: {"cls": distributed.Worker, "options": {"name": s, "nthreads": 1}}
               for s in "abc"}
    scheduler = {"cls": distributed.Scheduler,
                 "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    with distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(3)
        data = FederatedDataset.from_arrays(df, clients=site).scatter(
            client, placement={s: s for s in "abc"})
        assert data.resident
        pd.testing.assert_frame_equal(
            kaplan_meier(data, time="week", event="arrest", by="fin"),
            kaplan_meier(df, time="week", event="arrest", by="fin", clients=site))
        pd.testing.assert_frame_equal(
            describe(data, by="fin", columns=["age", "race", "prio"], per_site=True).table,
            describe(df, by="fin", columns=["age", "race", "prio"], clients=site,
                     per_site=True).table)
        assert (logrank_test(data, time="week", event="arrest", group="fin").statistic
                == logrank_test(df, time="week", event="arrest", group="fin",
                                clients=site).statistic)
        pd.testing.assert_frame_equal(
            crosstab(data, "race", "fin", per_site=True).by_site,
            crosstab(df, "race", "fin", clients=site, per_site=True).by_site)


def test_describe_by_suppresses_small_strata_everywhere():
    df, site = _table1_data()
    result = describe(df, by="stage", clients=site, columns=["age", "sex"], min_level_count=5,
                      per_site=True, privacy=None)  # the sites' released parts
    t, mask = result.table, result.mask
    n_row = ("N", "", "count")
    # stratum IV: 2 rows at site b (and pooled): hidden, with their statistics
    assert np.isnan(t[("IV", "b")][n_row]) and np.isnan(t[("IV", "pooled")][n_row])
    for stat in ["count", "mean", "std", "50%"]:
        assert mask[("IV", "b")][("age", "", stat)]
    # the table of stratum sizes (sites x strata with margins) has no line with one hidden cell
    groups = [g for g in t.columns.get_level_values("group").unique() if g != "all"] + ["all"]
    sizes = np.array([[mask[(g, s)][n_row] for g in groups] for s in ["a", "b", "c", "pooled"]])
    assert sizes.any()
    assert (sizes.sum(axis=0) != 1).all() and (sizes.sum(axis=1) != 1).all()
    # shown stratum sizes equal pandas
    for g in groups[:-1]:
        for s in ["a", "b", "c"]:
            if not mask[(g, s)][n_row]:
                assert t[(g, s)][n_row] == ((df.stage.fillna("<missing>") == g) & (site == s)).sum()
