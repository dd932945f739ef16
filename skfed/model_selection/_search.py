"""Grid search over sites: every candidate fitted federatedly, scored at held-out sites."""

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_is_fitted

from ._split import check_site_cv
from ._validation import _check_dataset, cross_validate_sites


class FederatedGridSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Exhaustive search over parameters, with folds of whole sites.

    Every candidate is fitted federatedly on each fold's training sites and
    scored at its test sites (:func:`cross_validate_sites`); the analyst
    sees scores per site and pooled, never a row. ``GridSearchCV`` cannot do
    this: it indexes rows.

    Parameters
    ----------
    estimator : skfed estimator or Pipeline
    param_grid : dict or list of dict
        As scikit-learn's ``GridSearchCV`` (``{"alpha": [...], "solver": [...]}``,
        ``{"fedlasso__alpha": [...]}`` for a pipeline).
    cv : None, int or splitter, default=None
        ``None``: leave one site out; an int: :class:`SiteKFold`.
    refit : bool, default=True
        Refit the best candidate on every site (``best_estimator_``).

    Attributes
    ----------
    cv_results_ : dict
        ``params``, ``mean_test_score``, ``std_test_score``,
        ``rank_test_score``, ``split<k>_test_score``, ``mean_fit_time``,
        ``mean_n_rounds`` and ``site_scores`` (per candidate, per fold,
        ``{site: score}``).
    best_params_ : dict
    best_score_ : float
    best_index_ : int
    best_estimator_ : estimator
        Fitted on all sites (when ``refit=True``).
    n_splits_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_diabetes
    >>> from skfed import FedLasso
    >>> from skfed.data import FederatedDataset
    >>> from skfed.model_selection import FederatedGridSearchCV
    >>> X, y = load_diabetes(return_X_y=True)
    >>> data = FederatedDataset.from_arrays(X, y, np.arange(len(y)) % 4)
    >>> search = FederatedGridSearchCV(FedLasso(), {"alpha": [0.01, 0.1, 1.0]}).fit(data)
    >>> search.best_params_
    {'alpha': 0.1}
    """

    def __init__(self, estimator, param_grid, *, cv=None, refit=True):
        self.estimator = estimator
        self.param_grid = param_grid
        self.cv = cv
        self.refit = refit

    def fit(self, X, y=None):
        """Run the search on a FederatedDataset.

        Parameters
        ----------
        X : FederatedDataset
        y : None
            The dataset carries its target.

        Returns
        -------
        self : object
        """
        _check_dataset(X)
        if y is not None:
            raise ValueError("a FederatedDataset carries its own target; do not pass y.")
        cv = check_site_cv(self.cv)
        candidates = list(ParameterGrid(self.param_grid))
        if not candidates:
            raise ValueError("param_grid is empty.")
        results = {"params": candidates, "site_scores": []}
        scores, fit_times, rounds = [], [], []
        for params in candidates:
            est = clone(self.estimator).set_params(**params)
            out = cross_validate_sites(est, X, cv=cv)
            scores.append(out["test_score"])
            fit_times.append(np.mean(out["fit_time"]))
            rounds.append(np.mean([r for r in out["n_rounds"] if r is not None] or [np.nan]))
            results["site_scores"].append(out["site_scores"])
        scores = np.array(scores)
        self.n_splits_ = scores.shape[1]
        for k in range(self.n_splits_):
            results[f"split{k}_test_score"] = scores[:, k]
        results["mean_test_score"] = scores.mean(axis=1)
        results["std_test_score"] = scores.std(axis=1)
        # rank 1 is best; ties share the better rank, as scikit-learn's search does
        order = -results["mean_test_score"]
        results["rank_test_score"] = np.searchsorted(np.sort(order), order) + 1
        results["mean_fit_time"] = np.array(fit_times)
        results["mean_n_rounds"] = np.array(rounds)
        self.cv_results_ = results
        self.best_index_ = int(np.argmin(results["rank_test_score"]))
        self.best_params_ = candidates[self.best_index_]
        self.best_score_ = float(results["mean_test_score"][self.best_index_])
        if self.refit:
            self.best_estimator_ = clone(self.estimator).set_params(**self.best_params_).fit(X)
        return self

    def _best(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict(self, X):
        """``best_estimator_.predict`` (per site on a FederatedDataset).

        Parameters
        ----------
        X : array-like or FederatedDataset

        Returns
        -------
        y_pred : ndarray or dict
        """
        return self._best().predict(X)

    def score(self, X, y=None):
        """``best_estimator_.score`` (pooled on a FederatedDataset).

        Parameters
        ----------
        X : array-like or FederatedDataset
        y : array-like, default=None

        Returns
        -------
        score : float
        """
        return self._best().score(X, y)
