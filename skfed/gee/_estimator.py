"""FedGEE: generalized estimating equations for clusters nested in sites, exactly.

The estimate, its robust (sandwich) and model-based covariances, the working
correlation's parameter and the scale equal statsmodels' ``GEE`` on the pooled
rows: the server runs statsmodels' iteration (:mod:`skfed.gee._fit`) on sums
the sites return (:mod:`skfed.gee._site`); a cluster's own terms never leave
its site.
"""

import warnings
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._messages import show
from ..base import restore_on_failure
from ..datafits.links import inverse_link
from ._fit import Exchanges, covariances, gee_dataset, iterate, session_for
from ._results import COV_TYPES, GEEResults
from ._site import COV_STRUCTS, FAMILIES, FAMILY_LINKS, MAX_LAGS, site_gee_clusters


def _cluster_counts(replies):
    """The pooled cluster and row counts and the extreme cluster sizes (the table's)."""
    return {"n_clusters": sum(r["clusters"] for r in replies),
            "nobs": sum(r["rows"] for r in replies),
            "min_size": min(r["sizes"][0] for r in replies),
            "max_size": max(r["sizes"][1] for r in replies)}


class FedGEE(BaseEstimator):
    """Marginal regression of clustered rows (a patient's visits) by GEE, as statsmodels'.

    ``g(E[y_ij]) = x_ij' b`` with a working correlation of the rows of cluster
    ``i``: independence, exchangeable (one correlation ``alpha``) or AR(1)
    (``alpha^|j - k|`` over the rows' order in the cluster, sorted by ``time``).
    A cluster is the rows of one site sharing a label (the labels never leave their
    site): a label at two sites is two clusters.

    Parameters
    ----------
    family : {"gaussian", "binomial", "poisson", "gamma"}, default="gaussian"
    link : str, default=None
        ``None``: statsmodels' default (identity, logit, log, inverse_power);
        also ``"log"`` (Gaussian, binomial, Gamma) and ``"identity"`` (Poisson).
    cov_struct : {"independence", "exchangeable", "autoregressive"}, \
            default="independence"
    grid : bool, default=False
        AR(1) only: estimate ``alpha`` from lag-one products of equally spaced
        rows (statsmodels' ``Autoregressive(grid=True)``); ``False``: weighted
        least squares over every pair and its time lag (statsmodels' current
        default).
    fit_intercept : bool, default=True
    cov_type : {"robust", "naive"}, default="robust"
        The covariance of the table (both are computed).
    maxiter : int, default=60
    ctol : float, default=1e-6
        Converged when the score's norm falls below ``ctol`` (statsmodels').
    privacy : None or SecureAggregation, default=None
        ``SecureAggregation()``: every sum masked, only the totals decoded
        (exact); differential privacy is refused (see ``docs/gee.md``).

    Attributes
    ----------
    results_ : GEEResults
    params_ : pandas.Series
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    bse_ : ndarray
        Standard errors of ``cov_type``.
    bse_robust_, bse_naive_ : ndarray
    dep_params_ : float
        The working correlation's parameter (0 for independence).
    scale_ : float
    n_clusters_ : int
    converged_ : bool
    n_iter_ : int
        Scoring steps (statsmodels' iterations).
    clients_ : ndarray
    n_clients_ : int
    ledger_ : dict
        Rounds and bytes per phase.
    traffic_ : dict
        The fit's rounds (the iteration's and the covariances' exchanges) and their
        bytes up and down, and the setup's bytes.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
    """

    _parameter_constraints = {
        "family": [StrOptions(set(FAMILIES))],
        "link": [StrOptions({"identity", "log", "logit", "inverse_power"}), None],
        "cov_struct": [StrOptions(set(COV_STRUCTS))],
        "grid": ["boolean"],
        "fit_intercept": ["boolean"],
        "cov_type": [StrOptions(set(COV_TYPES))],
        "maxiter": [Interval(Integral, 1, None, closed="left")],
        "ctol": [Interval(Real, 0, None, closed="neither")],
        "privacy": "no_validation",
    }

    __metadata_request__fit = {"clients": True, "groups": True, "time": True}

    def __init__(self, family="gaussian", *, link=None, cov_struct="independence", grid=False,
                 fit_intercept=True, cov_type="robust", maxiter=60, ctol=1e-6, privacy=None):
        self.family = family
        self.link = link
        self.cov_struct = cov_struct
        self.grid = grid
        self.fit_intercept = fit_intercept
        self.cov_type = cov_type
        self.maxiter = maxiter
        self.ctol = ctol
        self.privacy = privacy

    def _checked(self):
        if not isinstance(self.cov_struct, str) or self.cov_struct not in COV_STRUCTS:
            raise ValueError(f"unknown cov_struct={show(self.cov_struct)}; FedGEE's working "
                             f"correlations are {', '.join(COV_STRUCTS)}.")
        self._validate_params()
        link = FAMILY_LINKS[self.family][0] if self.link is None else self.link
        if link not in FAMILY_LINKS[self.family]:
            raise ValueError(f"link={link!r} is not one of the {self.family} family's links "
                             f"{FAMILY_LINKS[self.family]}.")
        return link

    @restore_on_failure
    def fit(self, X, y=None, *, clients=None, groups=None, time=None):
        """Fit the GEE.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features), or FederatedDataset
            Features (a table may also hold the cluster and time columns).
        y : array-like of shape (n_samples,), default=None
        clients : array-like of shape (n_samples,), default=None
            The site of each row; ``None``: one site.
        groups : str or array-like of shape (n_samples,)
            The cluster of each row (a column name, or one label per row).
        time : str or array-like of shape (n_samples,), default=None
            AR(1): each row's time (whole numbers: visit numbers, days); the rows
            of a cluster are taken in time order. ``None``: their order.

        Returns
        -------
        self : FedGEE
        """
        return self._fit(X, y, clients, groups, time)

    def _fit(self, X, y, clients, groups, time, time_feature=False):
        """:meth:`fit`; ``time_feature``: the time column is a feature too (a
        formula's ``y ~ visit`` with ``time="visit"``)."""
        link = self._checked()
        dataset, column, time_column, names, endog = gee_dataset(X, y, clients, groups, time,
                                                                 time_feature)
        design = {"groups": column, "time": time_column, "time_feature": time_feature,
                  "family": self.family,
                  "link": link, "fit_intercept": self.fit_intercept,
                  "cov_struct": self.cov_struct}
        fe_names = (["Intercept"] if self.fit_intercept else []) + list(names)
        with session_for(dataset, self.privacy) as (plain, sums):
            session = Exchanges(plain)
            replies = session.per_site(site_gee_clusters, design, phase="setup")
            max_lag = int(max(r["max_lag"] for r in replies))
            if max_lag > MAX_LAGS:
                raise ValueError(f"the largest within-cluster time lag is {max_lag}; at most "
                                 f"{MAX_LAGS} (give visit numbers, or coarser times).")
            fit = iterate(session, design, len(fe_names), max_lag, self)
            ledger, traffic = plain.ledger.as_dict(), session.traffic()
        robust, naive, scale = covariances(fit["final"], self.family, len(fe_names))
        self.results_ = GEEResults(
            pd.Series(fit["params"], index=fe_names), robust, naive, scale=scale,
            dep_params=fit["alpha"], cov_struct=self.cov_struct, family=self.family,
            link=link, cov_type=self.cov_type, endog_name=endog,
            clusters=_cluster_counts(replies), privacy=sums,
            converged=fit["converged"], score_norm=fit["score_norm"], n_iter=fit["rounds"])
        self._record(dataset, names, fit, ledger, link)
        self.traffic_ = traffic
        return self

    def _record(self, dataset, names, fit, ledger, link):
        results = self.results_
        values = results.params.to_numpy()
        self.params_ = results.params
        self.intercept_ = float(values[0]) if self.fit_intercept else 0.0
        self.coef_ = values[1:] if self.fit_intercept else values
        self.bse_ = results.bse.to_numpy()
        self.bse_robust_ = results.standard_errors("robust").to_numpy()
        self.bse_naive_ = results.standard_errors("naive").to_numpy()
        self.dep_params_, self.scale_ = results.dep_params, results.scale
        self.n_clusters_ = results.n_clusters
        self.converged_, self.n_iter_ = fit["converged"], fit["rounds"]
        self.clients_, self.n_clients_ = dataset.labels, len(dataset)
        self.ledger_ = ledger
        self.link_ = link
        self.n_features_in_ = len(names)
        self.feature_names_in_ = np.asarray(names, dtype=object)
        if not fit["converged"]:
            warnings.warn(f"FedGEE did not converge in {fit['rounds']} iterations: the "
                          f"score's norm is {fit['score_norm']:.3g} >= ctol={self.ctol}. "
                          "Raise maxiter, or rescale the features.", ConvergenceWarning,
                          stacklevel=3)

    def summary(self, alpha=0.05):
        """The regression table.

        Parameters
        ----------
        alpha : float, default=0.05

        Returns
        -------
        summary : Summary
        """
        check_is_fitted(self)
        return self.results_.summary(alpha)

    def predict(self, X):
        """The mean response ``inverse link(X b)`` (the marginal mean).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        mean : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        F = np.asarray(X, dtype=np.float64)
        if F.ndim != 2 or F.shape[1] != self.n_features_in_:
            raise ValueError(f"X has shape {F.shape}; the model was fitted on "
                             f"{self.n_features_in_} features.")
        return inverse_link(self.link_, F @ self.coef_ + self.intercept_)
