"""FedStandardScaler: scikit-learn's StandardScaler, fitted from per-site moments."""

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.sparsefuncs import inplace_column_scale
from sklearn.utils.validation import (FLOAT_DTYPES, _check_sample_weight, check_array,
                                      check_is_fitted, validate_data)

from ..base import fit_all_or_nothing
from ..federation.wire import wire_class, wire_function
from ..data import FederatedDataset
from ._summaries import (_map_sites, merge_moments, moments_summary, sites_input,
                         transforms_sites)

_SPARSE_CENTER = ("Cannot center sparse matrices: pass `with_mean=False` instead (centring "
                  "would make the matrix dense).")


def _reduce_count(counts):
    """scikit-learn's convention: one number when every feature saw as many samples."""
    return counts[0] if counts.max() == counts.min() else counts


@wire_function  # the row check a site runs before a summary
def _checked_rows(scaler, X):
    """``fit``'s checks of the rows (run at each site for a FederatedDataset)."""
    return validate_data(scaler, X, accept_sparse=("csr", "csc"), dtype=FLOAT_DTYPES,
                         ensure_all_finite="allow-nan", reset=True)


@wire_class(role="transformer")
class FedStandardScaler(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Standardize features with statistics computed from per-site moments.

    The fitted ``mean_``, ``var_``, ``scale_`` and ``n_samples_seen_`` are
    those of :class:`sklearn.preprocessing.StandardScaler` fitted on the
    pooled rows (with the same ``sample_weight``), to rounding (about
    ``1e-12`` relative, and bit for bit with one client), but no row leaves
    its site: each site sends, per feature, the sum of its weights, the
    number of its non-missing values, its weighted mean and its weighted sum
    of squared deviations about that mean (``4 * n_features`` numbers, one
    round); the server merges them with Chan et al.'s parallel update (no
    raw sums of squares, so no cancellation on features far from zero).

    NaNs are ignored in ``fit`` (each feature has its own weight sum) and
    kept in ``transform``, as scikit-learn does. ``transform`` is row-wise:
    it runs at each site with the fitted parameters.

    Parameters
    ----------
    with_mean : bool, default=True
        Center the data (not possible for sparse input).
    with_std : bool, default=True
        Scale the data to unit variance.
    copy : bool, default=True
        If False, try to transform in place.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,) or None
        Pooled (weighted) mean; ``None`` when neither centring nor scaling.
    var_ : ndarray of shape (n_features,) or None
        Pooled (weighted) variance (``None`` if ``with_std=False``).
    scale_ : ndarray of shape (n_features,) or None
        ``sqrt(var_)``, 1 for (near-)constant features (``None`` if
        ``with_std=False``).
    n_samples_seen_ : int, float or ndarray of shape (n_features,)
        As scikit-learn: the number of samples (the sum of the sample
        weights when they are given) that each feature saw without NaN, a
        single number when every feature saw the same.
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
    sklearn.preprocessing.StandardScaler : the same transformer on pooled rows.
    FedSimpleImputer : federated imputation (put it before the scaler).

    Notes
    -----
    Passing the sites:

    - alone: ``FedStandardScaler().fit(X, clients=site)``;
    - in a :class:`~sklearn.pipeline.Pipeline` (metadata routing off):
      ``pipe.fit(X, y, fedstandardscaler__clients=site, fedlasso__clients=site)``;
    - with metadata routing on (``sklearn.set_config(enable_metadata_routing=True)``),
      ``clients`` is requested by default, so ``pipe.fit(X, y, clients=site)``
      and a :class:`~sklearn.compose.ColumnTransformer` route it here. A
      ColumnTransformer with routing off does not accept ``clients``.

    With in-memory arrays the statistics do not depend on the split (they
    equal the pooled ones for any ``clients``); ``clients`` says which
    computation ran, which matters when each site's rows stay on its machine.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.preprocessing import FedStandardScaler
    >>> X = np.array([[0.0, 10.0], [2.0, 11.0], [4.0, 30.0], [6.0, 31.0]])
    >>> site = np.array(["a", "a", "b", "b"])
    >>> scaler = FedStandardScaler().fit(X, clients=site)
    >>> scaler.mean_, scaler.n_clients_
    (array([ 3. , 20.5]), 2)
    >>> scaler.transform([[3.0, 20.5]])
    array([[0., 0.]])
    """

    _parameter_constraints: dict = {
        "with_mean": ["boolean"],
        "with_std": ["boolean"],
        "copy": ["boolean"],
    }

    __metadata_request__fit = {"clients": True}
    #: the fitted state a site service receives with the constructor's parameters for
    #: ``transform`` (:mod:`skfed.sites.codec`; nothing else is accepted)
    _wire_attributes = ("mean_", "var_", "scale_", "n_samples_seen_", "n_features_in_",
                        "feature_names_in_", "clients_", "n_clients_")

    def __init__(self, *, with_mean=True, with_std=True, copy=True):
        self.with_mean = with_mean
        self.with_std = with_std
        self.copy = copy

    @fit_all_or_nothing
    def fit(self, X, y=None, clients=None, sample_weight=None):
        """Compute the pooled mean and standard deviation from per-site moments.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The rows of every site (NaNs are ignored).
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site holding each row (any hashable labels); ``None``: one
            site holding every row.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row.

        Returns
        -------
        self : object
            Fitted scaler.
        """
        self._validate_params()
        if isinstance(X, FederatedDataset):
            X, clients = sites_input(self, X, clients, sample_weight, _checked_rows,
                                     weighted=True)
        else:
            X = _checked_rows(self, X)
        if sp.issparse(X) and self.with_mean:
            raise ValueError(_SPARSE_CENTER)
        sw = None
        if sample_weight is not None:
            sw = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                      ensure_non_negative=True)
        labels, summaries = _map_sites(moments_summary, X, clients, sw)
        pooled = merge_moments(summaries)

        if not self.with_mean and not self.with_std:
            self.mean_ = self.var_ = self.scale_ = None
            if sp.issparse(X):  # scikit-learn counts the weights there
                counts = pooled["count"] if sw is None else pooled["weight"]
            else:
                counts = pooled["count"] if sw is None else pooled["count"].astype(np.float64)
            self.n_samples_seen_ = _reduce_count(counts)
        else:
            self.n_samples_seen_ = _reduce_count(pooled["weight"])
            self.mean_ = pooled["mean"] if (self.with_std or not sp.issparse(X)) else None
            if self.with_std:
                self.var_ = pooled["var"]
                n, eps = self.n_samples_seen_, np.finfo(np.float64).eps
                # (near-)constant features, judged on the variance as scikit-learn does
                with np.errstate(invalid="ignore", over="ignore"):
                    constant = self.var_ <= n * eps * self.var_ + (n * self.mean_ * eps) ** 2
                scale = np.sqrt(self.var_)
                scale[constant] = 1.0
                self.scale_ = scale
            else:
                self.var_ = self.scale_ = None
        self.clients_ = labels
        self.n_clients_ = len(labels)
        return self

    @transforms_sites
    def transform(self, X, copy=None):
        """Center and scale (row-wise: runs at each site with the fitted parameters).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The rows to standardize (NaNs are kept).
        copy : bool, default=None
            Copy ``X`` (``None``: the ``copy`` parameter).

        Returns
        -------
        X_tr : {ndarray, sparse matrix} of shape (n_samples, n_features)
            The standardized rows.
        """
        check_is_fitted(self)
        copy = self.copy if copy is None else copy
        X = validate_data(self, X, reset=False, accept_sparse="csr", copy=copy,
                          dtype=FLOAT_DTYPES, force_writeable=True,
                          ensure_all_finite="allow-nan")
        if sp.issparse(X):
            if self.with_mean:
                raise ValueError(_SPARSE_CENTER)
            if self.scale_ is not None:
                inplace_column_scale(X, 1 / self.scale_)
            return X
        if self.with_mean:
            X -= self.mean_.astype(X.dtype, copy=False)
        if self.with_std:
            X /= self.scale_.astype(X.dtype, copy=False)
        return X

    @transforms_sites
    def inverse_transform(self, X, copy=None):
        """Undo the standardization.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Standardized rows.
        copy : bool, default=None
            Copy ``X`` (``None``: the ``copy`` parameter).

        Returns
        -------
        X_original : {ndarray, sparse matrix} of shape (n_samples, n_features)
            The rows in their original units.
        """
        check_is_fitted(self)
        copy = self.copy if copy is None else copy
        X = check_array(X, accept_sparse="csr", copy=copy, dtype=FLOAT_DTYPES,
                        force_writeable=True, ensure_all_finite="allow-nan")
        if sp.issparse(X):
            if self.with_mean:
                raise ValueError(_SPARSE_CENTER)
            if self.scale_ is not None:
                inplace_column_scale(X, self.scale_)
            return X
        if self.with_std:
            X *= self.scale_.astype(X.dtype, copy=False)
        if self.with_mean:
            X += self.mean_.astype(X.dtype, copy=False)
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.sparse = not self.with_mean
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
