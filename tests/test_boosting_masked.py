"""Boosted trees under secure aggregation: every sum of the fit masked, the same trees.

``privacy=SecureAggregation()`` runs every sum of a boosting fit (totals, bin
counts, node histograms, residual counts, losses) as an exact masked sum
(:mod:`skfed.privacy.masked_sums`): each site writes its reply's numbers as
exact integers in limbs and masks them; the server decodes only the totals. The
oracle: the masked fit equals the plain fit bit for bit — every node of every
tree, the scores — and so scikit-learn's pooled model, ties between splits
included (the absolute error and quantile losses, whose gradients take two
values, tie often). Tiny exact cases pin the limb code.
"""

import math

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

pytest.importorskip("cryptography")

from skfed.ensemble import (FedHistGradientBoostingClassifier,  # noqa: E402
                            FedHistGradientBoostingRegressor)
from skfed.privacy import DifferentialPrivacy, SecureAggregation  # noqa: E402
from skfed.privacy.masked_sums import (EXPONENT, RANGE_BITS, limb_bits,  # noqa: E402
                                       limb_count, flatten_reply, unflatten_total)

from .test_hist_gradient_boosting import assert_same_trees, make_data, pooled, split  # noqa


@pytest.fixture(autouse=True)
def one_openmp_thread():
    with threadpool_limits(limits=1, user_api="openmp"):
        yield


NODE_FIELDS = ("is_leaf", "feature_idx", "bin_threshold", "num_threshold", "missing_go_to_left",
               "left", "right", "count", "depth", "is_categorical", "value", "gain")


def assert_bitwise_same(masked, plain):
    """Every node of every tree: the same floats, bit for bit (the histograms' sums
    of float32 gradients are exact both ways); the losses to the last bit."""
    assert masked.n_iter_ == plain.n_iter_
    # the baseline is a quotient of float64 sums (the target's): an ulp apart at most
    np.testing.assert_allclose(masked._baseline_prediction, plain._baseline_prediction,
                               rtol=1e-14, atol=1e-15)
    for ours, theirs in zip(masked._predictors, plain._predictors):
        for a, b in zip(ours, theirs):
            for field in NODE_FIELDS:
                np.testing.assert_array_equal(a.nodes[field], b.nodes[field], err_msg=field)
            np.testing.assert_array_equal(a.binned_left_cat_bitsets, b.binned_left_cat_bitsets)
    for a, b in zip(masked.bin_thresholds_, plain.bin_thresholds_):
        np.testing.assert_array_equal(a, b)
    # the losses are float64 sums: the masked one is the exact sum rounded once, the
    # plain one the sites' sums added in turn (an ulp apart at most)
    for scores in ("train_score_", "validation_score_"):
        np.testing.assert_allclose(getattr(masked, scores), getattr(plain, scores),
                                   rtol=1e-15, atol=0)
    np.testing.assert_allclose(masked.history_["train_loss"], plain.history_["train_loss"],
                               rtol=1e-15, atol=0)


def fit_twice(cls, X, y, clients, sample_weight=None, **params):
    params = {"max_iter": 8, "random_state": 0, "early_stopping": False, **params}
    plain = cls(**params).fit(X, y, clients=clients, sample_weight=sample_weight)
    masked = cls(**params, privacy=SecureAggregation()).fit(
        X, y, clients=clients, sample_weight=sample_weight)
    return masked, plain


# -- the same model -------------------------------------------------------------
@pytest.mark.parametrize("loss,quantile", [("squared_error", None), ("absolute_error", None),
                                           ("quantile", 0.3), ("poisson", None),
                                           ("gamma", None)])
@pytest.mark.parametrize("kind", ["iid", "by_feature"])
def test_a_masked_regressor_is_the_plain_one_bit_for_bit(loss, quantile, kind):
    X, y, rng = make_data(n=600, missing=0.05)
    if loss in ("poisson", "gamma"):
        y = np.exp(0.3 * np.nan_to_num(X[:, 0])) + (loss == "gamma")
        y = rng.poisson(y) + (loss == "gamma") * 0.5
    clients = split(X, rng, kind)
    masked, plain = fit_twice(FedHistGradientBoostingRegressor, X, y, clients, loss=loss,
                              quantile=quantile, max_iter=6)
    assert_bitwise_same(masked, plain)
    # and so scikit-learn's pooled model
    Xp, yp = pooled(X, y, clients=clients)
    ref = HistGradientBoostingRegressor(loss=loss, quantile=quantile, max_iter=6,
                                        random_state=0, early_stopping=False).fit(Xp, yp)
    assert_same_trees(masked, ref)


