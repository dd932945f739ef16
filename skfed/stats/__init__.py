"""Federated descriptive and survival statistics: Table 1, cross-tables, Kaplan-Meier, log-rank.

``FedAalenJohansen`` estimates the cumulative incidence of one cause among competing
risks from the sites' pooled counts (``docs/survival.md``).

Every function but one works on a :class:`~skfed.data.FederatedDataset` (or a
DataFrame with ``clients=``): each site computes small summaries of its own
rows (counts, moments, counts at public times; :mod:`skfed.stats._site`)
and the server pools them. See ``docs/statistics.md``. ``meta_analysis``
pools one estimate and its variance per site (the second stage of a
two-stage analysis; ``docs/mixed-models.md``). ``anova_deviance`` compares nested
GLM fits from what they hold (their deviances and scales), as the estimators'
``wald_test`` tests linear hypotheses on their estimates.
"""

from ._competing import FedAalenJohansen
from ._crosstab import CrosstabResult, crosstab
from ._describe import DescribeResult, describe
from ._hypothesis import FewClustersWarning, WaldTestResult, anova_deviance
from ._meta_analysis import MetaAnalysisResult, meta_analysis
from ._survival import LogrankResult, kaplan_meier, logrank_test
from ._survival_summaries import median_survival, restricted_mean_survival_time
from ._survival_table import SurvivalTable

__all__ = ["describe", "crosstab", "kaplan_meier", "logrank_test", "median_survival",
           "restricted_mean_survival_time", "meta_analysis", "DescribeResult",
           "CrosstabResult", "LogrankResult", "SurvivalTable", "MetaAnalysisResult",
           "anova_deviance", "WaldTestResult", "FewClustersWarning", "FedAalenJohansen"]
