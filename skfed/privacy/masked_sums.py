"""Secure aggregation of an analysis's sums: the masked form of a dataset-level session.

A fit of a solver masks its rounds through its solver
(:mod:`skfed.privacy.secure_rounds`). An analysis that works on the sites' rows
directly — a boosting fit's totals, bin counts, node histograms and losses —
runs its sums through a :class:`~skfed.federation.session.FederationSession`
over a dataset; :class:`MaskedSums` is that session's protection:

1. **Key agreement, once per session**: each site creates an X25519 key pair
   where its rows are, and sends the public key and the weight sum of its rows
   (a site service signs both, :mod:`skfed.sites.guard`); the server relays the
   list to every site, which checks every peer's signature before it masks.
2. **Every sum**: each site runs the named site function on its rows and
   writes every number of its reply as an exact integer: counts as they are,
   a float ``x`` as ``x * 2**149`` (an integer for every float32 and every
   float64 above ``2**-96`` in magnitude: the gradients and hessians are
   float32, as scikit-learn's) in signed limbs as wide as the number of sites
   allows (:func:`limb_bits`: 61 bits up to four sites, 50 at 8,191), as many
   as the code's public range ``|x| < 2**91`` needs (:func:`limb_count`: four
   up to four sites, five beyond 15). The limb count is a function of the
   number of sites only, never of the values. It masks the limbs as
   ``uint64`` words modulo ``2**64`` (the pairwise masks from AES-128-CTR,
   :mod:`skfed.privacy.secure_aggregation`) under a fresh, increasing exchange
   number, with a coefficient of one (the site checks it: the server cannot
   weigh one site alone). The server adds the masked words, rebuilds each
   integer and rounds it once to float64: the **exact** sum of the sites'
   values, bit for bit the plain sum wherever that one is exact (as the
   histograms of float32 gradients are). The trees are therefore the plain
   fit's, ties between splits included; the price is four or five words per
   float instead of one.

Where the site parties live: with each site's rows. For sites simulated in
this process, in this process (the masking is then a rehearsal: the same
messages, the same decoded sums); on Dask workers (resident rows), on each
site's worker, built next to its rows and never gathered; at site services,
at each service, in a session of masked sums (:mod:`skfed.sites.masked_operations`).
"""

import contextvars
import os
from contextlib import contextmanager

import numpy as np

from ..federation.session import FederationSession, payload_nbytes
from .secure_aggregation import (PROTOCOL_VERSION, SecureAggregationParty,
                                 check_versions, sum_masked)


#: the exact code of a float: ``x * 2**EXPONENT`` (an integer for every float32 and for
#: every float64 above 2**-96 in magnitude), for ``|x| < 2**RANGE_BITS``
EXPONENT, RANGE_BITS = 149, 91
#: integer fields: ``|v| < 2**INTEGER_BITS`` (a sum over MAX_SITES sites within int64)
INTEGER_BITS = 49
#: the most sites of a masked sum (limbs of at least 50 bits)
MAX_SITES = 2 ** 13 - 1


def site_weight_sum(site):
    """The weight sum of a site's rows (what its key signs)."""
    return float(np.sum(site.weights()))


def limb_bits(n_parties):
    """Bits of a limb in a sum over ``n_parties`` sites: the sum of ``n_parties`` limbs
    below ``2**bits`` (the top one signed, below ``2**(bits - 1)`` in magnitude) stays
    within int64, so every word's sum modulo ``2**64`` is the exact integer sum."""
    return 63 - max(int(n_parties) - 1, 0).bit_length()


