"""Generalized linear models with offsets and Wald inference: Poisson, Gamma, Tweedie,
ordinary least squares and ridge (the objectives of scikit-learn's estimators)."""

from numbers import Real

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _num_samples, check_is_fitted, validate_data

from ..federation.session import FederationSession
from .._docstrings import FIT_ATTRS_DOC, SHARED_DOC
from ..base import FederatedLinearModel, SiteScoreMixin, fit_all_or_nothing, sites_aware
from ..data import FederatedDataset
from ..data.site import SiteError, _model_from_message, _model_problem, model_message
from ..federation import dominance
from ..federation.operations import NOTHING, SUMS, Arg, site_operation
from ..datafits import Gamma, Poisson, Quadratic, Tweedie
from ..datafits.links import inverse_link
from ..federation.layout import Layout
from ..penalties import ElasticNet
from ._inference import COV_TYPES, Family, GLMInferenceMixin, InferenceError


@site_operation(
    "data.check_target", releases=NOTHING, combine="sum",
    describes="nothing (the target is checked to be in the family's range; a refusal "
              "says which family, never how many values are outside it)",
    arguments=(Arg("family_name", "name"), Arg("lower", "float"), Arg("strict", "bool")))
def check_target_range(site, family_name, lower, strict):
    """At a site: refuse a target outside the family's range (no value is sent)."""
    y = np.asarray(site.y, dtype=np.float64)
    bad = int(np.sum(y <= lower)) if strict else int(np.sum(y < lower))
    if bad:
        need = f"y > {lower:g}" if strict else f"y >= {lower:g}"
        hint = {"Poisson": " (counts; for rates fit the counts with offset=np.log(exposure))",
                "Gamma": " (positive amounts; a zero has likelihood zero: use Tweedie with "
                         "1 < power < 2 for data with exact zeros)"}.get(family_name, "")
        raise SiteError(site.site, f"{family_name} regression needs {need}{hint}; "
                                   f"{bad} target value(s) are outside that range.")
    return {}


@site_operation(
    "evaluate.response_sums", releases=SUMS, combine="sum",
    describes="two numbers: the sum of weights and of weighted targets (the mean response "
              "of a GLM score's null model), under the dominance rule")
def site_response_sums(site):
    """At a site: ``sum w`` and ``sum w y`` (the pooled mean response of D^2's null)."""
    w = site.weights()
    y = np.asarray(site.y, dtype=float)
    dominance.check_rows(np.column_stack([w, w * y]), "a mean response")
    return {"w": float(w.sum()), "wy": float(w @ y)}


@site_operation(
    "evaluate.deviances", releases=SUMS, combine="sum",
    describes="two numbers: the weighted deviance of a GLM's predictions and of a "
              "constant (its D^2 score), under the dominance rule",
    arguments=(Arg("estimator", "value", check=_model_problem, convert=_model_from_message),
               Arg("ybar", "float")),
    packer=lambda estimator, ybar: {"estimator": model_message(estimator),
                                    "ybar": float(ybar)})
def site_deviances(site, estimator, ybar):
    """At a site: the weighted deviance of the model's predictions (with the site's
    offsets) and of the constant ``ybar``: two numbers."""
    from ..data.site import site_predictions

    family = estimator._inference_family()
    w, y = site.weights(), np.asarray(site.y, dtype=float)
    mu = site_predictions(site, estimator, "predict")
    dominance.check_rows(np.column_stack([w * family.unit_deviance(y, mu),
                                          w * family.unit_deviance(y, np.full_like(y, ybar))]),
                         "a deviance")
    return {"model": float(w @ family.unit_deviance(y, mu)),
            "null": float(w @ family.unit_deviance(y, np.full_like(y, ybar)))}


def _checked_offset(offset, X):
    """The offset as a float array of one finite value per row, or a clear error."""
    if offset is None:
        return None
    n = _num_samples(X)
    try:
        values = np.asarray(offset, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("offset must be numbers (one per row of X, e.g. "
                         "np.log(exposure)).") from None
    if values.shape != (n,):
        raise ValueError(f"offset has shape {values.shape} but X has {n} rows; pass one value "
                         "per row (e.g. offset=np.log(exposure)).")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"offset contains {int(np.sum(~np.isfinite(values)))} NaN or infinite "
                         "value(s); an offset is log(exposure) with exposure > 0: drop the rows "
                         "with zero or missing exposure.")
    return values


