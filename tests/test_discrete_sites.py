"""FedOrderedModel and FedMNLogit through site services: the same numbers in the three
homes of the rows, and at sites that require secure aggregation (plain sums refused,
masked sums the same fit), the formula routes included."""

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from skfed import FedMNLogit, FedOrderedModel  # noqa: E402
from skfed.formula import mnlogit, ordinal  # noqa: E402
from skfed.privacy import SecureAggregation  # noqa: E402
from skfed.exceptions import SiteRefusal, SiteServiceError  # noqa: E402

from ._homes import HOMES, homes  # noqa: E402
from ._sites import SITES, services_of  # noqa: E402


def _frame(seed=5, n=450):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"age": rng.normal(size=n), "dose": rng.uniform(-1, 1, n)})
    latent = 1.1 * df["age"] - 0.7 * df["dose"] + rng.logistic(size=n)
    df["y"] = np.digitize(latent, [-1.0, 0.4, 1.8])
    return df


def _by_age(df):
    """Three sites by age tertile (each its own mix of the levels)."""
    cut = np.digitize(df["age"], np.quantile(df["age"], [1 / 3, 2 / 3]))
    return [df[cut == k].reset_index(drop=True) for k in range(3)]


def _same(a, b, rtol=1e-9):
    np.testing.assert_allclose(a.params_, b.params_, rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(a.bse_, b.bse_, rtol=rtol)
    assert abs(a.llf_ - b.llf_) < 1e-8 and list(a.levels_) == list(b.levels_)


def test_the_same_fit_in_three_homes(tmp_path):
    pytest.importorskip("distributed")
    frames = dict(zip(SITES, _by_age(_frame())))
    with homes(tmp_path, frames, target="y") as data:
        for make in (lambda: FedOrderedModel("probit"), FedMNLogit):
            reference = make().fit(data["in-process"])
            for home in HOMES[1:]:
                _same(make().fit(data[home]), reference)
    pooled = pd.concat(frames.values(), ignore_index=True)
    ref = sm.MNLogit(pooled["y"], sm.add_constant(pooled[["age", "dose"]])).fit(
        method="newton", tol=1e-12, disp=0)
    np.testing.assert_allclose(reference.params_, ref.params.to_numpy().ravel(order="F"),
                               atol=1e-6)
    np.testing.assert_allclose(reference.bse_, ref.bse.to_numpy().ravel(order="F"),
                               rtol=1e-6)


PROTECTED = ('min_rows = 10\nrequire = ["secure_aggregation"]\n'
             'consortium = ["hospital-a", "hospital-b", "hospital-c"]')


def test_sites_requiring_secure_aggregation(tmp_path):
    """Plain sums refused naming the rule; masked sums: the in-process plain fit."""
    parts = _by_age(_frame())
    pooled = pd.concat(parts, ignore_index=True)
    site = np.repeat(SITES, [len(p) for p in parts])
    X = pooled[["age", "dose"]]
    with services_of(tmp_path / "target", parts, policy=PROTECTED, target="y") as remote:
        with pytest.raises(SiteRefusal, match="discrete.ordinal_terms: this site requires "
                                              "secure aggregation") as info:
            FedOrderedModel().fit(remote)
        assert info.value.rule == "require"
        for make in (FedOrderedModel, FedMNLogit):
            masked = make(privacy=SecureAggregation()).fit(remote)
            _same(masked, make().fit(X, pooled["y"], clients=site), rtol=1e-10)
    # the formula routes: the outcome a column of the sites' tables
    with services_of(tmp_path / "formula", parts, policy=PROTECTED) as remote:
        for route in (ordinal, mnlogit):
            masked = route("y ~ age + dose", remote, privacy=SecureAggregation())
            here = route("y ~ age + dose", pooled, clients=site)
            np.testing.assert_allclose(masked.params, here.params, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(masked.bse, here.bse, rtol=1e-10)


def test_a_rare_level_at_a_site_and_a_site_requiring_differential_privacy(tmp_path):
    """A level held by fewer than min_level_count rows of a site is not named by it (the
    target's and a formula outcome's); a site that requires differential privacy
    refuses the plain sums, and the estimator refuses to run under it."""
    from skfed.privacy import DifferentialPrivacy

    parts = _by_age(_frame())
    rare = parts[0].copy()
    rare.loc[rare.index[:3], "y"] = 7  # three rows of a level held nowhere else
    policy = "min_rows = 10\nmin_level_count = 5"
    with services_of(tmp_path / "rare", [rare, *parts[1:]], policy=policy,
                     target="y") as remote:
        with pytest.raises(SiteRefusal) as info:
            FedMNLogit().fit(remote)
        assert info.value.rule == "min_level_count" and info.value.site == SITES[0]
    with services_of(tmp_path / "rare-formula", [rare, *parts[1:]], policy=policy) as remote:
        # formula.levels's own refusal: the fixed text of rule 'data', the column named
        with pytest.raises(SiteServiceError, match=r"formula.levels: .*columns: 'y'"):
            ordinal("y ~ age + dose", remote)
    dp = ('min_rows = 10\nrequire = ["differential_privacy"]\n'
          'consortium = ["hospital-a", "hospital-b", "hospital-c"]')
    with services_of(tmp_path / "dp", parts, policy=dp, target="y") as remote:
        with pytest.raises(SiteRefusal) as info:
            FedOrderedModel().fit(remote)
        assert info.value.rule == "require"
        with pytest.raises(ValueError, match="does not offer differential privacy"):
            FedOrderedModel(privacy=DifferentialPrivacy(epsilon=1.0)).fit(remote)
