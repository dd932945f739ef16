"""Generalized estimating equations for clusters nested in sites (a patient at one hospital).

:class:`FedGEE` equals statsmodels' ``GEE`` on the pooled rows (estimates, robust
and model-based standard errors, the working correlation's parameter, the
scale) from sums the sites return; see ``docs/gee.md``.
"""

from ._estimator import FedGEE
from ._results import GEEResults

__all__ = ["FedGEE", "GEEResults"]
