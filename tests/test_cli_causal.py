"""``skfed causal``: the command line's numbers are the Python API's (FedIPW / FedAIPW on
the same rows), the report holds the effect and balance tables, the love plot and the
overlap figure, bad input is one clear message, and site services give the file's
numbers."""

import json

import numpy as np
import pandas as pd
import pytest

from skfed.causal import FedAIPW, FedIPW
from skfed.cli.main import main

from ._sites import SITES


@pytest.fixture
def frame():
    rng = np.random.default_rng(11)
    n = 900
    age, bmi = np.round(rng.normal(50, 10, n), 3), np.round(rng.normal(27, 4, n), 3)
    male = (rng.random(n) < 0.5).astype(int)
    a = (rng.random(n) < 1 / (1 + np.exp(-(0.06 * (age - 50) - 0.3 * male)))).astype(int)
    y = np.round(1 + 2 * a + 0.05 * age + 0.1 * bmi + rng.normal(size=n), 4)
    return pd.DataFrame({"hospital": np.array(SITES)[np.arange(n) % 3], "age": age,
                         "bmi": bmi, "male": male, "treated": a, "gain": y,
                         "ward": np.where(male == 1, "north", "south")})


@pytest.fixture
def csv(frame, tmp_path):
    path = tmp_path / "study.csv"
    frame.to_csv(path, index=False)
    return path


def _run(capsys, *argv):
    code = main(["causal", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


OPTIONS = ["--treatment", "treated", "--outcome", "gain", "--covariates", "age,bmi,male"]


def _api(frame, estimator):
    X = frame[["age", "bmi", "male"]].astype(float)
    return estimator.fit(X, frame["treated"], frame["gain"], clients=frame["hospital"])


@pytest.mark.parametrize("extra, estimator", [
    ([], FedIPW()), (["--estimand", "ATT", "--trim", "0.05,0.95"],
                     FedIPW("ATT", trim=(0.05, 0.95))),
    (["--method", "aipw"], FedAIPW()),
    (["--method", "aipw", "--estimand", "ATT"], FedAIPW("ATT")),
    (["--method", "aipw", "--outcome-covariates", "age,male"],
     FedAIPW(outcome_covariates=["age", "male"])),
    (["--truncate", "5,95", "--truncate-by", "percentile"],
     FedIPW(truncate=(5, 95), truncate_by="percentile"))],
    ids=["ipw", "att-trim", "aipw", "aipw-att", "aipw-outcome-covariates",
         "truncate-percentile"])
def test_the_numbers_are_the_apis(frame, csv, tmp_path, capsys, extra, estimator):
    out_json = tmp_path / "causal.json"
    code, out, err = _run(capsys, csv, "--clients", "hospital", *OPTIONS, *extra,
                          "--json", out_json)
    assert code == 0, err
    api = _api(frame, estimator)
    data = json.loads(out_json.read_text())
    assert data["effect"] == api.effect_ and data["std_err"] == api.std_err_
    assert data["params"] == dict(zip(api.param_names_, api.params_.tolist()))
    assert data["balance"]["age"]["SMD after"] == api.balance_.loc["age", "SMD after"]
    assert f"{api.effect_:.4f}" in out and "Balance" in out and "sandwich" in out


def test_report_has_the_tables_and_both_figures(csv, tmp_path, capsys):
    page = tmp_path / "causal.html"
    code, out, err = _run(capsys, csv, "--clients", "hospital", *OPTIONS, "--label",
                          "age=Age (years)", "--report", page)
    assert code == 0, err
    text = page.read_text()
    assert text.count("<svg") == 2 and "SMD before" in text and "Age (years)" in text
    assert "<h2>Effect</h2>" in text and "difference" in text
    assert (tmp_path / "causal-love.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "causal-overlap.svg").exists()


@pytest.mark.parametrize("argv, message", [
    (["{csv}", "--clients", "hospital", "--outcome", "gain"], "--treatment COLUMN"),
    (["{csv}", "--clients", "hospital", *OPTIONS[:4], "--covariates", "age,ward"],
     "--covariates 'ward' is not numeric"),
    (["{csv}", "--clients", "hospital", "--treatment", "arm", "--outcome", "gain"],
     "--treatment 'arm': no such column"),
    (["{csv}", "--clients", "hospital", *OPTIONS, "--trim", "0.9,0.1"],
     "--trim takes two increasing scores"),
    (["{csv}", "--clients", "hospital", *OPTIONS, "--truncate", "5,150", "--truncate-by",
      "percentile"], "--truncate takes two increasing percentiles in [0, 100]"),
    (["{csv}", "--clients", "hospital", *OPTIONS, "--method", "aipw", "--estimand", "ATO"],
     "--method aipw estimates the ATE, ATT or ATC"),
    (["{csv}", "--clients", "hospital", *OPTIONS, "--outcome-covariates", "age"],
     "add --method aipw"),
    (["{csv}", "--clients", "hospital", "--treatment", "age", "--outcome", "gain",
      "--covariates", "bmi"], "holds values other than 0 and 1"),
])
def test_errors_are_one_clear_message(csv, capsys, argv, message):
    code, _, err = _run(capsys, *[a.format(csv=csv) for a in argv])
    assert code == 2, err
    assert err.startswith("skfed causal: error: ") and message in err, err


@pytest.mark.slow
def test_through_site_services(frame, csv, tmp_path, capsys):
    pytest.importorskip("grpc")
    from ._cli_services import cli_services

    local = tmp_path / "local.json"
    code, _, err = _run(capsys, csv, "--clients", "hospital", *OPTIONS, "--json", local)
    assert code == 0, err
    expected = json.loads(local.read_text())
    with cli_services(tmp_path / "s", frame, clients="hospital") as services:
        remote = tmp_path / "remote.json"
        code, out, err = _run(capsys, *services, *OPTIONS, "--json", remote)
        assert code == 0, err
    data = json.loads(remote.read_text())
    assert data["effect"] == pytest.approx(expected["effect"], rel=1e-12)
    assert data["std_err"] == pytest.approx(expected["std_err"], rel=1e-10)
    assert "site services" in out
