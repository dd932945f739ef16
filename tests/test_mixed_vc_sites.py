"""Variance components (clinics nested in hospitals) in the three homes of the rows:
in process, on Dask workers and at site services, the same numbers as statsmodels on
the pooled rows; a clinic under the site's min_rows refused without its label; under
required secure aggregation or differential privacy the per-group sums are refused
(they are per-site releases: no masked sum can carry them)."""

import warnings

import numpy as np
import pandas as pd
import pytest

import skfed.formula as sf
from skfed.mixed import FedMixedLM

from ._homes import HOMES, homes
from ._sites import SITES, services_of

smf = pytest.importorskip("statsmodels.formula.api")
pytest.importorskip("grpc")

CLINIC = {"clinic": "0 + C(clinic)"}
SECURE = ('min_rows = 10\nrequire = ["secure_aggregation"]\nconsortium = ["' +
          '", "'.join(SITES) + '"]')


def _frames(rows=(30, 45)):
    """Three sites of two to four hospitals, each with two or three clinics (30 rows or
    more each, a positive covariate: each clinic's sums pass the dominance rule)."""
    rng = np.random.default_rng(11)
    frames = {}
    for k, site in enumerate(SITES):
        parts = []
        for h in range(2 + k):
            u_h = rng.normal()
            for c in range(rng.integers(2, 4)):
                n = rng.integers(*rows)
                x = rng.normal(2.0, 0.5, size=n)
                parts.append(pd.DataFrame({
                    "hospital": f"{site}-h{h}", "clinic": f"c{c}", "x": x,
                    "score": 10 + 0.5 * x + u_h + 0.7 * rng.normal() + rng.normal(size=n)}))
        frames[site] = pd.concat(parts, ignore_index=True)
    return frames


def test_the_three_homes_give_statsmodels_numbers(tmp_path):
    frames = _frames()
    pooled = pd.concat(frames.values(), ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = smf.mixedlm("score ~ x", pooled, groups="hospital", re_formula="1",
                          vc_formula=CLINIC).fit(method="cg", gtol=1e-9)
    fits = {}
    with homes(tmp_path, frames, target="score") as data:
        for home in HOMES:
            fits[home] = FedMixedLM(vc_formula=CLINIC).fit(data[home], groups="hospital")
    # the formula at the services: lme4's (1 | hospital/clinic), the same fit
    with services_of(tmp_path / "formula", list(frames.values())) as remote:
        through = sf.mixedlm("score ~ x + (1 | hospital/clinic)", remote)
    np.testing.assert_allclose(through.params, ref.params, rtol=1e-6)
    np.testing.assert_allclose(through.params, fits["in-process"].results_.params,
                               rtol=1e-10)
    assert through.llf >= ref.llf - 1e-9
    for home, est in fits.items():
        res = est.results_
        assert list(res.params.index) == list(ref.params.index)
        np.testing.assert_allclose(res.params, ref.params, rtol=1e-6)
        assert res.llf >= ref.llf - 1e-9 and res.llf == pytest.approx(ref.llf, abs=1e-6)
        np.testing.assert_allclose(res.params, fits["in-process"].results_.params,
                                   rtol=1e-10)
        np.testing.assert_allclose(res.bse, fits["in-process"].results_.bse, rtol=1e-8)
        pd.testing.assert_series_equal(res.vc_effects, fits["in-process"].results_.vc_effects,
                                       rtol=1e-8)


def test_a_clinic_under_min_rows_is_refused_without_its_label(tmp_path):
    from skfed.sites import SiteRefusal

    frames = _frames(rows=(4, 9))
    with services_of(tmp_path, list(frames.values()), target="score") as remote:
        with pytest.raises(SiteRefusal) as info:
            FedMixedLM(vc_formula=CLINIC).fit(remote, groups="hospital")
    assert info.value.rule == "min_rows"
    assert "variance component 'clinic'" in str(info.value)
    assert "-h0" not in str(info.value)


@pytest.mark.parametrize("required", ["secure_aggregation", "differential_privacy"])
def test_required_secure_aggregation_or_dp_is_refused(tmp_path, required):
    from skfed.sites import SiteRefusal

    policy = SECURE.replace('"secure_aggregation"', f'"{required}"')
    frames = _frames()
    with services_of(tmp_path, list(frames.values()), target="score",
                     policy=policy) as remote:
        with pytest.raises(SiteRefusal) as info:
            FedMixedLM(vc_formula=CLINIC).fit(remote, groups="hospital")
    assert info.value.rule == "require"
