"""``skfed km`` end to end: lifelines' ``gbsg2`` in three hospitals split by tumour size,
from a CSV with a site column and through real site services.

Exact curves (every row in a file; services with ``allow_event_times``): the printed and
JSON survival, intervals, medians with their intervals, restricted means and log-rank
test equal lifelines' on the pooled rows (and the Python API's table exactly). With
``--time-grid``: the actuarial life table of :func:`skfed.stats.kaplan_meier`, which the
text, the JSON and the report say is approximate, on which cut points; a service without
``allow_event_times`` refuses exact curves and the error names ``--time-grid``.
"""

import json
import re

import numpy as np
import pandas as pd
import pytest

from skfed.cli.main import main
from skfed.stats import kaplan_meier, logrank_test

from ._sites import SITES, split_frames

lifelines = pytest.importorskip("lifelines")
from lifelines import KaplanMeierFitter  # noqa: E402
from lifelines.statistics import multivariate_logrank_test  # noqa: E402
from lifelines.utils import median_survival_times  # noqa: E402
from lifelines.utils import restricted_mean_survival_time as lifelines_rmst  # noqa: E402

#: cut points every hospital's rows pass under min_level_count = 5 (each interval 0 or
#: >= 5 events and rows per level of horTh there)
YEARS = "365,730,1095,1460"


@pytest.fixture(scope="module")
def gbsg2():
    from lifelines.datasets import load_gbsg2

    parts = split_frames(load_gbsg2()[["time", "cens", "horTh", "tsize"]], 3, by="tsize")
    return pd.concat([p.assign(hospital=s) for p, s in zip(parts, SITES)], ignore_index=True)


@pytest.fixture
def csv(gbsg2, tmp_path):
    path = tmp_path / "gbsg2.csv"
    gbsg2.to_csv(path, index=False)
    return path


