"""Two-stage meta-analysis: pooling one estimate and its variance per site.

Stage one (at each site) fits the site's own model and releases an effect
estimate and its variance; stage two (here) pools them: the fixed-effect
(inverse-variance) estimate, and a random-effects estimate with the
between-site variance ``tau2`` by REML (metafor's default), ML,
DerSimonian-Laird or Paule-Mandel. The numbers equal statsmodels'
``combine_effects`` (DerSimonian-Laird and Paule-Mandel; statsmodels has no
REML) and metafor's ``rma`` (``tau2`` truncated at zero, as metafor does).
"""

import numpy as np
import pandas as pd
from scipy import optimize, stats

from .._messages import did_you_mean, closest, show
from ._results import Estimates, ModelResults, Term

#: spellings of the between-site variance estimators, by estimator
_METHODS = {"reml": "reml", "ml": "ml", "dl": "dl", "dersimonian-laird": "dl", "chi2": "dl",
            "pm": "pm", "paule-mandel": "pm", "iterated": "pm"}

_METHOD_NAMES = {"reml": "REML", "ml": "ML", "dl": "DerSimonian-Laird", "pm": "Paule-Mandel"}


def meta_analysis(estimates, variances=None, *, standard_errors=None, method="reml",
                  names=None, alpha=0.05, use_t=False):
    """Pool per-site estimates: fixed-effect and random-effects meta-analysis.

    Parameters
    ----------
    estimates : array-like of shape (k,), pandas.Series or dict
        One estimate per site (a Series' index or a dict's keys name the sites).
    variances : array-like of shape (k,), default=None
        Their variances (squared standard errors).
    standard_errors : array-like of shape (k,), default=None
        Their standard errors (give these or ``variances``).
    method : {"reml", "ml", "dl", "pm"}, default="reml"
        The between-site variance ``tau2``: restricted maximum likelihood
        (metafor's default), maximum likelihood, DerSimonian-Laird
        (``"chi2"``) or Paule-Mandel (``"iterated"``, statsmodels' default).
        Every estimate is truncated at zero.
    names : list of str, default=None
        Site names (default: the Series' index or dict's keys, else 0..k-1).
    alpha : float, default=0.05
        Level of the intervals.
    use_t : bool, default=False
        Intervals of the pooled estimates from Student's t with ``k - 1``
        degrees of freedom (the per-site intervals stay normal).

    Returns
    -------
    result : MetaAnalysisResult
    """
    names, y, v = _inputs(estimates, variances, standard_errors, names)
    key = _METHODS.get(str(method).lower())
    if key is None:
        raise ValueError(f"method={show(method)} is not one of {sorted(set(_METHOD_NAMES))}"
                         f"{did_you_mean(closest(str(method), list(_METHODS)))}.")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {show(alpha)}.")
    tau2 = _TAU2[key](y, v)
    return MetaAnalysisResult(y, v, tau2, names=names, method=key, alpha=alpha, use_t=use_t)


def _inputs(estimates, variances, standard_errors, names):
    if isinstance(estimates, dict):
        names = list(estimates) if names is None else names
        estimates = list(estimates.values())
    elif isinstance(estimates, pd.Series) and names is None:
        names = list(estimates.index)
    y = np.asarray(estimates, dtype=np.float64).ravel()
    if (variances is None) == (standard_errors is None):
        raise ValueError("give the estimates' variances or their standard_errors (one of "
                         "the two).")
    spread = np.asarray(variances if variances is not None else standard_errors,
                        dtype=np.float64).ravel()
    if spread.shape != y.shape:
        raise ValueError(f"{y.size} estimates but {spread.size} "
                         f"{'variances' if variances is not None else 'standard errors'}.")
    v = spread if variances is not None else spread ** 2
    if y.size < 2:
        raise ValueError(f"a meta-analysis needs at least two estimates; got {y.size}.")
    names = list(range(y.size)) if names is None else list(names)
    if len(names) != y.size:
        raise ValueError(f"{len(names)} names for {y.size} estimates.")
    bad = np.flatnonzero(~np.isfinite(y) | ~np.isfinite(v) | (v <= 0))
    if bad.size:
        j = bad[0]
        raise ValueError(f"site {show(names[j])}: estimate {show(y[j])} with variance "
                         f"{show(v[j])}; each site needs a finite estimate and a finite "
                         "positive variance.")
    return names, y, v


