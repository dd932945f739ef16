"""One rule for held-out rows in every path of ``skfed fit`` (issue 36, item 5): a
regression table is fitted on every row unless the user asks for a held-out evaluation
(``--test-size``); a run without a table holds out a fifth of each site's rows; the
output says which rows were held out (how many per site) and why."""

import io
import json

import numpy as np
import pandas as pd
import pytest

from skfed.cli.main import main, run_fit

from .test_cli_formula import _args

sm = pytest.importorskip("statsmodels.api")
smf = pytest.importorskip("statsmodels.formula.api")

SITES = ("north", "south", "east")


@pytest.fixture(scope="module")
def deaths(tmp_path_factory):
    """585 patients at three hospitals (the issue's count): age, sex, died."""
    rng = np.random.default_rng(36)
    n = 585
    frame = pd.DataFrame({"hospital": np.array(SITES)[rng.integers(0, 3, n)],
                          "age": rng.normal(60, 10, n).round(1),
                          "sex": rng.choice(["F", "M"], n)})
    eta = -0.3 + 0.05 * (frame["age"] - 60) + 0.6 * (frame["sex"] == "M")
    frame["died"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    path = tmp_path_factory.mktemp("deaths") / "deaths.csv"
    frame.to_csv(path, index=False)
    return frame, str(path)


LOGISTIC = ("--clients", "hospital", "--target", "died", "--model", "logistic", "--C", "inf",
            "--categorical", "sex", "--summary", "--tol", "1e-10")
NAMES = {"(intercept)": "Intercept", "age": "age", "sex=M": "C(sex)[T.M]"}


def test_a_summary_uses_every_row_as_the_formula_path_does(deaths, tmp_path, capsys):
    """Two paths, one answer: ``--summary`` and ``--formula`` fit the same 585 rows, equal
    to statsmodels' GLM on them (it was 466 of 585 without --formula)."""
    frame, path = deaths
    reference = smf.glm("died ~ age + C(sex)", frame, family=sm.families.Binomial()).fit(
        tol=1e-13)
    report = run_fit(_args(path, *LOGISTIC), out=io.StringIO())
    assert report.overall[:2] == (585, 0) and not report.test.any()
    table = report.summary
    rows = [NAMES[n] for n in table.index]
    np.testing.assert_allclose(table["coef"], reference.params[rows], rtol=1e-7)
    np.testing.assert_allclose(table["std err"], reference.bse[rows], rtol=1e-6)
    saved = tmp_path / "formula.json"
    assert main(["fit", path, "--clients", "hospital", "--formula", "died ~ age + C(sex)",
                 "--family", "binomial", "--json", str(saved)]) == 0
    assert "585 training rows, none held out (--formula: a regression table is fitted on " \
        "every complete row)" in capsys.readouterr().out
    formula = json.loads(saved.read_text())
    assert formula["overall"]["train_rows"] == 585
    for name, row in table.iterrows():
        assert formula["summary"][NAMES[name]]["coef"] == pytest.approx(row["coef"], rel=1e-7)
    # the text says why nothing is held out, with the rows of each site
    assert main(["fit", path, *LOGISTIC]) == 0
    out = capsys.readouterr().out
    assert "585 training rows, none held out (--summary: a regression table is fitted on " \
        "every row unless --test-size asks)" in out
    counts = frame["hospital"].value_counts()
    assert "no held-out score: a regression table (--summary) is fitted on every row (rows " \
        "by site: " + ", ".join(f"{s} {counts[s]}" for s in sorted(SITES)) in out


def test_a_held_out_evaluation_when_asked_says_which_rows_and_why(deaths, tmp_path, capsys):
    frame, path = deaths
    page = tmp_path / "report.html"
    saved = tmp_path / "fit.json"
    assert main(["fit", path, *LOGISTIC, "--test-size", "0.2", "--report", str(page),
                 "--json", str(saved)]) == 0
    out = capsys.readouterr().out
    report = run_fit(_args(path, *LOGISTIC, "--test-size", "0.2"), out=io.StringIO())
    test = report.test
    sites = frame["hospital"].to_numpy()
    by_site = ", ".join(f"{s} {int((test & (sites == s)).sum())}" for s in sorted(SITES))
    note = (f"held-out rows: {int(test.sum())} of 585 (by site: {by_site}), 20% of each "
            "site's rows (--test-size 0.2, as asked), drawn here from --random-state 0; the "
            f"regression table comes from the {int((~test).sum())} training rows, not all "
            "585 (without --test-size it is fitted on every row)")
    assert note in " ".join(out.split())
    assert json.loads(saved.read_text())["holdout"] == note
    assert "Held-out rows: " + note[len("held-out rows: "):].replace("'", "&#x27;") in \
        page.read_text()
    # the table is the training rows' (statsmodels' on them)
    reference = smf.glm("died ~ age + C(sex)", frame[~test],
                        family=sm.families.Binomial()).fit(tol=1e-13)
    rows = [NAMES[n] for n in report.summary.index]
    np.testing.assert_allclose(report.summary["coef"], reference.params[rows], rtol=1e-7)


def test_a_run_without_a_table_holds_out_a_fifth_and_says_why(deaths, capsys):
    _, path = deaths
    assert main(["fit", path, "--clients", "hospital", "--target", "died", "--model",
                 "logistic", "--categorical", "sex"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(--test-size 0.2, the default of a run without a regression table: the " \
        "federated, local-only and pooled models are compared on rows none was fitted " \
        "on), drawn here from --random-state 0" in out
    assert "the regression table comes from" not in out
    # --final: the final model, as before
    assert main(["fit", path, "--clients", "hospital", "--target", "died", "--model",
                 "logistic", "--categorical", "sex", "--final"]) == 0
    assert "none held out (--test-size 0: the final model" in capsys.readouterr().out


def test_boosted_trees_say_which_rows_they_held_out(deaths, capsys):
    _, path = deaths
    assert main(["fit", path, "--clients", "hospital", "--target", "died", "--model",
                 "boosting-classifier", "--categorical", "sex", "--max-rounds", "2",
                 "--max-depth", "2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: held-out rows: " in out and "drawn here from --random-state 0" in out
