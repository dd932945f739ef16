"""skfed.causal in the three homes of the rows (this process, Dask workers, site services
over gRPC with mutual TLS): the same numbers in each; where the sites require secure
aggregation the sums go masked (plain sums refused, naming the rule), and where they
require differential privacy the analysis is refused, saying why."""

import warnings

import numpy as np
import pandas as pd
import pytest

from skfed.causal import FedAIPW, FedIPW

from ._homes import homes
from ._sites import SITES, services_of

pytest.importorskip("grpc")
pytest.importorskip("cryptography")


def _frames(n=2400, seed=3):
    """Three sites: 10%, 40% and 80% treated."""
    rng = np.random.default_rng(seed)
    site = np.arange(n) % 3
    x = rng.normal(size=(n, 2))
    male = (rng.random(n) < 0.5).astype(float)
    shift = np.array([-2.4, -0.3, 1.6])[site]
    a = (rng.random(n) < 1 / (1 + np.exp(-(shift + 0.8 * x[:, 0] - 0.4 * male)))).astype(float)
    y = 1 + 2 * a + x[:, 0] + 0.5 * x[:, 1] + rng.normal(size=n)
    frame = pd.DataFrame({"age": x[:, 0], "bmi": x[:, 1], "male": male, "treated": a, "y": y})
    return {name: frame[site == k].reset_index(drop=True) for k, name in enumerate(SITES)}


def _fit_all(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the extreme-weight counts
        return [FedIPW().fit(data, treatment="treated"),
                FedIPW("ATT", trim=(0.02, 0.98)).fit(data, treatment="treated"),
                FedAIPW().fit(data, treatment="treated")]


def _same(fits, reference):
    for est, ref in zip(fits, reference):
        np.testing.assert_allclose(est.params_, ref.params_, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(est.cov_params_, ref.cov_params_, rtol=1e-10,
                                   atol=1e-15)
        pd.testing.assert_frame_equal(est.balance_, ref.balance_, rtol=1e-10)
        for arm in ("treated", "control"):
            np.testing.assert_array_equal(est.overlap_[arm], ref.overlap_[arm])


def test_the_three_homes_give_the_same_numbers(tmp_path):
    frames = _frames()
    with homes(tmp_path, frames, target="y") as data:
        reference = _fit_all(data["in-process"])
        for home in ("dask", "site-service"):
            _same(_fit_all(data[home]), reference)
        boosted = [_boosted(data[home]) for home in ("in-process", "dask")]
        np.testing.assert_allclose(boosted[1].params_, boosted[0].params_, rtol=1e-12)
        with pytest.raises(ValueError, match="a site service receives an estimator's "
                                             "parameters, never a fitted model"):
            _boosted(data["site-service"])
    assert reference[0].n_clients_ == 3 and reference[0].n_samples_ == 2400


def _boosted(data):
    from skfed import FedHistGradientBoostingClassifier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return FedIPW(propensity=FedHistGradientBoostingClassifier(max_iter=10),
                      balance=False).fit(data, treatment="treated")


def test_sites_requiring_secure_aggregation_take_masked_sums_only(tmp_path):
    from skfed.privacy import SecureAggregation
    from skfed.sites import SiteRefusal

    frames = list(_frames().values())
    pooled = pd.concat(frames, ignore_index=True)
    clients = np.repeat(np.arange(3), [len(f) for f in frames])
    local = _fit_all_from(pooled, clients)
    policy = ('min_rows = 10\nrequire = ["secure_aggregation"]\nconsortium = ['
              + ", ".join(f'"{s}"' for s in SITES) + "]")
    with services_of(tmp_path, frames, policy=policy, target="y") as data:
        with pytest.raises(SiteRefusal) as info:
            FedIPW().fit(data, treatment="treated")
        assert info.value.rule == "require"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            masked = FedIPW(privacy=SecureAggregation()).fit(data, treatment="treated")
    np.testing.assert_allclose(masked.params_, local.params_, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(masked.cov_params_, local.cov_params_, rtol=1e-10)


def _fit_all_from(pooled, clients):
    X = pooled[["age", "bmi", "male"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return FedIPW().fit(X, pooled["treated"], pooled["y"], clients=clients)


def test_sites_requiring_differential_privacy_refuse_and_say_why(tmp_path):
    from skfed.privacy import DifferentialPrivacy, SecureAggregation
    from skfed.sites import SiteRefusal

    frames = list(_frames().values())
    policy = ('min_rows = 10\nrequire = ["differential_privacy"]\nconsortium = ['
              + ", ".join(f'"{s}"' for s in SITES) + "]")
    with services_of(tmp_path, frames, policy=policy, target="y") as data:
        with pytest.raises(ValueError, match="differential privacy is refused here because"):
            FedIPW(privacy=DifferentialPrivacy(epsilon=1.0)).fit(data, treatment="treated")
        with pytest.raises(SiteRefusal, match="differential privacy"):
            FedIPW(privacy=SecureAggregation()).fit(data, treatment="treated")
        with pytest.raises(SiteRefusal) as info:
            FedIPW().fit(data, treatment="treated")
        assert info.value.rule == "require"


def test_the_dominance_rule_keeps_holding(tmp_path):
    """With 30 treated rows at the 10% site, a few heavily weighted rows dominate the
    meat's sums there: the site refuses them under its dominance rule."""
    from skfed.sites import SiteRefusal

    frames = list(_frames(n=900).values())
    with services_of(tmp_path, frames, policy="min_rows = 10", target="y") as data:
        with pytest.raises(SiteRefusal) as info:
            FedAIPW().fit(data, treatment="treated")
    assert info.value.rule == "dominance" and info.value.site == "hospital-a"


def test_percentile_truncation_needs_exact_quantiles_at_the_sites(tmp_path):
    """The pooled scores' percentiles come from a bisection that releases single rows'
    scores: served only with allow_exact_quantiles, then equal to the pooled fit."""
    from skfed.sites import SiteRefusal

    frames = list(_frames().values())
    pooled = pd.concat(frames, ignore_index=True)
    clients = np.repeat(np.arange(3), [len(f) for f in frames])
    est = FedIPW(truncate=(5, 95), truncate_by="percentile", balance=False)
    local = est.fit(pooled[["age", "bmi", "male"]], pooled["treated"], pooled["y"],
                    clients=clients)
    local_params, bounds = local.params_.copy(), list(local.truncation_bounds_)
    with services_of(tmp_path / "closed", frames, target="y") as data:
        with pytest.raises(SiteRefusal) as info:
            est.fit(data, treatment="treated")
        assert info.value.rule == "allow_exact_quantiles"
    with services_of(tmp_path / "open", frames, target="y",
                     policy="min_rows = 10\nallow_exact_quantiles = true") as data:
        remote = est.fit(data, treatment="treated")
    assert remote.truncation_bounds_ == bounds
    np.testing.assert_allclose(remote.params_, local_params, rtol=1e-12, atol=1e-13)
