"""The local-only baseline: what each site would get from its own rows alone.

``skfed fit`` compares the federated model, site by site, with the model the
same estimator gives when fitted on that site's training rows only, scored
on its held-out rows. :func:`local_only_score` runs at the site (in process,
on a Dask worker, or as the site service's ``evaluate.local_baseline``
operation) and returns one number; :func:`local_model` is that model
(standardized with the site's own rows).
"""

import warnings

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.pipeline import make_pipeline

from ..data.site import held_out_mask, numeric_matrix, site_rows, site_score_terms
from ..data.steps import MIN_SITE_ROWS
from ..federation import dominance
from ..federation.operations import SUMS, Arg, site_operation
from ..preprocessing._feature_scaler import FeatureScaler
from ..survival import FedCoxPH


def local_model(est, scale, indicators=()):
    """A site's local-only model: ``est``, after standardizing with that site's own rows.

    Parameters
    ----------
    est : estimator
        The estimator (cloned, never fitted here).
    scale : bool
        Whether a :class:`~skfed.preprocessing._feature_scaler.FeatureScaler`
        comes first.
    indicators : sequence of int, default=()
        The one-hot columns: centred, not divided.

    Returns
    -------
    estimator
        An unfitted clone of ``est``, or a Pipeline of the scaler and it.
    """
    return make_pipeline(FeatureScaler(indicators=indicators), clone(est)) if scale \
        else clone(est)


def _indices(value):
    if not isinstance(value, (list, tuple)) or len(value) > 1 << 16 or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        return "indicator columns are a list of column indices"
    return None


@site_operation(
    "evaluate.local_baseline", releases=SUMS,
    describes="one number: the held-out score of a model fitted on the site's own "
              "training rows (the local-only baseline of skfed fit), its held-out terms "
              "under the dominance rule",
    arguments=(Arg("estimator", "object", role="estimator"),
               Arg("test_size", "float", low=0, high=1), Arg("seed", "int", low=0,
                                                             high=2 ** 63 - 1),
               Arg("classifier", "bool"), Arg("scale", "bool", optional=True, default=False),
               Arg("indicators", "value", optional=True, default=(), check=_indices,
                   convert=tuple)))
def local_only_score(site, estimator, test_size, seed, classifier, scale=False, indicators=()):
    """At a site: fit ``estimator`` on its own training rows, score it on its held-out rows.

    Parameters
    ----------
    site : SiteData
        The site's rows.
    estimator : estimator
        One of skfed's estimators (cloned, never fitted itself).
    test_size : float
        The share of the rows held out (the same split as the federated fit's).
    seed : int
        The split's seed.
    classifier : bool
        Whether the model is a classifier (one class among the training
        rows: no local model).
    scale : bool, default=False
        Whether to standardize with the site's own training rows.
    indicators : sequence of int, default=()
        The one-hot columns: centred, not divided.

    Returns
    -------
    float
        The model's ``score`` on the held-out rows; NaN without a local
        model (one class, or no event among a Cox model's training rows).
    """
    mask = held_out_mask(site, test_size, seed, min_rows=MIN_SITE_ROWS)
    train, test = site_rows(site, ~mask), site_rows(site, mask)
    if classifier and len(np.unique(train.y)) < 2:
        return np.nan
    # the local model stays at the site: only its held-out score leaves (audited below)
    with warnings.catch_warnings(), dominance.suspended():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            local = local_model(estimator, scale, indicators).fit(numeric_matrix(train),
                                                                  train.y)
        except ValueError:
            if not isinstance(estimator, FedCoxPH):
                raise
            return np.nan  # e.g. no event among the site's training rows: no local model
    if isinstance(estimator, FedCoxPH):  # a concordance: pairs of the held-out rows
        dominance.check_rows(np.ones(test.n_samples), "a concordance")
    elif dominance.active() is not None:
        site_score_terms(test.replace(X=numeric_matrix(test)), local)  # the score's terms
    with dominance.suspended():
        return float(local.score(numeric_matrix(test), test.y))
