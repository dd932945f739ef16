"""Federated linear regression models."""

from ._coordinate import FedElasticNet, FedLasso

__all__ = ["FedElasticNet", "FedLasso"]
