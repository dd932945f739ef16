"""FedGEE through the three homes of the rows (in this process, on Dask workers, at site
services over gRPC and mutual TLS): the same numbers, equal to statsmodels' GEE on the
pooled rows; at sites that require secure aggregation, plain sums refused and masked
ones exact; at sites that require differential privacy, refused; a site whose single
cluster holds fewer rows than its min_rows, refused."""

import numpy as np
import pandas as pd
import pytest

from skfed.gee import FedGEE

from ._homes import HOMES, homes
from ._sites import SITES, services_of
from .test_gee import assert_equal_to, reference, visits

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

COLUMNS = ["id", "visit", "age", "dose"]
SECURE = ('min_rows = 10\nrequire = ["secure_aggregation"]\nconsortium = ["' +
          '", "'.join(SITES) + '"]')


def _frames(target):
    """The visits in three hospitals: patients by age (heterogeneous sites)."""
    rows = visits(3, n_patients=60)
    site = np.where(rows["sizes"] <= 3, 0, np.where(rows["age"] < 0, 1, 2))
    return rows, [rows.loc[site == k, COLUMNS + [target]].reset_index(drop=True)
                  for k in range(3)]


@pytest.mark.parametrize("family, cov_struct", [("poisson", "exchangeable"),
                                                ("gaussian", "autoregressive")])
def test_the_three_homes_give_statsmodels_numbers(tmp_path, family, cov_struct):
    rows, frames = _frames(family)
    pooled = pd.concat(frames, ignore_index=True)
    fits = {}
    with homes(tmp_path, dict(zip(SITES, frames)), target=family) as data:
        for home in HOMES:
            fits[home] = FedGEE(family, cov_struct=cov_struct).fit(
                data[home], groups="id", time="visit")
    ref = reference(pooled, family, cov_struct)
    for home, est in fits.items():
        assert_equal_to(est, ref, 1e-6 if cov_struct == "autoregressive" else 1e-9)
        np.testing.assert_allclose(est.params_, fits["in-process"].params_, rtol=1e-12)
        np.testing.assert_allclose(est.bse_, fits["in-process"].bse_, rtol=1e-12)
        assert est.n_iter_ == fits["in-process"].n_iter_
        assert est.n_clusters_ == rows["id"].nunique()
        np.testing.assert_allclose(est.results_.conf_int(),
                                   fits["in-process"].results_.conf_int(), rtol=1e-12)


def test_secure_aggregation_required_masked_sums_exact(tmp_path):
    from skfed.privacy import SecureAggregation
    from skfed.sites import SiteRefusal

    rows, frames = _frames("binomial")
    pooled = pd.concat(frames, ignore_index=True)
    with services_of(tmp_path, frames, target="binomial", policy=SECURE) as remote:
        with pytest.raises(SiteRefusal) as info:
            FedGEE("binomial", cov_struct="exchangeable").fit(remote, groups="id",
                                                              time="visit")
        assert info.value.rule == "require"
        masked = FedGEE("binomial", cov_struct="exchangeable",
                        privacy=SecureAggregation()).fit(remote, groups="id", time="visit")
    assert_equal_to(masked, reference(pooled, "binomial", "exchangeable"))
    assert masked.results_.privacy == "masked (secure aggregation)"


def test_differential_privacy_required_is_refused(tmp_path):
    from skfed.privacy import SecureAggregation
    from skfed.sites import SiteRefusal

    rows, frames = _frames("gaussian")
    policy = SECURE.replace('"secure_aggregation"', '"differential_privacy"')
    with services_of(tmp_path, frames, target="gaussian", policy=policy) as remote:
        for privacy in (None, SecureAggregation()):
            with pytest.raises(SiteRefusal) as info:
                FedGEE(privacy=privacy).fit(remote, groups="id", time="visit")
            assert info.value.rule == "require"


def test_a_single_cluster_site_under_min_rows_is_refused(tmp_path):
    from skfed.sites import SiteRefusal

    rows, frames = _frames("gaussian")
    small = frames[0][frames[0]["id"] == frames[0]["id"].iloc[0]]
    assert len(small) < 10
    # refused as the rows are opened, before any GEE sum (one cluster's rows would be
    # the site's every sum)
    with pytest.raises(SiteRefusal, match="hospital-a") as info:
        with services_of(tmp_path, [small] + frames[1:], target="gaussian") as remote:
            FedGEE(cov_struct="exchangeable").fit(remote, groups="id", time="visit")
    assert info.value.rule == "min_rows"


def test_a_formula_through_services_equals_statsmodels(tmp_path):
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    from skfed.formula import gee

    rows, frames = _frames("gamma")
    pooled = pd.concat(frames, ignore_index=True)
    formula = "gamma ~ age + visit + dose"
    with services_of(tmp_path, frames, target=None) as remote:
        results = gee(formula, remote, groups="id", time="visit", family="gamma",
                      link="log", cov_struct="exchangeable")
    ref = smf.gee(formula, "id", pooled, time=pooled["visit"].to_numpy(),
                  family=sm.families.Gamma(link=sm.families.links.Log()),
                  cov_struct=sm.cov_struct.Exchangeable()).fit()
    np.testing.assert_allclose(results.params, ref.params, rtol=1e-9)
    np.testing.assert_allclose(results.bse, ref.bse, rtol=1e-9)
    np.testing.assert_allclose(results.dep_params, ref.cov_struct.dep_params, rtol=1e-9)
    assert results.summary().info["Dependent Variable:"] == "gamma"
