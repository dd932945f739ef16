"""Effects on survival under IPW weights (skfed.causal.ipw_survival): the weighted
Kaplan-Meier curves per arm equal lifelines' ``KaplanMeierFitter(weights=...)``, the
RMST the area under them (lifelines' ``restricted_mean_survival_time``), and the hazard
ratio lifelines' weighted ``CoxPHFitter(robust=True)``, on the pooled rows with the
weights of the pooled propensity model (statsmodels); in this process, on Dask and at
site services, under the sites' event-time rule, masked, and DP refused."""

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from skfed import FederatedDataset
from skfed.causal import FedIPW, ipw_survival

lifelines = pytest.importorskip("lifelines")

COVARIATES = ["age", "bmi", "male"]


def _frame(n=900, seed=4):
    """Continuous times (no ties: lifelines' robust variance depends on the row order
    at tied times, tests/test_cox.py), three sites with about 35%, 45% and 55% treated."""
    rng = np.random.default_rng(seed)
    site = np.arange(n) % 3
    age, bmi = rng.normal(size=n), rng.normal(size=n)
    male = (rng.random(n) < 0.5).astype(float)
    shift = np.array([-0.6, -0.1, 0.4])[site]
    a = (rng.random(n) < 1 / (1 + np.exp(-(shift + 0.7 * age - 0.4 * male)))).astype(float)
    T = rng.exponential(1 / np.exp(0.6 * age - 0.5 * a + 0.3 * male))
    C = rng.exponential(2.0, n)
    age, bmi = np.round(age, 6), np.round(bmi, 6)
    frame = pd.DataFrame({"age": age, "bmi": bmi, "male": male, "treated": a,
                          "t": np.round(np.minimum(T, C), 8), "e": (T <= C).astype(float)})
    assert frame["t"].nunique() == n  # eight decimals: a CSV at a site reads them back exact
    frame["y"] = frame["e"]  # the outcome FedIPW's fit reads (its means are not used here)
    return frame, site


def _weights(frame, estimand="ATE", trim=None):
    """The estimand's weights from statsmodels' logistic fit on the pooled rows."""
    Z = sm.add_constant(frame[COVARIATES])
    e = sm.GLM(frame["treated"], Z, family=sm.families.Binomial()).fit(tol=1e-12).predict(Z)
    a = frame["treated"].to_numpy()
    w1, w0 = {"ATE": (1 / e, 1 / (1 - e)), "ATT": (1.0 + 0 * e, e / (1 - e))}[estimand]
    w = np.where(a == 1, w1, w0)
    if trim is not None:
        w = np.where((e >= trim[0]) & (e <= trim[1]), w, 0.0)
    return w


