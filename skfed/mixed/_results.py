"""A fitted linear mixed model: statsmodels' ``MixedLMResults`` quantities and summary.

Every number here is computed at the server from the sites' sums; the names,
the packing of ``params`` and the layout of :meth:`MixedLMResults.summary`
follow statsmodels' ``MixedLM`` so that a reader can put the two side by side.
"""

import numpy as np
import pandas as pd
from scipy import stats


class _FixedEffectsWald:
    """z statistics, p-values and Wald intervals of the fixed effects (``fe_params``
    and ``bse_fe``), as statsmodels' mixed models' results give them."""

    @property
    def tvalues(self):
        """z statistics of the fixed effects."""
        return self.fe_params / self.bse_fe

    @property
    def pvalues(self):
        """Two-sided normal p-values of the fixed effects."""
        return pd.Series(2.0 * stats.norm.sf(np.abs(self.tvalues)), index=self.fe_params.index)

    def conf_int(self, alpha=0.05):
        """Normal (Wald) confidence intervals of the fixed effects.

        Parameters
        ----------
        alpha : float, default=0.05

        Returns
        -------
        intervals : pandas.DataFrame
            Columns ``0`` (lower) and ``1`` (upper), one row per fixed effect.
        """
        half = stats.norm.isf(alpha / 2) * self.bse_fe
        return pd.DataFrame({0: self.fe_params - half, 1: self.fe_params + half})

    def _fixed_table(self, alpha):
        """``(rows, columns)``: the fixed effects' rows of the summary's table."""
        ci = self.conf_int(alpha)
        columns = ["Coef.", "Std.Err.", "z", "P>|z|", f"[{alpha / 2}", f"{1 - alpha / 2}]"]
        return np.column_stack([self.fe_params, self.bse_fe, self.tvalues, self.pvalues,
                                ci[0], ci[1]]), columns


class MixedLMResults(_FixedEffectsWald):
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
                 n_iter=0, message=""):
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
        k = cov_re.shape[0]
        names = list(cov_params.index)
        packed = self.cov_re_unscaled.to_numpy()[np.tril_indices(k)]
        self.params = pd.Series(np.concatenate([fe_params.to_numpy(), packed]), index=names)
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
    def summary_frame(self, alpha=0.05):
        """The summary's table as numbers: fixed effects (estimate, standard error,
        z, p, interval), then the random-effects (co)variances (estimate and
        standard error).

        Parameters
        ----------
        alpha : float, default=0.05

        Returns
        -------
        table : pandas.DataFrame
        """
        fixed, columns = self._fixed_table(alpha)
        k = self.cov_re.shape[0]
        variances = np.full((self.params.size - self.k_fe, 6), np.nan)
        variances[:, 0] = self.cov_re.to_numpy()[np.tril_indices(k)]
        variances[:, 1] = self.bse_re
        return pd.DataFrame(np.vstack([fixed, variances]), index=self.params.index,
                            columns=columns)

    def summary(self, alpha=0.05):
        """The regression table, laid out as statsmodels' ``MixedLMResults.summary()``.

        Parameters
        ----------
        alpha : float, default=0.05

        Returns
        -------
        summary : MixedLMSummary
            ``print(summary)`` shows the text; ``summary.info`` and
            ``summary.table`` hold its parts.
        """
        sizes = self.group_sizes
        info = {"Model:": "MixedLM", "No. Observations:": str(self.nobs),
                "No. Groups:": str(self.n_groups), "Min. group size:": f"{sizes.min():.0f}",
                "Max. group size:": f"{sizes.max():.0f}",
                "Mean group size:": f"{sizes.mean():.1f}",
                "Dependent Variable:": self.endog_name, "Method:": self.method,
                "Scale:": f"{self.scale:.4f}", "Log-Likelihood:": f"{self.llf:.4f}",
                "Converged:": "Yes" if self.converged else "No"}
        return MixedLMSummary("Mixed Linear Model Regression Results", info,
                              self.summary_frame(alpha))

    def __repr__(self):
        return (f"MixedLMResults({self.method}, {self.nobs} rows, {self.n_groups} groups, "
                f"llf={self.llf:.4f})")


