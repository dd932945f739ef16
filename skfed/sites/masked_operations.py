"""The site's side of an analysis's masked sums (:mod:`skfed.privacy.masked_sums`).

A boosting fit under ``privacy=SecureAggregation()`` (or any analysis whose sums a
masked session carries) reaches a site service through four operations, in a
*sum session* bound to one dataset reference (its rows, after its row steps):

1. ``sums.open``: the site creates an X25519 key pair for the session, keeps its
   private half, and returns the public half signed with its certificate together
   with the weight sum of the session's rows (their count; a site that requires
   protection opens no session over weighted rows);
2. ``sums.key_list``: the site checks every relayed key against its site's
   signature and certificate, and that the keys' sites are exactly the dataset's
   consortium (:meth:`~skfed.sites.host.SiteHost.consortium`, all present; at least
   ``max(2, min_sites)`` sites where no consortium is named), before it masks
   anything;
3. ``sums.masked``: one *maskable* declared operation runs on the session's rows —
   every declared check of that operation holds, except the rules that exist
   because a plain reply is one site's alone (``min_rows`` per tree node, the
   dominance rule, the finer-sums rule and ``require``) — and its reply leaves the
   site only as exact integer limbs masked for every verified site, with a
   coefficient of one, under a fresh, increasing exchange number;
4. ``sums.close``.

What stays refused: a site that requires differential privacy serves no sum
session (a masked sum carries no noise); an operation that is not maskable; a pass
over fewer than every verified site, with another coefficient than one, or with a
replayed exchange number. A mixin of the host.
"""

import secrets
import threading

from ..federation.operations import Refused, operations
from .guard import SecureAggregationGuard


class _SumSession:
    """One analysis's masked sums at this site: its rows' reference, key pair and guard."""

    def __init__(self, owner, dataset, reference, rows, party, guard):
        self.owner, self.dataset, self.reference, self.rows = owner, dataset, reference, rows
        self.party, self.guard = party, guard
        self.keys = self.fixed_point = self.weight_total = None
        self.lock = threading.Lock()


class MaskedSumOperations:
    """The host's ``sums.*`` operations (see the module docstring)."""

    def consortium(self, dataset):
        """The sites a masked sum over ``dataset`` must be over (``None``: any verified
        sites, at least ``max(2, min_sites)``: a site that does not require secure
        aggregation)."""
        conf = self.config.datasets.get(dataset)
        return (conf.consortium if conf is not None and conf.consortium else None) or \
            self.policy.consortium

    def _sum_session(self, analyst, args, state):
        handle = args.get("session")
        session = self._sum_sessions.get(handle) if isinstance(handle, str) else None
        if session is None or session.owner != analyst:  # another's session looks absent
            raise Refused("sessions", "no such session of masked sums for this analyst",
                          public=True)
        state.record.update(dataset=session.dataset, rows=session.rows)
        state.read_rows = True
        return session

    def _sums_open(self, analyst, args, state):
        from ..privacy.masked_sums import site_weight_sum
        from ..privacy.secure_aggregation import SecureAggregationParty

        if "differential_privacy" in self.policy.require:
            raise Refused("require", "this site requires differential privacy: masked sums "
                                     "of an analysis carry no noise", public=True)
        operation = operations()["sums.open"]
        conf, site = self.request_rows(operation, analyst, args["dataset"], state)
        config = self.config
        guard = SecureAggregationGuard(self.name, config.cert.read_bytes(),
                                       config.key.read_bytes(), config.ca.read_bytes(),
                                       self.policy.min_sites,
                                       consortium=self.consortium(conf.name))
        if site.sample_weight is not None and self.policy.require:
            raise Refused("require", "a session of masked sums over weighted rows would "
                                     "release this site's weight sum (a sum of its rows)",
                          public=True)
        key_session = bytes(args["key_session"])
        party = SecureAggregationParty(int(args["party"]), session=key_session)
        reply = guard.sign_key({"session": key_session, "party": int(args["party"])},
                               {"public_key": party.public_key(), "version": party.version},
                               site_weight_sum(site))
        handle = secrets.token_hex(16)
        with self._lock:
            self._sum_sessions[handle] = _SumSession(analyst, conf.name, args["dataset"],
                                                     state.record["rows"], party, guard)
        return dict(reply, handle=handle)

    def _sums_key_list(self, analyst, args, state):
        from ..privacy.masked_sums import limb_code, public_weight_total

        session = self._sum_session(analyst, args, state)
        keys = {int(p): bytes(k) for p, k in args["keys"].items()}
        proofs = {int(p): v for p, v in args["proofs"].items()}
        with session.lock:
            session.guard.verify_key_list({"keys": keys, "proofs": proofs},
                                          session.party.public_key())
            # the parties now known: the integer code of a sum over all of them
            session.fixed_point = limb_code(len(keys))
            session.keys = keys
            # the verified weight sums every site signed: the public row bound of the
            # fields a bounded loss's sums carry in fewer limbs
            sums = {p: proof.get("weight_sum") for p, proof in proofs.items()}
            if set(sums) == set(keys) and all(isinstance(v, (int, float)) for v in sums.values()):
                session.weight_total = public_weight_total(sums)
        return True

    def _sums_masked(self, analyst, args, state):
        from ..privacy.masked_sums import field_ranges, mask_reply, row_bounds

        session = self._sum_session(analyst, args, state)
        op = args["operation"]
        operation = operations().get(op)
        if operation is None or not operation.maskable or operation.target != "rows":
            raise Refused("message", f"{str(op)[:64]!r} is not an operation whose reply a "
                                     "masked sum carries", public=True)
        self._check_analyst(analyst, op)
        inner = dict(args["args"], dataset=session.reference)  # the session's rows only
        problem = operation.problem(inner)
        if problem is not None:
            raise Refused("message", problem)
        state.record["kind"] = f"sums.masked:{op}"[:64]
        message = {"kind": "sums", "exchange": args["exchange"], "parties": args["parties"],
                   "coefficient": args["coefficient"]}
        with session.lock:
            if session.keys is None:
                raise Refused("require", "a masked sum before a verified key list", public=True)
            session.guard.check_pass(message, coefficient=1.0)  # every verified site, a sum
            conf, site = self.request_rows(operation, analyst, session.reference, state)
            with row_bounds() as bounds:
                reply = self.run(operation, site, inner, state, dataset=conf.name,
                                 conf=conf, analyst=analyst, masked=True)
            return mask_reply(session.party, session.keys, reply, message,
                              session.fixed_point, field_ranges(bounds, session.weight_total))

    def _sums_close(self, analyst, args, state):
        self._sum_session(analyst, args, state)
        with self._lock:
            self._sum_sessions.pop(args["session"], None)
        return True
