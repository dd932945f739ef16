"""FedMixedGLM: a binomial or Poisson GLMM with a random intercept per group, exactly.

The marginal log-likelihood of a GLMM whose groups are nested in the sites
is a sum over groups of one-dimensional integrals, each of which a site
evaluates alone (:mod:`skfed.mixed._glmm_site`). The server runs Newton's
method on ``(b, sigma)``: each round it broadcasts the parameters and the
sites return the sums over their groups of the log-likelihood, its exact
gradient and its Hessian, which add across sites (so a masked sum can carry
them). The estimate is the optimum of the Laplace (``n_nodes=1``, lme4's
default) or adaptive Gauss-Hermite approximation on the pooled rows.
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
from ..federation.session import FederationSession
from ._data import (check_group_sites, mixed_dataset, warn_boundary,
                    warn_few_groups)
from ._glmm_site import (FAMILIES, site_glmm_groups, site_glmm_modes, site_glmm_terms,
                         site_glmm_totals)
from ._results import GLMMResults


class FedMixedGLM(BaseEstimator):
    """Binomial or Poisson GLMM with a random intercept by site or by groups nested in sites.

    ``g(E[y | u]) = X b + u_g`` with ``u_g ~ N(0, sigma^2)``, the canonical link
    (logit, log). The marginal likelihood is approximated by the Laplace
    method (``n_nodes=1``, lme4's ``glmer`` default) or adaptive Gauss-Hermite
    quadrature (``n_nodes > 1``, lme4's ``nAGQ``), and maximised exactly:
    the server's Newton rounds use the exact gradient of that approximation.

    Parameters
    ----------
    family : {"binomial", "poisson"}, default="binomial"
    trials : str, default=None
        Binomial only: the column holding each row's number of trials (then
        ``y`` counts the successes, as lme4's ``cbind(successes, failures)``);
        ``None``: 0/1 outcomes.
    n_nodes : int, default=1
        Quadrature nodes per group (1: Laplace; lme4 allows up to 25).
    fit_intercept : bool, default=True
    tol : float, default=1e-12
        Stop when the Newton decrement ``g' (-H)^{-1} g / 2`` (the predicted
        gain in log-likelihood) falls below ``tol``.
    max_rounds : int, default=50
        Rounds at the most (a round: parameters out, sums back).
    min_group_size : int, default=2
        The fewest rows a group may have (a site refuses smaller groups).
    re_columns : list of str, default=None
        Feature columns with a random slope beside the random intercept
        (lme4's ``(1 + x | g)``), fitted by the Laplace approximation
        (``n_nodes=1``: lme4 has adaptive quadrature for one scalar random
        effect only). ``None``: a random intercept.

    Attributes
    ----------
    results_ : GLMMResults
    fe_params_ : pandas.Series
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    sigma_ : float
        Standard deviation of the random intercept.
    llf_ : float
    random_effects_ : pandas.Series
        Each group's conditional mode of its intercept (lme4's ``ranef``).
    groups_ : list
    group_sites_ : list
    n_groups_ : int
    converged_ : bool
    n_iter_ : int
        Newton rounds (each one exchange with the sites).
    clients_ : ndarray
    n_clients_ : int
    ledger_ : dict
    n_features_in_ : int
    feature_names_in_ : ndarray of str
    """

    _parameter_constraints = {
        "family": [StrOptions(set(FAMILIES))],
        "trials": [str, None],
        "n_nodes": [Interval(Integral, 1, 100, closed="both")],
        "fit_intercept": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_rounds": [Interval(Integral, 1, None, closed="left")],
        "min_group_size": [Interval(Integral, 1, None, closed="left")],
        "re_columns": [list, tuple, None],
    }

    __metadata_request__fit = {"clients": True, "groups": True}

    def __init__(self, family="binomial", *, trials=None, n_nodes=1, fit_intercept=True,
                 tol=1e-12, max_rounds=50, min_group_size=2, re_columns=None):
        self.family = family
        self.trials = trials
        self.n_nodes = n_nodes
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_rounds = max_rounds
        self.min_group_size = min_group_size
        self.re_columns = re_columns

    @restore_on_failure
    def fit(self, X, y=None, *, clients=None, groups=None):
        """Fit the GLMM in Newton rounds.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features), or FederatedDataset
            Fixed-effects features (a table may also hold the grouping and
            trials columns).
        y : array-like of shape (n_samples,), default=None
        clients : array-like of shape (n_samples,), default=None
            The site of each row; ``None``: one site.
        groups : str or array-like of shape (n_samples,), default=None
            The random intercept's groups (nested in the sites); ``None``: the
            sites.

        Returns
        -------
        self : FedMixedGLM
        """
        self._validate_params()
        if self.trials is not None and self.family != "binomial":
            raise ValueError("trials= is for the binomial family only.")
        dataset, column, names, endog = mixed_dataset(X, y, clients, groups)
        if self.trials is not None and self.trials not in names:
            raise ValueError(f"trials={show(self.trials)} is not a column of X {names}.")
        names = [c for c in names if c != self.trials]
        design = {"groups": column, "trials": self.trials, "family": self.family,
                  "fit_intercept": self.fit_intercept, "min_group_rows": self.min_group_size}
        re_names = self._slopes(names, design)
        session = FederationSession.for_dataset(dataset)
        replies = session.per_site(site_glmm_groups, design, phase="setup")
        labels, group_sites = check_group_sites(replies, dataset.sites)
        warn_few_groups(len(labels), column is None, "FedMixedGLM")
        fe_names = (["Intercept"] if self.fit_intercept else []) + names
        newton = _newton(session, design, len(fe_names), self.n_nodes, self.tol,
                         self.max_rounds, q=len(re_names))
        modes = session.per_site(site_glmm_modes, design, newton["theta"], phase="inference")
        self.results_ = _results(newton, fe_names, replies, modes, self, endog, re_names)
        self._record(dataset, session, names, column, labels, group_sites, newton)
        return self

    def _slopes(self, names, design):
        """The random effects' names; the slopes' positions go into ``design``."""
        if not self.re_columns:
            return ["Group"]
        if self.n_nodes != 1:
            raise ValueError("random slopes are fitted by the Laplace approximation "
                             "(n_nodes=1): adaptive quadrature is for one scalar random "
                             "effect (as lme4's nAGQ).")
        unknown = [c for c in self.re_columns if c not in names]
        if unknown:
            raise ValueError(f"re_columns: {show(unknown[0])} is not a feature column; the "
                             f"features are {names}.")
        design["re_columns"] = [names.index(c) for c in self.re_columns]
        return ["Group"] + [str(c) for c in self.re_columns]

    def _record(self, dataset, session, names, column, labels, group_sites, newton):
        results = self.results_
        values = results.fe_params.to_numpy()
        self.fe_params_ = results.fe_params
        self.intercept_ = float(values[0]) if self.fit_intercept else 0.0
        self.coef_ = values[1:] if self.fit_intercept else values
        self.sigma_, self.llf_ = results.sigma, results.llf
        self.random_effects_ = results.random_effects
        self.groups_, self.group_sites_, self.n_groups_ = labels, group_sites, len(labels)
        self.converged_, self.n_iter_ = newton["converged"], newton["rounds"]
        self.clients_, self.n_clients_ = dataset.labels, len(dataset)
        self.ledger_ = session.ledger.as_dict()
        self.n_features_in_ = len(names)
        self.feature_names_in_ = np.asarray(names, dtype=object)
        self.group_column_ = column
        if not newton["converged"]:
            warnings.warn(
                f"FedMixedGLM did not converge in {newton['rounds']} rounds: the Newton "
                f"decrement is {newton['decrement']:.3g} > tol={self.tol} "
                f"({newton['reason']}). Raise max_rounds, rescale the features, or check "
                "for separation (a group or level with all outcomes equal).",
                ConvergenceWarning, stacklevel=4)
        cov_re = self.results_.cov_re
        if cov_re is None:
            warn_boundary(np.array([[self.sigma_]]), ["Group"], "FedMixedGLM")
        else:
            warn_boundary(_factor(newton["theta"], cov_re.shape[0]), list(cov_re.index),
                          "FedMixedGLM")

    def summary(self, alpha=0.05):
        """The regression table.

        Parameters
        ----------
        alpha : float, default=0.05

        Returns
        -------
        summary : MixedLMSummary
        """
        check_is_fitted(self)
        return self.results_.summary(alpha)

    def predict(self, X, groups=None):
        """The mean response: ``inverse link(X b + u_g)``, with ``u_g`` the group's
        conditional mode for groups seen in the fit (0 otherwise, and when
        ``groups`` is ``None``: the response of a typical group).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        groups : array-like of shape (n_samples,), default=None

        Returns
        -------
        mean : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        F = np.asarray(X, dtype=np.float64)
        if F.ndim != 2 or F.shape[1] != self.n_features_in_:
            raise ValueError(f"X has shape {F.shape}; the model was fitted on "
                             f"{self.n_features_in_} features.")
        eta = F @ self.coef_ + self.intercept_
        if groups is not None:
            # groups unseen in the fit: the typical group's mean (an effect of 0)
            effects = self.random_effects_.reindex(np.asarray(groups, dtype=object))
            effects = effects.fillna(0.0).to_numpy()
            if effects.ndim == 2:  # random slopes: Z u with Z = (1, the slopes' columns)
                positions = [list(self.feature_names_in_).index(c) for c in self.re_columns]
                Z = np.column_stack([np.ones(F.shape[0]), F[:, positions]])
                effects = np.einsum("ij,ij->i", Z, effects)
            eta = eta + effects
        return inverse_link("logit" if self.family == "binomial" else "log", eta)


