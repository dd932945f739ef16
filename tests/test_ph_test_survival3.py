"""R survival 3.x's ``cox.zph`` score test, from site sums, equals R's stored numbers.

``proportional_hazard_test(..., method="survival3", time_transform=..., terms=...)``
against ``cox.zph(fit, transform=..., terms=...)$table`` of R 4.2.2 (Patched
2022-11-10 r83330) with survival 3.5.3, computed once on lifelines' shipped data by
``tests/data/cox_zph.R`` (the exact script, with how its CSVs were written) and
stored in ``R_NUMBERS`` as ``{(case, term): (chisq, df)}``. The cases: rossi (tied
weeks; Efron with the four transforms, Breslow, a strata column, case weights, and
its weeks on a time grid), gbsg2 (a formula with the categorical ``tgrade``: one
term of two columns with ``terms=TRUE``, two single columns with ``terms=FALSE``)
and lifelines' regression data (no tied times).

Measured: every statistic within 3e-13 relative of R's (R fitted with
``eps = 1e-14``, skfed with ``tol=1e-12``); tested at ``RTOL`` in process and
through site services. The lifelines method is unchanged (tests/test_ph_test.py).
"""

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from skfed.data import FederatedDataset
from skfed.federation.operations import Refused
from skfed.privacy import SecureAggregation
from skfed.sites import SiteRefusal
from skfed.survival import FedCoxPH, proportional_hazard_test, survival_target
from skfed.survival._site import _schoenfeld_rules, site_schoenfeld_sums

from . import _cox_oracle as O

lifelines = pytest.importorskip("lifelines")

