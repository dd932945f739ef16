"""``skfed fit`` on imperfect input: every problem in one error, --impute, --drop-incomplete,
--test-size 0 / --final, and a saved model that predicts from the file's raw rows."""

import csv

import joblib
import numpy as np
import pytest

from skfed.cli.fit import holdout_split
from skfed.cli.main import main

pd = pytest.importorskip("pandas")
SITES = {"a": 40, "b": 30, "c": 50}


def _run(capsys, *argv):
    code = main(["fit", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def messy(tmp_path):
    """Three sites; 'bmi' and 's5' have gaps, 'ward' is text with gaps, 'y' is complete."""
    rng = np.random.default_rng(1)
    n = sum(SITES.values())
    site = np.repeat(list(SITES), list(SITES.values()))
    X = np.round(rng.normal(size=(n, 3)) + np.repeat(rng.normal(size=(3, 3)),
                                                     list(SITES.values()), axis=0), 3)
    ward = np.array(["east", "north", "west"])[rng.integers(0, 3, n)]
    effect = {"east": 0.0, "north": 1.5, "west": -1.0}
    y = np.round(2 * X[:, 0] - X[:, 1] + [effect[w] for w in ward] + 0.2 * rng.normal(size=n),
                 3)
    cells = X.astype(str).astype(object)
    ward = ward.astype(object)
    gaps = {0: rng.choice(n, 7, replace=False), 2: rng.choice(n, 4, replace=False)}
    for j, rows in gaps.items():
        cells[rows, j] = ""
    ward_gaps = rng.choice(n, 3, replace=False)
    ward[ward_gaps] = "NA"
    path = tmp_path / "messy.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["site", "bmi", "bp", "s5", "ward", "y"])
        for row in zip(site, cells[:, 0], cells[:, 1], cells[:, 2], ward, y):
            w.writerow(row)
    incomplete = np.zeros(n, dtype=bool)
    incomplete[gaps[0]] = incomplete[gaps[2]] = incomplete[ward_gaps] = True
    return {"path": str(path), "site": site, "incomplete": incomplete, "y": y}


def test_every_problem_in_one_error(capsys, messy):
    code, _, err = _run(capsys, messy["path"], "--target", "y", "--clients", "site",
                        "--model", "lasso")
    assert code == 2 and "Traceback" not in err
    assert "the input has 4 problems (all of them, one per line):" in err
    assert "feature column 'ward' has 3 missing values" in err
    assert "feature column 'bmi' has 7 missing values" in err
    assert "feature column 's5' has 4 missing values" in err
    assert ("feature column 'ward' is not numeric" in err
            and "declare it --categorical ward" in err)
    # declared categorical: its gaps are reported with the remedy for categories
    code, _, err = _run(capsys, messy["path"], "--target", "y", "--clients", "site",
                        "--model", "lasso", "--categorical", "ward")
    assert code == 2 and "the input has 3 problems" in err
    assert "feature column 'ward' has 3 missing values" in err and "--impute most_frequent" in err


def test_an_empty_column_is_a_problem_even_with_impute(capsys, tmp_path):
    path = tmp_path / "empty.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["site", "x", "blank", "y"])
        for i in range(20):
            w.writerow(["ab"[i % 2], i, "", 2.0 * i])
    code, _, err = _run(capsys, str(path), "--target", "y", "--clients", "site", "--model",
                        "lasso", "--impute", "mean")
    assert code == 2 and "feature column 'blank' has no value in any row: leave it out with " \
        "--drop blank" in err


def test_impute_fits_and_the_saved_pipeline_predicts_raw_rows(capsys, messy, tmp_path):
    model = tmp_path / "model.joblib"
    code, out, err = _run(capsys, messy["path"], "--target", "y", "--clients", "site",
                          "--model", "lasso", "--alpha", "0.01", "--categorical", "ward",
                          "--impute", "median", "--output", str(model))
    assert code == 0, err
    assert "--impute median: filled 14 missing value(s)" in out
    pipe = joblib.load(model)
    assert [name for name, _ in pipe.steps] == ["impute", "encode", "scale", "model"]
    raw = pd.read_csv(messy["path"], float_precision="round_trip")
    test = holdout_split(messy["site"], 0.2, 0)
    # the federated statistics are the pooled training rows' medians / modes
    imp = pipe["impute"]
    np.testing.assert_array_equal(imp.numeric_imputer_.statistics_,
                                  np.nanmedian(raw.loc[~test, ["bmi", "bp", "s5"]], axis=0))
    assert imp.categorical_imputer_.statistics_[0] == raw.loc[~test, "ward"].mode()[0]
    # the Pipeline on the raw file: rows with gaps predicted, equal to imputing by hand
    predicted = pipe.predict(raw)
    assert np.all(np.isfinite(predicted)) and len(predicted) == len(raw)
    filled = raw.copy()
    for col, value in zip(["bmi", "bp", "s5"], imp.numeric_imputer_.statistics_):
        filled[col] = filled[col].fillna(value)
    filled["ward"] = filled["ward"].fillna(imp.categorical_imputer_.statistics_[0])
    onehot = np.column_stack([filled["ward"] == w for w in ["east", "north", "west"]])
    Z = np.column_stack([filled[["bmi", "bp", "s5"]].to_numpy(), onehot.astype(float)])
    Z = (Z - pipe["scale"].mean_) / pipe["scale"].scale_
    np.testing.assert_allclose(predicted, Z @ pipe[-1].coef_ + pipe[-1].intercept_,
                               rtol=1e-10)
    # the model is good on the rows it never saw, the imputed ones included
    r2 = 1 - np.sum((predicted[test] - messy["y"][test]) ** 2) / np.sum(
        (messy["y"][test] - messy["y"][test].mean()) ** 2)
    assert r2 > 0.8


def test_drop_incomplete_says_what_it_dropped(capsys, messy):
    code, out, err = _run(capsys, messy["path"], "--target", "y", "--clients", "site",
                          "--model", "lasso", "--categorical", "ward", "--drop-incomplete")
    assert code == 0, err
    dropped = messy["incomplete"]
    by_site = ", ".join(f"{s} {int(np.sum(dropped & (messy['site'] == s)))}" for s in SITES)
    assert (f"--drop-incomplete: dropped {int(dropped.sum())} rows of {len(dropped)}, the "
            f"incomplete rows (a missing value); by site: {by_site}") in out
    kept = messy["site"][~dropped]
    test = holdout_split(kept, 0.2, 0)
    assert f"{int((~test).sum())} training rows, {int(test.sum())} held out" in out


@pytest.mark.parametrize("flag", [["--test-size", "0"], ["--final"]])
def test_final_model_on_every_row(capsys, messy, tmp_path, flag):
    model = tmp_path / "final.joblib"
    code, out, err = _run(capsys, messy["path"], "--target", "y", "--clients", "site",
                          "--model", "lasso", "--categorical", "ward", "--impute", "mean",
                          "--output", str(model), *flag)
    assert code == 0, err
    n = len(messy["site"])
    assert f"{n} training rows, none held out (--test-size 0" in out
    assert "no held-out score: --test-size 0 fits on every row" in out
    assert "held-out R2" not in out
    pipe = joblib.load(model)
    raw = pd.read_csv(messy["path"], float_precision="round_trip")
    np.testing.assert_allclose(pipe["impute"].numeric_imputer_.statistics_,
                               np.nanmean(raw[["bmi", "bp", "s5"]], axis=0), rtol=1e-12)
    assert np.all(np.isfinite(pipe.predict(raw)))
    code, _, err = _run(capsys, messy["path"], "--target", "y", "--clients", "site",
                        "--model", "lasso", "--final", "--test-size", "0.3")
    assert code == 2 and "--final fits on every row: it takes no --test-size" in err


def test_privacy_from_the_command_line(capsys, messy, tmp_path):
    base = [messy["path"], "--target", "y", "--clients", "site", "--model", "lasso",
            "--categorical", "ward", "--impute", "median", "--alpha", "0.05"]
    code, plain, err = _run(capsys, *base)
    assert code == 0, err
    code, secure, err = _run(capsys, *base, "--secure-aggregation")
    assert code == 0, err
    assert "privacy: secure aggregation (the server decoded only sums" in secure
    # the same model: only the sums were decoded (fixed-point rounding aside)
    coef = lambda text: text.split("coefficients")[1].split("\n\n")[0]  # noqa: E731
    assert coef(plain) == coef(secure)
    model = tmp_path / "dp.joblib"
    code, out, err = _run(capsys, *base, "--dp-epsilon", "50", "--dp-delta", "1e-4",
                          "--clip-norm", "2", "--max-rounds", "50", "--output", str(model))
    assert code == 0, err
    assert ("privacy: client-level differential privacy, epsilon=50, delta=0.0001, "
            "clip_norm=2") in out
    assert "solver fedavg(client_lr=0.5), uniform site weights" in out
    assert "no convergence check under differential privacy" in out
    assert np.all(np.isfinite(joblib.load(model).predict(pd.read_csv(messy["path"]))))
    code, _, err = _run(capsys, *base, "--clip-norm", "2")
    assert code == 2 and "give --dp-epsilon too" in err


@pytest.fixture
def messy_sites(messy, tmp_path):
    """The messy file split into one file per site, each read by that site's Dask worker."""
    distributed = pytest.importorskip("distributed")
    import warnings

    raw = pd.read_csv(messy["path"], keep_default_na=False, dtype=str)
    files = {}
    for s in SITES:
        path = tmp_path / f"{s}.csv"
        raw[raw["site"] == s].drop(columns="site").to_csv(path, index=False)
        files[s] = str(path)
    workers = {s: {"cls": distributed.Worker, "options": {"name": s, "nthreads": 1}}
               for s in files}
    scheduler = {"cls": distributed.Scheduler,
                 "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster:
            yield cluster.scheduler_address, files


def test_remote_form_reports_all_problems_imputes_and_saves_a_raw_row_model(
        capsys, messy, messy_sites, tmp_path):
    address, files = messy_sites
    argv = ["--scheduler", address, "--target", "y", "--model", "lasso", "--alpha", "0.01",
            *(f"--site={s}={path}" for s, path in files.items())]
    code, _, err = _run(capsys, *argv)
    assert code == 2 and "the sites' input has 4 problems (all of them, one per line)" in err
    bmi = ", ".join(f"{s} {int(np.sum(m))}" for s in SITES
                    if (m := (messy["site"] == s) & pd.read_csv(messy["path"])["bmi"].isna()
                        .to_numpy()).any())
    assert f"feature column 'bmi' has 7 missing values (by site: {bmi})" in err
    assert "feature column 'ward' is not numeric" in err and "'s5' has 4 missing" in err
    model = tmp_path / "remote.joblib"
    code, out, err = _run(capsys, *argv, "--categorical", "ward", "--impute", "median",
                          "--output", str(model))
    assert code == 0, err
    assert "--impute median: filled the missing feature values" in out
    pipe = joblib.load(model)
    assert [name for name, _ in pipe.steps] == ["impute", "encode", "scale", "model"]
    raw = pd.read_csv(messy["path"], float_precision="round_trip")
    predicted = pipe.predict(raw)  # the whole input file, gaps and text included
    assert np.all(np.isfinite(predicted))
    r2 = 1 - np.sum((predicted - messy["y"]) ** 2) / np.sum((messy["y"] - messy["y"].mean())
                                                             ** 2)
    assert r2 > 0.8
    code, out, err = _run(capsys, *argv, "--categorical", "ward", "--drop-incomplete")
    assert code == 0, err
    dropped = messy["incomplete"]
    assert (f"--drop-incomplete: dropped {int(dropped.sum())} rows of {len(dropped)}, the "
            "incomplete rows (a missing value); by site: " + ", ".join(
                f"{s} {int(np.sum(dropped & (messy['site'] == s)))}" for s in SITES)) in out


def test_html_report_of_a_final_protected_fit(capsys, messy, tmp_path):
    pytest.importorskip("matplotlib")
    report = tmp_path / "report.html"
    code, out, err = _run(capsys, messy["path"], "--target", "y", "--clients", "site",
                          "--model", "lasso", "--categorical", "ward", "--impute", "median",
                          "--final", "--secure-aggregation", "--report", str(report))
    assert code == 0, err
    page = report.read_text()
    assert "<h2>No held-out score</h2>" in page and "held-out R2" not in page
    assert "<h2>Privacy</h2>" in page and "secure aggregation" in page
    rounds = int(out.split(" round")[-2].split("\n")[-1])
    assert f"{rounds} round{'' if rounds == 1 else 's'}, converged" in page