def limb_count(n_parties, range_bits=RANGE_BITS):
    """Limbs per float in a sum over ``n_parties`` sites: enough for ``|x * 2**EXPONENT|
    < 2**(EXPONENT + range_bits)`` with a sign. Public: the number of sites and the
    code's range (:data:`RANGE_BITS`, or a field's public bound, :func:`range_bits_for`)
    fix it, never the values (at most 5 limbs, 4 up to 4 sites, 3 for a bounded loss's
    gradients)."""
    bits = limb_bits(n_parties)
    return -(-(EXPONENT + int(range_bits) + 1) // bits)


def range_bits_for(limit):
    """The range of a field whose values are at most ``limit`` in magnitude (a public
    bound): ``|x| < 2**range_bits``, one bit to spare, at most :data:`RANGE_BITS`."""
    limit = float(limit)
    if not np.isfinite(limit) or limit >= 2.0 ** (RANGE_BITS - 1):
        return RANGE_BITS
    return max(int(np.frexp(max(limit, 1.0))[1]) + 1, 1)


#: the public per-row bounds a site function declared for its reply's fields
_ROW_BOUNDS = contextvars.ContextVar("skfed_masked_row_bounds", default=None)


def declare_row_bounds(**bounds):
    """Declare public per-row bounds of the reply's fields, from inside a site function.

    Each named field of the reply is a sum, over at most the session's rows, of terms
    at most ``bound`` in magnitude: a public fact of the analysis (a loss's gradient
    bound), never a property of the rows. Under a masked sum a float field then
    travels in the limbs ``bound`` times the sites' published weight sum needs, a
    non-negative integer field (counts) several to a word (:func:`field_ranges`);
    elsewhere this does nothing. Declare nothing for weighted rows unless the bound
    holds for the weighted terms over the weight sum.

    Parameters
    ----------
    **bounds : float
        ``field=bound``: the largest magnitude of one row's term of that field.
    """
    held = _ROW_BOUNDS.get()
    if held is not None:
        held.update({str(f): float(b) for f, b in bounds.items()})


@contextmanager
def row_bounds():
    """Collect what a site function run inside declares (:func:`declare_row_bounds`)."""
    held = {}
    token = _ROW_BOUNDS.set(held)
    try:
        yield held
    finally:
        _ROW_BOUNDS.reset(token)


def field_ranges(bounds, weight_total):
    """The public range of each declared field: ``|value| < 2**range_bits``.

    Parameters
    ----------
    bounds : dict of str to float
        The per-row bounds a site function declared (:func:`declare_row_bounds`).
    weight_total : float or None
        The weight sum of every site's rows, as the sites published it with their keys
        (their count where rows are unweighted).

    Returns
    -------
    dict of str to int
        ``{field: range_bits}``, one bit to spare; ``{}`` without a weight sum.
    """
    if not bounds or weight_total is None or not np.isfinite(weight_total) \
            or weight_total <= 0:
        return {}
    return {f: range_bits_for(b * float(weight_total)) for f, b in bounds.items()}


def limb_code(n_parties):
    """The integer code the limbs are masked in (no fraction bits): a sum over
    ``n_parties`` sites of words below ``2**(limb_bits - 1)`` in magnitude within int64
    (the lower limbs, below ``2**limb_bits``, are read unsigned)."""
    from .secure_aggregation import FixedPoint

    return FixedPoint(0, bound=float(2 ** (limb_bits(n_parties) - 1)), n_parties=n_parties)


def _limbs(x, field, n_parties, range_bits=RANGE_BITS, out=None):
    """The exact integer ``round(x * 2**EXPONENT)`` of each value in its limbs, the lowest
    first, as int64 words, limb-major: the magnitude's limbs, all negated for a negative
    value (every limb below ``2**bits`` in magnitude, the top one ``2**(bits - 1)``);
    ``limb_count(n_parties, range_bits)`` limbs for values below ``2**range_bits``,
    written into ``out`` (int64, that many words a value) where given. (The floor's
    digits of a negative value would not do: its lower limbs have up to ``bits``
    significant bits, more than a float64 holds.)"""
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.abs(x)
    top = float(y.max()) if y.size else 0.0  # NaN and inf show here
    if not np.isfinite(top):
        raise ValueError(f"field {field!r} of a masked reply is not finite.")
    if top >= 2.0 ** range_bits:
        raise ValueError(f"field {field!r} of a masked reply is beyond the exact code's range "
                         f"(|x| >= 2**{range_bits}).")
    bits, count = limb_bits(n_parties), limb_count(n_parties, range_bits)
    base, inverse = float(2 ** bits), float(2 ** -bits)
    # the magnitude's limbs hold bits of |round(x 2**EXPONENT)| only: every step exact
    # (powers of two, integers below 2**53 a limb), in place, two buffers swapped
    np.multiply(y, float(2 ** EXPONENT), out=y)
    np.rint(y, out=y)
    high, limbs = np.empty_like(y), np.empty((count, x.size))
    for k in range(count - 1):
        np.multiply(y, inverse, out=high)
        np.floor(high, out=high)
        np.multiply(high, base, out=limbs[k])
        np.subtract(y, limbs[k], out=limbs[k])  # in [0, 2**bits)
        y, high = high, y
    limbs[-1] = y  # below 2**(bits - 1): the range
    np.copysign(limbs, x, out=limbs)  # signed limbs (x's sign is its rounding's)
    if out is None:
        return limbs.astype(np.int64).ravel()
    np.copyto(out.reshape(count, x.size), limbs, casting="unsafe")  # exact integers
    return out


def _carried(digits, bits):
    """The same integers with every limb but the top one in ``[0, 2**bits)``."""
    for k in range(len(digits) - 1):
        carry = digits[k] >> bits  # an arithmetic shift: the floor
        digits[k] -= carry << bits
        digits[k + 1] += carry
    return digits


def _bit_length(words):
    """Exact bit lengths of uint64 words: the exponent of the nearest float, one less
    where that float rounded up to the next power of two (numpy shifts by 64 or more
    give 0)."""
    length = np.frexp(words.astype(np.float64))[1].astype(np.int64)
    length -= (words >> np.maximum(length - 1, 0).astype(np.uint64)) == 0
    return np.maximum(length, 0)


def _power_of_two(exponent):
    """``2.0 ** exponent`` for integer exponents of normal floats (its bits, no ldexp)."""
    return ((np.asarray(exponent, dtype=np.int64) + 1023) << 52).view(np.float64)


def _from_limbs(sums, size, n_parties):
    """The floats nearest (ties to even) the integers ``sum_k sums[k] 2**(bits k)`` times
    ``2**-EXPONENT``: their 64 leading bits, a sticky bit for the rest, one rounding.
    ``sums``: the limbs' int64 sums, limb-major."""
    bits = limb_bits(n_parties)
    digits = _carried(np.array(sums, dtype=np.int64).reshape(-1, size), bits)
    negative = digits[-1] < 0
    signed = bool(negative.any())  # a sum of hessians or counts is never negative
    if signed:
        digits *= 1 - 2 * negative.astype(np.int64)  # the magnitude
        digits = _carried(digits, bits)  # every limb now >= 0 (the magnitude)
    top = np.full(size, -1)  # the highest nonzero limb (-1: zero)
    for k in range(len(digits)):
        np.copyto(top, k, where=digits[k] != 0)
    out = np.zeros(size)
    zero = np.zeros(0, dtype=np.uint64)
    for k in range(len(digits)):  # by the top limb: no gathers
        cols = np.flatnonzero(top == k)
        if cols.size:
            limb = [digits[j, cols].astype(np.uint64) if j >= 0 else zero for j in
                    (k, k - 1, k - 2)]
            below = digits[:max(k - 2, 0), cols].any(axis=0)
            out[cols] = _rounded(*limb, below, bits, k)
    return np.where(negative, -out, out) if signed else out


def _rounded(a_, b_, c_, below, bits, k):
    """The float nearest ``(a 2**(2 bits) + b 2**bits + c + below) 2**(bits (k - 2) -
    EXPONENT)`` (``below``: any nonzero limb under ``c``; ``a > 0``). numpy's shifts by
    64 or more give 0, so the bits of ``c`` past the window need no case of their own."""
    one = np.uint64(1)
    b_ = b_ if b_.size else np.zeros_like(a_)
    c_ = c_ if c_.size else np.zeros_like(a_)
    width = _bit_length(a_)  # bits of the top limb
    shift = width + (2 * bits - 64)  # of the three limbs, the 64 leading bits (>= 37)
    lead = a_ << (64 - width).astype(np.uint64)
    down = np.maximum(shift - bits, 0).astype(np.uint64)
    lead |= (b_ >> down) << np.maximum(bits - shift, 0).astype(np.uint64)
    low = shift.astype(np.uint64)
    lead |= c_ >> low  # 0 where the window ends above c
    sticky = (b_ & ((one << down) - one)) | (c_ & ((one << low) - one)) | below
    lead |= (sticky != 0).astype(np.uint64)  # sticky: 64 > 53 + 1 bits, one rounding
    # the conversion rounds once; the power of two is exact (no subnormal: >= 2**-149)
    return lead.astype(np.float64) * _power_of_two(shift + bits * (k - 2) - EXPONENT)


def _integer_words(array, field, out=None):
    if array.size and (int(array.max()) >= 2 ** INTEGER_BITS
                       or int(array.min()) <= -2 ** INTEGER_BITS):
        raise ValueError(f"field {field!r} of a masked reply is beyond the integer code's "
                         f"range (|v| >= 2**{INTEGER_BITS}).")
    if out is None:
        return array.astype(np.int64).ravel()
    out[:] = array.ravel()
    return out


def _lanes(field, lane_bits):
    """Counts a word holds in lanes of ``lane_bits`` (the top bits left zero: a check
    that the masks cancelled)."""
    if isinstance(lane_bits, bool) or not isinstance(lane_bits, (int, np.integer)) or \
            not 1 <= int(lane_bits) <= 31:
        raise ValueError(f"field {field!r} of a masked reply: lane bits {lane_bits!r} are "
                         "not an integer in [1, 31].")
    return 63 // int(lane_bits)


def _packed(array, field, lane_bits, out=None):
    """Non-negative integers below ``2**lane_bits`` (a public bound: row counts), several
    to a word, lane-major: a sum's lanes do not carry into each other."""
    values = array.astype(np.uint64).ravel()
    if values.size and int(values.max()) >= 1 << lane_bits:
        raise ValueError(f"field {field!r} of a masked reply is beyond its public bound "
                         f"(a count >= 2**{lane_bits}).")
    width = _packed_width(values.size, field, lane_bits)
    words = np.zeros(width, dtype=np.uint64) if out is None else out.view(np.uint64)
    for j in range(_lanes(field, lane_bits)):  # lane j: the values j width on
        chunk = values[j * width:(j + 1) * width]
        if j == 0:  # the first lane fills every word: the buffer's old bits go
            words[:] = chunk
        else:
            words[:chunk.size] |= chunk << np.uint64(j * lane_bits)
    return words.view(np.int64)


def _packed_width(size, field, lane_bits):
    """Words :func:`_packed` writes for ``size`` counts."""
    return -(-int(size) // _lanes(field, lane_bits))


def _unpacked(part, size, field, lane_bits):
    """The counts of a sum of :func:`_packed` words (its top bits zero, else refused)."""
    lanes = _lanes(field, lane_bits)
    words = part.view(np.uint64)
    if words.size and int((words >> np.uint64(lanes * lane_bits)).max()) != 0:
        raise ValueError(f"decoded integer field {field!r} out of range: the words are not "
                         "a sum of valid encodings (masks that did not cancel?).")
    mask = np.uint64((1 << lane_bits) - 1)
    grid = [(words >> np.uint64(j * lane_bits)) & mask for j in range(lanes)]
    return np.concatenate(grid)[:size].astype(np.float64)


def flatten_reply(reply, n_parties=MAX_SITES, ranges=None):
    """``(words, layout)``: a site's reply (a dict of numbers and arrays) as one flat
    vector of ``uint64`` words for a sum over ``n_parties`` sites: integer fields as they
    are (two's complement), float fields in their exact limbs; ``layout`` is
    ``[(field, shape, is_integer)]``, with a fourth entry, the range bits, for a float
    field of a public range (``ranges``: ``{field: range_bits}``, :func:`field_ranges`).
    Its length depends on the shapes, the number of sites and the public ranges only."""
    if not isinstance(reply, dict):
        raise TypeError("a masked sum needs a site function that returns a dict of numbers "
                        f"and arrays, not a {type(reply).__name__}.")
    fields, layout, ranges = [], [], ranges or {}
    for field, value in reply.items():
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise TypeError(f"field {field!r} of a masked reply is not numeric.")
        integer = array.dtype.kind in "biu"
        entry, bits = (str(field), tuple(array.shape), integer), ranges.get(str(field))
        if integer and array.dtype.kind in "bu" and bits is not None and bits <= 31:
            layout.append(entry + (int(bits),))  # counts: several to a word
            fields.append((_packed, (int(bits),), _packed_width(array.size, field, bits)))
        elif not integer and bits is not None and bits < RANGE_BITS:
            layout.append(entry + (int(bits),))
            fields.append((_limbs, (n_parties, int(bits)),
                           array.size * limb_count(n_parties, int(bits))))
        elif integer:
            layout.append(entry)
            fields.append((_integer_words, (), array.size))
        else:
            layout.append(entry)
            fields.append((_limbs, (n_parties,), array.size * limb_count(n_parties)))
    # every field written in place into one vector (no copy of the words to join them)
    words = np.empty(sum(width for _, _, width in fields), dtype=np.int64)
    start = 0
    for (field, value), (encoder, args, width) in zip(reply.items(), fields):
        encoder(np.asarray(value), field, *args, out=words[start:start + width])
        start += width
    return words.view(np.uint64), layout


def _check_range(part, limit, what):
    if part.size and (int(part.max()) >= limit or int(part.min()) < -limit):
        raise ValueError(f"decoded {what} out of range: the words are not a sum of valid "
                         f"encodings (masks that did not cancel: mismatched keys, sessions, "
                         f"versions or exchange numbers?).")


def unflatten_total(total, layout, n_parties=MAX_SITES):
    """The decoded totals by field from the words' sum modulo ``2**64`` over
    ``n_parties`` sites: integer fields as they are (exact), float fields the exact sums
    of the sites' values rounded once to float64."""
    total = np.asarray(total).view(np.int64) if np.asarray(total).dtype == np.uint64 \
        else np.asarray(total, dtype=np.int64)
    sums, start = {}, 0
    bits = limb_bits(n_parties)
    for field, shape, integer, *bounded in layout:
        shape = tuple(int(d) for d in shape)
        size = int(np.prod(shape, dtype=int))
        if integer and bounded:
            width = -(-size // _lanes(field, bounded[0]))
            part = _unpacked(total[start:start + width], size, field, int(bounded[0]))
            sums[field] = float(part[0]) if shape == () else part.reshape(shape)
            start += width
            continue
        count = limb_count(n_parties, _range_of(field, bounded))
        width = size if integer else count * size
        part = total[start:start + width]
        if integer:
            _check_range(part, n_parties << INTEGER_BITS, f"integer field {field!r}")
            part = part.astype(np.float64)
        else:
            # each lower limb below n 2**bits in magnitude, the top one n 2**(bits - 1)
            _check_range(part[:(count - 1) * size], n_parties << bits, f"field {field!r}")
            _check_range(part[(count - 1) * size:], n_parties << (bits - 1),
                         f"field {field!r}")
            part = _from_limbs(part, size, n_parties)
        part = part.reshape(shape)
        sums[field] = float(part) if shape == () else part
        start += width
    return sums


def _range_of(field, bounded):
    """A layout entry's range bits (its fourth entry, else the code's whole range)."""
    if not bounded:
        return RANGE_BITS
    bits = bounded[0]
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or \
            not 1 <= int(bits) <= RANGE_BITS:
        raise ValueError(f"field {field!r} of a masked reply: range bits {bits!r} are not an "
                         f"integer in [1, {RANGE_BITS}].")
    return int(bits)


def mask_reply(party, keys, reply, message, fixed_point, ranges=None):
    """What one site sends for one masked sum: its reply in exact integer limbs, masked
    (the message's coefficient is 1: a plain sum, which the site checks); ``ranges``:
    the public ranges of its bounded fields (:func:`field_ranges`)."""
    words, layout = flatten_reply(reply, fixed_point.n_parties, ranges)
    peers = {int(p): keys[int(p)] for p in message["parties"]}
    if len(peers) > fixed_point.n_parties:
        raise ValueError(f"{len(peers)} parties but the limb code is for "
                         f"{fixed_point.n_parties}: a sum could overflow.")
    masked = party.mask_words(words, int(message["exchange"]), peers, copy=False)
    return {"masked": masked, "layout": [list(entry) for entry in layout]}


def _name(fn):
    return getattr(fn, "__name__", repr(fn))


def _form(layout):
    return ", ".join(f"{f}{tuple(shape)}{' (integer)' if integer else ''}"
                     f"{f' (below 2**{bounded[0]})' if bounded else ''}"
                     for f, shape, integer, *bounded in layout)


def public_weight_total(weight_sums):
    """The weight sum of every site's rows from the sums each site published with its key
    (``{party: weight sum}``), added in party order: the same float at every site."""
    return float(sum(float(weight_sums[p]) for p in sorted(weight_sums, key=int)))


class MaskingClient:
    """One site's rows and, once the keys are made, its key pair for masked sums: built
    and kept where the site's rows are (in this process, or on the site's Dask worker),
    never sent to the server."""

    __slots__ = ("site", "party")

    def __init__(self, site):
        self.site, self.party = site, None


def masking_client(site):
    """:class:`MaskingClient` of a site's rows (built at the site)."""
    return MaskingClient(site)


def client_key(client, session, party_id):
    """Make the site's key pair for the session (at the site): its public half and the
    weight sum of its rows."""
    client.party = SecureAggregationParty(party_id, session=session)
    return {"public_key": client.party.public_key(), "version": client.party.version,
            "weight_sum": site_weight_sum(client.site)}


def client_masked_reply(client, fn, args, message, keys, fixed_point, weight_total=None):
    """``fn(site, *args)`` at the site, masked there (:func:`mask_reply`), its bounded
    fields in the limbs their public bounds over ``weight_total`` need."""
    with row_bounds() as bounds:
        reply = fn(client.site, *args)
    return mask_reply(client.party, keys, reply, message, fixed_point,
                      field_ranges(bounds, weight_total))


class ExecutorParties:
    """The sites' side of masked sums where an executor reaches the sites' rows: each
    site's :class:`MaskingClient` in this process (the sites simulated here), or on
    the site's own Dask worker (the key pair made and kept there)."""

    def __init__(self, dataset):
        from ..executors.local import SequentialExecutor

        self.executor = dataset.executor_for(SequentialExecutor())
        self.executor.open(dataset.build(masking_client), labels=list(dataset.sites))
        self.keys_ = self._fixed_point = self.weight_total_ = None

    def _each(self, fn, args_of):
        n = len(self.executor.clients)
        return self.executor.map(fn, [(j, args_of(j)) for j in range(n)])

    def keys(self, session, fixed_point):
        self._fixed_point = fixed_point
        replies = self._each(client_key, lambda j: (session, j))
        self.weight_total_ = public_weight_total(
            {j: r["weight_sum"] for j, r in enumerate(replies)})
        return replies

    def key_list(self, public, proofs):
        self.keys_ = dict(public)

    def masked(self, fn, args, message):
        return self._each(client_masked_reply,
                          lambda j: (fn, args, message, self.keys_, self._fixed_point,
                                      self.weight_total_))

    def close(self):
        self.executor.close()


class MaskedSums:
    """The masked form of a dataset session's sums (see the module).

    Parameters
    ----------
    config : SecureAggregation
        Secure aggregation asked for (its ``bound`` and ``fraction_bits`` are those of
        a solver's rounds: the sums here are exact, in integer limbs).
    dataset : FederatedDataset
        The sites (at least two).

    Attributes
    ----------
    fixed_point_ : FixedPoint
        The integer code the limbs are masked in.
    exchanges_ : int
        Masked sums so far.
    """

    masked = True

    def __init__(self, config, dataset):
        if len(dataset) < 2:
            raise ValueError("secure aggregation needs at least two sites: with one, the sum "
                             "the server decodes is that site's own reply.")
        if len(dataset) > MAX_SITES:
            raise ValueError(f"exact masked sums over {len(dataset)} sites: at most "
                             f"{MAX_SITES} (a limb's sum must stay exact in float64).")
        self.config, self.n_sites = config, len(dataset)
        self.fixed_point_ = limb_code(self.n_sites)
        self.session_ = os.urandom(16)  # public, fresh: bound into every mask seed
        self.exchanges_ = 0
        # {field: words a value} of the fields sent in public ranges (counts: a fraction)
        self.bounded_limbs_ = {}
        self.opened = False
        # a site service keeps its key pair in a session of its own; elsewhere each
        # site's key pair lives with its rows (this process, or the site's Dask worker)
        self.parties_ = dataset.masking_parties() or ExecutorParties(dataset)

    def open(self):
        """The key agreement: returns its bytes (both directions, every site)."""
        n = self.n_sites
        replies = self.parties_.keys(self.session_, self.fixed_point_)
        check_versions(replies)
        public = {j: bytes(r["public_key"]) for j, r in enumerate(replies)}
        if len(set(public.values())) != n:
            raise ValueError("secure aggregation: two sites sent the same public key.")
        proofs = {j: {f: r[f] for f in ("signature", "certificate", "site", "weight_sum")}
                  for j, r in enumerate(replies) if "signature" in r}
        self.parties_.key_list(public, proofs)
        self.opened = True
        return payload_nbytes(replies) + n * payload_nbytes({"keys": public, "proofs": proofs})

    def masked_sum(self, executor, fn, args, *, coefficients=None, scale=1.0):
        """``(sums, bytes)``: ``sum_j fn(site_j, *args)`` by a masked pass over every site
        (the session's :meth:`~skfed.federation.session.FederationSession.sum`), exact:
        the sum of the sites' values rounded once to float64."""
        if coefficients is not None or scale != 1.0:
            raise ValueError("a dataset's masked sums are plain sums over every site (no "
                             "weights, no scale).")
        if not self.opened:
            raise RuntimeError("the key agreement has not run (call open first).")
        self.exchanges_ += 1
        message = {"exchange": self.exchanges_, "parties": list(range(self.n_sites)),
                   "coefficient": 1.0}
        replies = self.parties_.masked(fn, args, message)
        layout = replies[0]["layout"]
        for j, reply in enumerate(replies):
            if reply["layout"] != layout:
                raise ValueError(f"secure aggregation: site {j}'s reply to {_name(fn)} has "
                                 f"the fields {_form(reply['layout'])}, site 0's "
                                 f"{_form(layout)}: a masked sum needs one form at every "
                                 "site.")
        for field, _, integer, *bounded in layout:
            if bounded:
                self.bounded_limbs_[field] = 1 / _lanes(field, bounded[0]) if integer else \
                    limb_count(self.n_sites, _range_of(field, bounded))
        total = sum_masked([r["masked"] for r in replies], self.fixed_point_.n_parties)
        traffic = sum(int(r["masked"].nbytes) for r in replies) + self.n_sites * (
            payload_nbytes(args) + payload_nbytes(message))
        return unflatten_total(total, [tuple(e) for e in layout], self.n_sites), traffic

    def privacy_record(self):
        """What ``history_.privacy`` reports about the masking."""
        return {"secure_aggregation": True, "exact": True,
                "limbs": limb_count(self.n_sites), "limb_bits": limb_bits(self.n_sites),
                "exponent": EXPONENT, "protocol_version": PROTOCOL_VERSION,
                "masked_sums": self.exchanges_, "bounded_limbs": dict(self.bounded_limbs_)}

    def close(self):
        self.parties_.close()


@contextmanager
def masked(session, config):
    """Mask ``session``'s sums (a session over a dataset) under ``config``: the keys
    agreed on entry (booked as setup), the sites' sessions closed on exit; yields the
    :class:`MaskedSums`."""
    protection = MaskedSums(config, session.dataset)
    try:
        session.ledger.add("setup", protection.open())
        session.protect(protection)
        yield protection
    finally:
        protection.close()


@contextmanager
def masked_session(dataset, config):
    """A :class:`~skfed.federation.session.FederationSession` over ``dataset`` whose sums
    are masked (:func:`masked`)."""
    session = FederationSession.for_dataset(dataset)
    with masked(session, config):
        yield session