def test_a_masked_classifier_with_weights_missing_values_and_early_stopping():
    """Multiclass, sample and class weights, missing values, a categorical column,
    held-out rows drawn at each site (their own masked session): the same model."""
    import pandas as pd

    X, signal, rng = make_data(n=1000, missing=0.05)
    y = np.digitize(signal, np.quantile(signal, [0.3, 0.7]))
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    frame["ward"] = pd.Categorical(rng.choice(["a", "b", "c", "d"], len(y)))
    weights = rng.uniform(0.5, 2.0, len(y))
    clients = split(X, rng, "by_feature")
    masked, plain = fit_twice(FedHistGradientBoostingClassifier, frame, y, clients,
                              sample_weight=weights, class_weight="balanced",
                              early_stopping=True, validation_fraction=0.2,
                              n_iter_no_change=3, max_iter=10)
    assert_bitwise_same(masked, plain)
    assert len(masked.validation_score_) > 0
    from skfed.data import FederatedDataset

    dataset = FederatedDataset.from_arrays(frame, y, clients, weights)
    # masked sums of float64 weights: the exact sums, an ulp from the plain ones
    assert masked.score(dataset) == pytest.approx(plain.score(dataset), rel=1e-15)
    record = masked.history_.privacy
    assert record["secure_aggregation"] and record["exact"]
    assert record["masked_sums"] > masked.n_iter_


def test_monotonic_and_interaction_constraints_under_masking():
    X, y, rng = make_data(n=800)
    clients = split(X, rng, "iid")
    masked, plain = fit_twice(FedHistGradientBoostingRegressor, X, y, clients,
                              monotonic_cst=[1, 0, 0, -1, 0],
                              interaction_cst=[[0, 1], [2, 3, 4]], max_features=0.6)
    assert_bitwise_same(masked, plain)


def test_the_ledger_counts_the_key_agreement_and_the_limbs(monkeypatch):
    """One setup round more (the keys); every histogram float travels as the limbs a
    sum over the fit's sites needs (four words up to four sites), a count as one (every
    cell sent, as the plain fit sends them: the cells left out have their own test)."""
    from skfed.ensemble import _site_rows

    monkeypatch.setattr(_site_rows, "kept_bins",
                        lambda context: [None] * len(context["thresholds"]))
    X, y, rng = make_data(n=600)
    clients = split(X, rng, "iid")
    masked, plain = fit_twice(FedHistGradientBoostingRegressor, X, y, clients, max_iter=3)
    assert masked.history_.setup_rounds == plain.history_.setup_rounds + 1
    np.testing.assert_array_equal(masked.history_["rounds"], plain.history_["rounds"])
    ratio = masked.history_["bytes"][1:].sum() / plain.history_["bytes"][1:].sum()
    n_sites = len(np.unique(clients))
    assert masked.history_.privacy["limbs"] == limb_count(n_sites) == 4
    # gradients and hessians in four words, counts in one: between 1x and 4x
    assert 2.0 < ratio < limb_count(n_sites)
    assert plain.history_.privacy is None


