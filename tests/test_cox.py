"""FedCoxPH equals the pooled Cox fits of lifelines, statsmodels and scikit-survival.

Coefficients to a relative 1e-8 and standard errors to 1e-6, for Efron and
Breslow ties, unstratified (one baseline shared by the sites), stratified by
site and by a column, with ridge and elastic-net penalties and with weights,
on data sets lifelines and scikit-survival ship, split into sites both at
random and by the quantiles of one covariate (strongly heterogeneous sites).

The references and how they relate (each relation is checked by
``test_oracles_agree`` before the estimator is compared with it):

- lifelines' ``CoxPHFitter`` (Efron only) fitted with ``LIFELINES_FIT``: its
  default stops at a Newton decrement below ``precision``, i.e. a distance to
  the optimum of order sqrt(precision) (5e-8 relative on rossi with
  ``precision=1e-12``); with 1e-20 it stops when the log-likelihood stalls, and
  agrees with the independent oracle to 1e-14.
- lifelines standardizes the columns and penalizes the standardized
  coefficients with ``n * penalizer * (...)``, ``n`` the row count. On columns
  already standardized (mean 0, ddof=1 std 1) the normalization is the identity
  and ``penalizer = alpha * W / n`` (``W`` the weight sum) is skfed's
  ``-(1/W) logPL + alpha * (...)``. Its model-based covariance is then
  ``inv(-H + W alpha (1 - l1_ratio) I)``, and its ``log_likelihood_`` is the
  *penalized* value (``logPL - W alpha/2 ||b||^2``).
- scikit-survival's ``CoxPHSurvivalAnalysis`` minimizes ``-(1/n) logPL +
  alpha_sk/(2n) ||b||^2``: ``alpha_sk = n * alpha``; ``CoxnetSurvivalAnalysis``
  (Breslow) has skfed's objective exactly (``normalize=False``).
- statsmodels' ``PHReg`` (no weights): Breslow and Efron, strata; its
  ``fit(groups=...)`` is the sandwich ``H^-1 (sum_g U_g U_g') H^-1`` with
  Breslow-type score residuals over the full risk sets and no small-sample
  factor (the same as lifelines' ``robust=True`` / ``cluster_col`` when no two
  times are tied).
- Robust / cluster standard errors with tied times: lifelines' score residuals
  (``_compute_score_within_strata``, "TODO: doesn't handle ties") take the risk
  set of a row as the rows *after it in lifelines' sort order*, so tied rows get
  different risk sets and the result depends on the row order (on rossi: 3.1%
  from the full-risk-set sandwich, and 0.9% between two row orders). The
  reference with ties is therefore statsmodels' (order-free; the oracle's
  ``robust_cov`` equals it to 1e-14), and lifelines is the reference on the
  tie-free ``load_regression_dataset``.
- Weights: integer weights are replicated rows exactly under Breslow (checked
  against statsmodels on the replicated rows); under Efron they are not
  (lifelines' weighted Efron averages the tied events' weights; 0.7% apart on
  rossi), so the Efron reference for weights is lifelines' ``weights_col``.
- Baselines: lifelines' Breslow estimator evaluated by ``np.interp`` between
  observed durations; the step function and lifelines agree at observed
  durations, which is where they are compared.
- Concordance: lifelines' ``concordance_index(time, -risk, event)`` and
  scikit-survival's ``concordance_index_censored(event, time, risk)[0]`` agree
  (an event tied in time with a censored row counts as comparable).
- The coarsened time grid: with cut points ``c``, the fit is the exact Cox
  fit on the bin indices (``_cox_oracle.coarsen``). A grid through every
  distinct time keeps the order of the times, so the fit is the exact one.
  Measured on rossi with a monthly grid (13 cut points over 52 weeks) against
  the exact fit: 2.2% (Efron) and 3.6% (Breslow) largest relative coefficient
  difference, 0.03 / 0.07 standard errors, standard errors 0.2% / 0.5% apart;
  hence the sanity bound of 5% relative, and 0.2 standard errors for 20
  quantile bins (measured 0.017 / 0.013).
"""

import warnings
from functools import lru_cache

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold

from skfed.data import FederatedDataset
from skfed.survival import FedCoxPH, concordance_index, survival_target

from . import _cox_oracle as O

lifelines = pytest.importorskip("lifelines")
sm = pytest.importorskip("statsmodels.api")
sksurv_linear = pytest.importorskip("sksurv.linear_model")
from lifelines import CoxPHFitter  # noqa: E402
from lifelines.utils import concordance_index as lifelines_cindex  # noqa: E402
from sksurv.metrics import concordance_index_censored  # noqa: E402
from sksurv.util import Surv  # noqa: E402

COEF_RTOL = 1e-8
SE_RTOL = 1e-6
LIFELINES_FIT = {"precision": 1e-20, "r_precision": 1e-20, "max_steps": 500}
QUANTILE_COLUMN = {"rossi": "age", "whas500": "age", "veterans": "Karnofsky_score",
                   "regression": "var1", "gbsg2": "age"}
ROSSI_MONTHS = np.linspace(0, 52, 13)  # 12 "months" of 52/12 weeks over rossi's year


# --- data and reference fits ------------------------------------------------------------
@lru_cache(maxsize=None)
def data(name):
    return O.load(name)


@lru_cache(maxsize=None)
def sites(name, split):
    X, _, _ = data(name)
    return O.split_sites(X, split, column=QUANTILE_COLUMN[name])


@lru_cache(maxsize=None)
def standardized(name):
    X, ev, tm = data(name)
    return pd.DataFrame(O.standardize(X), columns=X.columns), ev, tm


def fed(X, ev, tm, site, sample_weight=None, **params):
    return FedCoxPH(**params).fit(X, survival_target(ev, tm), clients=site,
                                  sample_weight=sample_weight)


def lifelines_fit(X, ev, tm, *, columns=None, weights=None, strata=None, robust=False,
                  cluster_col=None, penalizer=0.0, l1_ratio=0.0, alpha=0.05):
    """lifelines on the pooled rows; ``columns`` are extra columns (a site column for
    ``strata`` or ``cluster_col``)."""
    df = pd.DataFrame(X).copy()
    df["T"], df["E"] = tm, ev
    for name, values in (columns or {}).items():
        df[name] = values
    kw = {}
    if weights is not None:
        df["_w"] = weights
        kw["weights_col"] = "_w"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # non-integer weights' StatisticalWarning
        return CoxPHFitter(penalizer=penalizer, l1_ratio=l1_ratio, strata=strata,
                           alpha=alpha).fit(df, "T", "E", robust=robust,
                                            cluster_col=cluster_col, fit_options=LIFELINES_FIT,
                                            **kw)


