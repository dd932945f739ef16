"""The two-stage analysis of a multi-centre study, and its comparison with the one-stage model.

Stage one: each site fits its own least-squares model and releases its
coefficients and their covariance (:func:`~skfed.mixed._site.site_ols`).
Stage two: each coefficient is pooled across sites by a random-effects
meta-analysis (:func:`skfed.stats.meta_analysis`). This is what DataSHIELD's
``ds.lmerSLMA`` offers; :func:`compare_two_stage` puts it beside the exact
one-stage mixed model, the comparison a reviewer asks for.
"""

import pandas as pd

from ..federation.session import FederationSession
from ..stats import meta_analysis
from ._data import mixed_dataset
from ._linear import FedMixedLM
from ._site import site_ols


def two_stage(X, y=None, *, clients=None, fit_intercept=True, method="reml", alpha=0.05):
    """Per-site least squares, then a meta-analysis of each coefficient.

    Parameters
    ----------
    X : array-like or DataFrame of shape (n_samples, n_features), or FederatedDataset
    y : array-like of shape (n_samples,), default=None
    clients : array-like of shape (n_samples,), default=None
        The site of each row.
    fit_intercept : bool, default=True
    method : {"reml", "ml", "dl", "pm"}, default="reml"
        The between-site variance estimator (:func:`skfed.stats.meta_analysis`).
    alpha : float, default=0.05

    Returns
    -------
    results : dict
        ``{coefficient name: MetaAnalysisResult}``.
    ledger : dict
        The exchange with the sites (one per-site release of coefficients and
        their covariance).
    """
    dataset, _, names, _ = mixed_dataset(X, y, clients, None)
    design = {"groups": None, "re_columns": [], "fit_intercept": fit_intercept,
              "re_intercept": True, "min_group_rows": 1}
    session = FederationSession.for_dataset(dataset)
    replies = session.per_site(site_ols, design, phase="analysis")
    fe_names = (["Intercept"] if fit_intercept else []) + names
    results = {name: meta_analysis([r["coef"][j] for r in replies],
                                   [r["cov"][j, j] for r in replies], names=dataset.sites,
                                   method=method, alpha=alpha)
               for j, name in enumerate(fe_names)}
    return results, session.ledger.as_dict()


class TwoStageComparison:
    """The one-stage mixed model and the two-stage meta-analysis, side by side.

    Parameters
    ----------
    one_stage : FedMixedLM
        Fitted, groups = sites.
    two_stage : dict
        ``{coefficient name: MetaAnalysisResult}``.

    Attributes
    ----------
    table : pandas.DataFrame
        Per fixed effect: the one-stage estimate and standard error, the
        two-stage random-effects estimate and standard error, the two-stage
        ``tau2`` and ``I2``, and the difference of the two estimates.
    """

    def __init__(self, one_stage, two_stage):
        self.one_stage, self.two_stage = one_stage, two_stage
        res = one_stage.results_
        rows = {}
        for name, meta in two_stage.items():
            rows[name] = {"one_stage": res.fe_params[name], "one_stage_se": res.bse_fe[name],
                          "two_stage": meta.mean_effect_re, "two_stage_se": meta.sd_eff_w_re,
                          "tau2": meta.tau2, "i2": meta.i2,
                          "difference": meta.mean_effect_re - res.fe_params[name]}
        self.table = pd.DataFrame.from_dict(rows, orient="index")

    def __repr__(self):
        return f"TwoStageComparison\n{self.table.to_string()}"


def compare_two_stage(X, y=None, *, clients=None, re_columns=None, reml=True, method="reml",
                      alpha=0.05):
    """Fit the one-stage mixed model (random effects by site) and the two-stage
    meta-analysis on the same sites.

    With random slopes for every feature (``re_columns`` = all of them) the two
    analyses estimate the same population-average effects; with a random
    intercept only, the one-stage model assumes common slopes, which the
    two-stage ``tau2`` of each slope tests.

    Parameters
    ----------
    X : array-like or DataFrame of shape (n_samples, n_features), or FederatedDataset
    y : array-like of shape (n_samples,), default=None
    clients : array-like of shape (n_samples,), default=None
    re_columns : list of str or int, default=None
        Random slopes of the one-stage model (:class:`FedMixedLM`).
    reml : bool, default=True
        The one-stage model's criterion.
    method : {"reml", "ml", "dl", "pm"}, default="reml"
        The two-stage ``tau2`` estimator.
    alpha : float, default=0.05

    Returns
    -------
    comparison : TwoStageComparison
    """
    model = FedMixedLM(re_columns, reml=reml).fit(X, y, clients=clients)
    results, _ = two_stage(X, y, clients=clients, method=method, alpha=alpha)
    return TwoStageComparison(model, results)
