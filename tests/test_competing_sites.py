"""The Aalen-Johansen cumulative incidence where the rows live: in this process, on Dask
workers and at real site services, the same numbers (lifelines' on the pooled rows);
masked counts at sites that require secure aggregation; under a site's default policy
(no event time leaves it) the exact estimate refused with the way out, and the estimate
on cut points, labelled approximate, answered.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("lifelines")
pytest.importorskip("distributed")

from skfed import FederatedDataset  # noqa: E402
from skfed.privacy import SecureAggregation  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.stats import FedAalenJohansen  # noqa: E402

from ._homes import HOMES, homes  # noqa: E402
from ._sites import SITES, policy_data, policy_federations  # noqa: E402
from .test_competing import check_lifelines, untied  # noqa: E402

POLICIES = {
    "protected": 'allow_event_times = true\nrequire = ["secure_aggregation"]\n'
                 'consortium = ["hospital-a", "hospital-b", "hospital-c"]',
    "default": "",
}
#: cut points each site's 100 rows pass under the default min_level_count (every interval
#: 0 or >= 5 rows leaving, events, events of the cause)
CUTS = [5.0, 10.0, 20.0]


def _frames():
    df = untied().assign(x=np.linspace(0.0, 1.0, 300))
    return {name: df[df["site"] == k].drop(columns="site") for k, name in enumerate(SITES)}


def _fit(data, cause=1, **params):
    return FedAalenJohansen(**params).fit(data, duration_col="time", event_col="event",
                                          event_of_interest=cause)


def test_the_same_numbers_in_every_home(tmp_path):
    frames = _frames()
    pooled = pd.concat(frames.values(), ignore_index=True)
    with homes(tmp_path, frames, target="x", policy="allow_event_times = true") as data:
        fits = {home: _fit(data[home]) for home in HOMES}
    for home in HOMES:
        check_lifelines(fits[home], pooled["time"], pooled["event"], 1)
        pd.testing.assert_frame_equal(fits[home].cumulative_density_,
                                      fits["in-process"].cumulative_density_, check_exact=True)
        pd.testing.assert_series_equal(fits[home].variance_ij_,
                                       fits["in-process"].variance_ij_, check_exact=True)


@pytest.fixture(scope="module")
def federations(tmp_path_factory):
    """``{policy: (addresses, folders)}`` and the certificates: three services each."""
    with policy_federations(tmp_path_factory.mktemp("aj"), _frames(), POLICIES) as found:
        yield found


def _audited(federations, policy, operation):
    folders = federations[0][policy][1]
    return {name: [line["outcome"] for line in read_audit(Path(folder) / "audit.jsonl")
                   if line["operation"] == operation] for name, folder in folders.items()}


def test_masked_counts_where_sites_require_secure_aggregation(federations):
    pooled = pd.concat(_frames().values(), ignore_index=True)
    data = policy_data(federations, "protected")
    try:
        with pytest.raises(SiteRefusal):  # the counts in the clear are refused
            _fit(data)
        aj = _fit(data, cause=2, privacy=SecureAggregation())
    finally:
        data.close()
    check_lifelines(aj, pooled["time"], pooled["event"], 2)
    assert all(outcomes.count("ok") == 1 for outcomes in
               _audited(federations, "protected", "sums.masked").values())
    assert all("ok" not in outcomes for outcomes in
               _audited(federations, "protected", "stats.competing_counts").values())


def test_default_policy_refuses_event_times_and_answers_cut_points(federations):
    pooled = pd.concat(_frames().values(), ignore_index=True)
    data = policy_data(federations, "default")
    try:
        with pytest.raises(SiteRefusal, match="pass time_grid= cut points") as info:
            _fit(data)
        assert info.value.rule == "allow_event_times"
        coarse = _fit(data, time_grid=CUTS)
        with pytest.raises(SiteRefusal, match="Fewer, wider intervals") as info:
            _fit(data, time_grid=np.arange(1.0, 40.0))
        assert info.value.rule == "min_level_count"
    finally:
        data.close()
    assert coarse.approximate_ and "Approximate" in coarse.note_
    local = _fit(FederatedDataset.from_arrays(pooled[["time", "event"]], None,
                                              np.repeat(SITES, 100)), time_grid=CUTS)
    pd.testing.assert_frame_equal(coarse.cumulative_density_, local.cumulative_density_,
                                  check_exact=True)
