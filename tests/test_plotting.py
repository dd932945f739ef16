"""skfed.plotting: forest plots, Kaplan-Meier curves with the number at risk, a Cox
model's adjusted survival curves; the numbers they draw are the models', and the files
they write are valid SVG and PDF."""

import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from skfed import FedLinearRegression, FedLogisticRegression, FedPoissonRegressor  # noqa: E402
from skfed.plotting import (forest_table, format_p, mean_decimals, number_at_risk,  # noqa: E402
                            plot_forest, plot_kaplan_meier, plot_survival, save_figure)
from skfed.plotting._forest import ratio_ticks  # noqa: E402
from skfed.stats import kaplan_meier  # noqa: E402
from skfed.survival import FedCoxPH, survival_target  # noqa: E402

from .test_bare_install import run_without_extras  # noqa: E402

COVARIATES = ["fin", "age", "race", "wexp", "mar", "paro", "prio"]


@pytest.fixture(scope="module")
def cohort():
    rng = np.random.default_rng(0)
    n = 900
    frame = pd.DataFrame({"age": rng.normal(50, 10, n), "smoker": rng.integers(0, 2, n)})
    frame["events"] = rng.poisson(np.exp(-3 + 0.03 * frame["age"] + 0.4 * frame["smoker"]))
    frame["sick"] = (rng.random(n) < 1 / (1 + np.exp(3 - 0.05 * frame["age"]))).astype(int)
    return frame, rng.choice(["a", "b", "c"], n)


@pytest.fixture(scope="module")
def rossi():
    datasets = pytest.importorskip("lifelines.datasets")
    load_rossi = datasets.load_rossi

    frame = load_rossi()
    site = np.array(["a", "b", "c"])[np.arange(len(frame)) % 3]
    y = survival_target(frame["arrest"], frame["week"])
    return frame, site, y, FedCoxPH().fit(frame[COVARIATES], y, clients=site)


def _texts(fig):
    """Every text a figure shows (tick labels, annotations, titles)."""
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))
            if t.get_text()]


def _check_files(fig, tmp_path, name):
    """The figure written as SVG (well-formed XML, its text kept as text) and PDF."""
    svg, pdf = tmp_path / f"{name}.svg", tmp_path / f"{name}.pdf"
    save_figure(fig, svg, pdf)
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert pdf.read_bytes().startswith(b"%PDF")
    plain = tmp_path / f"{name}-plain.svg"  # matplotlib's own savefig works as well
    fig.savefig(plain)
    ET.parse(plain)
    return svg.read_text()


def test_forest_of_a_poisson_fit_shows_its_rate_ratios(cohort, tmp_path):
    frame, site = cohort
    est = FedPoissonRegressor(alpha=0).fit(frame[["age", "smoker"]], frame["events"],
                                           clients=site)
    table = forest_table(est)
    assert list(table.index) == ["age", "smoker"]  # no intercept
    assert table.attrs == {"ratio": True, "measure": "rate ratio"}
    bounds = est.conf_int()
    np.testing.assert_allclose(table["estimate"], np.exp(est.params_[1:]), rtol=1e-12)
    np.testing.assert_allclose(table[["lower", "upper"]], np.exp(bounds[1:]), rtol=1e-12)
    fig = plot_forest(est)
    assert fig.axes[0].get_xscale() == "log"
    # each row's text, with the decimals of the narrowest interval (two significant digits)
    est_age, lo_age, hi_age = table.loc["age"]
    text = f"{est_age:.3f} ({lo_age:.3f} to {hi_age:.3f})"
    assert hi_age - lo_age < 0.1 and text in _texts(fig)
    assert "rate ratio (95% CI)" in _texts(fig)
    svg = _check_files(fig, tmp_path, "forest")
    assert text in svg  # text kept as text in the SVG


