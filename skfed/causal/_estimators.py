"""Federated inverse probability weighting and AIPW, equal to the pooled M-estimation.

Both estimators are thin over one federation session: every row-touching number
is a pooled sum of a declared site operation (:mod:`skfed.causal._site`), solved
by Newton and wrapped in the sandwich of the stacked estimating equations
(:mod:`skfed.causal._solve`).
"""

import warnings
from numbers import Integral, Real

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.base import BaseEstimator, clone
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ..base import restore_on_failure
from ..federation.session import FederationSession
from ..stats._results import FixedResults
from ._balance import balance_tables
from ._equations import ESTIMANDS, FAMILIES, parameter_names
from ._percentiles import score_quantiles
from ._site import site_ee_sums
from ._solve import as_dataset, fixed_score_covariance, newton, sandwich


def _bounds(value, name):
    if value is None:
        return None
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(b, Real) and not isinstance(b, bool) for b in value)
            and 0 <= value[0] < value[1] <= 1):
        raise ValueError(f"{name} must be two increasing propensity-score bounds in [0, 1] "
                         f"(lo, hi); got {value!r}.")
    return [float(value[0]), float(value[1])]


def _check_privacy(privacy, dataset):
    """``None`` (plain sums) or a secure aggregation (masked sums); differential privacy
    refused, saying why."""
    if privacy is None:
        return None
    from ..privacy import DifferentialPrivacy, SecureAggregation

    if isinstance(privacy, DifferentialPrivacy) or not isinstance(privacy, SecureAggregation):
        raise ValueError(
            "a causal analysis takes privacy=None or SecureAggregation(); got "
            f"{type(privacy).__name__}: differential privacy is refused here because the "
            "sandwich's bread and meat and the weighted means are exact sums, and noise "
            "added to them would give neither the pooled estimate nor a valid interval.")
    if len(dataset) < 2:
        raise ValueError("secure aggregation needs at least two sites: with one, the pooled "
                         "sums are that site's own.")
    return privacy