_GLM_ATTRS_DOC = """
    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
""" + FIT_ATTRS_DOC + """    params_, param_names_ : ndarray, list of str
        The parameters of the inference table (intercept first) and their names.
    bse_, tvalues_, pvalues_ : ndarray of shape (n_params,)
        Standard errors, z statistics and two-sided p-values (``cov_type``).
    cov_params_ : ndarray of shape (n_params, n_params)
    deviance_, null_deviance_, pearson_chi2_ : float
    loglike_, aic_, bic_ : float
        statsmodels' definitions (``bic_`` is its ``bic_llf``, its default).
    scale_ : float
        Dispersion: 1 for Poisson (and binomial), else Pearson chi2 / (n - p).

    The inference attributes exist after an unpenalized fit only (``alpha=0``);
    otherwise reading one raises an error saying why. They come from one
    extra federated pass of sums at the optimum (``history_.inference_bytes``).
"""

_COV_TYPE_DOC = """cov_type : {"nonrobust", "HC0", "HC1", "cluster"}, default="nonrobust"
        Covariance of the estimates. ``"nonrobust"``: the inverse Fisher
        information times the dispersion (the model's variance function is
        right). ``"HC0"``: the sandwich (robust to a wrong variance function,
        rows independent); ``"HC1"``: HC0 times ``n / (n - p)``.
        ``"cluster"``: the sandwich with the sites as clusters (rows within a
        site may be correlated; needs several sites), with statsmodels'
        correction ``G / (G - 1) (n - 1) / (n - p)``."""

_FIT_DOC = """Fit the model on data held by several clients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or FederatedDataset
            The rows, or a :class:`~skfed.data.FederatedDataset` (which
            carries the target, the sites, the weights and the offsets).
        y : array-like of shape (n_samples,)
        clients : array-like of shape (n_samples,), default=None
            The client (site) holding each row; any hashable labels.
            ``None``: all rows form one client and the fit is centralized
            (``n_clients_ == 1``); pass ``clients=site`` to federate.
        sample_weight : array-like of shape (n_samples,), default=None
            Frequency weights (a row of weight 3 counts as three equal rows).
        offset : array-like of shape (n_samples,), default=None
            A known term of each row's linear predictor, such as
            ``np.log(exposure)`` (person-years) for a rate; it stays at the
            row's site like the target.

        Returns
        -------
        self : object
        """


