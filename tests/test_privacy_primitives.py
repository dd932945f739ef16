"""Privacy building blocks (issue 15): secure aggregation masks, fixed point, DP accounting."""

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("cryptography")
dp_accounting = pytest.importorskip("dp_accounting")

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey  # noqa: E402
from dp_accounting import rdp  # noqa: E402

from skfed.exceptions import ClientFailureError  # noqa: E402
from skfed.privacy import (DropoutError, FixedPoint, GaussianAccountant,  # noqa: E402
                           SecureAggregationParty, aggregate_masked, calibrate_noise_multiplier,
                           clip_by_l2_norm, distributed_noise_share, distributed_noise_std)


# --------------------------------------------------------------------------- helpers

def make_parties(ids, seed=0, session=b"test"):
    """Parties with fixed private keys, so every statistical test is deterministic."""
    rng = np.random.default_rng(seed)
    parties = [SecureAggregationParty(i, X25519PrivateKey.from_private_bytes(rng.bytes(32)),
                                      session=session) for i in ids]
    return parties, {p.party_id: p.public_key() for p in parties}


def bits(words):
    """(n_words, 64) array of the bits of uint64 words."""
    return np.unpackbits(np.ascontiguousarray(words, dtype="<u8").view(np.uint8)).reshape(-1, 64)


def looks_uniform(words, z_max=5.0):
    """Every one of the 64 bit positions is set with frequency 1/2 (binomial z-test)."""
    freq = bits(words).mean(axis=0)
    z = np.abs(freq - 0.5) / (0.5 / np.sqrt(len(words)))
    return bool(np.all(z < z_max))


def same_distribution(words_a, words_b, p_min=1e-4):
    """Chi-square two-sample tests on the lowest and the highest byte of the words."""
    a = np.ascontiguousarray(words_a, dtype="<u8").view(np.uint8).reshape(-1, 8)
    b = np.ascontiguousarray(words_b, dtype="<u8").view(np.uint8).reshape(-1, 8)
    for byte in (0, 7):
        table = np.array([np.bincount(a[:, byte], minlength=256),
                          np.bincount(b[:, byte], minlength=256)])
        table = table[:, table.sum(axis=0) > 0]
        if table.shape[1] < 2:
            return False  # a constant byte in both: not a uniform mask
        if stats.chi2_contingency(table)[1] < p_min:
            return False
    return True


FP = FixedPoint(32, bound=100.0, n_parties=5)
DIM, ROUNDS = 2048, 8  # 16384 words per sample


def masked_words(party, keys, x, rounds, fp=FP):
    return np.concatenate([party.mask(x, r, keys, fixed_point=fp).data for r in rounds])


# --------------------------------------------------------------------------- sum is exact

def test_masked_weighted_sum_equals_float_sum_to_stated_precision():
    rng = np.random.default_rng(1)
    parties, keys = make_parties([3, 0, 17, 5, 9])
    X = rng.uniform(-10, 10, size=(5, 300))
    w = rng.uniform(0.1, 5.0, size=5)  # |w x| <= 50 <= bound
    msgs = [p.mask(X[k], 7, keys, fixed_point=FP, weight=w[k]) for k, p in enumerate(parties)]
    total = aggregate_masked(msgs[::-1], FP)  # order does not matter
    exact = w @ X
    assert FP.sum_error == 5 * 2.0 ** -33
    err = np.abs(total - exact)
    assert err.max() <= FP.sum_error + 1e-15 * np.abs(exact).max()
    # and each masked vector alone is far from its plain encoding
    assert not np.array_equal(msgs[0].data, FP.encode(w[0] * X[0]))