class _FedWeighting(BaseEstimator):
    """The shared fit of :class:`FedIPW` and :class:`FedAIPW`."""

    _method = "ipw"

    @restore_on_failure
    def fit(self, X, treatment=None, y=None, *, clients=None, outcome=None, covariates=None):
        """Estimate the effect from the sites' pooled sums.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features), or FederatedDataset
            The covariates of the propensity model (and of the outcome models), or a
            federated dataset holding the treatment, covariates and outcome.
        treatment : array-like of shape (n_samples,) or str
            The treatment, coded 0/1; with a FederatedDataset, its column's name.
        y : array-like of shape (n_samples,), default=None
            The outcome (not with a FederatedDataset).
        clients : array-like of shape (n_samples,), default=None
            The site of each row; ``None``: one site.
        outcome : str, default=None
            With a FederatedDataset: the outcome's column (``None``: its target).
        covariates : list of str, default=None
            With a FederatedDataset or a DataFrame: the covariates' columns
            (``None``: every column but the treatment and the outcome).

        Returns
        -------
        self
        """
        self._validate_params()
        dataset, a_name, y_name, names = as_dataset(X, treatment, y, clients, outcome,
                                                    covariates)
        spec = self._spec(a_name, y_name, names)
        missing = [c for c in spec.get("outcome_covariates", ()) if c not in dataset.columns]
        if missing:
            raise ValueError(f"outcome_covariates: no column {missing[0]!r} in the data "
                             f"(columns: {list(dataset.columns)[:20]}).")
        privacy = _check_privacy(self.privacy, dataset)
        if privacy is not None and self.truncate_by == "percentile" and \
                self.truncate is not None:
            raise ValueError("percentile truncation is refused under secure aggregation: "
                             "its bisection asks each site for single rows' scores, which "
                             "no masked sum can carry; truncate at score bounds "
                             "(truncate_by='score') instead.")
        model = self._propensity_model(dataset, a_name, names)
        if privacy is None:
            self._run(FederationSession.for_dataset(dataset), spec, names, model)
        else:
            from ..privacy.masked_sums import masked_session

            with masked_session(dataset, privacy) as session:
                self._run(session, spec, names, model)
        self.n_clients_ = len(dataset)
        return self

    def _spec(self, a_name, y_name, names):
        return {"treatment": a_name, "outcome": y_name, "covariates": list(names),
                "estimand": self._estimand(), "stabilized": self._stabilized(),
                "truncate": self._score_bounds(),
                "trim": _bounds(getattr(self, "trim", None), "trim"),
                "method": self._method, "family": getattr(self, "outcome_family",
                                                          "gaussian"),
                "scores": "logistic" if getattr(self, "propensity", None) is None else "model",
                **self._outcome_covariates()}

    def _outcome_covariates(self):
        return {}

    def _score_bounds(self):
        """``truncate`` as score bounds; with ``truncate_by="percentile"`` the percentiles
        are checked here and the bounds found after the propensity model's fit."""
        if self.truncate_by == "score":
            return _bounds(self.truncate, "truncate")
        if getattr(self, "propensity", None) is not None:
            raise ValueError("truncate_by='percentile' takes the stacked logistic "
                             "propensity model's scores (propensity=None).")
        value = self.truncate
        if value is not None and not (len(value) == 2 and all(
                isinstance(v, Real) and not isinstance(v, bool) for v in value)
                and 0 <= value[0] < value[1] <= 100):
            raise ValueError("with truncate_by='percentile', truncate must be two increasing "
                             f"percentiles in [0, 100] (lo, hi); got {value!r}.")
        return None  # the bounds come from the fitted scores (_solve)

    def _solve(self, session, spec, q, model):
        """Newton on the stack; with percentile truncation, first without truncation (the
        propensity model does not depend on it), then at the pooled scores' exact
        percentiles, held fixed as bounds."""
        self.truncation_bounds_ = spec["truncate"]
        if self.truncate_by == "percentile" and self.truncate is not None:
            theta, _, _ = newton(session, spec, q, tol=self.tol, max_iter=self.max_iter)
            n = int(session.sum(site_ee_sums, spec, theta, None, phase="analysis")["n"])
            bounds = score_quantiles(session, spec, theta, n, self.truncate)
            if not bounds[0] < bounds[1]:
                raise ValueError(f"the scores' {self.truncate[0]:g}th and "
                                 f"{self.truncate[1]:g}th percentiles are equal: nothing "
                                 "to truncate between.")
            spec["truncate"] = self.truncation_bounds_ = [float(b) for b in bounds]
        return newton(session, spec, q, tol=self.tol, max_iter=self.max_iter, model=model)

    def _propensity_model(self, dataset, a_name, names):
        """A given classifier fitted on the sites' rows (treatment as the target)."""
        propensity = getattr(self, "propensity", None)
        self.propensity_model_ = None
        if propensity is None:
            return None
        from ._site import treatment_as_target

        if not hasattr(propensity, "predict_proba"):
            raise ValueError(f"propensity must be a classifier with predict_proba; got "
                             f"{type(propensity).__name__}.")
        if dataset._backend.where == "at site services":
            raise ValueError(
                "a given propensity classifier is evaluated where the rows are, and a site "
                "service receives an estimator's parameters, never a fitted model (its "
                "trees or coefficients would run as the analyst's code at the site): at "
                "site services use the default propensity model (propensity=None), the "
                "logistic regression in the stacked estimating equations.")
        model = clone(propensity).fit(dataset.apply(treatment_as_target, a_name, names))
        self.propensity_model_ = model
        return model

    def _run(self, session, spec, names, model=None):
        q = len(names) + 1
        theta, sums, self.n_iter_ = self._solve(session, spec, q, model)
        cov, D, M = sandwich(sums, theta.size)
        self.variance_note_ = None
        if model is not None:  # no estimating equations of the score: no sandwich
            cov = np.full_like(cov, np.nan)
            self.variance_note_ = no_sandwich_note(model)
            warnings.warn(self.variance_note_, UserWarning, stacklevel=4)
        self.params_, self.cov_params_ = theta, cov
        self.param_names_ = parameter_names(spec, names)
        self.feature_names_in_ = np.asarray(names, dtype=object)
        self.n_features_in_ = len(names)
        self.n_samples_, self.n_treated_ = int(sums["n"]), int(sums["n1"])
        self.potential_outcomes_ = {1: float(theta[0]), 0: float(theta[1])}
        self._record_effects(theta[:2], cov[:2, :2])
        self.cov_fixed_score_ = (fixed_score_covariance(D, M) if spec["method"] == "ipw"
                                 else None)
        self.spec_ = spec
        if self.balance:
            self.balance_, self.effective_sample_size_, self.overlap_ = balance_tables(
                session, spec, theta, names, n_bins=self.n_bins,
                extreme_weight=self.extreme_weight, min_level_count=self.min_level_count,
                model=model)
        self.ledger_ = session.ledger.as_dict()

    def _record_effects(self, mu, cov):
        self.effects_ = effect_scales(mu, cov)
        self.effect_ = float(mu[0] - mu[1])
        self.std_err_ = float(self.effects_.loc["difference", "std_err"])

    # -- results --------------------------------------------------------------
    def conf_int(self, alpha=0.05, *, fixed_score=False):
        """The effect's (difference's) Wald interval.

        Parameters
        ----------
        alpha : float, default=0.05
            One minus the confidence level.
        fixed_score : bool, default=False
            The robust interval that holds the propensity model fixed (the
            weighted regression's sandwich, as a GEE with the weights given);
            ``False``: the M-estimation sandwich of the whole stack, which
            accounts for the score's estimation. IPW only.

        Returns
        -------
        interval : ndarray of shape (2,)
        """
        check_is_fitted(self, "effect_")
        if not fixed_score and self.variance_note_ is not None:
            raise ValueError(self.variance_note_)
        z = stats.norm.isf(alpha / 2)
        se = self.std_err_fixed_score_ if fixed_score else self.std_err_
        return np.array([self.effect_ - z * se, self.effect_ + z * se])

    @property
    def std_err_fixed_score_(self):
        """The effect's standard error with the propensity model held fixed (IPW)."""
        check_is_fitted(self, "effect_")
        if self.cov_fixed_score_ is None:
            raise AttributeError("the fixed-score variance is that of weighted means; "
                                 "FedAIPW reports the M-estimation sandwich only.")
        c = np.array([1.0, -1.0])
        return float(np.sqrt(c @ self.cov_fixed_score_ @ c))

    @property
    def results_(self):
        """The table of the effect and the potential-outcome means (a results object
        of :mod:`skfed.stats`: ``summary()``, ``conf_int()``, ``wald_test``)."""
        check_is_fitted(self, "effect_")
        c = np.array([[1.0, -1.0], [1.0, 0.0], [0.0, 1.0]])
        cov = c @ self.cov_params_[:2, :2] @ c.T
        label = self.spec_["estimand"]
        params = [self.effect_, *self.params_[:2]]
        return FixedResults(params, cov, [f"{label} (difference)", "E[Y(1)]", "E[Y(0)]"],
                            title=f"{type(self).__name__}: {label}",
                            info={"Sites": str(self.n_clients_), "Rows": str(self.n_samples_),
                                  "Treated": str(self.n_treated_),
                                  "Variance": "M-estimation sandwich (stacked equations)"})

    def summary(self, alpha=0.05):
        """The results table (:attr:`results_`) as text and HTML."""
        return self.results_.summary(alpha=alpha)