class _FedGLM(GLMInferenceMixin, SiteScoreMixin, RegressorMixin, FederatedLinearModel):
    """Shared fit/predict of the single-target GLM regressors."""

    _link = "log"
    _family_name = None  # for the target check; None: any real target

    @fit_all_or_nothing
    def fit(self, X, y=None, clients=None, sample_weight=None, offset=None):
        self._validate_params()
        self._check_family()
        if not isinstance(X, FederatedDataset):  # arrays: checked here, one value per row
            offset = _checked_offset(offset, X)
        dataset = self._dataset(
            X, y, clients, sample_weight, offset=offset,
            validate=lambda X, y: validate_data(self, X, y, accept_sparse="csr",
                                                dtype=np.float64, y_numeric=True))
        summaries = self._site_setup(dataset, "regression")
        if summaries[0]["y_ndim"] != 1 or any(s["n_targets"] != 1 for s in summaries):
            raise ValueError(f"{type(self).__name__} fits one target: y must be 1-D.")
        if self._family_name is not None:
            self._session.per_site(check_target_range, *self._target_range(), phase="setup")
        total_weight = float(sum(s["weight_sum"] for s in summaries))
        layout = Layout(n_outputs=1, n_features=self.n_features_in_,
                        fit_intercept=self.fit_intercept)
        theta = self._fit_federated(dataset, datafit=self._datafit(),
                                    penalty=self._penalty(total_weight), layout=layout)
        self.coef_ = layout.coef(theta)[0].copy()
        self.intercept_ = float(layout.intercept(theta)[0])
        return self

    fit.__doc__ = _FIT_DOC

    def _target_range(self):
        return (self._family_name, 0.0, False)

    def _check_family(self):
        pass

    def _penalty(self, total_weight):
        alpha = getattr(self, "alpha", 0.0)
        if alpha == 0:
            return None
        return ElasticNet(alpha, getattr(self, "l1_ratio", 0.0))

    def _penalized(self):
        alpha = getattr(self, "alpha", 0.0)
        if alpha > 0:
            return (f"alpha={alpha:g} penalizes the coefficients, and Wald standard errors, "
                    "p-values and intervals are not valid for a penalized fit (the estimate "
                    "is shrunk toward zero and its covariance is not the inverse "
                    "information); refit with alpha=0 for inference")
        return None

    def _inverse_link(self, eta):
        return inverse_link(self._link, eta)

    @sites_aware
    def predict(self, X, offset=None):
        """Predict the mean response.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        offset : array-like of shape (n_samples,), default=None
            The rows' offsets (e.g. ``np.log(exposure)``): the prediction is
            then the expected count over that exposure.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        eta = np.asarray(X @ self.coef_).ravel() + self.intercept_
        offset = _checked_offset(offset, X)
        if offset is not None:
            eta = eta + offset
        return self._inverse_link(eta)

    def score(self, X, y=None, sample_weight=None, offset=None):
        """D^2, the fraction of deviance explained (scikit-learn's GLM ``score``).

        ``1 - D(y, predict(X)) / D(y, ybar)`` with the model's deviance and
        ``ybar`` the (weighted) mean response; for least squares it is R^2. On
        a :class:`~skfed.data.FederatedDataset` each site sends four numbers
        in two passes (its weight and response sums, then its two deviances),
        with its own offsets.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or FederatedDataset
        y : array-like of shape (n_samples,), default=None
            Not used with a FederatedDataset (it carries its target).
        sample_weight : array-like of shape (n_samples,), default=None
        offset : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
        """
        check_is_fitted(self)
        family = self._inference_family()
        if isinstance(X, FederatedDataset):
            if y is not None or sample_weight is not None or offset is not None:
                raise ValueError("a FederatedDataset carries its own target, weights and "
                                 "offsets; do not pass them with it.")
            session = FederationSession.for_dataset(X)
            sums = session.sum(site_response_sums, phase="analysis")
            ybar = float(sums["wy"]) / float(sums["w"])
            terms = session.sum(site_deviances, self, ybar, phase="analysis")
            model, null = float(terms["model"]), float(terms["null"])
        else:
            mu = self.predict(X, offset=offset)
            y = np.asarray(y, dtype=float)
            w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
            ybar = np.average(y, weights=w)
            model = float(w @ family.unit_deviance(y, mu))
            null = float(w @ family.unit_deviance(y, np.full_like(y, ybar)))
        return 1.0 - model / null if null > 0 else (1.0 if model == 0 else 0.0)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.positive_only = self._family_name is not None
        return tags


_GLM_PARAMS_HEAD = """alpha : float, default=1.0
        Penalty strength (>= 0), scikit-learn's default. ``alpha=0`` fits the
        unpenalized model, the one with inference.
    l1_ratio : float in [0, 1], default=0.0
        0: scikit-learn's ``alpha / 2 ||w||^2``; above 0 the elastic net
        ``alpha (l1_ratio ||w||_1 + (1 - l1_ratio) / 2 ||w||^2)`` (skfed's
        extension; Newton then solves an L1 sub-problem each round)."""

_GLM_CONSTRAINTS = {
    **FederatedLinearModel._parameter_constraints,
    "alpha": [Interval(Real, 0, None, closed="left")],
    "l1_ratio": [Interval(Real, 0, 1, closed="both")],
    "cov_type": [StrOptions(set(COV_TYPES))],
}


def _init_shared(self, fit_intercept, cov_type, solver, max_rounds, tol, monitor_every,
                 participation, client_weighting, privacy, executor, n_jobs, random_state,
                 verbose, warm_start):
    self.fit_intercept = fit_intercept
    self.cov_type = cov_type
    self.solver = solver
    self.max_rounds = max_rounds
    self.tol = tol
    self.monitor_every = monitor_every
    self.participation = participation
    self.client_weighting = client_weighting
    self.privacy = privacy
    self.executor = executor
    self.n_jobs = n_jobs
    self.random_state = random_state
    self.verbose = verbose
    self.warm_start = warm_start


_SOLVER_NOTE = """The half deviance of a log-link GLM has no global curvature bound (its
    second derivative grows like ``exp`` of the linear predictor): the only
    solver that applies is ``"newton"`` (the default, ``solver="auto"``),
    globalized by an Armijo line search on the pooled objective; it reaches
    the pooled optimum in a handful of rounds. First-order solvers are
    refused before round one (a fixed step may diverge), as is partial
    participation (a Newton step needs every site)."""


class FedPoissonRegressor(_FedGLM):
    """Federated Poisson regression: scikit-learn's ``PoissonRegressor`` objective.

    Minimizes, over data pooled from all clients (never moved)::

        1 / (2 sum(s)) * sum_i s_i d(y_i, exp(x_i'w + b + o_i)) + alpha / 2 ||w||^2

    with ``d`` the Poisson deviance, ``s`` the sample weights and ``o`` the
    offsets (log exposure); with ``alpha=0`` and the offset this is
    statsmodels' ``GLM(y, X, family=Poisson(), offset=o)``, whose inference
    (``summary()``, rate ratios with ``exponentiate=True``) it reproduces.

    Parameters
    ----------
    {head}
    {cov_type}
    {shared}
    {attrs}
    See Also
    --------
    sklearn.linear_model.PoissonRegressor : the pooled estimator with this objective.
    statsmodels.genmod.generalized_linear_model.GLM : the pooled inference reference.

    Notes
    -----
    {solvers}

    Examples
    --------
    >>> import numpy as np
    >>> from skfed import FedPoissonRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((400, 2))
    >>> years = rng.uniform(1, 5, 400)
    >>> y = rng.poisson(years * np.exp(0.5 * X[:, 0] - 1.0))
    >>> site = np.arange(400) % 4
    >>> est = FedPoissonRegressor(alpha=0).fit(X, y, clients=site, offset=np.log(years))
    >>> est.coef_.round(2), est.n_iter_
    (array([0.54, 0.04]), 6)
    >>> est.summary(exponentiate=True).round(3)  # rate ratios per unit of x
               exp(coef)  std err       z  P>|z|  [0.025  0.975]
    intercept      0.330    0.053 -20.958   0.00   0.298   0.366
    x0             1.718    0.049  11.015   0.00   1.560   1.891
    x1             1.042    0.050   0.824   0.41   0.944   1.151
    """

    _parameter_constraints = _GLM_CONSTRAINTS
    _family_name = "Poisson"

    def __init__(self, *, alpha=1.0, l1_ratio=0.0, fit_intercept=True, cov_type="nonrobust",
                 solver="auto", max_rounds=1000, tol=1e-4, monitor_every=1, participation=1.0,
                 client_weighting="samples", privacy=None, executor="sequential", n_jobs=None,
                 random_state=None, verbose=0, warm_start=False):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        _init_shared(self, fit_intercept, cov_type, solver, max_rounds, tol, monitor_every,
                     participation, client_weighting, privacy, executor, n_jobs,
                     random_state, verbose, warm_start)

    def _datafit(self):
        return Poisson()

    def _inference_family(self):
        return Family("poisson", "log")


class FedGammaRegressor(_FedGLM):
    """Federated Gamma regression (log link): scikit-learn's ``GammaRegressor`` objective.

    Minimizes, over data pooled from all clients (never moved)::

        1 / (2 sum(s)) * sum_i s_i d(y_i, exp(x_i'w + b + o_i)) + alpha / 2 ||w||^2

    with ``d`` the Gamma deviance (``y > 0``). With ``alpha=0`` its inference
    is statsmodels' ``GLM(..., family=Gamma(link=Log()))``: dispersion from
    Pearson's chi2, log-likelihood at that dispersion.

    Parameters
    ----------
    {head}
    {cov_type}
    {shared}
    {attrs}
    See Also
    --------
    sklearn.linear_model.GammaRegressor : the pooled estimator with this objective.

    Notes
    -----
    {solvers}
    """

    _parameter_constraints = _GLM_CONSTRAINTS
    _family_name = "Gamma"

    def __init__(self, *, alpha=1.0, l1_ratio=0.0, fit_intercept=True, cov_type="nonrobust",
                 solver="auto", max_rounds=1000, tol=1e-4, monitor_every=1, participation=1.0,
                 client_weighting="samples", privacy=None, executor="sequential", n_jobs=None,
                 random_state=None, verbose=0, warm_start=False):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        _init_shared(self, fit_intercept, cov_type, solver, max_rounds, tol, monitor_every,
                     participation, client_weighting, privacy, executor, n_jobs,
                     random_state, verbose, warm_start)

    def _target_range(self):
        return ("Gamma", 0.0, True)

    def _datafit(self):
        return Gamma()

    def _inference_family(self):
        return Family("gamma", "log")


class FedTweedieRegressor(_FedGLM):
    """Federated Tweedie regression: scikit-learn's ``TweedieRegressor`` objective.

    Minimizes, over data pooled from all clients (never moved)::

        1 / (2 sum(s)) * sum_i s_i d_p(y_i, mu_i) + alpha / 2 ||w||^2

    with ``d_p`` the Tweedie deviance of power ``p`` and ``mu_i =
    exp(x_i'w + b + o_i)`` (log link) or ``x_i'w + b + o_i`` (identity link,
    ``power=0`` only: least squares).

    Parameters
    ----------
    power : float, default=0.0
        Variance power: 0 normal, 1 Poisson, in (1, 2) compound
        Poisson-Gamma (exact zeros and positive amounts), 2 Gamma, 3 inverse
        Gaussian. Powers in (0, 1) have no distribution; negative powers are
        not supported.
    link : {{"auto", "log", "identity"}}, default="auto"
        ``"auto"``: identity for ``power=0``, log otherwise (scikit-learn's
        rule). The identity link is only offered with ``power=0`` (for
        ``power > 0`` the mean must stay positive, which the identity link
        does not ensure).
    {head}
    {cov_type}
    {shared}
    {attrs}
    See Also
    --------
    sklearn.linear_model.TweedieRegressor : the pooled estimator with this objective.

    Notes
    -----
    {solvers} For ``power`` 0 (log link) and above 2 the loss is not convex
    where ``y`` is small against the mean: Newton then uses the expected
    information (Fisher scoring, as IRLS) and reaches a stationary point, at a
    linear rather than quadratic rate: the default ``tol=1e-4`` then leaves
    coefficients about 1e-6 from the optimum (measured); tighten ``tol`` for
    more digits.

    The inference follows statsmodels' ``Tweedie`` family: the dispersion is
    always estimated (Pearson), and its log-likelihood (hence ``aic_``,
    ``bic_``) is NaN except at powers 1 and 2, as statsmodels' (which does not
    evaluate the series density).
    """

    _parameter_constraints = {
        **_GLM_CONSTRAINTS,
        "power": [Interval(Real, None, None, closed="neither")],
        "link": [StrOptions({"auto", "log", "identity"})],
    }

    def __init__(self, *, power=0.0, link="auto", alpha=1.0, l1_ratio=0.0, fit_intercept=True,
                 cov_type="nonrobust", solver="auto", max_rounds=1000, tol=1e-4,
                 monitor_every=1, participation=1.0, client_weighting="samples", privacy=None,
                 executor="sequential", n_jobs=None, random_state=None, verbose=0,
                 warm_start=False):
        self.power = power
        self.link = link
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        _init_shared(self, fit_intercept, cov_type, solver, max_rounds, tol, monitor_every,
                     participation, client_weighting, privacy, executor, n_jobs,
                     random_state, verbose, warm_start)

    @property
    def _resolved_link(self):
        return ("identity" if self.power == 0 else "log") if self.link == "auto" else self.link

    @property
    def _link(self):
        return self._resolved_link

    @property
    def _family_name(self):
        return None if self.power == 0 else "Tweedie"

    def _check_family(self):
        p = float(self.power)
        if p < 0 or 0 < p < 1:
            raise ValueError(f"power={p:g} is not supported: use 0 (normal), 1 (Poisson), "
                             "a power in (1, 2) (compound Poisson-Gamma), 2 (Gamma) or above "
                             "(powers in (0, 1) have no distribution).")
        if self._resolved_link == "identity" and p != 0:
            raise ValueError(f"link='identity' needs power=0; with power={p:g} the mean must "
                             "be positive and the identity link does not keep it so: use "
                             "link='log'.")

    def _target_range(self):
        strict = self.power >= 2
        return ("Tweedie (power >= 2)" if strict else "Tweedie (1 <= power < 2)", 0.0, strict)

    def _datafit(self):
        return Quadratic() if self._resolved_link == "identity" else Tweedie(self.power)

    def _inference_family(self):
        return Family("tweedie", self._resolved_link, float(self.power))


class FedLinearRegression(_FedGLM):
    """Federated ordinary least squares: scikit-learn's ``LinearRegression``.

    Minimizes ``||y - X w - b - o||^2`` (sample-weighted) over data pooled
    from all clients (never moved); in skfed's units the mean half squared
    error, which has the same minimizer. The default solver (Newton) takes one
    round: each site sends its gradient and its second moments ``X'X``.
    Inference is statsmodels' ``GLM(..., family=Gaussian())`` (z-tests; the
    dispersion is the residual variance ``RSS / (n - p)``).

    Parameters
    ----------
    {cov_type}
    {shared}
    {attrs}
    See Also
    --------
    sklearn.linear_model.LinearRegression : the pooled estimator.
    FedRidge : adds an L2 penalty.
    """

    _parameter_constraints = {
        **FederatedLinearModel._parameter_constraints,
        "cov_type": [StrOptions(set(COV_TYPES))],
    }
    _link = "identity"

    def __init__(self, *, fit_intercept=True, cov_type="nonrobust", solver="auto",
                 max_rounds=1000, tol=1e-4, monitor_every=1, participation=1.0,
                 client_weighting="samples", privacy=None, executor="sequential", n_jobs=None,
                 random_state=None, verbose=0, warm_start=False):
        _init_shared(self, fit_intercept, cov_type, solver, max_rounds, tol, monitor_every,
                     participation, client_weighting, privacy, executor, n_jobs,
                     random_state, verbose, warm_start)

    def _datafit(self):
        return Quadratic()

    def _inference_family(self):
        return Family("gaussian", "identity")


class FedRidge(_FedGLM):
    """Federated ridge regression: scikit-learn's ``Ridge`` objective.

    Minimizes ``||y - X w - b - o||^2 + alpha ||w||^2`` (the squared error
    sample-weighted and **not** divided by ``n``, as ``Ridge``) over data
    pooled from all clients (never moved). In skfed's units (the mean half
    squared error) the penalty is ``alpha / (2 sum(s)) ||w||^2``: the same
    minimizer, computed from the sites' weight sums.

    Parameters
    ----------
    alpha : float, default=1.0
        L2 strength (>= 0), on ``Ridge``'s scale. ``alpha=0`` is OLS (the
        fit with inference).
    {cov_type}
    {shared}
    {attrs}
    See Also
    --------
    sklearn.linear_model.Ridge : the pooled estimator with this objective.
    FedElasticNet : the ``ElasticNet`` scaling (``1 / (2 n)`` on the loss).
    """

    _parameter_constraints = {
        **FederatedLinearModel._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "cov_type": [StrOptions(set(COV_TYPES))],
    }
    _link = "identity"

    def __init__(self, *, alpha=1.0, fit_intercept=True, cov_type="nonrobust", solver="auto",
                 max_rounds=1000, tol=1e-4, monitor_every=1, participation=1.0,
                 client_weighting="samples", privacy=None, executor="sequential", n_jobs=None,
                 random_state=None, verbose=0, warm_start=False):
        self.alpha = alpha
        _init_shared(self, fit_intercept, cov_type, solver, max_rounds, tol, monitor_every,
                     participation, client_weighting, privacy, executor, n_jobs,
                     random_state, verbose, warm_start)

    def _penalty(self, total_weight):
        # ||r||^2 + alpha ||w||^2 = 2 S (mean half squared error + alpha / (2 S) ||w||^2)
        return None if self.alpha == 0 else ElasticNet(self.alpha / total_weight, 0.0)

    def _datafit(self):
        return Quadratic()

    def _inference_family(self):
        return Family("gaussian", "identity")


def _format(cls, solvers=True, head=True):
    parts = {"head": _GLM_PARAMS_HEAD.strip("\n").lstrip(), "cov_type": _COV_TYPE_DOC,
             "shared": SHARED_DOC.strip("\n").lstrip(), "attrs": _GLM_ATTRS_DOC,
             "solvers": _SOLVER_NOTE}
    cls.__doc__ = cls.__doc__.format(**parts)


for _cls in (FedPoissonRegressor, FedGammaRegressor, FedTweedieRegressor, FedLinearRegression,
             FedRidge):
    _format(_cls)

__all__ = ["FedGammaRegressor", "FedLinearRegression", "FedPoissonRegressor", "FedRidge",
           "FedTweedieRegressor", "InferenceError"]
