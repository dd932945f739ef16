"""A fitted linear mixed model: statsmodels' ``MixedLMResults`` quantities and summary.

Every number here is computed at the server from the sites' sums; the names,
the packing of ``params`` and the layout of :meth:`MixedLMResults.summary`
follow statsmodels' ``MixedLM`` so that a reader can put the two side by side.
"""

import numpy as np
import pandas as pd

from ..datafits.links import ratio_measure
from ..stats._results import Estimates, LabelledResults, Summary


class _FixedEffectsResults(LabelledResults):
    """The fixed effects' Wald inference (``tvalues``, ``pvalues``, ``conf_int()``,
    Wald tests, the tables: the results base's), as statsmodels' mixed models'
    results give them; the variance parameters are shown beside, not tested."""

    _table_style = "summary2"
    _summary_digits = 3

    def _estimates(self):
        k = self.fe_params.size
        cov = self._cov_params.to_numpy()[:k, :k]
        return Estimates(self.fe_params.to_numpy(dtype=float), cov,
                         [str(n) for n in self.fe_params.index])


class MixedLMResults(_FixedEffectsResults):
    """The results of :class:`~skfed.mixed.FedMixedLM` (statsmodels' names).

    Parameters
    ----------
    fe_params : pandas.Series
        Fixed effects, by name.
    cov_params : pandas.DataFrame
        ``inv(-H)``, ``H`` the Hessian of the scale-profiled (RE)ML
        log-likelihood in ``(fixed effects, lower triangle of cov_re / scale)``
        (statsmodels' ``cov_params()``).
    scale : float
        The residual variance.
    cov_re : pandas.DataFrame
        The random-effects covariance matrix.
    llf : float
        The (RE)ML log-likelihood at the estimate.
    reml : bool
    converged : bool
    vcomp : pandas.Series, default=None
        The variance components' variances (statsmodels' ``vcomp``), by name.
    vc_effects : pandas.Series, default=None
        The components' predicted effects (BLUPs), indexed by ``(group,
        component, level)`` (lme4's ``ranef`` of ``hospital:clinic``).
    group_sizes : ndarray of shape (n_groups,)
    random_effects : pandas.DataFrame
        The predicted random effects (BLUPs): one row per group, one column
        per random effect.
    random_effects_cov : ndarray of shape (n_groups, k_re, k_re)
        Their conditional covariances, in the rows' order.
    endog_name : str, default="y"
    n_iter : int, default=0
    message : str, default=""
        The optimiser's last word.

    Attributes
    ----------
    params : pandas.Series
        ``fe_params`` followed by the lower triangle of ``cov_re / scale``
        (statsmodels' packing: the variance parameters are unscaled).
    bse : pandas.Series
        ``sqrt(diag(cov_params))``.
    """

    def __init__(self, *, fe_params, cov_params, scale, cov_re, llf, reml, converged,
                 group_sizes, random_effects, random_effects_cov, endog_name="y",
                 n_iter=0, message="", vcomp=None, vc_effects=None):
        self.fe_params = fe_params
        self._cov_params = cov_params
        self.scale = float(scale)
        self.cov_re = cov_re
        self.cov_re_unscaled = cov_re / self.scale
        self.llf = float(llf)
        self.reml = bool(reml)
        self.method = "REML" if reml else "ML"
        self.converged = bool(converged)
        self.group_sizes = np.asarray(group_sizes)
        self.random_effects_frame = random_effects
        self._random_effects_cov = random_effects_cov
        self.endog_name = endog_name
        self.n_iter = int(n_iter)
        self.message = message
        self.vcomp = pd.Series(dtype=float) if vcomp is None else vcomp
        self.vc_effects = pd.Series(dtype=float) if vc_effects is None else vc_effects
        k = cov_re.shape[0]
        names = list(cov_params.index)
        packed = self.cov_re_unscaled.to_numpy()[np.tril_indices(k)]
        self.params = pd.Series(np.concatenate([fe_params.to_numpy(), packed,
                                                self.vcomp.to_numpy() / self.scale]),
                                index=names)
        variances = np.diag(cov_params.to_numpy())
        # a Hessian that is not negative definite (a boundary fit) has no standard errors
        self.bse = pd.Series(np.sqrt(np.where(variances > 0, variances, np.nan)), index=names)

    # -- predicted random effects (statsmodels' dicts, built when asked) -----
    @property
    def random_effects(self):
        """``{group: pandas.Series}``: each group's predicted random effects."""
        frame = self.random_effects_frame
        return {g: frame.iloc[i] for i, g in enumerate(frame.index)}

    @property
    def random_effects_cov(self):
        """``{group: pandas.DataFrame}``: their conditional covariances."""
        names = self.random_effects_frame.columns
        return {g: pd.DataFrame(v, index=names, columns=names)
                for g, v in zip(self.random_effects_frame.index, self._random_effects_cov)}

    # -- sizes --------------------------------------------------------------
    @property
    def nobs(self):
        """Rows used."""
        return int(self.group_sizes.sum())

    @property
    def n_groups(self):
        return int(self.group_sizes.size)

    @property
    def k_fe(self):
        return int(self.fe_params.size)

    # -- inference ----------------------------------------------------------
    def cov_params(self):
        """The covariance of ``params`` (statsmodels' ``cov_params()``)."""
        return self._cov_params.copy()

    @property
    def bse_fe(self):
        """Standard errors of the fixed effects."""
        return self.bse.iloc[:self.k_fe]

    @property
    def bse_re(self):
        """Standard errors of the entries of ``cov_re`` (lower triangle), as
        statsmodels reports them: ``sqrt(scale * diag(cov_params))``. The
        sampling distribution of a variance is skewed: prefer a profile interval."""
        return np.sqrt(self.scale) * self.bse.iloc[self.k_fe:]

    # -- information criteria -----------------------------------------------
    @property
    def df_modelwc(self):
        """Parameters counted by AIC and BIC: fixed effects, covariance entries, scale."""
        return int(self.params.size + 1)

    @property
    def aic(self):
        """Akaike's criterion (NaN under REML, as statsmodels: REML likelihoods of
        different fixed effects are not comparable)."""
        return np.nan if self.reml else float(-2.0 * (self.llf - self.df_modelwc))

    @property
    def bic(self):
        """Schwarz's criterion (NaN under REML)."""
        if self.reml:
            return np.nan
        return float(-2.0 * self.llf + np.log(self.nobs) * self.df_modelwc)

    # -- the table ----------------------------------------------------------
    def summary_frame(self, alpha=0.05, use_t=False, exponentiate=False):
        """The summary's table as numbers: fixed effects (estimate, standard error,
        z, p, interval), then the random-effects (co)variances (estimate and
        standard error).

        Parameters
        ----------
        alpha : float, default=0.05
        use_t : bool, default=False
            Not available (the fixed effects' tests are normal).
        exponentiate : bool, default=False
            The fixed effects as ratios (odds or rate ratios of a GLMM); the
            variance rows stay variances.

        Returns
        -------
        table : pandas.DataFrame
        """
        fixed = super().summary_frame(alpha, use_t, exponentiate)
        k = self.cov_re.shape[0]
        variances = np.full((self.params.size - self.k_fe, fixed.shape[1]), np.nan)
        variances[:, 0] = np.concatenate([self.cov_re.to_numpy()[np.tril_indices(k)],
                                          self.vcomp.to_numpy()])
        variances[:, 1] = self.bse_re
        return pd.DataFrame(np.vstack([fixed.to_numpy(), variances]), index=self.params.index,
                            columns=fixed.columns)

    # -- variance components ------------------------------------------------
    def variance_components(self):
        """The random intercepts' variances, standard deviations and ICCs, one row per
        level, then the residual (lme4's ``VarCorr`` with the ICC beside).

        The ICC of a level is the correlation of two rows sharing it: the group's
        variance over the total for the group, the group's plus the component's
        for a component (Snijders and Bosker's ICC of nested levels; for crossed
        components, two rows sharing the group and that level only). With random
        slopes the ICC depends on the covariates and is left out (NaN).

        Returns
        -------
        table : pandas.DataFrame
            Columns ``Variance``, ``Std.Dev.`` and ``ICC``.
        """
        k = self.cov_re.shape[0]
        names = [str(n) for n in self.cov_re.index] + [str(n) for n in self.vcomp.index]
        variances = np.concatenate([np.diag(self.cov_re.to_numpy()), self.vcomp.to_numpy(),
                                    [self.scale]])
        icc = np.full(variances.size, np.nan)
        if k <= 1:  # random intercepts only: the ICC is defined
            total = variances.sum()
            group = variances[0] if k else 0.0
            icc[:k] = group / total
            icc[k:-1] = (group + variances[k:-1]) / total
        return pd.DataFrame({"Variance": variances, "Std.Dev.": np.sqrt(variances),
                             "ICC": icc}, index=names + ["Residual"])

    def icc(self):
        """The intraclass correlation of each level (:meth:`variance_components`'
        ``ICC`` column without the residual)."""
        return self.variance_components()["ICC"].iloc[:-1]

    _summary_title = "Mixed Linear Model Regression Results"

    def _summary_info(self):
        sizes = self.group_sizes
        info = {"Model:": "MixedLM", "No. Observations:": str(self.nobs),
                "No. Groups:": str(self.n_groups), "Min. group size:": f"{sizes.min():.0f}",
                "Max. group size:": f"{sizes.max():.0f}",
                "Mean group size:": f"{sizes.mean():.1f}",
                "Dependent Variable:": self.endog_name, "Method:": self.method,
                "Scale:": f"{self.scale:.4f}", "Log-Likelihood:": f"{self.llf:.4f}",
                "Converged:": "Yes" if self.converged else "No"}
        if self.vcomp.size:  # nested levels: the ICC of each
            info.update({f"ICC {name}:": f"{value:.4f}"
                         for name, value in self.icc().dropna().items()})
        return info

    def __repr__(self):
        return (f"MixedLMResults({self.method}, {self.nobs} rows, {self.n_groups} groups, "
                f"llf={self.llf:.4f})")