RTOL = 1e-9
COVARIATES = ["fin", "age", "race", "wexp", "mar", "paro", "prio"]
# R 4.2.2 (Patched 2022-11-10 r83330), survival 3.5.3: tests/data/cox_zph.R's output
R_NUMBERS = {
    ("rossi/efron/km", "fin"): (0.062429750089376318, 1),
    ("rossi/efron/km", "age"): (5.9739816611519121, 1),
    ("rossi/efron/km", "race"): (2.0682653833546527, 1),
    ("rossi/efron/km", "wexp"): (4.224595638698605, 1),
    ("rossi/efron/km", "mar"): (1.011021564554456, 1),
    ("rossi/efron/km", "paro"): (0.018383299135840685, 1),
    ("rossi/efron/km", "prio"): (0.52058426700614513, 1),
    ("rossi/efron/km", "GLOBAL"): (17.694415296027934, 7),
    ("rossi/efron/rank", "fin"): (1.3838084469832834, 1),
    ("rossi/efron/rank", "age"): (0.89642146210988782, 1),
    ("rossi/efron/rank", "race"): (2.2599781468497238, 1),
    ("rossi/efron/rank", "wexp"): (4.1596837566510265, 1),
    ("rossi/efron/rank", "mar"): (0.089592141999106659, 1),
    ("rossi/efron/rank", "paro"): (0.021851655677271903, 1),
    ("rossi/efron/rank", "prio"): (1.640803482629267, 1),
    ("rossi/efron/rank", "GLOBAL"): (11.025183434835887, 7),
    ("rossi/efron/identity", "fin"): (0.0089505582655462334, 1),
    ("rossi/efron/identity", "age"): (6.6159437979083284, 1),
    ("rossi/efron/identity", "race"): (2.1444262526062516, 1),
    ("rossi/efron/identity", "wexp"): (3.8767551298426968, 1),
    ("rossi/efron/identity", "mar"): (1.0313483188441954, 1),
    ("rossi/efron/identity", "paro"): (0.028176598686422822, 1),
    ("rossi/efron/identity", "prio"): (0.42479841110756983, 1),
    ("rossi/efron/identity", "GLOBAL"): (18.182687081388909, 7),
    ("rossi/efron/log", "fin"): (0.13759943517909506, 1),
    ("rossi/efron/log", "age"): (8.2314983504442445, 1),
    ("rossi/efron/log", "race"): (1.6170849367858029, 1),
    ("rossi/efron/log", "wexp"): (2.0858548451545729, 1),
    ("rossi/efron/log", "mar"): (1.1259733149640587, 1),
    ("rossi/efron/log", "paro"): (0.2192028103517463, 1),
    ("rossi/efron/log", "prio"): (0.013479071364258246, 1),
    ("rossi/efron/log", "GLOBAL"): (17.661570593722853, 7),
    ("rossi/breslow/km", "fin"): (0.061384635354113211, 1),
    ("rossi/breslow/km", "age"): (5.9408467355187407, 1),
    ("rossi/breslow/km", "race"): (2.0553715270059252, 1),
    ("rossi/breslow/km", "wexp"): (4.1907146351826388, 1),
    ("rossi/breslow/km", "mar"): (1.005006782908223, 1),
    ("rossi/breslow/km", "paro"): (0.018993177778412768, 1),
    ("rossi/breslow/km", "prio"): (0.5100188552193492, 1),
    ("rossi/breslow/km", "GLOBAL"): (17.573278814855218, 7),
    ("rossi/strata/km", "fin"): (0.024521934954118016, 1),
    ("rossi/strata/km", "age"): (5.7866225813710086, 1),
    ("rossi/strata/km", "wexp"): (4.0858039394234229, 1),
    ("rossi/strata/km", "mar"): (0.76777045961019164, 1),
    ("rossi/strata/km", "paro"): (0.030480161154294326, 1),
    ("rossi/strata/km", "prio"): (0.62994553727340141, 1),
    ("rossi/strata/km", "GLOBAL"): (15.617833055341684, 6),
    ("rossi/strata/rank", "fin"): (1.1803785349284379, 1),
    ("rossi/strata/rank", "age"): (0.81265944621137642, 1),
    ("rossi/strata/rank", "wexp"): (4.0285695889933066, 1),
    ("rossi/strata/rank", "mar"): (0.027760611805875884, 1),
    ("rossi/strata/rank", "paro"): (0.017867923694696756, 1),
    ("rossi/strata/rank", "prio"): (1.8641554641365499, 1),
    ("rossi/strata/rank", "GLOBAL"): (9.0444501988203569, 6),
    ("rossi/site/identity", "fin"): (0.016807578551057377, 1),
    ("rossi/site/identity", "age"): (6.7043150271754079, 1),
    ("rossi/site/identity", "race"): (2.1926308247114403, 1),
    ("rossi/site/identity", "wexp"): (3.7091410009654147, 1),
    ("rossi/site/identity", "mar"): (1.0273718966789893, 1),
    ("rossi/site/identity", "paro"): (0.026638044860660404, 1),
    ("rossi/site/identity", "prio"): (0.28857261210413654, 1),
    ("rossi/site/identity", "GLOBAL"): (18.349998749605941, 7),
    ("rossi/site/log", "fin"): (0.10192000332499634, 1),
    ("rossi/site/log", "age"): (8.3338200365072819, 1),
    ("rossi/site/log", "race"): (1.7465061342991512, 1),
    ("rossi/site/log", "wexp"): (1.9496413394772529, 1),
    ("rossi/site/log", "mar"): (1.1120578363955138, 1),
    ("rossi/site/log", "paro"): (0.18885403377664056, 1),
    ("rossi/site/log", "prio"): (0.07062720402810746, 1),
    ("rossi/site/log", "GLOBAL"): (18.623902738415595, 7),
    ("rossi/weights/km", "fin"): (0.00028759307558834027, 1),
    ("rossi/weights/km", "age"): (21.772044511711879, 1),
    ("rossi/weights/km", "race"): (3.2653536870748523, 1),
    ("rossi/weights/km", "wexp"): (9.2117967037981678, 1),
    ("rossi/weights/km", "mar"): (4.7881475419372661, 1),
    ("rossi/weights/km", "paro"): (0.00024198335681701336, 1),
    ("rossi/weights/km", "prio"): (1.7112023650228942, 1),
    ("rossi/weights/km", "GLOBAL"): (55.168859348122716, 7),
    ("rossi/weights/rank", "fin"): (1.8661503415570297, 1),
    ("rossi/weights/rank", "age"): (5.2211341980774915, 1),
    ("rossi/weights/rank", "race"): (1.6453575186002793, 1),
    ("rossi/weights/rank", "wexp"): (9.123404531239693, 1),
    ("rossi/weights/rank", "mar"): (0.91451523234633214, 1),
    ("rossi/weights/rank", "paro"): (0.51692448888631026, 1),
    ("rossi/weights/rank", "prio"): (3.8072560991967483, 1),
    ("rossi/weights/rank", "GLOBAL"): (28.184508314479789, 7),
    ("rossi/grid/km", "fin"): (0.1154689284944333, 1),
    ("rossi/grid/km", "age"): (6.1327718763054717, 1),
    ("rossi/grid/km", "race"): (2.1439629542529985, 1),
    ("rossi/grid/km", "wexp"): (4.1415945113790222, 1),
    ("rossi/grid/km", "mar"): (1.1276150099222082, 1),
    ("rossi/grid/km", "paro"): (0.010226858779976049, 1),
    ("rossi/grid/km", "prio"): (0.3412989917117043, 1),
    ("rossi/grid/km", "GLOBAL"): (18.005160790018898, 7),
    ("rossi/grid/rank", "fin"): (0.061798554809979457, 1),
    ("rossi/grid/rank", "age"): (1.456242592527152, 1),
    ("rossi/grid/rank", "race"): (0.26081108239263062, 1),
    ("rossi/grid/rank", "wexp"): (7.3763593135859766, 1),
    ("rossi/grid/rank", "mar"): (0.060697472384548264, 1),
    ("rossi/grid/rank", "paro"): (0.14279629022644669, 1),
    ("rossi/grid/rank", "prio"): (0.92073772051353975, 1),
    ("rossi/grid/rank", "GLOBAL"): (13.500309904581052, 7),
    ("rossi/grid/identity", "fin"): (0.040536105165796338, 1),
    ("rossi/grid/identity", "age"): (6.8671663792392819, 1),
    ("rossi/grid/identity", "race"): (2.0599484572416693, 1),
    ("rossi/grid/identity", "wexp"): (3.4634557931153505, 1),
    ("rossi/grid/identity", "mar"): (0.96550420264088621, 1),
    ("rossi/grid/identity", "paro"): (0.013976392967173687, 1),
    ("rossi/grid/identity", "prio"): (0.23256547874444455, 1),
    ("rossi/grid/identity", "GLOBAL"): (17.801791097662711, 7),
    ("rossi/thirds/km", "fin"): (0.0040815909540832078, 1),
    ("rossi/thirds/km", "age"): (4.5687705606105142, 1),
    ("rossi/thirds/km", "race"): (2.0225819691324207, 1),
    ("rossi/thirds/km", "wexp"): (4.5897158650207883, 1),
    ("rossi/thirds/km", "mar"): (1.7742909988769167, 1),
    ("rossi/thirds/km", "paro"): (0.14644134082101548, 1),
    ("rossi/thirds/km", "prio"): (1.238190751806391, 1),
    ("rossi/thirds/km", "GLOBAL"): (16.886997018098391, 7),
    ("rossi/thirds/rank", "fin"): (0.0075269306672192957, 1),
    ("rossi/thirds/rank", "age"): (3.6402972389865784, 1),
    ("rossi/thirds/rank", "race"): (2.3487740211161272, 1),
    ("rossi/thirds/rank", "wexp"): (4.0994503990523814, 1),
    ("rossi/thirds/rank", "mar"): (1.920565819338544, 1),
    ("rossi/thirds/rank", "paro"): (0.029744102163984633, 1),
    ("rossi/thirds/rank", "prio"): (0.98662728665102228, 1),
    ("rossi/thirds/rank", "GLOBAL"): (15.43632745915251, 7),
    ("rossi/thirds/identity", "fin"): (0.014381757013250892, 1),
    ("rossi/thirds/identity", "age"): (4.7476631806523093, 1),
    ("rossi/thirds/identity", "race"): (1.8182012325288126, 1),
    ("rossi/thirds/identity", "wexp"): (4.5797827699058189, 1),
    ("rossi/thirds/identity", "mar"): (1.6436721228874251, 1),
    ("rossi/thirds/identity", "paro"): (0.20624335690890788, 1),
    ("rossi/thirds/identity", "prio"): (1.2807585003753403, 1),
    ("rossi/thirds/identity", "GLOBAL"): (16.773419052986043, 7),
    ("gbsg2/terms/km", "horTh"): (0.23852143565057413, 1),
    ("gbsg2/terms/km", "age"): (10.437859628614836, 1),
    ("gbsg2/terms/km", "menostat"): (5.4060304507206807, 1),
    ("gbsg2/terms/km", "tsize"): (0.1911423992807661, 1),
    ("gbsg2/terms/km", "tgrade"): (10.712108696553486, 2),
    ("gbsg2/terms/km", "pnodes"): (0.80771678822101944, 1),
    ("gbsg2/terms/km", "progrec"): (4.3855462563879364, 1),
    ("gbsg2/terms/km", "estrec"): (5.8925551034907393, 1),
    ("gbsg2/terms/km", "GLOBAL"): (24.42109283323871, 9),
    ("gbsg2/columns/km", "horThyes"): (0.23852143565057413, 1),
    ("gbsg2/columns/km", "age"): (10.437859628614836, 1),
    ("gbsg2/columns/km", "menostatPre"): (5.4060304507206807, 1),
    ("gbsg2/columns/km", "tsize"): (0.1911423992807661, 1),
    ("gbsg2/columns/km", "tgradeII"): (3.2515175487144168, 1),
    ("gbsg2/columns/km", "tgradeIII"): (8.8089233170438774, 1),
    ("gbsg2/columns/km", "pnodes"): (0.80771678822101944, 1),
    ("gbsg2/columns/km", "progrec"): (4.3855462563879364, 1),
    ("gbsg2/columns/km", "estrec"): (5.8925551034907393, 1),
    ("gbsg2/columns/km", "GLOBAL"): (24.42109283323871, 9),
    ("gbsg2/terms/rank", "horTh"): (0.23846601871805484, 1),
    ("gbsg2/terms/rank", "age"): (9.6960627203134084, 1),
    ("gbsg2/terms/rank", "menostat"): (4.8652828211310437, 1),
    ("gbsg2/terms/rank", "tsize"): (0.1678595641478644, 1),
    ("gbsg2/terms/rank", "tgrade"): (8.884175167692737, 2),
    ("gbsg2/terms/rank", "pnodes"): (1.1225261497825791, 1),
    ("gbsg2/terms/rank", "progrec"): (4.2187963915175564, 1),
    ("gbsg2/terms/rank", "estrec"): (4.5304066049854033, 1),
    ("gbsg2/terms/rank", "GLOBAL"): (22.002589429816979, 9),
    ("gbsg2/columns/rank", "horThyes"): (0.23846601871805484, 1),
    ("gbsg2/columns/rank", "age"): (9.6960627203134084, 1),
    ("gbsg2/columns/rank", "menostatPre"): (4.8652828211310437, 1),
    ("gbsg2/columns/rank", "tsize"): (0.1678595641478644, 1),
    ("gbsg2/columns/rank", "tgradeII"): (2.6422484395872932, 1),
    ("gbsg2/columns/rank", "tgradeIII"): (7.4046953460294507, 1),
    ("gbsg2/columns/rank", "pnodes"): (1.1225261497825791, 1),
    ("gbsg2/columns/rank", "progrec"): (4.2187963915175564, 1),
    ("gbsg2/columns/rank", "estrec"): (4.5304066049854033, 1),
    ("gbsg2/columns/rank", "GLOBAL"): (22.002589429816979, 9),
    ("regression/km", "var1"): (1.4288651191063688, 1),
    ("regression/km", "var2"): (0.45434815748551033, 1),
    ("regression/km", "var3"): (2.6981880134706282, 1),
    ("regression/km", "GLOBAL"): (4.9966075520661564, 3),
    ("regression/rank", "var1"): (1.5140152074658242, 1),
    ("regression/rank", "var2"): (0.42857652525042139, 1),
    ("regression/rank", "var3"): (2.6223930986496113, 1),
    ("regression/rank", "GLOBAL"): (4.9962785795392168, 3),
    ("regression/identity", "var1"): (1.5587207496325564, 1),
    ("regression/identity", "var2"): (0.62826269163512194, 1),
    ("regression/identity", "var3"): (2.2868772425723272, 1),
    ("regression/identity", "GLOBAL"): (4.7639336739823088, 3),
    ("regression/log", "var1"): (2.264523526754588, 1),
    ("regression/log", "var2"): (0.28128921131528828, 1),
    ("regression/log", "var3"): (1.5520104903934546, 1),
    ("regression/log", "GLOBAL"): (4.5581875879082849, 3),
}


