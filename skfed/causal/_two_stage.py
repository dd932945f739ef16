"""The two-stage causal analysis beside the one-stage one: each site's own IPW or AIPW
effect (its own propensity model), pooled by an inverse-variance meta-analysis.

The one-stage answer (:class:`FedIPW` / :class:`FedAIPW` over every site's rows: one
propensity model) is the pooled analysis; the two-stage answer is what a consortium
gets when each site analyses its own rows, the usual federated practice. A per-site
effect is one site's own sums in the clear, so it is refused where that is not
allowed: under secure aggregation (the server may learn only sums over sites), and at a
site service whose policy refuses plain sums (the site's refusal, with the reason).
"""

import warnings

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.base import clone

from ..exceptions import SiteRefusal
from ..stats import meta_analysis
from ._estimators import FedIPW, _FedWeighting
from ._solve import as_dataset


class CausalTwoStage:
    """The one-stage effect and the two-stage meta-analysis, side by side.

    Attributes
    ----------
    one_stage : FedIPW or FedAIPW
        Fitted on every site's rows (one propensity model).
    per_site : DataFrame
        Per site analysed: rows, treated rows, its effect and M-estimation
        standard error (its own propensity model).
    meta : MetaAnalysisResult
        The inverse-variance meta-analysis of the per-site effects.
    excluded : dict
        ``{site: reason}``: sites whose own analysis could not be fitted (an arm
        without rows, a propensity model that does not converge).
    table : DataFrame
        Rows ``one-stage``, ``two-stage (fixed effect)``, ``two-stage (random
        effects)``: estimate, standard error and interval; ``tau2`` and ``I2``
        of the meta-analysis as attributes.
    """

    def __init__(self, one_stage, per_site, meta, excluded, alpha):
        self.one_stage, self.per_site, self.meta = one_stage, per_site, meta
        self.excluded = excluded
        self.tau2, self.i2 = meta.tau2, meta.i2
        z = stats.norm.isf(alpha / 2)
        rows = {"one-stage": (one_stage.effect_, one_stage.std_err_),
                "two-stage (fixed effect)": (meta.mean_effect_fe, meta.sd_eff_w_fe),
                "two-stage (random effects)": (meta.mean_effect_re, meta.sd_eff_w_re)}
        lo, hi = f"lower {100 * (1 - alpha):g}%", f"upper {100 * (1 - alpha):g}%"
        self.table = pd.DataFrame({
            name: {"estimate": e, "std_err": s, lo: e - z * s, hi: e + z * s}
            for name, (e, s) in rows.items()}).T

    def __repr__(self):
        out = f"CausalTwoStage\n{self.table.to_string()}\ntau2 = {self.tau2:.4g}, " \
              f"I2 = {100 * self.i2:.1f}%"
        if self.excluded:
            out += "\nexcluded: " + "; ".join(f"{s}: {r}" for s, r in self.excluded.items())
        return out


def _check_estimator(estimator):
    if not isinstance(estimator, _FedWeighting):
        raise ValueError("compare_two_stage takes a FedIPW or FedAIPW (unfitted: its "
                         f"settings); got {type(estimator).__name__}.")
    if estimator.privacy is not None:
        raise ValueError("the two-stage comparison is refused under secure aggregation: a "
                         "per-site effect is that site's own sums, and masked sums let the "
                         "server learn sums over sites only. The one-stage fit is the "
                         "analysis there.")
    if isinstance(estimator, FedIPW) and estimator.propensity is not None:
        raise ValueError("the meta-analysis needs each site's variance: a propensity model "
                         "without estimating equations (propensity=) gives none.")


def _site_fit(estimator, dataset, site, a_name, y_name, names):
    """``(fitted, None)`` or ``(None, reason)``; a site's refusal is raised, saying why
    a per-site answer needs it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # extreme-weight counts
            est = clone(estimator).set_params(balance=False).fit(
                dataset.subset([site]), treatment=a_name, outcome=y_name, covariates=names)
    except SiteRefusal as exc:
        raise SiteRefusal(exc.site, exc.rule, f"{str(exc).rstrip('.')}. The two-stage "
                          "comparison needs each site's own effect (its sums alone); this "
                          "site's policy does not allow per-site answers") from exc
    except (ValueError, np.linalg.LinAlgError) as exc:
        return None, str(exc)
    if not np.isfinite(est.std_err_) or est.std_err_ <= 0:
        return None, "no finite standard error (an arm with too few rows)"
    return est, None


def compare_two_stage(estimator, X, treatment=None, y=None, *, clients=None, outcome=None,
                      covariates=None, method="reml", alpha=0.05):
    """The one-stage causal effect beside each site's own and their meta-analysis.

    Parameters
    ----------
    estimator : FedIPW or FedAIPW
        The analysis's settings (unfitted; cloned for each fit).
    X, treatment, y, clients, outcome, covariates
        As :meth:`FedIPW.fit`.
    method : {"reml", "ml", "dl", "pm"}, default="reml"
        The meta-analysis's between-site variance (:func:`skfed.stats.meta_analysis`).
    alpha : float, default=0.05

    Returns
    -------
    comparison : CausalTwoStage

    Raises
    ------
    ValueError
        Secure aggregation, a propensity model without a variance, or fewer than
        two sites with an analysis of their own.
    SiteRefusal
        A site service whose policy does not allow per-site answers.
    """
    _check_estimator(estimator)
    dataset, a_name, y_name, names = as_dataset(X, treatment, y, clients, outcome,
                                                covariates)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        one = clone(estimator).fit(dataset, treatment=a_name, outcome=y_name,
                                   covariates=names)
    rows, excluded = {}, {}
    for site in dataset.sites:
        est, reason = _site_fit(estimator, dataset, site, a_name, y_name, names)
        if est is None:
            excluded[site] = reason
            continue
        rows[site] = {"n": est.n_samples_, "treated": est.n_treated_,
                      "effect": est.effect_, "std_err": est.std_err_}
    if len(rows) < 2:
        raise ValueError(f"{len(rows)} site(s) have an analysis of their own; a "
                         f"meta-analysis needs two (excluded: {excluded}).")
    per_site = pd.DataFrame.from_dict(rows, orient="index")
    per_site.index.name = "site"
    meta = meta_analysis(per_site["effect"].to_numpy(), per_site["std_err"].to_numpy() ** 2,
                         names=list(per_site.index), method=method, alpha=alpha)
    return CausalTwoStage(one, per_site, meta, excluded, alpha)
