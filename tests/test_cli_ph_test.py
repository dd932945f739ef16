"""The proportional-hazards test in every Cox report of ``skfed fit --summary``: with and
without ``--formula``, in process and through real site services, as text, JSON and in
the HTML report; where it cannot be computed (secure aggregation) the report says why.

References: lifelines' ``proportional_hazard_test`` of a ``CoxPHFitter`` fitted on the
pooled rows, with R's rank of the event times (ties averaged) as its transform (what
test_ph_test.py holds the Python API to), and the Python API on the same rows.
"""

import json

import numpy as np
import pandas as pd
import pytest

lifelines = pytest.importorskip("lifelines")
from lifelines.statistics import proportional_hazard_test as lifelines_ph  # noqa: E402

from skfed.cli.main import main  # noqa: E402
from skfed.formula import coxph  # noqa: E402
from skfed.survival import FedCoxPH, proportional_hazard_test, survival_target  # noqa: E402

from ._sites import ROSSI_POLICY, SITES, split_frames  # noqa: E402

COVARIATES = ["fin", "age", "race", "wexp", "mar", "paro", "prio"]
FORMULA = "Surv(week, arrest) ~ age + fin + C(race) + prio"


@pytest.fixture(scope="module")
def rossi(tmp_path_factory):
    """lifelines' rossi in three sites by age (the services' split too), as one CSV."""
    from lifelines.datasets import load_rossi

    parts = split_frames(load_rossi(), 3, by="age")
    frame = pd.concat([p.assign(site=s) for p, s in zip(parts, SITES)], ignore_index=True)
    path = tmp_path_factory.mktemp("rossi") / "rossi.csv"
    frame.to_csv(path, index=False)
    return path, frame


