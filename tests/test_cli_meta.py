"""``skfed meta`` end to end: a file of per-site estimates, and a two-stage analysis of the
sites' rows (each site's own least squares, pooled), in process and through real site
services.

The printed and JSON numbers equal :func:`skfed.stats.meta_analysis` (itself tested equal
to statsmodels' ``combine_effects`` and metafor's ``rma`` in test_meta_analysis.py), and
statsmodels' ``combine_effects`` of statsmodels' per-site OLS fits for the two-stage
analysis; the report is one self-contained page with a forest plot per coefficient.
"""

import json
import re

import numpy as np
import pandas as pd
import pytest

from skfed.cli.main import main
from skfed.stats import meta_analysis

from ._sites import SITES

smf = pytest.importorskip("statsmodels.formula.api")
combine_effects = pytest.importorskip("statsmodels.stats.meta_analysis").combine_effects

#: BCG vaccine trials (metafor's dat.bcg): log risk ratios and their variances
BCG = np.array([[4, 119, 11, 128], [6, 300, 29, 274], [3, 228, 11, 209],
                [62, 13536, 248, 12619], [33, 5036, 47, 5761], [180, 1361, 372, 1079],
                [8, 2537, 10, 619], [505, 87886, 499, 87892], [29, 7470, 45, 7232],
                [17, 1699, 65, 1600], [186, 50448, 141, 27197], [5, 2493, 3, 2338],
                [27, 16886, 29, 17825]], dtype=float)
FORMULA = "y ~ age + C(sex)"


def _bcg_file(tmp_path):
    a, b, c, d = BCG.T
    frame = pd.DataFrame({"trial": [f"trial {k + 1}" for k in range(len(BCG))],
                          "logrr": np.log(a / (a + b)) - np.log(c / (c + d)),
                          "var": 1 / a - 1 / (a + b) + 1 / c - 1 / (c + d)})
    frame["se"] = np.sqrt(frame["var"])
    path = tmp_path / "bcg.csv"
    frame.to_csv(path, index=False, float_format="%.17g")
    return path, frame


