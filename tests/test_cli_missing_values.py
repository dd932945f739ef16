"""The command line reads missing values as pandas.read_csv does (its default tokens,
case-sensitive: a level written ``none`` is a level), and ``--na-values`` adds tokens
(``--no-default-na``: only those), in every reader: ``skfed describe``'s rows, ``skfed
fit`` and ``skfed fit --formula``."""

import csv
import json

import numpy as np
import pandas as pd
import pytest

from skfed.cli.fit import read_csv_files
from skfed.cli.main import main
from skfed.cli.missing_values import PANDAS_NA_VALUES

#: words that look like missing values and are not pandas' (levels to keep)
NOT_MISSING = ["none", "na", "Na", "NONE", "missing", "-", "?", "n.a."]


def _write(path, header, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def test_the_tokens_are_pandas_defaults(tmp_path):
    """Each of pandas' tokens is missing, each look-alike is a value: cell for cell as
    pandas.read_csv reads the file."""
    from pandas._libs.parsers import STR_NA_VALUES

    assert PANDAS_NA_VALUES == frozenset(STR_NA_VALUES)
    cells = sorted(PANDAS_NA_VALUES - {""}) + NOT_MISSING + ["", "x"]
    path = _write(tmp_path / "tokens.csv", ["i", "cell"], [[i, c] for i, c in enumerate(cells)])
    table = read_csv_files([path])
    ours = [row[1] == "" for row in table.rows]
    theirs = pd.read_csv(path, dtype={"cell": object})["cell"].isna().tolist()
    assert ours == theirs
    assert sum(theirs) == len(PANDAS_NA_VALUES)  # the empty cell once, and every token


def _religions(tmp_path, n=240, seed=0):
    """A survey of three sites: religion with a level 'none', an income with -99 for
    'refused to say', a region with 'NA' (North America) among its levels."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "site": np.repeat(["a", "b", "c"], n // 3),
        "religion": rng.choice(["none", "christian", "muslim", "None"], n,
                               p=[0.4, 0.3, 0.2, 0.1]),
        "region": rng.choice(["NA", "EU", "ASIA"], n),
        "age": rng.integers(20, 80, n).astype(float),
        "income": np.round(rng.normal(50, 10, n), 1),
    })
    frame.loc[rng.random(n) < 0.1, "income"] = -99
    frame["y"] = np.round(0.05 * frame["age"] + rng.normal(size=n), 3)
    path = tmp_path / "survey.csv"
    frame.to_csv(path, index=False)
    return str(path)


def _frame(path, *options):
    """``skfed describe``'s rows of the file under its options."""
    import argparse

    from skfed.cli.describe import read_frame
    from skfed.cli.missing_values import add_missing_value_options, missing_tokens

    parser = argparse.ArgumentParser()
    add_missing_value_options(parser)
    frame, _ = read_frame(path, "site", (), missing_tokens(parser.parse_args(list(options))))
    return frame


def test_describe_keeps_a_level_written_none(tmp_path):
    """A religion 'none' is a level (it became 1,021 missing values before); 'None' is
    pandas' missing value; the values equal pandas' on the file."""
    path = _religions(tmp_path)
    frame = pd.read_csv(path, float_precision="round_trip")
    ours = _frame(path)
    assert ours["religion"].isna().tolist() == frame["religion"].isna().tolist()
    assert ours["religion"].dropna().tolist() == frame["religion"].dropna().tolist()
    assert (ours["religion"] == "none").sum() > 0 and ours["religion"].isna().sum() > 0
    assert ours["religion"].value_counts().to_dict() == \
        frame["religion"].value_counts().to_dict()
    # --na-values -99: the income's code for a refusal becomes missing, as pandas'
    income = pd.read_csv(path, na_values=["-99"], float_precision="round_trip")["income"]
    assert income.isna().sum() > 0
    pd.testing.assert_series_equal(_frame(path, "--na-values", "-99")["income"], income)


def test_skfed_describe_counts_the_level_none_as_pandas(tmp_path, capsys):
    path = _religions(tmp_path)
    out = tmp_path / "t1.json"
    assert main(["describe", path, "--clients", "site", "--columns", "religion",
                 "--json", str(out)]) == 0
    capsys.readouterr()
    cells = {(c["level"], c["statistic"]): c["value"]
             for c in json.loads(out.read_text())["table"] if c["variable"] == "religion"}
    expected = pd.read_csv(path)["religion"].value_counts(dropna=False)
    assert cells == {(level, "count") if isinstance(level, str) else ("", "missing"): n
                     for level, n in expected.items()}
    assert cells[("none", "count")] > 0


def test_no_default_na_keeps_a_region_written_NA(tmp_path):
    path = _religions(tmp_path)
    frame = pd.read_csv(path, keep_default_na=False, float_precision="round_trip")
    ours = _frame(path, "--no-default-na")
    assert (ours["region"] == "NA").sum() == (frame["region"] == "NA").sum() > 0
    assert (ours["religion"] == "None").sum() == (frame["religion"] == "None").sum() > 0
    assert ours[["region", "religion"]].notna().all().all()


def test_fit_reads_na_values_in_every_path(tmp_path, capsys):
    """--na-values -99 with --drop-incomplete drops pandas' incomplete rows, without and
    with --formula (the formula's rows equal statsmodels' on pandas' frame)."""
    path = _religions(tmp_path)
    frame = pd.read_csv(path, na_values=["-99"], float_precision="round_trip")
    complete = frame.dropna(subset=["income"])
    js = tmp_path / "fit.json"
    assert main(["fit", path, "--clients", "site", "--target", "y", "--model", "linear",
                 "--drop", "religion", "region", "--na-values", "-99", "--drop-incomplete",
                 "--final", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    dropped = len(frame) - len(complete)
    assert f"dropped {dropped} rows of {len(frame)}" in out
    assert main(["fit", path, "--clients", "site", "--formula", "y ~ age + income",
                 "--family", "gaussian", "--na-values", "-99", "--json", str(js)]) == 0
    capsys.readouterr()
    saved = json.loads(js.read_text())
    assert sum(s["train_rows"] for s in saved["sites"]) == len(complete)
    smf = pytest.importorskip("statsmodels.formula.api")
    reference = smf.ols("y ~ age + income", complete).fit()
    for name in ("age", "income"):
        assert saved["summary"][name]["coef"] == pytest.approx(reference.params[name],
                                                               rel=1e-10)


def test_na_values_are_for_local_files(capsys):
    code = main(["fit", "--site-service", "a=127.0.0.1:1", "--dataset", "rows", "--target",
                 "y", "--model", "linear", "--na-values", "-99"])
    assert code == 2
    assert "--na-values is for local CSV files" in capsys.readouterr().err
