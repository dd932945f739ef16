"""Federated linear models: regression, GLMs with inference and logistic regression."""

from ._coordinate import FedElasticNet, FedLasso
from ._glm import (FedGammaRegressor, FedLinearRegression, FedPoissonRegressor, FedRidge,
                   FedTweedieRegressor)
from ._inference import InferenceError, likelihood_ratio_test
from ._logistic import FedLogisticRegression

__all__ = ["FedElasticNet", "FedGammaRegressor", "FedLasso", "FedLinearRegression",
           "FedLogisticRegression", "FedPoissonRegressor", "FedRidge", "FedTweedieRegressor",
           "InferenceError", "likelihood_ratio_test"]
