"""The Aalen-Johansen cumulative incidence over sites: equal to lifelines'
``AalenJohansenFitter`` on the pooled rows where no two causes share a time, and to
R's multi-state ``survfit`` (numbers stored below) on tied times, which lifelines
jitters at random; masked counts under secure aggregation, differential privacy
refused, cut points approximate and labelled so.
"""

import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("lifelines")

from lifelines import AalenJohansenFitter  # noqa: E402

from skfed import FederatedDataset  # noqa: E402
from skfed.privacy import DifferentialPrivacy, SecureAggregation  # noqa: E402
from skfed.stats import FedAalenJohansen  # noqa: E402

#: R 4.2.2 (survival 3.5.3) on scikit-survival's load_bmt (35 rows: ftime, status):
#:   fit <- survfit(Surv(ftime, factor(status)) ~ 1, data = bmt)
#:   for (i in seq_along(fit$time)) cat(sprintf("(%.17g, %d, %.17g, %.17g, %.17g, %.17g),\n",
#:       fit$time[i], fit$n.risk[i, 1], fit$pstate[i, 2], fit$pstate[i, 3],
#:       fit$std.err[i, 2], fit$std.err[i, 3]))
#: columns: time, n.risk, CIF of cause 1, of cause 2, their std.err
R_BMT = np.array([
    (0, 35, 0.028571428571428571, 0.028571428571428571, 0.028160307445976068,
     0.028160307445976068),
    (1, 33, 0.057142857142857141, 0.057142857142857141, 0.039234660704319732,
     0.039234660704319732),
    (2, 31, 0.057142857142857141, 0.085714285714285715, 0.039234660704319732,
     0.047318781212047169),
    (3, 29, 0.14581280788177339, 0.11527093596059114, 0.06030700400023796,
     0.054239573710377062),
    (4, 25, 0.20492610837438424, 0.14482758620689656, 0.069106285929369529,
     0.059940534235299665),
    (5, 21, 0.20492610837438424, 0.17579169598874034, 0.069106285929369529,
     0.065273350806110228),
    (7, 20, 0.20492610837438424, 0.23771991555242789, 0.069106285929369529,
     0.073570851461785727),
    (8, 17, 0.23771163637868942, 0.27050544355673306, 0.073605194920307843,
     0.077329011249970145),
    (9, 14, 0.23771163637868942, 0.30563279498991713, 0.073605194920307843,
     0.081116667573874104),
    (10, 13, 0.23771163637868942, 0.34076014642310126, 0.073605194920307843,
     0.084151923681889951),
    (12, 12, 0.27283898781187355, 0.34076014642310126, 0.078090687882911278,
     0.084151923681889951),
    (13, 11, 0.27283898781187355, 0.37588749785628539, 0.078090687882911278,
     0.086514007444544447),
    (14, 10, 0.27283898781187355, 0.41101484928946952, 0.078090687882911278,
     0.088256985177075892),
    (22, 9, 0.27283898781187355, 0.44614220072265365, 0.078090687882911278,
     0.089417068307221556),
    (26, 8, 0.27283898781187355, 0.48126955215583778, 0.078090687882911278,
     0.090016795657532137),
    (32, 7, 0.27283898781187355, 0.48126955215583778, 0.078090687882911278,
     0.090016795657532137),
    (35, 6, 0.27283898781187355, 0.48126955215583778, 0.078090687882911278,
     0.090016795657532137),
    (67, 4, 0.27283898781187355, 0.48126955215583778, 0.078090687882911278,
     0.090016795657532137),
    (68, 3, 0.27283898781187355, 0.48126955215583778, 0.078090687882911278,
     0.090016795657532137),
    (70, 2, 0.27283898781187355, 0.48126955215583778, 0.078090687882911278,
     0.090016795657532137),
    (72, 1, 0.27283898781187355, 0.48126955215583778, 0.078090687882911278,
     0.090016795657532137),
])


def bmt_frame():
    from sksurv.datasets import load_bmt

    X, y = load_bmt()
    return pd.DataFrame({"ftime": y["ftime"], "status": y["status"],
                         "dis": X["dis"].astype(int).to_numpy(),
                         "site": np.arange(len(y)) % 3})


