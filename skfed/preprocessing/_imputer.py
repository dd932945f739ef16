"""FedSimpleImputer: scikit-learn's SimpleImputer, fitted from per-site counts and sums.

The median is not a sum of per-site statistics; it is found exactly by a
federated bisection on counts (:func:`federated_median`).
"""

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils._mask import _get_mask
from sklearn.utils._missing import is_pandas_na, is_scalar_nan
from sklearn.utils._param_validation import MissingValues, StrOptions
from sklearn.utils.validation import (FLOAT_DTYPES, _check_feature_names_in, check_is_fitted,
                                      validate_data)

from .._messages import show
from ..base import fit_all_or_nothing
from ..federation.wire import wire_class, wire_function
from ..data import FederatedDataset
from ._summaries import (_map_sites, count_below_summary, count_summary, mean_summary,
                         merge_count_below, merge_counts, merge_means, merge_ranges,
                         merge_value_counts, range_summary, sites_input, transforms_sites,
                         value_counts_summary)

# 1 range round + at most 64 bisection rounds (float64 has 2**64 values) + 1 for the
# second middle value of an even count; the cap only guards against a bug.
_MAX_MEDIAN_ROUNDS = 80
_SIGN = np.int64(np.iinfo(np.int64).min)
_MAGNITUDE = np.int64(np.iinfo(np.int64).max)


def _to_ordered(x):
    """Map finite float64 to int64 preserving order (``-0.0`` and ``0.0`` both to 0)."""
    bits = np.asarray(x, dtype=np.float64).view(np.int64)
    return np.where(bits < 0, -(bits & _MAGNITUDE), bits)


def _from_ordered(o):
    bits = np.where(o < 0, (-o) | _SIGN, o)
    return bits.astype(np.int64).view(np.float64)


def _midpoint(lo, hi):
    """A float in ``[lo, hi)`` halving the number of float64 values between ``lo`` and ``hi``."""
    a, b = _to_ordered(lo), _to_ordered(hi)
    return _from_ordered((a >> 1) + (b >> 1) + (a & b & 1))  # floor((a + b) / 2), no overflow