def _weighted_mean(y, w):
    return float(w @ y / w.sum())


def _q_statistic(y, v):
    """Cochran's Q about the fixed-effect mean."""
    w = 1.0 / v
    return float(w @ (y - _weighted_mean(y, w)) ** 2)


def _tau2_dl(y, v):
    """DerSimonian-Laird's moment estimate, truncated at zero."""
    w = 1.0 / v
    c = w.sum() - (w @ w) / w.sum()
    return max(0.0, (_q_statistic(y, v) - (y.size - 1)) / c)


def _generalised_q(tau2, y, v):
    w = 1.0 / (v + tau2)
    return float(w @ (y - _weighted_mean(y, w)) ** 2)


def _tau2_pm(y, v):
    """Paule-Mandel: the ``tau2 >= 0`` where the generalised Q equals ``k - 1``
    (the generalised Q decreases in ``tau2``, so the root is unique)."""
    df = y.size - 1
    if _generalised_q(0.0, y, v) <= df:
        return 0.0
    return _root(lambda t: _generalised_q(t, y, v) - df, y, v)


def _likelihood_score(tau2, y, v, restricted):
    """``d loglik / d tau2`` of the normal random-effects model (mean profiled out)."""
    w = 1.0 / (v + tau2)
    resid = y - _weighted_mean(y, w)
    score = (w * w) @ (resid * resid) - w.sum()
    if restricted:
        score += (w @ w) / w.sum()
    return 0.5 * float(score)


def _tau2_likelihood(y, v, restricted):
    """The (restricted) maximum-likelihood ``tau2``: zero where the likelihood
    decreases from zero, else the root of the score."""
    if _likelihood_score(0.0, y, v, restricted) <= 0:
        return 0.0
    return _root(lambda t: _likelihood_score(t, y, v, restricted), y, v)


def _root(fn, y, v):
    """The root of a function positive at zero and negative far out (bisection-safe)."""
    hi = max(float(np.var(y)), float(v.mean()), 1e-300)
    for _ in range(2000):
        if fn(hi) <= 0:
            break
        hi *= 2.0
    else:
        raise FloatingPointError("no sign change of the estimating equation for tau2.")
    return float(optimize.brentq(fn, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps,
                                 maxiter=500))


_TAU2 = {"dl": _tau2_dl, "pm": _tau2_pm,
         "reml": lambda y, v: _tau2_likelihood(y, v, True),
         "ml": lambda y, v: _tau2_likelihood(y, v, False)}


def restricted_loglike(tau2, estimates, variances):
    """The REML log-likelihood of the random-effects model at ``tau2`` (constants
    dropped): ``-1/2 [sum log(v + tau2) + log sum w + sum w (y - mu_w)^2]``.

    Parameters
    ----------
    tau2 : float
    estimates, variances : array-like of shape (k,)

    Returns
    -------
    value : float
    """
    y, v = np.asarray(estimates, dtype=float), np.asarray(variances, dtype=float)
    w = 1.0 / (v + tau2)
    resid = y - _weighted_mean(y, w)
    return -0.5 * float(np.log(v + tau2).sum() + np.log(w.sum()) + w @ (resid * resid))


