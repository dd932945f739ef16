"""``skfed fit --formula ... --model gee --groups COLUMN``: skfed.formula.gee from the
command line, the Python API's numbers (and statsmodels')."""

import io
import json

import pandas as pd
import pytest

from skfed.cli.fit import CLIError
from skfed.cli.main import run_fit
from skfed.formula import gee

from .test_cli_formula import _args
from .test_gee import sites_of, visits

FORMULA = "poisson ~ age + dose"


@pytest.fixture(scope="module")
def patients(tmp_path_factory):
    frame = visits(2)
    frame["hospital"] = sites_of(frame, "heterogeneous")
    path = tmp_path_factory.mktemp("visits") / "visits.csv"
    frame.to_csv(path, index=False)
    # the rows as the command line reads them (each number the float nearest its text)
    return pd.read_csv(path, skipinitialspace=True, float_precision="round_trip"), str(path)


def test_a_gee_from_the_command_line(patients, tmp_path):
    frame, path = patients
    out = io.StringIO()
    report = run_fit(_args(path, "--clients", "hospital", "--formula", FORMULA, "--model",
                           "gee", "--family", "poisson", "--groups", "id", "--time", "visit",
                           "--cov-struct", "autoregressive", "--json",
                           str(tmp_path / "g.json")), out=out)
    python = gee(FORMULA, frame, groups="id", time="visit", family="poisson",
                 cov_struct="autoregressive", clients="hospital")
    pd.testing.assert_frame_equal(report.summary, python.summary(), rtol=1e-10)
    text = out.getvalue()
    assert "FedGEE" in text and "Fisher scoring on the GEE's score" in text
    assert "clusters: 90" in text and "working correlation parameter: " in text
    assert "converged" in text
    saved = json.loads((tmp_path / "g.json").read_text())
    assert saved["summary"]["age"]["coef"] == pytest.approx(python.params["age"], rel=1e-10)
    naive = run_fit(_args(path, "--clients", "hospital", "--formula", FORMULA, "--model",
                          "gee", "--family", "poisson", "--groups", "id", "--cov-struct",
                          "exchangeable", "--cov-type", "nonrobust"), out=io.StringIO())
    python = gee(FORMULA, frame, groups="id", family="poisson", cov_struct="exchangeable",
                 cov_type="naive", clients="hospital")
    pd.testing.assert_frame_equal(naive.summary, python.summary(), rtol=1e-10)


@pytest.mark.parametrize("extra, message", [
    (["--formula", FORMULA, "--model", "gee"], "needs --groups COLUMN"),
    (["--formula", FORMULA, "--model", "gee", "--groups", "id", "--cov-type", "HC0"],
     "takes no --offset"),
    (["--formula", FORMULA, "--model", "poisson", "--groups", "id"], "--groups is for "
                                                                     "--model gee"),
    (["--target", "poisson", "--model", "gee"], "fitted from a formula naming its outcome"),
])
def test_what_the_command_line_refuses(patients, extra, message):
    _, path = patients
    with pytest.raises(CLIError, match=message):
        run_fit(_args(path, "--clients", "hospital", *extra), out=io.StringIO())
