"""How ``skfed fit`` standardizes its features (the default; ``--no-scale`` turns it off).

Every feature column is centred on its mean over the training rows; numeric
columns are also divided by their standard deviation there, while the 0/1
columns that ``--categorical`` makes keep their unit. The statistics are
those of :class:`skfed.preprocessing.FedStandardScaler`: each site sends
four numbers per column, never a row. The model is fitted on the
standardized columns, so the penalty (``alpha`` or ``C``) acts on the
standardized coefficients; :meth:`FeatureScaler.original_coefficients` maps
them back to the CSV's units (the same predictions).

Why one-hot columns are not divided by their standard deviation: a
coefficient on a 0/1 column is the difference the category makes, in the
target's units, and every category is then penalized alike whatever its
frequency (dividing by ``sqrt(p (1 - p))`` would penalize a rare category's
effect less than a common one's). It is scikit-learn's usual
``ColumnTransformer([StandardScaler() on the numbers, OneHotEncoder() on the
text])``. Centring those columns changes only the intercept.

A :class:`~skfed.FederatedDataset` is standardized at each site by the row
step :func:`skfed.data.steps.standardize_site`; the fitted scaler is the
``scale`` step of the Pipeline ``skfed fit --output`` saves.
"""

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ..data import FederatedDataset
from ..federation.wire import wire_class
from ..data.steps import standardize_site
from ._scaler import FedStandardScaler


@wire_class(role="transformer")
class FeatureScaler(TransformerMixin, BaseEstimator):
    """Centre every column; divide all but the ``indicators`` by their standard deviation.

    Parameters
    ----------
    indicators : array-like of int, default=()
        Positions of the 0/1 one-hot columns: centred, not divided.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
        Pooled mean of each column over the rows ``fit`` saw.
    scale_ : ndarray of shape (n_features,)
        Pooled standard deviation (``FedStandardScaler.scale_``: 1 for a
        constant column), and 1 for the indicator columns.
    n_clients_ : int
        Number of sites whose summaries were merged.
    """

    #: the fitted state a site service receives with the constructor's parameters for
    #: ``transform`` (:mod:`skfed.sites.codec`; nothing else is accepted)
    _wire_attributes = ("mean_", "scale_", "n_clients_", "n_features_in_",
                        "feature_names_in_")

    def __init__(self, indicators=()):
        self.indicators = indicators

    def fit(self, X, y=None, clients=None):
        """Pooled means and standard deviations from per-site moments.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or FederatedDataset
            The rows: an array with ``clients``, or a
            :class:`~skfed.FederatedDataset` (the moments are computed at the
            sites).
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site of each row of an array ``X``.

        Returns
        -------
        self : object
        """
        scaler = FedStandardScaler().fit(X, clients=clients)
        self.mean_ = np.asarray(scaler.mean_, dtype=np.float64)
        scale = np.array(scaler.scale_, dtype=np.float64)
        scale[np.asarray(self.indicators, dtype=int)] = 1.0
        self.scale_ = scale
        self.n_clients_ = scaler.n_clients_
        self.n_features_in_ = scaler.n_features_in_
        if hasattr(scaler, "feature_names_in_"):
            self.feature_names_in_ = scaler.feature_names_in_
        return self

    def transform(self, X):
        """``(X - mean_) / scale_``; a FederatedDataset is standardized at each site.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or FederatedDataset
            The rows.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_features) or FederatedDataset
        """
        check_is_fitted(self)
        if isinstance(X, FederatedDataset):
            return X.apply(standardize_site, self.mean_, self.scale_)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return (X - self.mean_) / self.scale_

    def inverse_transform(self, Z):
        """``Z * scale_ + mean_``: standardized rows back in the original units.

        Parameters
        ----------
        Z : array-like of shape (n_samples, n_features)
            Standardized rows.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        return np.asarray(Z, dtype=np.float64) * self.scale_ + self.mean_

    def original_coefficients(self, coef, intercept):
        """The model on standardized columns, written on the original ones.

        Parameters
        ----------
        coef : array-like of shape (n_features,) or (n_outputs, n_features)
            The coefficients on the standardized columns.
        intercept : float or array-like of shape (n_outputs,)
            The intercept(s) there.

        Returns
        -------
        coef : ndarray
            ``coef / scale_``, of the shape of ``coef``.
        intercept : ndarray
            ``intercept - coef @ (mean_ / scale_)``, of the shape of ``intercept``.
        """
        coef = np.asarray(coef, dtype=np.float64)
        original = coef / self.scale_
        shift = original @ self.mean_
        return original, np.asarray(intercept, dtype=np.float64) - np.reshape(
            shift, np.shape(intercept))
