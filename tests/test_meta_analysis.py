"""skfed.stats.meta_analysis equals statsmodels' combine_effects and metafor's rma.

References: statsmodels' ``combine_effects`` (DerSimonian-Laird; Paule-Mandel run
to a tight tolerance), metafor's numbers for Kacker's example as statsmodels'
``results_meta.py`` records them, metafor's REML fit of the BCG vaccine trials
(printed precision), and an independent scipy maximisation of the restricted
likelihood.
"""

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from skfed.stats import meta_analysis
from skfed.stats._meta_analysis import restricted_loglike

combine_effects = pytest.importorskip("statsmodels.stats.meta_analysis").combine_effects

# Kacker (2004), with metafor's rma results (statsmodels' results_meta.exk1_*)
KACKER_Y = np.array([61.0, 61.4, 62.21, 62.3, 62.34, 62.6, 62.7, 62.84, 65.9])
KACKER_V = np.array([0.2025, 1.21, 0.09, 0.2025, 0.3844, 0.5625, 0.0676, 0.0225, 1.8225])

# the BCG vaccine trials (metafor's dat.bcg): tpos, tneg, cpos, cneg
BCG = np.array([[4, 119, 11, 128], [6, 300, 29, 274], [3, 228, 11, 209],
                [62, 13536, 248, 12619], [33, 5036, 47, 5761], [180, 1361, 372, 1079],
                [8, 2537, 10, 619], [505, 87886, 499, 87892], [29, 7470, 45, 7232],
                [17, 1699, 65, 1600], [186, 50448, 141, 27197], [5, 2493, 3, 2338],
                [27, 16886, 29, 17825]], dtype=float)


def _heterogeneous(seed=0, k=8):
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.02, 0.4, size=k)
    return 0.5 + rng.normal(scale=0.6, size=k) + rng.normal(size=k) * np.sqrt(v), v


def test_dersimonian_laird_equals_statsmodels_combine_effects():
    y, v = _heterogeneous()
    ours = meta_analysis(y, v, method="dl")
    ref = combine_effects(y, v, method_re="dl")
    assert ref.q > len(y) - 1  # heterogeneous: statsmodels' tau2 needs no truncation
    for name in ("tau2", "mean_effect_fe", "mean_effect_re", "sd_eff_w_fe", "sd_eff_w_re",
                 "q", "i2", "h2", "var_hksj_fe", "var_hksj_re"):
        assert getattr(ours, name) == pytest.approx(getattr(ref, name), rel=1e-10, abs=1e-13)
    np.testing.assert_allclose(ours.summary_frame().to_numpy(),
                               ref.summary_frame().to_numpy(), rtol=1e-10, atol=1e-13)
    assert list(ours.summary_frame().index) == list(ref.summary_frame().index)
    np.testing.assert_allclose(ours.test_homogeneity(), tuple(ref.test_homogeneity()),
                               rtol=1e-10)
    for use_t in (False, True):
        ref_ci = ref.conf_int(use_t=use_t)
        ours_ci = ours.conf_int(use_t=use_t)
        for j, name in enumerate(["fixed effect", "random effect", "fixed effect wls",
                                  "random effect wls"]):
            np.testing.assert_allclose(ours_ci[name], ref_ci[j], rtol=1e-10)


def test_paule_mandel_solves_its_equation_where_statsmodels_stops_early():
    y, v = _heterogeneous()
    ours = meta_analysis(y, v, method="pm")
    w = 1 / (v + ours.tau2)
    generalised_q = np.sum(w * (y - np.sum(w * y) / np.sum(w)) ** 2)
    assert generalised_q == pytest.approx(len(y) - 1, rel=1e-13)
    # statsmodels stops when |Q - (k - 1)| < atol=1e-5 (a tighter atol makes its Newton
    # step overshoot and return 0 on these data)
    ref = combine_effects(y, v, method_re="iterated")
    assert ours.tau2 == pytest.approx(ref.tau2, rel=1e-7)
    assert ours.mean_effect_re == pytest.approx(ref.mean_effect_re, rel=1e-8)


def test_homogeneous_sites_truncate_tau2_where_statsmodels_goes_negative():
    y = np.array([1.0, 1.02, 0.99, 1.01])
    v = np.full(4, 0.04)
    ours, ref = meta_analysis(y, v, method="dl"), combine_effects(y, v, method_re="dl")
    assert ref.tau2 < 0 and ref.i2 < 0  # statsmodels does not truncate (metafor does)
    assert ours.tau2 == 0.0 and ours.i2 == 0.0
    assert ours.mean_effect_re == pytest.approx(ours.mean_effect_fe, rel=1e-15)
    assert ours.mean_effect_fe == pytest.approx(ref.mean_effect_fe, rel=1e-12)
    for method in ("reml", "ml", "pm"):
        assert meta_analysis(y, v, method=method).tau2 == 0.0


