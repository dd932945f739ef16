"""The fit shared by the ordinal and multinomial models: levels from the sites, then
Newton's method on the pooled log-likelihood.

The outcome's levels come from the sites (each site's held levels, each held by at
least ``min_level_count`` of its rows at a site service), pooled and sorted (or in
the order ``levels=`` or an ordered pandas categorical gives). Each Newton round
broadcasts the parameters and the sites return the sums of their rows'
log-likelihood, gradient and Hessian (:mod:`skfed.discrete._site`): plain, or masked
under ``privacy=SecureAggregation()`` (the server decodes the pooled sums only,
exactly). The null model is fitted by the same rounds restricted to its parameters.
The standard errors come from the pooled observed information at the optimum, or
from a sandwich whose meat one more exchange sums (``cov_type="HC0"``, or the sites
as clusters).
"""

import warnings
from contextlib import nullcontext
from numbers import Integral, Real

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._messages import show
from ..base import restore_on_failure
from ..data import FederatedDataset, as_dataset
from ..data.site import site_summary
from ..federation.session import FederationSession, payload_nbytes
from ..linear_model._inference import _symmetric_inverse
from ..mixed._glmm import _ascent_direction
from ..privacy.dp_rounds import DifferentialPrivacy
from ..privacy.secure_rounds import SecureAggregation
from ..stats._levels import sorted_levels
from ..stats._hypothesis import warn_few_clusters
from ..stats._results import EstimatorWald
from ._site import plain, site_meat


#: the parameters both models take, in their docstrings' "Parameters" ("{reference}":
#: what the first level is besides the lowest)
SHARED_PARAMS_DOC = """levels : array-like, default=None
        The outcome's levels in order (the first the lowest{reference}), as the
        sites hold them: needed where the sites cannot say it (text read from
        their files); every level must be held by some site. ``None``: an
        ordered pandas categorical's order, else sorted.
    cov_type : {"nonrobust", "HC0", "cluster"}, default="nonrobust"
        The standard errors: the inverse of the pooled observed information;
        the sandwich of the rows' scores (statsmodels' ``HC0``); or with the sites
        as the clusters (statsmodels' ``cluster`` with its factor
        ``G/(G-1) (n-1)/(n-k)``; ``use_t=True`` gives Student's t with ``G - 1``
        degrees of freedom).
    tol : float, default=1e-16
        Stop when the Newton decrement (the predicted gain in log-likelihood)
        is at most ``tol``.
    max_rounds : int, default=100
        Newton rounds at the most (each one exchange with the sites).
    privacy : SecureAggregation or None, default=None
        ``SecureAggregation()``: every sum masked at the sites, the server
        decoding the pooled sums only (the same fit, exactly). Differential
        privacy is refused (the sums would leave without noise).
"""


#: the attributes both models set, after their own ("{exog}": what the design's columns
#: are)
SHARED_ATTRIBUTES_DOC = """llf_, aic_, bic_, nobs_, df_resid_ : float
    converged_ : bool
    n_iter_ : int
        Newton rounds.
    clients_, n_clients_, ledger_, n_features_in_, endog_name_
    exog_names_ : list of str
        The design's columns ({exog}).
    feature_names_in_ : ndarray of str
        X's column names, where they are strings.
"""


def with_shared_params(cls, reference="", exog=""):
    """``cls`` with its docstring's ``{shared}`` the shared parameters' text and
    ``{shared_attributes}`` the shared attributes'."""
    params = SHARED_PARAMS_DOC.replace("{reference}", reference).rstrip("\n")
    attributes = SHARED_ATTRIBUTES_DOC.replace("{exog}", exog).rstrip("\n")
    if cls.__doc__:  # None under python -OO
        cls.__doc__ = cls.__doc__.replace("{shared}", params.lstrip()).replace(
            "{shared_attributes}", attributes.lstrip())
    return cls


def pooled_levels(replies, declared=None):
    """The pooled levels of the sites' held levels (``replies``: one list per site):
    sorted, or in ``declared`` order (``levels=``, or an ordered categorical's); a
    declared level held by no site is an error."""
    held = sorted_levels(plain(v) for levels in replies for v in levels)
    if declared is None:
        return held
    absent = [v for v in declared if v not in held]
    if absent:
        raise ValueError(f"the outcome's level(s) {show(absent)} are held by no site: a "
                         "level no row has cannot be estimated; drop it from the "
                         "categories (remove_unused_categories).")
    unknown = [v for v in held if v not in declared]
    if unknown:
        raise ValueError(f"the outcome has level(s) {show(unknown)} that its declared levels "
                         f"{show(list(declared))} do not list.")
    if len(set(declared)) != len(declared):
        raise ValueError(f"the declared levels {show(list(declared))} repeat a level.")
    return list(declared)