def test_the_cells_no_row_can_be_in_are_left_out_of_every_histogram(monkeypatch):
    """A feature's histograms travel in the bins its thresholds give and the missing bin
    only (public: the thresholds; every other cell is zero at every site): a binary
    feature in 3 cells, not 256. The trees are those of every cell, masked or not, bit
    for bit, and the masked bytes shrink with the cells."""
    from skfed.ensemble import _site_rows

    context = {"max_bins": 255, "thresholds": [np.linspace(0.0, 1.0, 254), np.array([0.5]),
                                               np.arange(3.0)]}
    kept = _site_rows.kept_bins(context)
    assert kept[0] is None
    np.testing.assert_array_equal(kept[1], [0, 1, 255])
    np.testing.assert_array_equal(kept[2], [0, 1, 2, 3, 255])  # a code past the last too
    assert _site_rows.node_cells(context, np.array([0])) is None
    np.testing.assert_array_equal(_site_rows.node_cells(context, np.array([2, 1])),
                                  [0, 1, 2, 3, 255, 256, 257, 511])
    # a site keeps the cells of a bounded number of feature lists, whatever is asked
    for j in range(200):
        _site_rows.node_cells(context, np.array([1] * (j + 1)))
    assert len(_site_rows._kept_entry(context)[2]) <= _site_rows._MAX_KNOWN_CELLS
    rng = np.random.default_rng(5)
    n = 600
    X = np.column_stack([rng.normal(size=n), rng.integers(0, 2, n), rng.integers(0, 2, n),
                         rng.integers(0, 4, n)]).astype(float)
    y = X[:, 0] + X[:, 1] - 2 * X[:, 2] * X[:, 3] + rng.normal(scale=0.3, size=n)
    clients = rng.integers(0, 3, n)
    masked, plain = fit_twice(FedHistGradientBoostingRegressor, X, y, clients, max_iter=3)
    assert_bitwise_same(masked, plain)
    monkeypatch.setattr(_site_rows, "kept_bins",
                        lambda context: [None] * len(context["thresholds"]))
    every_masked, every_plain = fit_twice(FedHistGradientBoostingRegressor, X, y, clients,
                                          max_iter=3)
    assert_bitwise_same(masked, every_masked)
    assert_bitwise_same(plain, every_plain)
    np.testing.assert_array_equal(masked.history_["rounds"], every_masked.history_["rounds"])
    # 256 + 3 + 3 + 5 cells a node instead of 4 x 256
    ratio = masked.history_["bytes"][1:].sum() / every_masked.history_["bytes"][1:].sum()
    assert 267 / 1024 <= ratio < 0.3


def test_the_limb_count_is_public_not_the_datas():
    """Two datasets of one shape, values of very different magnitudes: the same limbs,
    the same words per masked sum (sized from the number of sites and the code's
    public range, never from the values)."""
    X, y, rng = make_data(n=400)
    clients = split(X, rng, "iid")
    small, _ = fit_twice(FedHistGradientBoostingRegressor, X, y * 1e-6, clients, max_iter=2)
    large, _ = fit_twice(FedHistGradientBoostingRegressor, X, y * 1e12, clients, max_iter=2)
    assert small.history_.privacy["limbs"] == large.history_.privacy["limbs"]
    for n_sites in (2, 3, 4, 17, 8191):
        tiny = flatten_reply({"g": np.full(30, 1e-30), "c": np.zeros(30, np.uint32)}, n_sites)
        huge = flatten_reply({"g": np.full(30, 1e25), "c": np.full(30, 10 ** 9)}, n_sites)
        assert tiny[0].shape == huge[0].shape == ((limb_count(n_sites) + 1) * 30,)
        assert tiny[1] == huge[1]


