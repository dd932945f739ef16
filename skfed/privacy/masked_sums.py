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
   float32, as scikit-learn's) in six signed limbs of 40 bits. It masks the
   limbs in integer fixed point modulo ``2**64`` under a fresh, increasing
   exchange number, with a coefficient of one (the site checks it: the
   server cannot weigh one site alone). The server adds the masked words,
   rebuilds each integer and rounds it once to float64: the **exact** sum of
   the sites' values, bit for bit the plain sum wherever that one is exact
   (as the histograms of float32 gradients are). The trees are therefore
   the plain fit's, ties between splits included; the price is six words per
   float instead of one.

Where the site parties live: for sites simulated in this process, in this
process (the masking is then a rehearsal: the same messages, the same
decoded sums); at site services, at each service (the service keeps its key
pair and never sends it). A dataset resident on Dask workers has no masked
form here (its workers keep no state between two maps of the dataset); the
refusal says so.
"""

import os
from contextlib import contextmanager

import numpy as np

from ..federation.session import FederationSession, payload_nbytes
from .secure_aggregation import SecureAggregationParty, aggregate_masked


#: the exact code of a float: ``x * 2**EXPONENT`` (an integer for every float32 and for
#: every float64 above 2**-96 in magnitude) in LIMBS signed limbs of LIMB_BITS bits
EXPONENT, LIMB_BITS, LIMBS = 149, 40, 6


def site_weight_sum(site):
    """The weight sum of a site's rows (what its key signs)."""
    return float(np.sum(site.weights()))


def limb_code(n_parties):
    """The fixed-point code the limbs are masked in: integers (no fraction bits), a
    sum over ``n_parties`` sites of limbs below ``2**LIMB_BITS`` within int64 (and
    exact in float64: at most 8,191 sites)."""
    from .secure_aggregation import FixedPoint

    return FixedPoint(0, bound=float(2 ** LIMB_BITS), n_parties=n_parties)


def _limbs(x, field):
    """The exact integer ``round(x * 2**EXPONENT)`` of each value as LIMBS signed limbs
    (``fmod`` and the subtraction are exact in float64)."""
    y = np.rint(np.ldexp(np.asarray(x, dtype=np.float64).ravel(), EXPONENT))
    base, limbs = float(2 ** LIMB_BITS), []
    for _ in range(LIMBS):
        low = np.fmod(y, base)
        limbs.append(low)
        y = (y - low) / base
    if np.any(y != 0):
        raise ValueError(f"field {field!r} of a masked reply is beyond the exact code's range "
                         f"(|x| >= 2**{LIMB_BITS * LIMBS - EXPONENT}).")
    return np.concatenate(limbs)


def _from_limbs(sums, size):
    """The exactly rounded floats of the integers whose limb sums are ``sums``."""
    total = np.zeros(size, dtype=object)
    for limb in reversed(np.asarray(sums).reshape(LIMBS, size)):
        total = total * (1 << LIMB_BITS) + limb.astype(np.int64).astype(object)
    # int / int is correctly rounded in Python: the exact sum rounded once
    return (total / (1 << EXPONENT)).astype(np.float64) if size else np.zeros(0)


def flatten_reply(reply):
    """``(vector, layout)``: a site's reply (a dict of numbers and arrays) as one flat
    vector of integers (as floats): integer fields as they are, float fields in their
    exact limbs; ``layout`` is ``[(field, shape, is_integer)]``."""
    if not isinstance(reply, dict):
        raise TypeError("a masked sum needs a site function that returns a dict of numbers "
                        f"and arrays, not a {type(reply).__name__}.")
    parts, layout = [], []
    for field, value in reply.items():
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise TypeError(f"field {field!r} of a masked reply is not numeric.")
        integer = array.dtype.kind in "biu"
        layout.append((str(field), tuple(array.shape), integer))
        parts.append(array.astype(np.float64).ravel() if integer else _limbs(array, field))
    return (np.concatenate(parts) if parts else np.zeros(0)), layout


