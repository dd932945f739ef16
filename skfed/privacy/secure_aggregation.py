"""Pairwise-mask secure aggregation (Bonawitz et al., 2017), without dropout recovery.

The server learns the sum of the participating parties' vectors and nothing
else about any one of them (against an honest-but-curious server that does
not collude with parties and distributes the public keys faithfully).

Protocol of one aggregation
---------------------------
1. Every party ``i`` owns an X25519 key pair and publishes its public key.
2. For every pair ``{i, j}`` both ends compute the same shared secret
   ``X25519(sk_i, pk_j) = X25519(sk_j, pk_i)`` and expand it with HKDF-SHA256
   into a 256-bit seed bound to the session, the round identifier and the
   ordered pair ``(min(i, j), max(i, j))``: a different seed for every pair
   and every round.
3. The seed keys AES-128 in counter mode, whose keystream, read as
   little-endian ``uint64`` words, is the pair's mask ``m_ij`` (a cryptographic
   pseudo-random generator at the speed of the processor's AES instructions; all
   primitives come from the ``cryptography`` package). The whole mask of a
   message is one call of the cipher, read in place by numpy.
4. Party ``i`` encodes its (weighted) vector in fixed point modulo ``2**64``
   (:class:`FixedPoint`) and sends
   ``y_i = enc(w_i x_i) + sum_{j > i} m_ij - sum_{j < i} m_ij  (mod 2**64)``.
   Each ``y_i`` alone is uniformly distributed (one-time pad with at least
   one pseudo-random mask), so it says nothing about ``x_i``.
5. The server adds the ``y_i`` modulo ``2**64``: every ``m_ij`` enters once
   with ``+`` and once with ``-`` and cancels, leaving
   ``sum_i enc(w_i x_i)``, which :meth:`FixedPoint.decode` turns back into
   floats (:func:`aggregate_masked`).

Weighted sums
-------------
The protocol sums; a weighted sum ``sum_i w_i x_i`` is obtained by having
every party multiply its vector by its own weight before encoding
(``mask(..., weight=w_i)``). The :class:`FixedPoint` bound then applies to
``|w_i x_i|``. A weighted *mean* divides the decoded sum by ``sum_i w_i``,
which the server must know in the clear (it usually does: sample counts, or
``1`` for uniform weights); if the weights themselves are private, aggregate
them as one more coordinate of the same vector.

Dropouts
--------
If a party that was in the round's key set (so the others masked against it)
does not deliver its message, its pairwise masks do not cancel and the sum
cannot be recovered. Bonawitz et al. recover by Shamir-sharing each party's
secret among the others; this is **not implemented** here:
:func:`aggregate_masked` raises :class:`DropoutError`. A solver that needs
every client must then restart the round: all parties mask again under a
**new round identifier** (never the same one: a party refuses to mask twice
under one identifier, since two messages with the same mask reveal the
difference of their inputs). Solvers with partial participation may instead
restart the round with the surviving parties only.

Threat model and limits
-----------------------
* Honest-but-curious server; public keys reach the parties authentically (an
  active server that substitutes keys could unmask a party; Bonawitz et al.
  add signatures for that case).
* Every party must mask only one message per ``(session, round)``; use a
  message counter as the round identifier if a solver round sends several
  messages, or concatenate them into one vector.
* A party that reuses its key pair across fits must use a different
  ``session`` in each fit (or masks of round ``r`` would repeat).
* With a single party the "sum" is its message, so :meth:`SecureAggregationParty.mask`
  refuses to run without peers.

Protocol versions
-----------------
:data:`PROTOCOL_VERSION` names the mask generator: version 1 (ChaCha20 keyed by
a 256-bit seed), version 2 (AES-128-CTR keyed by a 128-bit seed, the X25519
agreement's own security level, about four times faster). The version is bound
into the HKDF salt, published with the public key and carried by every
:class:`MaskedMessage`: parties of different versions derive masks that do not
cancel, so :func:`aggregate_masked` refuses to combine their messages instead of
decoding garbage.

References
----------
K. Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving
Machine Learning", ACM CCS 2017.
"""

import threading
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real

import numpy as np

from ..exceptions import ClientFailureError
from ..federation.wire import wire_class
from .._messages import show

