"""compare_two_stage for the causal estimators: each site's own IPW effect equals
delicatessen's ``ee_ipw`` (Hajek) on that site's rows, their meta-analysis equals
statsmodels' ``combine_effects`` (DerSimonian-Laird), beside the one-stage answer; a site
without treated rows is excluded saying why; secure aggregation refused saying why."""

import numpy as np
import pandas as pd
import pytest

from skfed.causal import FedAIPW, FedIPW, compare_two_stage

delicatessen = pytest.importorskip("delicatessen")


def _data(n=1600, seed=7, empty_site=False):
    rng = np.random.default_rng(seed)
    site = np.arange(n) % 4
    X = rng.normal(size=(n, 2))
    shift = np.array([-0.8, -0.2, 0.3, 0.7])[site]
    a = (rng.random(n) < 1 / (1 + np.exp(-(shift + 0.8 * X[:, 0])))).astype(float)
    if empty_site:
        a[site == 3] = 0.0
    y = 1 + (1.5 + 0.5 * site) * a + X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=n)
    return pd.DataFrame(X, columns=["age", "bmi"]), a, y, site


def _site_ipw(X, a, y):
    from delicatessen import MEstimator
    from delicatessen.estimating_equations import ee_ipw

    W = np.column_stack([np.ones(len(a)), X])
    m = MEstimator(lambda theta: ee_ipw(theta, y, a, W, weight_type="hajek"),
                   init=[0.0] * (3 + W.shape[1]))
    m.estimate(solver="lm", tolerance=1e-13, deriv_method="exact")
    return m.theta[0], m.variance[0, 0]


def test_per_site_effects_and_their_meta_analysis_equal_the_references():
    from statsmodels.stats.meta_analysis import combine_effects

    X, a, y, site = _data()
    result = compare_two_stage(FedIPW(), X, a, y, clients=site, method="dl")
    reference = [_site_ipw(X[site == k].to_numpy(), a[site == k], y[site == k])
                 for k in range(4)]
    effects, variances = np.array(reference).T
    np.testing.assert_allclose(result.per_site["effect"], effects, rtol=1e-9)
    np.testing.assert_allclose(result.per_site["std_err"] ** 2, variances, rtol=1e-6)
    sm = combine_effects(effects, variances, method_re="dl")
    table = sm.summary_frame()
    np.testing.assert_allclose(result.table.loc["two-stage (fixed effect)", "estimate"],
                               table.loc["fixed effect", "eff"], rtol=1e-9)
    np.testing.assert_allclose(result.table.loc["two-stage (random effects)", "estimate"],
                               table.loc["random effect", "eff"], rtol=1e-9)
    np.testing.assert_allclose(result.table.loc["two-stage (random effects)", "std_err"],
                               table.loc["random effect", "sd_eff"], rtol=1e-6)
    one = FedIPW().fit(X, a, y, clients=site)
    assert result.table.loc["one-stage", "estimate"] == pytest.approx(one.effect_, rel=1e-12)
    assert result.tau2 > 0 and not result.excluded  # the sites' effects differ by design
    assert "one-stage" in repr(result)


def test_a_site_without_treated_rows_is_excluded_saying_why_and_aipw_runs():
    X, a, y, site = _data(empty_site=True)
    result = compare_two_stage(FedAIPW(), X, a, y, clients=site)
    assert list(result.excluded) == [3] and list(result.per_site.index) == [0, 1, 2]
    assert result.excluded[3]


def test_refusals_name_the_reason():
    from skfed.privacy import SecureAggregation

    X, a, y, site = _data(n=400)
    with pytest.raises(ValueError, match="refused under secure aggregation: a per-site "
                                         "effect is that site's own sums"):
        compare_two_stage(FedIPW(privacy=SecureAggregation()), X, a, y, clients=site)
    with pytest.raises(ValueError, match="takes a FedIPW or FedAIPW"):
        compare_two_stage(object(), X, a, y, clients=site)


@pytest.mark.slow
def test_through_site_services(tmp_path):
    """Each site service answers its own analysis (plain sums, under its rules): the same
    per-site effects, meta-analysis and one-stage answer as in this process."""
    pytest.importorskip("grpc")
    from ._sites import services_of

    X, a, y, site = _data(n=1800)
    X, a, y, site = X[site < 3], a[site < 3], y[site < 3], site[site < 3]
    local = compare_two_stage(FedIPW(), X, a, y, clients=site)
    frame = X.assign(treated=a, y=y)
    frames = [frame[site == k].reset_index(drop=True) for k in range(3)]
    with services_of(tmp_path, frames, target="y") as data:
        remote = compare_two_stage(FedIPW(), data, "treated", covariates=["age", "bmi"])
    np.testing.assert_allclose(remote.per_site.to_numpy(dtype=float),
                               local.per_site.to_numpy(dtype=float), rtol=1e-10)
    pd.testing.assert_frame_equal(remote.table, local.table, rtol=1e-10)
