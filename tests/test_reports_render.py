"""The HTML reports rendered in headless Chromium at 1280 x 900: each page renders,
nothing makes it wider than the window, and every figure is there (inline SVG, also
written beside the page as SVG and PDF)."""

import argparse
import io
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

CHROMIUM = (shutil.which("chromium") or shutil.which("chromium-browser")
            or shutil.which("google-chrome"))
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs headless Chromium (chromium, chromium-browser or "
                             "google-chrome on the PATH; Debian: apt-get install chromium)")

#: measured by the page itself once laid out, written into the DOM for --dump-dom
PROBE = """<script>
(function () {
  var root = document.documentElement, out = document.createElement("div");
  var svgs = Array.prototype.slice.call(document.querySelectorAll("figure svg"));
  out.id = "render-check";
  out.setAttribute("data-scroll-width", root.scrollWidth);
  out.setAttribute("data-client-width", root.clientWidth);
  out.setAttribute("data-inner-width", window.innerWidth);
  out.setAttribute("data-figures", svgs.length);
  out.setAttribute("data-images", document.querySelectorAll("img").length);
  out.setAttribute("data-tables", document.querySelectorAll("table").length);
  out.setAttribute("data-figure-widths", svgs.map(function (s) {
    return Math.round(s.getBoundingClientRect().width); }).join(","));
  out.setAttribute("data-scrolling-boxes", Array.prototype.filter.call(
    document.querySelectorAll(".box"), function (b) {
      return b.scrollWidth > b.clientWidth + 1; }).length);
  out.setAttribute("data-monospace", Array.prototype.some.call(
    document.querySelectorAll("td, th"), function (c) {
      return /mono/i.test(getComputedStyle(c).fontFamily); }));
  document.body.appendChild(out);
})();
</script>"""


def _render(page, tmp_path):
    """What the probe measured in ``page`` at 1280 x 900."""
    probe = tmp_path / f"{page.stem}-probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"),
                     encoding="utf-8")
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--window-size=1280,900",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000",
         "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<div id="render-check"([^>]*)>', proc.stdout)
    assert found, f"the page did not render: {proc.stderr[-2000:]}"
    return dict(re.findall(r'data-([\w-]+)="([^"]*)"', found.group(1))), proc.stdout


def _assert_fits(measured, scrolling=False):
    """The page no wider than the window; unless ``scrolling``, no table box that scrolls
    sideways either (a regression table must fit at 1280 px, not scroll)."""
    assert int(measured["inner-width"]) == 1280
    assert int(measured["scroll-width"]) <= int(measured["client-width"]), measured
    assert measured["monospace"] == "false"
    if not scrolling:
        assert measured["scrolling-boxes"] == "0", measured


def _assert_figure_files(page, names):
    for name in names:
        svg = page.with_name(f"{page.stem}-{name}.svg")
        assert ET.parse(svg).getroot().tag.endswith("svg")
        assert page.with_name(f"{page.stem}-{name}.pdf").read_bytes().startswith(b"%PDF")


def _fit_args(*argv):
    from skfed.cli.main import _fit_parser

    parser = argparse.ArgumentParser()
    _fit_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["fit", *argv])


#: long site names: the per-site tables must wrap or scroll, not widen the page
SITES = ["Hospital Universitario Virgen de la Arrixaca", "Karolinska Universitetssjukhuset",
         "Assistance Publique Hopitaux de Paris", "Charite Universitaetsmedizin Berlin"]


@pytest.fixture(scope="module")
def cohort_csv(tmp_path_factory):
    rng = np.random.default_rng(0)
    n = 1200
    frame = pd.DataFrame({"age": rng.normal(50, 10, n), "smoker": rng.integers(0, 2, n),
                          "bmi": rng.normal(27, 4, n), "site": rng.choice(SITES, n),
                          "arm": rng.choice(["control", "treated"], n),
                          "stage": rng.choice(["I", "II", "III", "IV"], n,
                                              p=[0.5, 0.3, 0.19, 0.01])})
    frame["events"] = rng.poisson(np.exp(-3 + 0.03 * frame["age"] + 0.4 * frame["smoker"]))
    frame.loc[rng.random(n) < 0.02, "bmi"] = np.nan
    path = tmp_path_factory.mktemp("cohort") / "cohort.csv"
    frame.to_csv(path, index=False)
    return path


