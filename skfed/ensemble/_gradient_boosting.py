"""Federated histogram gradient boosting: scikit-learn's trees, fitted where the rows are.

:class:`FedHistGradientBoostingRegressor` and
:class:`FedHistGradientBoostingClassifier` take scikit-learn 1.9's parameters
and defaults and fit, tree for tree, the model ``HistGradientBoosting*`` fits
on the pooled rows: the same bin thresholds, the same splits, the same leaf
values. The sites never send a row: per-site schemas and label sets, then
sums (counts below probe values for the bins, node histograms of gradients,
hessians and counts, loss sums) through the federation session
(:mod:`skfed.ensemble._fit`).
"""

import itertools
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.utils._param_validation import (Interval, StrOptions,
                                            validate_parameter_constraints)
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (_check_monotonic_cst, _check_sample_weight, _check_y,
                                      check_array, check_is_fitted, validate_data)

from .._messages import plain
from ..base import fit_all_or_nothing
from ..data import FederatedDataset, SiteData, as_dataset
from ..data.site import SiteError, combine_scores
from ..privacy.dp_rounds import DifferentialPrivacy
from ..privacy.secure_rounds import SecureAggregation
from ._fit import BoostingRun
from ._site import model_features, site_output, site_score_terms

_SHARED_PARAMETERS = """learning_rate : float, default=0.1
        The shrinkage of the leaves' values.
    max_iter : int, default=100
        Boosting iterations (trees per class).
    max_leaf_nodes : int or None, default=31
        Leaves per tree at most.
    max_depth : int or None, default=None
        Depth of a tree at most (edges from the root).
    min_samples_leaf : int, default=20
        Pooled rows per leaf at least.
    l2_regularization : float, default=0.0
        L2 penalty on the leaves' values.
    max_features : float, default=1.0
        Share of the allowed features drawn at random at each split search.
    max_bins : int, default=255
        Bins of non-missing values per feature (missing values get one more).
    categorical_features : array-like of {bool, int, str} or "from_dtype" or None, \
default="from_dtype"
        The categorical columns: a mask, indices or names, or the columns of
        pandas ``category`` dtype. Their levels are the sorted union of the
        levels the sites hold (at most ``max_bins``).
    monotonic_cst : array-like of int or dict, default=None
        Monotonic constraint per feature (-1, 0, 1), as in scikit-learn.
    interaction_cst : {"pairwise", "no_interactions"} or sequence of sets, default=None
        Groups of features allowed to interact, as in scikit-learn (indices
        refer to the features after the categorical ones are moved first,
        as in scikit-learn).
    warm_start : bool, default=False
        Not supported (True raises an error).
    early_stopping : "auto" or bool, default="auto"
        Stop when the held-out loss stops improving; "auto": when the pooled
        training data has more than 10,000 rows. Each site holds out its own
        rows (``FederatedDataset.holdout``).
    scoring : str, callable or None, default="loss"
        Only "loss" is supported (the loss pooled from the sites' sums).
    validation_fraction : float, int or None, default=0.1
        Share of each site's rows held out for early stopping (an int: that
        many rows pooled, as a share); None: score the training rows.
    n_iter_no_change : int, default=10
        Iterations without an improvement larger than ``tol`` before stopping.
    tol : float, default=1e-7
        The improvement that counts.
    verbose : int, default=0
        Print one line per iteration when positive.
    random_state : int, RandomState instance or None, default=None
        Seeds the binning subsample, the held-out rows and the feature draws
        (drawn as scikit-learn draws them: an int gives scikit-learn's model).
    binning : "exact" or int, default="exact"
        ``"exact"``: scikit-learn's thresholds on the pooled rows, found from the
        sites' counts (a site service serves them only with
        ``allow_exact_quantiles``). An int ``k`` (at least 2): thresholds from a
        coarsened sketch each site releases, the means of groups of at least
        ``k`` of its values in value order (never a row's value); the trees are
        then scikit-learn's fitted on the rows' bin indices at those thresholds.
        At a site service ``k`` must be the site's ``min_rows``. See
        ``docs/boosting.md``.
    privacy : SecureAggregation or None, default=None
        ``SecureAggregation()``: every sum of the fit (totals, bin counts, node
        histograms, losses) is masked at the sites and only its total over the
        sites decoded (:mod:`skfed.privacy.masked_sums`): the per-site schema
        (levels, classes and their counts) is the only per-site release. The
        model is the plain fit's to the fixed-point precision
        (``history_.privacy``); counts are exact. Differential privacy is
        refused: noisy histograms would grow other trees than scikit-learn's
        (see ``docs/boosting.md``).
"""