def no_sandwich_note(model):
    """Why a fit with a given propensity classifier reports no M-estimation variance."""
    return (f"the given propensity model ({type(model).__name__}) is not in the stacked "
            "estimating equations, so the sandwich cannot account for its estimation (boosted "
            "trees have no such equations): std_err_ is NaN and "
            "conf_int() is refused. The point estimate is exact; conf_int(fixed_score=True) "
            "treats the weights as given (it ignores the model's estimation).")


def effect_scales(mu, cov):
    """The effect on the difference, ratio and odds-ratio scales (ratios by the delta
    method on the log scale; a ratio's row where its means are in its range)."""
    mu1, mu0 = float(mu[0]), float(mu[1])
    rows = {"difference": (mu1 - mu0, np.array([1.0, -1.0]), False)}
    if mu1 > 0 and mu0 > 0:
        rows["ratio"] = (np.log(mu1 / mu0), np.array([1 / mu1, -1 / mu0]), True)
    if 0 < mu1 < 1 and 0 < mu0 < 1:
        rows["odds ratio"] = (np.log(mu1 / (1 - mu1)) - np.log(mu0 / (1 - mu0)),
                              np.array([1 / (mu1 * (1 - mu1)), -1 / (mu0 * (1 - mu0))]), True)
    z = stats.norm.isf(0.025)
    out = {}
    for name, (value, grad, log) in rows.items():
        se = float(np.sqrt(grad @ cov @ grad))
        lo, hi = value - z * se, value + z * se
        back = np.exp if log else (lambda v: v)
        out[name] = {"estimate": float(back(value)), "std_err": se, "log_scale": log,
                     "lower 95%": float(back(lo)), "upper 95%": float(back(hi))}
    return pd.DataFrame(out).T


