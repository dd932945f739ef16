"""Federated low-rank (nuclear-norm) regression."""

from ._low_rank import FedLowRank

__all__ = ["FedLowRank"]