def test_glm_report_fits_the_page_with_its_figures(cohort_csv, tmp_path):
    from skfed.cli.main import main

    page = tmp_path / "glm.html"
    assert main(["fit", str(cohort_csv), "--target", "events", "--clients", "site",
                 "--model", "poisson", "--alpha", "0", "--summary", "--drop", "arm", "stage", "bmi",
                 "--report", str(page)]) == 0
    text = page.read_text()
    # fixed decimals: p-values as <0.001 or three decimals, never in e-notation
    assert "&lt;0.001" in text and not re.search(r"<td>[-\d.]+e[-+]\d+</td>", text)
    for statistic in ("deviance", "log-likelihood", "AIC"):
        assert f'<td class="name">{statistic}</td>' in text
    measured, dom = _render(page, tmp_path)
    _assert_fits(measured)
    assert measured["figures"] == "2" and measured["images"] == "0"  # forest, convergence
    assert all(int(w) > 200 for w in measured["figure-widths"].split(","))
    assert "Rate ratios with their 95% confidence intervals" in dom
    _assert_figure_files(page, ["forest", "convergence"])


def test_cox_report_has_forest_kaplan_meier_and_survival_curves(tmp_path):
    load_rossi = pytest.importorskip("lifelines.datasets").load_rossi
    from skfed.cli.html_report import write_html_report
    from skfed.cli.main import run_fit
    from skfed.stats import kaplan_meier

    frame = load_rossi()
    frame["site"] = np.array(SITES[:3])[np.arange(len(frame)) % 3]
    path = tmp_path / "rossi.csv"
    frame.to_csv(path, index=False)
    report = run_fit(_fit_args(str(path), "--clients", "site", "--model", "cox", "--target",
                               "arrest", "week", "--strata", "site", "--summary"),
                     out=io.StringIO())
    train = ~report.test
    km = kaplan_meier(frame[train], time="week", event="arrest", by="fin",
                      clients=frame.site[train].to_numpy())
    page = tmp_path / "cox.html"
    write_html_report(report, page, kaplan_meier=km)
    text = page.read_text()
    assert "A Cox model has no intercept" in text
    # the journal table: one hazard-ratio column, the full table in the appendix only
    assert "HR (95% CI)" in text and text.index("HR (95% CI)") < text.index("Appendix")
    assert text.count("se(coef)") == 1 and text.index("se(coef)") > text.index("Appendix")
    measured, dom = _render(page, tmp_path)
    _assert_fits(measured)
    assert measured["figures"] == "4"  # forest, Kaplan-Meier, survival, convergence
    assert "Number at risk" in dom and "hazard ratio (95% CI)" in dom
    _assert_figure_files(page, ["forest", "kaplan-meier", "survival", "convergence"])


def test_table1_report_fits_the_page(cohort_csv, tmp_path):
    from skfed.cli.main import main

    page = tmp_path / "table1.html"
    assert main(["describe", str(cohort_csv), "--clients", "site", "--by", "arm",
                 "--columns", "age,bmi,smoker,stage", "--categorical", "smoker",
                 "--per-site", "--html", str(page)]) == 0
    text = page.read_text()
    assert "<th>p-value</th><th>SMD</th>" in text
    assert not re.search(r"\d\.\d{4,}", text)  # fixed decimals, not 4 significant figures
    measured, dom = _render(page, tmp_path)
    _assert_fits(measured, scrolling=True)  # Table 1 per site for four long site names
    assert measured["figures"] == "0" and int(measured["tables"]) >= 2
    assert "Welch's t-test" in dom and "not computed: the pooled" in dom  # stage IV


def test_the_probe_sees_a_page_wider_than_the_window(tmp_path):
    """The measure can fail: a table of 30 unbreakable cells outside a scrolling box (as
    the per-site table used to be)."""
    page = tmp_path / "wide.html"
    cells = "".join("<td style='white-space: nowrap'>26.61 (5.281)</td>" for _ in range(30))
    page.write_text(f"<!DOCTYPE html><html><body><table><tr>{cells}</tr></table><figure>"
                    "<svg width='300' height='100'></svg></figure></body></html>")
    measured, _ = _render(page, tmp_path)
    assert int(measured["scroll-width"]) > int(measured["client-width"])
    assert measured["figures"] == "1"
    # and a box that scrolls sideways (as the Cox table's did at 1280 px)
    boxed = tmp_path / "boxed.html"
    boxed.write_text(f"<!DOCTYPE html><html><body><div class='box' style='overflow-x: auto'>"
                     f"<table><tr>{cells}</tr></table></div></body></html>")
    measured, _ = _render(boxed, tmp_path)
    assert measured["scrolling-boxes"] == "1"
    assert int(measured["scroll-width"]) <= int(measured["client-width"])