def test_masks_cancel_exactly_and_shapes_are_kept():
    parties, keys = make_parties(range(4))
    msgs = [p.mask(np.zeros((3, 5)), 0, keys, fixed_point=FP) for p in parties]
    assert msgs[0].data.shape == (3, 5) and msgs[0].data.dtype == np.uint64
    assert msgs[0].parties == (0, 1, 2, 3) and msgs[0].nbytes == 15 * 8
    np.testing.assert_array_equal(aggregate_masked(msgs, FP), np.zeros((3, 5)))
    total = np.zeros((3, 5), np.uint64)
    for m in msgs:
        total += m.data
    np.testing.assert_array_equal(total, 0)


def test_fixed_point_roundtrip_and_negative_values():
    fp = FixedPoint(20, bound=3.0, n_parties=2)
    x = np.array([-3.0, -1e-7, 0.0, 1.23456789, 3.0])
    codes = fp.encode(x)
    assert codes.dtype == np.uint64
    assert np.abs(fp.decode(codes) - x).max() <= fp.party_error
    # two's complement: -1 ulp of the grid is 2**64 - 1
    assert fp.encode([-fp.resolution])[0] == np.uint64(2 ** 64 - 1)


# --------------------------------------------------------------------------- independence

@pytest.mark.parametrize("n_parties, who", [(2, 0), (3, 1), (5, 4)])
def test_single_masked_message_is_independent_of_its_input(n_parties, who):
    parties, keys = make_parties(range(n_parties), seed=n_parties)
    party = parties[who]
    zeros = np.zeros(DIM)
    extreme = np.where(np.arange(DIM) % 2, 1.0, -1.0) * FP.bound  # far from zeros, structured
    a = masked_words(party, keys, zeros, range(ROUNDS))
    b = masked_words(party, keys, extreme, range(ROUNDS, 2 * ROUNDS))
    assert looks_uniform(a) and looks_uniform(b)
    assert same_distribution(a, b)


def test_the_independence_test_detects_missing_and_reused_masks():
    """Power check: the statistics above fail on unmasked messages and on reused masks."""
    zeros = np.zeros(DIM * ROUNDS)
    extreme = np.where(np.arange(DIM * ROUNDS) % 2, 1.0, -1.0) * FP.bound
    plain_a, plain_b = FP.encode(zeros), FP.encode(extreme)
    assert not looks_uniform(plain_a) and not looks_uniform(plain_b)
    assert not same_distribution(plain_a, plain_b)
    # a mask reused for two messages: the difference of the two masked words is the
    # difference of the plain encodings, which is not uniform
    mask = np.random.default_rng(0).integers(0, 2 ** 63, size=zeros.size, dtype=np.uint64)
    assert not looks_uniform((plain_a + mask) - (plain_b + mask))


def test_missing_mask_is_detected(monkeypatch):
    """A party whose pairwise masks are (wrongly) zero sends its plain encoding."""
    parties, keys = make_parties(range(3))
    monkeypatch.setattr(SecureAggregationParty, "_pair_mask",
                        lambda self, peer, key, rnd, size, out=None: np.zeros(size, np.uint64))
    words = masked_words(parties[1], keys, np.zeros(DIM), range(ROUNDS))
    assert not looks_uniform(words)


def test_masks_differ_across_rounds_pairs_and_sessions():
    parties, keys = make_parties(range(3))
    p0, p1, p2 = parties
    x, y = np.zeros(DIM), np.full(DIM, 42.0)
    # the two ends of a pair derive the same mask; it changes with the round and the pair
    m01 = p0._pair_mask(1, keys[1], 0, DIM)
    np.testing.assert_array_equal(m01, p1._pair_mask(0, keys[0], 0, DIM))
    assert looks_uniform(m01)
    assert looks_uniform(m01 - p0._pair_mask(1, keys[1], 1, DIM))  # next round
    assert looks_uniform(m01 - p0._pair_mask(2, keys[2], 0, DIM))  # other pair
    # same keys, another session: other masks
    q0 = SecureAggregationParty(0, p0._private_key, session=b"another fit")
    assert looks_uniform(m01 - q0._pair_mask(1, keys[1], 0, DIM))
    # two messages of one party in two rounds: their difference hides x - y
    d = p1.mask(x, 0, keys, fixed_point=FP).data - p1.mask(y, 1, keys, fixed_point=FP).data
    assert looks_uniform(d)
    assert not np.array_equal(d, FP.encode(x) - FP.encode(y))