def test_forest_of_logistic_identity_and_formula_fits(cohort):
    frame, site = cohort
    logit = FedLogisticRegression(C=np.inf).fit(frame[["age", "smoker"]], frame["sick"],
                                                clients=site)
    assert forest_table(logit).attrs["measure"] == "odds ratio"
    linear = FedLinearRegression().fit(frame[["age", "smoker"]], frame["events"],
                                       clients=site)
    table = forest_table(linear)
    assert table.attrs == {"ratio": False, "measure": "coefficient"}
    np.testing.assert_allclose(table["estimate"], linear.params_[1:], rtol=1e-12)
    fig = plot_forest(linear)
    assert fig.axes[0].get_xscale() == "linear"
    assert [line.get_xdata()[0] for line in fig.axes[0].lines
            if line.get_linestyle() == "--"] == [0.0]  # the reference line at 0
    formula = pytest.importorskip("skfed.formula")
    pytest.importorskip("formulaic")
    result = formula.glm("events ~ age + C(smoker)", frame, family="poisson", clients=site)
    table = forest_table(result)
    # a formula's rows as a reader reads them (issue 36): the level against its reference
    assert list(table.index) == ["smoker: 1 vs 0", "age"]
    np.testing.assert_allclose(table["estimate"], np.exp(result.params.iloc[1:]), rtol=1e-12)
    np.testing.assert_allclose(table["upper"], np.exp(result.conf_int().iloc[1:, 1]),
                               rtol=1e-12)
    assert table.attrs["measure"] == "rate ratio"


def test_forest_of_statsmodels_results(cohort):
    sm = pytest.importorskip("statsmodels.api")
    frame, _ = cohort
    ref = sm.GLM(frame["sick"], sm.add_constant(frame[["age", "smoker"]]),
                 family=sm.families.Binomial()).fit()
    table = forest_table(ref)
    assert table.attrs["measure"] == "odds ratio" and list(table.index) == ["age", "smoker"]
    np.testing.assert_allclose(table["lower"], np.exp(ref.conf_int()[0].iloc[1:]), rtol=1e-12)


def test_forest_of_a_cox_fit_with_each_site_beside_it(rossi, tmp_path):
    frame, site, y, cox = rossi
    sites = {s: FedCoxPH().fit(frame.loc[site == s, COVARIATES], y[site == s])
             for s in ("a", "b")}
    table = forest_table(cox)
    assert table.attrs["measure"] == "hazard ratio"
    np.testing.assert_allclose(table["estimate"], cox.hazard_ratios_, rtol=1e-12)
    fig = plot_forest(cox, sites=sites, decimals=2)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == [x for c in COVARIATES for x in (c, "a", "b")]
    hr, lo, hi = forest_table(sites["b"]).loc["prio"]
    assert f"{hr:.2f} ({lo:.2f} to {hi:.2f})" in _texts(fig)
    _check_files(fig, tmp_path, "cox-forest")
    with pytest.raises(TypeError, match="plot_forest takes"):
        plot_forest(object())


def test_ratio_ticks_are_plain_numbers():
    assert ratio_ticks(0.2, 7) == [0.2, 0.5, 1.0, 2.0, 5.0]
    assert ratio_ticks(0.87, 1.6) == [1.0, 1.2, 1.4, 1.6]
    assert ratio_ticks(0.01, 100) == [0.01, 0.1, 1.0, 10.0, 100.0]


def test_number_at_risk_counts_the_rows_still_followed(rossi):
    """At the table's times (its event times and at-risk times, where the figure puts its
    ticks) the number at risk is the rows followed then; after the last, 0."""
    frame, site, _, _ = rossi
    km = kaplan_meier(frame, time="week", event="arrest", by="fin", clients=site)
    for level in (0, 1):
        weeks = frame.week[frame.fin == level]
        times = list(km.loc[level].index) + [60]
        assert list(number_at_risk(km.loc[level], times)) == [(weeks >= t).sum()
                                                              for t in times]


def test_kaplan_meier_figure_with_the_number_at_risk(rossi, tmp_path):
    frame, site, _, _ = rossi
    km = kaplan_meier(frame, time="week", event="arrest", by="fin", clients=site)
    fig = plot_kaplan_meier(km, xlabel="weeks")
    curves, table = fig.axes
    # the curves are the table's survival (steps), with their bands
    steps = [line for line in curves.lines if line.get_drawstyle() == "steps-post"]
    assert len(steps) == 2
    np.testing.assert_array_equal(steps[1].get_ydata(), km.loc[1, "survival"])
    assert len(curves.collections) == 2  # the two confidence bands
    ticks = curves.get_xticks()
    np.testing.assert_array_equal(ticks, km.at_risk_times)  # where the numbers are exact
    shown = [t.get_text() for t in table.texts]
    expected = [str((frame.week[frame.fin == level] >= t).sum()) for level in (0, 1)
                for t in ticks]
    assert shown == expected and shown[0] == str((frame.fin == 0).sum())
    assert not any(text.startswith("Approximate") for text in _texts(fig))
    svg = _check_files(fig, tmp_path, "km")
    assert "Number at risk" in svg and "fin = 1" in svg


