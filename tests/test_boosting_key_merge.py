"""The order-statistic search's merge of probe keys and a site's answer to its probes
(skfed/ensemble/_selection.py)."""

import numpy as np

from skfed.ensemble._selection import (KEY_CEIL, KEY_FLOOR, OrderQuery, SortedValues,
                                        _merged, value_keys)


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


def test_a_sites_answer_counts_and_sums_each_gap():
    """Counts at or below each probe and each gap's sum of values times multiplicity,
    against a direct count and sum over the gap's rows: rows left out (multiplicity 0)
    or counted twice, ties, -0.0 beside 0.0, huge and tiny values, probes below, at,
    between and above every value, no probe, no row."""
    rng = np.random.default_rng(5)
    for trial in range(400):
        n = int(rng.integers(0, 50))
        values = rng.choice([-2.0, -0.0, 0.0, 1.5, 3.0, 1e300, -1e-300], n) if trial % 2 \
            else rng.normal(size=n)
        multiplicity = rng.integers(0, 3, n)
        pool = value_keys(np.concatenate([values, rng.normal(size=5), [np.inf, -np.inf]]))
        probes = np.unique(rng.choice(pool, int(rng.integers(0, 12))))
        answer = SortedValues(values, multiplicity, None).count_below(probes)
        keys = value_keys(values)
        below = np.concatenate([[np.iinfo(np.int64).min], probes[:-1]])
        for j, probe in enumerate(probes):
            assert answer["count"][j] == multiplicity[keys <= probe].sum()
            gap = (keys > below[j]) & (keys <= probe) if j else keys <= probe
            expected = np.sum(multiplicity[gap] * values[gap])
            np.testing.assert_allclose(answer["sum"][j], expected, rtol=1e-12, atol=0)
        assert answer["count"].shape == answer["sum"].shape == probes.shape



def _search_one_gap(values):
    """The rounds a query of ``values`` (distinct ones wanted) takes, from probes at
    2**20 units below and above them, and the probes of the round after the first
    (when the gap's count and sum are known)."""
    query = OrderQuery(cap=10)
    keys = value_keys(values)
    probes = np.array([int(keys.min()) - (1 << 20), int(keys.max()) + (1 << 20)])
    answer = SortedValues(values, np.ones(len(values), dtype=np.int64), None)
    rounds, second = 0, None
    while probes.size:
        reply = answer.count_below(probes)
        query.absorb(probes, reply["count"], None, reply["sum"])
        rounds += 1
        probes = query.probes(budget=2)
        second = probes if second is None else second
    assert np.array_equal(query.distinct_values(), np.unique(values))
    return rounds, second


def test_a_gap_of_equal_values_is_pinned_by_guesses_sized_by_its_count():
    """c rows of one value whose float sum is off by many units in the last place (0.1,
    1/3, pi, -7.3, ...; c up to 20,000) are pinned within three rounds, as with guesses at
    every distance up to 4096, and the guesses reach about 2c units around the gap's
    mean: one row sends the two keys at its sum, two rows at most 4 units off it."""
    for value in (0.1, 1 / 3, np.pi, 1e-300, -7.3, 123456.789, -1e-5):
        for c in (1, 2, 3, 17, 300, 5000, 20000):
            rounds, probes = _search_one_gap(np.full(c, value))
            assert rounds <= 3, (value, c)
            centre = int(value_keys([np.full(c, value).sum() / c])[0])
            near = probes[np.abs(probes - centre) <= 8192] - centre
            assert np.abs(near).max() <= max(1, 2 * c), (value, c)
            if c == 1:
                assert sorted(near) == [-1, 0]
