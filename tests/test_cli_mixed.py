"""``skfed mixed`` end to end: a linear mixed model from a formula, on a CSV with a site
column and through real site services.

The printed and JSON numbers equal :func:`skfed.formula.mixedlm` on the same rows, and
statsmodels' ``mixedlm`` on the pooled rows to the tolerances test_formula_mixed.py
holds the Python API to (statsmodels' fit run to gtol=1e-9); the journal table is the
results' ``journal_table(labels=...)``; the report is one self-contained page.
"""

import json
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from skfed.cli.main import main
from skfed.formula import mixedlm

from ._sites import SITES

smf = pytest.importorskip("statsmodels.formula.api")

FORMULA = "y ~ time + C(arm)"


@pytest.fixture(scope="module")
def pigs():
    """Pigs nested in three sites, each on one of two diets and weighed ten times: a
    random intercept and slope."""
    rng = np.random.default_rng(0)
    rows = []
    for s, site in enumerate(SITES):
        for p in range(8):
            u, b = rng.normal(0, 1), rng.normal(0, 0.3)
            arm = rng.choice(["a", "b"])  # each pig's diet
            for t in range(10):
                rows.append(dict(hospital=site, pig=f"{site}-{p}", time=t, arm=arm,
                                 y=round(5 + u + (1 + b) * t + 0.5 * s + rng.normal(0, 1), 6)))
    return pd.DataFrame(rows)


