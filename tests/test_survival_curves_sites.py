"""Kaplan-Meier, Nelson-Aalen, the log-rank test, the median and the restricted mean
through real site services, equal to lifelines on the pooled rows where the sites allow
event times; masked counts under secure aggregation; the actuarial life table, saying
it is approximate, where they do not.

lifelines' ``gbsg2`` (686 breast-cancer patients) in three hospitals split by tumour
size, as in issue 36. Three federations of three services each (in this process, gRPC
over mutual TLS): one allowing event times, one also requiring secure aggregation, one
with the default policy (no event time leaves a site).
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("lifelines")

from lifelines import KaplanMeierFitter  # noqa: E402
from lifelines.statistics import multivariate_logrank_test  # noqa: E402
from lifelines.utils import median_survival_times  # noqa: E402
from lifelines.utils import restricted_mean_survival_time as lifelines_rmst  # noqa: E402

from skfed import FederatedDataset  # noqa: E402
from skfed.privacy import SecureAggregation  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.transport import SiteConnection  # noqa: E402
from skfed.stats import (kaplan_meier, logrank_test, median_survival,  # noqa: E402
                         restricted_mean_survival_time)

from ._sites import SITES, policy_data, policy_federations, split_frames  # noqa: E402
from .test_stats import _check_km  # noqa: E402

POLICIES = {
    "event_times": "allow_event_times = true",
    "protected": 'allow_event_times = true\nrequire = ["secure_aggregation"]\n'
                 'consortium = ["hospital-a", "hospital-b", "hospital-c"]',
    "default": "",
}
DATASET = {"name": "gbsg2", "target": None, "drop": []}
#: cut points every site's rows pass under min_level_count = 5 (each interval 0 or >= 5
#: events and rows at each hospital): yearly to four years; by hormone therapy, 3 years
YEARS, BY_THERAPY = [365.0, 730.0, 1095.0, 1460.0], [1095.0]


@pytest.fixture(scope="module")
def gbsg2():
    from lifelines.datasets import load_gbsg2

    parts = split_frames(load_gbsg2()[["time", "cens", "horTh", "tsize"]], 3, by="tsize")
    pooled = pd.concat(parts, ignore_index=True)
    site = np.repeat(SITES, [len(p) for p in parts])
    return parts, pooled, site


@pytest.fixture(scope="module")
def federations(tmp_path_factory, gbsg2):
    """``{policy name: (addresses, folders)}`` and the certificates: three services per
    policy."""
    with policy_federations(tmp_path_factory.mktemp("km"), dict(zip(SITES, gbsg2[0])),
                            POLICIES, dataset="gbsg2", analysts=["analyst-b"]) as found:
        yield found


def _data(federations, policy):
    return policy_data(federations, policy, dataset="gbsg2")


def _connection(federations, policy, name="hospital-a"):
    found, certs = federations
    return SiteConnection(name, found[policy][0][name], ca_file=certs.ca.cert,
                          cert_file=certs.client.cert, key_file=certs.client.key)


def _check_summaries(table, rows):
    """The median with its interval and the restricted mean equal lifelines'."""
    km = KaplanMeierFitter().fit(rows["time"], rows["cens"])
    medians = median_survival(table).loc["all"]
    assert medians["median"] == km.median_survival_time_
    np.testing.assert_array_equal(medians[["median_lower", "median_upper"]],
                                  median_survival_times(km.confidence_interval_)
                                  .to_numpy().ravel())
    for t in (365.0, 1095.0, 1825.0):
        np.testing.assert_allclose(restricted_mean_survival_time(table, t),
                                   lifelines_rmst(km, t=t), rtol=1e-12)


def test_exact_curves_through_services_equal_lifelines(federations, gbsg2):
    _, pooled, site = gbsg2
    data = _data(federations, "event_times")
    try:
        km = kaplan_meier(data, time="time", event="cens")
        by = kaplan_meier(data, time="time", event="cens", by="horTh")
        result = logrank_test(data, time="time", event="cens", group="horTh")
    finally:
        data.close()
    pd.testing.assert_frame_equal(km, kaplan_meier(pooled, time="time", event="cens",
                                                   clients=site), check_exact=True)
    _check_km(km, pooled["time"], pooled["cens"])
    _check_summaries(km, pooled)
    for level in ("no", "yes"):
        rows = pooled[pooled.horTh == level]
        _check_km(by.loc[level], rows["time"], rows["cens"])
        _check_summaries(by.loc[level], rows)
    ref = multivariate_logrank_test(pooled["time"], pooled["horTh"], pooled["cens"])
    np.testing.assert_allclose(result.statistic, ref.test_statistic, rtol=1e-12)
    np.testing.assert_allclose(result.p_value, ref.p_value, rtol=1e-12)
    assert not result.approximate and not km.approximate


