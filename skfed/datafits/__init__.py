"""Client losses of linear models (see :mod:`skfed.datafits.base`)."""

from .base import ClientObjective, Datafit
from .quadratic import Quadratic

__all__ = ["ClientObjective", "Datafit", "Quadratic"]
