"""Federated data: simulated client splits and synthetic federated problems."""

from ._simulate import SCHEMES, simulate_clients
from ._synthetic import LASSO_CONFIGS, make_federated_lasso

__all__ = ["simulate_clients", "make_federated_lasso", "SCHEMES", "LASSO_CONFIGS"]
