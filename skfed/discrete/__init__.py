"""Models of a categorical outcome over the sites: the proportional-odds model
(:class:`FedOrderedModel`, statsmodels' ``OrderedModel``) and the multinomial logit
(:class:`FedMNLogit`, statsmodels' ``MNLogit``), each fitted by Newton's method on the
pooled log-likelihood from sums the sites send (:mod:`skfed.discrete._site`)."""

from ._mnlogit import FedMNLogit, LevelSummary
from ._ordinal import FedOrderedModel

__all__ = ["FedOrderedModel", "FedMNLogit", "LevelSummary"]
