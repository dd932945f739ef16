"""A boosting fit's model as a chain of digests, and what the analyst sends of it.

A site keeps a fit's state between requests (:mod:`._fit_state`): the fit's
context, its binned rows, and the model so far with its raw predictions. The
analyst names that state instead of resending it:

- the *context* travels whole once per fit under a name (its digest on the
  analyst's side, with the fit's random identifier); later requests carry
  ``{"fit": id, "name": name}``;
- the *model* is a chain of digests, one link per tree::

      d_0 = H("skfed boosting model" | context name | baseline bytes)
      d_t = H(d_{t-1} | tree t's packed arrays)

  A request carries ``{"extends": d_T, "trees": the trees after T}`` (only what
  is new: bytes per tree flat in the number of trees), or the whole model
  (``"extends": None`` with the baseline) when the sites hold nothing of it.

A site that does not hold ``d_T`` (restarted, evicted, or another analyst's
digest) refuses with rule ``fit_state``; :class:`FitWire` then sends the context
and the whole model once and goes on. The digests are computed from the arrays'
bytes alone, so both sides compute them alike however the trees were grouped into
requests.
"""

import hashlib
import secrets

import numpy as np

from ..federation.session import payload_nbytes
from ._tree import pack_trees

#: the rule of a site's refusal that means "I hold no such state": resend it whole
STATE_RULE = "fit_state"
#: a packed tree's per-node arrays, in the order a tree's digest reads them
_NODE_FIELDS = ("feature", "bin", "flags", "right", "value")
_CATEGORICAL = 4  # a node's flag bit of a categorical split (:mod:`._tree`)


