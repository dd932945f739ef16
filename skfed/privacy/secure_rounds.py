"""Secure aggregation in the rounds: the server learns only sums of the sites' messages.

``FedLasso(privacy=SecureAggregation())`` runs the estimator's solver with
every message that leaves a site masked (:mod:`skfed.privacy.secure_aggregation`):

1. **Key agreement, once per fit** (one setup round): each site creates an
   X25519 key pair *at the site* and sends its public key; the server sends
   every site the list of public keys. Private keys never leave the site's
   solver state (on Dask, the site's worker) and are not returned at the end
   of the fit.
2. **Every round**, the solver declares which reply fields its server update
   reads and through which sums (:meth:`FederatedSolver.summed_fields`):
   ``sum_j w_j r_j`` with the round's public weights, or ``sum_j r_j``. Each
   site multiplies its fields by its public coefficients, concatenates them,
   encodes them in fixed point modulo ``2**64`` and adds its pairwise masks
   under a fresh exchange identifier. The server adds the masked words and
   decodes the sums, and the solver's :meth:`aggregate_sums` takes it from
   there: the same update as without masking, to the fixed-point precision.
   Fields the solver does not declare never leave the site.
3. **Monitoring** (objective and stationarity) uses the same masked sums of
   ``a_j f_j(theta)`` and ``a_j grad f_j(theta)`` (for Newton, the sums its
   rounds already carry): the server learns the pooled loss and gradient,
   not a site's. The consensus metric (which reads
   each site's model) is not computed.

What the server still learns: the sums (the algorithm needs them), which
sites took part in a round, and the setup metadata every fit sends in the
clear (row counts, weight sums and each site's smoothness bound; for
first-order solvers also the pooled-smoothness pass, whose per-site
Hessian-vector products are not masked). Solvers whose server reads a site's
own reply (A-FedPD keeps each site's dual on the server; decentralized
topologies have no server) are refused before round one.

Threat model: an honest-but-curious server that relays public keys
faithfully and does not collude with sites (see
:mod:`skfed.privacy.secure_aggregation`). A site that drops out after
masking (its worker died, its code raised) is handled as without secure
aggregation: a solver that allows partial participation goes on without it
(the sites that are left mask the same replies again for the smaller round;
``history_.privacy["dropout_recoveries"]``), one that needs every site stops
with the reason. Recovery of the lost site's own message by secret sharing
(Bonawitz et al.) is not implemented: its reply is lost, as when it fails
before masking. Under differential privacy a lost site stops the fit with
:class:`~skfed.privacy.DropoutError` (the noise shares and the public count
were set for the full round), and what a site keeps of a round for recovery
is the vector it released, clipped and noised: nothing from before its noise
can be asked for again (a site service refuses such a recovery outright,
:mod:`skfed.sites.guard`).
"""

import os
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator

from .._messages import show
from ..exceptions import ClientFailureError
from ..federation.rounds import client_monitor
from ..federation.session import payload_nbytes
from ..federation.wire import wire_class
from ..solvers.base import FederatedSolver, message_nbytes
from .secure_aggregation import (FixedPoint, SecureAggregationParty, aggregate_masked,
                                 check_versions)

#: what a site service adds to its key-agreement reply (skfed.sites.guard)
_PROOF_FIELDS = ("signature", "certificate", "site", "weight_sum")


def _why_not_summed(solver):
    """Why a solver's server cannot work from sums (the refusal names it)."""
    if solver.topology != "centralized" or solver.name == "dsgd":
        return "it is decentralized: there is no server, neighbours exchange their models"
    if solver.name == "afedpd":
        return ("its server keeps every site's dual variable and updates it from that "
                "site's own model")
    return "its server reads each site's reply on its own"


