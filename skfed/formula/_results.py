"""The results of a formula fit: statsmodels' and lifelines' names over a fitted estimator.

:class:`FormulaResults` holds the fitted skfed estimator, the design every
site built (plain data) and the rows each site used; it reads its tables with
the names statsmodels' results use (``params``, ``bse``, ``pvalues``,
``conf_int()``, ``llf``...), indexed by the design's column names
(``Intercept``, ``C(sex)[T.M]``, ``age:C(sex)[T.M]``). :class:`GLMResults` and
:class:`CoxResults` add what their models have.
"""

import numpy as np
import pandas as pd

from ..data.site import SiteData
from ._design import complete_rows, design_matrix


class FormulaResults:
    """A fitted formula model (see :func:`skfed.formula.glm`, :func:`skfed.formula.coxph`).

    Attributes
    ----------
    formula : str
    estimator : estimator
        The fitted skfed estimator (its own ``summary()``, ``history_``...).
    design : dict
        The design the sites built (JSON-safe: the factors with their levels and
        knots, the columns with their names).
    rows_by_site : pandas.Series
        The complete rows each site used.
    setup_ledger : dict
        Rounds and bytes of the exchanges that built the design (levels, knots).
    """

    def __init__(self, formula, estimator, design, rows_by_site, setup_ledger):
        self.formula = formula
        self.estimator = estimator
        self.design = design
        self.rows_by_site = rows_by_site
        self.setup_ledger = setup_ledger

    @property
    def param_names(self):
        """The parameters' names, as statsmodels writes them."""
        return list(self.estimator.param_names_)

    def _series(self, values):
        return pd.Series(np.asarray(values, dtype=float), index=self.param_names)

    @property
    def params(self):
        """The estimates (``pandas.Series`` by parameter name)."""
        return self._series(self.estimator.params_)

    @property
    def bse(self):
        """Standard errors (``cov_type``)."""
        return self._series(self.estimator.bse_)

    @property
    def tvalues(self):
        """Wald z statistics."""
        return self._series(self.estimator.tvalues_)

    @property
    def pvalues(self):
        """Two-sided p-values of the z statistics."""
        return self._series(self.estimator.pvalues_)

    def conf_int(self, alpha=0.05, use_t=False):
        """Wald confidence intervals (columns ``0`` and ``1``, as statsmodels').

        Parameters
        ----------
        alpha : float, default=0.05
        use_t : bool, default=False
            Student's t quantiles (the estimator's ``conf_int(use_t=True)``: for
            cluster-robust errors from few sites).

        Returns
        -------
        pandas.DataFrame
        """
        bounds = (self.estimator.conf_int(alpha, use_t=True) if use_t
                  else self.estimator.conf_int(alpha))
        return pd.DataFrame(bounds, index=self.param_names)

    def cov_params(self):
        """The estimates' covariance (``pandas.DataFrame``)."""
        names = self.param_names
        return pd.DataFrame(self.estimator.cov_params_, index=names, columns=names)

    def summary(self, *args, **kwargs):
        """The estimator's regression table, rows named as statsmodels'.

        Parameters
        ----------
        *args, **kwargs
            Passed to the estimator's ``summary`` (``alpha``; ``exponentiate``
            for a GLM).

        Returns
        -------
        pandas.DataFrame
        """
        return self.estimator.summary(*args, **kwargs)

    def __repr__(self):
        return (f"{type(self).__name__}({self.formula!r}, {len(self.rows_by_site)} sites, "
                f"{int(self.rows_by_site.sum())} rows)")

    def _design_of(self, data, offset=None):
        """The design matrix of the complete rows of ``data`` (a DataFrame), their index,
        and their offset."""
        if not isinstance(data, pd.DataFrame):
            raise TypeError("predict takes a DataFrame of new rows (the sites' own rows "
                            "stay at the sites).")
        design = dict(self.design, response=None, offset=None, keep=[], weights=None)
        site = SiteData("new rows", data.reset_index(drop=True),
                        meta={"row_ids": np.arange(len(data))},
                        offset=None if offset is None else np.asarray(offset, dtype=float))
        site = complete_rows(site, design)
        return (design_matrix(site, design).to_numpy(), data.index[site.meta["row_ids"]],
                site.offset)


class GLMResults(FormulaResults):
    """A fitted GLM formula (:func:`skfed.formula.glm`), with statsmodels' names.

    Attributes
    ----------
    family : str
    link : str
    """

    def __init__(self, formula, estimator, design, rows_by_site, setup_ledger, family, link):
        super().__init__(formula, estimator, design, rows_by_site, setup_ledger)
        self.family, self.link = family, link

    @property
    def nobs(self):
        """The number of rows used (statsmodels' ``nobs``; frequency weights not counted)."""
        return float(self.rows_by_site.sum())

    @property
    def wnobs(self):
        """The weighted number of rows used (the sum of the frequency weights)."""
        return float(self.estimator._result("nobs"))

    @property
    def df_model(self):
        """Parameters less the intercept (statsmodels' ``df_model``)."""
        return len(self.param_names) - ("Intercept" in self.param_names)

    @property
    def df_resid(self):
        """``wnobs`` less the parameters."""
        return self.wnobs - len(self.param_names)

    @property
    def deviance(self):
        """The deviance at the fit."""
        return self.estimator.deviance_

    @property
    def null_deviance(self):
        """The deviance of the intercept-only model (offset kept)."""
        return self.estimator.null_deviance_

    @property
    def llf(self):
        """The log-likelihood (statsmodels' definition)."""
        return self.estimator.loglike_

    @property
    def aic(self):
        """``-2 llf + 2 p``."""
        return self.estimator.aic_

    @property
    def bic(self):
        """``-2 llf + p log(nobs)`` (statsmodels' ``bic_llf``)."""
        return self.estimator.bic_

    @property
    def scale(self):
        """The dispersion (1 for binomial and Poisson)."""
        return self.estimator.scale_

    @property
    def pearson_chi2(self):
        """Pearson's chi-square at the fit."""
        return self.estimator.pearson_chi2_

    def predict(self, data, offset=None):
        """The mean response of new rows (a DataFrame), as statsmodels' ``predict``.

        Rows missing a value the formula uses are left out (their index too).

        Parameters
        ----------
        data : pandas.DataFrame
        offset : array-like of shape (n_rows,), default=None

        Returns
        -------
        pandas.Series
        """
        X, index, offset = self._design_of(data, offset)
        eta = X @ np.asarray(self.estimator.params_)
        if offset is not None:
            eta = eta + offset
        mean = {"log": np.exp, "logit": lambda e: 1.0 / (1.0 + np.exp(-e))}.get(
            self.link, lambda e: e)
        return pd.Series(mean(eta), index=index)


class CoxResults(FormulaResults):
    """A fitted Cox formula (:func:`skfed.formula.coxph`), with lifelines' names too
    (``hazard_ratios_``, ``log_likelihood_``, ``summary``)."""

    @property
    def hazard_ratios_(self):
        """``exp(params)`` (lifelines' name)."""
        return np.exp(self.params)

    @property
    def llf(self):
        """The log partial likelihood at the fit."""
        return self.estimator.loglike_

    log_likelihood_ = llf

    @property
    def n_events(self):
        """Events in the rows used."""
        return self.estimator.n_events_

    def predict(self, data):
        """The risk scores (log partial hazards) of new rows (a DataFrame).

        Parameters
        ----------
        data : pandas.DataFrame

        Returns
        -------
        pandas.Series
        """
        X, index, _ = self._design_of(data)
        return pd.Series(X @ np.asarray(self.estimator.coef_), index=index)
