"""``skfed fit`` end to end: a generated multi-site CSV, numbers checked against the Python API."""

import csv
import re
import shutil
import subprocess
import sys
import warnings

import joblib
import numpy as np
import pytest

from sklearn.datasets import load_diabetes
from sklearn.linear_model import Lasso

from skfed import FedLasso, FedLogisticRegression, FedLowRank
from skfed.cli.main import main
from skfed.cli.fit import holdout_split
from skfed.preprocessing._feature_scaler import FeatureScaler

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


def _coef_lines(text):
    """The lines of the printed coefficient table, from its header line (``feature ...``)."""
    block = text.split("\ncoefficients")[1].split("\n\n")[0].splitlines()
    start = next(k for k, line in enumerate(block) if line.split()[:1] == ["feature"])
    return block[start:]


def _coef_table(text):
    """``{feature: [values]}`` from the printed coefficient table (with scaling: the
    standardized values, then those in original units)."""
    block = _coef_lines(text)
    n_values = len(block[-1].split()) - 1  # the intercept's row
    table = {}
    for line in block[1:]:
        if line.strip().startswith("exactly zero"):
            for name in line.split(":", 1)[1].split(","):
                table[name.strip()] = [0.0] * n_values
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
                          "--output", str(model), "--no-scale")
    assert code == 0, err
    assert "features not scaled (--no-scale): alpha applies to the coefficients in the " \
        "features' original units" in out
    assert "coefficients (non-zeros first):\n  feature                  y\n" in out
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
    rounds = f"{fed.n_iter_} round" + ("" if fed.n_iter_ == 1 else "s")
    assert f"{rounds}, converged" in out
    assert f"sent {int(fed.history_['bytes_up'].sum()):,} bytes up" in out
    saved = joblib.load(model)  # a Pipeline taking the file's rows: columns by name
    np.testing.assert_allclose(saved[-1].coef_, fed.coef_, rtol=1e-12)
    assert list(saved.feature_names_in_) == names
    pd = pytest.importorskip("pandas")
    rows = pd.read_csv(one_csv, float_precision="round_trip")
    np.testing.assert_allclose(saved.predict(rows), fed.predict(d["X"]), rtol=1e-12)


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
                          "--drop", "y", "y2", "--no-scale")
    assert code == 0, err
    d = dataset
    test = holdout_split(d["site"], 0.2, 0)
    # a model with a regression table: treatment coding, the first level 'a' the reference
    onehot = (d["ward"][:, None] == np.array(["b", "c"])).astype(float)
    X = np.hstack([d["X"], onehot])
    fed = FedLogisticRegression(C=0.5, max_rounds=1000, tol=1e-6, random_state=0).fit(
        X[~test], d["label"][~test], clients=d["site"][~test])
    coef = _coef_table(out)
    assert "ward=a" not in coef and "reference levels" in out and "ward 'a'" in out
    np.testing.assert_allclose([coef[n][0] for n in ["age", "bmi", "bp", "chol", "ward=b",
                                                     "ward=c"]],
                               fed.coef_.ravel(), rtol=1e-4, atol=1e-6)
    assert "coef (well)" in out and "held-out accuracy" in out
    acc = np.mean(fed.predict(X[test]) == d["label"][test])
    assert _metric_table(out)["overall"][2] == pytest.approx(acc, abs=1e-4)


