"""The Fine-Gray model of one cause's subdistribution hazard, over sites.

R's recipe on the pooled rows: ``survival::finegray`` expands the rows with the
Kaplan-Meier curve of censoring, and ``coxph(Surv(fgstart, fgstop, fgstatus) ~ x,
weights = fgwt)`` fits them (Efron's ties; R reports the robust standard errors, as
it does for any weighted fit). Over sites:

1. each site releases its distinct event and censoring times (``stats.competing_grid``,
   only with ``allow_event_times``), and its counts on their union
   (``stats.competing_counts``): their sums give the censoring curve of the POOLED rows
   (a censoring at a time counted after the events there, as ``finegray``);
2. each round, at the broadcast coefficients, each site expands its own rows by that
   curve and sends its weighted risk-set sums at the cause's event times
   (``survival.finegray_sums``); Newton's method on the pooled partial likelihood;
3. at the fit, each site sends its share of the robust sandwich's meat
   (``survival.finegray_meat``).

FedCoxPH's solver holds each row in the risk set up to its own time only; the
expanded rows' later entries (an interval ``(start, stop]``) and their weights are the
sites' here, so the Newton rounds are this module's.
"""

import warnings
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from ..exceptions import SiteRefusal
from ..federation.session import FederationSession
from ..stats._competing import _cause, _check_privacy
from ..stats._competing_site import site_competing_counts, site_competing_grid
from ..stats._results import EstimatorWald
from ..stats._survival import _check_columns, _dataset
from ..stats._survival_exchange import MAX_TIMES, _summed
from ._finegray_site import MAX_COVARIATES, site_finegray_meat, site_finegray_sums


def _refused(exc):
    """A site's refusal with what the analyst can do about it."""
    text = str(exc).rstrip(".")
    if exc.rule == "allow_event_times":
        text += (". A Fine-Gray model needs the exact event and censoring times (its "
                 "censoring weights change at each; there is no approximate form on cut "
                 "points): ask the sites to set allow_event_times = true")
    elif exc.rule == "finer_sums":
        text += (". Its risk-set sums per event time leave a site in the clear only where "
                 "finer_sums names survival.finegray_sums; privacy=SecureAggregation() "
                 "masks them")
    return SiteRefusal(exc.site, exc.rule, text)


def censoring_curve(n, d, times):
    """``(censoring times, G)``: the Kaplan-Meier curve of censoring from the pooled rows
    at risk and events at every time (event or censoring) of the grid, a censoring
    at a time counted after the events there."""
    censored = n - d - np.append(n[1:], 0)
    at = censored > 0
    return times[at], np.cumprod(1.0 - censored[at] / (n[at] - d[at]))


def efron(sums):
    """``(loglik, gradient, information, terms)`` of the weighted partial likelihood with
    Efron's ties (R's ``agfit4``) from the pooled sums at zero-based coefficients' offset
    (the events' linear predictor is added by the caller); ``terms`` are the per-time
    pieces of R's score residuals (``agscore3``)."""
    S0, S1, S2 = sums["S0"], sums["S1"], sums["S2"]
    E0, E1, E2 = sums["E0"], sums["E1"], sums["E2"]
    K, p = S1.shape
    loglik, grad, info = 0.0, np.array(sums["xsum"], dtype=float), np.zeros((p, p))
    terms = {"dH": np.zeros(K), "dXH": np.zeros((K, p)), "mh1": np.zeros(K),
             "mh2": np.zeros((K, p)), "mh3": np.zeros((K, p))}
    for k in range(K):
        deaths = int(round(sums["d"][k]))
        for ell in range(deaths):
            f = ell / deaths
            s0 = S0[k] - f * E0[k]
            xbar = (S1[k] - f * E1[k]) / s0
            loglik -= np.log(s0)
            grad -= xbar
            info += (S2[k] - f * E2[k]) / s0 - np.outer(xbar, xbar)
            terms["dH"][k] += 1.0 / s0
            terms["dXH"][k] += xbar / s0
            terms["mh1"][k] += f / s0
            terms["mh2"][k] += xbar * f / s0
            terms["mh3"][k] += xbar / deaths
    return loglik, grad, info, terms


def _solve(info, grad, names):
    """Newton's step, or an error naming why there is none."""
    try:
        step = np.linalg.solve(info, grad)
    except np.linalg.LinAlgError:
        step = None
    if step is None or not np.all(np.isfinite(step)):
        raise ValueError(f"the information matrix of covariates {names} is singular: a "
                         "covariate is constant among the rows at risk, or collinear with "
                         "others.")
    return step


