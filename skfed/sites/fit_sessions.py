"""A fit's session at a site service: its rounds, under the protection the site requires.

``fit.open`` (declared beside :func:`~skfed.data.site.client_objective`) builds the
site's client objective and keeps it in a session only its analyst can use; the
fit's operations on it (``fit.monitor``, ``fit.inference``...) are declared beside
their functions. The service itself carries the session's rounds (``fit.step``, which
may carry the round's ``fit.monitor`` request, run under that operation's own rules:
one request per site and round) and its end (``fit.close``): a step's solver is
decoded once and named by its digest after; what the step releases is decided by the
solver's *class* at the site (its ``site_protection``: masked, noised or plain), never
by what a message says; a masked or noised step passes the site's guard
(:mod:`skfed.sites.guard`) first. A mixin of :class:`~skfed.sites.host.SiteHost`.
"""

import functools
import hashlib

from ..data.site import SiteError
from ..executors.base import client_round
from ..federation import dominance
from ..federation.operations import Refused, operation_for, operations
from ..federation.wire import role_of
from ..solvers.base import message_nbytes
from . import service_operations  # noqa: F401  (fit.close, sums.*: the service's own)
from .codec import MessageError, decode
from .engine import refusal
from .engine_objective import EngineObjective
from .gate import check_work, release_rule
from .guard import PrivateRounds, SecureAggregationGuard
from .monitor_reuse import MonitorTap, Reusing