def test_lowrank_takes_several_targets(capsys, dataset, one_csv):
    """Several outputs, standardized features: a pair of columns per output."""
    code, out, err = _run(capsys, one_csv, "--target", "y", "y2", "--clients", "site",
                          "--model", "lowrank", "--alpha", "0.01", "--drop", "status", "ward")
    assert code == 0, err
    assert re.search(r"feature +y \(std\.\) +y2 \(std\.\) +y \(orig\.\) +y2 \(orig\.\)", out)
    d = dataset
    test = holdout_split(d["site"], 0.2, 0)
    Y = np.column_stack([d["y"], d["y2"]])
    mean, sd = d["X"][~test].mean(axis=0), d["X"][~test].std(axis=0)
    fed = FedLowRank(alpha=0.01, max_rounds=1000, tol=1e-6, random_state=0).fit(
        (d["X"][~test] - mean) / sd, Y[~test], clients=d["site"][~test])
    coef = _coef_table(out)
    names = ["age", "bmi", "bp", "chol"]
    printed = np.array([coef[n] for n in names])                # (features, 2 std + 2 orig)
    np.testing.assert_allclose(printed[:, :2], fed.coef_.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(printed[:, 2:], fed.coef_.T / sd[:, None], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(coef["(intercept)"][2:],
                               fed.intercept_ - fed.coef_ @ (mean / sd), rtol=1e-4)


@pytest.mark.parametrize("argv, message", [
    (["--target", "outcome", "--clients", "site", "--model", "lasso"],
     "column 'outcome' \\(target\\) not found; the columns are: site, age"),
    (["--target", "y", "--clients", "hospital", "--model", "lasso"],
     "column 'hospital' \\(--clients site column\\) not found"),
    (["--target", "y", "--clients", "site", "--model", "lasso", "--drop", "y2", "ward"],
     "feature column 'status' is not numeric: \\d+ values such as '(sick|well)' in "
     "all_sites.csv line \\d+; declare it --categorical status \\(one-hot\\), or leave it "
     "out with --drop status"),
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
    assert code == 2 and ("feature column 'x2' has 1 missing value (the first in missing.csv "
                          "line 2): --impute median (or mean, most_frequent) fills them at the "
                          "sites, or --drop-incomplete drops those rows") in err

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
    assert "Penalty <b>alpha=0.05</b>" in page
    assert "features standardized (mean 0, sd 1 on the training rows" in page
    assert "<th>standardized</th><th>original units</th>" in page
    # the convergence figure inline as SVG, and beside the page as SVG and PDF
    assert re.search(r'<figure id="figure-convergence"><svg[^>]*>.{1000,}</svg>', page,
                     re.DOTALL)
    assert (tmp_path / "report-convergence.svg").stat().st_size > 1000
    assert (tmp_path / "report-convergence.pdf").read_bytes().startswith(b"%PDF")
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
    assert "FedElasticNet (elasticnet, alpha=0.05, l1_ratio=0.5)" in proc.stdout
    assert "held-out R2" in proc.stdout


def test_header_shows_the_penalty_used_defaults_included(capsys, one_csv):
    code, out, err = _run(capsys, one_csv, "--target", "status", "--clients", "site",
                          "--model", "logistic", "--drop", "y", "y2", "ward")
    assert code == 0, err
    assert "FedLogisticRegression (logistic, C=1, l1_ratio=0)" in out


def test_a_file_name_after_categorical_is_the_data(capsys, dataset, one_csv):
    """argparse gives `data.csv` to --categorical (several values); it is taken back."""
    code, out, err = _run(capsys, "--target", "status", "--clients", "site", "--model",
                          "logistic", "--drop", "y", "y2", "--categorical", "ward", one_csv)
    assert code == 0, err
    code2, out2, _ = _run(capsys, one_csv, "--target", "status", "--clients", "site",
                          "--model", "logistic", "--drop", "y", "y2", "--categorical", "ward")
    assert out == out2


def test_a_classifier_refuses_a_continuous_target(capsys, one_csv, tmp_path):
    code, _, err = _run(capsys, one_csv, "--target", "y", "--clients", "site", "--model",
                        "logistic", "--drop", "y2", "status", "ward")
    assert code == 2 and re.search(r"target 'y' is continuous \(e.g. '-?[0-9.]+'\), but "
                                   r"--model logistic/svm predict classes", err)
    header = ["site", "x", "label"]
    rows = [[s, i, i] for s in ["p", "q"] for i in range(60)]
    many = _write(tmp_path / "many.csv", header, rows)
    code, _, err = _run(capsys, many, "--target", "label", "--clients", "site", "--model", "svm")
    assert code == 2 and "has 60 distinct values; a classifier here takes at most 50" in err


def test_coefficients_print_with_six_significant_digits(capsys, one_csv):
    code, out, err = _run(capsys, one_csv, "--target", "y", "--clients", "site", "--model",
                          "lasso", "--alpha", "0.05", "--drop", "y2", "status", "ward")
    assert code == 0, err
    rows = _coef_lines(out)[1:]
    values = [v for row in rows if "exactly zero" not in row for v in row.split()[1:]]
    assert values and all(len(v.lstrip("-").replace(".", "").split("e")[0].lstrip("0")) == 6
                          or "e" in v for v in values), values


# -- features standardized by default (issue 16) ----------------------------------------------
#: the issue's command: a Lasso with a one-hot column beside features on a 0.05 scale
ISSUE = ["--target", "y", "--clients", "site", "--model", "lasso", "--categorical", "ward"]
WARDS = ["a", "b", "c"]


def _issue_rows():
    """scikit-learn's diabetes data (features on a ~0.05 scale), five sites, a text column
    'ward' with three levels: the data of the issue's example."""
    data = load_diabetes()
    X, y = data.data, data.target
    site = np.array([f"site-{k % 5}" for k in range(len(y))])
    ward = np.random.default_rng(0).choice(WARDS, size=len(y))
    return X, y, site, ward, list(data.feature_names)


@pytest.fixture
def ward_csv(tmp_path):
    X, y, site, ward, names = _issue_rows()
    rows = [[s, *(repr(float(v)) for v in x), w, repr(float(t))]
            for s, x, w, t in zip(site, X, ward, y)]
    return _write(tmp_path / "data.csv", ["site", *names, "ward", "y"], rows)


def _rounds(text):
    return int(re.search(r"\n(\d+) rounds?, ", text).group(1))


def _standardized_reference(X, y, train, indicators=(), alpha=1.0):
    """scikit-learn's Lasso on the training rows standardized with their own statistics
    (one-hot columns centred, not divided), and the same model in original units."""
    mean, sd = X[train].mean(axis=0), X[train].std(axis=0)
    sd[list(indicators)] = 1.0
    ref = Lasso(alpha=alpha, tol=1e-14, max_iter=1_000_000).fit((X[train] - mean) / sd,
                                                                 y[train])
    return ref, mean, sd, ref.coef_ / sd, ref.intercept_ - (ref.coef_ / sd) @ mean


def test_issue_example_converges_with_default_scaling(capsys, ward_csv):
    code, out, err = _run(capsys, ward_csv, *ISSUE)
    assert code == 0, err
    assert "did NOT converge" not in out and _rounds(out) <= 100  # of --max-rounds 1000
    assert ("features standardized (mean 0, sd 1 on the training rows, from per-site sums; "
            "one-hot: centred only);\nalpha applies to the standardized coefficients "
            "(--no-scale: to those in the original units)") in out
    assert "skfed fit: FedLasso (lasso, alpha=1)" in out
    # what the scaling buys a first-order solver (the issue's 1,000 rounds were first-order)
    code, scaled, err = _run(capsys, ward_csv, *ISSUE, "--solver", "feddualavg")
    assert code == 0, err
    code, unscaled, err = _run(capsys, ward_csv, *ISSUE, "--solver", "feddualavg",
                               "--no-scale")
    assert code == 0, err
    assert "did NOT converge" not in scaled
    assert 2 * _rounds(scaled) < _rounds(unscaled)


def test_scaled_coefficients_are_sklearns_standardized_lasso_mapped_back(capsys, ward_csv,
                                                                         tmp_path):
    model = tmp_path / "model.joblib"
    code, out, err = _run(capsys, ward_csv, *ISSUE, "--tol", "1e-10", "--output", str(model))
    assert code == 0, err
    X, y, site, ward, names = _issue_rows()
    X = np.hstack([X, (ward[:, None] == np.array(WARDS)).astype(float)])
    columns = names + [f"ward={w}" for w in WARDS]
    onehot = [10, 11, 12]
    test = holdout_split(site, 0.2, 0)
    ref, mean, sd, coef, intercept = _standardized_reference(X, y, ~test, onehot)

    # the printed table: standardized (as fitted), then original units
    table = _coef_table(out)
    printed = np.array([table[n] for n in columns])
    np.testing.assert_allclose(printed[:, 0], ref.coef_, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(printed[:, 1], coef, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(table["(intercept)"], [ref.intercept_, intercept], rtol=1e-5)
    np.testing.assert_array_equal(printed[onehot, 0], printed[onehot, 1])  # 0/1 unit kept
    assert "standardized  original units" in out

    # the saved model, at full precision: the encoder, the scaler of the training rows, then
    # the model; it predicts from the file's own rows (ward as text, extra columns ignored)
    pipe = joblib.load(model)
    assert [name for name, _ in pipe.steps] == ["impute", "encode", "scale", "model"]
    np.testing.assert_allclose(pipe["scale"].mean_, mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(pipe["scale"].scale_, sd, rtol=1e-12)
    np.testing.assert_allclose(pipe[-1].coef_, ref.coef_, rtol=1e-6, atol=1e-6)
    assert list(pipe.feature_names_in_) == names + ["ward"]
    assert list(pipe["encode"].get_feature_names_out()) == columns
    pd = pytest.importorskip("pandas")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the columns by name, and no feature-name chatter
        predicted = pipe.predict(pd.read_csv(ward_csv, float_precision="round_trip"))
    np.testing.assert_allclose(predicted, X @ coef + intercept, rtol=1e-7)

    # held out: transformed with the training rows' statistics
    metrics = _metric_table(out)
    assert metrics["overall"][2] == pytest.approx(
        _r2(y[test], ref.predict((X[test] - mean) / sd)), abs=1e-4)
    assert metrics["overall"][3] == metrics["overall"][2]  # the pooled model is the same
    for s in np.unique(site):  # local-only: the site's own standardization
        s_tr, s_te = ~test & (site == s), test & (site == s)
        local, m, d, *_ = _standardized_reference(X, y, s_tr, onehot)
        assert metrics[s][3] == pytest.approx(_r2(y[s_te], local.predict((X[s_te] - m) / d)),
                                              abs=1e-3)


def test_no_scale_is_the_fit_on_the_columns_as_they_are(capsys, ward_csv):
    code, out, err = _run(capsys, ward_csv, *ISSUE, "--no-scale", "--tol", "1e-10")
    assert code == 0, err
    assert "features not scaled (--no-scale)" in out and "standardized" not in out
    X, y, site, ward, names = _issue_rows()
    X = np.hstack([X, (ward[:, None] == np.array(WARDS)).astype(float)])
    test = holdout_split(site, 0.2, 0)
    ref = Lasso(alpha=1.0, tol=1e-14, max_iter=1_000_000).fit(X[~test], y[~test])
    table = _coef_table(out)
    np.testing.assert_allclose([table[n][0] for n in names], ref.coef_[:10], rtol=1e-5,
                               atol=1e-4)


def test_original_coefficients_give_the_same_predictions():
    """The mapping back, for one and several outputs."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 4)) * [0.05, 3.0, 1.0, 1.0] + [1.0, -2.0, 0.0, 0.0]
    X[:, 3] = rng.integers(0, 2, size=40)
    scaler = FeatureScaler(indicators=[3]).fit(X, clients=np.arange(40) % 3)
    assert scaler.scale_[3] == 1.0 and scaler.mean_[3] == pytest.approx(X[:, 3].mean())
    Z = scaler.transform(X)
    for coef, intercept in [(rng.normal(size=4), 0.7),
                            (rng.normal(size=(3, 4)), rng.normal(size=3))]:
        orig, b = scaler.original_coefficients(coef, intercept)
        assert orig.shape == np.shape(coef) and np.shape(b) == np.shape(intercept)
        np.testing.assert_allclose(X @ orig.T + b, Z @ np.transpose(coef) + intercept,
                                   rtol=1e-12, atol=1e-12)


@pytest.fixture
def issue_site_cluster(tmp_path):
    """One Dask worker per site of the issue's data (in this process: threads), each site's
    rows in its own file."""
    distributed = pytest.importorskip("distributed")
    X, y, site, ward, names = _issue_rows()
    files = {}
    for s in np.unique(site):
        m = site == s
        files[s] = _write(tmp_path / f"{s}.csv", [*names, "ward", "y"],
                          [[*(repr(float(v)) for v in x), w, repr(float(t))]
                           for x, w, t in zip(X[m], ward[m], y[m])])
    workers = {s: {"cls": distributed.Worker, "options": {"name": s, "nthreads": 1}}
               for s in files}
    scheduler = {"cls": distributed.Scheduler,
                 "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # port choice chatter
        with distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster:
            yield cluster.scheduler_address, files


def test_remote_form_one_hot_encodes_at_the_sites(capsys, issue_site_cluster):
    """``--categorical`` with ``--scheduler``: the union of the sites' levels, one-hot at the
    sites, centred not divided; the numbers and column names of the local form."""
    from skfed.data.site import SiteData, held_out_mask

    address, files = issue_site_cluster
    argv = ["--scheduler", address, "--target", "y", "--model", "lasso", "--tol", "1e-10",
            "--categorical", "ward", *(f"--site={s}={path}" for s, path in files.items())]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    assert "one-hot: centred only" in out and "did NOT converge" not in out
    X, y, site, ward, names = _issue_rows()
    levels = sorted(set(ward))
    onehot = np.column_stack([ward == w for w in levels]).astype(float)
    X = np.hstack([X, onehot])
    train = np.zeros(len(y), dtype=bool)
    for s in files:
        rows = np.flatnonzero(site == s)
        train[rows] = ~held_out_mask(SiteData(s, X[rows]), 0.2, 0)
    indicators = list(range(len(names), len(names) + len(levels)))
    ref, _, _, coef, intercept = _standardized_reference(X, y, train, indicators)
    table = _coef_table(out)
    printed = np.array([table[n] for n in [*names, *(f"ward={w}" for w in levels)]])
    np.testing.assert_allclose(printed[:, 0], ref.coef_, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(printed[:, 1], coef, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(table["(intercept)"], [ref.intercept_, intercept], rtol=1e-5)
    code, out, err = _run(capsys, *argv[:-len(files)], "--categorical", "bmi", "y",
                          *argv[-len(files):])
    assert code == 2 and "--categorical 'y': the sites have no feature column 'y'" in err


def test_remote_form_standardizes_at_the_sites(capsys, issue_site_cluster):
    """``--scheduler ... --site NAME=PATH``: the scaler from the sites' sums of their training
    rows, each site standardizing its own rows; the numbers of scikit-learn's pooled fit."""
    from skfed.data.site import SiteData, held_out_mask

    address, files = issue_site_cluster
    argv = ["--scheduler", address, "--target", "y", "--model", "lasso", "--tol", "1e-10",
            "--drop", "ward"]
    argv += [f"--site={s}={path}" for s, path in files.items()]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    assert "features standardized (mean 0, sd 1 on the training rows, from per-site " \
        "sums);\n" in out and "did NOT converge" not in out
    # the training rows each site kept (its held-out rows are drawn at the site)
    X, y, site, _, names = _issue_rows()
    train = np.zeros(len(y), dtype=bool)
    for s in files:
        rows = np.flatnonzero(site == s)
        train[rows] = ~held_out_mask(SiteData(s, X[rows]), 0.2, 0)
    ref, mean, sd, coef, intercept = _standardized_reference(X, y, train)
    table = _coef_table(out)
    printed = np.array([table[n] for n in names])
    np.testing.assert_allclose(printed[:, 0], ref.coef_, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(printed[:, 1], coef, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(table["(intercept)"], [ref.intercept_, intercept], rtol=1e-5)
    metrics = _metric_table(out)
    assert metrics["overall"][2] == pytest.approx(
        _r2(y[~train], ref.predict((X[~train] - mean) / sd)), abs=1e-4)

    code, out, err = _run(capsys, *argv, "--no-scale")
    assert code == 0, err
    assert "features not scaled (--no-scale)" in out
    raw = Lasso(alpha=1.0, tol=1e-14, max_iter=1_000_000).fit(X[train], y[train])
    table = _coef_table(out)
    np.testing.assert_allclose([table[n][0] for n in names], raw.coef_, rtol=1e-5, atol=1e-4)


def test_remote_form_with_secure_aggregation(capsys, issue_site_cluster):
    """``--secure-aggregation`` with ``--scheduler``: the sites mask their messages on their
    workers; the model is the one without masks."""
    address, files = issue_site_cluster
    argv = ["--scheduler", address, "--target", "y", "--model", "lasso", "--tol", "1e-8",
            "--categorical", "ward", *(f"--site={s}={path}" for s, path in files.items())]
    code, plain, err = _run(capsys, *argv)
    assert code == 0, err
    code, masked, err = _run(capsys, *argv, "--secure-aggregation")
    assert code == 0, err
    assert "privacy: secure aggregation" in masked
    a, b = _coef_table(plain), _coef_table(masked)
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-6, atol=1e-8)
    code, final, err = _run(capsys, *argv, "--final")  # every row of every site
    assert code == 0, err
    assert f"{len(_issue_rows()[1])} training rows, none held out" in final
    assert "no held-out score" in final
