"""``skfed fit --summary``: the regression table of a GLM on the original columns (issue 21),
equal to statsmodels' GLM on the same rows, in the text output and the HTML report."""

import argparse
import io

import numpy as np
import pandas as pd
import pytest

sm = pytest.importorskip("statsmodels.api")

from skfed.cli.fit import CLIError  # noqa: E402
from skfed.cli.main import _fit_parser, main, run_fit  # noqa: E402


def _args(*argv):
    parser = argparse.ArgumentParser()
    _fit_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["fit", *argv])


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    rng = np.random.default_rng(0)
    n = 900
    frame = pd.DataFrame({"age": rng.normal(50, 10, n), "smoker": rng.integers(0, 2, n),
                          "site": rng.choice(["a", "b", "c"], n)})
    frame["events"] = rng.poisson(np.exp(-3 + 0.03 * frame["age"] + 0.4 * frame["smoker"]))
    path = tmp_path_factory.mktemp("cohort") / "cohort.csv"
    frame.to_csv(path, index=False)
    return path, pd.read_csv(path, float_precision="round_trip")


@pytest.mark.parametrize("cov_type", ["nonrobust", "HC0", "cluster"])
def test_summary_equals_statsmodels(cohort, cov_type):
    path, frame = cohort
    report = run_fit(_args(str(path), "--target", "events", "--clients", "site", "--model",
                           "poisson", "--alpha", "0", "--summary", "--cov-type", cov_type,
                           "--test-size", "0", "--tol", "1e-10"), out=io.StringIO())
    X = sm.add_constant(frame[["age", "smoker"]])
    kwargs = {"cov_kwds": {"groups": pd.factorize(frame["site"])[0]}} if cov_type == "cluster" \
        else {}
    ref = sm.GLM(frame["events"], X, family=sm.families.Poisson()).fit(
        cov_type=cov_type, tol=1e-12, **kwargs)
    table = report.summary
    np.testing.assert_allclose(table["coef"], ref.params, rtol=1e-7)
    np.testing.assert_allclose(table["std err"], ref.bse, rtol=1e-6)
    np.testing.assert_allclose(table[["[0.025", "0.975]"]], ref.conf_int(), rtol=1e-6)
    np.testing.assert_allclose(table["exp(coef)"], np.exp(ref.params), rtol=1e-7)


def test_summary_in_the_text_and_the_report(cohort, tmp_path, capsys):
    path, _ = cohort
    html = tmp_path / "report.html"
    code = main(["fit", str(path), "--target", "events", "--clients", "site", "--model",
                 "poisson", "--alpha", "0", "--summary", "--cov-type", "cluster",
                 "--report", str(html)])
    out = capsys.readouterr().out
    assert code == 0 and "regression table on the original columns" in out
    assert "cluster-robust with the sites as clusters" in out and "rate ratios" in out
    text = html.read_text()
    assert "Regression table (original columns)" in text and "exp(coef)" in text


def test_summary_refused_where_it_is_not_valid(cohort, capsys):
    path, _ = cohort
    code = main(["fit", str(path), "--target", "events", "--clients", "site", "--model",
                 "poisson", "--summary"])  # the default alpha=1 penalizes
    assert code == 2 and "penalizes the coefficients" in capsys.readouterr().err
    code = main(["fit", str(path), "--target", "events", "--clients", "site", "--model",
                 "lasso", "--cov-type", "HC1"])
    assert code == 2 and "--cov-type is for the models" in capsys.readouterr().err
    with pytest.raises(CLIError, match="has no penalty"):
        run_fit(_args(str(path), "--target", "events", "--clients", "site", "--model",
                      "linear", "--alpha", "1"), out=io.StringIO())