def test_masking_twice_in_one_round_is_refused():
    parties, keys = make_parties(range(2))
    parties[0].mask(np.ones(3), 4, keys, fixed_point=FP)
    with pytest.raises(ValueError, match="already masked a message in round 4"):
        parties[0].mask(np.zeros(3), 4, keys, fixed_point=FP)
    parties[0].mask(np.zeros(3), 5, keys, fixed_point=FP)  # a new identifier is fine


# --------------------------------------------------------------------------- errors

def test_overflow_check_names_the_numbers():
    with pytest.raises(OverflowError, match=r"10 \* round\(1e\+06 \* 2\*\*40\).*2\*\*63"):
        FixedPoint(40, bound=1e6, n_parties=10)
    f = FixedPoint.max_fraction_bits(1e6, 10)
    FixedPoint(f, bound=1e6, n_parties=10)  # the largest admissible value works
    with pytest.raises(OverflowError):
        FixedPoint(f + 1, bound=1e6, n_parties=10)
    # the boundary is exact: n * B * 2**f = 2**63 overflows, one less party does not
    with pytest.raises(OverflowError):
        FixedPoint(60, bound=4.0, n_parties=2)
    FixedPoint(60, bound=4.0, n_parties=1)
    # the worst case of the check really decodes: n * (+B) and n * (-B)
    fp = FixedPoint(f, bound=1e6, n_parties=10)
    for sign in (1.0, -1.0):
        total = np.zeros(1, np.uint64)
        for _ in range(10):
            total += fp.encode([sign * 1e6])
        assert fp.decode(total, n_terms=10)[0] == pytest.approx(sign * 1e7, rel=1e-12)


def test_encode_rejects_values_beyond_the_bound():
    with pytest.raises(ValueError, match="max \\|x\\| = 200.*bound = 100"):
        FP.encode([0.0, -200.0])
    with pytest.raises(ValueError, match="non-finite"):
        FP.encode([np.nan])
    parties, keys = make_parties(range(2))
    with pytest.raises(ValueError, match="bound"):  # the weight counts
        parties[0].mask(np.full(2, 60.0), 0, keys, fixed_point=FP, weight=2.0)
    with pytest.raises(ValueError, match="bound must be a positive"):
        FixedPoint(10, bound=0.0, n_parties=2)
    with pytest.raises(ValueError, match="fraction_bits"):
        FixedPoint(63, bound=1.0, n_parties=1)


def test_dropout_after_masking_raises_dropout_error():
    parties, keys = make_parties([0, 1, 2, 3, 4])
    msgs = [p.mask(np.ones(4), 2, keys, fixed_point=FP) for p in parties]
    with pytest.raises(DropoutError, match=r"parties \[3\].*not implemented.*restart") as info:
        aggregate_masked(msgs[:3] + msgs[4:], FP)
    assert info.value.missing == (3,)
    assert isinstance(info.value, ClientFailureError)
    np.testing.assert_allclose(aggregate_masked(msgs, FP), np.full(4, 5.0))