def site_strata(site, strata):
    """lifelines' arguments for strata=None / "site": a site column only when stratified
    (it would be a covariate otherwise)."""
    return {} if strata is None else {"columns": {"site": site}, "strata": ["site"]}


def phreg(X, ev, tm, ties, strata=None, groups=None):
    model = sm.PHReg(tm, np.asarray(X, float), status=np.asarray(ev, float), ties=ties,
                     strata=strata)
    return model.fit(groups=groups)


def model_cov(beta, X, ev, tm, ties="efron", weights=None, strata=None, ridge=0.0):
    _, _, H = O.cox_derivatives(beta, X, tm, ev, weights, strata, ties)
    return np.linalg.inv(-H + ridge * np.eye(len(beta)))


def assert_coef(coef, ref, se):
    np.testing.assert_allclose(coef, ref, rtol=COEF_RTOL, atol=COEF_RTOL * np.max(se))


def assert_log_p(p, ref_p, z):
    # p-values on the log scale: a relative error d in z moves log p by about z^2 d
    z = np.abs(np.asarray(z))
    np.testing.assert_array_less(np.abs(np.log(p) - np.log(ref_p)), 4 * SE_RTOL * (z**2 + 1))


def assert_equals_lifelines(est, cph, *, robust=False):
    """Every inference attribute of ``est`` against a lifelines fit."""
    se = cph.standard_errors_.to_numpy()
    summ = cph.summary
    assert_coef(est.coef_, cph.params_.to_numpy(), se)
    np.testing.assert_allclose(est.hazard_ratios_, np.exp(est.coef_), rtol=1e-15)
    np.testing.assert_allclose(est.hazard_ratios_, cph.hazard_ratios_.to_numpy(), rtol=COEF_RTOL,
                               atol=COEF_RTOL * np.max(se * cph.hazard_ratios_.to_numpy()))
    np.testing.assert_allclose(est.bse_, se, rtol=SE_RTOL)
    np.testing.assert_allclose(np.sqrt(np.diag(est.cov_params_)), est.bse_, rtol=1e-12)
    if not robust:  # lifelines' variance_matrix_ stays the model-based one
        V = cph.variance_matrix_.to_numpy()
        np.testing.assert_allclose(est.cov_params_, V, rtol=SE_RTOL, atol=SE_RTOL * np.abs(V).max())
    np.testing.assert_allclose(est.tvalues_, summ["z"].to_numpy(), rtol=SE_RTOL, atol=SE_RTOL)
    assert_log_p(est.pvalues_, summ["p"].to_numpy(), summ["z"].to_numpy())
    ci = np.asarray(est.conf_int(alpha=0.05))
    assert ci.shape == (len(se), 2)
    np.testing.assert_allclose(ci, cph.confidence_intervals_.to_numpy(), rtol=SE_RTOL,
                               atol=2 * SE_RTOL * np.max(se))


# --- the references agree with each other ----------------------------------------------
ORACLE_ASPECTS = ["efron-point", "efron-fits", "breslow-statsmodels-sksurv", "penalized",
                  "robust", "baseline-concordance-grid"]


