"""The first step of the Pipeline ``skfed fit --output`` saves: select and impute the raw columns.

:class:`ColumnImputer` takes rows like the input file's (``pandas.read_csv``
of it: extra columns such as the target or the site are ignored), keeps the
feature columns in the fit's order, reads them as the fit did (numbers as
floats, categories as text) and fills their missing values with
:class:`~skfed.preprocessing.FedSimpleImputer` statistics fitted from
per-site summaries of the training rows. On a site-resident
:class:`~skfed.FederatedDataset` the summaries are computed where the rows
are (:meth:`ColumnImputer.fit_sites`, through the row step
:func:`_site_columns`), and each site imputes its own rows
(:func:`skfed.data.steps.impute_site`).
"""

import math

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..federation.operations import Arg, row_step
from ..federation.wire import wire_class

from ._imputer import FedSimpleImputer


def _category_text(value):
    """A category as the CSV wrote it: ``pandas.read_csv`` reads a column of integer codes
    with gaps as floats (``2.0``); the fit saw ``"2"``."""
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return np.nan
        if value.is_integer():
            return str(int(value))
    return value if isinstance(value, str) else str(value)


@wire_class(role="transformer")
class ColumnImputer(TransformerMixin, BaseEstimator):
    """Select the feature columns of a raw frame and fill their missing values.

    Numeric columns with a :class:`~skfed.preprocessing.FedSimpleImputer` of
    ``strategy``, ``categorical`` ones with the most frequent category (also
    a ``FedSimpleImputer``); both fitted from per-site summaries.

    Parameters
    ----------
    features : list of str
        The feature columns, in the order of the fit; other columns of the
        input are ignored.
    categorical : list of str, default=()
        The categorical columns among ``features``.
    strategy : {"median", "mean", "most_frequent"} or None, default=None
        The numeric columns' statistic; ``None``: no imputation (a missing
        value then stops ``predict`` with an error naming it).

    Attributes
    ----------
    numeric_imputer_ : FedSimpleImputer or None
        Fitted on the numeric columns (``None`` without ``strategy`` or
        numeric columns).
    categorical_imputer_ : FedSimpleImputer or None
        Fitted on the categorical columns.
    feature_names_in_ : ndarray of str
        ``features``.
    n_features_in_ : int
        Number of features.
    """

    #: the fitted state a site service receives with the constructor's parameters for
    #: ``transform`` (:mod:`skfed.sites.codec`; nothing else is accepted)
    _wire_attributes = ("numeric_imputer_", "categorical_imputer_", "feature_names_in_",
                        "n_features_in_")

    def __init__(self, features, categorical=(), strategy=None):
        self.features = features
        self.categorical = categorical
        self.strategy = strategy

    def _parts(self):
        numeric = [f for f in self.features if f not in self.categorical]
        return numeric, [f for f in self.features if f in self.categorical]

    def fit(self, X, y=None, clients=None):
        """Fit the imputers on the rows ``X`` (a DataFrame) held by ``clients``.

        Parameters
        ----------
        X : DataFrame
            Rows with at least the ``features`` columns.
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site of each row.

        Returns
        -------
        self : object
        """
        numeric, cats = self._parts()
        frame = self._select(X)
        self.numeric_imputer_ = self.categorical_imputer_ = None
        if self.strategy is not None and numeric:
            self.numeric_imputer_ = FedSimpleImputer(strategy=self.strategy).fit(
                frame[numeric].to_numpy(dtype=float), clients=clients)
        if self.strategy is not None and cats:
            self.categorical_imputer_ = FedSimpleImputer(
                strategy="most_frequent", keep_empty_features=True).fit(
                frame[cats].to_numpy(dtype=object), clients=clients)
        self.feature_names_in_ = np.asarray(self.features, dtype=object)
        self.n_features_in_ = len(self.features)
        return self

    def fit_sites(self, data):
        """Fit the imputers on a :class:`~skfed.FederatedDataset` whose sites hold the
        feature columns as tables: the statistics come from per-site summaries computed
        where the rows are (``skfed fit --scheduler``).

        Parameters
        ----------
        data : FederatedDataset
            The sites' rows (tables with at least the ``features`` columns).

        Returns
        -------
        self : object
        """
        numeric, cats = self._parts()
        self.numeric_imputer_ = self.categorical_imputer_ = None
        if self.strategy is not None and numeric:
            self.numeric_imputer_ = FedSimpleImputer(strategy=self.strategy).fit(
                data.apply(_site_columns, self, numeric, "float"))
        if self.strategy is not None and cats:
            self.categorical_imputer_ = FedSimpleImputer(
                strategy="most_frequent", keep_empty_features=True).fit(
                data.apply(_site_columns, self, cats, "object"))
        self.feature_names_in_ = np.asarray(self.features, dtype=object)
        self.n_features_in_ = len(self.features)
        return self

    def _select(self, X):
        import pandas as pd

        if not hasattr(X, "columns"):
            raise ValueError("the saved skfed fit model takes a pandas DataFrame with the "
                             "input file's columns (e.g. pandas.read_csv of a file like it).")
        absent = [f for f in self.features if f not in X.columns]
        if absent:
            raise ValueError(f"the rows lack the feature column(s) {absent}; the model was "
                             f"fitted on {list(self.features)}.")
        out = {}
        for name in self.features:
            col = X[name]
            if name in self.categorical:
                out[name] = pd.Series([_category_text(v) for v in col], dtype=object,
                                      index=X.index)
            else:
                out[name] = pd.to_numeric(col, errors="raise").astype(float)
        return pd.DataFrame(out, index=X.index)

    def transform(self, X):
        """The feature columns of ``X``, in the fit's order, missing values filled.

        Parameters
        ----------
        X : DataFrame
            Rows with at least the ``features`` columns.

        Returns
        -------
        frame : DataFrame of shape (n_samples, n_features)
        """
        check_is_fitted(self, "n_features_in_")
        numeric, cats = self._parts()
        frame = self._select(X)
        if self.numeric_imputer_ is not None:
            frame[numeric] = self.numeric_imputer_.transform(frame[numeric].to_numpy(float))
        if self.categorical_imputer_ is not None:
            frame[cats] = self.categorical_imputer_.transform(
                frame[cats].to_numpy(dtype=object))
        return frame


@row_step("imputer_columns", arguments=(Arg("imputer", "object", role="transformer"),
                                        Arg("names", "names", most=1 << 16),
                                        Arg("dtype", "choice", choices=("float", "object"))),
          reads=lambda imputer, names, dtype: names)
def _site_columns(site, imputer, names, dtype):
    """At a site: the columns ``names`` of its rows, cleaned as ``imputer`` reads them.

    A declared row step (:mod:`skfed.federation.operations`): what
    :meth:`ColumnImputer.fit_sites` summarizes at each site.

    Parameters
    ----------
    site : SiteData
        The site's rows, with its features as a table.
    imputer : ColumnImputer
        Its ``features`` and ``categorical`` say how each column is read.
    names : list of str
        The columns kept.
    dtype : {"float", "object"}
        The kept columns' type.

    Returns
    -------
    SiteData
    """
    frame = imputer._select(site.X)[list(names)]
    return site.replace(X=frame.to_numpy(dtype=float if dtype == "float" else object))