def test_a_bounded_loss_sends_its_sums_in_the_limbs_its_public_bounds_need():
    """Binomial and multinomial log loss, absolute error, quantile: gradients at most 1
    and hessians at most 1/4 a row, over rows whose count every site published with
    its key: three limbs (four sites) instead of four, and three counts to a word, the
    trees still the plain fit's bit for bit. Two datasets of one shape, targets and
    features of other values: the same words (never sized from the data). Unbounded
    losses keep four limbs (their counts packed); weighted rows keep the whole code."""
    X, y, rng = make_data(n=600)
    clients = split(X, rng, "iid")
    labels = (y > np.median(y)).astype(int)
    masked, plain = fit_twice(FedHistGradientBoostingClassifier, X, labels, clients,
                              max_iter=3)
    assert_bitwise_same(masked, plain)
    from skfed.privacy.masked_sums import field_ranges

    # counts in lanes of the bits the rows' count (public: the sites' weight sums) needs
    per_count = 1 / (63 // field_ranges({"c": 1.0}, len(labels))["c"])
    bounded = {"gradients": 3, "hessians": 3, "counts": per_count}
    assert masked.history_.privacy["bounded_limbs"] == bounded
    ratio = masked.history_["bytes"][1:].sum() / plain.history_["bytes"][1:].sum()
    assert ratio < 2.5  # 6.2 words a cell against 20 bytes (four limbs, a count: 3.6)
    other = rng.permutation(labels)
    again, _ = fit_twice(FedHistGradientBoostingClassifier, X * 1e6 + 3, other, clients,
                         max_iter=2)
    assert again.history_.privacy["bounded_limbs"] == bounded
    three = np.digitize(y, np.quantile(y, [0.3, 0.7]))
    masked, plain = fit_twice(FedHistGradientBoostingClassifier, X, three, clients,
                              max_iter=2)
    assert_bitwise_same(masked, plain)
    assert masked.history_.privacy["bounded_limbs"] == bounded
    masked, _ = fit_twice(FedHistGradientBoostingRegressor, X, y, clients, max_iter=2,
                          loss="absolute_error")
    assert masked.history_.privacy["bounded_limbs"] == {"gradients": 3, "counts": per_count}
    for kwargs in ({"loss": "squared_error"}, {"loss": "poisson"}):
        yy = np.abs(y) if kwargs["loss"] == "poisson" else y
        masked, _ = fit_twice(FedHistGradientBoostingRegressor, X, yy, clients, max_iter=2,
                              **kwargs)
        assert masked.history_.privacy["bounded_limbs"] == {"counts": per_count}
    masked, plain = fit_twice(FedHistGradientBoostingClassifier, X, labels, clients,
                              max_iter=2, sample_weight=rng.uniform(0.5, 2, len(labels)))
    assert masked.history_.privacy["bounded_limbs"] == {}
    assert_bitwise_same(masked, plain)


def test_a_bounded_range_is_public_and_its_edge_sums_exactly():
    """The range of a bounded field is a function of the public weight sum and the
    declared per-row bound only; values at the edge of it, at every site, of one sign,
    decode to the exact sum rounded once; a value beyond it is refused by name."""
    from skfed.privacy.masked_sums import field_ranges, range_bits_for

    assert field_ranges({"g": 1.0, "h": 0.25}, 20000.0) == {"g": 16, "h": 14}
    assert field_ranges({"g": 1.0}, None) == {} == field_ranges({}, 5.0)
    assert range_bits_for(float("inf")) == RANGE_BITS == range_bits_for(2.0 ** 95)
    for n_sites in (2, 4, 8191):
        weight = 5000.0 * n_sites
        ranges = field_ranges({"g": 1.0}, weight)
        edge = np.array([5000.0, -5000.0, 2.0 ** -149, -(5000.0 - 2.0 ** -12), 0.0])
        words, layout = flatten_reply({"g": edge}, n_sites, ranges)
        assert layout == [("g", (5,), False, ranges["g"])]
        assert words.size == 5 * limb_count(n_sites, ranges["g"]) < 5 * limb_count(n_sites)
        total = words * np.uint64(n_sites)
        got = unflatten_total(total, layout, n_sites)["g"]
        np.testing.assert_array_equal(got, [_exact_sum([v] * n_sites) for v in edge])
        with pytest.raises(ValueError, match="field 'g' .* beyond the exact code"):
            flatten_reply({"g": np.array([2.0 ** ranges["g"]])}, n_sites, ranges)
    for n_sites in (2, 4, 8191):  # counts, several to a word: each lane's sum stays in it
        ranges = field_ranges({"c": 1.0}, 5000.0 * n_sites)
        counts = np.array([5000, 0, 1, 4999, 5000], dtype=np.uint32)
        words, layout = flatten_reply({"c": counts}, n_sites, ranges)
        assert layout == [("c", (5,), True, ranges["c"])]
        assert words.size == -(-5 // (63 // ranges["c"])) < 5
        got = unflatten_total(words * np.uint64(n_sites), layout, n_sites)["c"]
        np.testing.assert_array_equal(got, counts * n_sites)
        with pytest.raises(ValueError, match="field 'c' .* beyond its public bound"):
            flatten_reply({"c": np.array([2 ** ranges["c"]], np.uint32)}, n_sites, ranges)
    noise = np.random.default_rng(1).integers(0, 2 ** 64, words.size, dtype=np.uint64)
    with pytest.raises(ValueError, match="out of range: the words are not a sum"):
        unflatten_total(words + noise, layout, 8191)
    words, layout = flatten_reply({"g": np.ones(3)}, 4, {"g": 16})
    for bad in (0, RANGE_BITS + 1, 2.5, True):
        with pytest.raises(ValueError, match="range bits"):
            unflatten_total(words, [("g", (3,), False, bad)], 4)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 50])