try:  # optional dependency: skfed[privacy]
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import (X25519PrivateKey,
                                                                  X25519PublicKey)
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError:  # pragma: no cover - exercised only without the extra
    X25519PrivateKey = X25519PublicKey = None

__all__ = ["FixedPoint", "SecureAggregationParty", "MaskedMessage", "aggregate_masked",
           "sum_masked", "check_versions", "DropoutError", "PROTOCOL_VERSION"]

_MODULUS_BITS = 64
_INT64_LIMIT = 2 ** 63          # the sum must stay in [-2**63, 2**63)
#: the mask generator's version (see the module docstring): bound into every seed
PROTOCOL_VERSION = 2
#: version -> (HKDF salt, seed bytes); each key is used for one stream only (zero nonce)
_PROTOCOLS = {1: (b"skfed secure aggregation v1", 32),
              2: (b"skfed secure aggregation v2, aes-128-ctr", 16)}
_ZERO_IV = bytes(16)
_MAX_PARTY_ID = 2 ** 63 - 1


_ZEROS = [bytes(0)]


def _zeros(nbytes):
    """``nbytes`` zero bytes (the cipher's input: its output is then the keystream),
    one buffer grown as needed."""
    if len(_ZEROS[0]) < nbytes:
        _ZEROS[0] = bytes(max(nbytes, 2 * len(_ZEROS[0])))
    return memoryview(_ZEROS[0])[:nbytes]


_SCRATCH = threading.local()


def _keystream_buffer(nbytes):
    """A keystream buffer of ``nbytes``, kept per thread and grown as needed (a fresh
    megabyte buffer a sum costs page faults; a site service masks in several threads)."""
    held = getattr(_SCRATCH, "buffer", None)
    if held is None or len(held) < nbytes:
        held = _SCRATCH.buffer = bytearray(max(nbytes, 2 * len(held or b"")))
    return memoryview(held)[:nbytes]


def _require_cryptography():
    if X25519PrivateKey is None:
        raise ImportError("secure aggregation needs the 'cryptography' package: "
                          "pip install 'skfed[privacy]'")


class DropoutError(ClientFailureError):
    """A party masked its message but the server did not receive it.

    Its pairwise masks cannot be removed, so the round's sum is lost.
    Dropout recovery (secret sharing of the parties' keys, Bonawitz et al.
    2017) is not implemented: solvers that require every client must restart
    the round with a new round identifier; solvers with partial participation
    may restart it without the dropped parties. The missing party ids are in
    :attr:`missing`.
    """

    def __init__(self, message, missing=()):
        super().__init__(message)
        self.missing = tuple(missing)