_COMMON = {
    "truncate": [tuple, list, None],
    "truncate_by": [StrOptions({"score", "percentile"})],
    "tol": [Interval(Real, 0, None, closed="neither")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "balance": ["boolean"],
    "n_bins": [Interval(Integral, 2, 200, closed="both")],
    "extreme_weight": [Interval(Real, 0, None, closed="neither")],
    "min_level_count": [Interval(Integral, 1, None, closed="left")],
    "privacy": "no_validation",
}


class FedIPW(_FedWeighting):
    """Inverse probability weighting over sites, equal to the pooled M-estimation.

    The propensity model is an unpenalized logistic regression of the
    treatment on the covariates (intercept included), fitted by Newton on
    pooled sums; each arm's potential-outcome mean is the Hajek (normalised)
    weighted mean of its outcomes; the variance is the sandwich of the stacked
    estimating equations (logistic score and weighted means), its bread and
    meat pooled sums of one declared site operation (``causal.ee_sums``): the
    scores never leave a site. The numbers equal ``delicatessen``'s
    ``ee_ipw(weight_type="hajek")`` (ATE) and its ``MEstimator`` on the stacked
    equations (the other estimands) on the pooled rows.

    Parameters
    ----------
    estimand : {"ATE", "ATT", "ATC", "ATO"}, default="ATE"
        The average effect in everyone, the treated, the controls, or the overlap
        population (overlap weights ``1 - e`` and ``e``).
    propensity : classifier, default=None
        The propensity model: ``None``, an unpenalized logistic regression in the
        stacked estimating equations (the sandwich accounts for it); or any skfed
        classifier with ``predict_proba`` (boosted trees), fitted on the sites' rows and
        evaluated at each site: the point estimate only (``std_err_`` is NaN,
        ``variance_note_`` says why); in this process and on Dask workers (a site
        service receives no fitted model: refused, saying so).
    stabilized : bool, default=False
        Multiply each arm's weights by its share of rows (ATE only; the point
        estimate and the variance are the same, the weights' scale is not).
    truncate : (float, float), default=None
        Clip the propensity score into ``[lo, hi]`` before weighting (delicatessen's
        ``truncate``): score bounds, or percentiles in [0, 100] of the pooled scores.
    truncate_by : {"score", "percentile"}, default="score"
        What ``truncate`` holds. Percentiles are the pooled scores' exact quantiles
        (numpy's linear interpolation), found by a federated bisection that a site
        serves only with ``allow_exact_quantiles`` (single rows' scores); the bounds
        are then held fixed in the sandwich (``truncation_bounds_``).
    trim : (float, float), default=None
        Give rows whose score is outside ``[lo, hi]`` no weight (the propensity model
        is fitted on every row).
    tol : float, default=1e-10
        Newton stops when its step is below ``tol`` (relative).
    max_iter : int, default=100
        The most Newton steps.
    balance : bool, default=True
        Compute the balance table, effective sample sizes and overlap counts.
    n_bins : int, default=20
        The overlap histogram's fixed bins of the score on [0, 1].
    extreme_weight : float, default=20.0
        Rows whose weight exceeds this are counted (a warning carries the count).
    min_level_count : int, default=5
        A site's count of 1 to ``min_level_count - 1`` rows is released as 0 and
        flagged (a site service raises it to its own).
    privacy : SecureAggregation or None, default=None
        Masked sums (the server learns the pooled sums only); differential privacy
        is refused.

    Attributes
    ----------
    effect_ : float
        The effect on the difference scale, ``E[Y(1)] - E[Y(0)]`` in the estimand's
        population.
    std_err_ : float
        Its M-estimation (sandwich) standard error.
    potential_outcomes_ : dict
        ``{1: E[Y(1)], 0: E[Y(0)]}``.
    effects_ : DataFrame
        The difference, ratio and odds-ratio scales (ratios where the means allow).
    params_, cov_params_, param_names_ : ndarray, ndarray, list
        The stacked parameters (means, propensity coefficients) and their sandwich.
    balance_ : DataFrame
        Standardised mean differences before and after weighting per covariate.
    effective_sample_size_ : dict
        Per arm, ``(sum w)^2 / sum w^2``.
    overlap_ : dict
        Per arm, the score's histogram counts on fixed bins (NaN where hidden),
        with ``edges`` and the count of extreme weights.
    n_iter_ : int
        Newton steps.
    propensity_model_ : classifier or None
        The fitted ``propensity`` classifier.
    variance_note_ : str or None
        Why there is no M-estimation variance (a given classifier), else ``None``.
    truncation_bounds_ : list of float or None
        The score bounds applied (the percentiles' values with ``truncate_by=
        "percentile"``).

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.causal import FedIPW
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2))
    >>> a = (rng.random(600) < 1 / (1 + np.exp(-X[:, 0]))).astype(float)
    >>> y = 2 * a + X[:, 0] + rng.normal(size=600)
    >>> est = FedIPW().fit(X, a, y, clients=np.arange(600) % 3)
    >>> round(est.effect_, 1)
    2.0
    """

    _parameter_constraints = {
        "estimand": [StrOptions(set(ESTIMANDS))],
        "propensity": [HasMethods(["fit", "predict_proba"]), None],
        "stabilized": ["boolean"],
        "trim": [tuple, list, None],
        **_COMMON,
    }

    def __init__(self, estimand="ATE", *, propensity=None, stabilized=False, truncate=None,
                 truncate_by="score", trim=None, tol=1e-10, max_iter=100, balance=True,
                 n_bins=20, extreme_weight=20.0, min_level_count=5, privacy=None):
        self.estimand = estimand
        self.propensity = propensity
        self.stabilized = stabilized
        self.truncate = truncate
        self.truncate_by = truncate_by
        self.trim = trim
        self.tol = tol
        self.max_iter = max_iter
        self.balance = balance
        self.n_bins = n_bins
        self.extreme_weight = extreme_weight
        self.min_level_count = min_level_count
        self.privacy = privacy

    def _estimand(self):
        return self.estimand

    def _stabilized(self):
        if self.stabilized and self.estimand != "ATE":
            raise ValueError(f"stabilized weights are for the ATE here; the {self.estimand}'s "
                             "weights are already on the scale of their target population.")
        return bool(self.stabilized)


class FedAIPW(_FedWeighting):
    """Augmented inverse probability weighting (doubly robust) over sites.

    A logistic propensity model and an outcome model in each arm (a GLM with the
    family's canonical link), the ATE's potential-outcome means
    ``mean(m_a + 1[A=a] (Y - m_a) / P(A=a | X))``, and the sandwich of the
    stacked estimating equations (propensity score, outcome models' scores,
    means), from pooled sums of ``causal.ee_sums``: equal to delicatessen's
    ``ee_aipw`` with a fully interacted outcome model (per-arm models) on the
    pooled rows.

    For the ATT the treated arm's mean is its outcomes' mean, and the controls'
    potential-outcome mean is the treated rows' mean of the controls' outcome model
    plus the controls' normalised weighted residual (weights ``e / (1 - e)``): doubly
    robust, consistent if either the propensity model or the controls' outcome model
    is right. The ATC likewise with the arms swapped (weights ``(1 - e) / e``). Their
    stacked equations (``skfed/causal/_equations.py``) are solved by delicatessen's
    ``MEstimator`` in the tests.

    Parameters
    ----------
    estimand : {"ATE", "ATT", "ATC"}, default="ATE"
        The average effect in everyone, the treated or the controls.
    outcome_family : {"gaussian", "binomial", "poisson"}, default="gaussian"
        The outcome models' family (identity, logit or log link).
    outcome_covariates : list of str, default=None
        The outcome models' own covariates (columns of the data; an intercept is
        added); ``None``: the propensity model's.
    truncate : (float, float), default=None
        Clip the propensity score into ``[lo, hi]``.
    truncate_by : {"score", "percentile"}, default="score"
        As :class:`FedIPW`.
    tol, max_iter, balance, n_bins, extreme_weight, min_level_count, privacy
        As :class:`FedIPW`.

    Attributes
    ----------
    effect_, std_err_, potential_outcomes_, effects_, params_, cov_params_, param_names_
        As :class:`FedIPW` (the parameters also hold the outcome models').
    balance_, effective_sample_size_, overlap_, n_iter_
        As :class:`FedIPW` (balance under the estimand's weights).

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.causal import FedAIPW
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2))
    >>> a = (rng.random(600) < 1 / (1 + np.exp(-X[:, 0]))).astype(float)
    >>> y = 2 * a + X[:, 0] + rng.normal(size=600)
    >>> est = FedAIPW().fit(X, a, y, clients=np.arange(600) % 3)
    >>> round(est.effect_, 2), round(est.std_err_, 2)  # the true effect is 2
    (2.13, 0.09)
    """

    _method = "aipw"
    _parameter_constraints = {"estimand": [StrOptions({"ATE", "ATT", "ATC"})],
                              "outcome_family": [StrOptions(set(FAMILIES))],
                              "outcome_covariates": [list, tuple, None], **_COMMON}

    def __init__(self, estimand="ATE", *, outcome_family="gaussian", outcome_covariates=None,
                 truncate=None, truncate_by="score", tol=1e-10, max_iter=100, balance=True,
                 n_bins=20, extreme_weight=20.0, min_level_count=5, privacy=None):
        self.estimand = estimand
        self.outcome_family = outcome_family
        self.outcome_covariates = outcome_covariates
        self.truncate = truncate
        self.truncate_by = truncate_by
        self.tol = tol
        self.max_iter = max_iter
        self.balance = balance
        self.n_bins = n_bins
        self.extreme_weight = extreme_weight
        self.min_level_count = min_level_count
        self.privacy = privacy

    def _estimand(self):
        return self.estimand

    def _stabilized(self):
        return False

    def _outcome_covariates(self):
        names = self.outcome_covariates
        if names is None:
            return {}
        if isinstance(names, str) or not names or not all(isinstance(c, str) for c in names):
            raise ValueError("outcome_covariates must be a non-empty list of column names; "
                             f"got {names!r}.")
        return {"outcome_covariates": [str(c) for c in names]}