def _newton(session, design, n_fixed, n_nodes, tol, max_rounds, q=1):
    """Newton's method on ``(b, sigma)`` with step halving; one round per evaluation.

    Starts at ``sigma = 1`` (lme4's starting ``theta``) and the slopes at 0, the
    intercept at the link of the pooled mean (from one summed exchange). A
    Hessian that is not negative definite is shifted until it is.
    """
    k = q * (q + 1) // 2  # lme4's theta: the packed relative Cholesky factor, from I
    theta = np.zeros(n_fixed + k)
    theta[n_fixed:] = np.eye(q)[np.tril_indices(q)]
    if design["fit_intercept"]:
        totals = session.sum(site_glmm_totals, design, phase="setup")
        mean = totals["y"] / totals["trials"]
        theta[0] = (np.log(mean / (1.0 - mean)) if design["family"] == "binomial"
                    else np.log(mean)) if 0 < mean < (1 if design["family"] == "binomial"
                                                      else np.inf) else 0.0
    current = session.sum(site_glmm_terms, design, theta, n_nodes, phase="rounds")
    rounds, decrement, reason = 1, np.inf, "max_rounds reached"
    while rounds < max_rounds:
        step = _ascent_direction(current["hess"], current["grad"])
        decrement = 0.5 * float(current["grad"] @ step)
        if decrement <= tol:
            break
        accepted = False
        for _ in range(30):
            if rounds >= max_rounds:
                break
            trial = theta + step
            trial[-1] = abs(trial[-1])  # the likelihood is even in sigma
            new = session.sum(site_glmm_terms, design, trial, n_nodes, phase="rounds")
            rounds += 1
            # Armijo's rule, with room for the sums' rounding near the optimum
            if new["loglike"] >= (current["loglike"] + 1e-4 * decrement
                                  - 1e-12 * abs(current["loglike"])):
                accepted = True
                break
            step = 0.5 * step
        if not accepted:
            reason = ("max_rounds reached" if rounds >= max_rounds
                      else "no step along the Newton direction increased the log-likelihood")
            break
        theta, current = trial, new
    return {"theta": theta, "terms": current, "rounds": rounds, "decrement": decrement,
            "converged": decrement <= tol, "reason": reason}