def _fit(data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # extreme-weight counts
        return FedIPW(balance=False, **kw).fit(data, treatment="treated",
                                               covariates=COVARIATES)


def _lifelines(frame, w, tau):
    from lifelines import CoxPHFitter, KaplanMeierFitter
    from lifelines.utils import restricted_mean_survival_time

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lifelines' note on non-integer weights
        for arm in (1, 0):
            rows = (frame["treated"] == arm).to_numpy() & (w > 0)
            km = KaplanMeierFitter().fit(frame["t"][rows], frame["e"][rows], weights=w[rows])
            out[arm] = (km, restricted_mean_survival_time(km, t=tau))
        df = frame[["t", "e", "treated"]].assign(w=w)[w > 0]
        out["cox"] = CoxPHFitter().fit(df, "t", "e", weights_col="w", robust=True,
                                       fit_options={"precision": 1e-14})
    return out


def _assert_equal_lifelines(result, frame, w):
    ref = _lifelines(frame, w, result.tau)
    for arm in (1, 0):
        km = ref[arm][0]
        table = km.event_table
        times = table.index[table["observed"] > 0].to_numpy()
        ours = result.curves.loc[arm]
        np.testing.assert_allclose(ours.index[1:], times, rtol=0, atol=0)
        np.testing.assert_allclose(ours["at_risk"].iloc[1:], table.loc[times, "at_risk"],
                                   rtol=1e-12)
        theirs = km.survival_function_.iloc[:, 0].loc[times].to_numpy()
        s = ours["survival"].to_numpy()[1:]
        # lifelines' last step, where every row at risk has the event, is 1 - d/n of two
        # rounded sums (not 0): compare it apart
        last = ours["events"].iloc[1:].to_numpy() >= ours["at_risk"].iloc[1:].to_numpy()
        np.testing.assert_allclose(s[~last], theirs[~last], rtol=1e-12, atol=1e-14)
        assert np.all(s[last] == 0)
    np.testing.assert_allclose(result.rmst["rmst"].iloc[:2], [ref[1][1], ref[0][1]],
                               rtol=1e-12)
    cox = ref["cox"]
    assert np.log(result.hazard_ratio) == pytest.approx(cox.params_["treated"], rel=1e-9)
    assert result.std_err == pytest.approx(cox.standard_errors_["treated"], rel=1e-9)


@pytest.mark.parametrize("kw", [{}, {"estimand": "ATT", "trim": (0.2, 0.8)}],
                         ids=["ATE", "ATT-trimmed"])
def test_weighted_curves_rmst_and_cox_equal_lifelines(kw):
    frame, site = _frame()
    data = FederatedDataset.from_arrays(frame.drop(columns=["y"]), frame["y"].to_numpy(),
                                        site)
    ipw = _fit(data, **kw)
    result = ipw_survival(ipw, data, time="t", event="e")
    w = _weights(frame, kw.get("estimand", "ATE"), kw.get("trim"))
    if "trim" in kw:  # the trim leaves out events (weight 0: no step of the curve)
        assert ((w == 0) & (frame["e"] == 1)).sum() > 10
    _assert_equal_lifelines(result, frame, w)
    assert not result.approximate and "held fixed" in result.note
    tau = 1.5
    short = ipw_survival(ipw, data, time="t", event="e", tau=tau)
    ref = _lifelines(frame, w, tau)
    np.testing.assert_allclose(short.rmst["rmst"], [ref[1][1], ref[0][1],
                                                    ref[1][1] - ref[0][1]], rtol=1e-12)


def test_cut_points_give_an_approximate_life_table_and_masked_sums_the_same():
    from skfed.privacy import DifferentialPrivacy, SecureAggregation

    frame, site = _frame()
    data = FederatedDataset.from_arrays(frame.drop(columns=["y"]), frame["y"].to_numpy(),
                                        site)
    ipw = _fit(data)
    cuts = [0.25, 0.5, 1.0, 2.0]
    table = ipw_survival(ipw, data, time="t", event="e", time_grid=cuts)
    assert table.approximate and "Approximate" in table.note and table.tau == 2.0
    w = _weights(frame)
    # the weighted actuarial table by hand on the pooled rows
    for arm in (1, 0):
        rows = (frame["treated"] == arm).to_numpy()
        k = np.searchsorted(cuts, frame["t"][rows], side="left")
        d = np.bincount(k, weights=w[rows] * frame["e"][rows], minlength=5)
        r = np.bincount(k, weights=w[rows], minlength=5)
        n = r.sum() - np.concatenate([[0], np.cumsum(r)[:-1]])
        s = np.concatenate([[1], np.cumprod(1 - d / (n - (r - d) / 2))[:-1]])
        np.testing.assert_allclose(table.curves.loc[arm]["survival"], s, rtol=1e-12)
    plain = ipw_survival(ipw, data, time="t", event="e")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the masked Cox fit's stop, below
        masked = ipw_survival(ipw, data, time="t", event="e", privacy=SecureAggregation())
    pd.testing.assert_frame_equal(masked.curves, plain.curves, rtol=1e-10)
    # FedCoxPH's masked Newton stops at its tol (here 4e-10 relative on the hazard
    # ratio); on other rows it stopped at the masked sums' precision (2.7e-7, with a
    # ConvergenceWarning), a limit of the Cox fit's masked rounds, not of the weights
    assert masked.hazard_ratio == pytest.approx(plain.hazard_ratio, rel=1e-8)
    with pytest.raises(ValueError, match="differential privacy is refused here because"):
        ipw_survival(ipw, data, time="t", event="e", privacy=DifferentialPrivacy(epsilon=1))


def test_bad_input_is_named():
    frame, site = _frame(n=300)
    data = FederatedDataset.from_arrays(frame.drop(columns=["y"]), frame["y"].to_numpy(),
                                        site)
    with pytest.raises(ValueError, match="takes a fitted FedIPW"):
        ipw_survival(FedIPW(), data, time="t", event="e")
    ipw = _fit(data)
    with pytest.raises(ValueError, match="no column 'when'"):
        ipw_survival(ipw, data, time="when", event="e")
    with pytest.raises(ValueError, match="tau must be a positive"):
        ipw_survival(ipw, data, time="t", event="e", tau=-1)


def _site_frames(frame, site):
    from ._sites import SITES

    return {name: frame[site == k].reset_index(drop=True) for k, name in enumerate(SITES)}


@pytest.mark.slow
def test_the_three_homes_and_the_event_time_rule(tmp_path):
    """The same numbers in this process, on Dask and at site services that allow event
    times, where every weighted number passes the dominance rule: an exact curve's
    weighted events at a time of few events is a few rows' weights (their propensity
    scores) and is refused, the table on cut points is not; where a site does not allow
    event times, the exact curves are refused naming the way out (time_grid=)."""
    pytest.importorskip("grpc")
    from skfed.sites import SiteRefusal

    from ._homes import homes
    from ._sites import services_of

    frame, site = _frame(n=1500)
    frames = _site_frames(frame, site)
    policy = "min_rows = 10\nallow_event_times = true"
    results, grids = {}, {}
    with homes(tmp_path / "open", frames, target="y", policy=policy) as data:
        for home, dataset in data.items():
            ipw = _fit(dataset)
            grids[home] = ipw_survival(ipw, dataset, time="t", event="e",
                                       time_grid=[0.25, 0.5, 1.0])
            if home == "site-service":
                with pytest.raises(SiteRefusal, match="dominated") as info:
                    ipw_survival(ipw, dataset, time="t", event="e")
                assert info.value.rule == "dominance"
                continue
            results[home] = ipw_survival(ipw, dataset, time="t", event="e")
    pd.testing.assert_frame_equal(results["dask"].curves, results["in-process"].curves,
                                  rtol=1e-12)
    for home in ("dask", "site-service"):
        pd.testing.assert_frame_equal(grids[home].curves, grids["in-process"].curves,
                                      rtol=1e-12)
        assert grids[home].hazard_ratio == pytest.approx(
            grids["in-process"].hazard_ratio, rel=1e-10)
        assert grids[home].std_err == pytest.approx(grids["in-process"].std_err,
                                                    rel=1e-10)
    _assert_equal_lifelines(results["dask"], pd.concat(
        frames.values(), ignore_index=True), _weights(pd.concat(frames.values(),
                                                                ignore_index=True)))
    with services_of(tmp_path / "closed", list(frames.values()), target="y") as data:
        ipw = _fit(data)
        with pytest.raises(SiteRefusal, match="time_grid=") as info:
            ipw_survival(ipw, data, time="t", event="e")
        assert info.value.rule == "allow_event_times"
        table = ipw_survival(ipw, data, time="t", event="e", time_grid=[0.25, 0.5, 1.0])
    pooled = pd.concat(frames.values(), ignore_index=True)
    local_data = FederatedDataset.from_arrays(pooled.drop(columns=["y"]),
                                              pooled["y"].to_numpy(), np.repeat(
                                                  list(frames), [len(f) for f in frames.values()]))
    local = ipw_survival(_fit(local_data), local_data, time="t", event="e",
                         time_grid=[0.25, 0.5, 1.0])
    assert table.approximate
    pd.testing.assert_frame_equal(table.curves, local.curves, rtol=1e-12)


@pytest.mark.slow
def test_sites_requiring_secure_aggregation_take_masked_counts_only(tmp_path):
    pytest.importorskip("grpc")
    from skfed.privacy import SecureAggregation
    from skfed.sites import SiteRefusal

    from ._sites import SITES, services_of

    frame, site = _frame(n=1500)
    frames = list(_site_frames(frame, site).values())
    policy = ('min_rows = 10\nallow_event_times = true\nrequire = ["secure_aggregation"]\n'
              "consortium = [" + ", ".join(f'"{s}"' for s in SITES) + "]")
    local_data = FederatedDataset.from_arrays(frame.drop(columns=["y"]),
                                              frame["y"].to_numpy(), site)
    local = ipw_survival(_fit(local_data), local_data, time="t", event="e")
    with services_of(tmp_path, frames, policy=policy, target="y") as data:
        ipw = _fit(data, privacy=SecureAggregation())
        with pytest.raises(SiteRefusal) as info:
            ipw_survival(ipw, data, time="t", event="e")
        assert info.value.rule == "require"
        masked = ipw_survival(ipw, data, time="t", event="e", cox=False,
                              privacy=SecureAggregation())
        # FedCoxPH's setup releases the weights' sums in the clear: refused by the rule
        with pytest.raises(SiteRefusal) as info:
            ipw_survival(ipw, data, time="t", event="e", privacy=SecureAggregation())
        assert info.value.rule == "require"
    pd.testing.assert_frame_equal(masked.curves, local.curves, rtol=1e-10)
    pd.testing.assert_frame_equal(masked.rmst, local.rmst, rtol=1e-10)
    assert np.isnan(masked.hazard_ratio) and masked.cox is None
