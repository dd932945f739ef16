"""Federated model selection: splits over sites, scores computed at the sites.

The analyst sees per-site and pooled scores, never a row: a fold trains on
some sites and is scored on the others (:class:`LeaveOneSiteOut`,
:class:`SiteKFold`), by functions run where the rows are.
"""

from . import _local_baseline  # noqa: F401  (declares evaluate.local_baseline)
from ._search import FederatedGridSearchCV
from ._split import LeaveOneSiteOut, SiteKFold
from ._validation import cross_validate_sites, site_scores

__all__ = ["LeaveOneSiteOut", "SiteKFold", "cross_validate_sites", "site_scores",
           "FederatedGridSearchCV"]
