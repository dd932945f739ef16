"""Client losses of linear models (see :mod:`skfed.datafits.base`)."""

from .base import ClientObjective, Datafit
from .cox import CoxPartialLikelihood
from .glm import Gamma, Poisson, Tweedie
from .hinge import Hinge, SquaredHinge
from .logistic import Logistic, Multinomial
from .quadratic import Quadratic

__all__ = ["ClientObjective", "CoxPartialLikelihood", "Datafit", "Gamma", "Hinge", "Logistic", "Multinomial",
           "Poisson", "Quadratic", "SquaredHinge", "Tweedie"]
