"""Federated data: simulated client splits and synthetic federated problems."""

from ._simulate import SCHEMES, simulate_clients
from ._synthetic import (LASSO_CONFIGS, LOW_RANK_CONFIGS, make_federated_fmri_like,
                         make_federated_lasso, make_federated_low_rank)

__all__ = ["LOW_RANK_CONFIGS", "make_federated_low_rank", "simulate_clients", "make_federated_lasso",
           "make_federated_fmri_like", "SCHEMES", "LASSO_CONFIGS"]
