"""Federated survival regression: Cox proportional hazards over sites.

:class:`FedCoxPH` fits Cox's model on rows held by several sites: each site
its own baseline hazard (``strata="site"``: only gradients and Hessians
leave it) or one baseline shared by all (risk-set sums at the pooled event
times, or on a coarsened time grid). Its target is scikit-survival's
structured array of (event, time) (:func:`survival_target`). Kaplan-Meier
and the log-rank test are in :mod:`skfed.stats`. :func:`proportional_hazard_test`
checks the proportional-hazards assumption of a fit from the sites' sums;
:class:`SurvivalPipeline` is a Pipeline ending in the model that predicts
survival curves from raw rows (what ``skfed fit --model cox --output``
saves). :class:`FedFineGray` fits the Fine-Gray model of one cause among
competing risks (R's ``finegray`` + weighted ``coxph``). See
``docs/survival.md``.
"""

from ._concordance import concordance_index
from ._cox import FedCoxPH
from ._finegray import FedFineGray
from ._ph_test import proportional_hazard_test
from ._pipeline import SurvivalPipeline
from ._target import survival_target

__all__ = ["FedCoxPH", "FedFineGray", "SurvivalPipeline", "concordance_index",
           "proportional_hazard_test", "survival_target"]