def _run(capsys, *argv):
    code = main(["meta", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rows(seed=0):
    """Three sites' rows: the age slope differs between sites (tau2 > 0), a few missing."""
    rng = np.random.default_rng(seed)
    n = 90
    site = np.repeat(SITES, n)
    age = np.round(rng.normal(55, 10, 3 * n), 1)
    sex = rng.choice(["f", "m"], 3 * n)
    slope = np.repeat([0.08, 0.10, 0.13], n)
    y = np.round(1 + slope * age + 0.4 * (sex == "m") + rng.normal(0, 1, 3 * n), 4)
    frame = pd.DataFrame({"hospital": site, "age": age, "sex": sex, "y": y})
    frame.loc[[3, 100, 200], "age"] = np.nan
    return frame


def _reference_two_stage(frame, coefficient, method):
    """statsmodels' OLS of the formula at each site, pooled per coefficient."""
    fits = [smf.ols(FORMULA, frame[frame.hospital == s]).fit() for s in SITES]
    y = np.array([f.params[coefficient] for f in fits])
    v = np.array([f.bse[coefficient] ** 2 for f in fits])
    return y, v


def _check_result(data, reference):
    """The JSON of one meta-analysis equals ``reference`` (a MetaAnalysisResult)."""
    assert data["tau2"] == pytest.approx(reference.tau2, rel=1e-10, abs=1e-14)
    for key, attr in (("i2", "i2"), ("h2", "h2"), ("q", "q"), ("q_pvalue", "q_pvalue")):
        assert data[key] == pytest.approx(getattr(reference, attr), rel=1e-10, abs=1e-14)
    assert data["fixed_effect"]["estimate"] == pytest.approx(reference.mean_effect_fe,
                                                             rel=1e-10)
    assert data["random_effect"]["estimate"] == pytest.approx(reference.mean_effect_re,
                                                              rel=1e-10)
    assert data["random_effect"]["se"] == pytest.approx(reference.sd_eff_w_re, rel=1e-10)
    table = pd.DataFrame(data["table"]).T
    expected = reference.summary_frame()
    assert list(table.index) == [str(n) for n in expected.index]
    np.testing.assert_allclose(table[expected.columns].to_numpy(dtype=float),
                               expected.to_numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("method", ["reml", "ml", "dl", "pm"])
def test_a_file_of_estimates_equals_the_python_api(tmp_path, capsys, method):
    path, frame = _bcg_file(tmp_path)
    out_json = tmp_path / "meta.json"
    code, out, err = _run(capsys, path, "--estimate", "logrr", "--se", "se", "--name",
                          "trial", "--method", method, "--json", out_json)
    assert code == 0, err
    api = meta_analysis(frame["logrr"], standard_errors=frame["se"],
                        names=list(frame["trial"]), method=method)
    data = json.loads(out_json.read_text())
    _check_result(data["results"][""], api)
    assert f"{api.tau2:.4g}" in out
    assert f"{api.mean_effect_re:.4f}" in out and "trial 13" in out
    if method == "dl":  # and statsmodels' combine_effects itself
        ref = combine_effects(frame["logrr"].to_numpy(), frame["var"].to_numpy(),
                              method_re="dl")
        assert data["results"][""]["tau2"] == pytest.approx(ref.tau2, rel=1e-10)
        assert data["results"][""]["random_effect"]["estimate"] == pytest.approx(
            ref.mean_effect_re, rel=1e-10)


def test_variances_level_and_exponentiate(tmp_path, capsys):
    path, frame = _bcg_file(tmp_path)
    out_json = tmp_path / "meta.json"
    code, out, err = _run(capsys, path, "--estimate", "logrr", "--variance", "var",
                          "--level", "0.9", "--exponentiate", "--json", out_json)
    assert code == 0, err
    api = meta_analysis(frame["logrr"], frame["var"], method="reml", alpha=0.1)
    table = pd.DataFrame(json.loads(out_json.read_text())["results"][""]["table"]).T
    expected = api.summary_frame(exponentiate=True)
    np.testing.assert_allclose(table[expected.columns].to_numpy(dtype=float),
                               expected.to_numpy(), rtol=1e-10)
    assert "exponentiated" in out
    assert f"{np.exp(api.mean_effect_re):.4f}" in out  # the pooled risk ratio, about 0.49


@pytest.mark.parametrize("method", ["reml", "dl"])
def test_two_stage_equals_per_site_least_squares_pooled(tmp_path, capsys, method):
    frame = _rows()
    path = tmp_path / "rows.csv"
    frame.to_csv(path, index=False)
    out_json = tmp_path / "two.json"
    code, out, err = _run(capsys, path, "--clients", "hospital", "--formula", FORMULA,
                          "--method", method, "--json", out_json)
    assert code == 0, err
    data = json.loads(out_json.read_text())
    assert list(data["results"]) == ["C(sex)[T.m]", "age"]  # no Intercept by default
    for name in data["results"]:
        y, v = _reference_two_stage(frame, name, method)
        api = meta_analysis(y, v, names=list(SITES), method=method)
        _check_result(data["results"][name], api)
    if method == "dl":  # the age slopes differ: statsmodels' tau2 needs no truncation
        ref = combine_effects(*_reference_two_stage(frame, "age", method), method_re="dl")
        assert ref.q > 2
        assert data["results"]["age"]["tau2"] == pytest.approx(ref.tau2, rel=1e-10)
        assert data["results"]["age"]["random_effect"]["estimate"] == pytest.approx(
            ref.mean_effect_re, rel=1e-10)
    assert "hospital-a (89 rows)" in out  # its row with a missing age left out
    assert data["results"]["age"]["tau2"] > 0


def test_reports_are_self_contained_pages(tmp_path, capsys):
    path, _ = _bcg_file(tmp_path)
    page = tmp_path / "meta.html"
    code, out, err = _run(capsys, path, "--estimate", "logrr", "--se", "se", "--name",
                          "trial", "--exponentiate", "--report", page)
    assert code == 0, err
    text = page.read_text()
    assert text.count("<svg") == 1 and "trial 13" in text and "tau2" in text
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!#)""", text)  # nothing fetched
    assert (tmp_path / "meta-forest-1.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "meta-forest-1.svg").exists()
    from .test_reports_render import CHROMIUM, _assert_fits, _render

    if CHROMIUM is not None:  # laid out at 1280 px: nothing wider than the window
        measured, _ = _render(page, tmp_path)
        _assert_fits(measured)
        assert measured["figures"] == "1"
    rows = tmp_path / "rows.csv"
    _rows().to_csv(rows, index=False)
    two = tmp_path / "two.html"
    code, _, err = _run(capsys, rows, "--clients", "hospital", "--formula", FORMULA,
                        "--coefficient", "age", "Intercept", "--report", two)
    assert code == 0, err
    assert two.read_text().count("<svg") == 2
    assert "Coefficient Intercept" in two.read_text()


@pytest.mark.parametrize("argv, message", [
    (["{est}", "--estimate", "logrr"], "one of --se COLUMN or --variance COLUMN"),
    (["{est}", "--estimate", "logrr", "--se", "se", "--variance", "var"], "one of --se"),
    (["{est}", "--estimate", "effect", "--se", "se"], "--estimate 'effect': no such column"),
    (["{est}", "--estimate", "trial", "--se", "se"], "row 1 holds 'trial 1', not a number"),
    (["{est}", "--estimate", "logrr", "--se", "se", "--clients", "trial"],
     "--clients goes with --formula"),
    (["{est}", "--estimate", "logrr", "--se", "se", "--level", "95"], "--level"),
    (["{rows}", "--formula", FORMULA], "--clients COLUMN"),
    (["{rows}", "--clients", "hospital", "--formula", FORMULA, "--se", "age"],
     "--se is for a file of per-site estimates"),
    (["{rows}", "--clients", "hospital", "--formula", "y ~ weight"], "weight"),
    (["{rows}", "--clients", "hospital", "--formula", FORMULA, "--coefficient", "bmi"],
     "--coefficient 'bmi'"),
    (["--formula", FORMULA, "--site-service", "a=127.0.0.1:1"], "--dataset NAME"),
    (["missing.csv", "--estimate", "logrr", "--se", "se"], "missing.csv"),
])
def test_errors_are_one_clear_message(tmp_path, capsys, argv, message):
    est, _ = _bcg_file(tmp_path)
    rows = tmp_path / "rows.csv"
    _rows().to_csv(rows, index=False)
    argv = [a.format(est=est, rows=rows) for a in argv]
    code, _, err = _run(capsys, *argv)
    assert code == 2, err
    assert err.startswith("skfed meta: error: ") and message in err, err


def test_two_stage_through_site_services_equals_the_file(tmp_path, capsys):
    pytest.importorskip("grpc")
    from ._cli_services import cli_services

    frame = _rows()
    path = tmp_path / "rows.csv"
    frame.to_csv(path, index=False)
    local, remote = tmp_path / "local.json", tmp_path / "remote.json"
    code, _, err = _run(capsys, path, "--clients", "hospital", "--formula", FORMULA,
                        "--json", local)
    assert code == 0, err
    # one missing age per site: the officers declare the complete rows the population
    with cli_services(tmp_path / "services", frame, clients="hospital",
                      declare='population = "complete"') as services:
        code, out, err = _run(capsys, *services, "--formula", FORMULA, "--json", remote,
                              "--report", tmp_path / "remote.html")
    assert code == 0, err
    assert "site services" in out and "hospital-b (89 rows)" in out
    ours, theirs = (json.loads(p.read_text())["results"] for p in (local, remote))
    assert ours.keys() == theirs.keys()
    for name in ours:
        y, v = _reference_two_stage(frame, name, "reml")
        _check_result(theirs[name], meta_analysis(y, v, names=list(SITES)))
