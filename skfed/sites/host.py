"""The site's side of the service: one request in, one release out, through the gate.

:class:`SiteHost` answers one request (bytes in, bytes out) for one authenticated
analyst. It knows nothing of the transport (:mod:`skfed.sites.transport`) and
nothing of the estimators: every operation it runs is declared beside its site
function (:mod:`skfed.federation.operations`), and the declaration is what the
host applies. Order of work for each request:

1. decode (typed, never unpickled) and find the declared operation;
2. who and what: the analyst, the operations the policy serves, ``[access]``;
3. the declared, typed arguments with their caps, and the iterations the request's
   objects ask for, before any row is read;
4. the rows (:mod:`skfed.sites.rows`: declared weights, approved row steps,
   held-out partitions, ``min_rows``) or the session the request names;
5. what the reply's class may release here (:mod:`skfed.sites.gate`): protection,
   finer sums, the policy's flags; the row sets across requests
   (:mod:`skfed.sites.rowsets`); the operation's own declared checks;
6. the site function, under the dominance audit (sums in the clear) and the
   request's deadline;
7. the reply's rules (declared), the counts' integrality, then the audit line
   (no value in it) and the encoded reply. Every error's detail goes to the
   officer's log; the analyst reads a fixed text per rule.
"""

import datetime
import json
import logging
import os
import secrets
import threading
import traceback

from ..data.site import SiteError
from ..federation import dominance
from ..federation.operations import (COUNTS, SUMS, Refused, Requester, deadline, operations,
                                     requester)
from .audit import AuditLog
from .codec import MessageError, decode, encode
from .engine import EngineRows, refusal
from .engine_objective import EngineObjective
from .fit_sessions import FitSessions
from .gate import (SiteContext, check_counts, check_flag, check_work, mentioned_columns,
                   public_message, release_rule, shown_columns)
from .masked_operations import MaskedSumOperations
from .rows import SiteRows

_LOG = logging.getLogger("skfed.site")


class _Signer:
    """The site's certificate key, to sign its releases and check other sites'."""

    def __init__(self, config):
        self.config = config

    @property
    def certificate(self):
        return self.config.cert.read_bytes()

    def sign(self, payload):
        from .guard import sign_release

        return sign_release(self.config.key.read_bytes(), payload)

    def verify(self, certificate, signature, payload, site):
        from .guard import check_site_signature

        check_site_signature(self.config.ca.read_bytes(), certificate, signature, payload,
                             site)


class OfficerLog:
    """The site officer's log: each refusal's and error's detail, one JSON line each
    (mode 0600, appended); what the analyst never reads."""

    def __init__(self, path):
        self.path, self._lock = path, threading.Lock()

    def write(self, **fields):
        line = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="milliseconds")}
        line.update(fields)
        data = (json.dumps(line, default=str, separators=(",", ":")) + "\n").encode()
        if self.path is None:
            _LOG.warning("%s", data.decode().rstrip())
            return
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT |
                         getattr(os, "O_NOFOLLOW", 0), 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


class _Request:
    """One request's state as it passes the gate."""

    def __init__(self, analyst):
        self.record = {"analyst": analyst, "operation": None, "kind": None, "dataset": None,
                       "columns": None, "rows": None, "bytes": 0, "epsilon": 0.0}
        self.read_rows = False  # once rows are read, refusals say the rule only
        self.allowed_columns = set()  # the names a refusal may show


