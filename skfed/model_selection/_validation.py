"""Cross-validation over sites."""

import time

from sklearn.base import clone

from ..federation.session import FederationSession
from ..data import FederatedDataset
from ..data.site import combine_scores, site_score, site_score_terms
from ._split import check_site_cv


def site_scores(estimator, dataset):
    """The fitted estimator's score at each site and pooled, from one pass over the sites.

    Each site sends the weighted sums its score is made of (four numbers per
    target for R2, two for accuracy); the pooled score is the one
    ``estimator.score`` gives on the pooled rows.

    Parameters
    ----------
    estimator : fitted skfed estimator (or Pipeline ending in one)
    dataset : FederatedDataset

    Returns
    -------
    pooled : float
    per_site : dict
        ``{site: score}``.
    """
    _check_dataset(dataset)
    estimator, dataset = _final_step_on(estimator, dataset)
    terms = FederationSession.for_dataset(dataset).per_site(site_score_terms, estimator,
                                                            phase="analysis")
    return combine_scores(terms), {s: site_score(t) for s, t in zip(dataset.sites, terms)}


def _final_step_on(estimator, dataset):
    """``(final estimator, dataset)``: a fitted pipeline's transformers applied to the
    dataset as declared row steps at each site (skfed's transformers transform a
    :class:`FederatedDataset` where its rows are), so that a site scores the final
    estimator on its own transformed rows and never runs a pipeline's code."""
    if not hasattr(estimator, "steps"):
        return estimator, dataset
    for name, step in estimator.steps[:-1]:
        if step is None or step == "passthrough":
            continue
        if type(step).__module__.startswith("skfed."):
            dataset = step.transform(dataset)
        else:
            dataset = None
        if not isinstance(dataset, FederatedDataset):
            raise TypeError(f"the pipeline's step {name!r} ({type(step).__name__}) does not "
                            "transform a FederatedDataset at its sites; use skfed's "
                            "transformers (FedSimpleImputer, FedStandardScaler, "
                            "FedOneHotEncoder) in a pipeline scored over sites.")
    return estimator.steps[-1][1], dataset


def cross_validate_sites(estimator, dataset, *, cv=None, return_estimator=False):
    """Fit on some sites, score on the others, for every fold of ``cv``.

    Parameters
    ----------
    estimator : skfed estimator or Pipeline
        Cloned for every fold.
    dataset : FederatedDataset
    cv : None, int or splitter, default=None
        ``None``: :class:`LeaveOneSiteOut`; an int: :class:`SiteKFold` with
        that many folds; or any object with ``split(dataset)`` yielding
        ``(train_sites, test_sites)``.
    return_estimator : bool, default=False

    Returns
    -------
    result : dict
        ``test_score`` (pooled over each fold's test sites), ``train_sites``,
        ``test_sites``, ``site_scores`` (per fold, ``{site: score}``),
        ``n_rounds`` (rounds of each fold's fit), ``fit_time``,
        ``score_time``, and ``estimator`` if asked.
    """
    _check_dataset(dataset)
    cv = check_site_cv(cv)
    keys = ["test_score", "train_sites", "test_sites", "site_scores", "n_rounds", "fit_time",
            "score_time"] + (["estimator"] if return_estimator else [])
    result = {k: [] for k in keys}
    for train, test in cv.split(dataset):
        est = clone(estimator)
        start = time.perf_counter()
        est.fit(dataset.subset(train))
        fitted = time.perf_counter()
        pooled, per_site = site_scores(est, dataset.subset(test))
        result["test_score"].append(pooled)
        result["train_sites"].append(list(train))
        result["test_sites"].append(list(test))
        result["site_scores"].append(per_site)
        result["n_rounds"].append(_rounds(est))
        result["fit_time"].append(fitted - start)
        result["score_time"].append(time.perf_counter() - fitted)
        if return_estimator:
            result["estimator"].append(est)
    return result


def _rounds(est):
    last = est.steps[-1][1] if hasattr(est, "steps") else est
    return getattr(last, "n_iter_", None)


def _check_dataset(dataset):
    if not isinstance(dataset, FederatedDataset):
        raise TypeError("federated model selection takes a FederatedDataset "
                        "(FederatedDataset.from_arrays(X, y, clients) for arrays); got "
                        f"{type(dataset).__name__}.")