def _declared_order(y):
    """An ordered pandas categorical's categories (the analyst's own order), else None."""
    dtype = getattr(y, "dtype", None)
    if isinstance(dtype, pd.CategoricalDtype):
        return [plain(v) for v in dtype.categories]
    return None


def newton(evaluate, start, feasible, tol, max_rounds, free=None):
    """Newton's method with step halving on a concave log-likelihood; one round (one
    exchange with the sites) per evaluation. ``feasible(z)`` keeps a trial inside the
    parameters' domain without a round; ``free`` (a mask) the coordinates that move (the
    others stay at ``start``: a restricted model)."""
    z, current = np.asarray(start, dtype=float), evaluate(start)
    free = np.ones(z.size, dtype=bool) if free is None else np.asarray(free, dtype=bool)
    rounds, decrement, reason = 1, np.inf, "max_rounds reached"
    while rounds < max_rounds:
        grad = current["grad"][free]
        step = np.zeros_like(z)
        step[free] = _ascent_direction(current["hess"][np.ix_(free, free)], grad)
        decrement = 0.5 * float(grad @ step[free])
        if decrement <= tol:
            break
        accepted = False
        for _ in range(60):
            if rounds >= max_rounds:
                break
            trial = z + step
            if not feasible(trial):
                step = 0.5 * step
                continue
            new = evaluate(trial)
            rounds += 1
            # Armijo's rule, with room for the sums' rounding near the optimum
            if np.isfinite(new["loglike"]) and new["loglike"] >= (
                    current["loglike"] + 1e-4 * decrement - 1e-12 * abs(current["loglike"])):
                accepted = True
                break
            step = 0.5 * step
        if not accepted:
            reason = ("max_rounds reached" if rounds >= max_rounds else
                      "no step along Newton's direction increased the log-likelihood")
            break
        z, current = trial, new
    return {"z": z, "terms": current, "rounds": rounds, "decrement": decrement,
            "converged": decrement <= tol, "reason": reason, "free": free}