class SiteHost(FitSessions, MaskedSumOperations):
    """Runs declared operations on this site's datasets under its policy.

    Parameters
    ----------
    config : skfed.sites.policy.SiteConfig
    """

    def __init__(self, config):
        from .ledger import PrivacyLedger

        self.config, self.policy, self.name = config, config.policy, config.name
        self.audit = AuditLog(config.audit)
        self.officer = OfficerLog(config.officer_log)
        self.ledger = PrivacyLedger(config.ledger, self.policy.epsilon_budget)
        self.rows = SiteRows(config)
        self.signer = _Signer(config)
        self.memo = {}
        self._sessions, self._sum_sessions = {}, {}
        self._kept_lock = threading.RLock()  # requests on kept rows: one at a time
        self._lock = threading.Lock()

    # -- the one entry point -------------------------------------------------
    def handle(self, analyst, request):
        """Answer one request (bytes) of ``analyst`` (its certificate identity, already
        authenticated by the transport); returns bytes."""
        state = _Request(analyst)
        record = state.record
        try:
            operation, args = self._decode(request, record)
            self._check_analyst(analyst, operation.name)
            problem = operation.problem(args)
            if problem is not None:  # the declared, typed arguments only
                raise Refused("message", problem)
            check_work(args, self.policy.max_local_iterations)
            with deadline(self.policy.max_request_seconds):
                value = self._dispatch(operation, analyst, args, state)
            reply = encode({"ok": value})
            record.update(outcome="ok", bytes=len(reply))
            return reply
        except Refused as exc:
            return self._refusal(exc, state)
        except (SiteError, MessageError) as exc:  # the rows do not fit: detail to the officer
            return self._failure(exc, state, "data")
        except Exception as exc:  # anything else: the officer reads the traceback
            return self._failure(exc, state, "internal")
        finally:
            self.audit.record(**record)

    def close(self):
        self.audit.close()
        self.rows.close()

    def _decode(self, request, record):
        try:
            message = decode(request)
        except MessageError as exc:
            raise Refused("message", f"the request is not a skfed message ({exc})") from None
        if not isinstance(message, dict) or not isinstance(message.get("op"), str):
            raise Refused("message", "the request names no operation")
        name, args = message["op"], message.get("args") or {}
        record["operation"] = record["kind"] = name[:64]
        operation = operations().get(name)
        if operation is None:
            raise Refused("operations", f"{name[:64]!r} is not a site operation")
        if not isinstance(args, dict):
            raise Refused("message", "the arguments are not named")
        return operation, args

    def _refusal(self, exc, state):
        """A refusal: a fixed text per rule once rows were read (the request's own detail
        before), the detail to the officer's log, the rule to the audit line."""
        record = state.record
        columns = shown_columns(exc.columns, state.allowed_columns)
        detail = exc.detail if exc.public or not state.read_rows else None
        message = public_message(self.name, exc.rule, record["operation"], policy=self.policy,
                                 columns=columns, detail=detail)
        self.officer.write(analyst=record["analyst"], operation=record["operation"],
                           rule=exc.rule, detail=exc.detail)
        # the audit line's reason is what the analyst read: never a value of the rows
        record.update(outcome="refused", rule=exc.rule, reason=message)
        return encode({"error": {"kind": "policy", "rule": exc.rule, "message": message}})

    def _failure(self, exc, state, rule):
        record = state.record
        detail = getattr(exc, "detail", None) or str(exc)
        columns = mentioned_columns(detail, state.allowed_columns)
        self.officer.write(analyst=record["analyst"], operation=record["operation"],
                           rule=rule, detail=f"{type(exc).__name__}: {detail}",
                           traceback=traceback.format_exc() if rule == "internal" else None)
        message = public_message(self.name, rule, record["operation"], policy=self.policy,
                                 columns=columns)
        record.update(outcome="error", rule=rule, reason=message)
        return encode({"error": {"kind": "site" if rule == "data" else "internal",
                                 "rule": rule, "message": message}})

    # -- who and what ----------------------------------------------------------
    def _check_analyst(self, analyst, op):
        allowed = self.policy.analysts
        if allowed is not None and analyst not in allowed:
            raise Refused("analysts", f"analyst {analyst!r} is not allowed at this site")
        if not self.policy.serves(op):
            raise Refused("operations", f"operation {op!r} is not served by this site")
        allowed_ops = self.policy.access.get(analyst, {}).get("operations")
        if allowed_ops is not None and op not in allowed_ops:
            raise Refused("access", f"analyst {analyst!r} may not use operation {op!r} here")

    def context(self, dataset=None, masked=False):
        """What a declared check sees of this site (:class:`~skfed.sites.gate.SiteContext`)."""
        return SiteContext(self.policy, name=self.name, dataset=dataset, masked=masked,
                           signer=self.signer, memo=self.memo)

    # -- the operations --------------------------------------------------------
    def _dispatch(self, operation, analyst, args, state):
        handler = self.service_handlers().get(operation.name)
        if handler is not None:  # the service's own sessions (fit.step, sums.*)
            return handler(self, analyst, args, state)
        if operation.target == "fit":
            session = self.fit_session(analyst, args, state)
            return self.run(operation, session.objective, args, state,
                            dataset=session.dataset, analyst=analyst)
        conf, site = self.request_rows(operation, analyst, args["dataset"], state)
        return self.run(operation, site, args, state, dataset=conf.name, conf=conf,
                        analyst=analyst)

    def request_rows(self, operation, analyst, reference, state):
        """The rows of a request's dataset reference (kept between requests for the
        operations that keep them), their row sets admitted."""
        def build():
            rules = self.context(reference.get("name") if isinstance(reference, dict)
                                 else None)
            conf, site = self.rows.rows(reference, analyst, state.record, rules)
            self.rows.admit(conf, site, design=operation.reads_design)
            return conf, site, {k: state.record[k] for k in ("dataset", "rows")}

        state.read_rows = True
        if operation.keeps_rows:
            with self._kept_lock:
                conf, site, fields = self.rows.kept(analyst, reference, build)
        else:
            conf, site, fields = build()
        state.record.update(fields)
        state.allowed_columns |= set(site.meta.get("raw_columns", ()))
        return conf, site

    def run(self, operation, target, args, state, *, dataset, conf=None, analyst=None,
            masked=False):
        """One declared operation on its target under the gate: its class's rules, its
        checks, the function under the dominance audit, its reply's rules."""
        state.read_rows = True
        rules = self.context(dataset, masked=masked)
        release = operation.release_class(target, args)
        if not masked:
            release_rule(operation, release, self.policy)
        else:  # a masked sum does not lift a flag
            check_flag(operation, self.policy)
        values = dict(zip([a.name for a in operation.arguments],
                          operation.call_arguments(args, self.policy)))
        # what a function keeps between requests (a boosting fit's state) is this analyst's
        who = Requester(analyst or "", fit_state_mb=self.policy.fit_state_mb,
                        analyst_state_mb=self.policy.analyst_state_mb)
        with requester(who):
            return self._checked_call(operation, target, values, rules, release, state,
                                      masked=masked, dataset=dataset, analyst=analyst)

    def _checked_call(self, operation, target, values, rules, release, state, *, masked,
                      dataset, analyst):
        if isinstance(target, (EngineRows, EngineObjective)) and operation.combine is None \
                and operation.opens is None:  # before its checks: they read rows
            raise refusal(operation)
        for check in operation.checks:
            check(target, values, rules)
        state.record["columns"] = _columns_read(operation, target, values,
                                                state.record.get("columns") or ())
        # single rows' values by design (a flag), or finer sums the policy allows by name:
        # the rules of the declaration, not the dominance rule
        exact = operation.requires is not None or rules.exact is not None or \
            operation.finer is not None
        out = self._call(operation, target, values, release, masked or exact)
        if operation.reply is not None:
            out = operation.reply(target, values, out, rules)
        if release == COUNTS:
            check_counts(operation, out)
        if operation.opens is not None:
            return self.open_session(operation, analyst, dataset, target, out, state)
        return out

    def _call(self, operation, target, values, release, masked):
        args = [values[a.name] for a in operation.arguments]
        if release != SUMS or masked:
            with dominance.suspended():
                return _invoke(operation, target, args)
        with dominance.audit(self.policy.min_rows, self.policy.dominance) as audit:
            out = _invoke(operation, target, args)
        if audit.checks == 0:  # a sum no dominance check saw: not released
            raise Refused("dominance", f"{operation.name}: no audit saw its sums")
        return out

    def open_session(self, operation, analyst, dataset, target, kept, state):
        """An operation that builds an object the site keeps: a handle leaves."""
        handle = secrets.token_hex(16)
        with self._lock:
            self._sessions[handle] = _Session(analyst, dataset, state.record["columns"],
                                              kept, state.record["rows"])
        return handle


