"""The Fine-Gray model where the rows live: in this process, on Dask workers and at real
site services, R's numbers (tests/test_finegray.py); masked at sites that require
secure aggregation; refused, with the reason, where a site keeps its event times.
"""

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("distributed")

from skfed.privacy import SecureAggregation  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.survival import FedFineGray  # noqa: E402

from ._homes import HOMES, homes  # noqa: E402
from ._sites import SITES, policy_data, policy_federations  # noqa: E402
from .test_finegray import R_FIT, check_r, frames  # noqa: E402

#: extent_l left out: its few 0 rows per site make the robust meat's coordinate fail the
#: sites' dominance rule (min_rows = 10), as it should
COVARIATES = ["age", "tx_pb"]
OPEN = 'allow_event_times = true\nfiner_sums = ["survival.finegray_sums"]\nmin_rows = 10'
POLICIES = {
    "open": OPEN,
    "event_times": "allow_event_times = true",
    "protected": 'allow_event_times = true\nrequire = ["secure_aggregation"]\n'
                 'consortium = ["hospital-a", "hospital-b", "hospital-c"]',
    "default": "",
}


def _frames():
    df = frames()["cgvhd"].assign(row=np.arange(100.0))
    return {name: df[df["site"] == k].drop(columns="site") for k, name in enumerate(SITES)}


def _fit(data, **params):
    return FedFineGray(**params).fit(data, duration_col="ftime", event_col="status",
                                     event_of_interest=1, covariates=COVARIATES)


def test_r_numbers_in_every_home(tmp_path):
    with homes(tmp_path, _frames(), target="row", policy=OPEN) as data:
        fits = {home: _fit(data[home]) for home in HOMES}
    for home in HOMES:
        check_r(fits[home], R_FIT["cgvhd_age_tx"])
        np.testing.assert_array_equal(fits[home].coef_, fits["in-process"].coef_)


@pytest.fixture(scope="module")
def federations(tmp_path_factory):
    """``{policy: (addresses, folders)}`` and the certificates: three services each."""
    with policy_federations(tmp_path_factory.mktemp("fg"), _frames(), POLICIES) as found:
        yield found


def test_masked_where_sites_require_secure_aggregation(federations):
    data = policy_data(federations, "protected")
    try:
        with pytest.raises(SiteRefusal):  # the per-time sums in the clear
            _fit(data)
        fg = _fit(data, privacy=SecureAggregation())
    finally:
        data.close()
    check_r(fg, R_FIT["cgvhd_age_tx"], atol=1e-11)


def test_refused_with_the_reason_where_sites_keep_their_event_times(federations):
    data = policy_data(federations, "default")
    try:
        with pytest.raises(SiteRefusal, match="no approximate form on cut points") as info:
            _fit(data)
        assert info.value.rule == "allow_event_times"
    finally:
        data.close()


def test_the_meat_of_a_rare_level_is_refused_by_the_dominance_rule(federations):
    """extent_l is 0 on 8 of cgvhd's 100 rows: a few rows per site make up its
    coordinate of the robust meat, which the sites' dominance rule refuses."""
    data = policy_data(federations, "open")
    try:
        with pytest.raises(SiteRefusal, match="survival.finegray_meat") as info:
            FedFineGray().fit(data, duration_col="ftime", event_col="status",
                              event_of_interest=1, covariates=COVARIATES + ["extent_l"])
        assert info.value.rule == "dominance"
    finally:
        data.close()


def test_per_time_sums_need_finer_sums_or_masking(federations):
    data = policy_data(federations, "event_times")
    try:
        with pytest.raises(SiteRefusal, match="privacy=SecureAggregation\\(\\) masks them") \
                as info:
            _fit(data)
        assert info.value.rule == "finer_sums"
    finally:
        data.close()
