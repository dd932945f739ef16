"""The site's side of the service: its datasets, fit sessions, policy and audit log.

:class:`SiteHost` answers one request (bytes in, bytes out) for one
authenticated analyst. It knows nothing of the transport
(:mod:`skfed.sites.transport` gives it gRPC over mutual TLS), so a later
outbound mode (the site dialling a coordinator) reuses it unchanged.

A request is ``{"op": name, "args": {...}}`` (:mod:`skfed.sites.codec`);
the reply is ``{"ok": value}`` or ``{"error": {"kind", "message", "rule"}}``.
Order of work for each request: decode (typed, never unpickled), check the
policy, run the operation, check the reply against the disclosure rules,
write the audit line, encode.
"""

import collections
import logging
import secrets
import threading
import time

import numpy as np

from ..data.site import SiteError
from ..data.sources import describe, split_table, read_table
from ..solvers.base import message_nbytes
from .audit import AuditLog
from .codec import MessageError, decode, encode
from .data_operations import DataOperations, _transformer
from .ensemble_operations import EnsembleOperations
from .masked_operations import MaskedSumOperations
from .operations import OPERATIONS, handlers, serves
from .policy import PolicyError, Refused


_LOG = logging.getLogger("skfed.site")


class _Session:
    """One fit at this site: its client objective and solver states, one owner."""

    def __init__(self, owner, dataset, columns, objective, n_rows):
        self.owner, self.dataset, self.objective, self.n_rows = owner, dataset, objective, n_rows
        self.columns = columns
        self.states = {}
        self.lock = threading.Lock()
        self.guard = self.private = None  # secure aggregation and DP checks, when used
        self.solver = None  # (digest, solver) of the last solver received