def _ascent_direction(hess, grad):
    """``(-H)^{-1} g``, with ``-H`` shifted up to positive definite if needed."""
    neg = -np.asarray(hess)
    shift = 0.0
    for _ in range(60):
        try:
            factor = np.linalg.cholesky(neg + shift * np.eye(len(grad)))
            return np.linalg.solve(factor.T, np.linalg.solve(factor, grad))
        except np.linalg.LinAlgError:
            shift = max(2.0 * shift, 1e-8 * max(1.0, np.abs(neg).max()))
    raise FloatingPointError("the Hessian could not be made negative definite.")


def _factor(theta, q):
    """lme4's relative Cholesky factor from the packed end of ``theta``."""
    L = np.zeros((q, q))
    L[np.tril_indices(q)] = theta[len(theta) - q * (q + 1) // 2:]
    return L


def _results(newton, fe_names, replies, modes, est, endog, re_names):
    theta, hess = newton["theta"], newton["terms"]["hess"]
    if len(re_names) > 1:
        return _slope_results(newton, fe_names, replies, modes, est, endog, re_names)
    names = fe_names + ["sigma"]
    try:
        cov = np.linalg.inv(-hess)
    except np.linalg.LinAlgError:
        cov = np.linalg.pinv(-hess)
    labels = pd.Index(np.concatenate([r["labels"] for r in modes]), dtype=object)
    effects = pd.Series(np.concatenate([r["mode"] for r in modes]), index=labels)
    sds = pd.Series(np.concatenate([r["sd"] for r in modes]), index=labels)
    return GLMMResults(
        fe_params=pd.Series(theta[:-1], index=fe_names), sigma=theta[-1],
        cov_params=pd.DataFrame(cov, index=names, columns=names),
        llf=float(newton["terms"]["loglike"]), family=est.family, n_nodes=est.n_nodes,
        converged=newton["converged"],
        group_sizes=np.concatenate([r["n"] for r in replies]).astype(int),
        random_effects=effects, random_effects_sd=sds, endog_name=endog,
        n_rounds=newton["rounds"])


def _slope_results(newton, fe_names, replies, modes, est, endog, re_names):
    """The results of a GLMM with random slopes (``theta``: lme4's packed factor)."""
    theta, hess = newton["theta"], newton["terms"]["hess"]
    q, p = len(re_names), len(fe_names)
    L = _factor(theta, q)
    names = fe_names + [f"theta{i + 1}" for i in range(theta.size - p)]
    try:
        cov = np.linalg.inv(-hess)
    except np.linalg.LinAlgError:
        cov = np.linalg.pinv(-hess)
    labels = pd.Index(np.concatenate([r["labels"] for r in modes]), dtype=object)
    cov_re = pd.DataFrame(L @ L.T, index=re_names, columns=re_names)
    return GLMMResults(
        fe_params=pd.Series(theta[:p], index=fe_names), sigma=np.sqrt(cov_re.iloc[0, 0]),
        cov_params=pd.DataFrame(cov, index=names, columns=names),
        llf=float(newton["terms"]["loglike"]), family=est.family, n_nodes=est.n_nodes,
        converged=newton["converged"],
        group_sizes=np.concatenate([r["n"] for r in replies]).astype(int),
        random_effects=pd.DataFrame(np.concatenate([r["mode"] for r in modes]),
                                    index=labels, columns=re_names),
        random_effects_sd=pd.DataFrame(np.concatenate([r["sd"] for r in modes]),
                                       index=labels, columns=re_names),
        endog_name=endog, n_rounds=newton["rounds"], cov_re=cov_re)