@pytest.mark.parametrize("aspect", ORACLE_ASPECTS)
def test_oracles_agree(aspect):
    """The independent references of _cox_oracle equal lifelines, statsmodels and
    scikit-survival wherever their conventions meet (these relations justify every
    comparison below)."""
    X, ev, tm = data("rossi")
    Xa, n = X.to_numpy(), len(tm)
    rng = np.random.default_rng(0)
    site = sites("rossi", "quantile")

    if aspect == "efron-point":
        # lifelines' own Efron sums (backward recursion) at a point, with weights
        from lifelines.fitters.coxph_fitter import SemiParametricPHFitter

        w = rng.uniform(0.5, 2.0, n)
        beta = rng.normal(0, 0.1, Xa.shape[1])
        order = np.lexsort((ev, tm))
        H, g, ll = SemiParametricPHFitter()._get_efron_values_single(
            X.iloc[order], pd.Series(tm[order]), pd.Series(ev[order]), pd.Series(w[order]),
            None, beta)
        ll_o, g_o, H_o = O.cox_derivatives(beta, Xa, tm, ev, weights=w)
        assert ll_o == pytest.approx(ll, rel=1e-13)
        np.testing.assert_allclose(g_o, g, rtol=1e-10, atol=1e-10 * np.abs(g).max())
        np.testing.assert_allclose(H_o, H, rtol=1e-10, atol=1e-10 * np.abs(H).max())

    elif aspect == "efron-fits":
        w = rng.uniform(0.5, 3.0, n)
        cases = [(None, None, {}, None), (site, ["site"], {"site": site}, None),
                 (None, None, {}, w), (site, ["site"], {"site": site}, w)]
        for strata, lstrata, cols, weights in cases:
            b = O.cox_fit(Xa, tm, ev, weights=weights, strata=strata)
            cph = lifelines_fit(X, ev, tm, columns=cols, strata=lstrata, weights=weights)
            np.testing.assert_allclose(cph.params_, b, rtol=1e-12)
            se = np.sqrt(np.diag(model_cov(b, Xa, ev, tm, weights=weights, strata=strata)))
            np.testing.assert_allclose(cph.standard_errors_, se, rtol=1e-12)
            ll = O.cox_derivatives(b, Xa, tm, ev, weights, strata)[0]
            assert cph.log_likelihood_ == pytest.approx(ll, rel=1e-13)
            ll0 = O.cox_derivatives(np.zeros(Xa.shape[1]), Xa, tm, ev, weights, strata)[0]
            assert cph._model._ll_null_ == pytest.approx(ll0, rel=1e-13)
        # the default stopping rule of lifelines is not tight enough for 1e-8
        loose = CoxPHFitter().fit(X.assign(T=tm, E=ev), "T", "E",
                                  fit_options={"precision": 1e-12, "r_precision": 1e-14})
        assert np.max(np.abs(loose.params_ / O.cox_fit(Xa, tm, ev) - 1)) > 1e-9

    elif aspect == "breslow-statsmodels-sksurv":
        y = Surv.from_arrays(ev, tm)
        for ties in ("breslow", "efron"):
            for strata in (None, site):
                b = O.cox_fit(Xa, tm, ev, strata=strata, ties=ties)
                res = phreg(Xa, ev, tm, ties, strata=strata)
                np.testing.assert_allclose(res.params, b, rtol=1e-12)
                se = np.sqrt(np.diag(model_cov(b, Xa, ev, tm, ties, strata=strata)))
                np.testing.assert_allclose(res.bse, se, rtol=1e-12)
                assert res.llf == pytest.approx(O.cox_derivatives(b, Xa, tm, ev, None, strata,
                                                                  ties)[0], rel=1e-13)
            for alpha in (0.0, 0.05):
                sk = sksurv_linear.CoxPHSurvivalAnalysis(alpha=n * alpha, ties=ties, tol=1e-14,
                                                         n_iter=200).fit(Xa, y)
                np.testing.assert_allclose(sk.coef_, O.cox_fit(Xa, tm, ev, ties=ties, alpha=alpha),
                                           rtol=1e-11)
        # integer weights: replicated rows under Breslow, not under Efron
        k = rng.integers(1, 4, n)
        rep = np.repeat(np.arange(n), k)
        b = O.cox_fit(Xa, tm, ev, weights=k, ties="breslow")
        res = phreg(Xa[rep], ev[rep], tm[rep], "breslow")
        np.testing.assert_allclose(res.params, b, rtol=1e-12)
        np.testing.assert_allclose(
            res.bse, np.sqrt(np.diag(model_cov(b, Xa, ev, tm, "breslow", weights=k))), rtol=1e-12)
        be = O.cox_fit(Xa, tm, ev, weights=k)
        assert np.max(np.abs(be / O.cox_fit(Xa[rep], tm[rep], ev[rep]) - 1)) > 1e-3

    elif aspect == "penalized":
        Z, _, _ = standardized("rossi")
        Za = Z.to_numpy()
        w = rng.uniform(0.5, 2.0, n)
        for weights in (None, w):
            W = n if weights is None else w.sum()
            for alpha in (0.01, 0.1):
                b = O.cox_fit(Za, tm, ev, weights=weights, alpha=alpha)
                cph = lifelines_fit(Z, ev, tm, weights=weights, penalizer=alpha * W / n)
                np.testing.assert_allclose(cph.params_, b, rtol=1e-11)
                V = model_cov(b, Za, ev, tm, weights=weights, ridge=W * alpha)
                np.testing.assert_allclose(cph.standard_errors_, np.sqrt(np.diag(V)), rtol=1e-10)
                ll = O.cox_derivatives(b, Za, tm, ev, weights)[0]
                assert cph.log_likelihood_ == pytest.approx(ll - 0.5 * W * alpha * b @ b,
                                                            rel=1e-12)
        # L1 / elastic net: the oracle's KKT certificate; lifelines' smoothed |b|
        # (sharpness 1.3**i) gets tight only after many steps; Coxnet (Breslow)
        y = Surv.from_arrays(ev, tm)
        for alpha, l1_ratio in ((0.03, 1.0), (0.05, 0.5)):
            for ties in ("efron", "breslow"):
                b = O.cox_fit(Za, tm, ev, ties=ties, alpha=alpha, l1_ratio=l1_ratio)
                value, g, _ = O.cox_objective(b, Za, tm, ev, ties=ties, alpha=alpha,
                                              l1_ratio=l1_ratio)
                assert O.kkt_violation(b, g, alpha * l1_ratio) < 1e-13
                assert 0 < np.sum(b != 0) < len(b)
                if ties == "efron":
                    cph = lifelines_fit(Z, ev, tm, penalizer=alpha, l1_ratio=l1_ratio)
                    np.testing.assert_allclose(cph.params_, b, atol=1e-9)
                else:
                    cn = sksurv_linear.CoxnetSurvivalAnalysis(
                        alphas=[alpha], l1_ratio=l1_ratio, normalize=False, tol=1e-14,
                        max_iter=1000000).fit(Za, y)
                    np.testing.assert_allclose(cn.coef_.ravel(), b, atol=1e-7)
                    other = O.cox_objective(cn.coef_.ravel(), Za, tm, ev, ties=ties, alpha=alpha,
                                            l1_ratio=l1_ratio)[0]
                    assert other == pytest.approx(value, rel=1e-12)

    elif aspect == "robust":
        # no tied times: lifelines' sandwich is the oracle's
        Xr, evr, tmr = data("regression")
        Xra = Xr.to_numpy()
        assert len(np.unique(tmr)) == len(tmr)
        sr = sites("regression", "iid")
        wr = rng.uniform(0.5, 2.0, len(tmr))
        for strata, weights, cluster in ((None, None, False), (None, None, True),
                                         (sr, None, False), (None, wr, False)):
            b = O.cox_fit(Xra, tmr, evr, weights=weights, strata=strata)
            cph = lifelines_fit(Xr, evr, tmr, weights=weights,
                                columns={"site": sr} if strata is not None or cluster else None,
                                strata=None if strata is None else ["site"],
                                robust=not cluster, cluster_col="site" if cluster else None)
            V = O.robust_cov(b, Xra, tmr, evr, weights=weights, strata=strata,
                             groups=sr if cluster else None)
            np.testing.assert_allclose(cph.standard_errors_, np.sqrt(np.diag(V)), rtol=1e-10)
            if weights is None:
                res = phreg(Xra, evr, tmr, "efron", strata=strata,
                            groups=sr if cluster else np.arange(len(tmr)))
                np.testing.assert_allclose(res.cov_params(), V, rtol=1e-10,
                                           atol=1e-12 * np.abs(V).max())
        # tied times: statsmodels' sandwich (full risk sets) is the oracle's
        for ties in ("efron", "breslow"):
            b = O.cox_fit(Xa, tm, ev, ties=ties)
            for groups in (np.arange(n), site):
                V = O.robust_cov(b, Xa, tm, ev, ties=ties, groups=groups)
                res = phreg(Xa, ev, tm, ties, groups=groups)
                np.testing.assert_allclose(res.cov_params(), V, rtol=1e-11,
                                           atol=1e-13 * np.abs(V).max())

    elif aspect == "baseline-concordance-grid":
        times = np.array([1.0, 8.0, 20.0, 35.0, 52.0])  # observed durations
        rows = [0, 5, 100, 250, 400]
        w = rng.uniform(0.5, 2.0, n)
        for strata, weights in ((None, None), (site, None), (None, w)):
            b = O.cox_fit(Xa, tm, ev, weights=weights, strata=strata)
            base = O.breslow_cumhaz(b, Xa, tm, ev, weights, strata)
            mine = O.predict_cumhaz(base, b, Xa[rows], times,
                                    None if strata is None else strata[rows])
            if strata is None:
                cph = lifelines_fit(X, ev, tm, weights=weights)
                theirs = cph.predict_cumulative_hazard(X.iloc[rows], times=times).to_numpy().T
            else:
                cph = lifelines_fit(X, ev, tm, columns={"site": site}, strata=["site"])
                df = X.assign(site=site).iloc[rows]
                theirs = cph.predict_cumulative_hazard(df, times=times)[df.index].to_numpy().T
            np.testing.assert_allclose(mine, theirs, rtol=1e-10, atol=1e-14)
        risk = Xa @ O.cox_fit(Xa, tm, ev)
        c = O.harrell_c(tm, ev, risk)
        assert lifelines_cindex(tm, -risk, ev) == pytest.approx(c, rel=1e-14)
        assert concordance_index_censored(ev, tm, risk)[0] == pytest.approx(c, rel=1e-14)
        # a grid through every distinct time keeps the order: the exact fit
        np.testing.assert_array_equal(O.coarsen(tm, np.unique(tm)),
                                      np.searchsorted(np.unique(tm), tm))
        np.testing.assert_allclose(O.cox_fit(Xa, O.coarsen(tm, np.unique(tm)), ev),
                                   O.cox_fit(Xa, tm, ev), rtol=1e-14)


