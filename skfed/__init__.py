"""skfed: federated convex estimators for scikit-learn.

Fit the model you would fit on pooled data, on data that stays with its
clients, and get the pooled optimum with the evidence attached
(``history_``).
"""

from .data import FederatedDataset
from .discrete import FedMNLogit, FedOrderedModel
from .ensemble import FedHistGradientBoostingClassifier, FedHistGradientBoostingRegressor
from .gee import FedGEE
from .history import ConvergenceHistory
from .linear_model import (FedElasticNet, FedGammaRegressor, FedLasso, FedLinearRegression,
                           FedLogisticRegression, FedPoissonRegressor, FedRidge,
                           FedTweedieRegressor, likelihood_ratio_test)
from ._support import support_matrix
from .low_rank import FedLowRank
from .survival import FedCoxPH
# statsmodels' and lifelines' formulas over the sites (formulaic, their parser, is
# imported only when a formula is parsed)
from . import formula
# every package that declares site operations beside its functions: importing skfed
# registers the whole operation table (skfed.federation.operations), which a site
# service serves
from . import causal, gee, mixed, model_selection, preprocessing, stats  # noqa: F401
from .sites import service_operations  # noqa: F401  (the service's own sessions)
from .svm import FedLinearSVC, FedSVM

__version__ = "0.1.0.dev0"

__all__ = ["FedLasso", "FedElasticNet", "FedLogisticRegression", "FedLinearSVC", "FedSVM",
           "FedLowRank", "FedPoissonRegressor", "FedGammaRegressor", "FedTweedieRegressor",
           "FedLinearRegression", "FedRidge", "FedCoxPH", "likelihood_ratio_test",
           "FedOrderedModel", "FedMNLogit",
           "FedHistGradientBoostingClassifier", "FedHistGradientBoostingRegressor",
           "FedGEE", "FederatedDataset", "support_matrix", "ConvergenceHistory",
           "__version__"]