@wire_class(role="privacy")
class SecureAggregation(BaseEstimator):
    """Secure aggregation of every round's messages (pass as ``privacy=`` to an estimator).

    The server learns only the (weighted) sums of the sites' messages that
    its update needs; each site's own message is masked by pairwise one-time
    pads derived from X25519 key agreements (``cryptography``), in fixed
    point modulo ``2**64``. The fitted model equals the unmasked fit to the
    fixed-point precision (``history_.privacy["sum_error"]`` per summed
    coordinate and round).

    Parameters
    ----------
    bound : float, default=2.0**20
        Largest absolute value of one coordinate of a site's weighted
        message (the public range of the fixed-point code). A site whose
        message exceeds it fails the round with a message saying so, before
        anything is sent.
    fraction_bits : int or "auto", default="auto"
        Bits after the binary point. ``"auto"``: the most that cannot
        overflow a sum over all the sites, given ``bound`` (38 bits for 16
        sites and the default bound: a resolution of 3.6e-12, a sum within
        2.9e-11).

    Notes
    -----
    Supported solvers: those whose server update reads the replies only
    through sums, which :meth:`FederatedSolver.summed_fields` declares
    (FedNewton, DualFL, FedAvg, FedProx, FedDualAvg, FedMID and their OSP variants,
    FedPD, FedADMM, FedDyn, FedMLS, SCAFFOLD and centralized Local G-ECL).
    Others are refused before round one, with the reason.

    What is protected and what is not is listed in
    :mod:`skfed.privacy.secure_rounds`; the cryptography in
    :mod:`skfed.privacy.secure_aggregation`.
    """

    _parameter_constraints = {}

    def __init__(self, *, bound=2.0 ** 20, fraction_bits="auto"):
        self.bound = bound
        self.fraction_bits = fraction_bits

    def fixed_point(self, n_parties):
        """The :class:`FixedPoint` code for sums over ``n_parties`` sites."""
        bound = self.bound
        if (not isinstance(bound, Real) or isinstance(bound, bool) or not np.isfinite(bound)
                or bound <= 0):
            raise ValueError(f"SecureAggregation: bound must be a positive finite number; "
                             f"got {show(bound)}.")
        bits = self.fraction_bits
        if isinstance(bits, str) and bits == "auto":
            bits = FixedPoint.max_fraction_bits(float(bound), n_parties)
        elif not isinstance(bits, Integral) or isinstance(bits, bool):
            raise ValueError(f"SecureAggregation: fraction_bits must be an integer or 'auto'; "
                             f"got {show(bits)}.")
        return FixedPoint(int(bits), bound=float(bound), n_parties=n_parties)

    def wrap(self, solver, max_rounds=None, monitor_every=1):
        """The solver whose every exchange is securely aggregated (``max_rounds``: the
        fit's round limit, which a privacy budget may need)."""
        return SecureAggregationSolver(solver, self, max_rounds)


def _concatenate(reply, coefficients):
    """The site's message: each declared field times its public coefficient, flat."""
    parts, shapes = [], {}
    for field, c in coefficients.items():
        value = np.asarray(reply[field], dtype=np.float64)
        shapes[field] = value.shape
        parts.append(np.ravel(np.asarray(c, dtype=np.float64) * value))
    return (np.concatenate(parts) if parts else np.zeros(0)), shapes


def _split(total, shapes):
    sums, start = {}, 0
    for field, shape in shapes.items():
        size = int(np.prod(shape, dtype=int))
        part = total[start:start + size].reshape(shape)
        sums[field] = float(part) if shape == () else part
        start += size
    return sums


def _delegated(attribute):
    """A read-only attribute of the wrapped solver."""
    return property(lambda self: getattr(self.solver, attribute))