# --- Efron: lifelines ------------------------------------------------------------------
@pytest.mark.parametrize("strata", [None, "site"])
@pytest.mark.parametrize("split", ["iid", "quantile"])
@pytest.mark.parametrize("name", ["rossi", "whas500"])
def test_efron_equals_lifelines(name, split, strata):
    """Coefficients, hazard ratios, SEs, covariance, z, p, intervals, log partial
    likelihood (and at zero) of the shared-baseline and the site-stratified fit."""
    X, ev, tm = data(name)
    site = sites(name, split)
    est = fed(X, ev, tm, site, strata=strata)
    cph = lifelines_fit(X, ev, tm, **site_strata(site, strata))
    assert_equals_lifelines(est, cph)
    assert est.loglike_ == pytest.approx(cph.log_likelihood_, rel=1e-10)
    strata_rows = None if strata is None else site
    ll0 = O.cox_derivatives(np.zeros(X.shape[1]), X, tm, ev, None, strata_rows)[0]
    assert est.loglike_null_ == pytest.approx(ll0, rel=1e-12)
    assert est.n_clients_ == 4
    assert 1 <= est.n_iter_ <= 8  # Newton: a handful of rounds (measured 5 or 6)
    bytes_up = np.asarray(est.history_.to_dict()["bytes_up"], float)
    assert np.nansum(bytes_up) > 0
    np.testing.assert_allclose(est.predict(X), X.to_numpy() @ est.coef_, rtol=1e-12, atol=1e-12)


def test_top_level_import_and_clone():
    from skfed import FedCoxPH as top

    assert top is FedCoxPH
    est = FedCoxPH(alpha=0.1, l1_ratio=0.5, ties="breslow", strata="site", time_grid=[1.0, 2.0])
    params = clone(est).get_params()
    assert params["alpha"] == 0.1 and params["ties"] == "breslow" and params["strata"] == "site"


# --- Breslow: statsmodels and scikit-survival --------------------------------------------
@pytest.mark.parametrize("strata", [None, "site"])
@pytest.mark.parametrize("name", ["rossi", "whas500"])
def test_breslow_equals_statsmodels_and_sksurv(name, strata):
    X, ev, tm = data(name)
    site = sites(name, "quantile")
    est = fed(X, ev, tm, site, ties="breslow", strata=strata)
    res = phreg(X, ev, tm, "breslow", strata=None if strata is None else site)
    assert_coef(est.coef_, res.params, res.bse)
    np.testing.assert_allclose(est.bse_, res.bse, rtol=SE_RTOL)
    np.testing.assert_allclose(est.cov_params_, res.cov_params(), rtol=SE_RTOL,
                               atol=SE_RTOL * np.abs(res.cov_params()).max())
    np.testing.assert_allclose(est.tvalues_, res.tvalues, rtol=SE_RTOL, atol=SE_RTOL)
    assert est.loglike_ == pytest.approx(res.llf, rel=1e-10)
    if strata is None:
        sk = sksurv_linear.CoxPHSurvivalAnalysis(ties="breslow", tol=1e-14, n_iter=200).fit(
            X.to_numpy(), Surv.from_arrays(ev, tm))
        assert_coef(est.coef_, sk.coef_, res.bse)


# --- strata by a column --------------------------------------------------------------
@pytest.mark.parametrize("case", ["veterans-name", "veterans-index", "rossi-wexp",
                                  "rossi-site-and-wexp"])
def test_strata_column_equals_lifelines(case):
    """A strata column (a name for a DataFrame, an index for an array) is removed from
    the covariates; its levels are the strata across all sites; a list combines it
    with the sites."""
    name = case.split("-")[0]
    X, ev, tm = data(name)
    site = sites(name, "iid")
    if case == "veterans-name":
        strata, lstrata, Xfit = "celltype", ["celltype"], X
    elif case == "veterans-index":
        strata, lstrata, Xfit = 0, ["celltype"], X.to_numpy()
    elif case == "rossi-wexp":
        strata, lstrata, Xfit = "wexp", ["wexp"], X
    else:
        strata, lstrata, Xfit = ["site", "wexp"], ["site", "wexp"], X
    est = fed(Xfit, ev, tm, site, strata=strata)
    cph = lifelines_fit(X, ev, tm, strata=lstrata,
                        columns={"site": site} if "site" in lstrata else None)
    assert est.coef_.shape == (X.shape[1] - 1,)
    assert_equals_lifelines(est, cph)
    assert est.loglike_ == pytest.approx(cph.log_likelihood_, rel=1e-10)
    if isinstance(Xfit, pd.DataFrame):
        table = est.summary()
        assert list(table.index) == list(cph.params_.index)
    # Breslow: statsmodels with the same strata
    column = X[lstrata[-1]].to_numpy()
    rows = column if len(lstrata) == 1 else np.column_stack([site, column])
    _, rows = np.unique(np.atleast_2d(rows.T).T, axis=0, return_inverse=True)
    res = phreg(X.drop(columns=lstrata[-1]), ev, tm, "breslow", strata=rows.ravel())
    est_b = fed(Xfit, ev, tm, site, strata=strata, ties="breslow")
    assert_coef(est_b.coef_, res.params, res.bse)
    np.testing.assert_allclose(est_b.bse_, res.bse, rtol=SE_RTOL)