def _run(capsys, *argv):
    code = main(["km", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _same_table(data, api):
    """The JSON's table holds the Python API's numbers exactly (JSON: infinities null)."""
    expected = pd.DataFrame(api).replace([np.inf, -np.inf], np.nan)
    pd.testing.assert_frame_equal(_table(data)[list(api.columns)], expected,
                                  check_exact=True, check_dtype=False)


def _table(data):
    """The JSON's survival table as a DataFrame indexed as kaplan_meier's."""
    frame = pd.DataFrame(data["table"])
    keys = ["time"] if data["by"] is None else [data["by"], "time"]
    return frame.set_index(keys)


def _check_lifelines(data, rows, group, t_rmst):
    """One curve of the JSON equals lifelines' fit on ``rows``."""
    kmf = KaplanMeierFitter().fit(rows["time"], rows["cens"])
    table = _table(data)
    curve = table if data["by"] is None else table.loc[group]
    t = curve.index.to_numpy(dtype=float)
    np.testing.assert_allclose(curve["survival"], kmf.survival_function_at_times(t),
                               rtol=1e-12)
    ci = kmf.confidence_interval_  # a step function: its last row at or before each time
    bounds = ci.iloc[np.searchsorted(ci.index.to_numpy(), t, side="right") - 1]
    np.testing.assert_allclose(curve["survival_lower"], bounds.iloc[:, 0], rtol=1e-10)
    np.testing.assert_allclose(curve["survival_upper"], bounds.iloc[:, 1], rtol=1e-10)
    entry = next(g for g in data["groups"] if g["group"] == group)
    assert entry["rows"] == len(rows) and entry["events"] == int(rows["cens"].sum())
    assert entry["median"] == kmf.median_survival_time_
    lower, upper = median_survival_times(kmf.confidence_interval_).to_numpy().ravel()
    assert entry["median_lower"] == lower
    assert entry["median_upper"] == (None if np.isinf(upper) else upper)  # JSON: inf null
    assert entry["rmst"] == pytest.approx(lifelines_rmst(kmf, t=t_rmst), rel=1e-12)


def test_exact_curves_equal_lifelines(gbsg2, csv, tmp_path, capsys):
    out_json = tmp_path / "km.json"
    code, out, err = _run(capsys, csv, "--clients", "hospital", "--time", "time", "--event",
                          "cens", "--by", "horTh", "--rmst-at", 1825, "--json", out_json)
    assert code == 0, err
    data = json.loads(out_json.read_text())
    assert data["approximate"] is False and data["time_grid"] is None
    for level in ("no", "yes"):
        _check_lifelines(data, gbsg2[gbsg2.horTh == level], level, 1825.0)
    ref = multivariate_logrank_test(gbsg2["time"], gbsg2["horTh"], gbsg2["cens"])
    assert data["logrank"]["statistic"] == pytest.approx(ref.test_statistic, rel=1e-12)
    assert data["logrank"]["p_value"] == pytest.approx(ref.p_value, rel=1e-12)
    # the Python API's table, number for number
    api = kaplan_meier(gbsg2, time="time", event="cens", by="horTh", clients="hospital")
    _same_table(data, api)
    # the text: medians, the log-rank test, the survival at the table's round times
    assert re.search(r"no\s+440\s+205\s+1528 \(1280 to 1814\)\s+1264\.1", out)
    assert "2018 (1918 to not reached)" in out
    assert f"chi-square {ref.test_statistic:.2f} on 1 df, p = 0.003" in out
    kmf = KaplanMeierFitter().fit(gbsg2.time[gbsg2.horTh == "yes"],
                                  gbsg2.cens[gbsg2.horTh == "yes"])
    s = kmf.survival_function_at_times(1000.0).iloc[0]
    assert re.search(rf"yes\s+1000\s+142\s+{s:.3f} \(", out)
    assert "approximate" not in out.lower()


def test_one_curve_and_chosen_times(gbsg2, csv, tmp_path, capsys):
    out_json = tmp_path / "km.json"
    code, out, err = _run(capsys, csv, "--clients", "hospital", "--time", "time", "--event",
                          "cens", "--times", "365,1095", "--level", 0.9, "--json", out_json)
    assert code == 0, err
    data = json.loads(out_json.read_text())
    kmf = KaplanMeierFitter(alpha=0.1).fit(gbsg2["time"], gbsg2["cens"])
    curve = _table(data)
    ci = kmf.confidence_interval_
    rows = np.searchsorted(ci.index.to_numpy(), curve.index.to_numpy(), side="right") - 1
    np.testing.assert_allclose(curve["survival_lower"], ci.iloc[rows, 0], rtol=1e-10)
    assert data["logrank"] is None and "Log-rank" not in out
    for t in (365.0, 1095.0):
        n = int((gbsg2["time"] >= t).sum())
        s = kmf.survival_function_at_times(t).iloc[0]
        assert re.search(rf"all\s+{t:g}\s+{n}\s+{s:.3f}", out)


def test_a_life_table_says_it_is_approximate(gbsg2, csv, tmp_path, capsys):
    out_json, page = tmp_path / "lt.json", tmp_path / "lt.html"
    code, out, err = _run(capsys, csv, "--clients", "hospital", "--time", "time", "--event",
                          "cens", "--by", "horTh", "--time-grid", YEARS, "--rmst-at", 1460,
                          "--json", out_json, "--report", page)
    assert code == 0, err
    grid = [365.0, 730.0, 1095.0, 1460.0]
    api = kaplan_meier(gbsg2, time="time", event="cens", by="horTh", clients="hospital",
                       time_grid=grid)
    test = logrank_test(gbsg2, time="time", event="cens", group="horTh", clients="hospital",
                        time_grid=grid)
    data = json.loads(out_json.read_text())
    assert data["approximate"] is True and data["time_grid"] == grid
    assert data["note"] == api.note and api.note.startswith("Approximate: an actuarial life")
    _same_table(data, api)
    assert data["logrank"]["statistic"] == test.statistic and data["logrank"]["approximate"]
    assert "actuarial life table (approximate)" in out and api.note in out
    assert test.note in out
    assert "> 1460" in out  # a median the table does not reach by its last cut point
    text = page.read_text()
    assert "<b>Approximate.</b>" in text and "365, 730, 1095, 1460" in text


def test_report_is_a_self_contained_page(csv, tmp_path, capsys):
    page = tmp_path / "km.html"
    code, out, err = _run(capsys, csv, "--clients", "hospital", "--time", "time", "--event",
                          "cens", "--by", "horTh", "--label", "horTh=Hormone therapy",
                          "--label", "time=Days since surgery", "--report", page)
    assert code == 0, err
    text = page.read_text()
    assert text.count("<svg") == 1 and "Number at risk" in text
    assert "Hormone therapy = yes" in text and "Days since surgery" in text
    assert "Log-rank test: chi-square 8.56" in text
    assert "log-rank test p = 0.003" in text  # under the curves, in the figure's caption
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!#)""", text)
    assert (tmp_path / "km-kaplan-meier.pdf").read_bytes().startswith(b"%PDF")
    from .test_reports_render import CHROMIUM, _assert_fits, _render

    if CHROMIUM is not None:  # laid out at 1280 px: nothing wider than the window
        measured, _ = _render(page, tmp_path)
        _assert_fits(measured)
        assert measured["figures"] == "1"


@pytest.mark.parametrize("argv, message", [
    (["{csv}", "--clients", "hospital", "--event", "cens"], "--time COLUMN --event COLUMN"),
    (["{csv}", "--time", "time", "--event", "cens"], "--clients COLUMN"),
    (["{csv}", "--clients", "hospital", "--time", "days", "--event", "cens"],
     "--time 'days': no such column"),
    (["{csv}", "--clients", "hospital", "--time", "horTh", "--event", "cens"],
     "--time 'horTh' is not numeric"),
    (["{csv}", "--clients", "hospital", "--time", "time", "--event", "tsize"], "0/1"),
    (["{csv}", "--clients", "hospital", "--time", "time", "--event", "cens", "--by", "arm"],
     "--by 'arm': no such column"),
    (["{csv}", "--clients", "hospital", "--time", "time", "--event", "cens", "--time-grid",
      "730,365"], "--time-grid takes increasing positive times"),
    (["{csv}", "--clients", "hospital", "--time", "time", "--event", "cens", "--time-grid",
      "365", "--times", "100"], "--times is for exact curves"),
    (["{csv}", "--clients", "hospital", "--time", "time", "--event", "cens", "--rmst-at",
      "-1"], "--rmst-at takes a positive time"),
    (["{csv}", "--clients", "hospital", "--time", "time", "--event", "cens", "--time-grid",
      "365", "--rmst-at", "5000"], "past the life table's last cut point"),
])
def test_errors_are_one_clear_message(csv, capsys, argv, message):
    code, _, err = _run(capsys, *[a.format(csv=csv) for a in argv])
    assert code == 2, err
    assert err.startswith("skfed km: error: ") and message in err, err


def test_through_site_services(gbsg2, csv, tmp_path, capsys):
    """Services that allow event times give the file's exact numbers (masked counts with
    --secure-aggregation too); services that do not refuse exact curves with the way to
    --time-grid, and give the file's life table on cut points."""
    pytest.importorskip("grpc")
    from ._cli_services import cli_services

    options = ["--time", "time", "--event", "cens", "--by", "horTh", "--rmst-at", 1825]
    local = tmp_path / "local.json"
    code, _, err = _run(capsys, csv, "--clients", "hospital", *options, "--json", local)
    assert code == 0, err
    expected = json.loads(local.read_text())
    rows = gbsg2.drop(columns="tsize")
    with cli_services(tmp_path / "exact", rows, clients="hospital",
                      policy="allow_event_times = true") as services:
        for extra in ([], ["--secure-aggregation"]):
            remote = tmp_path / "remote.json"
            code, out, err = _run(capsys, *services, *options, *extra, "--json", remote)
            assert code == 0, err
            data = json.loads(remote.read_text())
            assert data["table"] == expected["table"] and data["groups"] == expected["groups"]
            assert data["logrank"]["statistic"] == pytest.approx(
                expected["logrank"]["statistic"], rel=1e-12)
            assert "site services" in out
    with cli_services(tmp_path / "default", rows, clients="hospital") as services:
        code, _, err = _run(capsys, *services, *options)
        assert code == 2 and "allow_event_times" in err and "--time-grid T1,T2" in err, err
        lt_local, lt_remote = tmp_path / "lt-local.json", tmp_path / "lt-remote.json"
        grid = ["--time-grid", "1095", "--rmst-at", 1095]  # per level: 0 or >= 5 a site
        code, out, err = _run(capsys, *services, *options[:6], *grid, "--json", lt_remote)
        assert code == 0, err
        assert "actuarial life table (approximate)" in out
    code, _, err = _run(capsys, csv, "--clients", "hospital", *options[:6], *grid,
                        "--json", lt_local)
    assert code == 0, err
    ours, theirs = (json.loads(p.read_text()) for p in (lt_local, lt_remote))
    assert theirs["table"] == ours["table"] and theirs["approximate"] is True
    assert theirs["logrank"] == ours["logrank"]