def untied(n=300, seed=0):
    """Times to six decimals (no two rows share one; a CSV file keeps them exactly), three
    causes' codes, three sites."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"time": np.round(rng.exponential(10.0, n), 6),
                         "event": rng.choice([0, 1, 2], n, p=[0.3, 0.4, 0.3]),
                         "site": np.arange(n) % 3})


def check_lifelines(aj, durations, events, cause):
    """Every number of lifelines' fit on the pooled rows, at every time of its table."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # lifelines would warn if it jittered
        ref = AalenJohansenFitter().fit(durations, events, event_of_interest=cause)
    index = ref.cumulative_density_.index
    ours = aj.cumulative_density_.reindex(index, method="ffill")
    assert list(ours.columns) == list(ref.cumulative_density_.columns) == [f"CIF_{cause}"]
    np.testing.assert_allclose(ours, ref.cumulative_density_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(aj.variance_.reindex(index, method="ffill"), ref.variance_,
                               rtol=0, atol=1e-10)
    # lifelines labels the interval's ends the wrong way round: compare them sorted
    interval = aj.confidence_interval_.reindex(index, method="ffill").to_numpy()
    np.testing.assert_allclose(interval, np.sort(ref.confidence_interval_.to_numpy(), 1),
                               rtol=0, atol=1e-10)
    drawn = ~np.isnan(interval[:, 0])  # lifelines' interval where F = 0 is nan, as ours
    np.testing.assert_array_equal(drawn, ours.to_numpy().ravel() > 0)
    assert (interval[drawn, 0] <= interval[drawn, 1]).all()
    table = ref.event_table.loc[aj.event_table_.index]
    np.testing.assert_array_equal(aj.event_table_["at_risk"], table["at_risk"])
    np.testing.assert_array_equal(aj.event_table_["observed"], table["observed"])
    np.testing.assert_array_equal(aj.event_table_[f"observed_{cause}"],
                                  table[f"observed_{cause}"])


@pytest.mark.parametrize("cause", [1, 2])
def test_untied_times_equal_lifelines(cause):
    df = untied()
    aj = FedAalenJohansen().fit(df, duration_col="time", event_col="event",
                                event_of_interest=cause, clients="site")
    check_lifelines(aj, df["time"], df["event"], cause)
    assert not aj.approximate_ and aj.note_ == "" and aj.event_of_interest_ == cause
    # the same from arrays, and from a FederatedDataset
    arrays = FedAalenJohansen().fit(df["time"].to_numpy(), df["event"].to_numpy(),
                                    event_of_interest=cause, clients=df["site"].to_numpy())
    pd.testing.assert_frame_equal(arrays.cumulative_density_, aj.cumulative_density_)
    data = FederatedDataset.from_arrays(df[["time", "event"]], None, df["site"].to_numpy())
    again = FedAalenJohansen().fit(data, duration_col="time", event_col="event",
                                   event_of_interest=cause)
    pd.testing.assert_series_equal(again.variance_, aj.variance_)


def test_tied_times_equal_r_survfit():
    """bmt's times are whole days, tied across causes (and two events at time 0):
    the estimate and R's standard error (the infinitesimal jackknife) equal R's."""
    df = bmt_frame()
    for cause in (1, 2):
        aj = FedAalenJohansen().fit(df, duration_col="ftime", event_col="status",
                                    event_of_interest=cause, clients="site")
        times = R_BMT[:, 0]
        np.testing.assert_allclose(
            aj.cumulative_density_.reindex(times, method="ffill").to_numpy().ravel(),
            R_BMT[:, 1 + cause], rtol=0, atol=1e-12)
        np.testing.assert_allclose(
            np.sqrt(aj.variance_ij_.reindex(times, method="ffill").to_numpy()),
            R_BMT[:, 3 + cause], rtol=0, atol=1e-12)
        at_event = np.isin(times, aj.event_table_.index)
        np.testing.assert_array_equal(aj.event_table_.loc[times[at_event], "at_risk"],
                                      R_BMT[at_event, 1])


def test_masked_counts_are_the_same_numbers():
    df = bmt_frame()
    plain = FedAalenJohansen().fit(df, duration_col="ftime", event_col="status",
                                   event_of_interest=1, clients="site")
    masked = FedAalenJohansen(privacy=SecureAggregation()).fit(
        df, duration_col="ftime", event_col="status", event_of_interest=1, clients="site")
    pd.testing.assert_frame_equal(masked.cumulative_density_, plain.cumulative_density_,
                                  check_exact=True)
    pd.testing.assert_frame_equal(masked.event_table_, plain.event_table_, check_exact=True)


def test_differential_privacy_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="FedAalenJohansen refuses differential privacy: it "
                                         "needs exact counts"):
        FedAalenJohansen(privacy=DifferentialPrivacy(epsilon=1.0)).fit(
            bmt_frame(), duration_col="ftime", event_col="status", event_of_interest=1,
            clients="site")


