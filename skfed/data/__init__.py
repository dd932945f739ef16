"""Federated data: rows that stay at their sites, reached only by functions run there.

:class:`FederatedDataset` is how data enters every skfed estimator,
transformer and model-selection tool. ``fit(X, y, clients=site)`` builds a
simulated one from in-memory arrays; :meth:`FederatedDataset.from_sources`
builds a resident one whose rows each site's own Dask worker loads and keeps.
"""

from .dataset import FederatedDataset, ResidentClient, as_dataset
from .site import SiteData, SiteError
from .sources import DATA_DIR_ENV

__all__ = ["FederatedDataset", "SiteData", "SiteError", "ResidentClient", "as_dataset",
           "DATA_DIR_ENV"]