class SiteHost(DataOperations, EnsembleOperations, MaskedSumOperations):
    """Runs named operations on this site's declared datasets under its policy.

    Parameters
    ----------
    config : skfed.sites.policy.SiteConfig
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._handlers = handlers(cls)

    def __init__(self, config):
        self.config = config
        self.policy = config.policy
        self.name = config.name
        self.audit = AuditLog(config.audit)
        from .ledger import PrivacyLedger

        self.ledger = PrivacyLedger(config.ledger, self.policy.epsilon_budget)
        self._tables = {}
        self._partition_cache = {}
        self._sessions = {}
        self._sum_sessions = {}  # an analysis's masked sums (MaskedSumOperations)
        self._checked_sketches = set()  # digests of verified boosting sketches
        # a boosting fit's rows, kept between its requests (EnsembleOperations)
        self._kept_rows_by_key = collections.OrderedDict()
        self._boosting_lock = threading.RLock()
        self._lock = threading.Lock()

    # -- the one entry point -------------------------------------------------
    def handle(self, analyst, request):
        """Answer one request (bytes) of the analyst ``analyst`` (its certificate
        identity, already authenticated by the transport); returns bytes."""
        record = {"analyst": analyst, "operation": None, "dataset": None, "columns": None,
                  "rows": None, "bytes": 0, "epsilon": 0.0}
        try:
            try:
                message = decode(request)
            except MessageError as exc:
                raise Refused("message", f"the request is not a skfed message ({exc})")
            if not isinstance(message, dict) or not isinstance(message.get("op"), str):
                raise Refused("message", "the request names no operation")
            op, args = message["op"], message.get("args") or {}
            record["operation"] = op[:64]
            if op not in OPERATIONS:
                raise Refused("operations", f"{op[:64]!r} is not a site operation")
            self._check_analyst(analyst, op)
            operation = OPERATIONS[op]
            problem = operation.check(args) if isinstance(args, dict) else "arguments"
            if problem is not None:  # the declared, typed arguments only
                raise Refused("message", problem)
            self._check_protection(operation, args)
            check_work(args, self.policy.max_local_iterations)
            started = time.monotonic()
            value = self._handlers[op](self, analyst, args, record)
            seconds = time.monotonic() - started
            if seconds > self.policy.max_request_seconds:  # its answer is not released
                raise Refused("max_request_seconds", f"the request ran {seconds:.0f} s, past "
                               f"this site's {self.policy.max_request_seconds:g} s")
            reply = encode({"ok": value})
            record.update(outcome="ok", bytes=len(reply))
            return reply
        except Refused as exc:
            error = PolicyError(self.name, exc.rule, exc.detail)
            record.update(outcome="refused", rule=exc.rule, reason=exc.detail)
            return encode({"error": {"kind": "policy", "rule": exc.rule, "message": str(error)}})
        except SiteError as exc:  # skfed's own checks: they name columns, never values
            record.update(outcome="error", reason=exc.detail)
            return encode({"error": {"kind": "site", "message": exc.detail}})
        except Exception as exc:  # anything else: the type only (a message could quote data)
            record.update(outcome="error", reason=type(exc).__name__)
            # the traceback for the site's administrator, on the service's own log
            _LOG.exception("operation %r failed", record["operation"])
            return encode({"error": {"kind": "internal", "message": (
                f"operation {record['operation']!r} failed at the site ({type(exc).__name__}); "
                "the site's administrator can see the request in its audit log")}})
        finally:
            self.audit.record(**record)

    def close(self):
        self.audit.close()

    # -- policy --------------------------------------------------------------
    def _check_analyst(self, analyst, op):
        allowed = self.policy.analysts
        if allowed is not None and analyst not in allowed:
            raise Refused("analysts", f"analyst {analyst!r} is not allowed at this site")
        if op not in self.policy.operations:
            raise Refused("operations", f"operation {op!r} is not served by this site")
        allowed_ops = self.policy.access.get(analyst, {}).get("operations")
        if allowed_ops is not None and op not in allowed_ops:
            raise Refused("access", f"analyst {analyst!r} may not use operation {op!r} here")

    def _check_protection(self, operation, args):
        """Where the policy requires protection, no number computed from this site's rows
        alone leaves it: an operation whose reply would be one is refused, whatever the
        message says; a fit's masked steps are the guard's (:meth:`_guard`)."""
        required = self.policy.require
        if required and operation.discloses(args) == "rows":
            needs = " and ".join(r.replace("_", " ") for r in required)
            raise Refused("require", f"this site requires {needs}: "
                                      f"{operation.name} would release numbers computed from "
                                      "this site's rows alone (only masked sums of a protected "
                                      "fit leave it)")

    def _rows(self, args, record, what):
        """The request's rows (its dataset reference) and their count with positive
        weight, checked against ``min_rows`` and recorded for the audit line."""
        site = self._site_data(args.get("dataset"), record)
        n = _positive_rows(site)
        record["rows"] = n
        self._check_rows(n, what)
        return site, n

    def _check_rows(self, n_rows, what):
        if n_rows < self.policy.min_rows:
            raise Refused("min_rows", f"{what} would be computed from fewer than "
                                       f"{self.policy.min_rows} rows")

    # -- datasets ------------------------------------------------------------
    def _site_data(self, ref, record):
        """The rows of a dataset reference ``{"name", "target", "drop", "sample_weight"}``,
        restricted to the columns the site allows."""
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            raise Refused("datasets", "the request names no dataset")
        name = ref["name"]
        record["dataset"] = name[:64]
        conf = self.config.datasets.get(name)
        if conf is None:
            raise Refused("datasets", f"no dataset {name[:64]!r} is served here")
        allowed = self.policy.access.get(record["analyst"], {}).get("datasets")
        if allowed is not None and name not in allowed:
            raise Refused("access", f"analyst {record['analyst']!r} may not use dataset "
                                     f"{name!r} here")
        table = self._table(conf)
        target, weight = ref.get("target"), ref.get("sample_weight")
        offset = ref.get("offset")
        drop = [c for c in ref.get("drop") or () if isinstance(c, str)]
        targets = list(target) if isinstance(target, (list, tuple)) else [target]
        for role, col in [*(("target", t) for t in targets), ("sample-weight", weight),
                          ("offset", offset)]:
            if col is not None and (not isinstance(col, str) or col not in table.columns):
                raise Refused("columns", f"no usable {role} column {str(col)[:64]!r} in "
                                          f"dataset {name!r}")
        drop = [c for c in drop if c in table.columns]
        site = split_table(self.name, table, target=target, sample_weight=weight, drop=drop,
                           offset=offset)
        # every row keeps its number in the table and its partition (held-out parts are
        # whole partitions, drawn from the site's secret: no analyst picks the rows)
        site.meta.update(row_ids=np.arange(len(table)), partitions=self._partitions(conf))
        for step in ref.get("steps") or ():  # declared row steps, in order (skfed's own code)
            site = self._step(site, step)
        holdout = ref.get("holdout")
        if holdout is not None:  # training or held-out rows, whole partitions of the site's
            from ..data.site import holdout_rows

            try:
                test_size, seed = float(holdout["test_size"]), int(holdout["seed"])
                part = holdout["part"]
            except (KeyError, TypeError, ValueError):
                raise Refused("message", "a malformed holdout") from None
            if part not in ("train", "test") or not 0 < test_size < 1:
                raise Refused("message", "a malformed holdout")
            site = holdout_rows(site, test_size, seed, part == "test")
        record["columns"] = list(site.columns() or ()) + [t for t in targets if t is not None]
        return site

    def _step(self, site, step):
        from ..formula._design import check_design, complete_rows, design_rows
        from ..formula._errors import DesignError
        from ..preprocessing._summaries import _transform_site
        from .operations import registry

        fn, args = (step.get("fn"), step.get("args") or []) if isinstance(step, dict) else (
            None, None)
        if fn not in registry()[1] or not isinstance(args, list):
            raise Refused("message", "a row step that is not one of skfed's declared steps")
        if fn in (complete_rows, design_rows):  # a formula's design: data, checked here
            if len(args) != 1:
                raise Refused("message", "a formula's row step takes its design only")
            try:
                check_design(args[0])
            except DesignError as exc:
                raise Refused("message", f"a malformed design: {str(exc)[:200]}") from None
        if fn is _transform_site:  # only a fitted transformer's transform
            _transformer({"estimator": args[0] if args else None, "validate": None},
                         check_validate=False)
            if args[1:] != ["transform"]:
                raise Refused("message", "a transformer step runs transform only")
        kept = fn(site, *args)
        # a step that leaves rows out (a filter, a held-out part) leaves none or at least
        # min_rows: else the difference of two answers would be a sum over a few rows
        left_out = site.n_samples - kept.n_samples
        if 0 < left_out < self.policy.min_rows or 0 < kept.n_samples < self.policy.min_rows:
            raise Refused("min_rows", "a row step would leave out, or keep, fewer than "
                                       f"{self.policy.min_rows} rows (a part of the rows and "
                                       "its rest must each hold at least min_rows)")
        return kept

    def _partitions(self, conf):
        """The dataset's fixed partitions, from the site's secret for it (kept in the
        site's folder, readable by the service's account only; made on first use)."""
        from ..data.site import SitePartitions

        with self._lock:
            if conf.name not in self._partition_cache:
                folder = self.config.data_dir or self.config.ledger.parent
                secret = _partition_secret(folder / "partition-secrets.json", conf.name)
                self._partition_cache[conf.name] = SitePartitions.draw(
                    secret, len(self._tables[conf.name]), self.policy.min_rows)
            return self._partition_cache[conf.name]

    def _table(self, conf):
        with self._lock:
            if conf.name not in self._tables:
                try:
                    table = read_table(self.name, conf.path)
                except SiteError:  # its message holds a local path: not for the analyst
                    raise SiteError(self.name, f"dataset {conf.name!r} could not be read "
                                               "(see the site's own log)") from None
                table = table.rename(columns=str)
                if conf.columns is not None:  # the site's allow-list of columns
                    table = table[[c for c in table.columns if c in conf.columns]]
                self._tables[conf.name] = table
            return self._tables[conf.name]

    # -- sessions ------------------------------------------------------------
    def _session(self, analyst, args):
        handle = args.get("session")
        session = self._sessions.get(handle) if isinstance(handle, str) else None
        if session is None or session.owner != analyst:  # another's session looks absent
            raise Refused("sessions", "no such fit session for this analyst")
        return session

    # -- the operations ------------------------------------------------------
    @serves("dataset.describe")
    def _op_dataset_describe(self, analyst, args, record):
        site, _ = self._rows(args, record, "the dataset's description")
        return describe(site)

    @serves("data.summary")
    def _op_data_summary(self, analyst, args, record):
        from ..data.site import site_summary

        site, n = self._rows(args, record, "the summary")
        task = args.get("task")
        if task not in ("none", "regression", "classification", "survival"):
            raise Refused("message", "unknown task")
        summary = site_summary(site, task)
        counts = summary.get("class_counts")
        if counts is not None and np.min(counts) < self.policy.min_level_count:
            raise Refused("min_level_count", "a class of the target has fewer than "
                                              f"{self.policy.min_level_count} rows here")
        return summary

    @serves("fit.open")
    def _op_fit_open(self, analyst, args, record):
        from ..data.site import client_objective

        site, n = self._rows(args, record, "a fit")
        datafit, layout, targets = args.get("datafit"), args.get("layout"), args.get("targets")
        from ..datafits import Datafit

        if not isinstance(datafit, Datafit):
            raise Refused("message", "fit.open needs one of skfed's losses")
        if self.policy.losses is not None and type(datafit).__name__ not in self.policy.losses:
            raise Refused("losses", f"models with the {type(datafit).__name__} loss are not "
                                     "allowed at this site")
        size = int(getattr(layout, "size", 0))
        if size > self.policy.max_parameters_per_row * n:
            raise Refused("max_parameters_per_row", f"a model of {size} parameters on "
                           f"{n} rows exceeds {self.policy.max_parameters_per_row} parameters "
                           "per row (its second moments would reveal rows)")
        objective = client_objective(site, datafit, layout, targets)
        handle = secrets.token_hex(16)
        with self._lock:
            self._sessions[handle] = _Session(analyst, args["dataset"]["name"],
                                              record["columns"], objective, n)
        return handle

    def _on_session(self, analyst, args, record):
        session = self._session(analyst, args)
        record.update(dataset=session.dataset, rows=session.n_rows, columns=session.columns)
        return session

    @serves("fit.client_summary")
    def _op_fit_client_summary(self, analyst, args, record):
        from ..federation.rounds import client_summary

        session = self._on_session(analyst, args, record)
        return client_summary(session.objective, args.get("exact"))

    @serves("fit.monitor")
    def _op_fit_monitor(self, analyst, args, record):
        from ..federation.rounds import client_monitor

        session = self._on_session(analyst, args, record)
        return client_monitor(session.objective, _vector(args.get("theta"), session))

    @serves("fit.curvature")
    def _op_fit_curvature(self, analyst, args, record):
        from ..federation.smoothness import client_curvature_matvec

        session = self._on_session(analyst, args, record)
        return client_curvature_matvec(session.objective,
                                       _vector(args.get("vector"), session, features=True))

    @serves("fit.feature_mean")
    def _op_fit_feature_mean(self, analyst, args, record):
        from ..federation.smoothness import client_feature_mean

        return client_feature_mean(self._on_session(analyst, args, record).objective)

    @serves("fit.step")
    def _op_fit_step(self, analyst, args, record):
        from ..executors.base import client_round
        from ..exceptions import ClientFailure
        from ..solvers.base import FederatedSolver
        from ..solvers.risk_sets import RiskSetNewton

        session = self._on_session(analyst, args, record)
        solver = self._solver(session, args)
        if not isinstance(solver, FederatedSolver):
            raise Refused("message", "fit.step needs one of skfed's solvers")
        inner = self._check_solver(solver)
        if isinstance(inner, RiskSetNewton):  # a shared Cox baseline: the rounds carry
            # risk-set sums
            self._check_risk_sets(session.objective.Y, inner.grid)
        client, seed = int(args.get("client", 0)), int(args.get("seed", 0))
        message = args.get("message")
        with session.lock:  # the state of one client advances one round at a time
            if "state" in args:  # the first round: the initial state the server built
                session.states[client] = args["state"]
            state = session.states.get(client)
            message = self._guard(session, solver, message, state, analyst, record)
            result = client_round(session.objective, solver, state, message, seed)
            if isinstance(result, ClientFailure):
                raise SiteError(self.name, f"the solver's step failed ({result.error})")
            reply, session.states[client] = result
            if _masked(solver) and message.get("kind") == "keys":
                reply = session.guard.sign_key(message, reply, session.objective.weight_sum)
        record["bytes_algorithm"] = message_nbytes(reply) if isinstance(reply, dict) else 0
        return reply

    def _solver(self, session, args):
        """The step's solver: sent (encoded) when it changed, else named by its digest."""
        import hashlib

        blob, digest = args.get("solver"), args.get("solver_digest")
        if isinstance(blob, np.ndarray) and blob.dtype == np.uint8:
            if hashlib.sha256(blob).hexdigest() != digest:
                raise Refused("message", "the solver does not match its digest")
            try:
                solver = decode(blob.tobytes())
                check_work(solver, self.policy.max_local_iterations)  # the gate's bound too
                session.solver = (digest, solver)
            except MessageError as exc:
                raise Refused("message", f"the solver is not a skfed message ({exc})")
        if session.solver is None or session.solver[0] != digest:
            raise Refused("message", "a step names a solver this session has not received")
        return session.solver[1]

    def _guard(self, session, solver, message, state, analyst, record):
        """The site's checks of a masked (or noisy) step; returns the message to run."""
        if not _masked(solver):
            return message
        from .guard import PrivateRounds, SecureAggregationGuard

        if not isinstance(message, dict):
            raise Refused("message", "a masked step needs a message")
        if session.guard is None:
            config = self.config
            session.guard = SecureAggregationGuard(
                self.name, config.cert.read_bytes(), config.key.read_bytes(),
                config.ca.read_bytes(), self.policy.min_sites)
        kind = message.get("kind")
        if kind == "key-list":
            session.guard.verify_key_list(message, state["party"].public_key())
        elif kind in ("round", "remask", "monitor"):
            from numbers import Real

            # noise unless the multiplier is zero (then an honest model may come again)
            sigma = solver.noise_multiplier_ if _private(solver) else None
            noisy = _private(solver) and not (isinstance(sigma, Real) and sigma <= 0)
            parties = session.guard.check_round(message, _private(solver), noisy=noisy)
            if _private(solver) and kind == "round":
                if session.private is None:
                    session.private = PrivateRounds()

                def charge(epsilon, delta, rounds):
                    ok = self.ledger.charge(session.dataset, epsilon, delta,
                                            analyst=analyst, rounds=rounds)
                    if ok:
                        record["epsilon"] = float(epsilon)
                    return ok

                message = session.private.prepare(solver, message, parties,
                                                  policy=self.policy, charge=charge)
        elif kind == "sums":  # an inference pass, masked
            session.guard.check_sums(message)
            from ..solvers.risk_sets import client_risk_set_sums

            if message.get("fn") is client_risk_set_sums:  # the same rule as unmasked
                self._check_risk_sets(session.objective.Y, message["args"][1])
        elif kind != "keys":
            raise Refused("message", f"unknown masked step {str(kind)[:32]!r}")
        return message

    def _check_solver(self, solver):
        """The policy's solver rules, decided from what the step's solver *is* (its class,
        checked here), never from attributes a message says it carries: the allow-list
        reads the solver inside a real privacy wrapper, and a step is masked or noised
        only when its class masks or noises it (:func:`_masked`, :func:`_private`).
        Returns the solver that runs the rounds (the one inside a privacy wrapper)."""
        from ..solvers.base import FederatedSolver

        inner = solver.solver if _masked(solver) else solver
        if not isinstance(inner, FederatedSolver) or _masked(inner):
            # honest wrappers hold one plain solver; another wrapper would hide its name
            raise Refused("message", "a privacy wrapper must hold one of skfed's solvers")
        allowed = self.policy.solvers
        if allowed is not None and inner.name not in allowed:
            raise Refused("solvers", f"solver {inner.name!r} is not allowed at this site")
        if "secure_aggregation" in self.policy.require and not _masked(solver):
            raise Refused("require", "this site requires secure aggregation and the step "
                                      "is not masked")
        if "differential_privacy" in self.policy.require and not _private(solver):
            raise Refused("require", "this site requires differential privacy and the "
                                      "step adds no noise")
        return inner

    @serves("fit.close")
    def _op_fit_close(self, analyst, args, record):
        session = self._on_session(analyst, args, record)
        with self._lock:
            self._sessions.pop(args["session"], None)
        session.states.clear()
        return True

