"""Bin thresholds from a coarsened sketch, where a site may not release exact quantiles.

``binning=k`` (an int) replaces the exact bin search of :mod:`._binning`: each
site releases, per continuous feature, the means and row counts of
consecutive groups of its non-missing values in value order: its ``n`` values
in ``min(n // k, max_bins)`` groups of (nearly) equal size, at least ``k``
rows each; nothing for a feature with fewer than ``k`` values — averages of
at least ``k`` rows, never a row's value. The server pools the sites' group
means, weighted by their counts, and applies scikit-learn's rule to them: the
midpoints of consecutive distinct means when there are at most ``max_bins`` of
them, else the weighted percentiles at scikit-learn's levels (the inverted cdf),
duplicates removed.

The trees are then exactly scikit-learn's fitted on the rows' bin indices at
those thresholds (not on the raw rows: the bins differ from the exact ones).
At a site service (``boosting.sketch``) ``k`` is the site's ``min_rows`` and
its reply is signed with its certificate's key; a later request binned at
continuous thresholds without ``allow_exact_quantiles`` must carry every
site's signed sketch, from which the site recomputes the thresholds
(:func:`check_sketch_thresholds`): an analyst cannot place a threshold of
their own choosing.
"""

import numpy as np

from ._bins import ALMOST_INF, midpoint_thresholds, percentile_levels

#: what a site signs its sketch under (with its name, the dataset and the arrays)
_DOMAIN = b"skfed boosting sketch v1"


def sketch_thresholds(sketches, max_bins):
    """The continuous features' thresholds (model order of the continuous ones) from the
    sites' sketches: scikit-learn's rule applied to the pooled group means."""
    n_features = len(sketches[0]["means"])
    out = []
    for f in range(n_features):
        means = np.concatenate([np.asarray(s["means"][f], dtype=np.float64)
                                for s in sketches])
        counts = np.concatenate([np.asarray(s["counts"][f], dtype=np.int64)
                                 for s in sketches])
        out.append(_thresholds(means, counts, max_bins))
    return out


def _thresholds(means, counts, max_bins):
    if means.size == 0:
        return np.empty(0)
    order = np.argsort(means, kind="stable")
    means, counts = means[order], counts[order]
    distinct = np.unique(means)
    if distinct.size <= max_bins:
        return midpoint_thresholds(distinct)
    cumulative = np.cumsum(counts)
    targets = percentile_levels(max_bins) / 100 * cumulative[-1]
    picked = means[np.minimum(np.searchsorted(cumulative, targets, side="left"),
                              len(means) - 1)]
    return np.clip(np.unique(picked), None, ALMOST_INF)


def sketch_payload(site, dataset, sketch):
    """The bytes a site signs for its sketch."""
    parts = [_DOMAIN, str(site).encode(), str(dataset).encode(), str(int(sketch["rows"])).encode()]
    for means, counts in zip(sketch["means"], sketch["counts"]):
        parts.append(np.ascontiguousarray(means, dtype="<f8").tobytes())
        parts.append(np.ascontiguousarray(counts, dtype="<i8").tobytes())
    return b"|".join(parts)


def continuous_thresholds(context):
    """The context's thresholds of its continuous features (model order)."""
    return [t for t, is_cat in zip(context["thresholds"], context["categorical"])
            if not is_cat]


def check_sketch_thresholds(context):
    """``None`` when the context's continuous thresholds are those its sketches give,
    else what differs (for the site's refusal)."""
    sketches = context["sketch"]["sites"]
    given = continuous_thresholds(context)
    derived = sketch_thresholds(sketches, context["max_bins"])
    if len(given) != len(derived):
        return "the sketches do not cover the continuous features"
    for j, (a, b) in enumerate(zip(given, derived)):
        if a.shape != b.shape or not np.array_equal(a, b):
            return f"the thresholds of continuous feature {j} are not the sketches'"
    return None
