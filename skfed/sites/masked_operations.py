"""The site's side of an analysis's masked sums (:mod:`skfed.privacy.masked_sums`).

A boosting fit under ``privacy=SecureAggregation()`` reaches a site service
through four operations, in a *sum session* bound to one dataset reference
(its rows, after its row steps):

1. ``sums.open``: the site creates an X25519 key pair for the session, keeps
   its private half, and returns the public half signed with its certificate
   together with the weight sum of the session's rows
   (:meth:`~skfed.sites.guard.SecureAggregationGuard.sign_key`);
2. ``sums.key_list``: the site checks every relayed key against its site's
   signature and certificate, and that there are at least
   ``max(2, min_sites)`` of them, before it masks anything;
3. ``sums.masked``: one *maskable* operation of the table (a boosting fit's
   totals, bin counts, residual counts, histograms and losses) runs on the
   session's rows through its own handler — every check of that operation
   holds, except the rules that exist because a plain reply is one site's
   alone (``min_rows`` per tree node, and ``require: secure_aggregation``) —
   and its reply leaves the site only as exact integer limbs masked for
   every verified site, with a coefficient of one, under a fresh, increasing
   exchange number;
4. ``sums.close``.

What stays refused: a site that requires differential privacy serves no sum
session (a masked sum carries no noise); an operation that is not maskable;
a pass over fewer than every verified site, with another coefficient than
one, or with a replayed exchange number. A mixin of the host.
"""

import secrets
import threading

from .operations import OPERATIONS, serves
from .policy import Refused


class _SumSession:
    """One analysis's masked sums at this site: its rows' reference, key pair and guard."""

    def __init__(self, owner, dataset, rows, party, guard):
        self.owner, self.dataset, self.rows = owner, dataset, rows
        self.party, self.guard = party, guard
        self.keys = self.fixed_point = None
        self.lock = threading.Lock()


class MaskedSumOperations:
    """The host's ``sums.*`` operations (see the module docstring)."""

    def _sum_session(self, analyst, args, record):
        sessions = self._sum_sessions
        handle = args.get("session")
        session = sessions.get(handle) if isinstance(handle, str) else None
        if session is None or session.owner != analyst:  # another's session looks absent
            raise Refused("sessions", "no such session of masked sums for this analyst")
        record.update(dataset=session.dataset["name"], rows=session.rows)
        return session

    @serves("sums.open")
    def _op_sums_open(self, analyst, args, record):
        from ..privacy.masked_sums import site_weight_sum
        from ..privacy.secure_aggregation import SecureAggregationParty
        from .guard import SecureAggregationGuard

        if "differential_privacy" in self.policy.require:
            raise Refused("require", "this site requires differential privacy: masked sums "
                                     "of an analysis carry no noise")
        site, n = self._rows(args, record, "a session of masked sums")
        config = self.config
        guard = SecureAggregationGuard(self.name, config.cert.read_bytes(),
                                       config.key.read_bytes(), config.ca.read_bytes(),
                                       self.policy.min_sites)
        key_session = bytes(args["key_session"])
        party = SecureAggregationParty(int(args["party"]), session=key_session)
        weight_sum = site_weight_sum(site)
        reply = guard.sign_key({"session": key_session, "party": int(args["party"])},
                               {"public_key": party.public_key()}, weight_sum)
        handle = secrets.token_hex(16)
        with self._lock:
            self._sum_sessions[handle] = _SumSession(
                analyst, args["dataset"], n, party, guard)
        return dict(reply, handle=handle)

    @serves("sums.key_list")
    def _op_sums_key_list(self, analyst, args, record):
        from ..privacy.masked_sums import limb_code

        session = self._sum_session(analyst, args, record)
        keys = {int(p): bytes(k) for p, k in args["keys"].items()}
        proofs = {int(p): v for p, v in args["proofs"].items()}
        with session.lock:
            session.guard.verify_key_list({"keys": keys, "proofs": proofs},
                                          session.party.public_key())
            # the parties now known: the integer code of a sum over all of them
            session.fixed_point = limb_code(len(keys))
            session.keys = keys
        return True

    @serves("sums.masked")
    def _op_sums_masked(self, analyst, args, record):
        from ..privacy.masked_sums import mask_reply

        session = self._sum_session(analyst, args, record)
        op = args["operation"]
        operation = OPERATIONS.get(op)
        if operation is None or not operation.maskable:
            raise Refused("message", f"{str(op)[:64]!r} is not an operation whose reply a "
                                     "masked sum carries")
        self._check_analyst(analyst, op)
        inner = dict(args["args"], dataset=session.dataset)  # the session's rows only
        problem = operation.check(inner)
        if problem is not None:
            raise Refused("message", problem)
        record["operation"] = f"sums.masked:{op}"[:64]
        message = {"kind": "sums", "exchange": args["exchange"], "parties": args["parties"],
                   "coefficient": args["coefficient"]}
        with session.lock:
            if session.keys is None:
                raise Refused("require", "a masked sum before a verified key list")
            session.guard.check_pass(message, coefficient=1.0)  # every verified site, a sum
            record["masked"] = True
            reply = self._handlers[op](self, analyst, inner, record)
            return mask_reply(session.party, session.keys, reply, message,
                              session.fixed_point)

    @serves("sums.close")
    def _op_sums_close(self, analyst, args, record):
        self._sum_session(analyst, args, record)
        with self._lock:
            self._sum_sessions.pop(args["session"], None)
        return True