def _invoke(operation, target, args):
    """The site function on its target; on an engine, mapped over its partitions."""
    if isinstance(target, (EngineRows, EngineObjective)):
        return target.run(operation, args)
    return operation.function(target, *args)


class _Session:
    """One fit at this site: its client objective and solver states, one owner."""

    def __init__(self, owner, dataset, columns, objective, n_rows):
        self.owner, self.dataset, self.objective, self.n_rows = owner, dataset, objective, n_rows
        self.columns = columns
        self.states = {}
        self.lock = threading.Lock()
        self.guard = self.private = None  # secure aggregation and DP checks, when used
        self.solver = None  # (digest, solver) of the last solver received


def _columns_read(operation, target, values, session_columns=()):
    """The raw columns a request read: those its rows were read from (a fit session's:
    those its rows were opened with), and those its arguments name (a fit's features:
    every column of its rows)."""
    meta = getattr(target, "meta", None) or {}
    read = set(meta.get("read", ())) | set(session_columns)
    named = [v for a in operation.arguments if a.kind in ("name", "names")
             for v in ([values[a.name]] if isinstance(values[a.name], str)
                       else values[a.name] or [])]
    read |= set(named)
    raw = meta.get("raw_columns")
    if not named and raw is not None and hasattr(getattr(target, "X", None), "columns"):
        read |= {c for c in target.X.columns if c in raw}
    return sorted(read)[:256]
