"""Exact federated mixed models: random effects by site or by groups nested in sites.

:class:`FedMixedLM` fits a linear mixed model (REML or ML) from sums each
site sends once; the optimiser runs at the server and the estimates equal
statsmodels' ``MixedLM`` on the pooled rows. :class:`FedMixedGLM` fits a
binomial or Poisson GLMM (Laplace or adaptive Gauss-Hermite) in Newton
rounds whose sums the sites compute over their own groups.
:func:`two_stage` and :func:`compare_two_stage` give the two-stage
meta-analysis beside them; :func:`lrt_variance` tests a variance component
(boundary-corrected). See ``docs/mixed-models.md``.
"""

from ._data import BoundaryFitWarning, FewGroupsWarning
from ._glmm import FedMixedGLM
from ._linear import FedMixedLM
from ._lrt import VarianceLRT, lrt_variance
from ._results import GLMMResults, MixedLMResults, MixedLMSummary
from ._two_stage import TwoStageComparison, compare_two_stage, two_stage

__all__ = ["FedMixedLM", "FedMixedGLM", "MixedLMResults", "GLMMResults", "MixedLMSummary",
           "two_stage", "compare_two_stage", "TwoStageComparison", "BoundaryFitWarning",
           "FewGroupsWarning", "lrt_variance", "VarianceLRT"]
