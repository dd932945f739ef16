"""The pass at a fitted :class:`~skfed.survival.FedCoxPH`'s optimum and its results:
information, log partial likelihoods, sandwich meats, the baseline's sums, and the
regression table read from them."""

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..datafits.cox import baseline_increments, cox_terms
from ..linear_model._inference import InferenceError, _symmetric_inverse
from ..solvers.newton import unpack_upper
from ..solvers.risk_sets import client_risk_set_sums
from ..stats._hypothesis import warn_few_clusters
from ..stats._results import EstimatorWald
from ._site import client_cox_baseline, client_cox_inference, client_cox_residual_meat


class CoxInferenceMixin(EstimatorWald):
    """``_final_pass`` (run by ``_fit_federated`` while the sites are open) and the
    fitted inference it leaves: ``cov_params_``, ``loglike_``, ``summary()``...
    (the table and the tests written once in :mod:`skfed.stats._results`)."""

    _summary_title = "Cox Proportional Hazards Regression Results"
    _table_style = "lifelines"  # lifelines' summary columns

    def _measure(self):
        return "hazard ratio"

    def _summary_info(self):
        return {"Model:": "FedCoxPH", "Ties:": self.ties, "Covariance:": self.cov_type,
                "No. Events:": str(self.n_events_), "Sites:": str(self.n_clients_),
                "Log-Likelihood:": f"{self.loglike_:.4f}"}

    # -- the pass at the optimum (called by _fit_federated while the sites are open)
    def _final_pass(self, session, problem, solver, theta):
        from ..sites import SiteRefusal

        self._inference, self._inference_why = None, None
        self._baseline = self._baseline_why = None
        # one public scale of every masked sum: the inverse of the sites' total weight
        # (a site service checks it against the weight sums the sites signed)
        scale = 1.0 / max(float(problem.weight_total), 1.0)
        p = problem.layout.n_coef
        if self._by_site:
            terms = session.sum(client_cox_inference, theta, self.cov_type, scale=scale,
                                phase="inference")
            information = unpack_upper(np.asarray(terms["information"]), p)
            loglike, loglike_null = float(terms["loglike"]), float(terms["loglike_null"])
            meat = None if self.cov_type == "nonrobust" else unpack_upper(
                np.asarray(terms["meat"]), p)
            if self.privacy is None:  # each site's own: no sum to mask
                try:
                    replies = session.per_site(client_cox_baseline, theta, self.time_grid_,
                                               phase="inference")
                    self._baseline = {"by_site": True, "replies": replies}
                except SiteRefusal as refusal:  # the fit stands; predictions say why not
                    self._baseline_why = str(refusal)
        else:
            # the risk-set sums at the fit and at zero, each site's times the public
            # scale (masked under secure aggregation, which checks that scale)
            grid = self._fit_grid

            def pooled(theta, order):
                return session.sum(client_risk_set_sums, theta, grid, order, scale=scale,
                                   phase="inference")

            sums = pooled(theta, 2)
            value, _, information = cox_terms(sums, self.ties)
            null = pooled(np.zeros_like(theta), 0)
            loglike, loglike_null = -value, -cox_terms(null, self.ties, 0)[0]
            h, xbar = baseline_increments(sums)
            self._baseline = {"by_site": False, "grid": grid, "hazard": h}
            meat = None
            if self.cov_type != "nonrobust":
                terms = session.sum(client_cox_residual_meat, theta, grid, h, xbar,
                                    self.cov_type, scale=scale, phase="inference")
                meat = unpack_upper(np.asarray(terms["meat"]), p)
        names = self._covariate_names(p)
        why = None
        if self.alpha > 0 and self.l1_ratio > 0:
            why = (f"the L1 part of the penalty (l1_ratio={self.l1_ratio:g}) has no second "
                   "derivative at the zeros it makes, so there is no information matrix; "
                   "refit with l1_ratio=0 (ridge) or alpha=0 for standard errors")
        elif self.alpha > 0:
            # lifelines' standard errors of a penalized fit: the inverse of the
            # penalized information (the ridge adds W alpha on the diagonal)
            information = information + float(problem.weight_total) * self.alpha * np.eye(p)
        cov = None
        if why is None:
            inverse, why = _symmetric_inverse(information, names)
            if inverse is not None:
                cov = inverse if meat is None else inverse @ meat @ inverse
        self._inference = {"loglike": loglike, "loglike_null": loglike_null, "cov": cov,
                           "names": names}
        self._inference_why = why
        if cov is not None and self.cov_type == "cluster":
            warn_few_clusters(self, problem.n_clients, factor_applied=False)

    def _covariate_names(self, p):
        if hasattr(self, "feature_names_in_"):
            return [str(c) for c in self.feature_names_in_]
        return [f"x{k}" for k in range(p)]

    # -- fitted results ----------------------------------------------------------
    def _cov(self):
        check_is_fitted(self)
        info = getattr(self, "_inference", None)
        if info is None or info["cov"] is None:
            why = getattr(self, "_inference_why", None) or "no inference for this fit"
            raise InferenceError(f"FedCoxPH: no standard errors for this fit: "
                                 f"{why.rstrip('.')}.")
        return info["cov"]

    @property
    def cov_params_(self):
        """Covariance of ``coef_`` (``cov_type``)."""
        return self._cov()

    @property
    def params_(self):
        """The coefficients, as the Wald tests read them (``coef_``)."""
        check_is_fitted(self)
        return self.coef_

    @property
    def loglike_(self):
        """The log partial likelihood at the fit."""
        check_is_fitted(self)
        return self._inference["loglike"]

    @property
    def loglike_null_(self):
        """The log partial likelihood at ``coef_ = 0``."""
        check_is_fitted(self)
        return self._inference["loglike_null"]

    @property
    def param_names_(self):
        """Covariate names (``feature_names_in_`` or ``x0, x1, ...``)."""
        check_is_fitted(self)
        return list(self._inference["names"])