class MetaAnalysisResult(ModelResults):
    """A fixed-effect and random-effects meta-analysis (statsmodels' names).

    The pooled estimates are its parameters for the results base (their Wald
    intervals and tests, the summary, the journal table): ``fixed effect``,
    ``random effect`` and their Hartung-Knapp (``wls``) forms.

    Parameters
    ----------
    estimates, variances : ndarray of shape (k,)
    tau2 : float
        The between-site variance.
    names : list, default=None
    method : str, default="reml"
    alpha : float, default=0.05
    use_t : bool, default=False

    Attributes
    ----------
    mean_effect_fe, sd_eff_w_fe : float
        The fixed-effect (inverse-variance) estimate and its standard error.
    mean_effect_re, sd_eff_w_re : float
        The random-effects estimate and its standard error.
    tau2 : float
    q : float
        Cochran's Q; ``q_pvalue`` its chi-square p-value on ``k - 1`` df.
    q_pvalue : float
    i2 : float
        ``max(0, (Q - df) / Q)``: the share of variation due to heterogeneity.
    h2 : float
        ``Q / df``.
    weights_rel_fe, weights_rel_re : ndarray of shape (k,)
        Each site's relative weight in the two pooled estimates.
    """

    def __init__(self, estimates, variances, tau2, *, names=None, method="reml", alpha=0.05,
                 use_t=False):
        self.eff, self.var_eff = np.asarray(estimates, float), np.asarray(variances, float)
        self.sd_eff = np.sqrt(self.var_eff)
        self.k = self.eff.size
        self.row_names = list(range(self.k)) if names is None else list(names)
        self.method, self.alpha, self.use_t = method, alpha, bool(use_t)
        self.tau2 = float(tau2)
        self.df_resid = self.k - 1
        w_fe, w_re = 1.0 / self.var_eff, 1.0 / (self.var_eff + self.tau2)
        self.weights_rel_fe, self.weights_rel_re = w_fe / w_fe.sum(), w_re / w_re.sum()
        self.mean_effect_fe = float(self.weights_rel_fe @ self.eff)
        self.mean_effect_re = float(self.weights_rel_re @ self.eff)
        self.sd_eff_w_fe = float(np.sqrt(1.0 / w_fe.sum()))
        self.sd_eff_w_re = float(np.sqrt(1.0 / w_re.sum()))
        self.q = float(w_fe @ (self.eff - self.mean_effect_fe) ** 2)
        self.q_pvalue = float(stats.chi2.sf(self.q, self.df_resid))
        self.h2 = self.q / self.df_resid
        self.i2 = max(0.0, (self.q - self.df_resid) / self.q) if self.q > 0 else 0.0
        # Hartung-Knapp-Sidik-Jonkman: the scale of the weighted regression estimated
        self.var_hksj_fe = float(self.weights_rel_fe @ (self.eff - self.mean_effect_fe) ** 2
                                 / self.df_resid)
        self.var_hksj_re = float(self.weights_rel_re @ (self.eff - self.mean_effect_re) ** 2
                                 / self.df_resid)

    # -- what the results base reads -------------------------------------------
    _summary_title = "Meta-analysis"

    def _estimates(self):
        rows = self._pooled_rows()
        se = np.array([v[1] for v in rows.values()])
        return Estimates(np.array([v[0] for v in rows.values()]), np.diag(se * se),
                         list(rows))

    def _df_inference(self, use_t):
        """Student's t on ``k - 1`` df with ``use_t`` (the result's by default)."""
        return float(self.df_resid) if (self.use_t if use_t is None else use_t) else None

    def _terms(self):
        return [Term(name, name, [(name, None)]) for name in self._pooled_rows()]

    def _summary_info(self):
        return {"Sites:": str(self.k), "tau2 method:": _METHOD_NAMES[self.method],
                "tau2:": f"{self.tau2:.4g}", "I2:": f"{100 * self.i2:.1f}%",
                "H2:": f"{self.h2:.3g}",
                "Q:": f"{self.q:.4g} on {self.df_resid} df (p = {self.q_pvalue:.3g})"}

    def conf_int(self, alpha=None, use_t=None):
        """Intervals of the pooled estimates.

        Parameters
        ----------
        alpha : float, default=None
            The result's ``alpha`` when ``None``.
        use_t : bool, default=None
            The result's ``use_t`` when ``None``.

        Returns
        -------
        intervals : dict
            ``{"fixed effect", "random effect", "fixed effect wls",
            "random effect wls": (lower, upper)}`` (the ``wls`` rows with the
            Hartung-Knapp scale).
        """
        intervals = self._wald(self.alpha if alpha is None else alpha, use_t)[4]
        return {name: tuple(bounds) for name, bounds in zip(self._pooled_rows(), intervals)}

    def _pooled_rows(self):
        return {"fixed effect": (self.mean_effect_fe, self.sd_eff_w_fe),
                "random effect": (self.mean_effect_re, self.sd_eff_w_re),
                "fixed effect wls": (self.mean_effect_fe, np.sqrt(self.var_hksj_fe)),
                "random effect wls": (self.mean_effect_re, np.sqrt(self.var_hksj_re))}

    def test_homogeneity(self):
        """Cochran's Q test that every site has the same effect.

        Returns
        -------
        statistic, pvalue : float
        """
        return self.q, self.q_pvalue

    def summary_frame(self, alpha=None, use_t=None, exponentiate=False):
        """Sites and pooled estimates in one table (statsmodels' ``summary_frame``).

        Parameters
        ----------
        alpha : float, default=None
        use_t : bool, default=None
        exponentiate : bool, default=False
            ``exp`` of the estimates and intervals (the effects are log ratios).

        Returns
        -------
        table : pandas.DataFrame
            Columns ``eff, sd_eff, ci_low, ci_upp, w_fe, w_re``; one row per site,
            then ``fixed effect``, ``random effect``, ``fixed effect wls`` and
            ``random effect wls``.
        """
        alpha = self.alpha if alpha is None else alpha
        z = stats.norm.isf(alpha / 2)
        sites = np.column_stack([self.eff, self.sd_eff, self.eff - z * self.sd_eff,
                                 self.eff + z * self.sd_eff, self.weights_rel_fe,
                                 self.weights_rel_re])
        intervals = self.conf_int(alpha, use_t)
        pooled = [[m, se, *intervals[name], 1.0 if "fixed" in name else np.nan,
                   np.nan if "fixed" in name else 1.0]
                  for name, (m, se) in self._pooled_rows().items()]
        table = pd.DataFrame(np.vstack([sites, pooled]),
                             index=self.row_names + list(self._pooled_rows()),
                             columns=["eff", "sd_eff", "ci_low", "ci_upp", "w_fe", "w_re"])
        if exponentiate:
            table[["eff", "ci_low", "ci_upp"]] = np.exp(table[["eff", "ci_low", "ci_upp"]])
        return table

    def summary(self, alpha=None, use_t=None, exponentiate=False):
        """Sites and pooled estimates, with ``tau2``, ``I2``, ``H2`` and Cochran's Q above.

        Parameters
        ----------
        alpha : float, default=None
        use_t : bool, default=None
        exponentiate : bool, default=False

        Returns
        -------
        summary : Summary
            :meth:`summary_frame` (a ``pandas.DataFrame``) with the facts;
            ``print(summary)`` shows both.
        """
        summary = super().summary(self.alpha if alpha is None else alpha, use_t, exponentiate)
        summary.title = (f"Meta-analysis of {self.k} sites "
                         f"(tau2 by {_METHOD_NAMES[self.method]})")
        return summary

    def __repr__(self):
        return (f"MetaAnalysisResult(k={self.k}, method={self.method!r}, "
                f"fe={self.mean_effect_fe:.6g}, re={self.mean_effect_re:.6g}, "
                f"tau2={self.tau2:.4g}, i2={self.i2:.3f})")

    def plot_forest(self, ax=None, alpha=None):
        """Forest plot: each site's estimate and interval (marker size by its
        random-effects weight), and the fixed- and random-effects diamonds.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, default=None
            Drawn on a new figure when ``None`` (needs ``skfed[plot]``).
        alpha : float, default=None

        Returns
        -------
        ax : matplotlib.axes.Axes
        """
        from ..plotting._style import journal_style, new_figure

        with journal_style():
            if ax is None:  # a figure of its own, laid out so that long site names fit
                _, (ax,) = new_figure(6, 0.4 * (self.k + 3) + 1)
            self._draw_forest(ax, alpha)
        return ax

    def _draw_forest(self, ax, alpha):
        frame = self.summary_frame(alpha)
        rows = np.arange(self.k + 2)[::-1]
        sites = frame.iloc[:self.k]
        ax.errorbar(sites["eff"], rows[:self.k], xerr=[sites["eff"] - sites["ci_low"],
                                                      sites["ci_upp"] - sites["eff"]],
                    fmt="none", ecolor="black", lw=1)
        ax.scatter(sites["eff"], rows[:self.k], s=30 + 300 * self.weights_rel_re,
                   marker="s", color="black", zorder=3)
        for row, name in zip(rows[self.k:], ("fixed effect", "random effect")):
            m, lo, hi = frame.loc[name, ["eff", "ci_low", "ci_upp"]]
            ax.fill([lo, m, hi, m], [row, row + 0.3, row, row - 0.3], color="tab:blue")
        ax.axvline(self.mean_effect_re, color="tab:blue", ls=":", lw=1)
        ax.set_yticks(rows)
        ax.set_yticklabels([str(n) for n in self.row_names] + ["fixed effect",
                                                               "random effect"])
        ax.set_xlabel("estimate")
        ax.set_title(f"tau2 = {self.tau2:.3g}, I2 = {100 * self.i2:.0f}%")
