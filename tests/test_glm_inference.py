"""Inference of the federated GLMs equals statsmodels' GLM on the pooled rows.

Standard errors, z, p-values, intervals, deviance, null deviance,
log-likelihood, AIC, BIC and scale to a relative 1e-6, for the binomial,
Poisson, Gamma, Gaussian and Tweedie families, with offsets and weights, for
``cov_type`` nonrobust, HC0, HC1 and cluster (the sites as the clusters,
statsmodels' ``cov_kwds={"groups": site}``), on data sets statsmodels ships,
split into sites.

Weights: skfed's ``sample_weight`` are frequency weights (a row of weight k is k
equal rows, scikit-learn's sample-weight equivalence), so the references are
statsmodels' ``freq_weights`` (nonrobust, HC0) and the repeated rows themselves
(every cov_type: statsmodels' cluster correction counts the rows of the
weighted data, ``xu.shape[0]``, not the weight sum). ``var_weights`` would be
analytic weights (the variance divided by ``w``): the same estimates, but ``n``
is the row count, and the Gamma log-likelihood's ``gammaln(w / scale)`` would
not be a sum of per-site pieces.

HC1: statsmodels 0.15's GLM returns HC0 for ``cov_type="HC1"`` (GLM results
define no ``cov_HC1``; ``get_robustcov_results`` falls back to
``cov_white_simple(use_correction=False)``). skfed's HC1 is the textbook HC0 *
n / (n - p) (statsmodels' own definition for OLS), so its reference here is
statsmodels' HC0 times that factor.
"""

import warnings

import numpy as np
import pytest

from skfed import (FederatedDataset, FedGammaRegressor, FedLinearRegression,
                   FedLogisticRegression, FedPoissonRegressor, FedTweedieRegressor,
                   likelihood_ratio_test)
from skfed.linear_model import InferenceError
from skfed.privacy import DifferentialPrivacy, SecureAggregation
from skfed.solvers import FedAvg

sm = pytest.importorskip("statsmodels.api")
COV_TYPES = ["nonrobust", "HC0", "HC1", "cluster"]
RTOL = 1e-6


# --- data sets statsmodels ships, split into sites -------------------------------
def _spector():
    d = sm.datasets.spector.load_pandas()
    return d.exog.to_numpy(float), d.endog.to_numpy(float), None


def _cpunish():
    d = sm.datasets.cpunish.load_pandas()
    X = d.exog.copy()
    X["VC100k96"] = np.log(X["VC100k96"])  # as statsmodels' example
    return X.to_numpy(float), d.endog.to_numpy(float), None


def _scotland():
    d = sm.datasets.scotland.load_pandas()
    return d.exog.to_numpy(float), d.endog.to_numpy(float), None


def _fair():
    d = sm.datasets.fair.load_pandas()
    X = d.exog[["rate_marriage", "age", "children", "religious", "educ"]].to_numpy(float)
    return X, d.endog.to_numpy(float), np.log(d.exog["yrs_married"].to_numpy(float))


def _fair_binary():
    X, y, _ = _fair()
    return X, (y > 0).astype(float), None


# name -> (data, skfed estimator, statsmodels family)
CASES = {
    "binomial-spector": (_spector, lambda: FedLogisticRegression(C=np.inf),
                         lambda: sm.families.Binomial()),
    "binomial-fair": (_fair_binary, lambda: FedLogisticRegression(C=np.inf),
                      lambda: sm.families.Binomial()),
    "poisson-cpunish": (_cpunish, lambda: FedPoissonRegressor(alpha=0),
                        lambda: sm.families.Poisson()),
    "poisson-fair-offset": (_fair, lambda: FedPoissonRegressor(alpha=0),
                            lambda: sm.families.Poisson()),
    "gamma-scotland": (_scotland, lambda: FedGammaRegressor(alpha=0),
                       lambda: sm.families.Gamma(sm.families.links.Log())),
    "gaussian-scotland": (_scotland, lambda: FedLinearRegression(),
                          lambda: sm.families.Gaussian()),
    "tweedie-fair-offset": (_fair, lambda: FedTweedieRegressor(power=1.5, alpha=0),
                            lambda: sm.families.Tweedie(var_power=1.5,
                                                        link=sm.families.links.Log())),
}


