"""Federated linear models: regression and logistic regression."""

from ._coordinate import FedElasticNet, FedLasso
from ._logistic import FedLogisticRegression

__all__ = ["FedElasticNet", "FedLasso", "FedLogisticRegression"]
