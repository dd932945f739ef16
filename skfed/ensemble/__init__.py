"""Federated histogram gradient boosting: scikit-learn's trees on rows that stay at their sites."""

from ._gradient_boosting import FedHistGradientBoostingClassifier, FedHistGradientBoostingRegressor
from ._history import BoostingHistory

__all__ = ["FedHistGradientBoostingClassifier", "FedHistGradientBoostingRegressor",
           "BoostingHistory"]