class DiscreteModel(EstimatorWald, BaseEstimator):
    """The fit and the results shared by :class:`FedOrderedModel` and
    :class:`FedMNLogit` (not used directly)."""

    _parameter_constraints = {
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_rounds": [Interval(Integral, 1, None, closed="left")],
        "privacy": [SecureAggregation, DifferentialPrivacy, None],
        "levels": ["array-like", None],
        "cov_type": [StrOptions({"nonrobust", "HC0", "cluster"})],
    }
    __metadata_request__fit = {"clients": True}
    #: the fewest outcome levels the model takes
    _min_levels = 2

    @restore_on_failure
    def fit(self, X, y=None, *, clients=None):
        """Fit the model on the pooled rows of the sites, in Newton rounds.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features), or FederatedDataset
            The covariates (a FederatedDataset carries the outcome as its target).
        y : array-like of shape (n_samples,), default=None
            The outcome: any labels (an ordered pandas categorical's categories give
            the levels' order; else they are sorted).
        clients : array-like of shape (n_samples,), default=None
            The site of each row; ``None``: one site.

        Returns
        -------
        self
        """
        self._validate_params()
        self._check_privacy()
        if y is not None and not isinstance(X, FederatedDataset):
            values = pd.Series(np.asarray(y, dtype=object)) if not isinstance(
                y, pd.Series) else y
            if values.isna().any():
                raise ValueError(f"y has {int(values.isna().sum())} missing value(s) (NaN); "
                                 "drop those rows first.")
        if not isinstance(X, FederatedDataset):
            X = _validated(self, X)
        dataset = as_dataset(X, y, clients)
        columns = dataset.columns
        names = (list(map(str, columns)) if columns is not None
                 else [f"x{j + 1}" for j in range(dataset.n_features)])
        session = FederationSession.for_dataset(dataset)
        replies = session.per_site(site_summary, "classification", phase="setup")
        declared = (_declared_order(y) if self.levels is None
                    else [plain(v) for v in self.levels])
        levels = pooled_levels([r["classes"] for r in replies], declared)
        name = dataset.target_name  # y's name, or the dataset's target column
        endog = name if isinstance(name, str) else "y"
        if isinstance(X, FederatedDataset):
            self.__dict__.pop("feature_names_in_", None)
        return self._fit_sites(dataset, None, levels, names, endog)

    def fit_sites(self, dataset, response, levels, names, *, endog="y"):
        """Fit on a dataset whose outcome is its target (``response=None``) or the column
        ``response`` of its sites' tables, with the pooled ``levels`` in order (the
        formula routes' entry; the model then predicts from design matrices: no
        ``feature_names_in_``)."""
        self.__dict__.pop("feature_names_in_", None)
        return self._fit_sites(dataset, response, levels, names, endog)

    def _fit_sites(self, dataset, response, levels, names, endog):
        self._validate_params()
        self._check_privacy()
        levels = [plain(v) for v in levels]
        self._check_levels(levels)
        names = self._design_names(list(names))
        with self._session(dataset) as session:
            fitted = self._newton(session, response, levels, len(names))
            null = self._null_fit(session, response, levels, names)
            meat = None if self.cov_type == "nonrobust" else session.sum(
                site_meat, *self._meat_args(response, levels, fitted["z"]), phase="inference")
        self._record(dataset, session, fitted, levels, names, endog)
        self._record_null(null)
        if meat is not None:
            self._sandwich(meat, fitted["z"], len(names))
        return self

    def _sandwich(self, meat, z, p):
        """The robust covariance ``H^-1 M H^-1`` (statsmodels' HC0), or with the sites as
        clusters and its small-sample factor ``G/(G-1) (n-1)/(n-k)`` (statsmodels'
        cluster with ``use_correction=True``)."""
        J = self._jacobian(z, p)
        if self.cov_type == "HC0":
            M, factor = meat["meat"], 1.0
        else:
            G, n, k = self.n_clients_, self.nobs_, len(self.params_)
            M, factor = meat["cluster_meat"], G / (G - 1.0) * (n - 1.0) / (n - k)
            warn_few_clusters(self, G, factor_applied=True)
        bread = self.cov_params_
        self.cov_params_ = factor * (bread @ (J.T @ M @ J) @ bread)

    def _session(self, dataset):
        """The fit's session over ``dataset``: plain, or its sums masked (``privacy``)."""
        return (nullcontext(FederationSession.for_dataset(dataset)) if self.privacy is None
                else _masked(dataset, self.privacy))

    def _null_fit(self, session, response, levels, names):
        """The null model (statsmodels' ``llnull``): the thresholds only, or the
        intercepts only, fitted by the same rounds with the other parameters at 0;
        ``None`` when the model has no null (no intercept column)."""
        problem = self._null_problem(len(names), levels, names)
        if problem is None:
            return None
        start, free = problem
        return newton(self._evaluator(session, response, levels, phase="inference"), start,
                      self._feasible(len(names)), self.tol, self.max_rounds, free)

    def _record_null(self, null):
        self.df_model_ = float(len(self.params_) - (0 if null is None else
                                                     int(np.sum(null["free"]))))
        self.llnull_ = np.nan if null is None or not null["converged"] else float(
            null["terms"]["loglike"])
        self.llr_ = 2.0 * (self.llf_ - self.llnull_)
        self.llr_pvalue_ = float(stats.chi2.sf(self.llr_, self.df_model_))
        self.prsquared_ = 1.0 - self.llf_ / self.llnull_

    def _evaluator(self, session, response, levels, phase="rounds"):
        """``evaluate(z)``: one round, the sites' summed terms at ``z``."""
        def evaluate(z):
            function, args = self._round(response, levels, z)
            return session.sum(function, *args, phase=phase)
        return evaluate

    def _feasible(self, p):
        return lambda z: True

    def _check_privacy(self):
        if isinstance(self.privacy, DifferentialPrivacy):
            raise ValueError(
                f"{type(self).__name__} does not offer differential privacy: its Newton "
                "rounds send each site's log-likelihood, gradient and Hessian sums without "
                "noise, outside any privacy budget. Use privacy=SecureAggregation() (the "
                "sites' sums masked, the same fit).")

    def _check_levels(self, levels):
        if len(levels) == 1:
            raise ValueError(f"the outcome has 1 level ({show(levels[0])}: one class) only; "
                             f"{type(self).__name__} needs at least {self._min_levels}.")
        if len(levels) < self._min_levels:
            raise ValueError(f"the outcome has {len(levels)} level(s) {show(levels)}; "
                             f"{type(self).__name__} needs at least {self._min_levels}.")

    def _design_names(self, names):
        return names

    def _record(self, dataset, session, fitted, levels, names, endog):
        z, terms = fitted["z"], fitted["terms"]
        params, hess = self._to_params(z, terms["grad"], terms["hess"], len(names))
        param_names = self._param_names(names, levels, endog)
        cov, why = _symmetric_inverse(-hess, param_names)
        if cov is None and not fitted["converged"]:
            raise ValueError(
                f"{type(self).__name__}: the log-likelihood has no maximum here: after "
                f"{fitted['rounds']} rounds the estimates still grow and the information "
                "vanishes (separation: a covariate, or a combination, predicts the levels "
                "perfectly). Drop or merge that covariate or level; a penalized fit is not "
                "offered here.")
        if cov is None:
            raise ValueError(f"{type(self).__name__}: {why}.")
        self.levels_ = np.asarray(levels, dtype=object)
        self.params_, self.cov_params_ = params, cov
        self.param_names_ = param_names
        self.endog_name_ = endog
        self.exog_names_ = list(names)
        # scikit-learn's count: the columns of X (an added constant is not one)
        self.n_features_in_ = len(names) - self._added_columns()
        self.nobs_ = float(terms["n"])
        self.llf_ = float(terms["loglike"])
        self.aic_ = -2.0 * self.llf_ + 2.0 * len(params)
        self.bic_ = -2.0 * self.llf_ + np.log(self.nobs_) * len(params)
        self.df_resid_ = self.nobs_ - len(params)
        self.converged_, self.n_iter_ = bool(fitted["converged"]), fitted["rounds"]
        self.clients_, self.n_clients_ = dataset.labels, len(dataset)
        self.ledger_ = session.ledger.as_dict()
        # the bytes of the rounds by direction: the broadcast (the same to every site),
        # the rest the sites' replies
        down = fitted["rounds"] * len(dataset) * payload_nbytes(
            self._round(None, levels, z)[1])
        self.traffic_ = {"rounds": int(fitted["rounds"]), "bytes_down": int(down),
                         "bytes_up": int(self.ledger_["rounds"]["bytes"] - down),
                         "setup_bytes": int(self.ledger_["setup"]["bytes"])}
        self.secure_aggregation_ = self.privacy is not None
        if not fitted["converged"]:
            warnings.warn(
                f"{type(self).__name__} did not converge in {fitted['rounds']} rounds: the "
                f"Newton decrement is {fitted['decrement']:.3g} > tol={self.tol} "
                f"({fitted['reason']}). Raise max_rounds, or check for separation (a "
                "covariate that predicts a level perfectly).", ConvergenceWarning,
                stacklevel=4)

    @property
    def loglike_(self):
        """The log-likelihood at the fit (``llf_``, the GLMs' name)."""
        return self.llf_

    # -- what the results base reads ---------------------------------------------
    def _summary_info(self):
        check_is_fitted(self)
        info = {"Dep. Variable:": self.endog_name_, "Model:": self._model_name,
                "No. Observations:": f"{self.nobs_:g}", "Df Residuals:": f"{self.df_resid_:g}",
                "Levels:": ", ".join(map(str, self.levels_)),
                "Log-Likelihood:": f"{self.llf_:.4f}", "AIC:": f"{self.aic_:.4f}",
                "BIC:": f"{self.bic_:.4f}", "LL-Null:": f"{self.llnull_:.4f}",
                "LLR p-value:": f"{self.llr_pvalue_:.4g}",
                "Pseudo R-squ.:": f"{self.prsquared_:.4f}", "Covariance:": self.cov_type,
                "Sites:": str(self.n_clients_)}
        if self.secure_aggregation_:
            info["Sums:"] = "masked (secure aggregation)"
        return info

    def _covariates(self, X):
        check_is_fitted(self)
        return validate_data(self, X, dtype=np.float64, reset=False)

    def _added_columns(self):
        return 0

    def predict_proba(self, X):
        """Each level's probability for new rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_levels)
        """
        F = self._covariates(X)
        return self._proba(F)

    def predict(self, X):
        """The most probable level of each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        levels : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        # the labels' own dtype (levels_ holds them as objects)
        return np.asarray(self.levels_[np.argmax(self.predict_proba(X), axis=1)].tolist())


def _validated(estimator, X):
    """``X`` checked as scikit-learn checks it (2-d, numbers, finite, not sparse), its
    ``n_features_in_`` and string column names recorded; a DataFrame stays one (its
    column names are the parameters' names)."""
    values = validate_data(estimator, X, dtype=np.float64)
    if isinstance(X, pd.DataFrame):
        return pd.DataFrame(values, index=X.index, columns=X.columns)
    return values


def _masked(dataset, privacy):
    from ..privacy.masked_sums import masked_session

    return masked_session(dataset, privacy)
