"""FedOrderedModel: the proportional-odds (cumulative link) model, as statsmodels'
``OrderedModel``, on the pooled rows of the sites."""

import numpy as np
from scipy import special, stats
from sklearn.utils._param_validation import StrOptions

from ._fit import DiscreteModel, newton, with_shared_params
from ._site import DISTRIBUTIONS, site_ordinal_terms


def thresholds_from(params):
    """statsmodels' cut points from its threshold parameters (the first cut point, then
    the logs of the increments)."""
    return np.cumsum(np.concatenate([params[:1], np.exp(params[1:])]))


class FedOrderedModel(DiscreteModel):
    """Proportional-odds model of an ordered outcome over the sites: statsmodels'
    ``OrderedModel`` on the pooled rows.

    ``P(y <= j | x) = F(c_j - x'b)`` for the levels ``j`` in order, ``F`` the
    logistic (``distr="logit"``, the proportional-odds model, R's ``MASS::polr``)
    or normal (``"probit"``) distribution. The design has no intercept (the cut
    points take its place). The parameters are statsmodels': the coefficients
    ``b``, then the first cut point and the logs of the increments between
    consecutive cut points (named ``"low/mid"``, ``"mid/high"``...). Fitted by
    Newton's method on the pooled log-likelihood, whose value, gradient and
    Hessian the sites send as sums over their rows; standard errors from the
    pooled observed information.

    Parameters
    ----------
    distr : {"logit", "probit"}, default="logit"
        The latent variable's distribution (the link). statsmodels' default is
        ``"probit"``; R's ``polr`` and most analyses use the logit.
    {shared}

    Attributes
    ----------
    params_ : ndarray of shape (n_features + n_levels - 1,)
        The coefficients, then the threshold parameters (statsmodels' order).
    param_names_ : list of str
    cov_params_ : ndarray
        The inverse of the pooled observed information.
    bse_, tvalues_, pvalues_ : ndarray
    coef_ : ndarray of shape (n_features,)
    thresholds_ : ndarray of shape (n_levels - 1,)
        The cut points ``c_j``.
    levels_ : ndarray
        The outcome's levels, in order.
    {shared_attributes}

    Examples
    --------
    >>> import numpy as np
    >>> from skfed import FedOrderedModel
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2))
    >>> y = np.digitize(X @ [1.0, -0.5] + rng.logistic(size=300), [-1, 0.5, 2])
    >>> model = FedOrderedModel().fit(X, y, clients=rng.integers(0, 3, 300))
    >>> model.param_names_
    ['x1', 'x2', '0/1', '1/2', '2/3']
    """

    _parameter_constraints = {**DiscreteModel._parameter_constraints,
                              "distr": [StrOptions(set(DISTRIBUTIONS))]}
    _summary_title = "OrderedModel Results"
    _model_name = "OrderedModel"
    _min_levels = 3

    def __init__(self, distr="logit", *, levels=None, cov_type="nonrobust", tol=1e-16,
                 max_rounds=100, privacy=None):
        self.distr = distr
        self.levels = levels
        self.cov_type = cov_type
        self.tol = tol
        self.max_rounds = max_rounds
        self.privacy = privacy

    def _validate_params(self):
        if self.distr not in DISTRIBUTIONS:
            raise ValueError(f"unknown link distr={self.distr!r}; FedOrderedModel fits "
                             f"{' and '.join(DISTRIBUTIONS)}.")
        super()._validate_params()

    def _check_levels(self, levels):
        if len(levels) == 2:
            raise ValueError(f"the outcome has two levels {levels}: an ordinal model of two "
                             "levels is a binary one; use FedLogisticRegression (logit) or "
                             "skfed.formula.glm(..., family='binomial').")
        super()._check_levels(levels)

    def _start(self, p, K):
        ppf = special.logit if self.distr == "logit" else stats.norm.ppf
        return np.concatenate([np.zeros(p), ppf(np.arange(1, K) / K)])

    def _feasible(self, p):
        return lambda z: bool(np.all(np.diff(z[p:]) > 0))  # the cut points increase

    def _newton(self, session, response, levels, p):
        return newton(self._evaluator(session, response, levels),
                      self._start(p, len(levels)), self._feasible(p), self.tol,
                      self.max_rounds)

    def _null_problem(self, p, levels, names):
        """The thresholds alone (the coefficients at 0)."""
        return self._start(p, len(levels)), np.arange(p + len(levels) - 1) >= p

    def _round(self, response, levels, z):
        return site_ordinal_terms, (response, levels, self.distr, z)

    def _to_params(self, z, grad, hess, p):
        """statsmodels' parameters and the Hessian in them, from the cut points'."""
        cuts = z[p:]
        steps = np.diff(cuts)
        params = np.concatenate([z[:p], cuts[:1], np.log(steps)])
        J = self._jacobian(z, p)
        H = J.T @ hess @ J
        # the second derivative of the cut points: exp(theta_m) on the diagonal
        tail = np.cumsum(grad[p:][::-1])[::-1]  # sum_{j >= m} of the gradient
        H[p + 1:, p + 1:] += np.diag(steps * tail[1:])
        return params, H

    @staticmethod
    def _jacobian(z, p):
        """``d (b, c) / d params``: ``d cut_j / d theta_m`` is 1 for the first threshold
        parameter and ``exp(theta_m)`` (an increment) for ``m <= j``."""
        steps, n_cuts = np.diff(z[p:]), len(z) - p
        J = np.eye(len(z))
        J[p:, p:] = np.tril(np.ones((n_cuts, n_cuts))) * np.concatenate([[1.0], steps])
        return J

    def _meat_args(self, response, levels, z):
        return "ordinal", response, levels, self.distr, False, z

    def _param_names(self, names, levels, endog):
        return names + [f"{a}/{b}" for a, b in zip(levels[:-1], levels[1:])]

    def _record(self, dataset, session, fitted, levels, names, endog):
        super()._record(dataset, session, fitted, levels, names, endog)
        p = len(names)
        self.coef_ = self.params_[:p].copy()
        self.thresholds_ = thresholds_from(self.params_[p:])

    def _measure(self):
        return "odds ratio" if self.distr == "logit" else None

    def _summary_info(self):
        return {**super()._summary_info(), "Distribution:": self.distr}

    def _forest_rows(self, alpha=0.05, labels=None):
        """The coefficients only: the thresholds are no effects."""
        names, est, lo, hi = super()._forest_rows(alpha, labels)
        k = len(self.levels_) - 1
        return names[:-k], est[:-k], lo[:-k], hi[:-k]

    def brant_test(self, X, y=None, *, clients=None):
        """Brant's test of the proportional-odds assumption (R's ``car::poTest``).

        Fits the binary logit of ``y`` above each cut point on the same rows (the
        sites' sums, masked under ``privacy``) and tests whether their slopes are
        equal: one Wald chi-square over all covariates and one per covariate.

        Parameters
        ----------
        X : array-like, DataFrame or FederatedDataset
            The rows of the fit (its covariates, in its order).
        y : array-like, default=None
        clients : array-like, default=None

        Returns
        -------
        table : pandas.DataFrame
            ``b[>level]`` per cut point, ``Chisquare``, ``df``, ``Pr(>Chisq)``; the
            first row ``Overall``.
        """
        from sklearn.utils.validation import check_is_fitted

        from ..data import as_dataset
        from ._brant import brant_test

        check_is_fitted(self)
        if self.distr != "logit":
            raise ValueError("Brant's test is for the logit link (the binary logits it "
                             "compares), as car::poTest; this model's is the probit.")
        dataset = as_dataset(X, y, clients)
        if dataset.n_features != len(self.exog_names_):
            raise ValueError(f"X has {dataset.n_features} columns; the model was fitted on "
                             f"{len(self.exog_names_)}.")
        with self._session(dataset) as session:
            return brant_test(session, None, list(self.levels_),
                              list(self.exog_names_), tol=self.tol,
                              max_rounds=self.max_rounds)

    def _proba(self, F):
        cdf = special.expit if self.distr == "logit" else stats.norm.cdf
        upper = cdf(self.thresholds_[None, :] - (F @ self.coef_)[:, None])
        cumulative = np.column_stack([np.zeros(len(F)), upper, np.ones(len(F))])
        return np.diff(cumulative, axis=1)


with_shared_params(FedOrderedModel, exog="the parameters' names before the thresholds'")