def _run(capsys, *argv):
    code = main(["mixed", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _csv(tmp_path, frame):
    path = tmp_path / "pigs.csv"
    frame.to_csv(path, index=False)
    return path


def _statsmodels(frame, re_formula, reml):
    model = smf.mixedlm(FORMULA, frame, groups=frame["pig"], re_formula=re_formula)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(reml=reml, method="cg", gtol=1e-9)


def _check_json(data, api, reference):
    """The JSON equals the Python API's results (to rounding) and statsmodels' fit."""
    names = list(api.fe_params.index)
    for key, values in (("fe_params", api.fe_params), ("bse_fe", api.bse_fe),
                        ("pvalues", api.pvalues)):
        np.testing.assert_allclose([data[key][n] for n in names], values[names], rtol=1e-9)
    np.testing.assert_allclose([data["conf_int"][n] for n in names],
                               api.conf_int().loc[names].to_numpy(), rtol=1e-9)
    assert data["llf"] == pytest.approx(api.llf, rel=1e-12)
    assert data["scale"] == pytest.approx(api.scale, rel=1e-9)
    assert list(reference.fe_params.index) == names
    np.testing.assert_allclose([data["fe_params"][n] for n in names], reference.fe_params,
                               rtol=1e-6)
    np.testing.assert_allclose([data["bse_fe"][n] for n in names], reference.bse_fe,
                               rtol=1e-5)
    cov_re = pd.DataFrame(data["cov_re"]).loc[reference.cov_re.index,
                                              reference.cov_re.columns]
    np.testing.assert_allclose(cov_re.to_numpy(), reference.cov_re.to_numpy(), rtol=1e-5,
                               atol=1e-7)
    assert data["llf"] == pytest.approx(reference.llf, abs=1e-6)


@pytest.mark.parametrize("re_formula, reml", [(None, True), ("~time", True), (None, False)])
def test_equals_the_python_api_and_statsmodels(pigs, tmp_path, capsys, re_formula, reml):
    out_json = tmp_path / "mixed.json"
    argv = [_csv(tmp_path, pigs), "--clients", "hospital", "--formula", FORMULA,
            "--groups", "pig", "--json", out_json] + (["--ml"] if not reml else [])
    if re_formula:
        argv += ["--re-formula", re_formula]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api = mixedlm(FORMULA, pigs, groups="pig", re_formula=re_formula, reml=reml,
                      clients="hospital")
    data = json.loads(out_json.read_text())
    _check_json(data, api, _statsmodels(pigs, re_formula, reml))
    assert data["method"] == ("REML" if reml else "ML") and data["n_groups"] == 24
    # the printed summary is the results' summary; the journal table follows it
    assert str(api.summary()).strip() in out
    assert "Journal table (fixed effects)" in out and "Arm: b vs a" not in out
    assert "arm: b vs a" in out  # the journal table: the factor by its column's name
    assert "24 groups, 240 complete rows" in out


def test_labels_name_the_journal_table_rows(pigs, tmp_path, capsys):
    out_json = tmp_path / "mixed.json"
    code, out, err = _run(capsys, _csv(tmp_path, pigs), "--clients", "hospital", "--formula",
                          FORMULA, "--groups", "pig", "--label", "arm=Arm",
                          "--label", "time=Time (weeks)", "--level", "0.9",
                          "--json", out_json)
    assert code == 0, err
    api = mixedlm(FORMULA, pigs, groups="pig", clients="hospital")
    expected = api.journal_table(0.1, labels={"arm": "Arm", "time": "Time (weeks)"})
    journal = json.loads(out_json.read_text())["journal"]
    assert [r["row"] for r in journal] == ["Arm: b vs a", "Time (weeks)"]
    assert [r["Coefficient (90% CI)"] for r in journal] == list(expected.iloc[:, 0])
    assert [r["p"] for r in journal] == list(expected["p"])
    for label, text in zip(expected.index, expected.iloc[:, 0]):
        assert re.search(re.escape(label) + r"\s+" + re.escape(text), out)


def test_the_sites_as_groups(pigs, tmp_path, capsys):
    """No --groups: a random intercept per site (three groups: statsmodels warns of few
    groups as lme4 does, and the output says so)."""
    out_json = tmp_path / "mixed.json"
    code, out, err = _run(capsys, _csv(tmp_path, pigs), "--clients", "hospital",
                          "--formula", FORMULA, "--json", out_json)
    assert code == 0, err
    with warnings.catch_warnings():  # statsmodels' gradient methods fail on three groups
        warnings.simplefilter("ignore")
        reference = smf.mixedlm(FORMULA, pigs, groups=pigs["hospital"]).fit(
            reml=True, method="powell", xtol=1e-12, ftol=1e-14)
    assert reference.converged
    data = json.loads(out_json.read_text())
    assert data["n_groups"] == 3
    np.testing.assert_allclose([data["fe_params"][n] for n in reference.fe_params.index],
                               reference.fe_params, rtol=1e-6)
    np.testing.assert_allclose([data["bse_fe"][n] for n in reference.fe_params.index],
                               reference.bse_fe, rtol=1e-5)
    assert data["llf"] == pytest.approx(reference.llf, abs=1e-6)
    assert "Note: " in out and "3 groups" in out


def test_report_is_a_self_contained_page(pigs, tmp_path, capsys):
    page = tmp_path / "mixed.html"
    code, out, err = _run(capsys, _csv(tmp_path, pigs), "--clients", "hospital", "--formula",
                          FORMULA, "--groups", "pig", "--re-formula", "~time", "--label",
                          "arm=Arm", "--report", page)
    assert code == 0, err
    text = page.read_text()
    assert text.count("<svg") == 1 and "Arm: b vs a" in text and "Group x time Cov" in text
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!#)""", text)
    assert (tmp_path / "mixed-forest.pdf").read_bytes().startswith(b"%PDF")
    from .test_reports_render import CHROMIUM, _assert_fits, _render

    if CHROMIUM is not None:  # laid out at 1280 px: nothing wider than the window
        measured, _ = _render(page, tmp_path)
        _assert_fits(measured)
        assert measured["figures"] == "1"


@pytest.mark.parametrize("argv, message", [
    (["{csv}", "--clients", "hospital"], "--formula"),
    (["{csv}", "--formula", FORMULA], "--clients COLUMN"),
    (["{csv}", "--clients", "site", "--formula", FORMULA], "--clients 'site': no such column"),
    (["{csv}", "--clients", "hospital", "--formula", FORMULA, "--groups", "litter"],
     "--groups 'litter': no such column"),
    (["{csv}", "--clients", "hospital", "--formula", "y ~ weight"], "weight"),
    (["{csv}", "--clients", "hospital", "--formula", FORMULA, "--re-formula", "~weight"],
     "'weight' is not a column of the fixed design"),
    (["{csv}", "--clients", "hospital", "--formula", FORMULA, "--label", "sex=Sex"],
     "--label 'sex': no such column"),
    (["{csv}", "--clients", "hospital", "--formula", FORMULA, "--groups", "hospital"],
     "--groups 'hospital': no such column"),
    (["{csv}", "--clients", "hospital", "--formula", FORMULA, "--min-group-size", "0"],
     "--min-group-size"),
    (["{csv}", "--clients", "hospital", "--formula", FORMULA, "--na-values", "-9",
      "--site-service", "a=127.0.0.1:1"], "--na-values is for local CSV files"),
    (["--formula", FORMULA, "--site-service", "a=127.0.0.1:1", "--dataset", "pigs"],
     "--tls-ca-file"),
])
def test_errors_are_one_clear_message(pigs, tmp_path, capsys, argv, message):
    csv = _csv(tmp_path, pigs)
    code, _, err = _run(capsys, *[a.format(csv=csv) for a in argv])
    assert code == 2, err
    assert err.startswith("skfed mixed: error: ") and message in err, err


def test_through_site_services_equals_the_file(pigs, tmp_path, capsys):
    pytest.importorskip("grpc")
    from ._cli_services import cli_services

    local, remote = tmp_path / "local.json", tmp_path / "remote.json"
    options = ["--formula", FORMULA, "--groups", "pig", "--re-formula", "~time"]
    code, _, err = _run(capsys, _csv(tmp_path, pigs), "--clients", "hospital", *options,
                        "--json", local)
    assert code == 0, err
    # a group's sums over its ten rows pass the dominance rule of min_rows = 5 (not of
    # the default 10: the largest nine of ten squared times are nearly all of their sum)
    with cli_services(tmp_path / "services", pigs, clients="hospital",
                      policy="min_rows = 5") as services:
        code, out, err = _run(capsys, *services, *options, "--json", remote)
    assert code == 0, err
    assert "site services" in out and "hospital-c (80 rows)" in out
    ours, theirs = (json.loads(p.read_text()) for p in (local, remote))
    for key in ("fe_params", "bse_fe", "pvalues", "bse_re"):
        np.testing.assert_allclose(list(theirs[key].values()), list(ours[key].values()),
                                   rtol=1e-8, err_msg=key)
    assert theirs["llf"] == pytest.approx(ours["llf"], rel=1e-12)
    assert theirs["journal"] == ours["journal"]
    _check_json(theirs, mixedlm(FORMULA, pigs, groups="pig", re_formula="~time",
                                clients="hospital"), _statsmodels(pigs, "~time", True))
