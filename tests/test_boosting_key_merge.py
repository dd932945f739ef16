"""The order-statistic search's merge of probe keys (skfed/ensemble/_selection.py)."""

import numpy as np

from skfed.ensemble._selection import KEY_CEIL, KEY_FLOOR, _merged


def test_the_merge_is_the_sorted_union():
    """Sorted distinct keys and sorted distinct probes (inside, beside, equal to keys,
    at the ends of key space, none at all): the merge is ``np.union1d``'s union, and
    each key's and probe's place in it is where a search finds it."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        keys = np.unique(np.concatenate([[KEY_FLOOR, KEY_CEIL],
                                         rng.integers(-50, 50, rng.integers(0, 40))]))
        probes = np.unique(rng.integers(-60, 60, rng.integers(0, 40)))
        if rng.random() < 0.1:
            probes = np.unique(np.concatenate([probes, [KEY_FLOOR, KEY_CEIL]]))
        merged, old, new = _merged(keys, probes)
        assert merged.dtype == np.int64
        assert np.array_equal(merged, np.union1d(keys, probes))
        assert np.array_equal(old, np.searchsorted(merged, keys))
        assert np.array_equal(new, np.searchsorted(merged, probes))