def _check_int(value, name, low, high=None):
    if not isinstance(value, Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {show(value)}.")
    value = int(value)
    if value < low or (high is not None and value > high):
        rng = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {rng}, got {value}.")
    return value


@wire_class(role="value")
class FixedPoint:
    """Fixed-point encoding of float vectors into integers modulo ``2**64``.

    ``encode(x) = round(x * 2**f) mod 2**64`` (two's complement: negative
    values wrap), and ``decode`` reads the ``uint64`` words as signed
    ``int64`` and divides by ``2**f``. Sums of encodings are taken modulo
    ``2**64`` (``numpy.uint64`` arithmetic wraps), so they decode correctly
    as long as the true sum lies in ``[-2**63, 2**63)``.

    Parameters
    ----------
    fraction_bits : int, default=32
        ``f``, the number of bits after the binary point (``0 <= f <= 62``).
    bound : float
        ``B``, the largest ``|x_i|`` (per coordinate) a party may encode
        (after weighting). :meth:`encode` rejects larger values.
    n_parties : int
        ``n``, the largest number of encodings that will be summed.

    Raises
    ------
    OverflowError
        If ``n * floor(B * 2**f + 1/2) >= 2**63``: a sum of ``n`` encodings of
        values in ``[-B, B]`` could wrap around. Lower ``fraction_bits``
        (:meth:`max_fraction_bits` gives the largest admissible value), the
        bound, or the number of parties.

    Notes
    -----
    Range: each encoding is an integer of magnitude at most
    ``floor(B 2**f + 1/2)`` (a real of magnitude ``<= B 2**f`` rounded to the
    nearest integer), so the sum of ``n`` of them lies in
    ``[-2**63, 2**63)`` exactly when ``n floor(B 2**f + 1/2) < 2**63``; in
    words, ``n B 2**f < 2**63`` up to the half unit of rounding.

    Precision: the grid step is ``2**-f`` (:attr:`resolution`). Encoding
    rounds to nearest, so each party's value is off by at most
    ``2**-(f+1)`` per coordinate (:attr:`party_error`), and the decoded sum
    of ``n`` encodings is within ``n 2**-(f+1)`` of the exact sum of the
    parties' values (:attr:`sum_error`), plus the float64 rounding of the
    final conversion (relative ``2**-53``, zero while the integer sum is
    below ``2**53``). Multiplying by ``2**f`` is exact in float64, so these
    bounds are exact, not heuristic.
    """

    def __init__(self, fraction_bits=32, *, bound, n_parties):
        self.fraction_bits = _check_int(fraction_bits, "fraction_bits", 0, _MODULUS_BITS - 2)
        if not isinstance(bound, Real) or isinstance(bound, bool) or not np.isfinite(bound) \
                or bound <= 0:
            raise ValueError(f"bound must be a positive finite number, got {show(bound)}.")
        self.bound = float(bound)
        self.n_parties = _check_int(n_parties, "n_parties", 1)
        worst = self.n_parties * self._max_code(self.bound, self.fraction_bits)
        if worst >= _INT64_LIMIT:
            raise OverflowError(
                f"fixed point overflow: n_parties * round(bound * 2**fraction_bits) = "
                f"{self.n_parties} * round({self.bound:g} * 2**{self.fraction_bits}) = "
                f"{float(worst):.4g} >= 2**63 = {float(_INT64_LIMIT):.4g}; the sum could wrap "
                f"modulo 2**64. Use fraction_bits <= "
                f"{self.max_fraction_bits(self.bound, self.n_parties)} or a smaller bound.")

    @staticmethod
    def _max_code(bound, fraction_bits):
        # floor(B 2**f + 1/2), exactly (B is a float, hence a dyadic rational)
        return int(Fraction(bound) * 2 ** fraction_bits + Fraction(1, 2))

    @classmethod
    def max_fraction_bits(cls, bound, n_parties):
        """Largest ``f`` for which ``n_parties`` values bounded by ``bound`` cannot overflow.

        Parameters
        ----------
        bound : float
            Per-coordinate bound ``B`` on each party's value.
        n_parties : int
            Number of summed encodings ``n``.

        Returns
        -------
        int
            The largest ``f`` in ``[0, 62]`` with ``n floor(B 2**f + 1/2) < 2**63``.

        Raises
        ------
        OverflowError
            If even ``f = 0`` overflows (``n B`` is close to ``2**63``).
        """
        if not np.isfinite(bound) or bound <= 0:
            raise ValueError(f"bound must be a positive finite number, got {show(bound)}.")
        n = _check_int(n_parties, "n_parties", 1)
        best = None
        for f in range(_MODULUS_BITS - 1):
            if n * cls._max_code(float(bound), f) < _INT64_LIMIT:
                best = f
            else:
                break
        if best is None:
            raise OverflowError(f"n_parties * bound = {n} * {bound:g} does not fit in int64 "
                                f"even without fraction bits.")
        return best

    @property
    def resolution(self):
        """Grid step ``2**-f``."""
        return 2.0 ** -self.fraction_bits

    @property
    def party_error(self):
        """Largest rounding error of one encoded coordinate, ``2**-(f+1)``."""
        return 2.0 ** -(self.fraction_bits + 1)

    @property
    def sum_error(self):
        """Largest error of a decoded sum of ``n_parties`` encodings, ``n 2**-(f+1)``
        (per coordinate, before the final float64 rounding)."""
        return self.n_parties * self.party_error

    def encode(self, x):
        """Encode a float array as ``uint64`` words.

        Parameters
        ----------
        x : array-like of float
            Values with ``|x| <= bound``.

        Returns
        -------
        ndarray of uint64, same shape as ``x``
            ``round(x * 2**f) mod 2**64``.

        Raises
        ------
        ValueError
            If ``x`` is not finite or exceeds the bound.
        """
        x = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError("cannot encode non-finite values.")
        peak = float(np.max(np.abs(x))) if x.size else 0.0
        if peak > self.bound:
            raise ValueError(f"value out of the fixed-point range: max |x| = {peak:.6g} > "
                             f"bound = {self.bound:.6g} (the overflow check relies on the bound; "
                             f"clip or scale the message, or raise the bound).")
        codes = np.rint(np.ldexp(x, self.fraction_bits)).astype(np.int64)
        return codes.view(np.uint64)

    def decode(self, words, *, n_terms=None):
        """Decode ``uint64`` words (one encoding, or a sum of encodings) to floats.

        Parameters
        ----------
        words : ndarray of uint64
        n_terms : int, optional
            How many encodings ``words`` is the sum of. When given, the decoded
            integers are checked against the range such a sum can reach
            (``n_terms * floor(B 2**f + 1/2)``); a value outside it means the
            words are not a sum of valid encodings (for example masks that did
            not cancel).

        Returns
        -------
        ndarray of float64

        Raises
        ------
        ValueError
            If ``n_terms`` is given and a value is out of range.
        """
        words = np.asarray(words)
        if words.dtype != np.uint64:
            raise TypeError(f"decode expects uint64 words, got {words.dtype}.")
        signed = words.view(np.int64)
        if n_terms is not None and signed.size:
            limit = _check_int(n_terms, "n_terms", 1) * self._max_code(self.bound,
                                                                       self.fraction_bits)
            peak = max(abs(int(signed.max())), abs(int(signed.min())))
            if peak > limit:
                raise ValueError(
                    f"decoded sum out of range ({peak} > {limit} = n_terms * max code): the "
                    f"words are not a sum of {n_terms} valid encodings (masks that did not "
                    f"cancel: mismatched keys, sessions or round identifiers?).")
        return np.ldexp(signed.astype(np.float64), -self.fraction_bits)

    def __repr__(self):
        return (f"FixedPoint(fraction_bits={self.fraction_bits}, bound={show(self.bound)}, "
                f"n_parties={self.n_parties})")


@wire_class(role="value")
@dataclass(frozen=True)
class MaskedMessage:
    """What a party sends to the server: its masked, encoded vector.

    Attributes
    ----------
    party_id : int
        The sender.
    round : int
        The round identifier the masks were derived for.
    parties : tuple of int
        Sorted ids of every party the sender masked with (itself included):
        the set whose messages the server needs to cancel the masks.
    data : ndarray of uint64
        ``enc(weight * x) + sum_{j > i} m_ij - sum_{j < i} m_ij  (mod 2**64)``.
    version : int
        The protocol version the masks were made under (:data:`PROTOCOL_VERSION`).
    """

    party_id: int
    round: int
    parties: tuple
    data: np.ndarray
    version: int = PROTOCOL_VERSION

    @property
    def nbytes(self):
        """Payload size in bytes (the masked words)."""
        return int(self.data.nbytes)


def _public_key_bytes(key):
    if isinstance(key, (bytes, bytearray, memoryview)):
        key = bytes(key)
        if len(key) != 32:
            raise ValueError(f"an X25519 public key has 32 bytes, got {len(key)}.")
        return key
    if X25519PublicKey is not None and isinstance(key, X25519PublicKey):
        return key.public_bytes_raw()
    raise TypeError(f"expected an X25519 public key (32 raw bytes), got {type(key).__name__}.")


class SecureAggregationParty:
    """One party (site) of pairwise-mask secure aggregation.

    Parameters
    ----------
    party_id : int
        Non-negative id, unique in the federation; it fixes the sign of the
        pairwise masks (``+`` towards larger ids, ``-`` towards smaller).
    private_key : cryptography X25519PrivateKey, optional
        The party's long-term key; a fresh one is generated by default.
    session : bytes or str, default=b""
        Context bound into every derived seed (for example a random fit
        identifier chosen by the server). A key pair reused across fits must
        get a different session in each.
    version : int, default=PROTOCOL_VERSION
        The mask generator (1: ChaCha20, 2: AES-128-CTR); every party of an
        aggregation must use the same one.

    Notes
    -----
    The seed of pair ``(i, j)``, ``i < j``, in round ``r`` is
    ``HKDF-SHA256(ikm=X25519(sk, pk_peer), salt=<the version's salt>,
    info=len(session) || session || r || i || j)`` (64-bit big-endian
    integers), 16 bytes under version 2 (32 under version 1); it keys
    AES-128-CTR (ChaCha20 under version 1) with a zero counter block (each
    key produces one stream) whose keystream gives the mask words. A party
    refuses to mask a second message under the same round identifier.
    """

    def __init__(self, party_id, private_key=None, *, session=b"",
                 version=PROTOCOL_VERSION):
        _require_cryptography()
        self.party_id = _check_int(party_id, "party_id", 0, _MAX_PARTY_ID)
        if version not in _PROTOCOLS:
            raise ValueError(f"unknown secure aggregation protocol version {show(version)}; "
                             f"this party speaks {sorted(_PROTOCOLS)}.")
        self.version = int(version)
        if private_key is None:
            private_key = X25519PrivateKey.generate()
        elif not isinstance(private_key, X25519PrivateKey):
            raise TypeError("private_key must be a cryptography X25519PrivateKey.")
        self._private_key = private_key
        if isinstance(session, str):
            session = session.encode("utf-8")
        self.session = bytes(session)
        self._used_rounds = set()
        self._shared = {}  # peer public key -> shared secret (never leaves the party)

    def __getstate__(self):
        # the key as its 32 raw bytes: a party's state is kept (and, on Dask,
        # pickled) where the site runs, and never sent to the server
        state = dict(self.__dict__)
        state["_private_key"] = self._private_key.private_bytes_raw()
        return state

    def __setstate__(self, state):
        _require_cryptography()
        state = dict(state)
        state["_private_key"] = X25519PrivateKey.from_private_bytes(state["_private_key"])
        self.__dict__.update(state)

    def public_key(self):
        """The party's X25519 public key, 32 raw bytes (what it publishes)."""
        return self._private_key.public_key().public_bytes_raw()

    def _pair_seed(self, peer_id, peer_key, round):
        # the X25519 agreement once per peer key (the costly step); the seed per round
        shared = self._shared.get(peer_key)
        if shared is None:
            shared = self._shared[peer_key] = self._private_key.exchange(
                X25519PublicKey.from_public_bytes(peer_key))
        low, high = sorted((self.party_id, peer_id))
        info = (len(self.session).to_bytes(8, "big") + self.session
                + round.to_bytes(8, "big") + low.to_bytes(8, "big") + high.to_bytes(8, "big"))
        salt, length = _PROTOCOLS[self.version]
        return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt,
                    info=info).derive(shared)

    def _stream(self, seed):
        if self.version == 1:
            return Cipher(algorithms.ChaCha20(seed, _ZERO_IV), mode=None).encryptor()
        return Cipher(algorithms.AES(seed), modes.CTR(_ZERO_IV)).encryptor()

    def _pair_mask(self, peer_id, peer_key, round, size, out=None):
        """The pair's mask of ``size`` words: one call of the cipher into ``out`` (a
        reusable buffer of at least ``8 * size + 15`` bytes), read in place."""
        stream = self._stream(self._pair_seed(peer_id, peer_key, round))
        if out is None:
            out = bytearray(8 * size + 15)
        # the keystream of zero bytes is the keystream: no plaintext to xor
        written = stream.update_into(_zeros(8 * size), out)
        return np.frombuffer(out, dtype="<u8", count=written // 8)

    def mask(self, vector, round, peers_public_keys, *, fixed_point, weight=1.0):
        """Encode ``weight * vector`` and add this party's pairwise masks.

        Parameters
        ----------
        vector : array-like of float
            The message (any shape; it is masked as a flat vector and
            returned in the same shape).
        round : int
            Round identifier (non-negative, ``< 2**64``). Never mask two
            messages under the same identifier; a restarted round needs a new
            one.
        peers_public_keys : mapping of int to bytes
            Public key of every party in this aggregation (the party's own
            entry, if present, is checked and skipped). The server needs a
            message from every one of them.
        fixed_point : FixedPoint
            The encoding shared by all parties of the round.
        weight : float, default=1.0
            Multiplies the vector before encoding (weighted sums: the server
            decodes ``sum_i weight_i * vector_i``). ``|weight * vector|`` must
            be within ``fixed_point.bound``.

        Returns
        -------
        MaskedMessage

        Raises
        ------
        ValueError
            On a reused round identifier, a missing peer, a duplicate key or
            an out-of-range value.
        """
        round = _check_int(round, "round", 0, 2 ** 64 - 1)
        if not isinstance(fixed_point, FixedPoint):
            raise TypeError("fixed_point must be a FixedPoint.")
        peers = self._peers(peers_public_keys, fixed_point.n_parties)
        self._check_round(round)
        x = np.asarray(vector, dtype=np.float64)
        if not isinstance(weight, Real) or not np.isfinite(weight):
            raise ValueError(f"weight must be a finite number, got {show(weight)}.")
        data = fixed_point.encode(weight * x).ravel()
        return self._masked(data, round, peers, x.shape)

    def mask_words(self, words, round, peers_public_keys, *, copy=True):
        """Add this party's pairwise masks to words it encoded itself.

        Parameters
        ----------
        words : ndarray of uint64
            An encoding whose sum over the parties cannot wrap modulo ``2**64`` (the
            caller's range check: exact integer limbs, :mod:`skfed.privacy.masked_sums`).
        round : int
            Round identifier, as in :meth:`mask`.
        peers_public_keys : mapping of int to bytes
            As in :meth:`mask`.
        copy : bool, default=True
            False: mask ``words`` in place (a caller's own fresh encoding).

        Returns
        -------
        MaskedMessage
        """
        round = _check_int(round, "round", 0, 2 ** 64 - 1)
        words = np.asarray(words)
        if words.dtype != np.uint64:
            raise TypeError(f"mask_words expects uint64 words, got {words.dtype}.")
        peers = self._peers(peers_public_keys, None)
        self._check_round(round)
        data = words.ravel()
        if copy and np.may_share_memory(data, words):
            data = data.copy()
        return self._masked(data, round, peers, words.shape)

    def _peers(self, peers_public_keys, n_parties):
        """``{peer id: key}`` of the other parties, checked."""
        own = self.public_key()
        peers = {}
        for pid, key in dict(peers_public_keys).items():
            pid = _check_int(pid, "peer id", 0, _MAX_PARTY_ID)
            key = _public_key_bytes(key)
            if pid == self.party_id:
                if key != own:
                    raise ValueError(f"the key listed for party {pid} is not this party's key.")
                continue
            if key == own:
                raise ValueError(f"party {pid} has the same public key as party {self.party_id}.")
            peers[pid] = key
        if not peers:
            raise ValueError("secure aggregation needs at least two parties: alone, the "
                             "'sum' the server decodes is this party's message.")
        if n_parties is not None and len(peers) + 1 > n_parties:
            raise ValueError(f"{len(peers) + 1} parties but fixed_point.n_parties = "
                             f"{n_parties}: the overflow check does not cover this sum.")
        return peers

    def _check_round(self, round):
        if (self.session, round) in self._used_rounds:
            raise ValueError(f"party {self.party_id} already masked a message in round {round}"
                             f" of this session; reusing the masks would reveal the difference "
                             f"of the two messages. Use a new round identifier.")

    def _masked(self, data, round, peers, shape):
        buffer = _keystream_buffer(8 * data.size + 15)  # one for every pair
        for pid, key in peers.items():
            m = self._pair_mask(pid, key, round, data.size, out=buffer)
            if pid > self.party_id:
                data += m
            else:
                data -= m
        self._used_rounds.add((self.session, round))
        parties = tuple(sorted([self.party_id, *peers]))
        return MaskedMessage(self.party_id, round, parties, data.reshape(shape), self.version)


def check_versions(replies):
    """Refuse a key agreement whose parties speak another protocol version.

    Parameters
    ----------
    replies : list or dict of dict
        The sites' key-agreement replies (by position or by site id); a reply
        without ``"version"`` is version 1.

    Raises
    ------
    ValueError
        Naming the sites whose version differs from :data:`PROTOCOL_VERSION`
        (their masks would not cancel: the sum would decode to garbage).
    """
    pairs = replies.items() if isinstance(replies, dict) else enumerate(replies)
    other = {j: r.get("version", 1) for j, r in pairs if r.get("version", 1) != PROTOCOL_VERSION}
    if other:
        raise ValueError(f"secure aggregation: sites {sorted(other)} speak protocol version(s) "
                         f"{sorted(set(other.values()))}, this analyst version "
                         f"{PROTOCOL_VERSION}; masks of different versions do not cancel. "
                         f"Upgrade every site and the analyst to one skfed release.")


def aggregate_masked(messages, fixed_point):
    """Server side: sum the masked messages modulo ``2**64`` and decode.

    Parameters
    ----------
    messages : sequence of MaskedMessage
        One message from every party listed in the messages' ``parties``.
    fixed_point : FixedPoint
        The encoding the parties used.

    Returns
    -------
    ndarray of float64
        ``sum_i weight_i * vector_i``, within ``len(messages) * 2**-(f+1)``
        per coordinate (:attr:`FixedPoint.sum_error`).

    Raises
    ------
    DropoutError
        If a party that the others masked against sent no message: its masks
        cannot be removed (dropout recovery is not implemented; the round
        must be restarted with a new round identifier).
    ValueError
        If the messages disagree on the round, the party set or the shape,
        a party sent twice, or the decoded sum is out of range (masks that
        did not cancel).
    """
    if not isinstance(fixed_point, FixedPoint):
        raise TypeError("fixed_point must be a FixedPoint.")
    messages = list(messages)
    total = sum_masked(messages, fixed_point.n_parties)
    return fixed_point.decode(total, n_terms=len(messages))


def sum_masked(messages, n_parties):
    """Server side: check the masked messages and add their words modulo ``2**64``.

    Parameters
    ----------
    messages : sequence of MaskedMessage
        One message from every party listed in the messages' ``parties``.
    n_parties : int
        The most parties the encoding's range check covers.

    Returns
    -------
    ndarray of uint64
        The sum of the encodings (the masks cancelled), for the caller to decode.

    Raises
    ------
    DropoutError, ValueError
        As :func:`aggregate_masked`.
    """
    messages = list(messages)
    if not messages:
        raise ValueError("no messages to aggregate.")
    first = messages[0]
    senders = [m.party_id for m in messages]
    if len(set(senders)) != len(senders):
        raise ValueError(f"a party sent more than one message: {sorted(senders)}.")
    versions = sorted({int(getattr(m, "version", 1)) for m in messages})
    if len(versions) > 1:
        raise ValueError(f"masked messages of different protocol versions {versions}: their "
                         f"masks do not cancel (the parties must agree on one version; this "
                         f"library speaks version {PROTOCOL_VERSION}).")
    for m in messages:
        if m.round != first.round:
            raise ValueError(f"messages from different rounds: {first.round} and {m.round}.")
        if tuple(m.parties) != tuple(first.parties):
            raise ValueError("the parties masked against different party sets "
                             f"({first.parties} and {m.parties}); they must all receive the "
                             f"same key set.")
        if m.data.shape != first.data.shape or m.data.dtype != np.uint64:
            raise ValueError("masked messages must be uint64 arrays of one shape.")
    unknown = sorted(set(senders) - set(first.parties))
    if unknown:
        raise ValueError(f"messages from parties {unknown} outside the round's key set.")
    missing = sorted(set(first.parties) - set(senders))
    if missing:
        raise DropoutError(
            f"secure aggregation, round {first.round}: parties {missing} were in the key set "
            f"(the others masked against them) but their messages did not arrive, so their "
            f"pairwise masks cannot be removed and the sum is lost. Dropout recovery (secret "
            f"sharing of the keys, Bonawitz et al. 2017) is not implemented: restart the round "
            f"with a new round identifier (solvers that need every client), or without the "
            f"dropped parties (partial participation).", missing=missing)
    if len(messages) > n_parties:
        raise ValueError(f"{len(messages)} messages but the encoding covers {n_parties} "
                         f"parties: the sum could overflow.")
    total = np.zeros(first.data.shape, dtype=np.uint64)
    for m in messages:
        total += m.data  # wraps modulo 2**64
    return total
