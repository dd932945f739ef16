"""The session's plain sum of array replies with unit coefficients, added in place
(skfed/federation/session.py): the general formula's float64 additions, bit for bit."""

import numpy as np
import pytest

from skfed.federation.session import add_fields


def _general(replies, coefficients):
    return sum(c * np.asarray(r, dtype=float) for c, r in zip(coefficients, replies))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.uint32, np.int64, bool])
def test_in_place_sum_is_the_general_formulas(dtype):
    rng = np.random.default_rng(0)
    replies = [{"a": (rng.normal(size=(4, 7)) * 1e3).astype(dtype), "n": 3}
               for _ in range(4)]
    if dtype is np.float64:
        for r in replies:  # -0.0 everywhere in one cell: the general sum gives +0.0
            r["a"][0, 0] = -0.0
        replies[0]["a"][1, 1] = np.nan
    out = add_fields(replies)
    expected = _general([r["a"] for r in replies], np.ones(4))
    assert out["a"].dtype == np.float64
    np.testing.assert_array_equal(out["a"], expected)
    assert np.array_equal(np.signbit(out["a"]), np.signbit(expected))
    assert out["n"] == 12


def test_weighted_or_ragged_replies_keep_the_general_formula():
    rng = np.random.default_rng(1)
    replies = [rng.normal(size=5) for _ in range(3)]
    c = np.array([0.5, 2.0, -1.0])
    np.testing.assert_array_equal(add_fields(replies, c), _general(replies, c))
    ragged = [np.ones(3), np.ones((2, 3))]  # broadcast, as the general formula does
    np.testing.assert_array_equal(add_fields(ragged), _general(ragged, np.ones(2)))
    scalars = [np.array(1.5), np.array(-2.0)]  # 0-d arrays: a numpy scalar, as before
    assert add_fields(scalars) == _general(scalars, np.ones(2)) == -0.5


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
@pytest.mark.parametrize("top", ["small", "at the wrap", "past the wrap"])
def test_counts_added_in_their_own_type_never_wrap(dtype, top):
    """Unsigned counts are added in their own type only where the replies' largest values
    cannot wrap it; at and past the edge the sums are still the exact integers."""
    limit = int(np.iinfo(dtype).max)
    rng = np.random.default_rng(2)
    replies = [rng.integers(0, 50, size=(3, 5)).astype(dtype) for _ in range(4)]
    if top != "small":
        share = limit // 4 + (0 if top == "at the wrap" else 1)
        for r in replies:
            r[0, 0] = share
    out = add_fields(replies)
    expected = sum(r.astype(np.int64) for r in replies).astype(np.float64)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, expected)
    assert out[0, 0] == (4 * share if top != "small" else expected[0, 0])