def test_sites_as_strata_equal_the_column_as_strata():
    """Sites made from a column's levels (a strongly heterogeneous split):
    strata="site" is strata=column."""
    X, ev, tm = data("veterans")
    celltype = X["celltype"].to_numpy()
    by_site = fed(X.drop(columns="celltype"), ev, tm, celltype, strata="site")
    by_column = fed(X, ev, tm, sites("veterans", "iid"), strata="celltype")
    assert_coef(by_site.coef_, by_column.coef_, by_column.bse_)
    np.testing.assert_allclose(by_site.bse_, by_column.bse_, rtol=SE_RTOL)
    assert by_site.loglike_ == pytest.approx(by_column.loglike_, rel=1e-10)


# --- penalties -------------------------------------------------------------------------
RIDGE_CASES = ["efron", "efron-site", "efron-weights", "breslow", "breslow-int-weights"]


@pytest.mark.parametrize("case", RIDGE_CASES)
def test_ridge_equals_lifelines_and_sksurv(case):
    """Efron: lifelines with penalizer = alpha * W / n on standardized columns (coef
    and SEs, the latter from the penalized information). Breslow: scikit-survival
    with alpha_sk = W * alpha (on the replicated rows for integer weights)."""
    Z, ev, tm = standardized("rossi")
    Za, n = Z.to_numpy(), len(tm)
    site = sites("rossi", "quantile")
    rng = np.random.default_rng(1)
    alpha = 0.02 if case == "efron-site" else 0.05
    strata = "site" if case == "efron-site" else None
    weights = None
    if case == "efron-weights":
        weights = rng.uniform(0.5, 2.0, n)
    elif case == "breslow-int-weights":
        weights = rng.integers(1, 4, n).astype(float)
    W = n if weights is None else weights.sum()
    ties = case.split("-")[0]
    est = fed(Z, ev, tm, site, sample_weight=weights, alpha=alpha, ties=ties, strata=strata)
    strata_rows = None if strata is None else site
    ll = O.cox_derivatives(est.coef_, Za, tm, ev, weights, strata_rows, ties)[0]
    assert est.loglike_ == pytest.approx(ll, rel=1e-12)  # unpenalized, at the optimum
    if ties == "efron":
        cph = lifelines_fit(Z, ev, tm, weights=weights, penalizer=alpha * W / n,
                            **site_strata(site, strata))
        assert_equals_lifelines(est, cph)
        b = cph.params_.to_numpy()
        assert est.loglike_ == pytest.approx(cph.log_likelihood_ + 0.5 * W * alpha * b @ b,
                                             rel=1e-10)
    else:
        rep = np.arange(n) if weights is None else np.repeat(np.arange(n), weights.astype(int))
        sk = sksurv_linear.CoxPHSurvivalAnalysis(alpha=W * alpha, ties="breslow", tol=1e-14,
                                                 n_iter=200).fit(Za[rep],
                                                                 Surv.from_arrays(ev[rep], tm[rep]))
        se = np.sqrt(np.diag(model_cov(sk.coef_, Za, ev, tm, "breslow", weights, ridge=W * alpha)))
        assert_coef(est.coef_, sk.coef_, se)
        np.testing.assert_allclose(est.bse_, se, rtol=SE_RTOL)


ENET_CASES = [("efron", None, 0.03, 1.0, False), ("efron", "site", 0.05, 0.5, True),
              ("breslow", None, 0.05, 0.5, False), ("breslow", "site", 0.03, 1.0, False),
              ("efron", None, 0.3, 1.0, False)]


@lru_cache(maxsize=None)
def _enet_oracle(ties, strata, alpha, l1_ratio, weighted):
    Z, ev, tm = standardized("rossi")
    site = sites("rossi", "quantile")
    w = np.random.default_rng(2).uniform(0.5, 2.0, len(tm)) if weighted else None
    s = site if strata == "site" else None
    b = O.cox_fit(Z.to_numpy(), tm, ev, weights=w, strata=s, ties=ties, alpha=alpha,
                  l1_ratio=l1_ratio)
    return b, w, s


@pytest.mark.parametrize("ties,strata,alpha,l1_ratio,weighted", ENET_CASES)
def test_elastic_net_equals_oracle(ties, strata, alpha, l1_ratio, weighted):
    """L1 and elastic net against the oracle's tight proximal-Newton solve (its KKT
    certificate checked here), the estimator's own KKT conditions, and the support."""
    Z, ev, tm = standardized("rossi")
    Za = Z.to_numpy()
    b, w, s = _enet_oracle(ties, strata, alpha, l1_ratio, weighted)
    lam = alpha * l1_ratio

    def kkt(beta):
        _, g, _ = O.cox_objective(beta, Za, tm, ev, w, s, ties, alpha, l1_ratio)
        return O.kkt_violation(beta, g, lam)

    assert kkt(b) < 1e-13
    est = fed(Z, ev, tm, sites("rossi", "quantile"), sample_weight=w, ties=ties, strata=strata,
              alpha=alpha, l1_ratio=l1_ratio)
    np.testing.assert_allclose(est.coef_, b, rtol=COEF_RTOL, atol=1e-10)
    np.testing.assert_array_equal(np.abs(est.coef_) > 1e-10, b != 0)
    assert kkt(np.where(np.abs(est.coef_) <= 1e-10, 0.0, est.coef_)) < 1e-8
    if alpha == 0.3:  # above the largest useful alpha: all zero
        assert np.all(est.coef_ == 0)