def content_digest(obj, h=None):
    """SHA-256 of a message's content (arrays by dtype, shape and bytes; dicts by
    sorted key), in hex."""
    top = h is None
    h = hashlib.sha256() if top else h  # hardware-accelerated on most CPUs
    if isinstance(obj, np.ndarray):
        h.update(f"{obj.dtype.str}{obj.shape}".encode())
        h.update(repr(obj.tolist()).encode() if obj.dtype.kind == "O"
                 else np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            h.update(str(key).encode())
            content_digest(obj[key], h)
    elif isinstance(obj, (list, tuple)):
        h.update(f"[{len(obj)}".encode())
        if all(isinstance(item, np.ndarray) and item.dtype.kind != "O" for item in obj):
            # the common case (bin thresholds, categories): one header, then the bytes
            h.update(repr([(item.dtype.str, item.shape) for item in obj]).encode())
            for item in obj:
                h.update(np.ascontiguousarray(item).tobytes())
            return h.hexdigest() if top else None
        for item in obj:
            if isinstance(item, np.ndarray) and item.dtype.kind != "O":  # the common case
                h.update(item.dtype.str.encode() + str(item.shape).encode())
                h.update(np.ascontiguousarray(item).tobytes())
            else:
                content_digest(item, h)
    else:
        h.update(repr(obj).encode())
    return h.hexdigest() if top else None


def chain_start(name, baseline):
    """The digest of the model of no tree: the context's name and the baseline."""
    h = hashlib.sha256(b"skfed boosting model|")
    h.update(str(name).encode())
    h.update(np.ascontiguousarray(baseline, dtype=np.float64).tobytes())
    return h.hexdigest()


def tree_digests(parent, packed):
    """The chain's digests after each tree of ``packed`` (packed trees,
    :func:`._tree.pack_trees`), starting from the digest ``parent``."""
    start = np.asarray(packed["start"])
    if start.size < 2:  # no tree (a request within an iteration)
        return []
    categorical = (np.asarray(packed["flags"]) & _CATEGORICAL) != 0
    bitset_at = np.concatenate([[0], np.cumsum(categorical)])
    out = []
    for a, b in zip(start[:-1].tolist(), start[1:].tolist()):
        h = hashlib.sha256(parent.encode())
        for name in _NODE_FIELDS:
            h.update(np.ascontiguousarray(packed[name][a:b]).tobytes())
        h.update(np.ascontiguousarray(packed["bitsets"][bitset_at[a]:bitset_at[b]]).tobytes())
        parent = h.hexdigest()
        out.append(parent)
    return out


def concat_packed(parts):
    """One packed model of several packed parts, in order (the arrays a single
    :func:`._tree.pack_trees` of all their trees gives)."""
    if len(parts) == 1:
        return parts[0]
    sizes = np.concatenate([np.diff(p["start"]) for p in parts]).astype(np.int64)
    start = np.zeros(len(sizes) + 1, dtype=np.int32)
    start[1:] = np.cumsum(sizes)
    out = {"start": start}
    for name in _NODE_FIELDS + ("bitsets",):
        out[name] = np.concatenate([p[name] for p in parts])
    return out


class ChainedModel:
    """The analyst's model so far: the baseline and one packed part per iteration."""

    def __init__(self, baseline, parts=()):
        self.baseline = np.asarray(baseline, dtype=np.float64).ravel()
        self.parts = tuple(parts)

    @property
    def n_trees(self):
        return sum(len(p["start"]) - 1 for p in self.parts)

    def extended(self, trees):
        """This model with one more iteration's ``trees`` (TreePredictor objects)."""
        return ChainedModel(self.baseline, self.parts + (pack_trees(trees),))

    def packed(self, first_part=0):
        """The trees of the parts from ``first_part`` on, as one packed model."""
        parts = self.parts[first_part:]
        return concat_packed(parts) if parts else pack_trees([])

    def whole(self):
        """The model as a stateless request carries it (``{"baseline", "trees"}``)."""
        return {"baseline": self.baseline, "trees": self.packed()}


class FitWire:
    """The federation session of one boosting fit, with its context and model named.

    Its :meth:`sum` and :meth:`per_site` are the session's, except that the site
    function's first argument (the fit's context, a dict) travels as a reference
    once the sites hold it, and a :class:`ChainedModel` argument as the trees the
    sites do not hold yet. A refusal with rule :data:`STATE_RULE` (a site lost the
    state) is answered once by sending both whole.

    Parameters
    ----------
    session : FederationSession
    """

    def __init__(self, session):
        self.session, self.fit = session, secrets.token_hex(16)
        self._context = self._name = None
        self._held = None  # (context name, parts sent, chain digest) the sites hold

    def __getattr__(self, key):  # ledger, masked, n_sites: the session's
        return getattr(self.session, key)

    def sum(self, fn, *args, phase, **kwargs):
        return self._exchange(self.session.sum, fn, args, phase=phase, **kwargs)

    def per_site(self, fn, *args, phase, **kwargs):
        return self._exchange(self.session.per_site, fn, args, phase=phase, **kwargs)

    def pooled_sum(self, pooled, fn, *args, phase):
        """:meth:`sum`, computed by ``pooled`` (:class:`~._pooled_sites.PooledSites`) in
        one pass over the sites' rows where they are all in this process; the ledger
        is charged what the sites would have been sent (the messages are made, and
        the sites counted as holding what they carry) and what each would reply (the
        pooled reply's shape)."""
        sent = self._arguments(args, whole=False)
        total, site_reply_bytes = pooled.reply(fn, *args)
        self.session.ledger.add(phase, self.session.n_sites * (payload_nbytes(sent)
                                                               + site_reply_bytes))
        return total

    def _exchange(self, send, fn, args, **kwargs):
        try:
            return send(fn, *self._arguments(args, whole=False), **kwargs)
        except Exception as exc:
            if getattr(exc, "rule", None) != STATE_RULE:
                raise
        # a site holds no such state (restarted, or evicted it): everything once more
        return send(fn, *self._arguments(args, whole=True), **kwargs)

    def _arguments(self, args, *, whole):
        context, rest = args[0], args[1:]
        out = [self._context_argument(context, whole)]
        for value in rest:
            out.append(self._model_argument(value, whole)
                       if isinstance(value, ChainedModel) else value)
        return out

    def _context_argument(self, context, whole):
        if context is not self._context:  # a new context (the fit's setup replaces it)
            self._context, self._name, self._held = context, content_digest(context), None
            whole = True
        if whole:
            self._held = None
            return dict(context, fit=self.fit, name=self._name)
        return {"fit": self.fit, "name": self._name}

    def _model_argument(self, model, whole):
        held = self._held
        digests = self._digests(model)
        if whole or held is None or held[1] > len(model.parts) or \
                digests[held[1]] != held[2]:
            self._held = (self._name, len(model.parts), digests[-1])
            return {"extends": None, "baseline": model.baseline, "trees": model.packed()}
        self._held = (self._name, len(model.parts), digests[-1])
        return {"extends": held[2], "trees": model.packed(held[1])}

    def _digests(self, model):
        """The chain's digest after each part of ``model`` (the first: no tree), the
        parts already hashed (the same objects: a fit's model only grows) not again."""
        key, held = (self._name, model.baseline.tobytes()), getattr(self, "_chain", None)
        if held is None or held[0] != key or any(
                a is not b for a, b in zip(held[1], model.parts)):
            held = self._chain = (key, [], [chain_start(self._name, model.baseline)])
        _, parts, chain = held
        for part in model.parts[len(parts):]:
            chain.append(tree_digests(chain[-1], part)[-1] if len(part["start"]) > 1
                         else chain[-1])
            parts.append(part)
        return chain[:len(model.parts) + 1]
