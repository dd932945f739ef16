"""FedOneHotEncoder: scikit-learn's OneHotEncoder with categories pooled from the sites' sets."""

import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.preprocessing import OneHotEncoder
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import (_check_feature_names_in, check_array, check_is_fitted,
                                      validate_data)

from ..base import fit_all_or_nothing
from ..federation.wire import wire_class, wire_function
from ..data import FederatedDataset
from ._summaries import (_map_sites, categories_summary, merge_categories, sites_input,
                         transforms_sites, unknown_categories_summary)

_NAMES_WARNING = ".*feature names.*"


def _as_encoder_input(X):
    """A non-DataFrame ``X`` as scikit-learn's encoders read it (a list of strings: object)."""
    if hasattr(X, "iloc") and getattr(X, "ndim", 0) == 2:
        return X
    X_checked = check_array(X, dtype=None, ensure_all_finite="allow-nan")
    if not hasattr(X, "dtype") and np.issubdtype(X_checked.dtype, np.str_):
        return check_array(X, dtype=object, ensure_all_finite="allow-nan")
    return X_checked


@wire_function  # the row check a site runs before a summary
def _checked_rows(encoder, X):
    """``fit``'s checks of the rows (run at each site for a FederatedDataset)."""
    validate_data(encoder, X, reset=True, skip_check_array=True)
    return _as_encoder_input(X)


def _category_frame(categories, like):
    """A few rows holding every category of each column, in the container and dtypes of ``like``.

    Fitting scikit-learn's encoder on these rows with ``categories=`` fixed
    gives the pooled encoder: its output depends only on the categories.
    """
    n_rows = max(len(c) for c in categories) if categories else 1
    columns = [np.resize(np.asarray(c, dtype=object), n_rows) for c in categories]
    if hasattr(like, "iloc"):
        import pandas as pd

        data = {}
        for k, dtype in enumerate(like.dtypes):
            try:
                data[k] = pd.Series(columns[k], dtype=dtype)
            except (TypeError, ValueError):
                data[k] = pd.Series(columns[k], dtype=object)
        frame = pd.DataFrame(data)
        frame.columns = like.columns
        return frame
    out = np.empty((n_rows, len(categories)), dtype=like.dtype)
    for k, column in enumerate(columns):
        out[:, k] = column
    return out


#: scikit-learn's encoder inside a fitted FedOneHotEncoder travels with what its
#: ``transform`` reads (its class cannot declare it)
wire_class(OneHotEncoder, role="fitted-part", attributes=(
    "categories_", "drop_idx_", "n_features_in_", "feature_names_in_", "_infrequent_enabled",
    "_drop_idx_after_grouping", "_n_features_outs", "_default_to_infrequent_mappings",
    "_infrequent_indices"))