def test_a_life_table_is_drawn_straight_and_says_it_is_approximate(rossi, tmp_path):
    frame, site, _, _ = rossi
    cuts = [10.0, 20.0, 30.0, 40.0, 50.0]
    km = kaplan_meier(frame, time="week", event="arrest", clients=site, time_grid=cuts)
    fig = plot_kaplan_meier(km, confidence=False)
    curves, table = fig.axes
    (line,) = curves.lines  # the points joined by straight lines, no censor marks
    assert line.get_drawstyle() == "default" and line.get_marker() == "o"
    np.testing.assert_array_equal(line.get_xdata(), [0.0] + cuts)
    np.testing.assert_array_equal(curves.get_xticks(), [0.0] + cuts)
    shown = [t.get_text() for t in table.texts]
    assert shown == [str(n) for n in km["at_risk"]]  # the rows followed beyond each cut
    assert len(curves.collections) == 0
    caption = [t for t in _texts(fig) if t.startswith("Approximate")]
    assert caption and "10, 20, 30, 40, 50" in caption[0].replace("\n", " ")
    svg = _check_files(fig, tmp_path, "life-table")
    assert "Approximate" in svg
    with pytest.raises(TypeError, match="kaplan_meier returns"):
        plot_kaplan_meier(frame)


def test_adjusted_survival_curves_are_the_models(rossi, tmp_path):
    frame, site, _, cox = rossi
    mean = frame[COVARIATES].mean()
    profiles = pd.DataFrame([mean, mean], index=["financial aid", "none"])
    profiles["fin"] = [1.0, 0.0]
    fig = plot_survival(cox, profiles, xlabel="weeks")
    lines = fig.axes[0].lines
    assert [line.get_label() for line in lines] == ["financial aid", "none"]
    times = lines[0].get_xdata()
    assert times[0] == 0 and np.all(np.diff(times) > 0)
    np.testing.assert_allclose(np.vstack([line.get_ydata() for line in lines]),
                               cox.predict_survival_function(profiles, times=times),
                               rtol=1e-12)
    assert lines[0].get_ydata()[-1] > lines[1].get_ydata()[-1]  # aid: fewer arrests
    _check_files(fig, tmp_path, "survival")
    # one baseline per site: a curve per site at the same covariates
    by_site = FedCoxPH(strata="site").fit(frame[COVARIATES], survival_target(
        frame["arrest"], frame["week"]), clients=site)
    fig = plot_survival(by_site, pd.DataFrame([mean] * 3), strata=["a", "b", "c"],
                        labels=["a", "b", "c"])
    assert len(fig.axes[0].lines) == 3


def test_formats_are_fixed_decimals():
    assert format_p(1.684e-25) == "<0.001" and format_p(0.04567) == "0.046"
    assert format_p(0.001) == "0.001" and format_p(float("nan")) == ""
    assert [mean_decimals(sd) for sd in (0.05, 0.5, 4.02, 10.1, 99.0, 250.0)] == \
        [3, 2, 1, 1, 1, 0]


def test_plotting_imports_without_matplotlib():
    result = run_without_extras("""
        import sys
        import skfed.plotting
        assert "matplotlib" not in sys.modules
        import pandas as pd
        try:
            skfed.plotting.plot_forest(pd.DataFrame({"estimate": [0.1], "lower": [0.0],
                                                     "upper": [0.2]}, index=["x"]))
        except ImportError as exc:
            print(exc)
        """)
    assert result.returncode == 0, result.stderr
    assert re.search(r"pip install 'skfed\[plot\]'", result.stdout)


def test_report_convergence_axes_are_bounded():
    """The stationarity of an exact fit reaches 0 (or 1e-314): its log axis stops twelve
    decades under its largest value instead."""
    from skfed.cli.html_report import _convergence_figure

    rounds = np.arange(6)
    history = {"round": rounds, "objective": np.array([5.0, 2.0, 1.5, 1.4, 1.4, 1.4]),
               "stationarity": np.array([3.0, 0.1, 1e-5, 1e-11, 1e-314, 0.0]),
               "bytes_up": np.full(6, 100), "bytes_down": np.full(6, 40)}
    fig = _convergence_figure(history)
    low, high = fig.axes[1].get_ylim()
    assert 3.0 * 1e-12 / 2 <= low < 1e-11 and high >= 3.0
    assert fig.axes[0].get_ylim()[0] >= 3.6 * 1e-12 / 2  # the objective's gap too
    drawn = fig.axes[1].lines[0].get_ydata()
    assert drawn.min() == pytest.approx(3.0e-12) and drawn[2] == 1e-5
