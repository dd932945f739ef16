"""Figures a journal takes (issue 36, item 4): a spline term as an effect curve with its
band (equal to statsmodels' fit of the same basis), forest rows named as a reader reads
them, and every text of a figure inside it when saved with matplotlib's own defaults
(``fig.savefig``, not only :func:`skfed.plotting.save_figure`)."""

import io

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")
lifelines = pytest.importorskip("lifelines")

from lifelines.datasets import load_gbsg2  # noqa: E402

from skfed.formula import coxph, glm  # noqa: E402
from skfed.plotting import forest_table, plot_effect, plot_forest, plot_kaplan_meier  # noqa
from skfed.stats import kaplan_meier, meta_analysis  # noqa: E402

LABELS = {"horTh": "Hormone therapy", "tgrade": "Tumour grade", "age": "Age (years)"}


@pytest.fixture(scope="module")
def gbsg2():
    frame = load_gbsg2()
    frame["site"] = np.where(frame.tsize < 20, "A", np.where(frame.tsize < 30, "B", "C"))
    return frame


@pytest.fixture(scope="module")
def spline_glm(gbsg2):
    return glm("cens ~ C(horTh) + C(tgrade) + bs(age, df=4)", gbsg2, family="binomial",
               clients="site")


def test_a_spline_effect_equals_statsmodels_basis(spline_glm, gbsg2):
    sm = pytest.importorskip("statsmodels.formula.api")
    import statsmodels.api as sma

    knots = spline_glm.design["factors"]["bs(age, df=4)"]["knots"]
    spline = (f"bs(age, knots={knots[4:-4]}, degree=3, lower_bound={knots[0]}, "
              f"upper_bound={knots[-1]})")
    ref = sm.glm(f"cens ~ C(horTh) + C(tgrade) + {spline}", gbsg2,
                 family=sma.families.Binomial()).fit()
    values = np.array([30.0, 45.0, 60.0, 75.0])
    effect = spline_glm.term_effect("age", values, reference=50.0)
    new = pd.DataFrame({"age": np.r_[50.0, values], "horTh": "no", "tgrade": "I"})
    eta = ref.predict(new, which="linear")
    np.testing.assert_allclose(np.log(effect["estimate"]), eta[1:] - eta[0], rtol=1e-6)
    # the band: the contrast's variance under statsmodels' covariance (patsy's basis)
    patsy = pytest.importorskip("patsy")
    basis = np.asarray(patsy.dmatrix(f"{spline} - 1", pd.DataFrame({"age": np.r_[50.0,
                                                                                values]})))
    contrast = basis[1:] - basis[0]
    block = [n for n in ref.params.index if n.startswith("bs(")]
    cov = ref.cov_params().loc[block, block].to_numpy()
    se = np.sqrt(np.einsum("ij,jk,ik->i", contrast, cov, contrast))
    z = __import__("scipy").stats.norm.isf(0.025)
    np.testing.assert_allclose(np.log(effect["upper"] / effect["estimate"]), z * se,
                               rtol=1e-5)
    assert effect.attrs["measure"] == "odds ratio" and effect.attrs["reference"] == 50.0
    assert (effect["lower"] < effect["estimate"]).all()
    assert (effect["estimate"] < effect["upper"]).all()
    with pytest.raises(ValueError, match="no numeric or spline term"):
        spline_glm.term_effect("tsize")


def test_an_interacting_variable_has_no_single_curve(gbsg2):
    res = glm("cens ~ C(horTh) * bs(age, df=4)", gbsg2, family="binomial", clients="site")
    with pytest.raises(ValueError, match="no single curve"):
        res.term_effect("age")


def test_forest_rows_read_as_a_paper(spline_glm):
    table = forest_table(spline_glm, labels=LABELS)
    assert list(table.index) == ["Hormone therapy: yes vs no", "Tumour grade: II vs I",
                                 "Tumour grade: III vs I"]
    assert table.attrs["measure"] == "odds ratio"


def _figures(spline_glm, gbsg2):
    cox = coxph("Surv(time, cens) ~ C(horTh) + C(tgrade) + age", gbsg2, clients="site")
    km = kaplan_meier(gbsg2, time="time", event="cens", by="horTh", clients="site")
    return {"forest": plot_forest(cox, labels=LABELS),
            "forest with sites": plot_forest(spline_glm, labels=LABELS),
            "effect": plot_effect(spline_glm, "age"),
            "kaplan-meier": plot_kaplan_meier(km),
            "meta-analysis": meta_analysis([0.1, 0.3, 0.2], [0.01, 0.02, 0.015],
                                           names=["hospital A", "hospital B",
                                                  "a hospital with a long name"]
                                           ).plot_forest().figure}


def test_every_text_of_a_saved_figure_lies_inside_it(spline_glm, gbsg2):
    import matplotlib

    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        for name, fig in _figures(spline_glm, gbsg2).items():
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            canvas = FigureCanvasAgg(fig)
            fig.savefig(io.BytesIO(), format="png")  # matplotlib's defaults: bbox "standard"
            renderer = canvas.get_renderer()
            drawn = fig.get_tightbbox(renderer)  # what is drawn: texts, ticks, legends
            size = fig.bbox_inches
            assert (drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= size.x1 + 0.01
                    and drawn.y1 <= size.y1 + 0.01), (
                f"{name}: what is drawn ({drawn}) sticks out of the figure ({size})")
            for text in fig.texts + [t for ax in fig.axes for t in ax.texts]:
                extent = text.get_window_extent(renderer)
                assert fig.bbox.x0 - 1 <= extent.x0 and extent.x1 <= fig.bbox.x1 + 1, (
                    f"{name}: {text.get_text()!r} outside the figure")