def _audited(federations, policy, operation):
    """Per site: the outcomes of its audit lines naming ``operation``."""
    folders = federations[0][policy][1]
    return {name: [line["outcome"] for line in read_audit(Path(folder) / "audit.jsonl")
                   if line["operation"] == operation]
            for name, folder in folders.items()}


def test_masked_counts_at_sites_that_require_secure_aggregation(federations, gbsg2):
    """Each site's counts per event time leave it only masked: the curves and the test
    equal lifelines', each site's audit shows its counts as masked sums, and the same
    counts asked in the clear (a modified client) are refused."""
    _, pooled, site = gbsg2
    data = _data(federations, "protected")
    try:
        km = kaplan_meier(data, time="time", event="cens", by="horTh",
                          privacy=SecureAggregation())
        result = logrank_test(data, time="time", event="cens", group="horTh",
                              privacy=SecureAggregation())
    finally:
        data.close()
    pd.testing.assert_frame_equal(km, kaplan_meier(pooled, time="time", event="cens",
                                                   by="horTh", clients=site),
                                  check_exact=True)
    for level in ("no", "yes"):
        rows = pooled[pooled.horTh == level]
        _check_km(km.loc[level], rows["time"], rows["cens"])
    ref = multivariate_logrank_test(pooled["time"], pooled["horTh"], pooled["cens"])
    np.testing.assert_allclose(result.statistic, ref.test_statistic, rtol=1e-12)
    masked = _audited(federations, "protected", "sums.masked")
    assert all(outcomes.count("ok") == 2 for outcomes in masked.values()), masked
    assert all(not outcomes for outcomes in
               _audited(federations, "protected", "stats.survival_counts").values())
    # a modified client asks hospital-a for its counts at its own event times, in the clear
    times = np.unique(np.concatenate([[0.0], gbsg2[0][0].query("cens == 1")["time"]]))
    conn = _connection(federations, "protected")
    try:
        with pytest.raises(SiteRefusal) as info:
            conn.call("stats.survival_counts", dataset=DATASET, time="time", event="cens",
                      group=None, levels=None, times=times)
        assert info.value.rule == "min_level_count"
        # a coarse public grid passes the small-count rule: those counts are answered
        reply = conn.call("stats.survival_counts", dataset=DATASET, time="time",
                          event="cens", group=None, levels=None,
                          times=np.array([0.0, 10_000.0]))
        assert reply["at_risk"].tolist() == [[len(gbsg2[0][0]), 0]]
    finally:
        conn.close()


def test_without_event_times_a_life_table_that_says_so(federations, gbsg2):
    _, pooled, site = gbsg2
    data = _data(federations, "default")
    try:
        with pytest.raises(SiteRefusal, match="pass time_grid= cut points") as info:
            kaplan_meier(data, time="time", event="cens")
        assert info.value.rule == "allow_event_times"
        table = kaplan_meier(data, time="time", event="cens", time_grid=YEARS)
        result = logrank_test(data, time="time", event="cens", group="horTh",
                              time_grid=BY_THERAPY)
        with pytest.raises(SiteRefusal, match="Fewer, wider intervals") as info:
            kaplan_meier(data, time="time", event="cens", time_grid=np.arange(1, 9) * 365.0)
        assert info.value.rule == "min_level_count"
    finally:
        data.close()
    local = kaplan_meier(pooled, time="time", event="cens", clients=site, time_grid=YEARS)
    pd.testing.assert_frame_equal(table, local, check_exact=True)
    assert table.approximate and np.array_equal(table.time_grid, YEARS)
    assert table.note.startswith("Approximate: an actuarial life table on the cut points "
                                 "365, 730, 1095, 1460")
    local_test = logrank_test(pooled, time="time", event="cens", group="horTh",
                              clients=site, time_grid=BY_THERAPY)
    assert result.statistic == local_test.statistic and result.approximate
    # a modified client skips the grid and asks for counts at the site's event times
    conn = _connection(federations, "default")
    part = gbsg2[0][0]
    try:
        with pytest.raises(SiteRefusal) as info:
            conn.call("stats.survival_grid", dataset=DATASET, time="time", event="cens",
                      group=None, event_times=True)
        assert info.value.rule == "allow_event_times"
        with pytest.raises(SiteRefusal) as info:
            conn.call("stats.survival_counts", dataset=DATASET, time="time", event="cens",
                      group=None, levels=None,
                      times=np.unique(np.append(0.0, part.time[part.cens == 1])))
        assert info.value.rule == "min_level_count"
        with pytest.raises(SiteRefusal) as info:  # one interval per month
            conn.call("stats.life_table", dataset=DATASET, time="time", event="cens",
                      group="horTh", levels=["no", "yes"], cuts=np.arange(1, 88) * 30.0)
        assert info.value.rule == "min_level_count"
    finally:
        conn.close()


