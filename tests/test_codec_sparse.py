"""The codec's compact array nodes and sparse arrays (issue 37, item 4).

A mostly-zero numeric array travels as its non-zero positions and values and is
decoded to the same dense array bit for bit; an array sent twice in one message
travels once. Malformed sparse nodes (positions out of range, unsorted or
repeated, a count that does not match the bytes, a huge announced size) are
refused as :class:`MessageError`, never decoded, never allocated.
"""

import json
import struct

import numpy as np
import pytest

from skfed.sites.codec import MAGIC, MAX_DECODED_BYTES, MessageError, decode, encode


def _split(data):
    (size,) = struct.unpack("<I", data[4:8])
    return json.loads(data[8:8 + size]), data[8 + size:]


def _join(header, tail):
    raw = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(raw)) + raw + tail


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _histogram(seed=0, features=6, bins=256):
    """A boosting node's histogram: few rows, so most bins are empty."""
    rng = np.random.default_rng(seed)
    hist = np.zeros((features, bins, 3))
    for f in range(features):
        filled = rng.choice(bins, 12, replace=False)
        hist[f, filled] = rng.normal(size=(12, 3))
    return hist


@pytest.mark.parametrize("value", [
    _histogram(),
    np.zeros(1000),
    np.where(np.arange(64) % 7 == 0, -0.0, 0.0),  # negative zeros are not zeros
    np.array([0.0] * 30 + [np.nan, np.inf, -np.inf, 5e-324]),
    np.eye(40, dtype=np.float32),
    (np.arange(300) % 50 == 0),
    np.where(np.arange(500) % 97 == 0, np.arange(500), 0).astype(">i8"),
    np.zeros((0, 256)),
])
def test_a_sparse_array_decodes_to_the_same_dense_array_bit_for_bit(value):
    data = encode({"x": value})
    header, _ = _split(data)
    assert "$sp" in header["x"] or value.size == 0
    assert _same(decode(data)["x"], value)


def test_sparse_is_used_only_where_smaller():
    dense = np.random.default_rng(0).normal(size=100)
    assert "$a" in _split(encode(dense))[0]
    hist = _histogram()
    sparse_bytes, dense_bytes = len(encode(hist)), hist.nbytes
    assert sparse_bytes < 0.2 * dense_bytes  # 12 of 256 bins filled: 12 bytes an entry
    small = np.zeros(8)  # below the size where a sparse node pays
    assert "$a" in _split(encode(small))[0]


def test_an_array_sent_twice_travels_once():
    theta = np.arange(21.0)
    once, twice = encode({"w": theta}), encode({"w": theta, "monitor": {"theta": theta}})
    # a second node, not a second copy of the bytes
    assert _split(twice)[1] == _split(once)[1] == theta.tobytes()
    out = decode(twice)
    assert _same(out["w"], theta) and _same(out["monitor"]["theta"], theta)
    out["w"][0] = 99.0  # decoded arrays are separate
    assert out["monitor"]["theta"][0] == 0.0


def test_the_header_of_an_array_is_compact():
    header = json.dumps(_split(encode({"w": np.zeros(21) + 1}))[0], separators=(",", ":"))
    assert header == '{"w":{"$a":[0,"<f8",21]}}'


def _sparse_message(positions, values, size, *, count=None, index="<u4", dtype="<f8"):
    tail = np.asarray(positions, dtype=index).tobytes() + np.asarray(values,
                                                                     dtype=dtype).tobytes()
    count = len(values) if count is None else count
    return _join({"x": {"$sp": [0, dtype, count, size]}}, tail)


def test_a_well_formed_crafted_sparse_node_decodes():
    out = decode(_sparse_message([1, 5], [2.0, 3.0], 8))["x"]
    np.testing.assert_array_equal(out, [0, 2, 0, 0, 0, 3, 0, 0])


@pytest.mark.parametrize("message, match", [
    (_sparse_message([1, 8], [2.0, 3.0], 8), "out of range"),
    (_sparse_message([5, 1], [2.0, 3.0], 8), "not increasing"),
    (_sparse_message([3, 3], [2.0, 3.0], 8), "not increasing"),
    (_sparse_message([1, 5], [2.0, 3.0], 8, count=3), "outside the message"),
    (_sparse_message([1, 5], [2.0, 3.0], 8, count=9), "malformed sparse"),
    (_sparse_message([1], [2.0], 1 << 40), "announce more bytes"),
    (_join({"x": {"$sp": [0, "<f8", 1, 1 << 20, 1 << 20]}}, b"\0" * 12), "announce more"),
    (_join({"x": {"$sp": [0, "<U4", 0, 8]}}, b""), "malformed sparse"),
    (_join({"x": {"$sp": [0, "|O", 0, 8]}}, b""), "dtype"),
    (_join({"x": {"$sp": [0, "<f8", -1, 8]}}, b""), "malformed array node"),
    (_join({"x": {"$sp": [0, "<f8", 1.5, 8]}}, b""), "malformed array node"),
    (_join({"x": {"$sp": [0, "<f8"]}}, b""), "malformed array node"),
    (_join({"x": {"$sp": "0,<f8,1,8"}}, b""), "malformed array node"),
    (_join({"x": {"$sp": [0, 8, 1, 8]}}, b""), "malformed array node"),
    (_join({"x": {"$sp": [0, "not a dtype", 1, 8]}}, b""), "dtype"),
    (_join({"x": {"$sp": [0, "<f8", 0] + [1] * 40}}, b""), "malformed array node"),
])
def test_a_malformed_sparse_node_is_refused(message, match):
    with pytest.raises(MessageError, match=match):
        decode(message)


def test_many_sparse_nodes_cannot_add_up_past_the_bound():
    """Each node small, their dense sizes together past what a message may decode to:
    refused before anything is allocated."""
    size = MAX_DECODED_BYTES // 8 // 4 + 1
    nodes = {f"x{k}": {"$sp": [0, "<f8", 0, size]} for k in range(4)}
    with pytest.raises(MessageError, match="announce more bytes"):
        decode(_join(nodes, b""))


@pytest.mark.parametrize("node, match", [
    ({"$a": [0, "<f8", 3]}, "outside the message"),
    ({"$a": [0, 160], "dtype": "<f8", "shape": [20]}, "malformed array node"),
    ({"$a": [0, "<f8", 1 << 40]}, "announce more bytes"),
    ({"$a": [-8, "<f8", 1]}, "malformed array node"),
])
def test_a_malformed_dense_node_is_refused(node, match):
    with pytest.raises(MessageError, match=match):
        decode(_join({"x": node}, b"\0" * 16))