class FedFineGray(EstimatorWald, BaseEstimator):
    """The Fine-Gray model of one cause's subdistribution hazard over all sites' rows.

    R's ``finegray`` + weighted ``coxph`` on the pooled rows: the censoring
    weights come from the Kaplan-Meier curve of censoring of the pooled rows
    (not each site's), each site expands its own rows by it, and the weighted
    Cox model (Efron's ties) is fitted by Newton's method on the sites' summed
    risk-set sums. The coefficients, R's robust standard errors (each expanded
    row its own cluster, as R reports for the weighted fit) and the model-based
    ones equal R's on the pooled rows.

    Parameters
    ----------
    tol : float, default=1e-10
        Stop when Newton's step is below ``tol`` in every coefficient.
    max_rounds : int, default=50
    privacy : SecureAggregation or None, default=None
        ``SecureAggregation()``: each site's counts and risk-set sums leave it
        masked; only their sums are decoded (the meat's ``p x p`` sum too).
        Differential privacy is refused.

    Attributes
    ----------
    params_, coef_ : ndarray of shape (n_covariates,)
        Log subdistribution hazard ratios.
    cov_params_ : ndarray of shape (n_covariates, n_covariates)
        The robust covariance (R's ``fit$var``); ``bse_`` its standard errors.
    cov_params_naive_ : ndarray of shape (n_covariates, n_covariates)
        The inverse information (R's ``fit$naive.var``, its ``se(coef)``).
    param_names_ : list of str
    loglike_, loglike_null_ : float
        The weighted log partial likelihood at the fit and at 0 (R's ``loglik``).
    censoring_times_, censoring_curve_ : ndarray
        The pooled censoring curve ``G`` after each censoring time.
    event_times_ : ndarray
        The pooled event times of the cause.
    baseline_cumulative_hazard_ : ndarray
        The baseline cumulative subdistribution hazard at ``event_times_``
        (Efron's increments; :meth:`predict_cumulative_incidence`).
    n_iter_ : int
    n_clients_ : int
    cov_type : str
        ``"robust"``.
    """

    _summary_title = "Fine-Gray subdistribution hazards"
    _table_style = "lifelines"
    _parameter_constraints = {"tol": [Interval(Real, 0, None, closed="neither")],
                              "max_rounds": [Interval(Integral, 1, None, closed="left")],
                              "privacy": "no_validation"}
    cov_type = "robust"

    def __init__(self, tol=1e-10, *, max_rounds=50, privacy=None):
        self.tol = tol
        self.max_rounds = max_rounds
        self.privacy = privacy

    def _measure(self):
        return "hazard ratio"

    def _summary_info(self):
        return {"Model:": "FedFineGray (R finegray + coxph)", "Cause:":
                str(self.event_of_interest_), "Covariance:": "robust",
                "Sites:": str(self.n_clients_), "Log-Likelihood:": f"{self.loglike_:.4f}"}

    def fit(self, data, *, duration_col, event_col, event_of_interest, covariates=None,
            clients=None):
        """Fit the model.

        Parameters
        ----------
        data : FederatedDataset or DataFrame
            The sites' rows (a DataFrame needs ``clients``).
        duration_col, event_col : str
            Columns of follow-up times and of event codes (0 censored, 1, 2,
            ... the causes).
        event_of_interest : int
            The cause whose subdistribution hazard is modelled.
        covariates : list of str, default=None
            Numeric covariate columns; ``None``: every other column (but a
            ``clients`` column name).
        clients : str or array-like of shape (n_samples,), default=None

        Returns
        -------
        self : FedFineGray

        Raises
        ------
        ValueError
            Bad columns or codes (the message names them), no covariate,
            no event of the cause, differential privacy.
        SiteRefusal
            A site that does not allow event times (``allow_event_times``),
            or whose policy does not release the per-time sums in the clear
            (``finer_sums``; ``privacy=SecureAggregation()`` masks them).
        """
        self._validate_params()
        data = _dataset(data, clients)
        _check_columns(data, duration=duration_col, event=event_col)
        names = self._covariates(data, covariates, duration_col, event_col, clients)
        cause = _cause(event_of_interest)
        _check_privacy(self.privacy, "FedFineGray")
        session = FederationSession.for_dataset(data)
        common = (duration_col, event_col, cause, names)
        try:
            public = self._public_curve(session, duration_col, event_col, cause)
            self._newton(session, common, public)
            meat = _summed(session, self.privacy, site_finegray_meat, *common,
                           self.coef_, *public, self._terms)["meat"]
        except SiteRefusal as exc:
            raise _refused(exc) from exc
        naive = self.cov_params_naive_
        self.cov_params_ = naive @ np.asarray(meat, dtype=float) @ naive
        self.param_names_, self.event_of_interest_ = names, cause
        self.n_clients_ = len(data)
        del self._terms
        return self

    @staticmethod
    def _covariates(data, covariates, duration_col, event_col, clients):
        if covariates is None:
            skip = {duration_col, event_col} | ({clients} if isinstance(clients, str) else set())
            covariates = [c for c in data.columns if c not in skip]
        covariates = [str(c) for c in covariates]
        if not covariates or len(covariates) > MAX_COVARIATES:
            raise ValueError(f"a Fine-Gray model needs 1 to {MAX_COVARIATES} covariate "
                             f"columns; got {covariates}.")
        _check_columns(data, **{f"covariate {c!r}": c for c in covariates})
        return covariates

    def _public_curve(self, session, time, event, cause):
        """``(event times of the cause, censoring times, G)`` from the pooled counts."""
        replies = session.per_site(site_competing_grid, time, event, True, phase="analysis")
        grid = np.unique(np.concatenate([[0.0]] + [np.asarray(r[k], dtype=float)
                                                   for r in replies
                                                   for k in ("times", "censorings")]))
        if grid.size > MAX_TIMES:
            raise ValueError(f"{grid.size} pooled event and censoring times; at most "
                             f"{MAX_TIMES}.")
        sums = _summed(session, self.privacy, site_competing_counts, time, event, cause, grid,
                       False)
        n, d, dj = (np.rint(np.asarray(sums[k], dtype=float)).astype(np.int64)
                    for k in ("at_risk", "events", "cause_events"))
        if not dj.any():
            raise ValueError(f"no event of cause {cause} in the data.")
        self.event_times_ = grid[dj > 0]
        self.censoring_times_, self.censoring_curve_ = censoring_curve(n, d, grid)
        return self.event_times_, self.censoring_times_, self.censoring_curve_

    def _newton(self, session, common, public):
        """Newton's method on the pooled weighted partial likelihood (concave: from 0 its
        steps raise it in every fit we tried; R halves a step that lowers it)."""
        coef = np.zeros(len(common[3]))
        for rounds in range(1, self.max_rounds + 2):
            sums = _summed(session, self.privacy, site_finegray_sums, *common, coef, *public)
            loglik, grad, info, terms = efron(sums)
            loglik += float(np.asarray(sums["xsum"]) @ coef)
            if rounds == 1:
                self.loglike_null_ = loglik
            step = _solve(info, grad, common[3])
            if np.max(np.abs(step)) < self.tol:
                break
            if rounds > self.max_rounds:
                warnings.warn(f"FedFineGray: Newton's method did not converge in "
                              f"{self.max_rounds} rounds (last step {np.max(np.abs(step)):.2g})"
                              "; raise max_rounds.", ConvergenceWarning, stacklevel=3)
                break
            coef = coef + step
        self.coef_ = self.params_ = coef
        self.loglike_, self.n_iter_ = loglik, rounds - 1
        self.cov_params_naive_ = np.linalg.inv(info)
        self.baseline_cumulative_hazard_ = np.cumsum(terms["dH"])
        self._terms = {k: v.ravel() for k, v in terms.items()}

    def predict_cumulative_incidence(self, X, times=None):
        """The cumulative incidence of the cause for covariate profiles: ``1 - exp(-exp(x'b)
        H0(t))``, ``H0`` the baseline cumulative subdistribution hazard (Efron's, as R's
        ``survfit`` of the weighted ``coxph``: ``1 - surv``).

        Parameters
        ----------
        X : DataFrame or array-like of shape (n_profiles, n_covariates)
            A DataFrame is read by ``param_names_``.
        times : array-like of float, default=None
            ``None``: the pooled event times of the cause (``event_times_``).

        Returns
        -------
        incidence : pandas.DataFrame
            One row per time, one column per profile.
        """
        check_is_fitted(self, "coef_")
        if hasattr(X, "columns"):
            missing = [c for c in self.param_names_ if c not in X.columns]
            if missing:
                raise ValueError(f"X lacks the model's covariates {missing}.")
            X = X[self.param_names_]
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.param_names_):
            raise ValueError(f"X has shape {X.shape}; the model has "
                             f"{len(self.param_names_)} covariates.")
        times = self.event_times_ if times is None else np.asarray(times, dtype=float).ravel()
        k = np.searchsorted(self.event_times_, times, side="right")
        H0 = np.concatenate([[0.0], self.baseline_cumulative_hazard_])[k]
        return pd.DataFrame(1.0 - np.exp(-np.outer(H0, np.exp(X @ self.coef_))),
                            index=pd.Index(times, name="time"))
