"""Grid search over sites: every candidate fitted federatedly, scored at held-out sites."""

import warnings

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_is_fitted

from ._split import check_site_cv
from ._validation import _check_dataset, cross_validate_sites


class _OneFold:
    """One fold of a site splitter, as a splitter (each fold's fit then warns alone)."""

    def __init__(self, train, test):
        self.train, self.test = train, test

    def split(self, dataset):
        yield self.train, self.test


def _fit_fold(estimator, dataset, train, test):
    """``(cross_validate_sites' result on one fold, the fit's ConvergenceWarning text or
    None)``; the fold's other warnings are shown as they come."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        out = cross_validate_sites(estimator, dataset, cv=_OneFold(train, test))
    advice = None
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            advice = advice or str(w.message)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out, advice


def _rank(mean_scores, converged):
    """Rank 1 is best: the candidates that converged in every fold first, each group by
    its mean score (a NaN score last; ties share the better rank, as scikit-learn's
    search)."""
    group = (~np.asarray(converged)).astype(int)
    loss = np.where(np.isnan(mean_scores), np.inf, -np.asarray(mean_scores, dtype=float))
    better = (group[None, :] < group[:, None]) | (
        (group[None, :] == group[:, None]) & (loss[None, :] < loss[:, None]))
    return 1 + better.sum(axis=1)


def _warn_unconverged(candidates, converged, best, advice):
    """One warning for the candidates whose fits did not converge (ranked after the
    others), and one naming the chosen candidate when it is one of them."""
    failed = [k for k in range(len(candidates)) if not converged[k].all()]
    if not failed:
        return
    n_folds = converged.shape[1]
    listed = "; ".join(f"{candidates[k]} ({int((~converged[k]).sum())} of {n_folds} folds)"
                       for k in failed[:5]) + ("; ..." if len(failed) > 5 else "")
    warnings.warn(f"FederatedGridSearchCV: {len(failed)} of {len(candidates)} candidates did "
                  f"not converge in every fold: {listed}. They are scored but ranked after "
                  "the candidates that converged (cv_results_['converged']). The first "
                  f"fit's report: {advice}", ConvergenceWarning, stacklevel=3)
    if best in failed:
        warnings.warn(f"FederatedGridSearchCV: no candidate converged in every fold; the "
                      f"chosen one, {candidates[best]}, did not converge in "
                      f"{int((~converged[best]).sum())} of {n_folds} folds: its score is that "
                      "of an unfinished fit. Raise max_rounds (or loosen tol) and search "
                      "again.", ConvergenceWarning, stacklevel=3)


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
        ``mean_n_rounds``, ``site_scores`` (per candidate, per fold,
        ``{site: score}``), ``split<k>_converged`` and ``converged``
        (whether every fold's fit converged; see Notes).
    best_params_ : dict
    best_score_ : float
    best_index_ : int
    best_estimator_ : estimator
        Fitted on all sites (when ``refit=True``).
    n_splits_ : int

    Notes
    -----
    *Unconverged fits are never preferred silently.* A fold's fit that ends
    with a ``ConvergenceWarning`` (``max_rounds`` spent before ``tol``) is
    scored, flagged in ``split<k>_converged``, and its candidate is
    ``converged=False``. Candidates that converged in every fold are ranked
    first (by score), then the others (by score): the score of an
    unfinished fit is that of wherever its rounds stopped, and an early stop
    can score better at held-out sites (it shrinks like a penalty) without
    being the model its parameters define, so comparing it with a finished
    fit compares an iterate with an optimum. One warning lists the
    unconverged candidates (instead of one per fit), and another names the
    chosen candidate when none converged. To rank by score alone, raise
    ``max_rounds`` or loosen ``tol`` until every candidate converges.
    scikit-learn's ``GridSearchCV`` cannot tell: with it, turn the warning
    into an error (``warnings.simplefilter("error", ConvergenceWarning)``)
    and pass ``error_score=np.nan``, which ranks such candidates last.

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
        folds = list(check_site_cv(self.cv).split(X))  # the same folds for every candidate
        candidates = list(ParameterGrid(self.param_grid))
        if not candidates:
            raise ValueError("param_grid is empty.")
        results = {"params": candidates, "site_scores": []}
        scores, converged, fit_times, rounds = [], [], [], []
        first_advice = None
        for params in candidates:
            est = clone(self.estimator).set_params(**params)
            outs, flags = [], []
            for train, test in folds:
                out, advice = _fit_fold(est, X, train, test)
                outs.append(out)
                flags.append(advice is None)
                first_advice = first_advice or advice
            scores.append([o["test_score"][0] for o in outs])
            converged.append(flags)
            fit_times.append(np.mean([o["fit_time"][0] for o in outs]))
            n = [o["n_rounds"][0] for o in outs if o["n_rounds"][0] is not None]
            rounds.append(np.mean(n) if n else np.nan)
            results["site_scores"].append([o["site_scores"][0] for o in outs])
        scores, converged = np.array(scores), np.array(converged, dtype=bool)
        self.n_splits_ = scores.shape[1]
        for k in range(self.n_splits_):
            results[f"split{k}_test_score"] = scores[:, k]
            results[f"split{k}_converged"] = converged[:, k]
        results["mean_test_score"] = scores.mean(axis=1)
        results["std_test_score"] = scores.std(axis=1)
        results["converged"] = converged.all(axis=1)
        results["rank_test_score"] = _rank(results["mean_test_score"], results["converged"])
        results["mean_fit_time"] = np.array(fit_times)
        results["mean_n_rounds"] = np.array(rounds)
        self.cv_results_ = results
        self.best_index_ = int(np.argmin(results["rank_test_score"]))
        self.best_params_ = candidates[self.best_index_]
        self.best_score_ = float(results["mean_test_score"][self.best_index_])
        _warn_unconverged(candidates, converged, self.best_index_, first_advice)
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