SiteHost._handlers = handlers(SiteHost)


def _masked(solver):
    """Whether the site masks this step: its class is skfed's secure-aggregation wrapper."""
    from ..privacy.secure_rounds import SecureAggregationSolver

    return isinstance(solver, SecureAggregationSolver)


def _private(solver):
    """Whether the site clips and noises this step: its class is skfed's
    differential-privacy wrapper (a masked solver too), whatever a message claims."""
    from ..privacy.dp_rounds import DifferentiallyPrivateSolver

    return isinstance(solver, DifferentiallyPrivateSolver)


def _positive_rows(site):
    return int(np.count_nonzero(site.weights() > 0))


def _vector(value, session, features=False):
    """A broadcast vector checked: floats, of the model's size (or the features')."""
    size = session.objective.X.shape[1] if features else session.objective.layout.size
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.shape != (size,):
        raise Refused("message", f"expected a float vector of {size} parameters")
    return value


def _partition_secret(path, dataset):
    """The site's secret for ``dataset``'s partitions (32 random bytes), persisted in
    ``path`` (JSON, mode 0600) so that partitions stay the same across restarts: a new
    draw would let two answers differ by a few rows."""
    import json
    import os

    secrets_by_dataset = json.loads(path.read_text()) if path.exists() else {}
    if dataset not in secrets_by_dataset:
        secrets_by_dataset[dataset] = secrets.token_hex(32)
        temporary = path.with_name(path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(secrets_by_dataset, out)
        os.replace(temporary, path)
    return bytes.fromhex(secrets_by_dataset[dataset])


#: the parameters of skfed's estimators and solvers that set how much work a request
#: asks of the site (rounds of a local fit, local steps, inner iterations)
WORK_PARAMETERS = ("max_rounds", "max_iter", "local_steps", "local_epochs", "max_local_iter",
                   "max_subproblem_iter")


def check_work(value, most, _seen=None):
    """Refuse a request whose objects ask for more than ``most`` iterations of any loop
    (the policy's ``max_local_iterations``): analyst-chosen work is bounded."""
    seen = set() if _seen is None else _seen
    if id(value) in seen or isinstance(value, (str, bytes, np.ndarray, int, float)):
        return
    seen.add(id(value))
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, (list, tuple)):
        children = list(value)
    elif type(value).__module__.startswith(("skfed.", "sklearn.")):
        for name in WORK_PARAMETERS:
            count = getattr(value, name, None)
            if isinstance(count, (int, float, np.number)) and not isinstance(count, bool) \
                    and count > most:
                raise Refused("max_local_iterations", f"{type(value).__name__}({name}="
                               f"{count:g}) asks for more than this site's {most} iterations")
        children = list(vars(value).values()) if hasattr(value, "__dict__") else []
    else:
        return
    for child in children:
        check_work(child, most, seen)
