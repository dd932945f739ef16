"""``skfed describe`` end to end: Table 1 from a CSV file and from real site services.

Numbers are checked against pandas (and scipy's chi-square) on the pooled
rows where nothing is suppressed; a rare level at one site is suppressed
there with its complement, and the pooled cell is marked, with the reasons
in footnotes; the site services suppress instead of refusing, and give the
table of the local run.
"""

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2_contingency

from skfed.cli.main import main

SITES = ("hospital-a", "hospital-b", "hospital-c")


def _frame(rare=False, seed=0):
    """Three sites of 90-120 rows; every count large unless ``rare`` (2 rows of stage IV
    at hospital-b)."""
    rng = np.random.default_rng(seed)
    n = [120, 100, 90]
    site = np.repeat(SITES, n)
    frame = pd.DataFrame({
        "hospital": site,
        "age": np.round(rng.normal(60, 12, len(site))),
        "bmi": np.round(rng.normal(27, 4, len(site)), 2),
        "sex": rng.choice(["f", "m"], len(site)),
        "stage": np.array(["I", "II", "III"])[np.arange(len(site)) % 3],
        "arm": np.array(["control", "treated"])[(np.arange(len(site)) // 3) % 2],
    })
    frame.loc[np.arange(len(site)) % 10 == 4, "bmi"] = np.nan  # >= 9 missing at each site
    if rare:
        frame.loc[np.flatnonzero(site == "hospital-b")[:2], "stage"] = "IV"
    return frame


def _csv(tmp_path, frame, name="visits.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return str(path)


def _run(capsys, *argv):
    code = main(["describe", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _cells(path):
    """``{(variable, level, statistic, group, site): (value, suppressed)}`` of a --json."""
    data = json.loads(open(path).read())
    return data, {(c["variable"], c["level"], c["statistic"], c["group"], c["site"]):
                  (c["value"], c["suppressed"]) for c in data["table"]}


def test_describe_equals_pandas_where_nothing_is_suppressed(tmp_path, capsys):
    frame = _frame()
    out_json = tmp_path / "t1.json"
    code, out, err = _run(capsys, _csv(tmp_path, frame), "--clients", "hospital",
                          "--json", str(out_json), "--crosstab", "stage:sex", "--per-site")
    assert code == 0, err
    data, cells = _cells(out_json)
    assert not data["suppressed"] and "No cell is suppressed." in out
    assert data["sites"] == {"hospital-a": 120, "hospital-b": 100, "hospital-c": 90}

    def pooled(variable, level, statistic):
        value, hidden = cells[variable, level, statistic, "all", "pooled"]
        assert not hidden
        return value

    assert pooled("N", "", "count") == len(frame)
    for c in ["age", "bmi"]:
        x = frame[c]
        assert pooled(c, "", "count") == x.count()
        assert pooled(c, "", "missing") == x.isna().sum()
        np.testing.assert_allclose(pooled(c, "", "mean"), x.mean(), rtol=1e-12)
        np.testing.assert_allclose(pooled(c, "", "std"), x.std(), rtol=1e-12)
        for q in (0.25, 0.5, 0.75):  # exact: pandas' number
            assert pooled(c, "", f"{100 * q:g}%") == x.quantile(q)
    for c in ["sex", "stage", "arm"]:
        for level, n in frame[c].value_counts().items():
            assert pooled(c, level, "count") == n
    # per site too (--per-site)
    for s in SITES:
        rows = frame[frame.hospital == s]
        value, hidden = cells["bmi", "", "mean", "all", s]
        np.testing.assert_allclose(value, rows.bmi.mean(), rtol=1e-12)
    # the printed table: mean (SD) with fixed decimals (one for an SD from 1 to 100),
    # median [Q1, Q3], n (%)
    assert 1 <= frame.age.std() < 100
    assert f"{frame.age.mean():.1f} ({frame.age.std():.1f})" in out
    n_f = (frame.sex == "f").sum()
    assert f"{n_f} ({100 * n_f / len(frame):.1f}%)" in out
    # the cross-table and its test: scipy's on the pooled rows
    ct = data["crosstabs"][0]
    chi2, p, dof, _ = chi2_contingency(pd.crosstab(frame.stage, frame.sex), correction=False)
    np.testing.assert_allclose([ct["chi2"], ct["p_value"]], [chi2, p], rtol=1e-12)
    assert ct["dof"] == dof and f"chi2 = {chi2:.2f}" in out


def test_by_group_equals_pandas(tmp_path, capsys):
    frame = _frame(seed=1)
    out_json = tmp_path / "t1.json"
    code, out, err = _run(capsys, _csv(tmp_path, frame), "--clients", "hospital", "--by",
                          "arm", "--columns", "age,sex", "--json", str(out_json))
    assert code == 0, err
    _, cells = _cells(out_json)
    for arm, rows in frame.groupby("arm"):
        assert cells["N", "", "count", arm, "pooled"] == (len(rows), False)
        np.testing.assert_allclose(cells["age", "", "mean", arm, "pooled"][0],
                                   rows.age.mean(), rtol=1e-12)
        assert cells["age", "", "50%", arm, "pooled"][0] == rows.age.median()
        assert cells["sex", "m", "count", arm, "pooled"][0] == (rows.sex == "m").sum()
    assert "by arm:" in out and "bmi" not in out


def test_a_rare_level_is_suppressed_with_its_complement(tmp_path, capsys):
    frame = _frame(rare=True)
    out_json = tmp_path / "t1.json"
    code, out, err = _run(capsys, _csv(tmp_path, frame), "--clients", "hospital",
                          "--columns", "stage", "age", "--per-site", "--json", str(out_json),
                          "--no-secure-aggregation")  # the sites' released parts
    assert code == 0, err
    data, cells = _cells(out_json)
    assert cells["stage", "IV", "count", "all", "hospital-b"] == (None, True)
    assert cells["stage", "IV", "count", "all", "pooled"] == (None, True)
    hidden_b = [k for k, (_, h) in cells.items() if h and k[0] == "stage"
                and k[4] == "hospital-b"]
    assert len(hidden_b) >= 2  # its complement: else IV = N - the other levels
    reasons = {(r["level"], r["site"]): r["reason"] for r in data["suppressed"]}
    assert reasons["IV", "hospital-b"] == "fewer than 5 rows at site 'hospital-b'"
    assert reasons["IV", "pooled"] == "not pooled: site 'hospital-b' suppressed its count"
    assert any(r.startswith("complementary at site 'hospital-b'") for r in reasons.values())
    # shown: "<5" with its footnote at the site, "suppressed" in the pooled column
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("IV"))
    assert "<5 [" in line and "suppressed [" in line
    assert "fewer than 5 rows at site 'hospital-b'" in out
    assert "not pooled: site 'hospital-b' suppressed its count" in out
    # the other sites and the shown pooled cells are pandas' numbers
    for (variable, level, statistic, group, site), (value, hidden) in cells.items():
        if variable == "stage" and statistic == "count" and not hidden:
            rows = frame if site == "pooled" else frame[frame.hospital == site]
            assert value == (rows.stage == level).sum()
    assert not any(h for k, (_, h) in cells.items() if k[0] == "age")
    # a larger --min-count hides more, and says so
    code, out, _ = _run(capsys, _csv(tmp_path, frame), "--clients", "hospital",
                        "--columns", "stage", "--min-count", "200", "--no-secure-aggregation")
    assert code == 0 and "fewer than 200 rows at site" not in out  # pooled view only
    assert "not pooled" in out and "--min-count 200" in out


def test_html_report(tmp_path, capsys):
    frame = _frame(rare=True)
    html_path = tmp_path / "table1.html"
    code, out, err = _run(capsys, _csv(tmp_path, frame), "--clients", "hospital",
                          "--columns", "age,stage,sex", "--crosstab", "stage:sex",
                          "--crosstab", "arm:sex", "--per-site", "--html", str(html_path),
                          "--no-secure-aggregation")
    assert code == 0, err
    assert f"HTML report written to {html_path}" in out
    page = html_path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page
    assert "Table 1" in page and "mean (SD)" in page
    for site, n in frame.hospital.value_counts().items():
        assert f"<td class=\"name\">{site}</td><td>{n}</td>" in page
    assert '<td class="hidden">&lt;5<sup><a href="#note-' in page
    assert "fewer than 5 rows at site &#x27;hospital-b&#x27;" in page
    assert "Cross-table arm &times; sex" in page
    chi2 = chi2_contingency(pd.crosstab(frame.arm, frame.sex), correction=False)[0]
    assert f"chi2 = {chi2:.2f}" in page
    assert "not computed" in page  # stage x sex: the rare level's cells are suppressed
    assert "complementary cells" in page  # the rule
    assert "http" not in page.replace("http-equiv", "") and "<link" not in page


@pytest.mark.parametrize("argv, message", [
    (["missing.csv", "--clients", "hospital"], "no such file"),
    (["{csv}"], "--clients COLUMN"),
    (["{csv}", "--clients", "site"], "--clients 'site': no such column"),
    (["{csv}", "--clients", "hospital", "--columns", "age,weight"],
     "--columns 'weight': no such column"),
    (["{csv}", "--clients", "hospital", "--by", "ward"], "--by 'ward': no such column"),
    (["{csv}", "--clients", "hospital", "--by", "sex", "--columns", "sex,age"],
     "--by 'sex' is also in --columns"),
    (["{csv}", "--clients", "hospital", "--crosstab", "stage"], "--crosstab takes ROW:COLUMN"),
    (["{csv}", "--clients", "hospital", "--crosstab", "stage:ward"],
     "--crosstab 'ward': no such column"),
    (["{csv}", "--clients", "hospital", "--min-count", "0"], "--min-count must be at least 1"),
    (["{csv}", "--clients", "hospital", "--quantiles", "0.5,2"], "--quantiles takes numbers"),
    (["{csv}", "--clients", "hospital", "--crosstab", "age:sex"], "at least two levels"),
    (["--site-service", "a=127.0.0.1:1"], "--dataset NAME"),
    (["--site-service", "a", "--dataset", "v"], "NAME=HOST:PORT"),
    (["{csv}", "--clients", "hospital", "--dataset", "v"], "go with --site-service"),
])
def test_errors_are_one_clear_message(tmp_path, capsys, argv, message):
    frame = _frame().assign(age=1.0)  # one level: not a cross-table
    path = _csv(tmp_path, frame)
    code, out, err = _run(capsys, *[a.replace("{csv}", path) for a in argv])
    assert code == 2 and out == ""
    assert err.startswith("skfed describe: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_non_finite_and_identifier_columns_are_named(tmp_path, capsys):
    frame = _frame()
    frame["bmi"] = frame["bmi"].astype(object)
    frame.loc[5, "bmi"] = "inf"
    code, _, err = _run(capsys, _csv(tmp_path, frame), "--clients", "hospital")
    assert code == 2 and "column 'bmi' has a non-finite value 'inf'" in err
    frame = _frame().assign(patient=[f"p{k}" for k in range(310)])
    code, _, err = _run(capsys, _csv(tmp_path, frame), "--clients", "hospital")
    assert code == 2 and "'patient'" in err and "--columns" in err
    code, out, _ = _run(capsys, "--clients", "hospital", "--columns", "age", "sex",
                        _csv(tmp_path, frame))
    assert code == 0 and "patient" not in out  # the file after --columns is recovered


# -- through real site services (gRPC over mutual TLS) ---------------------------------
@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """Three site services (in-process gRPC servers, own certificates, default policy)
    serving ``visits`` with a rare stage at hospital-b."""
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    from ._sites import site_config

    root = tmp_path_factory.mktemp("describe-services")
    certs = make_certificates(root / "certs", list(SITES))
    frame = _frame(rare=True)
    servers, addresses = [], {}
    try:
        for name in SITES:
            folder = root / name
            folder.mkdir()
            frame[frame.hospital == name].drop(columns="hospital").to_csv(
                folder / "visits.csv", index=False)
            path = site_config(folder, name, certs=certs,
                               datasets={"visits": ("visits.csv", None)})
            servers.append(SiteServer(load_config(path)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        yield {"certs": certs, "addresses": addresses, "frame": frame, "root": root}
    finally:
        for server in servers:
            server.stop()


def _service_args(services):
    certs = services["certs"]
    argv = []
    for name, address in services["addresses"].items():
        argv += ["--site-service", f"{name}={address}"]
    return argv + ["--dataset", "visits", "--tls-ca-file", str(certs.ca.cert),
                   "--tls-cert", str(certs.client.cert), "--tls-key", str(certs.client.key)]


def test_site_services_suppress_instead_of_refusing(services, tmp_path, capsys):
    remote_json, local_json = tmp_path / "remote.json", tmp_path / "local.json"
    options = ["--columns", "age,bmi,stage,sex", "--by", "arm", "--crosstab", "stage:sex",
               "--per-site", "--no-secure-aggregation"]  # the sites' released parts
    code, out, err = _run(capsys, *_service_args(services), *options,
                          "--json", str(remote_json))
    assert code == 0, err
    assert "no quantiles: the pooled quantiles need each site's allow_exact_quantiles" in out
    data, remote = _cells(remote_json)
    # hospital-b hid its 2 rows of stage IV (and a complement), and the pooled cell says so
    assert remote["stage", "IV", "count", "all", "hospital-b"] == (None, True)
    assert remote["stage", "IV", "count", "all", "pooled"] == (None, True)
    reasons = {(r["level"], r["group"], r["site"]): r["reason"] for r in data["suppressed"]}
    assert reasons["IV", "all", "hospital-b"] == "fewer than 5 rows at site 'hospital-b'"
    assert reasons["IV", "all", "pooled"] == ("not pooled: site 'hospital-b' suppressed its "
                                              "count")
    assert "<5 [" in out
    # the same table, suppression and notes as the local run on the same rows
    code, _, err = _run(capsys, _csv(tmp_path, services["frame"]), "--clients", "hospital",
                        *options, "--quantiles", "none", "--json", str(local_json))
    assert code == 0, err
    local_data, local = _cells(local_json)
    assert remote.keys() == local.keys()
    for key, (value, hidden) in local.items():
        assert remote[key][1] == hidden, key
        if value is None:
            assert remote[key][0] is None, key
        else:
            np.testing.assert_allclose(remote[key][0], value, rtol=1e-12, err_msg=str(key))
    assert data["suppressed"] == local_data["suppressed"]
    assert data["crosstabs"][0]["counts"] == local_data["crosstabs"][0]["counts"]
    assert data["note"] == local_data["note"]


def test_site_services_errors(services, capsys):
    code, _, err = _run(capsys, *_service_args(services), "--columns", "weight")
    assert code == 2 and "--columns 'weight': no such column" in err
    code, _, err = _run(capsys, *_service_args(services), "--columns", "age",
                        "--quantiles", "0.5")
    assert code == 2 and "allow_exact_quantiles" in err