def unflatten_total(total, layout):
    """The decoded totals by field: integer fields as they are (exact), float fields the
    exact sums of the sites' values rounded once to float64."""
    sums, start = {}, 0
    for field, shape, integer in layout:
        shape = tuple(int(d) for d in shape)
        size = int(np.prod(shape, dtype=int))
        width = size if integer else LIMBS * size
        part = np.asarray(total[start:start + width], dtype=np.float64)
        part = (part if integer else _from_limbs(part, size)).reshape(shape)
        sums[field] = float(part) if shape == () else part
        start += width
    return sums


def mask_reply(party, keys, reply, message, fixed_point):
    """What one site sends for one masked sum: its reply in exact integer limbs, masked
    (the message's coefficient is 1: a plain sum, which the site checks)."""
    vector, layout = flatten_reply(reply)
    peers = {int(p): keys[int(p)] for p in message["parties"]}
    masked = party.mask(vector, int(message["exchange"]), peers, fixed_point=fixed_point)
    return {"masked": masked, "layout": [list(entry) for entry in layout]}


def _name(fn):
    return getattr(fn, "__name__", repr(fn))


def _form(layout):
    return ", ".join(f"{f}{tuple(shape)}{' (integer)' if integer else ''}"
                     for f, shape, integer in layout)


class LocalParties:
    """The sites' side of masked sums for sites simulated in this process."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.parties = self.keys_ = None

    def keys(self, session, fixed_point):
        weights = self.dataset.map(site_weight_sum)
        self.parties = [SecureAggregationParty(j, session=session)
                        for j in range(len(self.dataset))]
        self._fixed_point = fixed_point
        return [{"public_key": p.public_key(), "weight_sum": w}
                for p, w in zip(self.parties, weights)]

    def key_list(self, public, proofs):
        self.keys_ = dict(public)

    def masked(self, fn, args, message):
        replies = self.dataset.map(fn, *args)
        return [mask_reply(p, self.keys_, r, message, self._fixed_point)
                for p, r in zip(self.parties, replies)]

    def close(self):
        self.parties = None


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
        self.config, self.n_sites = config, len(dataset)
        self.fixed_point_ = limb_code(self.n_sites)
        self.session_ = os.urandom(16)  # public, fresh: bound into every mask seed
        self.exchanges_ = 0
        self.opened = False
        self.parties_ = dataset.masking_parties() or (
            LocalParties(dataset) if not dataset.resident else None)
        if self.parties_ is None:
            raise ValueError("secure aggregation of a dataset's sums runs with the sites in "
                             "this process or at site services (FederatedDataset.from_sites); "
                             "Dask workers keep no per-site state between two passes over "
                             "resident rows, so their keys would have to travel.")

    def open(self):
        """The key agreement: returns its bytes (both directions, every site)."""
        n = self.n_sites
        replies = self.parties_.keys(self.session_, self.fixed_point_)
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
        total = aggregate_masked([r["masked"] for r in replies], self.fixed_point_)
        traffic = sum(int(r["masked"].nbytes) for r in replies) + self.n_sites * (
            payload_nbytes(args) + payload_nbytes(message))
        return unflatten_total(total, [tuple(e) for e in layout]), traffic

    def privacy_record(self):
        """What ``history_.privacy`` reports about the masking."""
        return {"secure_aggregation": True, "exact": True, "limbs": LIMBS,
                "limb_bits": LIMB_BITS, "exponent": EXPONENT, "masked_sums": self.exchanges_}

    def close(self):
        self.parties_.close()


@contextmanager
def masked_session(dataset, config):
    """A :class:`~skfed.federation.session.FederationSession` over ``dataset`` whose sums
    are masked (the keys agreed on entry, the sites' sessions closed on exit)."""
    session = FederationSession.for_dataset(dataset)
    protection = MaskedSums(config, dataset)
    try:
        session.ledger.add("setup", protection.open())
        session.protect(protection)
        yield session
    finally:
        protection.close()