def test_masked_counts_in_process_carry_no_sites_table(gbsg2, monkeypatch):
    """Under secure aggregation the server receives each site's counts as masked words:
    none of a site's counts is readable in them, and only their sum decodes (the
    curves are the plain ones); the grid's release per site holds no count."""
    from skfed.privacy import masked_sums
    from skfed.stats._survival_site import site_survival_counts, site_survival_grid

    _, pooled, site = gbsg2
    seen = []
    original = masked_sums.ExecutorParties.masked

    def spy(self, fn, args, message):
        replies = original(self, fn, args, message)
        seen.append((fn, args, replies))
        return replies

    monkeypatch.setattr(masked_sums.ExecutorParties, "masked", spy)
    km = kaplan_meier(pooled, time="time", event="cens", by="horTh", clients=site,
                      privacy=SecureAggregation())
    pd.testing.assert_frame_equal(km, kaplan_meier(pooled, time="time", event="cens",
                                                   by="horTh", clients=site),
                                  check_exact=True)
    ((fn, args, replies),) = seen
    assert fn is site_survival_counts
    data = FederatedDataset.from_arrays(pooled, clients=site)
    assert all(set(reply) == {"levels", "times"} for reply in
               data.map(site_survival_grid, "time", "cens", "horTh", True))
    words = [np.asarray(reply["masked"].data) for reply in replies]
    tables = [masked_sums.flatten_reply(own)[0].astype(np.uint64)
              for own in data.map(fn, *args)]
    for sent, own in zip(words, tables):
        assert sent.shape == own.shape and np.mean(sent == own) < 0.01
    total = np.zeros_like(words[0])
    for sent in words:
        total += sent  # modulo 2**64: the masks cancel in the sum only
    np.testing.assert_array_equal(total, np.sum(tables, axis=0))


def test_a_report_says_its_curve_is_a_life_table(tmp_path):
    """The HTML report of a Cox fit drawn with a life table: its figure's caption names
    the grid and says the curve is approximate."""
    import argparse
    import io

    from lifelines.datasets import load_rossi

    from skfed.cli.html_report import write_html_report
    from skfed.cli.main import _fit_parser, run_fit

    frame = load_rossi()
    frame["site"] = np.array(SITES)[np.arange(len(frame)) % 3]
    path = tmp_path / "rossi.csv"
    frame.to_csv(path, index=False)
    parser = argparse.ArgumentParser()
    _fit_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["fit", str(path), "--clients", "site", "--model", "cox",
                              "--target", "arrest", "week", "--strata", "site"])
    report = run_fit(args, out=io.StringIO())
    km = kaplan_meier(frame, time="week", event="arrest", clients="site",
                      time_grid=[13.0, 26.0, 39.0])
    page = tmp_path / "cox.html"
    write_html_report(report, page, kaplan_meier=km)
    text = page.read_text()
    assert ("Approximate: an actuarial life table on the cut points 13, 26, 39 (the sites "
            "released counts per interval, not event times)") in text
    assert "Kaplan-Meier curves of the training rows" not in text


def test_the_old_per_site_bins_are_refused_with_the_way_to_a_life_table():
    frame = pd.DataFrame({"t": [1.0, 2.0, 3.0], "e": [1, 0, 1]})
    with pytest.raises(TypeError, match="time_grid"):
        kaplan_meier(frame, time="t", event="e", min_count=5)