class MixedLMSummary:
    """A mixed model's summary: a title, a two-column block of facts, a table.

    Parameters
    ----------
    title : str
    info : dict
        ``{label: text}``, shown in two columns.
    table : pandas.DataFrame
        Numbers; shown with three decimals, NaN as blank.
    """

    def __init__(self, title, info, table):
        self.title, self.info, self.table = title, dict(info), table

    def as_text(self):
        """The summary as text (statsmodels' ``summary2`` layout)."""
        pairs = list(self.info.items())
        half = -(-len(pairs) // 2)
        pairs += [("", "")] * (2 * half - len(pairs))
        info_rows = [[*pairs[i], *pairs[i + half]] for i in range(half)]
        table_rows = [[str(name)] + [f"{v:.3f}" if np.isfinite(v) else "" for v in row]
                      for name, row in zip(self.table.index, self.table.to_numpy())]
        header = [""] + [str(c) for c in self.table.columns]
        widths = [_width(info_rows), _width([header] + table_rows)]
        widest = max(widths)
        blocks = []
        for rows, width, head, align in ((info_rows, widths[0], None, "l"),
                                         (table_rows, widths[1], header, "r")):
            n_sep = max(len(rows[0]) - 2 if head else len(rows[0]) - 1, 1)
            pad = (widest - width) // n_sep
            first_pad = widest - width - n_sep * pad
            blocks.append(_render(rows, head, align, " " * (pad + 1), first_pad))
        title = self.title
        if len(title) < widest:
            title = " " * int(widest / 2 - len(title) / 2) + title
        rule = "=" * widest
        lines = [title, rule] + blocks[0] + [_dash_line(blocks[1][0])] + blocks[1] + [rule]
        return "\n".join(lines) + "\n"  # statsmodels ends with its (empty) notes' line

    def __str__(self):
        return self.as_text()

    def __repr__(self):
        return self.as_text()


def _width(rows):
    """A table's width with one space between columns."""
    cols = list(zip(*rows))
    return sum(max(len(c) for c in col) for col in cols) + len(cols) - 1


def _dash_line(line):
    return "-" * len(line)


def _render(rows, header, align, sep, first_pad):
    """Rows as text: first column left-aligned and padded by ``first_pad``, the
    others aligned as ``align`` (a header, centred, then a rule below it)."""
    rows = [[row[0] + " " * first_pad] + row[1:] for row in rows]
    if header is not None:
        header = [header[0] + " " * first_pad] + header[1:]
    every = rows + ([header] if header is not None else [])
    widths = [max(len(r[j]) for r in every) for j in range(len(rows[0]))]

    def line(cells, centred=False):
        out = [cells[0].ljust(widths[0])]
        for cell, w in zip(cells[1:], widths[1:]):
            out.append(cell.center(w) if centred else
                       cell.ljust(w) if align == "l" else cell.rjust(w))
        return sep.join(out)

    lines = [line(r) for r in rows]
    if header is not None:
        head = line(header, centred=True)
        lines = [head, "-" * len(head)] + lines
    return lines


class GLMMResults(_FixedEffectsWald):
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
        Their conditional standard deviations.
    endog_name : str, default="y"
    n_rounds : int, default=0

    Attributes
    ----------
    bse_fe : pandas.Series
        Standard errors of the fixed effects.
    bse_sigma : float
        Standard error of ``sigma``.
    """

    def __init__(self, *, fe_params, sigma, cov_params, llf, family, n_nodes, converged,
                 group_sizes, random_effects, random_effects_sd, endog_name="y", n_rounds=0):
        self.fe_params, self.sigma = fe_params, float(sigma)
        self._cov_params = cov_params
        self.llf, self.family, self.n_nodes = float(llf), family, int(n_nodes)
        self.converged, self.group_sizes = bool(converged), np.asarray(group_sizes)
        self.random_effects, self.random_effects_sd = random_effects, random_effects_sd
        self.endog_name, self.n_rounds = endog_name, int(n_rounds)
        variances = np.diag(cov_params.to_numpy())
        bse = np.sqrt(np.where(variances > 0, variances, np.nan))
        self.bse_fe = pd.Series(bse[:-1], index=fe_params.index)
        self.bse_sigma = float(bse[-1])

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
    def aic(self):
        """``-2 llf + 2 k`` (k: fixed effects and sigma)."""
        return float(-2.0 * self.llf + 2.0 * (self.fe_params.size + 1))

    @property
    def bic(self):
        """``-2 llf + log(n) k``."""
        return float(-2.0 * self.llf + np.log(self.nobs) * (self.fe_params.size + 1))

    def summary_frame(self, alpha=0.05):
        """Fixed effects (estimate, standard error, z, p, interval), then the
        random intercept's variance ``sigma^2`` with its delta-method standard error.

        Parameters
        ----------
        alpha : float, default=0.05

        Returns
        -------
        table : pandas.DataFrame
        """
        fixed, columns = self._fixed_table(alpha)
        variance = [self.sigma ** 2, 2.0 * self.sigma * self.bse_sigma] + [np.nan] * 4
        return pd.DataFrame(np.vstack([fixed, variance]),
                            index=list(self.fe_params.index) + ["Group Var"], columns=columns)

    def summary(self, alpha=0.05):
        """The regression table (statsmodels' layout).

        Parameters
        ----------
        alpha : float, default=0.05

        Returns
        -------
        summary : MixedLMSummary
        """
        sizes = self.group_sizes
        info = {"Model:": "GLMM", "Family:": self.family.capitalize(),
                "No. Observations:": str(self.nobs), "No. Groups:": str(self.n_groups),
                "Min. group size:": f"{sizes.min():.0f}",
                "Max. group size:": f"{sizes.max():.0f}",
                "Dependent Variable:": self.endog_name, "Method:": self.method,
                "Log-Likelihood:": f"{self.llf:.4f}", "AIC:": f"{self.aic:.4f}",
                "Rounds:": str(self.n_rounds), "Converged:": "Yes" if self.converged else "No"}
        return MixedLMSummary("Generalized Linear Mixed Model Results", info,
                              self.summary_frame(alpha))

    def __repr__(self):
        return (f"GLMMResults({self.family}, {self.method}, {self.nobs} rows, "
                f"{self.n_groups} groups, llf={self.llf:.4f})")
