"""A GLMM with random slopes in the three homes of the rows (in process, on Dask
workers, at site services): the same numbers; under required secure aggregation or
differential privacy the per-group releases (labels and sizes, modes) are refused."""

import numpy as np
import pandas as pd
import pytest

from skfed.mixed import FedMixedGLM

from ._homes import HOMES, homes
from ._sites import SITES, services_of

pytest.importorskip("grpc")

SECURE = ('min_rows = 10\nrequire = ["secure_aggregation"]\nconsortium = ["' +
          '", "'.join(SITES) + '"]')


def _frames():
    """Herds of 30-40 rows (their sums pass the sites' dominance rule) in three sites,
    a random intercept and slope of ``x`` each; a count outcome."""
    rng = np.random.default_rng(5)
    frames = {}
    for k, site in enumerate(SITES):
        parts = []
        for h in range(4 + 2 * k):
            u = rng.multivariate_normal([0, 0], [[0.4, 0.1], [0.1, 0.2]])
            n = rng.integers(30, 41)
            x = rng.normal(1.0, 0.5, size=n)
            parts.append(pd.DataFrame({"herd": f"{site}-{h}", "x": x, "count": rng.poisson(
                np.exp(1.5 + (0.3 + u[1]) * x + u[0]))}))
        frames[site] = pd.concat(parts, ignore_index=True)
    return frames


def test_random_slopes_in_the_three_homes(tmp_path):
    fits = {}
    with homes(tmp_path, _frames(), target="count") as data:
        for home in HOMES:
            fits[home] = FedMixedGLM("poisson", re_columns=["x"]).fit(data[home],
                                                                       groups="herd")
    here = fits["in-process"].results_
    for est in fits.values():
        res = est.results_
        np.testing.assert_allclose(res.fe_params, here.fe_params, rtol=1e-9)
        np.testing.assert_allclose(res.cov_re, here.cov_re, rtol=1e-8)
        np.testing.assert_allclose(res.bse_fe, here.bse_fe, rtol=1e-7)
        assert res.llf == pytest.approx(here.llf, rel=1e-12)
        assert est.n_iter_ == fits["in-process"].n_iter_


@pytest.mark.parametrize("required", ["secure_aggregation", "differential_privacy"])
def test_required_secure_aggregation_or_dp_is_refused(tmp_path, required):
    from skfed.sites import SiteRefusal

    policy = SECURE.replace('"secure_aggregation"', f'"{required}"')
    with services_of(tmp_path, list(_frames().values()), target="count",
                     policy=policy) as remote:
        with pytest.raises(SiteRefusal) as info:
            FedMixedGLM("poisson", re_columns=["x"]).fit(remote, groups="herd")
    assert info.value.rule == "require"