_SHARED_ATTRIBUTES = """n_iter_ : int
        Iterations run.
    n_trees_per_iteration_ : int
        1, or the number of classes beyond two.
    train_score_ : ndarray
        Minus the training loss at the baseline and after each iteration
        (early stopping only; empty otherwise).
    validation_score_ : ndarray
        The same on the held-out rows.
    do_early_stopping_ : bool
    is_categorical_ : ndarray of bool or None
        The categorical columns (input order).
    bin_thresholds_ : list of ndarray
        Per feature (categorical features first), the thresholds
        scikit-learn's ``_BinMapper.bin_thresholds_`` holds.
    n_bins_non_missing_ : ndarray of uint32
    has_missing_values_ : ndarray of bool
        Per feature (same order), whether training rows miss it.
    binning_exact_ : bool
        Whether the thresholds are scikit-learn's on the pooled rows: False with
        ``binning=k`` (the sketch's), and where they may differ from
        scikit-learn's by a rounding boundary (sample weights above 200,000
        training rows).
    history_ : BoostingHistory
        Per iteration: rounds, bytes, node histograms, training (and held-out)
        loss, leaves and depth; the setup's rounds and bytes.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
    clients_ : ndarray
        The site labels, in the order of the pooled rows.
    n_clients_ : int
"""


def _interaction_sets(spec, n_features):
    """scikit-learn's ``_check_interaction_cst``: the groups as sets, the rest one group."""
    if spec is None:
        return None
    if spec == "no_interactions":
        groups = [[i] for i in range(n_features)]
    elif spec == "pairwise":
        groups = itertools.combinations(range(n_features), 2)
    else:
        groups = spec
    try:
        constraints = [set(group) for group in groups]
    except TypeError:
        raise ValueError("Interaction constraints must be a sequence of tuples or lists, got:"
                         f" {spec!r}.") from None
    for group in constraints:
        for x in group:
            if not (isinstance(x, Integral) and 0 <= x < n_features):
                raise ValueError("Interaction constraints must consist of integer indices in"
                                 f" [0, n_features - 1] = [0, {n_features - 1}], specifying "
                                 f"the position of features, got invalid indices: {group!r}")
    rest = set(range(n_features)) - set().union(*constraints)
    if rest:
        constraints.append(rest)
    return constraints


class _SitesScoreMixin:
    """``score`` on arrays, or pooled from the sites of a FederatedDataset."""

    def score(self, X, y=None, sample_weight=None):
        """R2 (regressor) or accuracy (classifier), on arrays or pooled from a dataset
        (under ``privacy=SecureAggregation()``, from masked sums: no site's own sums).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or FederatedDataset
        y : array-like of shape (n_samples,), default=None
            Not used with a FederatedDataset.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
        """
        if isinstance(X, FederatedDataset):
            check_is_fitted(self, "_predictors")
            as_dataset(X, y, None, sample_weight)
            if getattr(self, "privacy", None) is None:
                return combine_scores(X.map(site_score_terms, self))
            from ..privacy.masked_sums import masked_session

            with masked_session(X, self.privacy) as session:  # the pooled sums only
                return combine_scores([session.sum(site_score_terms, self, phase="analysis")])
        return super().score(X, y, sample_weight=sample_weight)


