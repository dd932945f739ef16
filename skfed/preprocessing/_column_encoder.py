"""The second step of the Pipeline ``skfed fit --output`` saves: one-hot encode in place.

:class:`ColumnEncoder` takes the imputed columns and replaces each
``--categorical`` one by its one-hot columns (``name=value``, categories
pooled from the sites' sets by :class:`~skfed.preprocessing.FedOneHotEncoder`),
keeping the columns' order; the numeric columns pass through as floats.
"""

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..federation.wire import wire_class

from ._encoder import FedOneHotEncoder


@wire_class(role="transformer")
class ColumnEncoder(TransformerMixin, BaseEstimator):
    """One-hot encode the ``categorical`` columns (a :class:`~skfed.preprocessing.
    FedOneHotEncoder`, categories pooled from the sites' sets) in place of each.

    Parameters
    ----------
    features : list of str
        The columns, in order.
    categorical : list of str, default=()
        Those replaced by their one-hot columns (``name=value``).

    Attributes
    ----------
    encoder_ : FedOneHotEncoder or None
        Fitted on the categorical columns (``handle_unknown="ignore"``: a
        category the sites never held encodes as all zeros).
    feature_names_out_ : list of str
        The output columns.
    indicators_ : list of int
        Positions of the one-hot columns in the output.
    n_features_in_ : int
        Number of input columns.
    """

    #: the fitted state a site service receives with the constructor's parameters for
    #: ``transform`` (:mod:`skfed.sites.codec`; nothing else is accepted)
    _wire_attributes = ("encoder_", "feature_names_out_", "indicators_", "n_features_in_")

    def __init__(self, features, categorical=()):
        self.features = features
        self.categorical = categorical

    def fit(self, X, y=None, clients=None):
        """Pool the categories of the rows ``X`` (a DataFrame) held by ``clients``.

        Parameters
        ----------
        X : DataFrame
            The columns ``features``.
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site of each row.

        Returns
        -------
        self : object
        """
        cats = [f for f in self.features if f in self.categorical]
        self.encoder_ = None
        names, indicators = [], []
        levels = {}
        if cats:
            self.encoder_ = FedOneHotEncoder(handle_unknown="ignore").fit(
                X[cats].to_numpy(dtype=object), clients=clients)
            levels = dict(zip(cats, self.encoder_.categories_))
        for name in self.features:
            if name in levels:
                for level in levels[name]:
                    indicators.append(len(names))
                    names.append(f"{name}={level}")
            else:
                names.append(name)
        self.feature_names_out_, self.indicators_ = names, indicators
        self.n_features_in_ = len(self.features)
        return self

    def transform(self, X):
        """The numeric columns and the one-hot columns, as a float array.

        Parameters
        ----------
        X : DataFrame
            The columns ``features``.

        Returns
        -------
        Z : ndarray of shape (n_samples, len(feature_names_out_))
        """
        check_is_fitted(self, "n_features_in_")
        blocks, cats = [], [f for f in self.features if f in self.categorical]
        onehot = (None if self.encoder_ is None else
                  np.asarray(self.encoder_.transform(X[cats].to_numpy(dtype=object)),
                             dtype=np.float64))
        start = 0
        for name in self.features:
            if name in self.categorical:
                width = len(self.encoder_.categories_[cats.index(name)])
                blocks.append(onehot[:, start:start + width])
                start += width
            else:
                blocks.append(np.asarray(X[name], dtype=np.float64)[:, None])
        return np.hstack(blocks)

    def get_feature_names_out(self, input_features=None):
        """The output columns (``name=value`` for a one-hot column).

        Parameters
        ----------
        input_features : None
            Ignored.

        Returns
        -------
        names : ndarray of str
        """
        check_is_fitted(self, "n_features_in_")
        return np.asarray(self.feature_names_out_, dtype=object)


class ReferenceCodedEncoder(ColumnEncoder):
    """The one-hot step of a regression table (``skfed fit``'s ``--categorical``): each
    column without its reference level, the first of its sorted levels (statsmodels'
    treatment coding).

    A :class:`~skfed.preprocessing._column_encoder.ColumnEncoder` (categories
    pooled from the sites' sets) whose output leaves out the reference level's
    column: a row of that level has zeros in every column of its variable,
    and each coefficient compares a level with the reference. With an
    intercept (or a Cox model's baseline hazard) the full set of levels
    would be collinear with it, and the regression table would not exist.

    Parameters
    ----------
    features : list of str
        The columns, in order.
    categorical : list of str, default=()
        Those replaced by their one-hot columns (``name=value``), the
        reference level left out.

    Attributes
    ----------
    references_ : dict
        ``{column: its reference level}``.
    kept_ : list of int
        The columns of the full one-hot encoding kept.
    feature_names_out_, indicators_, n_features_in_, encoder_
        As :class:`~skfed.preprocessing._column_encoder.ColumnEncoder`'s, for
        the columns kept.
    """

    def fit(self, X, y=None, clients=None):
        """Pool the categories of the rows ``X`` (a DataFrame) held by ``clients``.

        Parameters
        ----------
        X : DataFrame
            The columns ``features``.
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site of each row.

        Returns
        -------
        self : object
        """
        super().fit(X, y, clients=clients)
        return self.lay_out()

    def lay_out(self):
        """Name the output columns from ``encoder_`` (fitted here, or at the sites by the
        remote form), each categorical column's reference level left out.

        Returns
        -------
        self : object
        """
        cats = [f for f in self.features if f in self.categorical]
        names, indicators, kept, references, position = [], [], [], {}, 0
        for name in self.features:
            if name not in self.categorical:
                kept.append(position)
                names.append(name)
                position += 1
                continue
            levels = self.encoder_.categories_[cats.index(name)]
            references[name] = levels[0]
            for k, level in enumerate(levels[1:], start=1):
                indicators.append(len(names))
                kept.append(position + k)
                names.append(f"{name}={level}")
            position += len(levels)
        self.feature_names_out_, self.indicators_ = names, indicators
        self.kept_, self.references_ = kept, references
        self.n_features_in_ = len(self.features)
        return self

    def transform(self, X):
        """The numeric columns and the one-hot columns but the reference levels'.

        Parameters
        ----------
        X : DataFrame
            The columns ``features``.

        Returns
        -------
        Z : ndarray of shape (n_samples, len(feature_names_out_))
        """
        return super().transform(X)[:, self.kept_]