class FitSessions:
    """The host's fit sessions (see the module docstring)."""

    @classmethod
    def service_handlers(cls):
        """``{operation: handler}`` of the operations the service runs itself."""
        return {"fit.step": cls._fit_step, "fit.close": cls._fit_close,
                "sums.open": cls._sums_open, "sums.key_list": cls._sums_key_list,
                "sums.masked": cls._sums_masked, "sums.close": cls._sums_close}

    def fit_session(self, analyst, args, state):
        handle = args.get("session")
        session = self._sessions.get(handle) if isinstance(handle, str) else None
        if session is None or session.owner != analyst:  # another's session looks absent
            raise Refused("sessions", "no such fit session for this analyst", public=True)
        state.record.update(dataset=session.dataset, rows=session.n_rows,
                            columns=session.columns)
        state.read_rows = True
        return session

    def _fit_close(self, analyst, args, state):
        session = self.fit_session(analyst, args, state)
        with self._lock:
            self._sessions.pop(args["session"], None)
        session.states.clear()
        return True

    def _fit_step(self, analyst, args, state):
        session = self.fit_session(analyst, args, state)
        solver = self._solver(session, args)
        inner = self._check_solver(solver)
        inner.check_at_site(session.objective, self.context(session.dataset))
        client, seed = int(args["client"]), int(args["seed"])
        message = args.get("message")
        protection = solver.site_protection
        # the monitor a plain step carries, answered first (a refusal leaves the state as
        # it was), as a fit.monitor request of its own would be; what it computed and
        # audited at its model is the step's gradient there (monitor_reuse)
        monitored, kept = (self._fused_monitor(analyst, session, solver, args, state)
                           if "monitor" in args else (None, None))
        with session.lock:  # the state of one client advances one round at a time
            if "state" in args:  # the first round: the initial state the server built
                session.states[client] = args["state"]
            step_state = session.states.get(client)
            if protection is None:  # plain: its sums are audited as they are formed
                result = self._plain_step(session, solver, inner, step_state, message, seed,
                                          kept)
            else:
                message = self._guard(session, solver, message, step_state, analyst, state)
                with dominance.suspended():  # masked: the consortium rule instead
                    result = _failed(client_round(session.objective, solver, step_state,
                                                  message, seed), self.name)
            if isinstance(result, SiteError):
                raise result
            reply, session.states[client] = result
            if protection is not None and message.get("kind") == "keys":
                reply = session.guard.sign_key(message, reply, session.objective.weight_sum)
        state.record["bytes_algorithm"] = message_nbytes(reply) if isinstance(reply,
                                                                             dict) else 0
        return reply if "monitor" not in args else {"reply": reply, "monitor": monitored}

    def _fused_monitor(self, analyst, session, solver, args, state):
        """The ``fit.monitor`` request a plain step carries (one request per site and
        round), under every rule of that operation's own request: served here and
        allowed to this analyst, its declared arguments, its release class (refused
        where the policy requires protection), its checks and its dominance audit. A
        masked or noised step carries none: its monitor is a protected pass. Returns its
        reply and what it kept (:class:`~skfed.sites.monitor_reuse.Kept`, or ``None``)."""
        if solver.site_protection is not None:
            raise Refused("message", "a masked or noised step carries no monitor in the "
                                     "clear", public=True)
        operation = operations()["fit.monitor"]
        self._check_analyst(analyst, operation.name)
        named = dict(args["monitor"], session=args["session"])
        problem = operation.problem(named)
        if problem is not None:
            raise Refused("message", f"the step's monitor: {problem}", public=True)
        state.record["kind"] = "fit.step+fit.monitor"
        objective = session.objective
        if not MonitorTap.taps(objective):  # an engine's: its partitions' sums
            return self.run(operation, objective, named, state,
                            dataset=session.dataset), None
        tap = MonitorTap(objective)
        return self.run(operation, tap, named, state, dataset=session.dataset), tap.kept

    def _plain_step(self, session, solver, inner, step_state, message, seed, kept=None):
        """A plain step: its sums audited by the dominance rule as they are formed, or, for
        a solver whose replies are a declared operation's finer sums (risk sets), that
        operation's rule (its checks ran: ``check_at_site``) where the policy allows it.
        ``kept``: the fused monitor's audited gradient, reused at its model exactly."""
        finer = inner.replies_as
        if finer is not None:
            operation = operations()[finer]
            release_rule(operation, "sums", self.policy)
            with dominance.suspended():
                return _failed(client_round(session.objective, solver, step_state, message,
                                            seed), self.name)
        objective = session.objective if kept is None else Reusing(session.objective, kept)
        with dominance.audit(self.policy.min_rows, self.policy.dominance) as audit:
            result = _failed(client_round(objective, solver, step_state, message, seed),
                             self.name)
        if not isinstance(result, SiteError) and audit.checks == 0:
            raise Refused("dominance", "a step whose sums no audit saw")
        return result

    def _solver(self, session, args):
        """The step's solver: sent (encoded) when it changed, else named by its digest."""
        blob, digest = args.get("solver"), args["solver_digest"]
        if blob is not None:
            if hashlib.sha256(blob).hexdigest() != digest:
                raise Refused("message", "the solver does not match its digest", public=True)
            try:
                solver = decode(blob.tobytes())
            except MessageError as exc:
                raise Refused("message", f"the solver is not a skfed message ({exc})",
                              public=True) from None
            if role_of(solver) != "solver":
                raise Refused("message", "fit.step needs one of skfed's solvers", public=True)
            check_work(solver, self.policy.max_local_iterations)  # the gate's bound too
            session.solver = (digest, solver)
        if session.solver is None or session.solver[0] != digest:
            raise Refused("message", "a step names a solver this session has not received",
                          public=True)
        return session.solver[1]

    def _check_solver(self, solver):
        """The policy's solver rules, decided from what the step's solver *is* (its class):
        the allow-list reads the solver inside a real privacy wrapper; returns the solver
        that runs the rounds."""
        protection = solver.site_protection
        inner = solver.solver if protection is not None else solver
        if role_of(inner) != "solver" or inner.site_protection is not None:
            # honest wrappers hold one plain solver; another wrapper would hide its name
            raise Refused("message", "a privacy wrapper must hold one of skfed's solvers",
                          public=True)
        allowed = self.policy.solvers
        if allowed is not None and inner.name not in allowed:
            raise Refused("solvers", f"solver {inner.name!r} is not allowed at this site",
                          public=True)
        if "secure_aggregation" in self.policy.require and protection is None:
            raise Refused("require", "this site requires secure aggregation and the step is "
                                     "not masked", public=True)
        if "differential_privacy" in self.policy.require and protection != "noised":
            raise Refused("require", "this site requires differential privacy and the step "
                                     "adds no noise", public=True)
        return inner

    def _guard(self, session, solver, message, step_state, analyst, state):
        """The site's checks of a masked (or noisy) step; returns the message to run."""
        if not isinstance(message, dict):
            raise Refused("message", "a masked step needs a message")
        if session.guard is None:
            config = self.config
            session.guard = SecureAggregationGuard(
                self.name, config.cert.read_bytes(), config.key.read_bytes(),
                config.ca.read_bytes(), self.policy.min_sites,
                consortium=self.consortium(session.dataset))
        kind = message.get("kind")
        state.record["kind"] = f"fit.step:{str(kind)[:16]}"
        private = solver.site_protection == "noised"
        if kind == "key-list":
            session.guard.verify_key_list(message, step_state["party"].public_key())
        elif kind in ("round", "remask", "monitor", "sums"):
            message = self._protected_pass(session, solver, message, private, analyst, state)
        elif kind != "keys":
            raise Refused("message", f"unknown masked step {str(kind)[:32]!r}")
        return message

    def _protected_pass(self, session, solver, message, private, analyst, state):
        """A masked round, monitor or sums pass: the guard's checks, and under
        differential privacy the site's own clip, noise and charge for every kind."""
        kind = message["kind"]
        # a pass of sums would carry no noise: refused before anything (a remask is the
        # guard's: the consortium rule, then the session's rules on recoveries)
        if private and kind != "remask":
            PrivateRounds.check_kind(kind)
        if kind == "sums":
            self._check_masked_pass(session, message)
            session.guard.check_pass(message)
            parties = [int(p) for p in message.get("parties", ())]
        else:
            sigma = solver.noise_multiplier_ if private else None
            noisy = private and not (isinstance(sigma, (int, float)) and sigma <= 0)
            parties = session.guard.check_round(message, private, noisy=noisy)
        if not private:
            return message
        if session.private is None:
            session.private = PrivateRounds()

        def charge(epsilon, delta, releases):
            ok = self.ledger.charge(session.dataset, epsilon, delta, analyst=analyst,
                                    rounds=releases)
            if ok:
                state.record["epsilon"] = state.record["epsilon"] + float(epsilon)
            return ok

        return session.private.prepare(solver, message, parties, policy=self.policy,
                                       charge=charge)

    def _check_masked_pass(self, session, message):
        """A masked pass of sums names a maskable fit operation, checked as declared."""
        fn = message.get("fn")
        operation = operation_for(fn)
        if operation is None or not operation.maskable or operation.target != "fit":
            raise Refused("message", "a masked pass of a function that is not a maskable "
                                     "fit operation")
        args = message.get("args")
        named = operation.pack(tuple(args) if isinstance(args, (list, tuple)) else ())
        named["session"] = None
        problem = operation.problem(named)
        if problem is not None:
            raise Refused("message", problem)
        values = dict(zip([a.name for a in operation.arguments],
                          operation.call_arguments(named, self.policy)))
        rules = self.context(session.dataset, masked=True)
        for check in operation.checks:
            check(session.objective, values, rules)
        message["args"] = [values[a.name] for a in operation.arguments]
        if isinstance(session.objective, EngineObjective):  # its partitions' sums combined
            if operation.combine is None:
                raise refusal(operation)
            message["fn"] = functools.partial(_on_engine, operation)


def _failed(result, site):
    """A client step's failure as the site's error (its detail for the officer's log)."""
    from ..exceptions import ClientFailure

    if isinstance(result, ClientFailure):
        return SiteError(site, f"the solver's step failed ({result.error})")
    return result


def _on_engine(operation, objective, *args):
    """A masked pass's function on a fit whose rows are partitions on an engine."""
    return objective.run(operation, args)


def served_kinds():
    """The names of the operations a fit session's masked passes may carry."""
    return sorted(name for name, op in operations().items()
                  if op.maskable and op.target == "fit")

