"""Causal effects over sites, equal to the pooled analysis.

:class:`FedIPW` (inverse probability weighting: ATE, ATT, ATC, overlap weights)
and :class:`FedAIPW` (augmented IPW, doubly robust) fit one propensity model
over every site's rows and weight the outcomes; their variance is the sandwich
of the stacked estimating equations, whose bread and meat are pooled sums (the
scores stay at the sites). See ``docs/causal.md``.
"""

from ._estimators import FedAIPW, FedIPW, effect_scales
from ._survival import IPWSurvival, ipw_survival
from ._two_stage import CausalTwoStage, compare_two_stage

__all__ = ["FedIPW", "FedAIPW", "CausalTwoStage", "IPWSurvival", "compare_two_stage",
           "effect_scales", "ipw_survival"]