# --- weights ---------------------------------------------------------------------------
@pytest.mark.parametrize("strata", [None, "site"])
def test_weights_efron_equal_lifelines_weights_col(strata):
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    w = np.random.default_rng(3).uniform(0.2, 3.0, len(tm))
    est = fed(X, ev, tm, site, sample_weight=w, strata=strata)
    cph = lifelines_fit(X, ev, tm, weights=w, **site_strata(site, strata))
    assert_equals_lifelines(est, cph)
    assert est.loglike_ == pytest.approx(cph.log_likelihood_, rel=1e-10)
    # unit weights are no weights
    ones = fed(X, ev, tm, site, sample_weight=np.ones(len(tm)), strata=strata)
    unweighted = fed(X, ev, tm, site, strata=strata)
    np.testing.assert_allclose(ones.coef_, unweighted.coef_, rtol=1e-12)
    np.testing.assert_allclose(ones.bse_, unweighted.bse_, rtol=1e-12)


@pytest.mark.parametrize("strata", [None, "site"])
def test_integer_weights_breslow_are_replicated_rows(strata):
    X, ev, tm = data("whas500")
    site = sites("whas500", "iid")
    k = np.random.default_rng(4).integers(1, 4, len(tm))
    rep = np.repeat(np.arange(len(tm)), k)
    est = fed(X, ev, tm, site, sample_weight=k.astype(float), ties="breslow", strata=strata)
    res = phreg(X.to_numpy()[rep], ev[rep], tm[rep], "breslow",
                strata=None if strata is None else site[rep])
    assert_coef(est.coef_, res.params, res.bse)
    np.testing.assert_allclose(est.bse_, res.bse, rtol=SE_RTOL)
    assert est.loglike_ == pytest.approx(res.llf, rel=1e-10)
    replicated = fed(X.iloc[rep], ev[rep], tm[rep], site[rep], ties="breslow", strata=strata)
    assert_coef(est.coef_, replicated.coef_, res.bse)


# --- robust and cluster covariances -----------------------------------------------------
@pytest.mark.parametrize("case", ["robust", "cluster", "robust-site-strata", "robust-weights"])
def test_robust_and_cluster_equal_lifelines_without_ties(case):
    """On continuous times (load_regression_dataset) lifelines' sandwich is exact:
    robust=True is cov_type="robust", cluster_col=<site column> is "cluster" (no
    small-sample factor)."""
    X, ev, tm = data("regression")
    site = sites("regression", "iid")
    weights = (np.random.default_rng(5).uniform(0.5, 2.0, len(tm)) if case == "robust-weights"
               else None)
    strata = "site" if case == "robust-site-strata" else None
    cov_type = "cluster" if case == "cluster" else "robust"
    est = fed(X, ev, tm, site, sample_weight=weights, strata=strata, cov_type=cov_type)
    if case == "cluster":
        cph = lifelines_fit(X, ev, tm, columns={"site": site}, cluster_col="site")
    elif strata:
        cph = lifelines_fit(X, ev, tm, columns={"site": site}, strata=["site"], robust=True)
    else:
        cph = lifelines_fit(X, ev, tm, weights=weights, robust=True)
    assert_equals_lifelines(est, cph, robust=True)
    V = O.robust_cov(cph.params_.to_numpy(), X, tm, ev, weights=weights,
                     strata=None if strata is None else site,
                     groups=site if case == "cluster" else None)
    np.testing.assert_allclose(est.cov_params_, V, rtol=SE_RTOL, atol=SE_RTOL * np.abs(V).max())


@pytest.mark.parametrize("cov_type", ["robust", "cluster"])
@pytest.mark.parametrize("ties", ["efron", "breslow"])
def test_robust_and_cluster_with_tied_times_equal_statsmodels(ties, cov_type):
    """Tied times (rossi's weeks): the sandwich over full risk sets, statsmodels'
    PHReg(...).fit(groups=...) (see the module docstring for lifelines)."""
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    est = fed(X, ev, tm, site, ties=ties, cov_type=cov_type)
    groups = site if cov_type == "cluster" else np.arange(len(tm))
    res = phreg(X, ev, tm, ties, groups=groups)
    assert_coef(est.coef_, res.params, res.bse)
    np.testing.assert_allclose(est.bse_, res.bse, rtol=SE_RTOL)
    np.testing.assert_allclose(est.cov_params_, res.cov_params(), rtol=SE_RTOL,
                               atol=SE_RTOL * np.abs(res.cov_params()).max())
    np.testing.assert_allclose(est.tvalues_, res.params / res.bse, rtol=SE_RTOL, atol=SE_RTOL)


# --- baseline and predictions ----------------------------------------------------------
ROSSI_TIMES = np.array([1.0, 8.0, 20.0, 35.0, 52.0])  # observed durations
ROWS = [0, 5, 100, 250, 400, 431]


@pytest.mark.parametrize("weighted", [False, True])
def test_shared_baseline_predictions_equal_lifelines(weighted):
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    w = np.random.default_rng(6).uniform(0.5, 2.0, len(tm)) if weighted else None
    est = fed(X, ev, tm, site, sample_weight=w)
    cph = lifelines_fit(X, ev, tm, weights=w)
    rows = X.iloc[ROWS]
    H = np.asarray(est.predict_cumulative_hazard(rows, times=ROSSI_TIMES))
    S = np.asarray(est.predict_survival_function(rows, times=ROSSI_TIMES))
    assert H.shape == S.shape == (len(ROWS), len(ROSSI_TIMES))
    ref_H = cph.predict_cumulative_hazard(rows, times=ROSSI_TIMES).to_numpy().T
    ref_S = cph.predict_survival_function(rows, times=ROSSI_TIMES).to_numpy().T
    np.testing.assert_allclose(H, ref_H, rtol=1e-7)
    np.testing.assert_allclose(S, ref_S, rtol=1e-7)
    np.testing.assert_allclose(est.predict(rows), rows.to_numpy() @ est.coef_, rtol=1e-12)
    # every observed event time by default
    full = np.asarray(est.predict_cumulative_hazard(rows))
    assert full.shape == (len(ROWS), len(est.baseline_times_))
    # the baseline's times: at least every event time, at most every observed time
    times = np.asarray(est.baseline_times_)
    assert np.all(np.diff(times) > 0)
    assert set(np.unique(tm[ev])) <= set(times) <= set(np.unique(tm))
    np.testing.assert_allclose(np.asarray(est.predict_survival_function(rows)), np.exp(-full),
                               rtol=1e-12)


