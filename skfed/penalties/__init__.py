"""Penalties psi acting on the coefficient block (see :mod:`skfed.penalties.base`)."""

from .base import Penalty, soft_threshold
from .constraints import Constrained, L1Ball, L2Ball, project_l1_ball
from .norms import L1, L2, ElasticNet
from .nuclear import NuclearNorm

__all__ = [
    "Penalty", "soft_threshold", "Constrained", "L1", "L2", "ElasticNet", "L1Ball", "L2Ball",
    "NuclearNorm", "project_l1_ball",
]