def _run(capsys, *argv):
    code = main(["fit", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _average_rank(durations, events, weights):
    """R's rank of the event times (ties averaged), as a lifelines transform."""
    times = durations.to_numpy()[events.to_numpy().astype(bool)]
    ranks = [np.sum(times < t) + (np.sum(times == t) + 1) / 2 for t in durations.to_numpy()]
    return pd.Series(ranks, index=durations.index)


def _ph(path, capsys, tmp_path, *argv):
    out_json = tmp_path / "fit.json"
    code, out, err = _run(capsys, path, "--clients", "site", "--model", "cox", "--summary",
                          "--tol", "1e-10", *argv, "--json", out_json)
    assert code == 0, err
    return json.loads(out_json.read_text())["ph_test"], out


def _table(ph):
    return pd.DataFrame(ph["table"]).T


def test_the_table_equals_lifelines(rossi, capsys, tmp_path):
    path, frame = rossi
    ph, out = _ph(path, capsys, tmp_path, "--target", "arrest", "week")
    assert ph["time_transform"] == "rank" and ph["reason"] is None
    cph = lifelines.CoxPHFitter().fit(frame[COVARIATES + ["week", "arrest"]], "week", "arrest")
    ref = lifelines_ph(cph, frame[COVARIATES + ["week", "arrest"]],
                       time_transform=_average_rank).summary.loc[COVARIATES]
    table = _table(ph)
    assert list(table.index) == COVARIATES + ["GLOBAL"]
    np.testing.assert_allclose(table.loc[COVARIATES, "test_statistic"].astype(float),
                               ref["test_statistic"], rtol=1e-6)
    np.testing.assert_allclose(table.loc[COVARIATES, "p"].astype(float), ref["p"], rtol=1e-6)
    assert table.loc["GLOBAL", "df"] == 7
    assert "proportional-hazards test: scaled Schoenfeld residuals against the rank" in out
    age = ref.loc["age", "test_statistic"]
    assert any(line.split()[:2] == ["age", f"{age:.3f}"] for line in out.splitlines())


def test_site_strata_and_a_strata_column_equal_the_python_api(rossi, capsys, tmp_path):
    path, frame = rossi
    y = survival_target(frame["arrest"].to_numpy(bool), frame["week"].to_numpy(float))
    ph, _ = _ph(path, capsys, tmp_path, "--target", "arrest", "week", "--strata", "site")
    cox = FedCoxPH(strata="site", tol=1e-10).fit(frame[COVARIATES], y, clients=frame["site"])
    api = proportional_hazard_test(cox, frame[COVARIATES], y, clients=frame["site"],
                                   time_transform="identity")
    assert ph["time_transform"] == "identity"  # rank needs the pooled event times
    np.testing.assert_allclose(_table(ph)["test_statistic"].astype(float),
                               api["test_statistic"], rtol=1e-6)
    ph, _ = _ph(path, capsys, tmp_path, "--target", "arrest", "week", "--strata", "race")
    X = frame[COVARIATES]
    cox = FedCoxPH(strata="race", tol=1e-10).fit(X, y, clients=frame["site"])
    api = proportional_hazard_test(cox, X, y, clients=frame["site"])
    assert list(_table(ph).index) == [c for c in COVARIATES if c != "race"] + ["GLOBAL"]
    np.testing.assert_allclose(_table(ph)["test_statistic"].astype(float),
                               api["test_statistic"], rtol=1e-6)


def test_a_formula_report_has_its_results_test(rossi, capsys, tmp_path):
    path, frame = rossi
    page = tmp_path / "cox.html"
    ph, out = _ph(path, capsys, tmp_path, "--formula", FORMULA, "--report", page)
    api = coxph(FORMULA, frame, clients="site", tol=1e-10).proportional_hazard_test()
    table = _table(ph)
    assert list(table.index) == list(api.index)
    np.testing.assert_allclose(table["test_statistic"].astype(float), api["test_statistic"],
                               rtol=1e-6)
    assert "GLOBAL" in out
    text = page.read_text()
    assert "<h2>Proportional-hazards test</h2>" in text and "GLOBAL" in text


def test_secure_aggregation_says_why_there_is_no_test(rossi, capsys, tmp_path):
    path, _ = rossi
    page = tmp_path / "cox.html"
    ph, out = _ph(path, capsys, tmp_path, "--target", "arrest", "week",
                  "--secure-aggregation", "--report", page)
    assert ph["table"] is None and "secure aggregation" in ph["reason"]
    assert "proportional-hazards test: not available: the model was fitted under secure " \
           "aggregation" in out
    assert "Not available: the model was fitted under secure aggregation" in page.read_text()


def test_through_site_services(rossi, capsys, tmp_path):
    """Each site its own stratum (what any service answers): the test equals the local
    file's; a formula's shared baseline at services that allow event times too; a site's
    refusal of the test's sums leaves the report standing, saying why."""
    pytest.importorskip("grpc")
    from ._cli_services import cli_services

    path, frame = rossi
    local, _ = _ph(path, capsys, tmp_path, "--target", "arrest", "week", "--strata", "site")
    formula_local, _ = _ph(path, capsys, tmp_path, "--formula", FORMULA)
    policy = ROSSI_POLICY + "\nallow_event_times = true"
    with cli_services(tmp_path / "services", frame, clients="site", dataset="rossi",
                      policy=policy) as services:
        out_json = tmp_path / "remote.json"
        options = [*services, "--model", "cox", "--summary", "--tol", "1e-10"]
        code, out, err = _run(capsys, *options, "--target", "arrest", "week", "--strata",
                              "site", "--json", out_json)
        assert code == 0, err
        remote = json.loads(out_json.read_text())["ph_test"]
        code, out, err = _run(capsys, *options, "--formula", FORMULA, "--json", out_json)
        assert code == 0, err
        formula_remote = json.loads(out_json.read_text())["ph_test"]
    for ours, theirs in ((local, remote), (formula_local, formula_remote)):
        assert theirs["time_transform"] == ours["time_transform"]
        np.testing.assert_allclose(_table(theirs)["test_statistic"].astype(float),
                                   _table(ours)["test_statistic"].astype(float), rtol=1e-6)
    assert "proportional-hazards test" in out
    # a site holding fewer events than its min_level_count refuses the test's sums: the
    # fit's report stands and says why there is no test
    strict = ROSSI_POLICY + "\nmin_level_count = 40"
    with cli_services(tmp_path / "strict", frame, clients="site", dataset="rossi",
                      policy=strict) as services:
        code, out, err = _run(capsys, *services, "--model", "cox", "--summary", "--target",
                              "arrest", "week", "--strata", "site", "--json", out_json)
    assert code == 0, err
    refused = json.loads(out_json.read_text())["ph_test"]
    assert refused["table"] is None and "survival.schoenfeld_moments" in refused["reason"]
    assert "proportional-hazards test: not available: site " in out
    assert "(policy rule 'min_level_count')" in out and "exp(coef)" in out