@wire_class(role="transformer")
class FedOneHotEncoder(TransformerMixin, BaseEstimator):
    """One-hot encode categorical features whose categories are pooled from the sites' sets.

    ``categories_`` is, per feature, the sorted union of the categories the
    sites hold (missing values, if any, last), exactly what
    :class:`sklearn.preprocessing.OneHotEncoder` finds on the pooled rows,
    including when a site lacks a category; ``transform`` and
    ``get_feature_names_out`` give the same output as that encoder. Each
    site sends, per feature, its set of categories (one round): **this
    reveals which categories a site holds** (not how often). With explicit
    ``categories`` and ``handle_unknown="error"``, each site checks its own
    rows and sends only the values outside the list (normally none).

    ``transform`` is row-wise (it runs at each site) and is delegated to a
    scikit-learn ``OneHotEncoder(categories=categories_, ...)`` fitted on
    nothing but the categories (``encoder_``).

    Parameters
    ----------
    categories : "auto" or list of array-like, default="auto"
        ``"auto"``: the union of the sites' categories. A list: the
        categories of each feature, as scikit-learn.
    drop : {"first", "if_binary"} or array-like of shape (n_features,), default=None
        Categories to drop, as scikit-learn.
    sparse_output : bool, default=False
        Return a sparse CSR matrix. **The default differs from
        scikit-learn's** (True): the dense output is what skfed's estimators
        and pandas output (``set_output(transform="pandas")``) need, and it
        mixes with the dense numeric features of a ColumnTransformer. The
        values are the same either way.
    dtype : number type, default=np.float64
        Dtype of the output.
    handle_unknown : {"error", "ignore", "warn"}, default="error"
        What ``transform`` does with a category not seen at any site:
        raise, encode as all zeros, or encode as all zeros with a warning.
    feature_name_combiner : "concat" or callable, default="concat"
        How output feature names are made, as scikit-learn.

    Attributes
    ----------
    categories_ : list of ndarray
        The categories of each feature (the sorted union over the sites).
    drop_idx_ : ndarray or None
        Index in ``categories_[i]`` of the dropped category of feature ``i``.
    encoder_ : sklearn.preprocessing.OneHotEncoder
        The scikit-learn encoder that transforms (fixed categories).
    n_clients_ : int
        Number of sites.
    clients_ : ndarray of shape (``n_clients_``,)
        The site labels.
    n_features_in_ : int
        Number of features seen in ``fit``.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of the features seen in ``fit`` (only for string column names).

    See Also
    --------
    sklearn.preprocessing.OneHotEncoder : the same encoder on pooled rows.

    Notes
    -----
    ``min_frequency`` and ``max_categories`` (infrequent categories) are not
    provided: they would need every site's count of every category.

    Passing the sites: ``fit(X, clients=site)``; in a Pipeline with routing
    off ``pipe.fit(X, y, fedonehotencoder__clients=site, ...)``; with
    ``sklearn.set_config(enable_metadata_routing=True)``, ``clients`` is
    requested by default, so ``pipe.fit(X, y, clients=site)`` and a
    ColumnTransformer route it here (a ColumnTransformer with routing off
    does not accept ``clients``).

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.preprocessing import FedOneHotEncoder
    >>> X = np.array([["paris"], ["lyon"], ["nice"], ["lyon"]], dtype=object)
    >>> site = [0, 0, 1, 1]
    >>> enc = FedOneHotEncoder().fit(X, clients=site)
    >>> enc.categories_
    [array(['lyon', 'nice', 'paris'], dtype=object)]
    >>> enc.transform([["nice"]])
    array([[0., 1., 0.]])
    >>> enc.get_feature_names_out()
    array(['x0_lyon', 'x0_nice', 'x0_paris'], dtype=object)
    """

    _parameter_constraints: dict = {
        "categories": [StrOptions({"auto"}), list],
        "drop": [StrOptions({"first", "if_binary"}), "array-like", None],
        "sparse_output": ["boolean"],
        "dtype": "no_validation",
        "handle_unknown": [StrOptions({"error", "ignore", "warn"})],
        "feature_name_combiner": [StrOptions({"concat"}), callable],
    }

    __metadata_request__fit = {"clients": True}
    #: the fitted state a site service receives with the constructor's parameters for
    #: ``transform`` (:mod:`skfed.sites.codec`; nothing else is accepted)
    _wire_attributes = ("encoder_", "drop_idx_", "categories_", "n_features_in_",
                        "feature_names_in_", "clients_", "n_clients_")

    def __init__(self, *, categories="auto", drop=None, sparse_output=False, dtype=np.float64,
                 handle_unknown="error", feature_name_combiner="concat"):
        self.categories = categories
        self.drop = drop
        self.sparse_output = sparse_output
        self.dtype = dtype
        self.handle_unknown = handle_unknown
        self.feature_name_combiner = feature_name_combiner

    def _sklearn_encoder(self, categories):
        return OneHotEncoder(categories=categories, drop=self.drop,
                             sparse_output=self.sparse_output, dtype=self.dtype,
                             handle_unknown=self.handle_unknown,
                             feature_name_combiner=self.feature_name_combiner)

    @fit_all_or_nothing
    def fit(self, X, y=None, clients=None):
        """Pool the sites' category sets.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The rows of every site (strings or numbers; each DataFrame
            column keeps its dtype).
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site holding each row (any hashable labels); ``None``: one
            site holding every row.

        Returns
        -------
        self : object
            Fitted encoder.
        """
        self._validate_params()
        if isinstance(X, FederatedDataset):
            X, clients = sites_input(self, X, clients, None, _checked_rows)
        else:
            X = _checked_rows(self, X)
        n_features = X.shape[1]
        self.n_features_in_ = n_features
        if self.categories == "auto":
            labels, summaries = _map_sites(categories_summary, X, clients, None)
            categories = merge_categories(summaries)
        else:
            if len(self.categories) != n_features:
                raise ValueError("Shape mismatch: if categories is an array, it has to be of "
                                 "shape (n_features,).")
            categories = [np.asarray(c) for c in self.categories]
            labels, unknown = _map_sites(unknown_categories_summary, X, clients, None,
                                         categories)
            if self.handle_unknown == "error":
                for i in range(n_features):
                    diff = list(dict.fromkeys(v for site in unknown for v in site[i]))
                    if diff:
                        try:
                            diff = sorted(diff)
                        except TypeError:
                            pass
                        raise ValueError(f"Found unknown categories {diff} in column {i} "
                                         "during fit")
        # scikit-learn's encoder, fitted on rows made of the categories only
        encoder = self._sklearn_encoder(categories)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NAMES_WARNING, category=UserWarning)
            encoder.fit(_category_frame(categories, X))
        self.encoder_ = encoder
        self.drop_idx_ = encoder.drop_idx_
        self.categories_ = categories if self.categories == "auto" else encoder.categories_
        self.clients_ = labels
        self.n_clients_ = len(labels)
        return self

    @transforms_sites
    def transform(self, X):
        """One-hot encode (row-wise: runs at each site with the fitted categories).

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The rows to encode.

        Returns
        -------
        X_out : {ndarray, sparse matrix} of shape (n_samples, n_encoded_features)
            The encoding (sparse CSR if ``sparse_output``).
        """
        check_is_fitted(self)
        X = _as_encoder_input(X)  # a 1-D X is refused here, as scikit-learn does
        validate_data(self, X, reset=False, skip_check_array=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NAMES_WARNING, category=UserWarning)
            return self.encoder_.transform(X)

    def inverse_transform(self, X):
        """Map encoded rows back to categories.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_encoded_features)
            Encoded rows.

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features)
            The categories (``None`` for an all-zero, unknown, encoding).
        """
        check_is_fitted(self)
        return self.encoder_.inverse_transform(X)

    def get_feature_names_out(self, input_features=None):
        """Names of the output features (``<feature>_<category>``).

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Input feature names (``feature_names_in_`` or ``x0, x1, ...`` by default).

        Returns
        -------
        feature_names_out : ndarray of str objects
            One name per output column.
        """
        check_is_fitted(self)
        input_features = _check_feature_names_in(self, input_features)
        return self.encoder_.get_feature_names_out(input_features)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.allow_nan = True
        tags.input_tags.string = True
        return tags

