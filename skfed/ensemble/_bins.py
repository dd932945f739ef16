"""scikit-learn's rules for bin thresholds, from values the server already has.

Shared by the exact federated search (:mod:`skfed.ensemble._binning`) and the
sites' coarsened sketches (:mod:`skfed.ensemble._sketch`).
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

#: scikit-learn's clip of large thresholds
ALMOST_INF = 1e300


def percentile_levels(max_bins):
    """The percentiles scikit-learn's binning asks for."""
    return np.linspace(0, 100, num=max_bins + 1)[1:-1]


def _finish(thresholds):
    """scikit-learn's last steps: duplicates removed, clipped below +inf."""
    unique = np.unique(thresholds)
    if unique.shape[0] != thresholds.shape[0]:
        thresholds = unique
    return np.clip(thresholds, a_min=None, a_max=ALMOST_INF)


def midpoint_thresholds(distinct):
    """Thresholds of a feature with few distinct values (scikit-learn's midpoints)."""
    distinct = np.asarray(distinct, dtype=np.float64)
    if len(distinct) == 1:
        return np.asarray([])
    return _finish(sliding_window_view(distinct, 2).mean(axis=1))