def _sites(n, k=4):
    # contiguous blocks: statsmodels' rows are sorted by some variable in several
    # of these data sets, so the sites differ (a heterogeneous split)
    return np.repeat(np.arange(k), -(-n // k))[:n]


def _reference(family, X, y, offset, cov_type, site, freq_weights=None):
    kind = "HC0" if cov_type == "HC1" else cov_type
    kwds = {"groups": site} if cov_type == "cluster" else None
    ref = sm.GLM(y, sm.add_constant(X), family=family, offset=offset,
                 freq_weights=freq_weights).fit(cov_type=kind, cov_kwds=kwds, tol=1e-13)
    bse, cov = ref.bse, ref.cov_params()
    if cov_type == "HC1":
        n, p = ref.model.wnobs, X.shape[1] + 1
        bse, cov = bse * np.sqrt(n / (n - p)), cov * n / (n - p)
    return ref, np.asarray(bse), np.asarray(cov)


def _assert_inference_equal(est, ref, bse, cov):
    close = dict(rtol=RTOL, atol=0)
    np.testing.assert_allclose(est.params_, ref.params, rtol=RTOL, atol=1e-8 * np.max(bse))
    np.testing.assert_allclose(est.bse_, bse, **close)
    np.testing.assert_allclose(est.cov_params_, cov, rtol=RTOL, atol=1e-10 * np.max(np.abs(cov)))
    np.testing.assert_allclose(est.tvalues_, np.asarray(ref.params) / bse, rtol=RTOL,
                               atol=1e-6)
    z = np.asarray(ref.params) / bse
    from scipy import stats
    # p-values on the log scale: a relative error d in z moves p by about z^2 d
    # relatively (p = 1e-113 at z = 22.6 turns 5e-9 into 2.6e-6), and log p by 2 d
    # (beyond z = 38 both underflow to 0, as statsmodels reports them)
    p_ref = 2 * stats.norm.sf(np.abs(z))
    np.testing.assert_array_equal(est.pvalues_[p_ref == 0], 0.0)
    np.testing.assert_allclose(np.log(est.pvalues_[p_ref > 0]), np.log(p_ref[p_ref > 0]),
                               rtol=RTOL)
    q = stats.norm.ppf(0.975)
    ci = np.column_stack([ref.params - q * bse, ref.params + q * bse])
    np.testing.assert_allclose(est.conf_int(), ci, rtol=RTOL, atol=1e-8 * np.max(bse))
    assert est.deviance_ == pytest.approx(ref.deviance, rel=RTOL)
    assert est.null_deviance_ == pytest.approx(ref.null_deviance, rel=RTOL)
    assert est.pearson_chi2_ == pytest.approx(ref.pearson_chi2, rel=RTOL)
    assert est.scale_ == pytest.approx(ref.scale, rel=RTOL)
    assert est.loglike_ == pytest.approx(ref.llf, rel=RTOL)
    assert est.aic_ == pytest.approx(ref.aic, rel=RTOL)
    assert est.bic_ == pytest.approx(ref.bic, rel=RTOL)


@pytest.mark.parametrize("cov_type", COV_TYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_inference_equals_statsmodels(case, cov_type):
    data, make, family = CASES[case]
    X, y, offset = data()
    site = _sites(len(y))
    est = make().set_params(cov_type=cov_type).fit(X, y, clients=site,
                                                   **({} if offset is None else
                                                      {"offset": offset}))
    ref, bse, cov = _reference(family(), X, y, offset, cov_type, site)
    _assert_inference_equal(est, ref, bse, cov)
    assert est.param_names_ == ["intercept"] + [f"x{k}" for k in range(X.shape[1])]
    # one pass at the optimum and a few scalar passes for the null model, counted
    assert est.history_.inference_rounds >= 2 and est.history_.inference_bytes > 0


@pytest.mark.parametrize("cov_type", COV_TYPES)
@pytest.mark.parametrize("case", ["gamma-scotland", "poisson-cpunish", "binomial-spector"])
def test_integer_sample_weights_are_frequency_weights(case, cov_type):
    data, make, family = CASES[case]
    X, y, _ = data()
    site = _sites(len(y))
    w = np.random.default_rng(0).integers(1, 4, len(y)).astype(float)
    est = make().set_params(cov_type=cov_type).fit(X, y, clients=site, sample_weight=w)
    rows = np.repeat(np.arange(len(y)), w.astype(int))
    ref, bse, cov = _reference(family(), X[rows], y[rows], None, cov_type, site[rows])
    _assert_inference_equal(est, ref, bse, cov)
    if cov_type in ("nonrobust", "HC0"):  # statsmodels' freq_weights: the same numbers
        ref, bse, cov = _reference(family(), X, y, None, cov_type, site, freq_weights=w)
        _assert_inference_equal(est, ref, bse, cov)


def test_rate_ratios_with_exposure_offsets():
    X, y, offset = _fair()
    site = _sites(len(y))
    est = FedPoissonRegressor(alpha=0, cov_type="cluster").fit(X, y, clients=site,
                                                                offset=offset)
    ref = sm.GLM(y, sm.add_constant(X), family=sm.families.Poisson(), offset=offset).fit(
        cov_type="cluster", cov_kwds={"groups": site})
    table = est.summary(exponentiate=True)
    np.testing.assert_allclose(table["exp(coef)"], np.exp(ref.params), rtol=RTOL)
    np.testing.assert_allclose(table[["[0.025", "0.975]"]], np.exp(ref.conf_int()), rtol=RTOL)
    plain = est.summary(alpha=0.1)
    assert list(plain.columns) == ["coef", "std err", "z", "P>|z|", "[0.05", "0.95]"]
    np.testing.assert_allclose(plain[["[0.05", "0.95]"]], ref.conf_int(alpha=0.1), rtol=RTOL)
    with pytest.raises(ValueError, match="log and logit links"):
        FedLinearRegression().fit(X, y).summary(exponentiate=True)


def test_likelihood_ratio_test_equals_twice_the_loglikelihood_difference():
    X, y, offset = _fair()
    site = _sites(len(y))
    full = FedPoissonRegressor(alpha=0).fit(X, y, clients=site, offset=offset)
    restricted = FedPoissonRegressor(alpha=0).fit(X[:, :3], y, clients=site, offset=offset)
    f = sm.GLM(y, sm.add_constant(X), family=sm.families.Poisson(), offset=offset).fit()
    r = sm.GLM(y, sm.add_constant(X[:, :3]), family=sm.families.Poisson(), offset=offset).fit()
    result = likelihood_ratio_test(restricted, full)
    assert result["statistic"] == pytest.approx(2 * (f.llf - r.llf), rel=RTOL)
    assert result["df"] == 2
    from scipy import stats
    assert result["pvalue"] == pytest.approx(stats.chi2.sf(2 * (f.llf - r.llf), 2), rel=1e-5)
    with pytest.raises(ValueError, match="fewer parameters"):
        likelihood_ratio_test(full, restricted)


def test_secure_aggregation_gives_the_same_inference():
    X, y, offset = _fair()
    site = _sites(len(y))
    plain = FedPoissonRegressor(alpha=0, cov_type="cluster").fit(X, y, clients=site,
                                                                 offset=offset)
    masked = FedPoissonRegressor(alpha=0, cov_type="cluster",
                                 privacy=SecureAggregation()).fit(X, y, clients=site,
                                                                  offset=offset)
    np.testing.assert_allclose(masked.bse_, plain.bse_, rtol=1e-8)
    assert masked.deviance_ == pytest.approx(plain.deviance_, rel=1e-9)
    assert masked.null_deviance_ == pytest.approx(plain.null_deviance_, rel=1e-9)
    assert masked.loglike_ == pytest.approx(plain.loglike_, rel=1e-9)
    assert masked.history_.privacy["secure_aggregation"]
    assert masked.history_.inference_bytes > 0


# --- refusals ----------------------------------------------------------------------
@pytest.mark.parametrize("est, match", [
    (FedPoissonRegressor(), r"alpha=1 penalizes.*refit with alpha=0"),
    (FedPoissonRegressor(alpha=0.1, l1_ratio=1.0), r"alpha=0.1 penalizes"),
    (FedLogisticRegression(C=1.0), r"C=1 penalizes.*C=np.inf"),
])
def test_inference_is_refused_on_a_penalized_fit(est, match):
    X, y, _ = _cpunish() if not isinstance(est, FedLogisticRegression) else _spector()
    est.fit(X, y)
    assert not hasattr(est, "bse_")
    for read in (lambda: est.bse_, lambda: est.summary(), lambda: est.deviance_):
        with pytest.raises(InferenceError, match=match):
            read()
    assert est.history_.inference_bytes == 0


def test_collinear_design_is_refused_naming_the_columns():
    X, y, _ = _scotland()
    X = np.column_stack([X, X[:, 0] - 2 * X[:, 2]])
    est = FedGammaRegressor(alpha=0).fit(X, y, clients=_sites(len(y)))
    with pytest.raises(InferenceError, match=r"singular.*x0, x2, x7.*collinear.*Drop one"):
        est.bse_
    assert est.deviance_ > 0  # the sums that do not need the inverse are there


def test_differential_privacy_refuses_inference():
    X, y, _ = _scotland()
    X = (X - X.mean(0)) / X.std(0)
    est = FedLinearRegression(privacy=DifferentialPrivacy(5.0), solver=FedAvg(client_lr=0.1),
                              client_weighting="uniform", max_rounds=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # five rounds: not converged, by design
        est.fit(X, y, clients=_sites(len(y)))
    with pytest.raises(InferenceError, match="differential privacy.*without noise"):
        est.bse_
    assert est.history_.inference_bytes == 0


def test_multinomial_and_single_site_cluster_are_refused():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the check is the refusal, not convergence
        est = FedLogisticRegression(C=np.inf, max_rounds=20).fit(X[:, :2], y)
    with pytest.raises(InferenceError, match="binary logistic regression.*3 classes"):
        est.pvalues_
    X, y, _ = _cpunish()
    est = FedPoissonRegressor(alpha=0, cov_type="cluster").fit(X, y)
    with pytest.raises(InferenceError, match="sites as the clusters.*one site"):
        est.bse_


# --- where the sites' rows are ------------------------------------------------------
def test_inference_on_dask_resident_sites():
    distributed = pytest.importorskip("distributed")
    X, y, offset = _fair()
    site = _sites(len(y))
    local = FedPoissonRegressor(alpha=0, cov_type="HC0").fit(X, y, clients=site,
                                                             offset=offset)
    # two in-process workers named as sites are (a worker's name is its site's)
    workers = {name: {"cls": distributed.Worker, "options": {"name": name, "nthreads": 1}}
               for name in ("w0", "w1")}
    scheduler = {"cls": distributed.Scheduler,
                 "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # port choice chatter
        with distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster, \
                distributed.Client(cluster) as client:
            client.wait_for_workers(2)
            data = FederatedDataset.from_arrays(X, y, site, offset=offset).scatter(
                client, placement={s: f"w{s % 2}" for s in range(4)})
            resident = FedPoissonRegressor(alpha=0, cov_type="HC0").fit(data)
    np.testing.assert_allclose(resident.bse_, local.bse_, rtol=1e-10)
    assert resident.deviance_ == pytest.approx(local.deviance_, rel=1e-12)
    assert resident.history_.inference_bytes == local.history_.inference_bytes