def federated_median(map_sites, missing_values):
    """The exact median of every feature over all sites' non-missing values, by bisection.

    Round 1 asks each site for its non-missing count, minimum and maximum per
    feature. Each following round the server sends one threshold ``t`` per
    feature not yet pinned and each site answers, per such feature, how many
    of its values are ``<= t``, its largest value ``<= t`` and its smallest
    value ``> t`` (:func:`~skfed.preprocessing._summaries.count_below_summary`).
    With ``n`` pooled values the server tracks the ranks ``k = (n + 1) // 2``
    and ``n // 2 + 1``: a bracket ``[lo, hi]`` of data values holds each
    order statistic; ``c >= k`` moves ``hi`` to the largest value ``<= t``,
    ``c < k`` moves ``lo`` to the smallest value ``> t``, and ``c == k`` (or
    ``c == k - 1``) pins it to that value. ``t`` halves the float64 values
    between ``lo`` and ``hi`` (bisection on their bit patterns), so a
    feature is pinned after at most 64 rounds, plus one round for the
    second middle value of an even count.

    Parameters
    ----------
    map_sites : callable
        ``map_sites(fn, *args)`` returns ``fn(X_j, sw_j, *args)`` of every site.
    missing_values : scalar
        The entries to leave out.

    Returns
    -------
    median : ndarray of shape (n_features,)
        ``np.median`` of the pooled non-missing values (the mean of the two
        middle values for an even count), NaN for a feature without values.
    count : ndarray of shape (n_features,)
        Pooled number of non-missing values.
    n_rounds : int
        Round trips to the sites.
    n_samples : int
        Pooled number of rows.
    """
    ranges = merge_ranges(map_sites(range_summary, missing_values))
    n = ranges["count"]
    n_rounds = 1
    ranks = np.stack([(n + 1) // 2, n // 2 + 1])  # 1-based ranks of the two middle values
    lo = np.stack([ranges["min"], ranges["min"]])
    hi = np.stack([ranges["max"], ranges["max"]])
    done = (lo == hi) | (n == 0)
    while not done.all():
        if n_rounds >= _MAX_MEDIAN_ROUNDS:  # pragma: no cover - guards the invariant
            raise RuntimeError("the federated median did not converge; please report this.")
        t = np.full(n.shape, np.nan)
        first = ~done[0]
        t[first] = _midpoint(lo[0, first], hi[0, first])
        # the upper middle value is >= the lower one; asking at the lower one pins it
        second = done[0] & ~done[1]
        lo[1, second] = np.maximum(lo[1, second], lo[0, second])
        t[second] = lo[1, second]
        answer = merge_count_below(map_sites(count_below_summary, t, missing_values))
        n_rounds += 1
        c, below, above = answer["count"], answer["below"], answer["above"]
        for j in range(2):
            k, active = ranks[j], ~np.isnan(t) & ~done[j]
            # count(<= below) = c: below bounds the k-th value from above when c >= k
            ge = active & (c >= k)
            hi[j, ge] = np.minimum(hi[j, ge], below[ge])
            # nothing lies in (t, above): the k-th value is >= above when c < k
            lt = active & (c < k)
            lo[j, lt] = np.maximum(lo[j, lt], above[lt])
            # c == k: the k-th value is below; c == k - 1: it is above
            at_below, at_above = active & (c == k), active & (c == k - 1)
            lo[j, at_below] = hi[j, at_below] = below[at_below]
            lo[j, at_above] = hi[j, at_above] = above[at_above]
            done[j] |= lo[j] == hi[j]
    low, high = lo
    with np.errstate(invalid="ignore", over="ignore"):
        median = np.where(n % 2 == 1, low, (low + high) / 2)
    median[n == 0] = np.nan
    return median, n, n_rounds, ranges["n_samples"]


def _column_names(X):
    return list(X.columns) if hasattr(X, "columns") else None


@wire_function  # the row check a site runs before a summary
def _checked_rows(imputer, X):
    """``fit``'s checks of the rows (run at each site for a FederatedDataset)."""
    return imputer._validate_input(X, in_fit=True)


@wire_class(role="transformer")
class FedSimpleImputer(TransformerMixin, BaseEstimator):
    """Impute missing values with per-feature statistics computed from per-site summaries.

    The fitted ``statistics_`` are those of
    :class:`sklearn.impute.SimpleImputer` fitted on the pooled rows, and
    ``transform`` gives the same output. What each site sends in ``fit``:

    - ``"mean"``: per feature, its number of non-missing values and their
      sum (``1 + 2 * n_features`` numbers, one round).
    - ``"median"``: the median is not a sum of per-site statistics; it is
      computed **exactly** by a federated bisection on counts (see
      :func:`federated_median`): round 1 sends per feature the count, the
      minimum and the maximum; each later round sends, per feature not yet
      pinned, the number of values ``<= t`` for the server's threshold
      ``t`` plus the site's largest value ``<= t`` and smallest value
      ``> t`` (3 numbers). ``n_rounds_`` counts the round trips: at most
      66 (1 + 64 + 1) for float64 data, typically far fewer. The result is
      ``np.median`` of the pooled column, bit for bit (the mean of the two
      middle values for an even count). **What it reveals**: counts below
      thresholds near the median, and a few of the site's actual data values
      (its minimum and maximum, and order statistics around the median).
    - ``"most_frequent"``: per feature, each distinct value it holds and how
      often (as many numbers as distinct values: for a continuous feature,
      all its values); the server adds the counts, ties go to the smallest
      value, as scikit-learn.
    - ``"constant"``: per feature, its number of non-missing values (to
      know which features are empty).

    ``transform`` is row-wise and runs at each site with the fitted
    ``statistics_``. Sample weights are not accepted: scikit-learn's
    ``SimpleImputer.fit`` (1.9) takes none, and the statistics here are
    the same unweighted ones.

    Parameters
    ----------
    missing_values : int, float, str, np.nan, None or pandas.NA, default=np.nan
        The placeholder of missing values.
    strategy : {"mean", "median", "most_frequent", "constant"}, default="mean"
        The statistic that replaces the missing values of each feature
        (``"mean"`` and ``"median"`` need numeric data; ``"most_frequent"``
        and ``"constant"`` also take strings). Callables are not supported
        (a site cannot run an arbitrary statistic of the pooled column).
    fill_value : str or numerical value, default=None
        The value of ``"constant"`` (default 0 for numbers,
        ``"missing_value"`` for strings or objects).
    copy : bool, default=True
        If False, impute in place where possible.
    add_indicator : bool, default=False
        Append a missing-value indicator for every feature that had a
        missing value at some site in ``fit`` (as scikit-learn's
        ``MissingIndicator`` with ``features="missing-only"``).
    keep_empty_features : bool, default=False
        Keep the features with no observed value at any site (imputed with
        0, or ``fill_value`` for ``"constant"``); otherwise ``transform``
        drops them with a warning, as scikit-learn.

    Attributes
    ----------
    statistics_ : ndarray of shape (n_features,)
        The imputation value of each feature (NaN for a dropped empty feature).
    indicator_features_ : ndarray of int or None
        The features that get an indicator column (scikit-learn's
        ``indicator_.features_``); ``None`` when ``add_indicator=False``.
    n_rounds_ : int
        Round trips to the sites during ``fit`` (1 except for ``"median"``).
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
    sklearn.impute.SimpleImputer : the same imputer on pooled rows.
    FedStandardScaler : federated standardization.

    Notes
    -----
    Passing the sites: ``fit(X, clients=site)``; in a Pipeline with routing
    off ``pipe.fit(X, y, fedsimpleimputer__clients=site, ...)``; with
    ``sklearn.set_config(enable_metadata_routing=True)``, ``clients`` is
    requested by default, so ``pipe.fit(X, y, clients=site)`` and a
    ColumnTransformer route it here (a ColumnTransformer with routing off
    does not accept ``clients``).

    Sparse input is not supported.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.preprocessing import FedSimpleImputer
    >>> X = np.array([[1.0, np.nan], [2.0, 4.0], [np.nan, 6.0], [9.0, 7.0]])
    >>> site = [0, 0, 1, 1]
    >>> imp = FedSimpleImputer(strategy="median").fit(X, clients=site)
    >>> imp.statistics_
    array([2., 6.])
    >>> imp.transform([[np.nan, np.nan]])
    array([[2., 6.]])
    """

    _parameter_constraints: dict = {
        "missing_values": [MissingValues()],
        "strategy": [StrOptions({"mean", "median", "most_frequent", "constant"})],
        "fill_value": "no_validation",
        "copy": ["boolean"],
        "add_indicator": ["boolean"],
        "keep_empty_features": ["boolean"],
    }

    __metadata_request__fit = {"clients": True}
    #: the fitted state a site service receives with the constructor's parameters for
    #: ``transform`` (:mod:`skfed.sites.codec`; nothing else is accepted)
    _wire_attributes = ("statistics_", "indicator_features_", "_fit_dtype", "_fill_dtype",
                        "n_rounds_", "n_features_in_", "feature_names_in_", "clients_",
                        "n_clients_")

    def __init__(self, *, missing_values=np.nan, strategy="mean", fill_value=None, copy=True,
                 add_indicator=False, keep_empty_features=False):
        self.missing_values = missing_values
        self.strategy = strategy
        self.fill_value = fill_value
        self.copy = copy
        self.add_indicator = add_indicator
        self.keep_empty_features = keep_empty_features

    # -- validation ---------------------------------------------------------
    def _refuse_non_numeric(self, X):
        """Name the first column a numeric strategy cannot use."""
        names = _column_names(X)
        if names is not None:
            for name in names:
                try:
                    np.asarray(X[name], dtype=np.float64)
                except ValueError:  # a TypeError (e.g. a dict) is left to scikit-learn
                    raise ValueError(
                        f"Cannot use {self.strategy} strategy with non-numeric data: column "
                        f"{str(name)!r} (dtype {X[name].dtype}) is not numeric; use "
                        "strategy='most_frequent' or 'constant' for it.") from None
            return
        X = np.asarray(X, dtype=object) if not hasattr(X, "dtype") else X
        if getattr(X, "ndim", 0) == 2 and X.dtype.kind in "OUS":
            for i in range(X.shape[1]):
                try:
                    np.asarray(X[:, i], dtype=np.float64)
                except ValueError:
                    raise ValueError(
                        f"Cannot use {self.strategy} strategy with non-numeric data: column "
                        f"{i} is not numeric; use strategy='most_frequent' or 'constant' "
                        "for it.") from None

    def _validate_input(self, X, in_fit):
        if self.strategy in ("mean", "median") and not hasattr(X, "toarray"):
            self._refuse_non_numeric(X)
        if self.strategy in ("most_frequent", "constant"):
            # a list holding strings becomes an object array (not a unicode one)
            is_text_list = isinstance(X, list) and any(
                isinstance(v, str) for row in X for v in row)
            dtype = object if is_text_list else None
        else:
            dtype = FLOAT_DTYPES
        if not in_fit and self._fit_dtype.kind == "O":
            dtype = self._fit_dtype
        allow_nan = is_pandas_na(self.missing_values) or is_scalar_nan(self.missing_values)
        X = validate_data(self, X, reset=in_fit, dtype=dtype, copy=self.copy and not in_fit,
                          force_writeable=not in_fit,
                          ensure_all_finite="allow-nan" if allow_nan else True)
        if in_fit:
            self._fit_dtype = X.dtype
        if (X.dtype.kind in "fiu" and not is_pandas_na(self.missing_values)
                and not isinstance(self.missing_values, numbers.Real)):
            raise ValueError(
                f"'X' and 'missing_values' types are expected to be both numerical. Got "
                f"X.dtype={X.dtype} and type(missing_values)={type(self.missing_values)}.")
        if X.dtype.kind not in "iufO":
            raise ValueError(
                f"FedSimpleImputer does not support data with dtype {X.dtype}. Please "
                "provide either a numeric array (with a floating point or integer dtype) or "
                "categorical data as an array of strings with an object dtype.")
        if self.strategy == "constant":
            if in_fit:
                source = X.dtype if self.fill_value is None else type(self.fill_value)
            else:
                source = self._fill_dtype
            if not np.can_cast(source, X.dtype, casting="same_kind"):
                raise ValueError(
                    f"fill_value={show(self.fill_value)} (of type {source!r}) cannot be cast to "
                    f"the input data that is {X.dtype!r}; make sure both dtypes are of the "
                    "same kind (between fit and transform too).")
        return X

    # -- fit ----------------------------------------------------------------
    @fit_all_or_nothing
    def fit(self, X, y=None, clients=None):
        """Compute the imputation statistics from per-site summaries.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows of every site.
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site holding each row (any hashable labels); ``None``: one
            site holding every row.

        Returns
        -------
        self : object
            Fitted imputer.
        """
        self._validate_params()
        if isinstance(X, FederatedDataset):
            X, clients = sites_input(self, X, clients, None, _checked_rows)
            self._fit_dtype = X.dtype
        else:
            X = _checked_rows(self, X)
        mv = self.missing_values
        self._fill_dtype = X.dtype
        labels = None

        def map_sites(fn, *args):
            nonlocal labels
            labels, summaries = _map_sites(fn, X, clients, None, *args)
            return summaries

        n_features = X.shape[1]
        empty_value = 0 if self.keep_empty_features else np.nan
        self.n_rounds_ = 1
        if self.strategy == "mean":
            pooled = merge_means(map_sites(mean_summary, mv))
            count, n_samples = pooled["count"], pooled["n_samples"]
            statistics = pooled["mean"]
            statistics[count == 0] = empty_value
        elif self.strategy == "median":
            statistics, count, self.n_rounds_, n_samples = federated_median(map_sites, mv)
            statistics[count == 0] = empty_value
        elif self.strategy == "most_frequent":
            pooled = merge_value_counts(map_sites(value_counts_summary, mv))
            count, n_samples = pooled["count"], pooled["n_samples"]
            statistics = np.empty(n_features, dtype=object if X.dtype.kind == "O" else float)
            for i, mode in enumerate(pooled["mode"]):
                statistics[i] = empty_value if mode is None else mode[0]
        else:  # constant
            pooled = merge_counts(map_sites(count_summary, mv))
            count, n_samples = pooled["count"], pooled["n_samples"]
            fill_value = self.fill_value
            if fill_value is None:
                fill_value = 0 if X.dtype.kind in "iuf" else "missing_value"
            statistics = np.full(n_features, fill_value, dtype=object)
            if not self.keep_empty_features:
                statistics[count == 0] = np.nan
        self.statistics_ = statistics
        self.indicator_features_ = (np.flatnonzero(count < n_samples)
                                    if self.add_indicator else None)
        self.clients_ = labels
        self.n_clients_ = len(labels)
        return self

    # -- transform (row-wise, at each site) ---------------------------------
    @transforms_sites
    def transform(self, X):
        """Impute the missing values (row-wise: runs at each site with ``statistics_``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows to complete.

        Returns
        -------
        X_imputed : ndarray of shape (n_samples, n_features_out)
            ``X`` with its missing values imputed, without the features
            that were empty in ``fit`` (unless ``keep_empty_features``), and
            followed by the indicator columns if ``add_indicator``.
        """
        check_is_fitted(self)
        X = self._validate_input(X, in_fit=False)
        missing = _get_mask(X, self.missing_values)
        statistics = self.statistics_
        if self.keep_empty_features:
            valid = np.ones(len(statistics), dtype=bool)
        else:
            valid = ~_get_mask(statistics, np.nan)
            if not valid.all():
                skipped = np.flatnonzero(~valid)
                if hasattr(self, "feature_names_in_"):
                    skipped = self.feature_names_in_[skipped]
                warnings.warn(
                    f"Skipping features without any observed values: {skipped}. At least one "
                    f"non-missing value is needed for imputation with "
                    f"strategy='{self.strategy}'.")
        values = statistics[valid].astype(self._fill_dtype, copy=False)
        X_out = X if valid.all() else X[:, valid]
        rows, cols = np.nonzero(missing[:, valid])
        X_out[rows, cols] = values[cols]
        if self.add_indicator:
            X_out = np.hstack((X_out, missing[:, self.indicator_features_]))
        return X_out

    def get_feature_names_out(self, input_features=None):
        """Names of the output features.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Input feature names (``feature_names_in_`` or ``x0, x1, ...`` by default).

        Returns
        -------
        feature_names_out : ndarray of str objects
            The kept input features, then ``missingindicator_<name>`` for
            each indicator column.
        """
        check_is_fitted(self, "n_features_in_")
        input_features = _check_feature_names_in(self, input_features)
        names = input_features[~_get_mask(self.statistics_, np.nan)]
        if self.add_indicator:
            indicator = np.asarray([f"missingindicator_{name}" for name in
                                    input_features[self.indicator_features_]], dtype=object)
            names = np.concatenate([names, indicator])
        return names

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = (is_pandas_na(self.missing_values)
                                     or is_scalar_nan(self.missing_values))
        # strings are data for these two strategies (not converted to numbers)
        tags.input_tags.string = self.strategy in ("most_frequent", "constant")
        return tags