class _BaseFedHistGradientBoosting(BaseEstimator):
    """The shared fit and prediction of the two estimators (not used directly)."""

    # ``clients`` is requested by default under metadata routing (as every skfed estimator)
    __metadata_request__fit = {"clients": True}

    def _validate_params(self):
        validate_parameter_constraints(
            self._parameter_constraints,
            {k: plain(v) for k, v in self.get_params(deep=False).items()},
            caller_name=type(self).__name__)
        unsupported = []
        if self.warm_start:
            unsupported.append("warm_start=True")
        if self.scoring != "loss":
            unsupported.append(f"scoring={self.scoring!r}")
        if not isinstance(self.loss, str):
            unsupported.append("a loss object (give its name)")
        if isinstance(self.privacy, DifferentialPrivacy):
            raise ValueError(
                f"{type(self).__name__} does not offer differential privacy: the pooled "
                "trees are exact functions of every node's histogram, so noise would grow "
                "other trees than scikit-learn's, and its budget would be spent over every "
                "node of every tree and the bin thresholds. Use privacy=SecureAggregation() "
                "(the sites' sums masked, the same trees).")
        if unsupported:
            raise ValueError(f"{type(self).__name__} does not support {', '.join(unsupported)}"
                             " (early stopping is scored with the pooled loss, "
                             "scoring='loss').")

    @fit_all_or_nothing
    def fit(self, X, y=None, *, clients=None, sample_weight=None):
        """Fit the boosted trees on the pooled rows of the sites.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features) or FederatedDataset
            Missing values (NaN) are allowed.
        y : array-like of shape (n_samples,), default=None
            Not used with a FederatedDataset (it carries its target).
        clients : array-like of shape (n_samples,), default=None
            The site of each row, e.g. ``fit(X, y, clients=site)``. ``None``:
            one client holding every row (a centralized fit).
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        self._validate_params()
        dataset = self._dataset(X, y, clients, sample_weight)
        self._monotonic_cst = _check_monotonic_cst(self, self.monotonic_cst)
        self._interaction_cst = _interaction_sets(self.interaction_cst, self.n_features_in_)
        self.clients_ = dataset.labels
        self.n_clients_ = len(dataset)
        BoostingRun(self, dataset).fit()
        return self

    def _dataset(self, X, y, clients, sample_weight):
        """A FederatedDataset as it is, or the arrays checked and split by ``clients``."""
        if isinstance(X, FederatedDataset):
            dataset = as_dataset(X, y, clients, sample_weight)
            self.n_features_in_ = dataset.n_features
            if dataset.columns is not None:
                self.feature_names_in_ = np.asarray(dataset.columns, dtype=object)
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return dataset
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target "
                             "y is None.")
        X = self._checked_X(X, reset=True)
        y = self._checked_y(y)
        if len(y) != X.shape[0]:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                             f"[{X.shape[0]}, {len(y)}]")
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64)
        return FederatedDataset.from_arrays(X, y, clients, sample_weight)

    def _checked_X(self, X, *, reset):
        """A DataFrame as it is (its dtypes say which columns are categorical),
        else a 2-D array (numbers as float64, NaN allowed)."""
        if hasattr(X, "iloc"):
            validate_data(self, X, reset=reset, skip_check_array=True)
            return X
        # an array's columns are numbers unless some are declared categorical
        declared = self.categorical_features is not None and \
            not isinstance(self.categorical_features, str)
        X = check_array(X, dtype=None if declared else np.float64, ensure_all_finite=False)
        if X.dtype.kind in "biuf":
            X = X.astype(np.float64)
        validate_data(self, X, reset=reset, skip_check_array=True)
        return X

    def _model_input(self, X):
        """``X`` in the model's feature order (categorical codes first), float64."""
        check_is_fitted(self, "_predictors")
        X = self._checked_X(X, reset=False)
        try:
            return model_features(SiteData(None, X), self._context)
        except SiteError as exc:
            raise ValueError(exc.detail) from None

    def _raw_predict(self, X):
        X = self._model_input(X)
        raw = np.zeros((X.shape[0], self.n_trees_per_iteration_), order="F")
        raw += self._baseline_prediction
        for trees in self._predictors:
            for k, tree in enumerate(trees):
                raw[:, k] += tree.predict(X)
        return raw

    def _staged_raw_predict(self, X):
        X = self._model_input(X)
        raw = np.zeros((X.shape[0], self.n_trees_per_iteration_), order="F")
        raw += self._baseline_prediction
        for trees in self._predictors:
            for k, tree in enumerate(trees):
                raw[:, k] += tree.predict(X)
            yield raw.copy()

    @property
    def n_iter_(self):
        """Number of boosting iterations run."""
        check_is_fitted(self, "_predictors")
        return len(self._predictors)

    def _sites_output(self, X, method):
        """``{site: output}`` of ``method`` run at each site of a FederatedDataset."""
        check_is_fitted(self, "_predictors")
        return dict(zip(X.sites, X.map(site_output, self, method)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


class FedHistGradientBoostingRegressor(_SitesScoreMixin, RegressorMixin,
                                       _BaseFedHistGradientBoosting):
    __doc__ = f"""Federated histogram gradient boosting regression, as scikit-learn's.

    Fits, on rows that stay at their sites, the model
    :class:`sklearn.ensemble.HistGradientBoostingRegressor` fits on the pooled
    rows (sites in order, each site's rows in its order): the same bin
    thresholds, splits and leaf values (up to the last bits of sums added in
    another order), hence the same predictions. With early stopping, each
    site holds out its own rows; the model is scikit-learn's fitted on the
    pooled training rows with the held-out rows as ``X_val``, ``y_val``.

    The sites send per-site schemas (levels of categorical columns), then only
    sums: counts below probe values (the exact bin thresholds), node
    histograms of gradients, hessians and counts (the trees, about depth + 1
    rounds per tree) and loss sums. See ``docs/boosting.md``.

    Parameters
    ----------
    loss : {{"squared_error", "absolute_error", "gamma", "poisson", "quantile"}}, \
default="squared_error"
        scikit-learn's losses. The absolute error and quantile losses refit
        each leaf to an exact pooled quantile of its residuals.
    quantile : float, default=None
        The quantile of ``loss="quantile"``.
    {_SHARED_PARAMETERS}
    Attributes
    ----------
    {_SHARED_ATTRIBUTES}
    See Also
    --------
    sklearn.ensemble.HistGradientBoostingRegressor : the pooled model.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.ensemble import FedHistGradientBoostingRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 3)); y = X[:, 0] - 2 * X[:, 1] + rng.normal(size=300)
    >>> site = rng.integers(0, 3, 300)
    >>> est = FedHistGradientBoostingRegressor(max_iter=20, random_state=0)
    >>> est.fit(X, y, clients=site).n_iter_
    20
    """

    _parameter_constraints = {**HistGradientBoostingRegressor._parameter_constraints,
                              "privacy": [SecureAggregation, None],
                              "binning": [StrOptions({"exact"}),
                                          Interval(Integral, 2, None, closed="left")]}

    def __init__(self, loss="squared_error", *, quantile=None, learning_rate=0.1,
                 max_iter=100, max_leaf_nodes=31, max_depth=None, min_samples_leaf=20,
                 l2_regularization=0.0, max_features=1.0, max_bins=255,
                 categorical_features="from_dtype", monotonic_cst=None, interaction_cst=None,
                 warm_start=False, early_stopping="auto", scoring="loss",
                 validation_fraction=0.1, n_iter_no_change=10, tol=1e-7, verbose=0,
                 random_state=None, binning="exact", privacy=None):
        self.loss, self.quantile = loss, quantile
        self.learning_rate, self.max_iter = learning_rate, max_iter
        self.max_leaf_nodes, self.max_depth = max_leaf_nodes, max_depth
        self.min_samples_leaf, self.l2_regularization = min_samples_leaf, l2_regularization
        self.max_features, self.max_bins = max_features, max_bins
        self.categorical_features = categorical_features
        self.monotonic_cst, self.interaction_cst = monotonic_cst, interaction_cst
        self.warm_start, self.early_stopping, self.scoring = warm_start, early_stopping, scoring
        self.validation_fraction, self.n_iter_no_change = validation_fraction, n_iter_no_change
        self.tol, self.verbose, self.random_state = tol, verbose, random_state
        self.binning, self.privacy = binning, privacy

    def _validate_params(self):
        super()._validate_params()
        if self.loss == "quantile" and self.quantile is None:
            raise ValueError("loss='quantile' needs the quantile parameter (in [0, 1]).")

    def _checked_y(self, y):
        y = _check_y(y, y_numeric=True, estimator=self)
        if self.loss == "gamma" and not np.all(y > 0):
            raise ValueError("loss='gamma' requires strictly positive y.")
        if self.loss == "poisson" and not (np.all(y >= 0) and np.sum(y) > 0):
            raise ValueError("loss='poisson' requires non-negative y and sum(y) > 0.")
        return y

    def predict(self, X):
        """Predict values for X.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features) or FederatedDataset
            A FederatedDataset is predicted at its sites: ``{site: predictions}``.

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        if isinstance(X, FederatedDataset):
            return self._sites_output(X, "predict")
        raw = self._raw_predict(X)
        return self._loss.link.inverse(raw.ravel())

    def staged_predict(self, X):
        """Predictions after each iteration.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)

        Yields
        ------
        y : ndarray of shape (n_samples,)
        """
        for raw in self._staged_raw_predict(X):
            yield self._loss.link.inverse(raw.ravel())


class FedHistGradientBoostingClassifier(_SitesScoreMixin, ClassifierMixin,
                                        _BaseFedHistGradientBoosting):
    __doc__ = f"""Federated histogram gradient boosting classification, as scikit-learn's.

    Fits, on rows that stay at their sites, the model
    :class:`sklearn.ensemble.HistGradientBoostingClassifier` fits on the
    pooled rows (sites in order, each site's rows in its order): binary and
    multiclass log loss, the same bins, trees and leaf values. A site may hold
    one class only; the classes are the union of the sites' labels. With
    early stopping, each site holds out its own rows (class weights, as in
    scikit-learn with ``X_val``, weigh the training rows only).

    Parameters
    ----------
    loss : {{"log_loss"}}, default="log_loss"
        The binary or multinomial log loss.
    {_SHARED_PARAMETERS}    class_weight : dict or "balanced", default=None
        Weights per class, multiplying the sample weights ("balanced": from
        the pooled class counts).

    Attributes
    ----------
    classes_ : ndarray
        The class labels (sorted union of the sites' labels).
    {_SHARED_ATTRIBUTES}
    See Also
    --------
    sklearn.ensemble.HistGradientBoostingClassifier : the pooled model.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.ensemble import FedHistGradientBoostingClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 3)); y = (X[:, 0] + rng.normal(size=300) > 0).astype(int)
    >>> site = rng.integers(0, 3, 300)
    >>> clf = FedHistGradientBoostingClassifier(max_iter=10, random_state=0)
    >>> clf.fit(X, y, clients=site).classes_
    array([0, 1])
    """

    _parameter_constraints = {**HistGradientBoostingClassifier._parameter_constraints,
                              "privacy": [SecureAggregation, None],
                              "binning": [StrOptions({"exact"}),
                                          Interval(Integral, 2, None, closed="left")]}

    def __init__(self, loss="log_loss", *, learning_rate=0.1, max_iter=100, max_leaf_nodes=31,
                 max_depth=None, min_samples_leaf=20, l2_regularization=0.0, max_features=1.0,
                 max_bins=255, categorical_features="from_dtype", monotonic_cst=None,
                 interaction_cst=None, warm_start=False, early_stopping="auto",
                 scoring="loss", validation_fraction=0.1, n_iter_no_change=10, tol=1e-7,
                 verbose=0, random_state=None, class_weight=None, binning="exact",
                 privacy=None):
        self.loss = loss
        self.learning_rate, self.max_iter = learning_rate, max_iter
        self.max_leaf_nodes, self.max_depth = max_leaf_nodes, max_depth
        self.min_samples_leaf, self.l2_regularization = min_samples_leaf, l2_regularization
        self.max_features, self.max_bins = max_features, max_bins
        self.categorical_features = categorical_features
        self.monotonic_cst, self.interaction_cst = monotonic_cst, interaction_cst
        self.warm_start, self.early_stopping, self.scoring = warm_start, early_stopping, scoring
        self.validation_fraction, self.n_iter_no_change = validation_fraction, n_iter_no_change
        self.tol, self.verbose, self.random_state = tol, verbose, random_state
        self.binning, self.privacy = binning, privacy
        self.class_weight = class_weight

    def _checked_y(self, y):
        y = _check_y(y, estimator=self)
        check_classification_targets(y)
        return y

    def decision_function(self, X):
        """The raw predictions (sums of the trees' leaves).

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features) or FederatedDataset

        Returns
        -------
        decision : ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        if isinstance(X, FederatedDataset):
            return self._sites_output(X, "decision_function")
        raw = self._raw_predict(X)
        return raw.ravel() if raw.shape[1] == 1 else raw

    def predict_proba(self, X):
        """Class probabilities.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features) or FederatedDataset

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        if isinstance(X, FederatedDataset):
            return self._sites_output(X, "predict_proba")
        raw = self._raw_predict(X)
        return self._loss.predict_proba(raw)

    def predict(self, X):
        """Predicted classes.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features) or FederatedDataset

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        if isinstance(X, FederatedDataset):
            return self._sites_output(X, "predict")
        raw = self._raw_predict(X)
        return self.classes_[self._encoded(raw)]

    @staticmethod
    def _encoded(raw):
        if raw.shape[1] == 1:  # "> 0", not ">= 0": a tie goes to the first class
            return (raw.ravel() > 0).astype(int)
        return np.argmax(raw, axis=1)

    def staged_decision_function(self, X):
        """The raw predictions after each iteration.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)

        Yields
        ------
        decision : ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        for raw in self._staged_raw_predict(X):
            yield raw.ravel() if raw.shape[1] == 1 else raw

    def staged_predict_proba(self, X):
        """Class probabilities after each iteration.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)

        Yields
        ------
        proba : ndarray of shape (n_samples, n_classes)
        """
        for raw in self._staged_raw_predict(X):
            yield self._loss.predict_proba(raw)

    def staged_predict(self, X):
        """Predicted classes after each iteration.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)

        Yields
        ------
        y : ndarray of shape (n_samples,)
        """
        for raw in self._staged_raw_predict(X):
            yield self.classes_.take(self._encoded(raw), axis=0)