def test_inconsistent_messages_are_refused():
    parties, keys = make_parties(range(3))
    msgs = [p.mask(np.ones(4), 0, keys, fixed_point=FP) for p in parties]
    with pytest.raises(ValueError, match="more than one message"):
        aggregate_masked(msgs + msgs[:1], FP)
    later = parties[0].mask(np.ones(4), 1, keys, fixed_point=FP)
    with pytest.raises(ValueError, match="different rounds"):
        aggregate_masked([later] + msgs[1:], FP)
    fresh, _ = make_parties(range(3))  # same keys, new objects: may mask round 0 again
    alone = fresh[0].mask(np.ones(4), 0, {k: keys[k] for k in (0, 1)}, fixed_point=FP)
    with pytest.raises(ValueError, match="different party sets"):
        aggregate_masked([alone] + msgs[1:], FP)
    # masks derived for another session do not cancel: caught by the range check
    other, _ = make_parties([0], session=b"other")
    stray = other[0].mask(np.ones(4), 0, {**keys, 0: other[0].public_key()}, fixed_point=FP)
    with pytest.raises(ValueError, match="out of range"):
        aggregate_masked([stray] + msgs[1:], FP)
    with pytest.raises(ValueError, match="at least two parties"):
        parties[1].mask(np.ones(4), 5, {1: keys[1]}, fixed_point=FP)
    with pytest.raises(ValueError, match="n_parties"):
        parties[1].mask(np.ones(4), 6, keys, fixed_point=FixedPoint(8, bound=1, n_parties=2))


# --------------------------------------------------------------------------- accounting