def test_metafor_kacker_example():
    dl = meta_analysis(KACKER_Y, KACKER_V, method="dl")
    assert dl.mean_effect_re == pytest.approx(62.3901386044504, rel=1e-12)
    assert dl.sd_eff_w_re == pytest.approx(0.245749668040304, rel=1e-10)
    assert dl.tau2 == pytest.approx(0.288049246973751, rel=1e-10)
    assert dl.q == pytest.approx(24.801897741835, rel=1e-10)
    assert dl.q_pvalue == pytest.approx(0.00167935146372742, rel=1e-9)
    assert 100 * dl.i2 == pytest.approx(67.744403741711, rel=1e-10)
    assert dl.conf_int()["random effect"] == pytest.approx(
        (61.9084781058787, 62.8717991030221), rel=1e-12)
    pm = meta_analysis(KACKER_Y, KACKER_V, method="pm")
    # metafor stops Paule-Mandel at tol=1e-9: compare to its precision
    assert pm.tau2 == pytest.approx(0.705395309224248, rel=1e-8)
    assert pm.mean_effect_re == pytest.approx(62.4076199113286, rel=1e-10)
    assert pm.sd_eff_w_re == pytest.approx(0.338030602684471, rel=1e-8)


def test_reml_matches_metafor_on_bcg_and_maximises_the_restricted_likelihood():
    a, b, c, d = BCG.T
    y = np.log(a / (a + b)) - np.log(c / (c + d))
    v = 1 / a - 1 / (a + b) + 1 / c - 1 / (c + d)
    res = meta_analysis(y, v)  # REML, metafor's default
    # metafor: rma(measure="RR", ...): estimate -0.7145, se 0.1798, tau^2 0.3132, Q 152.2330
    assert res.mean_effect_re == pytest.approx(-0.7145, abs=5e-5)
    assert res.sd_eff_w_re == pytest.approx(0.1798, abs=5e-5)
    assert res.tau2 == pytest.approx(0.3132, abs=5e-5)
    assert res.q == pytest.approx(152.2330, abs=5e-5)
    best = optimize.minimize_scalar(lambda t: -_reml(t, y, v), bounds=(0, 10),
                                    method="bounded", options={"xatol": 1e-12})
    assert res.tau2 == pytest.approx(best.x, rel=1e-6)
    assert _reml(res.tau2, y, v) >= _reml(best.x, y, v) - 1e-12
    assert restricted_loglike(res.tau2, y, v) == pytest.approx(_reml(res.tau2, y, v),
                                                              rel=1e-12)


def _reml(tau2, y, v):
    """The restricted log-likelihood, written again (constants dropped)."""
    w = 1 / (v + tau2)
    mu = np.sum(w * y) / np.sum(w)
    return -0.5 * (np.sum(np.log(v + tau2)) + np.log(np.sum(w)) + np.sum(w * (y - mu) ** 2))


def test_ml_is_the_likelihood_maximum():
    y, v = _heterogeneous(3)
    res = meta_analysis(y, v, method="ml")

    def loglike(t):
        w = 1 / (v + t)
        mu = np.sum(w * y) / np.sum(w)
        return -0.5 * (np.sum(np.log(v + t)) + np.sum(w * (y - mu) ** 2))

    best = optimize.minimize_scalar(lambda t: -loglike(t), bounds=(0, 10), method="bounded",
                                    options={"xatol": 1e-12})
    assert res.tau2 == pytest.approx(best.x, rel=1e-6)
    assert loglike(res.tau2) >= loglike(best.x) - 1e-12


def test_inputs_names_standard_errors_and_errors():
    y, v = _heterogeneous(1, k=4)
    named = meta_analysis(pd.Series(y, index=list("abcd")), standard_errors=np.sqrt(v))
    assert list(named.summary_frame().index[:4]) == list("abcd")
    assert named.tau2 == pytest.approx(meta_analysis(y, v).tau2, rel=1e-12)
    assert meta_analysis(dict(zip("abcd", y)), v).row_names == list("abcd")
    with pytest.raises(ValueError, match="one of the two"):
        meta_analysis(y, v, standard_errors=np.sqrt(v))
    with pytest.raises(ValueError, match="site 2: .*finite positive variance"):
        meta_analysis(y, np.r_[v[:2], 0.0, v[3]])
    with pytest.raises(ValueError, match="at least two"):
        meta_analysis(y[:1], v[:1])
    with pytest.raises(ValueError, match="method='remll'.*did you mean 'reml'"):
        meta_analysis(y, v, method="remll")


def test_forest_plot_draws_every_site_and_both_diamonds():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y, v = _heterogeneous(2, k=5)
    ax = meta_analysis(y, v, names=list("abcde")).plot_forest()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == list("abcde") + ["fixed effect", "random effect"]
    assert len(ax.patches) == 2  # the two diamonds
    plt.close(ax.figure)