def test_stratified_predictions_equal_lifelines_per_stratum():
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    est = fed(X, ev, tm, site, strata="site")
    cph = lifelines_fit(X, ev, tm, columns={"site": site}, strata=["site"])
    df = X.assign(site=site).iloc[ROWS]
    ref_H = cph.predict_cumulative_hazard(df, times=ROSSI_TIMES)[df.index].to_numpy().T
    ref_S = cph.predict_survival_function(df, times=ROSSI_TIMES)[df.index].to_numpy().T
    H = np.asarray(est.predict_cumulative_hazard(X.iloc[ROWS], times=ROSSI_TIMES,
                                                 strata=site[ROWS]))
    S = np.asarray(est.predict_survival_function(X.iloc[ROWS], times=ROSSI_TIMES,
                                                 strata=site[ROWS]))
    np.testing.assert_allclose(H, ref_H, rtol=1e-7, atol=1e-14)
    np.testing.assert_allclose(S, ref_S, rtol=1e-7)
    # the strata column of a DataFrame fit is read from the rows, as lifelines does
    Xv, evv, tmv = data("veterans")
    est = fed(Xv, evv, tmv, sites("veterans", "iid"), strata="celltype")
    cph = lifelines_fit(Xv, evv, tmv, strata=["celltype"])
    times = np.unique(tmv)[[3, 20, 50, 80]]
    rows = Xv.iloc[[0, 30, 60, 90, 120]]
    ref = cph.predict_cumulative_hazard(rows, times=times)[rows.index].to_numpy().T
    np.testing.assert_allclose(np.asarray(est.predict_cumulative_hazard(rows, times=times)), ref,
                               rtol=1e-7, atol=1e-14)


# --- concordance -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["rossi", "whas500"])
def test_score_and_concordance_equal_lifelines(name):
    X, ev, tm = data(name)
    site = sites(name, "quantile")
    est = fed(X, ev, tm, site)
    risk = X.to_numpy() @ est.coef_
    ref = lifelines_cindex(tm, -risk, ev)
    assert ref == pytest.approx(concordance_index_censored(ev, tm, risk)[0], rel=1e-14)
    assert est.score(X, survival_target(ev, tm)) == pytest.approx(ref, rel=1e-12)
    out = concordance_index(est, FederatedDataset.from_arrays(X, survival_target(ev, tm), site))
    assert set(out) >= {"pooled", "per_site", "exact"}
    if out["exact"]:
        assert out["pooled"] == pytest.approx(ref, rel=1e-12)
    else:
        assert out["pooled"] == pytest.approx(ref, abs=5e-3)
    assert sorted(out["per_site"]) == [0, 1, 2, 3]
    for s in range(4):
        m = site == s
        assert out["per_site"][s] == pytest.approx(lifelines_cindex(tm[m], -risk[m], ev[m]),
                                                   rel=1e-12)


# --- the time grid ---------------------------------------------------------------------
@pytest.mark.parametrize("ties", ["efron", "breslow"])
def test_time_grid_finer_than_the_times_is_exact(ties):
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    exact = fed(X, ev, tm, site, ties=ties)
    u = np.unique(tm)
    for grid in (u, np.r_[0.0, (u[1:] + u[:-1]) / 2, u[-1]]):  # the times; between them
        est = fed(X, ev, tm, site, ties=ties, time_grid=grid)
        assert_coef(est.coef_, exact.coef_, exact.bse_)
        np.testing.assert_allclose(est.bse_, exact.bse_, rtol=SE_RTOL)
        assert est.loglike_ == pytest.approx(exact.loglike_, rel=1e-10)
    if ties == "efron":
        assert_equals_lifelines(exact, lifelines_fit(X, ev, tm))


@pytest.mark.parametrize("ties", ["efron", "breslow"])
def test_monthly_grid_is_the_exact_fit_on_coarsened_times(ties, capsys):
    """Exact on the binned times (lifelines / statsmodels on the bin indices); close
    to, and not equal to, the fit on the weeks."""
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    est = fed(X, ev, tm, site, ties=ties, time_grid=ROSSI_MONTHS)
    binned = O.coarsen(tm, ROSSI_MONTHS)
    if ties == "efron":
        assert_equals_lifelines(est, lifelines_fit(X, ev, binned))
    else:
        res = phreg(X, ev, binned, "breslow")
        assert_coef(est.coef_, res.params, res.bse)
        np.testing.assert_allclose(est.bse_, res.bse, rtol=SE_RTOL)
    exact = fed(X, ev, tm, site, ties=ties)
    rel = np.max(np.abs(est.coef_ / exact.coef_ - 1))
    in_se = np.max(np.abs(est.coef_ - exact.coef_) / exact.bse_)
    se_rel = np.max(np.abs(est.bse_ / exact.bse_ - 1))
    with capsys.disabled():
        print(f"\nrossi monthly grid ({ties}): coef {rel:.2%} relative, {in_se:.3f} SE; "
              f"SE {se_rel:.2%}")
    assert 1e-4 < rel < 0.05  # measured 2.2% (Efron), 3.6% (Breslow)
    assert in_se < 0.1 and se_rel < 0.01


def test_quantile_bins_are_close():
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    exact = fed(X, ev, tm, site)
    est = fed(X, ev, tm, site, time_grid=20)
    assert np.max(np.abs(est.coef_ - exact.coef_) / exact.bse_) < 0.2  # measured 0.017
    assert not np.allclose(est.coef_, exact.coef_, rtol=1e-8, atol=0)


def test_time_grid_with_site_strata_only_places_the_baseline():
    """strata="site": the sites' own baselines need no shared grid, so the fit is the
    exact stratified one; the grid is where the baseline is reported."""
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    est = fed(X, ev, tm, site, strata="site", time_grid=ROSSI_MONTHS)
    exact = fed(X, ev, tm, site, strata="site")
    cph = lifelines_fit(X, ev, tm, columns={"site": site}, strata=["site"])
    assert_equals_lifelines(est, cph)
    assert_coef(est.coef_, exact.coef_, exact.bse_)
    base = O.breslow_cumhaz(cph.params_.to_numpy(), X, tm, ev, strata=site)
    grid = ROSSI_MONTHS[1:]
    H = np.asarray(est.predict_cumulative_hazard(X.iloc[ROWS], times=grid, strata=site[ROWS]))
    np.testing.assert_allclose(H, O.predict_cumhaz(base, cph.params_.to_numpy(),
                                                   X.to_numpy()[ROWS], grid, site[ROWS]),
                               rtol=1e-7, atol=1e-14)