def test_cut_points_give_the_estimate_of_rounded_times_labelled_approximate():
    df = untied()
    cuts = np.array([2.0, 5.0, 10.0, 20.0])
    aj = FedAalenJohansen(time_grid=cuts).fit(df, duration_col="time", event_col="event",
                                              event_of_interest=1, clients="site")
    assert aj.approximate_ and "Approximate" in aj.note_
    np.testing.assert_array_equal(aj.time_grid_, cuts)
    np.testing.assert_array_equal(aj.cumulative_density_.index, np.r_[0.0, cuts])
    # the exact estimate of the times rounded up to their cut point (those beyond the
    # last censored past it) is the same curve on the cut points
    k = np.searchsorted(cuts, df["time"], side="left")
    rounded = df.assign(time=np.append(cuts, 100.0)[k],
                        event=np.where(k < cuts.size, df["event"], 0))
    exact = FedAalenJohansen().fit(rounded, duration_col="time", event_col="event",
                                   event_of_interest=1, clients="site")
    np.testing.assert_allclose(aj.cumulative_density_,
                               exact.cumulative_density_.loc[np.r_[0.0, cuts]],
                               rtol=0, atol=1e-14)
    np.testing.assert_allclose(aj.variance_ij_, exact.variance_ij_.loc[np.r_[0.0, cuts]],
                               rtol=0, atol=1e-14)
    # a cut point past every row repeats the last estimate and its variances
    last = df["time"].max()
    past = FedAalenJohansen(time_grid=np.r_[cuts, last, 2 * last]).fit(
        df, duration_col="time", event_col="event", event_of_interest=1, clients="site")
    for attribute in ("cumulative_density_", "variance_", "variance_ij_"):
        values = np.asarray(getattr(past, attribute)).ravel()
        assert np.isfinite(values[-1]) and values[-1] == values[-2], attribute


@pytest.mark.parametrize("kwargs, message", [
    ({"event_of_interest": 0}, "positive integer code of a cause"),
    ({"event_of_interest": 1.5}, "positive integer code of a cause"),
    ({"event_of_interest": 1, "duration_col": "nope"}, "duration column 'nope' is not"),
    ({"event_of_interest": 1, "event_col": None}, "name the table's columns"),
])
def test_bad_input_is_named(kwargs, message):
    args = {"duration_col": "ftime", "event_col": "status", "clients": "site", **kwargs}
    with pytest.raises(ValueError, match=message):
        FedAalenJohansen().fit(bmt_frame(), **args)


def test_bad_event_codes_and_times_are_named():
    df = bmt_frame()
    with pytest.raises(ValueError, match="codes other than 0"):
        FedAalenJohansen().fit(df.assign(status=df["status"] - 0.5), duration_col="ftime",
                               event_col="status", event_of_interest=1, clients="site")
    with pytest.raises(ValueError, match="negative or infinite times"):
        FedAalenJohansen().fit(df.assign(ftime=-df["ftime"] - 1), duration_col="ftime",
                               event_col="status", event_of_interest=1, clients="site")
    with pytest.raises(ValueError, match="same length"):
        FedAalenJohansen().fit(df["ftime"], df["status"][:-1], event_of_interest=1,
                               clients=df["site"].to_numpy())


def test_plot_draws_each_cause_and_captions_an_approximate_curve():
    pytest.importorskip("matplotlib")
    from skfed.plotting import plot_cumulative_incidence

    df = bmt_frame()
    fits = [FedAalenJohansen().fit(df, duration_col="ftime", event_col="status",
                                   event_of_interest=c, clients="site") for c in (1, 2)]
    fig = plot_cumulative_incidence(fits, labels=["relapse", "death"])
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["relapse", "death"]
    coarse = FedAalenJohansen(time_grid=[10.0, 30.0]).fit(
        df, duration_col="ftime", event_col="status", event_of_interest=1, clients="site")
    fig = plot_cumulative_incidence(coarse)
    assert any("Approximate" in t.get_text() for t in fig.texts)
    with pytest.raises(TypeError, match="fitted FedAalenJohansen"):
        plot_cumulative_incidence(df)