@pytest.mark.parametrize("sigma, q, rounds", [(1.1, 0.1, 50), (4.0, 1.0, 20)])
def test_accountant_matches_dp_accounting(sigma, q, rounds):
    delta = 1e-5
    acc = GaussianAccountant(sigma, q, delta)
    event = dp_accounting.GaussianDpEvent(sigma)
    if q < 1:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    direct = rdp.RdpAccountant().compose(
        dp_accounting.SelfComposedDpEvent(event, rounds)).get_epsilon(delta)
    assert acc.epsilon_after(rounds) == direct
    eps = acc.epsilons(rounds)
    assert eps[-1] == pytest.approx(direct, rel=1e-9)
    assert np.all(np.diff(eps) >= 0)
    assert eps[rounds // 2 - 1] == pytest.approx(acc.epsilon_after(rounds // 2), rel=1e-9)
    if q == 1:  # the Gaussian mechanism's closed-form RDP gives the same epsilon
        k = acc.max_rounds(direct)
        assert k >= rounds and acc.epsilon_after(k + 1) > direct
    assert acc.epsilon_after(0) == 0.0
    assert GaussianAccountant(0.0, q, delta).epsilon_after(3) == np.inf


def test_calibration_meets_the_budget_tightly():
    target, delta, rounds, q = 2.0, 1e-5, 100, 0.1
    sigma = calibrate_noise_multiplier(target, delta, rounds, q)
    eps = GaussianAccountant(sigma, q, delta).epsilon_after(rounds)
    assert eps <= target
    assert eps >= 0.995 * target
    assert GaussianAccountant(sigma * (1 - 1e-3), q, delta).epsilon_after(rounds) > target
    full = calibrate_noise_multiplier(8.0, delta, 10)  # every client every round
    assert GaussianAccountant(full, 1.0, delta).epsilon_after(10) <= 8.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(epsilon=0.0), "epsilon"), (dict(epsilon=-1.0), "epsilon"),
    (dict(epsilon=np.inf), "epsilon"), (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"),
    (dict(rounds=0), "rounds"), (dict(sampling_rate=0.0), "sampling_rate"),
    (dict(sampling_rate=1.5), "sampling_rate"),
    (dict(epsilon=1e-3, max_noise_multiplier=10.0), "cannot be met"),
])
def test_calibration_rejects_budgets_that_cannot_be_met(kwargs, match):
    args = dict(epsilon=1.0, delta=1e-5, rounds=10, sampling_rate=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        calibrate_noise_multiplier(**args)


def test_accountant_rejects_bad_parameters():
    for bad in (dict(noise_multiplier=-1.0), dict(delta=0.0), dict(sampling_rate=0.0)):
        args = dict(noise_multiplier=1.0, sampling_rate=1.0, delta=1e-5)
        args.update(bad)
        with pytest.raises(ValueError):
            GaussianAccountant(**args)
    with pytest.raises(ValueError, match="rounds"):
        GaussianAccountant(1.0).epsilons(0)


# --------------------------------------------------------------------------- clipping, noise

def test_clipping_bounds_the_norm():
    rng = np.random.default_rng(3)
    for scale in (1e-3, 1.0, 1e3, 1e8):
        for _ in range(20):
            x = scale * rng.standard_normal(rng.integers(1, 50))
            for bound in (1e-6, 0.5, 7.0):
                c = clip_by_l2_norm(x, bound)
                assert np.linalg.norm(c) <= bound
                if np.linalg.norm(x) <= bound:
                    np.testing.assert_array_equal(c, x)
                else:  # same direction
                    np.testing.assert_allclose(c / np.linalg.norm(c), x / np.linalg.norm(x))
    x = np.array([3.0, 4.0])
    clip_by_l2_norm(x, 1.0)
    np.testing.assert_array_equal(x, [3.0, 4.0])  # not modified in place


@pytest.mark.parametrize("bound", [0.0, -1.0, np.nan, np.inf])
def test_clipping_bound_must_be_positive(bound):
    with pytest.raises(ValueError, match="clipping bound"):
        clip_by_l2_norm(np.ones(3), bound)


def test_distributed_noise_sums_to_the_central_noise():
    sigma, C, n = 1.3, 0.7, 8
    assert distributed_noise_std(sigma, C, n) == pytest.approx(sigma * C / np.sqrt(n))
    assert distributed_noise_std(sigma, C, n, min_honest=6) == pytest.approx(
        sigma * C / np.sqrt(6))
    rng = np.random.default_rng(0)
    shares = np.array([distributed_noise_share(20000, sigma, C, n, random_state=rng)
                       for _ in range(n)])
    total = shares.sum(axis=0)
    assert np.std(total) == pytest.approx(sigma * C, rel=0.03)
    assert abs(np.mean(total)) < 5 * sigma * C / np.sqrt(total.size)
    # through secure aggregation: the server decodes only the noisy sum
    parties, keys = make_parties(range(n))
    fp = FixedPoint(32, bound=50.0, n_parties=n)
    x = np.array([clip_by_l2_norm(v, C) for v in rng.standard_normal((n, 10))])
    noise = np.array([distributed_noise_share(10, sigma, C, n, random_state=rng)
                      for _ in range(n)])
    msgs = [p.mask(x[k] + noise[k], 0, keys, fixed_point=fp) for k, p in enumerate(parties)]
    np.testing.assert_allclose(aggregate_masked(msgs, fp), (x + noise).sum(axis=0),
                               atol=fp.sum_error)


@pytest.mark.parametrize("args", [(-1.0, 1.0, 2), (1.0, 0.0, 2), (1.0, 1.0, 0)])
def test_distributed_noise_rejects_bad_input(args):
    with pytest.raises(ValueError):
        distributed_noise_std(*args)
    with pytest.raises(ValueError, match="min_honest"):
        distributed_noise_std(1.0, 1.0, 3, min_honest=4)


# --------------------------------------------------------------------------- protocol versions

def test_parties_of_different_versions_refuse_to_combine():
    """A ChaCha20 (version 1) party and an AES-128-CTR (version 2) party derive masks
    that do not cancel: the server refuses their messages instead of decoding garbage,
    and the key agreement refuses a site of another version before anything is
    masked."""
    from skfed.privacy.secure_aggregation import PROTOCOL_VERSION, check_versions

    rng = np.random.default_rng(5)
    keys_ = [X25519PrivateKey.from_private_bytes(rng.bytes(32)) for _ in range(2)]
    old = SecureAggregationParty(0, keys_[0], session=b"s", version=1)
    new = SecureAggregationParty(1, keys_[1], session=b"s")
    assert new.version == PROTOCOL_VERSION == 2
    keys = {0: old.public_key(), 1: new.public_key()}
    x = np.linspace(-50.0, 50.0, DIM)
    messages = [old.mask(x, 0, keys, fixed_point=FP), new.mask(x, 0, keys, fixed_point=FP)]
    assert [m.version for m in messages] == [1, 2]
    with pytest.raises(ValueError, match="different protocol versions"):
        aggregate_masked(messages, FP)
    # what the refusal prevents: the two masks do not cancel
    total = messages[0].data + messages[1].data
    assert looks_uniform(total - 2 * FP.encode(x))
    with pytest.raises(ValueError, match=r"sites \[1\] speak protocol version\(s\) \[1\]"):
        check_versions([{"version": 2}, {"version": 1}])
    with pytest.raises(ValueError, match="unknown secure aggregation protocol version 7"):
        SecureAggregationParty(0, version=7)


@pytest.mark.parametrize("version", [1, 2])
def test_each_version_sums_exactly(version):
    """Within one version the masks cancel: the decoded sum is the sum of the
    encodings, exactly, and a message alone looks uniform."""
    rng = np.random.default_rng(version)
    parties = [SecureAggregationParty(i, X25519PrivateKey.from_private_bytes(rng.bytes(32)),
                                      session=b"v", version=version) for i in range(3)]
    keys = {p.party_id: p.public_key() for p in parties}
    xs = [rng.normal(size=DIM) for _ in parties]
    messages = [p.mask(x, 3, keys, fixed_point=FP) for p, x in zip(parties, xs)]
    assert looks_uniform(messages[0].data)
    codes = sum(FP.encode(x).view(np.int64).astype(object) for x in xs)
    np.testing.assert_array_equal(aggregate_masked(messages, FP),
                                  np.ldexp(codes.astype(np.float64), -FP.fraction_bits))


def test_mask_words_masks_integer_limbs_that_cancel_exactly():
    """The limb path: words encoded by the caller, masked, summed modulo 2**64 to the
    plain sum of the words; one message alone looks uniform."""
    from skfed.privacy.secure_aggregation import sum_masked

    parties, keys = make_parties(range(4))
    rng = np.random.default_rng(2)
    words = [rng.integers(-2 ** 40, 2 ** 40, DIM).view(np.uint64) for _ in parties]
    messages = [p.mask_words(w, 9, keys) for p, w in zip(parties, words)]
    assert looks_uniform(messages[2].data)
    plain = np.zeros(DIM, dtype=np.uint64)
    for w in words:
        plain += w
    np.testing.assert_array_equal(sum_masked(messages, 4), plain)
    with pytest.raises(ValueError, match="already masked a message in round 9"):
        parties[0].mask_words(words[0], 9, keys)


def test_mask_words_in_place_and_in_threads_give_the_same_masks():
    """copy=False masks the caller's own words in place (the same message as a copy's);
    parties masking at once in threads (a site service's) each use their own keystream
    buffer: every sum still cancels to the plain one."""
    from concurrent.futures import ThreadPoolExecutor

    from skfed.privacy.secure_aggregation import sum_masked

    rng = np.random.default_rng(5)
    words = [rng.integers(0, 2 ** 40, 50_000).view(np.uint64) for _ in range(4)]
    kept = [w.copy() for w in words]
    plain = np.zeros(50_000, dtype=np.uint64)
    for w in words:
        plain += w
    parties, keys = make_parties(range(4))
    for round in range(1, 4):
        copies = [p.mask_words(w, round, keys) for p, w in zip(parties, words)]
        for w, k in zip(words, kept):
            np.testing.assert_array_equal(w, k)  # untouched
        np.testing.assert_array_equal(sum_masked(copies, 4), plain)
    own = [w.copy() for w in words]
    messages = [p.mask_words(w, 7, keys, copy=False) for p, w in zip(parties, own)]
    assert all(np.shares_memory(m.data, w) for m, w in zip(messages, own))
    np.testing.assert_array_equal(sum_masked(messages, 4), plain)
    with ThreadPoolExecutor(4) as pool:
        for exchange in range(10, 15):
            threaded = list(pool.map(lambda pw: pw[0].mask_words(pw[1], exchange, keys),
                                     zip(parties, words)))
            np.testing.assert_array_equal(sum_masked(threaded, 4), plain)
