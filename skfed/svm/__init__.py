"""Federated linear support vector machines."""

from ._classes import FedLinearSVC, FedSVM

__all__ = ["FedLinearSVC", "FedSVM"]