#: a mixed model's summary is the results base's :class:`~skfed.stats._results.Summary`
MixedLMSummary = Summary


class GLMMResults(_FixedEffectsResults):
    """The results of :class:`~skfed.mixed.FedMixedGLM`.

    Parameters
    ----------
    fe_params : pandas.Series
        Fixed effects (link scale), by name.
    sigma : float
        Standard deviation of the random intercept.
    cov_params : pandas.DataFrame
        ``inv(-H)`` over ``(fixed effects, sigma)``, ``H`` the Hessian of the
        approximate marginal log-likelihood.
    llf : float
        The Laplace or adaptive Gauss-Hermite log-likelihood (normalised:
        binomial coefficients and ``log y!`` included, as lme4's Laplace
        ``logLik``).
    family : str
    n_nodes : int
        Quadrature nodes (1: Laplace).
    converged : bool
    group_sizes : ndarray of shape (n_groups,)
    random_effects : pandas.Series
        Each group's conditional mode of its intercept (lme4's ``ranef``).
    random_effects_sd : pandas.Series
        Their conditional standard deviations (DataFrames with random slopes:
        one column per random effect).
    endog_name : str, default="y"
    n_rounds : int, default=0
    cov_re : pandas.DataFrame, default=None
        With random slopes: the random effects' covariance matrix (``sigma`` is
        then the intercept's standard deviation, and ``cov_params`` is over the
        fixed effects and lme4's ``theta``, the packed relative Cholesky factor).

    Attributes
    ----------
    bse_fe : pandas.Series
        Standard errors of the fixed effects.
    bse_sigma : float
        Standard error of ``sigma``.
    """

    def __init__(self, *, fe_params, sigma, cov_params, llf, family, n_nodes, converged,
                 group_sizes, random_effects, random_effects_sd, endog_name="y", n_rounds=0,
                 cov_re=None):
        self.fe_params, self.sigma = fe_params, float(sigma)
        self._cov_params = cov_params
        self.llf, self.family, self.n_nodes = float(llf), family, int(n_nodes)
        self.converged, self.group_sizes = bool(converged), np.asarray(group_sizes)
        self.random_effects, self.random_effects_sd = random_effects, random_effects_sd
        self.endog_name, self.n_rounds = endog_name, int(n_rounds)
        variances = np.diag(cov_params.to_numpy())
        bse = np.sqrt(np.where(variances > 0, variances, np.nan))
        k = fe_params.size
        self.bse_fe = pd.Series(bse[:k], index=fe_params.index)
        # random slopes: cov_params is over (b, theta); the variances have no SE here
        self.cov_re = cov_re
        self.bse_sigma = float(bse[-1]) if cov_re is None else np.nan

    @property
    def method(self):
        return "Laplace" if self.n_nodes == 1 else f"AGQ({self.n_nodes})"

    @property
    def nobs(self):
        return int(self.group_sizes.sum())

    @property
    def n_groups(self):
        return int(self.group_sizes.size)

    def cov_params(self):
        """The covariance of ``(fixed effects, sigma)``."""
        return self._cov_params.copy()

    @property
    def _k(self):
        """Parameters: fixed effects and the random effects' (co)variances."""
        q = 1 if self.cov_re is None else self.cov_re.shape[0]
        return self.fe_params.size + q * (q + 1) // 2

    @property
    def aic(self):
        """``-2 llf + 2 k`` (k: fixed effects and the random effects' (co)variances)."""
        return float(-2.0 * self.llf + 2.0 * self._k)

    @property
    def bic(self):
        """``-2 llf + log(n) k``."""
        return float(-2.0 * self.llf + np.log(self.nobs) * self._k)

    def summary_frame(self, alpha=0.05, use_t=False, exponentiate=False):
        """Fixed effects (estimate, standard error, z, p, interval), then the
        random intercept's variance ``sigma^2`` with its delta-method standard error.

        Parameters
        ----------
        alpha : float, default=0.05
        use_t : bool, default=False
            Not available (the fixed effects' tests are normal).
        exponentiate : bool, default=False
            The fixed effects as ratios (odds or rate ratios of a GLMM); the
            variance rows stay variances.

        Returns
        -------
        table : pandas.DataFrame
        """
        fixed = super().summary_frame(alpha, use_t, exponentiate)
        if self.cov_re is not None:  # random slopes: the covariance entries, no SE
            names = [str(n) for n in self.cov_re.index]
            rows, cols = np.tril_indices(len(names))
            index = [f"{names[i]} Var" if i == j else f"{names[j]} x {names[i]} Cov"
                     for i, j in zip(rows, cols)]
            values = np.full((rows.size, fixed.shape[1]), np.nan)
            values[:, 0] = self.cov_re.to_numpy()[rows, cols]
            return pd.DataFrame(np.vstack([fixed.to_numpy(), values]),
                                index=list(self.fe_params.index) + index,
                                columns=fixed.columns)
        variance = [self.sigma ** 2, 2.0 * self.sigma * self.bse_sigma] + [np.nan] * 4
        return pd.DataFrame(np.vstack([fixed.to_numpy(), variance]),
                            index=list(self.fe_params.index) + ["Group Var"],
                            columns=fixed.columns)

    _summary_title = "Generalized Linear Mixed Model Results"

    def _measure(self):
        return ratio_measure("logit" if self.family == "binomial" else "log", self.family)

    def _summary_info(self):
        sizes = self.group_sizes
        return {"Model:": "GLMM", "Family:": self.family.capitalize(),
                "No. Observations:": str(self.nobs), "No. Groups:": str(self.n_groups),
                "Min. group size:": f"{sizes.min():.0f}",
                "Max. group size:": f"{sizes.max():.0f}",
                "Dependent Variable:": self.endog_name, "Method:": self.method,
                "Log-Likelihood:": f"{self.llf:.4f}", "AIC:": f"{self.aic:.4f}",
                "Rounds:": str(self.n_rounds), "Converged:": "Yes" if self.converged else "No"}

    def __repr__(self):
        return (f"GLMMResults({self.family}, {self.method}, {self.nobs} rows, "
                f"{self.n_groups} groups, llf={self.llf:.4f})")
