"""Federated descriptive and survival statistics: Table 1, cross-tables, Kaplan-Meier, log-rank.

Every function works on a :class:`~skfed.data.FederatedDataset` (or a
DataFrame with ``clients=``): each site computes small summaries of its own
rows (counts, moments, per-time counts of events; :mod:`skfed.stats._site`)
and the server pools them. See ``docs/statistics.md``.
"""

from ._describe import CrosstabResult, DescribeResult, crosstab, describe
from ._survival import LogrankResult, kaplan_meier, logrank_test

__all__ = ["describe", "crosstab", "kaplan_meier", "logrank_test", "DescribeResult",
           "CrosstabResult", "LogrankResult"]