class SecureAggregationSolver(FederatedSolver):
    """A solver run with secure aggregation (made by :meth:`SecureAggregation.wrap`).

    Every client task of the fit goes through this object's
    :meth:`client_update`, which dispatches on the message's ``kind``: the key
    agreement (``"keys"``, ``"key-list"``), a solver round (``"round"``) or a
    monitoring pass (``"monitor"``). The wrapped solver's own client code
    runs unchanged inside a round; only the declared sums leave the site.
    """

    #: client states (private keys, duals) stay at the sites after the fit
    keeps_states_at_sites = True
    masked = True
    #: what a site service receives besides the constructor's parameters: the
    #: fixed-point code it masks in (the server's exchange counter, session and
    #: recoveries stay with the server; skfed.sites.codec accepts nothing else)
    _wire_attributes = ("fixed_point_",)

    def __init__(self, solver, config, max_rounds=None):
        self.solver = solver
        self.config = config
        self.max_rounds = max_rounds

    # -- what the wrapped solver is --------------------------------------
    name = _delegated("name")
    # Newton's replies carry the weighted loss and gradient at the model: the
    # monitor reads their masked sums (monitor_sums_in_replies), no pass of its own
    monitors_in_replies = _delegated("monitors_in_replies")
    requires_full_participation = _delegated("requires_full_participation")
    requires_smooth_datafit = _delegated("requires_smooth_datafit")
    polish_output = _delegated("polish_output")

    def monitor_sums_in_replies(self, replies, weights):
        # the round's declared sums: the solver pools its monitor from them
        return self.solver.monitor_from_sums(self._sums(replies))

    def monitor_sums(self, session, theta):
        # the wrapped solver's own pass where it has one; the session masks it
        return self.solver.monitor_sums(session, theta)

    def may_stop(self, server, tol):
        return self.solver.may_stop(server, tol)

    def rejected_trial(self, server):
        return self.solver.rejected_trial(server)

    def fallback_model(self, server, objective):
        return self.solver.fallback_model(server, objective)

    def needs_smoothness(self, layout, datafit):
        return self.solver.needs_smoothness(layout, datafit)

    def check_problem(self, problem, participation):
        self.solver.check_problem(problem, participation)

    def guarantee(self, problem, participation=1.0):
        return self.solver.guarantee(problem, participation)

    # -- setup ------------------------------------------------------------
    def setup(self, problem, participation=1.0):
        self.solver.setup(problem, participation)
        self.problem_ = problem
        name = self.solver.name
        if self.solver.summed_fields(self.solver.init_server(problem.layout.zeros())) is None:
            why = _why_not_summed(self.solver)
            raise ValueError(
                f"secure aggregation needs a solver whose server uses only sums of the sites' "
                f"messages; solver {name!r} cannot run under it: {why}. Use 'newton', "
                f"'dualfl', 'feddyn', 'fedadmm', 'fedpd', 'feddualavg', 'fedmid', 'fedavg', "
                f"'fedprox', 'fedmls', 'scaffold' or centralized 'local_gecl'.")
        if problem.n_clients < 2:
            raise ValueError("secure aggregation needs at least two sites: with one, the sum "
                             "the server decodes is that site's message.")
        self.fixed_point_ = self.config.fixed_point(problem.n_clients)
        # public, fresh per fit: bound into every mask seed (keys are fresh too)
        self.session_ = os.urandom(16)
        self.exchanges_ = 0
        self.recoveries_ = []
        return self

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_executor", None)  # the sites receive the solver, never the executor
        return state

    def privacy_record(self):
        """What ``history_.privacy`` reports about the masking."""
        fp = self.fixed_point_
        return {"secure_aggregation": True, "fraction_bits": fp.fraction_bits,
                "bound": fp.bound, "sum_error": fp.sum_error,
                "dropout_recoveries": list(self.recoveries_)}

    def _next_exchange(self):
        self.exchanges_ += 1
        return self.exchanges_

    def open_session(self, executor):
        """Key agreement before round one: returns ``(bytes, rounds)`` of setup traffic.

        Each site creates its key pair where it runs and sends the public key
        (32 bytes); the server returns the list to every site.
        """
        self._executor = executor  # driver side only (see __getstate__)
        N = self.problem_.n_clients
        keys = self._run(executor, "key agreement",
                         [(j, {"kind": "keys", "party": j, "session": self.session_})
                          for j in range(N)])
        check_versions(keys)
        public = {j: keys[j]["public_key"] for j in range(N)}
        if len(set(public.values())) != N:
            raise ValueError("secure aggregation: two sites sent the same public key.")
        # a site service signs its key with its certificate's key (and its weight sum):
        # the proofs go to every site, which checks each peer's before it masks
        proofs = {j: {f: keys[j][f] for f in _PROOF_FIELDS} for j in range(N)
                  if all(f in keys[j] for f in _PROOF_FIELDS)}
        self._run(executor, "key agreement",
                  [(j, {"kind": "key-list", "keys": public, "proofs": proofs})
                   for j in range(N)])
        return 32 * N + 32 * N * N, 1

    def _run(self, executor, what, jobs):
        """Run ``jobs`` (``(client, message)``) on every listed client; any failure stops
        the fit (a masked sum cannot lose a site)."""
        replies, failures = executor.run_round(
            self, 0, [(j, m, 0) for j, m in jobs], retry=True)
        if failures:
            j = min(failures)
            raise ClientFailureError(
                f"secure aggregation ({what}): client {executor.labels[j]!r} failed: "
                f"{failures[j].error}\n{failures[j].traceback}")
        return replies

    # -- rounds ---------------------------------------------------------------
    def init_server(self, theta0):
        return self.solver.init_server(theta0)

    def init_client(self, j, theta0):
        return {"inner": self.solver.init_client(j, theta0)}

    def broadcast(self, server, rnd):
        return self.solver.broadcast(server, rnd)

    def _exchange(self, server, participants):
        """A fresh exchange of the round's declared sums among ``participants``: one
        message skeleton per participant, with its public coefficients."""
        problem = self.problem_
        weights = problem.weights[participants] / problem.weights[participants].sum()
        coefficients = {field: self.solver.reply_coefficients(field, kind, weights, participants)
                        for field, kind in self.solver.summed_fields(server).items()}
        exchange, parties = self._next_exchange(), tuple(int(j) for j in participants)
        # the kinds let a site service check its own coefficient against the signed
        # weight sums (skfed.sites.guard): the server cannot single a site out
        kinds = dict(self.solver.summed_fields(server))
        return [{"exchange": exchange, "parties": parties, "kinds": kinds,
                 "coefficients": {f: c[k] for f, c in coefficients.items()}}
                for k in range(len(participants))]

    def personalize_round(self, server, message, participants):
        inner = self.solver.personalize_round(server, message, participants)
        return [dict(skeleton, kind="round", inner=m)
                for skeleton, m in zip(self._exchange(server, participants), inner)]

    def _privatize(self, vector, message):
        """What a site does to its message vector before masking (nothing here;
        clipping and noise under differential privacy)."""
        return vector

    def _privatize_pass(self, vector, message):
        """What a site does to a pass's vector (a monitor, an inference pass) before
        masking: nothing here (differential privacy clips and noises a monitor)."""
        return vector

    def _kept_for_recovery(self, reply, vector, shapes, message):
        """What a site keeps of its round for a dropout recovery.

        Without noise the released vector is the reply's summed fields times
        public coefficients: the site keeps those fields, and a recovery
        weighs them by the smaller round's coefficients (the same exact
        reply, weighted anew). :class:`~skfed.privacy.dp_rounds.
        DifferentiallyPrivateSolver` keeps the clipped, noised vector instead.
        """
        return {"fields": {f: reply[f] for f in message["coefficients"]}}

    def _recovery_vector(self, pending, message):
        """``(vector, shapes)`` a site masks again in a dropout recovery."""
        return _concatenate(pending["fields"], message["coefficients"])

    def client_update(self, client, state, message, rng):
        kind = message["kind"]
        if kind == "keys":
            party = SecureAggregationParty(message["party"], session=message["session"])
            return ({"public_key": party.public_key(), "version": party.version},
                    dict(state, party=party))
        if kind == "key-list":
            return {}, dict(state, keys=dict(message["keys"]))
        if kind in ("sums", "monitor"):
            vector, shapes = _concatenate(*self._pass_reply(client, message))
            vector = self._privatize_pass(vector, message)
        elif kind == "remask":  # the round again, for the sites that are left
            vector, shapes = self._recovery_vector(state["pending"], message)
        else:
            reply, inner = self.solver.client_update(client, state["inner"], message["inner"],
                                                     rng)
            vector, shapes = _concatenate(reply, message["coefficients"])
            vector = self._privatize(vector, message)
            # kept (at the site) until the next round, in case a site drops after
            # masking: what the round released, never anything from before its noise
            state = dict(state, inner=inner,
                         pending=self._kept_for_recovery(reply, vector, shapes, message))
        peers = {p: state["keys"][p] for p in message["parties"]}
        masked = state["party"].mask(vector, message["exchange"], peers,
                                     fixed_point=self.fixed_point_)
        return {"masked": masked, "shapes": shapes}, state

    def _pass_reply(self, client, message):
        """``(reply, coefficients)`` of a masked pass that is not a round: an inference
        pass (``"sums"``) or a monitoring pass (``"monitor"``)."""
        if message["kind"] == "sums":  # a module-level function of the site's rows, summed
            reply = message["fn"](client, *message["args"])
            return reply, {f: message["coefficient"] for f in reply}
        value, grad = client.value_and_gradient(message["theta"])
        return {"value": value, "grad": grad}, {"value": message["weight"],
                                                "grad": message["weight"]}

    def _sums(self, replies):
        shapes = replies[0]["shapes"]
        if any(r["shapes"] != shapes for r in replies):
            raise ValueError("secure aggregation: the sites' messages have different shapes.")
        total = aggregate_masked([r["masked"] for r in replies], self.fixed_point_)
        return _split(total, shapes)

    def aggregate(self, server, replies, weights, participants):
        if set(replies[0]["masked"].parties) != {int(j) for j in participants}:
            replies = self._recover(server, participants)
        return self.solver.aggregate_sums(server, self._sums(replies), participants)

    def _recover(self, server, participants):
        """A site dropped after masking (the round loop left it out): its pairwise
        masks cannot cancel, so the sites that are left mask the same replies again,
        with the coefficients of the smaller round, under a fresh exchange identifier
        and without the lost site's keys. Two independent masks of one reply reveal
        nothing more than one; the round is then one with fewer participants, as
        without secure aggregation."""
        messages = self._exchange(server, participants)
        replies = self._run(self._executor, "dropout recovery", [
            (j, dict(m, kind="remask")) for j, m in zip(participants, messages)])
        self.recoveries_.append({"exchange": messages[0]["exchange"],
                                 "sites": len(participants), "bytes": int(
                                     sum(r["masked"].nbytes for r in replies.values()))})
        return [replies[j] for j in participants]

    def server_model(self, server):
        return self.solver.server_model(server)

    def round_traffic(self, messages, replies, participants):
        up = sum(r["masked"].nbytes for r in replies)
        _, down = self.solver.round_traffic([m["inner"] for m in messages], [], participants)
        coefficient_bytes = sum(message_nbytes(m["coefficients"]) for m in messages)
        return int(up), int(down + coefficient_bytes)

    def masked_sum(self, executor, fn, args, *, coefficients=None, scale=1.0):
        """``(sums, bytes)``: ``sum_j c_j fn(client_j, *args)`` by a masked pass over every
        site (the session's :meth:`~skfed.federation.session.FederationSession.sum` under
        secure aggregation): the server decodes the totals only.

        The monitor's pass (``fn`` is :func:`~skfed.federation.rounds.client_monitor`)
        weighs each site's loss and gradient by its public weight ``c_j``; any other
        pass (inference, risk-set and smoothness sums: the functions a site accepts,
        the maskable fit operations, :mod:`skfed.federation.operations`) multiplies
        every site's reply by the public ``scale`` (the inverse of the signed total
        weight), and the decoded totals are divided by it. ``fn`` is a module-level
        function (sent by name)."""
        problem = self.problem_
        N = problem.n_clients
        exchange, parties = self._next_exchange(), tuple(range(N))
        if fn is client_monitor:
            weights = problem.weights if coefficients is None else coefficients
            label, jobs = "monitoring", [
                (j, {"kind": "monitor", "theta": args[0], "weight": float(weights[j]),
                     "exchange": exchange, "parties": parties}) for j in range(N)]
            down = args[0].nbytes + 8
        else:
            if coefficients is not None:
                raise ValueError("a masked pass of site sums is unweighted (one public "
                                 "scale for every site).")
            label, jobs = "site sums", [
                (j, {"kind": "sums", "fn": fn, "args": args, "coefficient": float(scale),
                     "exchange": exchange, "parties": parties}) for j in range(N)]
            down = payload_nbytes(args) + 8
        replies = self._run(executor, label, jobs)
        sums = self._sums([replies[j] for j in range(N)])
        traffic = sum(replies[j]["masked"].nbytes for j in replies) + N * down
        if fn is client_monitor:
            return (sums["value"], sums["grad"]), traffic
        return {k: np.asarray(v) / scale for k, v in sums.items()}, traffic