def test_every_kind_of_field_is_written_in_place_into_one_vector(size):
    """A reply of every kind of field (counts several to a word, bounded and unbounded
    floats, integers, scalars), of sizes that fill a word's lanes or not: its one vector
    is each field's words in order (each written over whatever the buffer held), and
    the sites' sums decode exactly."""
    from skfed.privacy.masked_sums import _integer_words, _limbs, _packed

    rng = np.random.default_rng(size)
    n_sites, ranges = 3, {"c": 13, "g": 14}
    sites = [{"c": rng.integers(0, 2 ** 13 // n_sites, size).astype(np.uint32),
              "g": rng.normal(size=size).astype(np.float32).astype(np.float64),
              "i": rng.integers(-1000, 1000, size), "x": rng.normal(size=size) * 1e9,
              "loss": float(rng.normal())} for _ in range(n_sites)]
    vectors = [flatten_reply(s, n_sites, ranges) for s in sites]
    words, layout = vectors[0]
    alone = [flatten_reply({f: v}, n_sites, ranges)[0] for f, v in sites[0].items()]
    np.testing.assert_array_equal(words, np.concatenate(alone))
    for field, encoder, args in (("c", _packed, (13,)), ("g", _limbs, (n_sites, 14)),
                                 ("i", _integer_words, ()), ("x", _limbs, (n_sites,))):
        fresh = encoder(sites[0][field], field, *args)
        dirty = np.full(fresh.size, -1, dtype=np.int64)  # a reused buffer's old words
        encoder(sites[0][field], field, *args, out=dirty)
        np.testing.assert_array_equal(dirty, fresh)
    sums = unflatten_total(_masked_total([v for v, _ in vectors]), layout, n_sites)
    for field in ("c", "i"):
        np.testing.assert_array_equal(sums[field], sum(s[field].astype(np.int64)
                                                       for s in sites))
    for field in ("g", "x"):
        for j in range(size):
            assert sums[field][j] == _exact_sum([s[field][j] for s in sites])
    assert sums["loss"] == _exact_sum([s["loss"] for s in sites])


# -- what is refused --------------------------------------------------------------
def test_differential_privacy_is_refused_with_the_reason():
    X, y, rng = make_data(n=200)
    est = FedHistGradientBoostingRegressor(privacy=DifferentialPrivacy(epsilon=1.0))
    with pytest.raises(ValueError, match="does not offer differential privacy: the pooled "
                                         "trees are exact functions"):
        est.fit(X, y, clients=split(X, rng, "iid"))


def test_one_site_cannot_mask_its_sums():
    X, y, _ = make_data(n=200)
    with pytest.raises(ValueError, match="at least two sites"):
        FedHistGradientBoostingRegressor(privacy=SecureAggregation()).fit(
            X, y, clients=np.zeros(len(y), dtype=int))


def test_a_site_of_another_protocol_version_is_refused_before_masking(monkeypatch):
    """One site still on version 1 (ChaCha20 masks): the key agreement names it and
    the fit stops before any sum is masked, instead of decoding masks that do not
    cancel."""
    from skfed.privacy import masked_sums, secure_aggregation

    def party(party_id, **kwargs):
        version = 1 if party_id == 1 else secure_aggregation.PROTOCOL_VERSION
        return secure_aggregation.SecureAggregationParty(party_id, version=version, **kwargs)

    monkeypatch.setattr(masked_sums, "SecureAggregationParty", party)
    X, y, rng = make_data(n=200)
    with pytest.raises(ValueError, match=r"sites \[1\] speak protocol version\(s\) \[1\], "
                                         r"this analyst version 2"):
        FedHistGradientBoostingRegressor(privacy=SecureAggregation()).fit(
            X, y, clients=split(X, rng, "iid"))


def test_privacy_must_be_a_secure_aggregation():
    X, y, rng = make_data(n=200)
    with pytest.raises(ValueError, match="privacy"):
        FedHistGradientBoostingRegressor(privacy="masked").fit(
            X, y, clients=split(X, rng, "iid"))


# -- the exact limb code ------------------------------------------------------------
def _exact_sum(values):
    """The exact sum of floats (Python's fractions), rounded once."""
    from fractions import Fraction

    return float(sum(Fraction(float(v)) for v in values))


def _masked_total(vectors):
    total = np.zeros_like(vectors[0])
    for v in vectors:
        total += v  # modulo 2**64: what the masks cancel to
    return total


@pytest.mark.parametrize("n_sites", [4, 5, 300])
def test_limbs_give_the_exact_sum_rounded_once(n_sites):
    """Sums of float32 gradients, of float64 values across magnitudes and of
    cancelling values: the decoded total is the exact sum rounded once."""
    rng = np.random.default_rng(3)
    sites = [{"g": rng.normal(size=50).astype(np.float32).astype(np.float64) * 10.0 ** k,
              "c": rng.integers(0, 1000, 50, dtype=np.uint32),
              "loss": float(rng.normal() * 1e6)} for k in (-3, 0, 5)]
    sites.append({"g": -sites[0]["g"], "c": np.zeros(50, dtype=np.uint32), "loss": 1e-20})
    sites += [{"g": np.zeros(50), "c": np.zeros(50, dtype=np.uint32), "loss": 0.0}] * (
        n_sites - len(sites))
    vectors = [flatten_reply(s, n_sites) for s in sites]
    layout = vectors[0][1]
    sums = unflatten_total(_masked_total([v for v, _ in vectors]), layout, n_sites)
    for i in range(50):
        assert sums["g"][i] == _exact_sum([s["g"][i] for s in sites])
    np.testing.assert_array_equal(sums["c"], sum(s["c"].astype(np.int64) for s in sites))
    assert sums["loss"] == _exact_sum([s["loss"] for s in sites])


def test_the_largest_values_of_the_code_sum_exactly():
    """Every site at the edge of the range, of one sign: the limbs' sums reach their
    bounds and still decode to the exact sum rounded once."""
    for n_sites in (2, 4, 8191):
        edge = np.array([np.nextafter(2.0 ** RANGE_BITS, 0), -np.nextafter(2.0 ** RANGE_BITS,
                                                                           0), 2.0 ** -149])
        words, layout = flatten_reply({"x": edge}, n_sites)
        total = words * np.uint64(n_sites)  # n_sites equal replies, modulo 2**64
        got = unflatten_total(total, layout, n_sites)["x"]
        np.testing.assert_array_equal(got, [_exact_sum([v] * n_sites) for v in edge])


@pytest.mark.parametrize("n_sites", [2, 4, 100])
def test_limb_sums_are_rounded_once_as_python_divides_integers(n_sites):
    """The server's vectorized rounding of limb sums (carries, the 64 leading bits, a
    sticky bit) against Python's correctly rounded ``int / int``: random sums of every
    magnitude and sign, and halfway cases."""
    from skfed.privacy.masked_sums import _from_limbs

    bits, count = limb_bits(n_sites), limb_count(n_sites)
    rng = np.random.default_rng(7)
    size = 4000
    sums = rng.integers(-(2 ** (bits + 1)), 2 ** (bits + 1), size=(count, size))
    for j, k in enumerate(rng.integers(0, count + 1, size)):
        sums[k:, j] = 0  # every magnitude
    halfway = [2 ** 53 + 1, -(2 ** 53 + 3), (1 << 120) + (1 << 66) + 1, 1, 0,
               (1 << 200) + (1 << 147) + 1, -((1 << 180) - 1)]
    for v in halfway:
        digits = [(abs(v) >> (bits * k)) % (1 << bits) for k in range(count)]
        sums = np.column_stack([sums, (1 if v >= 0 else -1) * np.array(digits)])
    size = sums.shape[1]
    exact = [sum(int(sums[k, j]) << (bits * k) for k in range(count)) / (1 << EXPONENT)
             for j in range(size)]
    np.testing.assert_array_equal(_from_limbs(sums.ravel(), size, n_sites), exact)


def test_bit_lengths_are_exact_where_the_float_rounds_up():
    """The decoder's bit lengths come from the nearest float, which rounds ``2**k - 1``
    up to ``2**k`` for k > 53: corrected, they are Python's ``int.bit_length``."""
    from skfed.privacy.masked_sums import _bit_length

    edges = [0, 1, 2, 3, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 1, 2 ** 54 - 1, 2 ** 61 - 1,
             2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1]
    edges += [(1 << k) - d for k in range(54, 65) for d in (1, 2, 1 << (k - 54))]
    rng = np.random.default_rng(11)
    edges += [int(v) >> int(s) for v, s in zip(rng.integers(0, 2 ** 63, 200, dtype=np.uint64),
                                               rng.integers(0, 63, 200))]
    words = np.array(edges, dtype=np.uint64)
    np.testing.assert_array_equal(_bit_length(words), [int(w).bit_length() for w in edges])


def test_a_tiny_exact_case_of_the_limbs():
    """1.5 is 3 * 2**148: limbs of 61 bits for four sites, lowest first."""
    vector, layout = flatten_reply({"x": np.array([1.5, -1.5])}, 4)
    assert layout == [("x", (2,), False)]
    bits, count = limb_bits(4), limb_count(4)
    assert (bits, count) == (61, 4)
    limbs = vector.view(np.int64).reshape(count, 2)
    whole = sum(int(limbs[k, 0]) << (bits * k) for k in range(count))
    assert whole == 3 << (EXPONENT - 1)
    assert sum(int(limbs[k, 1]) << (bits * k) for k in range(count)) == -whole
    np.testing.assert_array_equal(limbs[:, 1], -limbs[:, 0])  # the magnitude's, negated
    assert np.all(np.abs(limbs[:-1]) < 2 ** bits) and np.all(np.abs(limbs[-1]) < 2 ** (bits - 1))


def test_a_value_beyond_the_code_is_refused_by_name():
    big = 2.0 ** RANGE_BITS
    with pytest.raises(ValueError, match="field 'loss' .* beyond the exact code"):
        flatten_reply({"loss": big})
    with pytest.raises(ValueError, match="field 'c' .* beyond the integer code"):
        flatten_reply({"c": np.array([2 ** 60])})
    assert math.isfinite(unflatten_total(*flatten_reply({"loss": big / 2}))["loss"])


def test_masks_that_do_not_cancel_are_refused_not_decoded():
    """Words that are not a sum of valid encodings (a site's masks left in) fail the
    range check of the decoding instead of giving numbers."""
    words, layout = flatten_reply({"g": np.ones(200), "c": np.ones(200, np.uint32)}, 4)
    noise = np.random.default_rng(0).integers(0, 2 ** 64, words.size, dtype=np.uint64)
    with pytest.raises(ValueError, match="out of range: the words are not a sum"):
        unflatten_total(words + noise, layout, 4)


# -- the three homes of the rows ---------------------------------------------------------
def test_the_masked_fit_is_the_same_in_every_home(tmp_path):
    """In this process, on each site's Dask worker (its key pair made and kept there)
    and at three site services requiring secure aggregation: one model, the plain fit's."""
    pytest.importorskip("distributed")
    pytest.importorskip("grpc")
    from ._homes import homes
    from ._sites import SITES
    from .test_boosting_sites import PARAMS, _frames

    frames = {name: frame.drop(columns="label") for name, frame in zip(SITES, _frames())}
    policy = ('min_rows = 10\nmin_level_count = 5\nallow_exact_quantiles = true\n'
              'require = ["secure_aggregation"]\n'
              'consortium = ["hospital-a", "hospital-b", "hospital-c"]')
    with homes(tmp_path, frames, target="y", policy=policy) as data:
        plain = FedHistGradientBoostingRegressor(**PARAMS).fit(data["in-process"])
        for home, dataset in data.items():
            masked = FedHistGradientBoostingRegressor(**PARAMS, privacy=SecureAggregation())
            assert_bitwise_same(masked.fit(dataset), plain)
            assert masked.history_.privacy["masked_sums"] > 0, home
        # a bounded loss: its gradients in three limbs at every home, from the weight
        # sums the sites signed with their keys
        params = dict(PARAMS, loss="absolute_error")
        plain = FedHistGradientBoostingRegressor(**params).fit(data["in-process"])
        records = {}
        for home, dataset in data.items():
            masked = FedHistGradientBoostingRegressor(**params, privacy=SecureAggregation())
            assert_bitwise_same(masked.fit(dataset), plain)
            records[home] = masked.history_.privacy["bounded_limbs"]
            assert records[home]["gradients"] == 3 and records[home]["counts"] <= 1 / 3, home
        assert all(r == records["in-process"] for r in records.values()), records
