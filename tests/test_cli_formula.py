"""``skfed fit --formula``: skfed.formula.glm and coxph from the command line (local CSV
files and site services), equal to the Python API and to statsmodels/lifelines; and
``--categorical`` without a formula, treatment-coded so that ``--summary`` is
statsmodels' table."""

import argparse
import io
import json

import joblib
import numpy as np
import pandas as pd
import pytest

from skfed.cli.fit import CLIError
from skfed.cli.main import _fit_parser, main, run_fit

sm = pytest.importorskip("statsmodels.api")
smf = pytest.importorskip("statsmodels.formula.api")
pytest.importorskip("formulaic")

from skfed.formula import coxph, glm  # noqa: E402

SITES = ("north", "south", "east")
FORMULA = "died ~ age + C(sex) + C(ward) + age:C(sex) + np.log(bmi)"


def _args(*argv):
    parser = argparse.ArgumentParser()
    _fit_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["fit", *argv])


@pytest.fixture(scope="module")
def patients(tmp_path_factory):
    """Deaths at three hospitals (by age), a few missing BMIs; one CSV and one per site."""
    rng = np.random.default_rng(7)
    n = 700
    frame = pd.DataFrame({"age": rng.normal(60, 10, n).round(1),
                          "sex": rng.choice(["F", "M"], n),
                          "ward": rng.choice(["a", "b", "c"], n),
                          "bmi": np.exp(rng.normal(3.25, 0.15, n)).round(2)})
    eta = -0.5 + 0.04 * (frame["age"] - 60) + 0.5 * (frame["sex"] == "M")
    frame["died"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    frame.loc[rng.random(n) < 0.03, "bmi"] = np.nan
    frame["hospital"] = np.array(SITES)[np.digitize(frame["age"], [55, 65])]
    root = tmp_path_factory.mktemp("patients")
    frame.to_csv(root / "all.csv", index=False)
    files = []
    for site in SITES:
        files.append(str(root / f"{site}.csv"))
        frame[frame["hospital"] == site].drop(columns=["hospital"]).to_csv(files[-1],
                                                                           index=False)
    return frame, str(root / "all.csv"), files


def test_glm_formula_equals_the_python_api_and_statsmodels(patients, tmp_path):
    frame, path, files = patients
    out = io.StringIO()
    report = run_fit(_args(path, "--clients", "hospital", "--formula", FORMULA, "--model",
                           "logistic", "--json", str(tmp_path / "f.json"), "--output",
                           str(tmp_path / "f.joblib")), out=out)
    python = glm(FORMULA, frame, family="binomial", clients="hospital")
    pd.testing.assert_frame_equal(report.summary, python.summary(), rtol=1e-10)
    complete = frame.dropna()
    ref = smf.glm(FORMULA, complete, family=sm.families.Binomial()).fit()
    table = report.summary.loc[ref.params.index]
    np.testing.assert_allclose(table["coef"], ref.params, rtol=1e-7)
    np.testing.assert_allclose(table["std err"], ref.bse, rtol=1e-6)
    text = out.getvalue()
    assert "C(sex)[T.M]" in text and "age:C(sex)[T.M]" in text and "np.log(bmi)" in text
    assert "a formula fit uses every complete row" in text
    # the JSON and the saved results carry the same numbers
    saved = json.loads((tmp_path / "f.json").read_text())
    assert saved["formula"] == FORMULA and saved["design"]["format"] == "skfed.formula/1"
    assert saved["summary"]["C(sex)[T.M]"]["coef"] == pytest.approx(ref.params["C(sex)[T.M]"],
                                                                   rel=1e-7)
    assert saved["intercept"] == [pytest.approx(ref.params["Intercept"], rel=1e-7)]
    loaded = joblib.load(tmp_path / "f.joblib")
    np.testing.assert_allclose(loaded.predict(complete[:5]), ref.predict(complete[:5]),
                               rtol=1e-7)
    # one file per site, the --family spelling: the same fit
    again = run_fit(_args("--site-files", *files, "--formula", FORMULA, "--family",
                          "binomial"), out=io.StringIO())
    pd.testing.assert_frame_equal(again.summary, report.summary, rtol=1e-9)


def test_cox_formula_equals_coxph(tmp_path):
    lifelines = pytest.importorskip("lifelines")
    from lifelines.datasets import load_rossi

    rossi = load_rossi()
    rossi["site"] = np.array(SITES)[np.digitize(rossi["age"], [20, 24])]
    rossi.to_csv(tmp_path / "rossi.csv", index=False)
    formula = "Surv(week, arrest) ~ fin + age + C(wexp) + prio"
    report = run_fit(_args(str(tmp_path / "rossi.csv"), "--clients", "site", "--model", "cox",
                           "--formula", formula, "--strata", "site"), out=io.StringIO())
    python = coxph(formula, rossi, clients="site", strata="site")
    pd.testing.assert_frame_equal(report.summary, python.summary(), rtol=1e-10)
    ref = lifelines.CoxPHFitter().fit(rossi[["fin", "age", "wexp", "prio", "week", "arrest",
                                             "site"]], "week", "arrest", strata=["site"],
                                      fit_options={"precision": 1e-12})
    assert report.summary.loc["C(wexp)[T.1]", "coef"] == pytest.approx(ref.params_["wexp"],
                                                                      rel=1e-7)
    # --time-grid: the formula's Cox model on grouped times, as coxph(time_grid=...)
    grid = "0,4,8,13,17,21,26,30,34,39,43,47,52"
    report = run_fit(_args(str(tmp_path / "rossi.csv"), "--clients", "site", "--model", "cox",
                           "--formula", formula, "--time-grid", grid), out=io.StringIO())
    python = coxph(formula, rossi, clients="site",
                   time_grid=[float(t) for t in grid.split(",")])
    pd.testing.assert_frame_equal(report.summary, python.summary(), rtol=1e-10)


@pytest.mark.parametrize("extra, message", [
    (["--target", "died"], "--target does not go with --formula"),
    (["--categorical", "sex"], "write C(column) in the formula"),
    (["--test-size", "0.2"], "every complete row"),
    (["--alpha", "1"], "unpenalized"),
])
def test_formula_refuses_what_it_does_not_take(patients, extra, message):
    _, path, _ = patients
    with pytest.raises(CLIError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_fit(_args(path, "--clients", "hospital", "--formula", FORMULA, "--model",
                      "logistic", *extra), out=io.StringIO())
    with pytest.raises(CLIError, match="--formula fits --model linear"):
        run_fit(_args(path, "--clients", "hospital", "--formula", FORMULA, "--model",
                      "lasso"), out=io.StringIO())


def test_categorical_summary_is_statsmodels_treatment_coding(patients, capsys):
    frame, path, _ = patients
    code = main(["fit", path, "--clients", "hospital", "--target", "died", "--model",
                 "logistic", "--C", "inf", "--categorical", "sex", "ward", "--drop-incomplete",
                 "--final", "--summary", "--tol", "1e-10"])
    out = capsys.readouterr().out
    assert code == 0 and "reference levels" in out and "sex 'F', ward 'a'" in out
    run = run_fit(_args(path, "--clients", "hospital", "--target", "died", "--model",
                        "logistic", "--C", "inf", "--categorical", "sex", "ward",
                        "--drop-incomplete", "--final", "--summary", "--tol", "1e-10"),
                  out=io.StringIO())
    ref = smf.glm("died ~ age + C(sex) + C(ward) + bmi", frame.dropna(),
                  family=sm.families.Binomial()).fit(tol=1e-13)
    names = {"(intercept)": "Intercept", "age": "age", "sex=M": "C(sex)[T.M]",
             "ward=b": "C(ward)[T.b]", "ward=c": "C(ward)[T.c]", "bmi": "bmi"}
    table = run.summary
    assert sorted(table.index) == sorted(names)
    rows = [names[n] for n in table.index]
    np.testing.assert_allclose(table["coef"], ref.params[rows], rtol=1e-7)
    np.testing.assert_allclose(table["std err"], ref.bse[rows], rtol=1e-6)
    np.testing.assert_allclose(table["P>|z|"], ref.pvalues[rows], rtol=1e-5)
    # the saved pipeline codes new rows the same way
    pipeline = run.model_to_save
    rows_in = frame.dropna().drop(columns=["died", "hospital"])[:6]
    np.testing.assert_allclose(pipeline.predict_proba(rows_in)[:, 1],
                               ref.predict(frame.dropna()[:6]), rtol=1e-6)


@pytest.mark.filterwarnings("ignore:.*fewer than 20 clusters:UserWarning")
def test_glm_formula_through_site_services(patients, tmp_path, capsys):
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    from ._sites import site_config

    # complete rows only: a site refuses a row step that leaves out fewer than its
    # min_rows rows (here the few rows without a BMI)
    frame = patients[0].dropna()
    certs = make_certificates(tmp_path / "certs", list(SITES))
    servers, addresses = [], {}
    try:
        for name in SITES:
            path = tmp_path / f"{name}.csv"
            frame[frame["hospital"] == name].drop(columns=["hospital"]).to_csv(path,
                                                                               index=False)
            # the officer declares BMI's range: log(bmi) is finite on it
            config = site_config(tmp_path / name, name, certs=certs,
                                 datasets={"patients": (str(path), None)},
                                 declare="domains = { bmi = [10, 80] }")
            servers.append(SiteServer(load_config(config)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        argv = ["fit", "--dataset", "patients", "--formula", FORMULA, "--family", "binomial",
                "--cov-type", "cluster", "--json", str(tmp_path / "s.json"),
                "--tls-ca-file", str(certs.ca.cert), "--tls-cert", str(certs.client.cert),
                "--tls-key", str(certs.client.key),
                *(f"--site-service={n}={a}" for n, a in addresses.items())]
        assert main(argv) == 0
        assert "C(sex)[T.M]" in capsys.readouterr().out
        saved = json.loads((tmp_path / "s.json").read_text())
    finally:
        for server in servers:
            server.stop()
    python = glm(FORMULA, frame, family="binomial", clients="hospital", cov_type="cluster")
    summary = python.summary()
    for name in summary.index:
        for column in ("coef", "std err", "P>|z|"):
            assert saved["summary"][name][column] == pytest.approx(summary.loc[name, column],
                                                                   rel=1e-8)
    assert [s["train_rows"] for s in saved["sites"]] == [
        int(python.rows_by_site[s]) for s in SITES]
