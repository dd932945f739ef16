"""``skfed fit`` end to end: a generated multi-site CSV, numbers checked against the Python API."""

import csv
import re
import shutil
import subprocess
import sys

import joblib
import numpy as np
import pytest

from skfed import FedLasso, FedLogisticRegression, FedLowRank
from skfed._cli import main
from skfed._cli_fit import holdout_split

SITES = {"north": 60, "south": 45, "east": 80, "west": 30}


def _write(path, header, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


@pytest.fixture
def dataset():
    """Four sites with shifted features; a regression target, a class label, a text column."""
    rng = np.random.default_rng(0)
    X, site = [], []
    for s, n in SITES.items():
        X.append(rng.normal(size=(n, 4)) + rng.normal(size=4))
        site += [s] * n
    X, site = np.round(np.vstack(X), 4), np.array(site)
    y = np.round(2 * X[:, 0] - X[:, 2] + 0.3 * rng.normal(size=len(site)), 4)
    y2 = np.round(X[:, 0] + X[:, 1] + 0.3 * rng.normal(size=len(site)), 4)
    label = np.where(X[:, 1] + 0.5 * rng.normal(size=len(site)) > 0.3, "sick", "well")
    ward = np.array(["a", "b", "c"])[np.arange(len(site)) % 3]
    return {"X": X, "y": y, "y2": y2, "label": label, "site": site, "ward": ward}


@pytest.fixture
def one_csv(dataset, tmp_path):
    d = dataset
    rows = [[s, *x, a, b, lab, w] for s, x, a, b, lab, w in
            zip(d["site"], d["X"], d["y"], d["y2"], d["label"], d["ward"])]
    return _write(tmp_path / "all_sites.csv",
                  ["site", "age", "bmi", "bp", "chol", "y", "y2", "status", "ward"], rows)


def _run(capsys, *argv):
    code = main(["fit", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _coef_table(text):
    """``{feature: [values]}`` from the printed coefficient table."""
    block = text.split("coefficients (non-zeros first):\n")[1].split("\n\n")[0].splitlines()
    table = {}
    for line in block[1:]:
        if line.strip().startswith("exactly zero"):
            for name in line.split(":", 1)[1].split(","):
                table[name.strip()] = [0.0]
            continue
        name, *values = line.split()
        table[name] = [float(v) for v in values]
    return table


def _metric_table(text):
    block = text.split("(higher is better):\n")[1].split("\n\n")[0].splitlines()[1:]
    rows = {}
    for line in block:
        if line.strip().startswith("note:"):
            continue
        parts = line.split()
        rows[parts[0]] = [np.nan if p == "n/a" else float(p) for p in parts[1:]]
    return rows


def _r2(y, p):
    return 1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2)


def test_lasso_numbers_match_the_python_api(capsys, dataset, one_csv, tmp_path):
    model = tmp_path / "model.joblib"
    code, out, err = _run(capsys, one_csv, "--target", "y", "--clients", "site", "--model",
                          "lasso", "--alpha", "0.05", "--drop", "y2", "status", "ward",
                          "--output", str(model))
    assert code == 0, err
    d = dataset
    test = holdout_split(d["site"], 0.2, 0)
    tr = ~test
    fed = FedLasso(alpha=0.05, max_rounds=1000, tol=1e-6, random_state=0).fit(
        d["X"][tr], d["y"][tr], clients=d["site"][tr])
    coef = _coef_table(out)
    names = ["age", "bmi", "bp", "chol"]
    printed = np.array([coef[n][0] for n in names])
    np.testing.assert_allclose(printed, fed.coef_, rtol=1e-5, atol=1e-6)
    assert float(coef["(intercept)"][0]) == pytest.approx(fed.intercept_, rel=1e-5)
    # non-zeros first, largest first
    order = [n for n in coef if n != "(intercept)"]
    sizes = [abs(coef[n][0]) for n in order]
    assert sizes == sorted(sizes, reverse=True)
    metrics = _metric_table(out)
    for s in SITES:
        te = test & (d["site"] == s)
        assert metrics[s][0] == int((tr & (d["site"] == s)).sum())
        assert metrics[s][2] == pytest.approx(_r2(d["y"][te], fed.predict(d["X"][te])), abs=1e-4)
        local = FedLasso(alpha=0.05, max_rounds=1000, tol=1e-6, random_state=0).fit(
            d["X"][tr & (d["site"] == s)], d["y"][tr & (d["site"] == s)])
        assert metrics[s][3] == pytest.approx(_r2(d["y"][te], local.predict(d["X"][te])),
                                              abs=1e-4)
    assert metrics["overall"][2] == pytest.approx(
        _r2(d["y"][test], fed.predict(d["X"][test])), abs=1e-4)
    assert f"{fed.n_iter_} rounds, converged" in out
    assert f"sent {int(fed.history_['bytes_up'].sum()):,} bytes up" in out
    saved = joblib.load(model)
    np.testing.assert_allclose(saved.coef_, fed.coef_, rtol=1e-12)
    assert list(saved.feature_names_in_) == names


def test_site_files_give_the_same_fit(capsys, dataset, one_csv, tmp_path):
    d = dataset
    files = []
    for s in SITES:  # the site is the file's name
        m = d["site"] == s
        files.append(_write(tmp_path / f"{s}.csv", ["age", "bmi", "bp", "chol", "y"],
                            [[*x, a] for x, a in zip(d["X"][m], d["y"][m])]))
    code, out_files, err = _run(capsys, "--site-files", *files, "--target", "y", "--model",
                                "lasso", "--alpha", "0.05")
    assert code == 0, err
    code, out_one, err = _run(capsys, one_csv, "--target", "y", "--clients", "site",
                              "--model", "lasso", "--alpha", "0.05", "--drop", "y2", "status",
                              "ward")
    assert code == 0, err
    # the held-out rows differ (row order differs), the fitted models barely
    a, b = _coef_table(out_files), _coef_table(out_one)
    assert set(a) == set(b)
    assert _metric_table(out_files).keys() == _metric_table(out_one).keys()


def test_logistic_with_a_categorical_column(capsys, dataset, one_csv):
    code, out, err = _run(capsys, one_csv, "--target", "status", "--clients", "site",
                          "--model", "logistic", "--C", "0.5", "--categorical", "ward",
                          "--drop", "y", "y2")
    assert code == 0, err
    d = dataset
    test = holdout_split(d["site"], 0.2, 0)
    onehot = (d["ward"][:, None] == np.array(["a", "b", "c"])).astype(float)
    X = np.hstack([d["X"], onehot])
    fed = FedLogisticRegression(C=0.5, max_rounds=1000, tol=1e-6, random_state=0).fit(
        X[~test], d["label"][~test], clients=d["site"][~test])
    coef = _coef_table(out)
    np.testing.assert_allclose([coef[n][0] for n in ["age", "bmi", "bp", "chol", "ward=a",
                                                     "ward=b", "ward=c"]],
                               fed.coef_.ravel(), rtol=1e-4, atol=1e-6)
    assert "coef (well)" in out and "held-out accuracy" in out
    acc = np.mean(fed.predict(X[test]) == d["label"][test])
    assert _metric_table(out)["overall"][2] == pytest.approx(acc, abs=1e-4)


def test_lowrank_takes_several_targets(capsys, dataset, one_csv):
    code, out, err = _run(capsys, one_csv, "--target", "y", "y2", "--clients", "site",
                          "--model", "lowrank", "--alpha", "0.01", "--drop", "status", "ward")
    assert code == 0, err
    d = dataset
    test = holdout_split(d["site"], 0.2, 0)
    Y = np.column_stack([d["y"], d["y2"]])
    fed = FedLowRank(alpha=0.01, max_rounds=1000, tol=1e-6, random_state=0).fit(
        d["X"][~test], Y[~test], clients=d["site"][~test])
    coef = _coef_table(out)
    np.testing.assert_allclose([coef[n] for n in ["age", "bmi", "bp", "chol"]], fed.coef_.T,
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("argv, message", [
    (["--target", "outcome", "--clients", "site", "--model", "lasso"],
     "column 'outcome' \\(target\\) not found; the columns are: site, age"),
    (["--target", "y", "--clients", "hospital", "--model", "lasso"],
     "column 'hospital' \\(--clients site column\\) not found"),
    (["--target", "y", "--clients", "site", "--model", "lasso", "--drop", "y2", "ward"],
     "feature column 'status' is not numeric: 'sick|well' in all_sites.csv line \\d+; one-hot "
     "encode it, pass --categorical status, or leave it out with --drop status"),
    (["--target", "y", "--model", "lasso"], "say which column names each row's site"),
    (["--target", "y", "--clients", "site", "--model", "logistic", "--alpha", "1"],
     "--model logistic takes --C, not --alpha"),
    (["--target", "y", "--clients", "site", "--model", "lowrank", "--drop", "y2", "status",
      "ward"], "give two or more --target columns"),
    (["--target", "y", "--clients", "site", "--model", "lasso", "--solver", "nope",
      "--drop", "y2", "status", "ward"], "solver"),
])
def test_actionable_errors(capsys, one_csv, argv, message):
    code, out, err = _run(capsys, one_csv, *argv)
    assert code == 2
    assert re.search(message, err), err
    assert "Traceback" not in err


def test_data_errors(capsys, tmp_path):
    header = ["site", "x1", "x2", "label"]
    rows = [[s, i, i % 3, "a"] for s in ["p", "q"] for i in range(8)]
    one_class = _write(tmp_path / "one_class.csv", header, rows)
    code, _, err = _run(capsys, one_class, "--target", "label", "--clients", "site", "--model",
                        "svm")
    assert code == 2 and "target 'label' has only one class ('a')" in err

    rows = [[s, i, i % 3, i % 2] for s, n in [("p", 8), ("tiny", 3)] for i in range(n)]
    small = _write(tmp_path / "small.csv", header, rows)
    code, _, err = _run(capsys, small, "--target", "label", "--clients", "site", "--model",
                        "logistic")
    assert code == 2 and "site(s) 'tiny' (3 rows) have too few rows" in err

    rows = [["p", 1, "", 0], ["p", 2, 3, 1]] + [["p", i, i, i % 2] for i in range(8)]
    missing = _write(tmp_path / "missing.csv", header, rows)
    code, _, err = _run(capsys, missing, "--target", "label", "--clients", "site", "--model",
                        "logistic")
    assert code == 2 and "column 'x2' has 1 missing value(s), the first in missing.csv line 2" \
        in err

    code, _, err = _run(capsys, str(tmp_path / "absent.csv"), "--target", "y", "--clients", "s",
                        "--model", "lasso")
    assert code == 2 and "no such file" in err


def test_html_report_has_tables_and_the_plot(capsys, one_csv, tmp_path):
    report = tmp_path / "report.html"
    code, out, err = _run(capsys, one_csv, "--target", "y", "--clients", "site", "--model",
                          "lasso", "--alpha", "0.05", "--drop", "y2", "status", "ward",
                          "--report", str(report))
    assert code == 0, err
    page = report.read_text()
    assert page.count("<table>") == 3
    assert "<td class=\"name\">north</td>" in page and "(intercept)" in page
    assert re.search(r'<img alt="convergence" src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"',
                     page)
    assert "http" not in page  # self-contained


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_chromium() is None,
                    reason="needs headless Chromium (Debian: apt-get install chromium); "
                           ".ci/run installs it")
def test_html_report_renders_in_headless_chromium(capsys, one_csv, tmp_path):
    from PIL import Image

    report = tmp_path / "report.html"
    code, _, err = _run(capsys, one_csv, "--target", "status", "--clients", "site", "--model",
                        "svm", "--C", "0.5", "--drop", "y", "y2", "ward", "--report", str(report))
    assert code == 0, err
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape == (1600, 1200)
    dark = pixels < 128
    assert dark.mean() > 0.01  # text, table borders and the plot, not a blank page
    # the embedded plot is drawn: some rows of the page are mostly non-white (the figure)
    assert (pixels < 250).mean(axis=1).max() > 0.3


def test_python_dash_m_fit(one_csv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "skfed", "fit", one_csv, "--target", "y",
                           "--clients", "site", "--model", "elasticnet", "--alpha", "0.05",
                           "--drop", "y2", "status", "ward"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "FedElasticNet (elasticnet)" in proc.stdout and "held-out R2" in proc.stdout
