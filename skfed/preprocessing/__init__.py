"""Federated preprocessing: scikit-learn's transformers, fitted from per-site summaries.

Each transformer's ``fit`` reaches the rows only through small per-site
summaries (moments, counts, category sets, counts below a threshold) and
gives the statistics scikit-learn computes on the pooled rows;
``transform`` is row-wise and runs at each site. What each site sends:
``docs/preprocessing.md``.
"""

from . import _column_imputer  # noqa: F401  (declares its row step)
from ._encoder import FedOneHotEncoder
from ._imputer import FedSimpleImputer
from ._scaler import FedStandardScaler

__all__ = ["FedStandardScaler", "FedSimpleImputer", "FedOneHotEncoder"]