# --- scikit-learn integration ------------------------------------------------------------
def test_grid_search_with_group_folds_scores_by_concordance():
    Z, ev, tm = standardized("rossi")
    site = sites("rossi", "quantile")
    y = survival_target(ev, tm)
    grid = {"alpha": [0.01, 0.2]}
    search = GridSearchCV(FedCoxPH(), grid, cv=GroupKFold(n_splits=4))
    search.fit(Z, y, groups=site, clients=site)
    assert search.best_estimator_.n_clients_ == 4
    for k, params in enumerate(search.cv_results_["params"]):
        for f, (train, test) in enumerate(GroupKFold(n_splits=4).split(Z, y, site)):
            est = FedCoxPH(**params).fit(Z.iloc[train], y[train], clients=site[train])
            assert est.n_clients_ == 3
            c = concordance_index_censored(ev[test], tm[test], Z.to_numpy()[test] @ est.coef_)[0]
            assert search.cv_results_[f"split{f}_test_score"][k] == pytest.approx(c, rel=1e-10)
    best = FedCoxPH(**search.best_params_).fit(Z, y, clients=site)
    np.testing.assert_allclose(search.best_estimator_.coef_, best.coef_, rtol=1e-12)


def test_survival_target_and_summary():
    X, ev, tm = data("rossi")
    site = sites("rossi", "iid")
    y = survival_target(ev, tm)
    ref = Surv.from_arrays(ev, tm)
    assert y.dtype == ref.dtype
    np.testing.assert_array_equal(y["event"], ref["event"])
    np.testing.assert_array_equal(y["time"], ref["time"])
    est = FedCoxPH().fit(X, y, clients=site)
    # any two-field structured array, event first: scikit-survival's own, other names
    other = np.empty(len(tm), dtype=[("status", "?"), ("days", "<f8")])
    other["status"], other["days"] = ev, tm
    for target in (ref, other):
        np.testing.assert_allclose(FedCoxPH().fit(X, target, clients=site).coef_, est.coef_,
                                   rtol=1e-13)
    # an array is a DataFrame without names
    as_array = FedCoxPH().fit(X.to_numpy(), y, clients=site)
    np.testing.assert_allclose(as_array.coef_, est.coef_, rtol=1e-13)
    cph = lifelines_fit(X, ev, tm, alpha=0.1)
    for level, name in ((0.05, "95%"), (0.1, "90%")):
        table = est.summary(alpha=level)
        assert isinstance(table, pd.DataFrame)
        assert list(table.index) == list(X.columns)
        columns = ["coef", "exp(coef)", "se(coef)", f"coef lower {name}", f"coef upper {name}",
                   f"exp(coef) lower {name}", f"exp(coef) upper {name}", "z", "p"]
        assert set(columns) <= set(table.columns)
        ref_table = (lifelines_fit(X, ev, tm) if level == 0.05 else cph).summary
        for col in columns:
            np.testing.assert_allclose(table[col].to_numpy(), ref_table[col].to_numpy(),
                                       rtol=1e-5, err_msg=col)
    np.testing.assert_allclose(np.asarray(est.conf_int(alpha=0.1)),
                               cph.confidence_intervals_.to_numpy(), rtol=1e-6)


# --- bad input -------------------------------------------------------------------------
def _bad(case):
    X, ev, tm = data("rossi")
    site = sites("rossi", "quantile")
    ev, tm = ev.copy(), tm.copy()
    params = {}
    if case == "negative-time":
        tm[3] = -1.0
        y = lambda: survival_target(ev, tm)  # noqa: E731
    elif case == "nan-time":
        tm[3] = np.nan
        y = lambda: survival_target(ev, tm)  # noqa: E731
    elif case == "event-2":
        def y():
            raw = np.empty(len(tm), dtype=[("event", "<i8"), ("time", "<f8")])
            raw["event"], raw["time"] = ev.astype(int), tm
            raw["event"][3] = 2
            return raw
    elif case == "event-2-survival-target":
        def y():
            e = ev.astype(int)
            e[3] = 2
            return survival_target(e, tm)
    elif case == "y-1d-times":
        y = lambda: tm  # noqa: E731
    elif case == "y-3-fields":
        def y():
            raw = np.empty(len(tm), dtype=[("event", "?"), ("time", "<f8"), ("x", "<f8")])
            raw["event"], raw["time"] = ev, tm
            return raw
    elif case == "site-without-events":
        ev[site == 2] = False
        params = {"strata": "site"}
        y = lambda: survival_target(ev, tm)  # noqa: E731
    elif case == "stratum-with-one-row":
        X = X.copy()
        X.loc[3, "wexp"] = 7.0  # a level of the strata column held by one row
        params = {"strata": "wexp"}
        y = lambda: survival_target(ev, tm)  # noqa: E731
    elif case == "negative-alpha":
        params = {"alpha": -0.1}
        y = lambda: survival_target(ev, tm)  # noqa: E731
    elif case == "unknown-ties":
        params = {"ties": "exact"}
        y = lambda: survival_target(ev, tm)  # noqa: E731
    return X, y, site, params


BAD = {
    "negative-time": (r"(?i)(negativ|non-?negative|>= ?0|positive).*time"
                      r"|time.*(negativ|non-?negative|>= ?0|positive)"),
    "nan-time": r"(?i)nan|finite|missing",
    "event-2": r"(?i)event",
    "event-2-survival-target": r"(?i)event",
    "y-1d-times": r"(?i)structured|survival|event",
    "y-3-fields": r"(?i)structured|survival|field|event",
    "site-without-events": r"(?i)no events?|without (any )?events?|zero events|0 events",
    "stratum-with-one-row": r"(?i)one row|single row|1 row|only one|one sample|at least (2|two)",
    "negative-alpha": r"alpha",
    "unknown-ties": r"ties",
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_names_the_problem(case):
    X, y, site, params = _bad(case)
    with pytest.raises(ValueError, match=BAD[case]):
        FedCoxPH(**params).fit(X, y(), clients=site)