def _r_name(name):
    """R's name of a design column (``tgrade[T.II]`` is R's ``tgradeII``)."""
    return re.sub(r"\[T\.(.*)\]", r"\1", str(name))


def _assert_r(table, case):
    """The table's statistics, df and p-values against R's, term by term, in R's order
    (the GLOBAL row last)."""
    expected = [(term, v) for (c, term), v in R_NUMBERS.items() if c == case]
    ours = table.rename(index=_r_name)
    assert sorted(ours.index) == sorted(term for term, _ in expected)
    assert ours.index[-1] == "GLOBAL"
    chisq = np.array([v[0] for _, v in expected])
    df = [v[1] for _, v in expected]
    got = ours.loc[[term for term, _ in expected]]
    np.testing.assert_allclose(got["test_statistic"].to_numpy(), chisq, rtol=RTOL)
    assert list(got["df"]) == df
    from scipy import stats

    np.testing.assert_allclose(got["p"].to_numpy(), stats.chi2.sf(chisq, df), rtol=1e-7)


def _zph(cox, X, ev, tm, site, transform, **kw):
    return proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                    method="survival3", time_transform=transform, **kw)


@pytest.fixture(scope="module")
def rossi():
    X, ev, tm = O.load("rossi")
    site = O.split_sites(X, "quantile", column="age")
    cox = FedCoxPH(tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    return X, ev, tm, site, cox


def test_rossi_tied_weeks_every_transform(rossi):
    X, ev, tm, site, cox = rossi
    table = _zph(cox, X, ev, tm, site, "all")
    assert table.index.names == ["covariate", "transform"]
    assert table.attrs["method"] == "survival3" and table.attrs["n_events"] == 114
    for transform in ("km", "rank", "identity", "log"):
        block = table.xs(transform, level="transform")
        _assert_r(block, f"rossi/efron/{transform}")
    # R's default transform is km
    _assert_r(proportional_hazard_test(cox, X, survival_target(ev, tm), clients=site,
                                       method="survival3"), "rossi/efron/km")


def test_rossi_breslow_strata_column_and_weights(rossi):
    X, ev, tm, site, _ = rossi
    y = survival_target(ev, tm)
    breslow = FedCoxPH(ties="breslow", tol=1e-12).fit(X, y, clients=site)
    _assert_r(_zph(breslow, X, ev, tm, site, "km"), "rossi/breslow/km")
    strata = FedCoxPH(strata="race", tol=1e-12).fit(X, y, clients=site)
    for transform in ("km", "rank"):  # ranks and Kaplan-Meier over all strata, as R
        _assert_r(_zph(strata, X, ev, tm, site, transform), f"rossi/strata/{transform}")
    w = 1.0 + np.arange(1, len(tm) + 1) % 3  # R's 1 + (seq_len(n) %% 3)
    weighted = FedCoxPH(tol=1e-12).fit(X, y, clients=site, sample_weight=w)
    for transform in ("km", "rank"):  # R's rank and Kaplan-Meier ignore the weights
        _assert_r(_zph(weighted, X, ev, tm, site, transform, sample_weight=w),
                  f"rossi/weights/{transform}")


def test_each_site_its_own_stratum():
    # no event time leaves a site: each sends its information and weighted residuals
    # summed, plain and times g; the centring at the pooled mean of g is the server's
    X, ev, tm = O.load("rossi")
    site = np.arange(len(tm)) % 3  # R's (seq_len(n) - 1) %% 3
    cox = FedCoxPH(strata="site", tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    for transform in ("identity", "log"):
        _assert_r(_zph(cox, X, ev, tm, site, transform), f"rossi/site/{transform}")


def test_no_tied_times():
    X, ev, tm = O.load("regression")
    site = np.arange(len(tm)) % 3
    cox = FedCoxPH(tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    for transform in ("km", "rank", "identity", "log"):
        _assert_r(_zph(cox, X, ev, tm, site, transform), f"regression/{transform}")


@pytest.fixture(scope="module")
def gbsg2():
    from lifelines.datasets import load_gbsg2

    from skfed.formula import coxph

    frame = load_gbsg2().assign(site=lambda d: np.arange(len(d)) % 3)
    return coxph("Surv(time, cens) ~ horTh + age + menostat + tsize + tgrade + pnodes + "
                 "progrec + estrec", frame, clients="site", tol=1e-12)


@pytest.mark.parametrize("transform", ["km", "rank"])
def test_formula_terms_group_a_categoricals_columns(gbsg2, transform):
    by_term = proportional_hazard_test(gbsg2, method="survival3", time_transform=transform)
    _assert_r(by_term, f"gbsg2/terms/{transform}")
    assert by_term.loc["tgrade", "df"] == 2 and by_term.loc["GLOBAL", "df"] == 9
    by_column = gbsg2.proportional_hazard_test(transform, method="survival3", terms=False)
    _assert_r(by_column, f"gbsg2/columns/{transform}")


def test_coarsened_time_grid_is_rs_test_of_the_grouped_times(rossi):
    # a site's default policy: no exact event time leaves it, the fit is on a time grid;
    # the test is R's on the rows with each week at its interval's right end
    X, ev, tm, site, _ = rossi
    cuts = np.arange(4.0, 53.0, 4.0)
    cox = FedCoxPH(time_grid=cuts, tol=1e-12).fit(X, survival_target(ev, tm), clients=site)
    for transform in ("km", "rank", "identity"):
        _assert_r(_zph(cox, X, ev, tm, site, transform), f"rossi/grid/{transform}")


def test_the_lifelines_method_is_unchanged(rossi):
    X, ev, tm, site, cox = rossi
    y = survival_target(ev, tm)
    default = proportional_hazard_test(cox, X, y, clients=site)
    explicit = proportional_hazard_test(cox, X, y, clients=site, method="lifelines",
                                        time_transform="rank")
    pd.testing.assert_frame_equal(default, explicit)
    assert "method" not in default.attrs


def test_refusals_name_the_reason(rossi):
    X, ev, tm, site, cox = rossi
    y = survival_target(ev, tm)
    with pytest.raises(ValueError, match="method must be one of"):
        proportional_hazard_test(cox, X, y, clients=site, method="R")
    by_site = FedCoxPH(strata="site").fit(X, y, clients=site)
    with pytest.raises(ValueError, match="stratified by site"):
        _zph(by_site, X, ev, tm, site, "km")  # km and rank need the pooled times
    ridge = FedCoxPH(alpha=0.01, l1_ratio=0.0).fit(X, y, clients=site)
    with pytest.raises(ValueError, match="unpenalized"):
        _zph(ridge, X, ev, tm, site, "km")
    # under secure aggregation the per-time sums would leave each site unmasked: refused
    masked = FedCoxPH(privacy=SecureAggregation()).fit(X, y, clients=site)
    with pytest.raises(ValueError, match="secure aggregation"):
        _zph(masked, X, ev, tm, site, "km")


def test_no_cox_model_under_differential_privacy(rossi):
    # nothing to test: the fit itself is refused, with its reason
    from skfed.privacy import DifferentialPrivacy

    X, ev, tm, site, _ = rossi
    with pytest.raises(ValueError, match="differential privacy"):
        FedCoxPH(privacy=DifferentialPrivacy(epsilon=1.0)).fit(
            X, survival_target(ev, tm), clients=site)


def test_the_site_sums_are_sums_over_rows(rossi):
    X, ev, tm, site, cox = rossi
    whole = FederatedDataset.from_arrays(X, survival_target(ev, tm), np.zeros(len(tm)))
    parts = FederatedDataset.from_arrays(X, survival_target(ev, tm), np.arange(len(tm)) % 2)
    args = (cox.coef_, cox._fit_grid, None, True, True)
    one, two = whole.map(site_schoenfeld_sums, *args)[0], parts.map(site_schoenfeld_sums, *args)
    assert {"s2", "t2", "event_wx", "rows_at_risk", "row_events", "rows_at",
            "n_rows"} <= set(one)
    for key, value in one.items():
        np.testing.assert_allclose(np.asarray(two[0][key]) + np.asarray(two[1][key]), value,
                                   rtol=1e-12, atol=1e-12)


def test_ranks_need_each_time_held_by_enough_rows_at_a_site():
    # grid times 1, 3, 5: 5 events at 1 and at 5, and between them one row censored at
    # exactly 3 and four at 4; the risk-set rule passes (0 or 5 events, 5 rows leaving),
    # but the rows at time 3, which R's rank counts, are one row
    time = np.array([1.0] * 5 + [3.0] + [4.0] * 4 + [5.0] * 5)
    event = np.array([1] * 5 + [0] * 5 + [1] * 5)
    site = SimpleNamespace(y=np.column_stack([event, time]), weights=lambda: None)
    rules = SimpleNamespace(allow_event_times=False, min_level_count=5)
    values = {"grid": {0.0: np.array([1.0, 3.0, 5.0])}, "time_grid": None, "ranks": False}
    _schoenfeld_rules(site, values, rules)
    with pytest.raises(Refused, match="rank") as info:
        _schoenfeld_rules(site, {**values, "ranks": True}, rules)
    assert info.value.rule == "min_level_count"
    _schoenfeld_rules(site, {**values, "ranks": True},
                      SimpleNamespace(allow_event_times=True, min_level_count=5))


# --- the command line: skfed fit --model cox --summary --ph-test survival3 -------------
@pytest.fixture(scope="module")
def rossi_csv(tmp_path_factory):
    from lifelines.datasets import load_rossi

    from ._sites import SITES, split_frames

    parts = split_frames(load_rossi(), 3, by="age")
    frame = pd.concat([p.assign(site=s) for p, s in zip(parts, SITES)], ignore_index=True)
    path = tmp_path_factory.mktemp("rossi") / "rossi.csv"
    frame.to_csv(path, index=False)
    return path, frame


def _cli(capsys, tmp_path, path, *argv):
    import json

    from skfed.cli.main import main

    out_json = tmp_path / "fit.json"
    code = main(["fit", str(path), "--clients", "site", "--model", "cox", "--summary",
                 "--tol", "1e-10", "--ph-test", "survival3", *map(str, argv),
                 "--json", str(out_json)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    ph = json.loads(out_json.read_text())["ph_test"]
    return ph, pd.DataFrame(ph["table"]).T, captured.out


def test_the_command_line_gives_rs_table(rossi_csv, capsys, tmp_path):
    path, frame = rossi_csv
    ph, table, out = _cli(capsys, tmp_path, path, "--target", "arrest", "week")
    assert ph["method"] == "survival3" and ph["time_transform"] == "km"
    table = table.astype({"test_statistic": float, "df": int})
    expected = {t: v for (c, t), v in R_NUMBERS.items() if c == "rossi/efron/km"}
    assert list(table.index) == list(expected)
    np.testing.assert_allclose(table["test_statistic"], [v[0] for v in expected.values()],
                               rtol=1e-6)
    assert "R survival 3.x's cox.zph score test" in out
    # a formula: one row per term, as the Python API's
    formula = "Surv(week, arrest) ~ fin + age + C(race) + prio"
    ph, table, _ = _cli(capsys, tmp_path, path, "--formula", formula)
    from skfed.formula import coxph

    api = coxph(formula, frame, clients="site", tol=1e-10).proportional_hazard_test(
        method="survival3")
    assert list(table.index) == list(api.index)
    np.testing.assert_allclose(table["test_statistic"].astype(float), api["test_statistic"],
                               rtol=1e-6)
    # each site its own stratum: against the event times (km needs the pooled ones)
    ph, table, _ = _cli(capsys, tmp_path, path, "--target", "arrest", "week", "--strata",
                        "site")
    assert ph["time_transform"] == "identity"
    y = survival_target(frame["arrest"].to_numpy(bool), frame["week"].to_numpy(float))
    cox = FedCoxPH(strata="site", tol=1e-10).fit(frame[COVARIATES], y, clients=frame["site"])
    api = _zph(cox, frame[COVARIATES], frame["arrest"].to_numpy(bool),
               frame["week"].to_numpy(float), frame["site"], "identity")
    np.testing.assert_allclose(table["test_statistic"].astype(float), api["test_statistic"],
                               rtol=1e-6)


# --- through real site services (gRPC, mutual TLS) --------------------------------------
@pytest.fixture
def rossi_services(tmp_path):
    """lifelines' rossi at three site services (split by age), under ``policy``."""
    pytest.importorskip("grpc")
    from lifelines.datasets import load_rossi

    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    from ._sites import ROSSI_POLICY, SITES, site_config, split_frames

    certs = make_certificates(tmp_path / "certs", list(SITES))
    servers, opened = [], []

    def start(policy=""):
        addresses, parts = {}, split_frames(load_rossi(), 3, by="age")
        for k, name in enumerate(SITES):
            folder = tmp_path / f"{name}-{len(servers)}"
            folder.mkdir()
            parts[k].to_csv(folder / "rossi.csv", index=False)
            config = site_config(folder, name, certs=certs,
                                 datasets={"rossi": ("rossi.csv", None)},
                                 policy=f"{ROSSI_POLICY}\n{policy}")
            servers.append(SiteServer(load_config(config)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        data = FederatedDataset.from_sites(addresses, dataset="rossi", target=["arrest", "week"],
                                           ca_file=certs.ca.cert, cert_file=certs.client.cert,
                                           key_file=certs.client.key)
        opened.append(data)
        return data

    yield start
    for data in opened:
        data.close()
    for server in servers:
        server.stop()


def test_through_site_services_exact_and_on_a_time_grid(rossi_services):
    # sites that allow exact event times: R's numbers on the pooled rows
    exact = rossi_services("allow_event_times = true")
    cox = FedCoxPH(tol=1e-12).fit(exact)
    table = proportional_hazard_test(cox, exact, method="survival3", time_transform="all")
    for transform in ("km", "rank", "identity", "log"):
        _assert_r(table.xs(transform, level="transform"), f"rossi/efron/{transform}")
    # a site's default policy: no exact event time leaves; on a time grid whose
    # intervals each hold 0 or >= min_level_count events and rows at every site, R's
    # test of the grouped times
    strict = rossi_services()
    with pytest.raises(SiteRefusal) as info:  # four-week intervals: too few at a site
        FedCoxPH(time_grid=np.arange(4.0, 53.0, 4.0)).fit(strict)
    assert info.value.rule == "min_level_count"
    cox = FedCoxPH(time_grid=[17.0, 35.0, 52.0], tol=1e-12).fit(strict)
    for transform in ("km", "rank", "identity"):
        _assert_r(proportional_hazard_test(cox, strict, method="survival3",
                                           time_transform=transform),
                  f"rossi/thirds/{transform}")
    # each site its own stratum needs neither: the same table as in process
    by_site = FedCoxPH(strata="site", tol=1e-12).fit(strict)
    from lifelines.datasets import load_rossi

    from ._sites import SITES, split_frames

    parts = split_frames(load_rossi(), 3, by="age")
    pooled = pd.concat(parts, ignore_index=True)
    site = np.repeat(list(SITES), [len(part) for part in parts])
    local = FedCoxPH(strata="site", tol=1e-12).fit(
        pooled[COVARIATES], survival_target(pooled["arrest"], pooled["week"]), clients=site)
    for transform in ("identity", "log"):
        through = proportional_hazard_test(by_site, strict, method="survival3",
                                           time_transform=transform)
        here = _zph(local, pooled[COVARIATES], pooled["arrest"], pooled["week"], site,
                    transform)
        np.testing.assert_allclose(through["test_statistic"], here["test_statistic"],
                                   rtol=RTOL)
