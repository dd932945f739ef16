"""Site operations, declared beside their functions: the registry is the operation table.

A *site function* runs on one site's rows (in this process, on the site's Dask
worker, or at a site service) and returns what leaves the site. Each is declared
where it is written, with :func:`site_operation`::

    @site_operation("stats.crosstab", releases=COUNTS,
                    describes="the count of every pair of levels ...",
                    arguments=(Arg("row", "name"), Arg("col", "name"),
                               Arg("min_count", "int", low=1, floor="min_level_count")))
    def site_crosstab(site, row, col, min_count=1):
        ...

The declaration is everything a site service needs to run the function for an
analyst it does not trust: its name on the wire, its typed arguments with a cap on
every variable-size input (checked before any row is read), what its reply
releases (:data:`RELEASES`), the checks that decide whether it may run on these
rows under this site's rules, and what the reply must satisfy before it leaves.
The analyst's side finds the operation by the function it would have called
(:func:`operation_for`), so the three homes of the rows run the same code.

A *row step* (:func:`row_step`) turns a site's rows into other rows before an
operation (a held-out part, complete cases, a formula's design); a site applies
only declared steps, with their typed arguments.

This module is the lowest layer of the site machinery: it imports nothing of
skfed's, so every package can declare its own site functions here, and the site
service (:mod:`skfed.sites`) imports no estimator.
"""

import contextvars
import time
import types
from dataclasses import dataclass

import numpy as np

#: what a reply may release, by class (the site's gate applies each class's rules):
#:
#: - ``nothing``: nothing row-derived (a handle, a check that passed, a zero-row schema);
#: - ``metadata``: the dataset's declared shape (column names and kinds), and row counts;
#: - ``counts``: integer counts of rows (row, level, missing-value and event counts),
#:   each under ``min_rows`` / ``min_level_count`` as the operation declares;
#: - ``sums``: sums over rows (moments, Grams, gradients, scores), each coordinate
#:   passing the dominance rule; refused where the site requires protection;
#: - ``masked``: a share the site masks (and noises under differential privacy) itself:
#:   a protected fit's step, or a maskable operation's reply inside a session of masked
#:   sums.
NOTHING, METADATA, COUNTS, SUMS, MASKED = "nothing", "metadata", "counts", "sums", "masked"
RELEASES = (NOTHING, METADATA, COUNTS, SUMS, MASKED)

#: what an operation runs on: a dataset reference's rows, a fit session's objective
#: (built at the site by an operation that ``opens`` it), or a session of masked sums
TARGETS = ("rows", "fit", "sums")
#: the request's key that names each target
TARGET_KEYS = {"rows": "dataset", "fit": "session", "sums": "session"}

#: the largest variable-size input any declaration may allow (entries)
MAX_VECTOR = 1 << 24
#: the longest name (a column, a level) an argument may hold
MAX_NAME = 256


class Refused(Exception):
    """A request a site's rules refuse; ``rule`` names the rule.

    Raised by the gate and by an operation's declared checks. Once a request's rows
    are read, what reaches the analyst is the rule's fixed text
    (:mod:`skfed.sites.gate`), and ``detail`` goes to the site's own log only, unless
    ``public``: a detail derived from the request alone (a protocol message's
    coefficient, a solver's name), never from rows. ``columns`` are names the refusal
    may show (each one the request named or the dataset declares).
    """

    def __init__(self, rule, detail="", *, columns=(), public=False):
        super().__init__(detail or rule)
        self.rule, self.detail = rule, detail or rule
        self.columns = tuple(str(c) for c in columns)
        self.public = bool(public)


# --- typed arguments -----------------------------------------------------------------
#: the kinds of argument a declaration may use, and whether each is variable-size (then
#: its declaration must cap it with ``most``)
ARG_KINDS = {"float": False, "int": False, "bool": False, "choice": False, "name": False,
             "names": True, "str": True, "floats": True, "ints": True, "array": True,
             "bytes": True, "object": False, "value": False}


def _is_number(value, integer):
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        return False
    return bool(np.isfinite(value)) and (not integer or float(value).is_integer())


@dataclass(frozen=True)
class Arg:
    """One typed argument of a site operation or row step, checked before any row is read.

    Parameters
    ----------
    name : str
    kind : str
        ``"float"``, ``"int"`` (finite, in ``[low, high]``), ``"bool"``, ``"choice"`` (one
        of ``choices``), ``"name"`` (a column or level name), ``"names"`` (a list of
        names), ``"str"``, ``"floats"`` / ``"ints"`` (1-D arrays), ``"array"`` (a numeric
        array of any shape), ``"bytes"`` (uint8), ``"object"`` (an allow-listed object of
        ``role``, :mod:`skfed.federation.wire`) or ``"value"`` (any decoded value that
        ``check`` accepts).
    most : int, optional
        The cap of a variable-size kind (entries, or characters): required for them.
    check : callable, optional
        ``check(value) -> None or problem``: the form of a ``"value"`` or ``"object"``
        (and its caps), beyond the kind.
    convert : callable, optional
        What the site function takes, from the checked value (``convert(value)``).
    floor : str, optional
        A policy key: the site raises the value to at least its own (a smallest count).
    finite : bool
        A ``"floats"`` vector's values are finite (else any float, NaN included).
    nullable : bool
        ``None`` is accepted.
    optional : bool
        May be left out (then ``default``).
    """

    name: str
    kind: str
    low: float = None
    high: float = None
    choices: tuple = ()
    most: int = None
    role: str = None
    check: object = None
    convert: object = None
    floor: str = None
    finite: bool = True
    nullable: bool = False
    optional: bool = False
    default: object = None

    def __post_init__(self):
        if self.kind not in ARG_KINDS:
            raise ValueError(f"argument {self.name!r}: unknown kind {self.kind!r}.")
        if ARG_KINDS[self.kind] and not (isinstance(self.most, int) and
                                         0 < self.most <= MAX_VECTOR):
            raise ValueError(f"argument {self.name!r} of kind {self.kind!r} needs a cap "
                             f"(most=, at most {MAX_VECTOR}).")
        if self.kind in ("value", "object") and self.check is None and self.role is None:
            raise ValueError(f"argument {self.name!r} of kind {self.kind!r} needs a check "
                             "of its form (or a role).")

    def problem(self, value):
        """``None`` if ``value`` fits the declaration, else what is wrong (a text derived
        from the request only, never from rows)."""
        if value is None and (self.nullable or self.kind == "value" and self.check is None):
            return None
        ok = self._fits(value)
        if ok and self.check is not None:
            try:
                found = self.check(value)
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                found = f"{type(exc).__name__}: {str(exc)[:160]}"
            if found:
                return f"argument {self.name!r}: {str(found)[:200]}"
        return None if ok else f"argument {self.name!r} is not a valid {self.kind}" + (
            f" of at most {self.most} entries" if self.most else "")

    def _fits(self, value):
        kind = self.kind
        if kind in ("float", "int"):
            return _is_number(value, kind == "int") and (
                self.low is None or value >= self.low) and (self.high is None or
                                                            value <= self.high)
        if kind == "bool":
            return isinstance(value, (bool, np.bool_))
        if kind == "choice":
            return any(value is c or (type(value) is type(c) and value == c)
                       for c in self.choices)
        if kind == "name":
            return isinstance(value, str) and 0 < len(value) <= MAX_NAME
        if kind == "str":
            return isinstance(value, str) and len(value) <= self.most
        if kind == "names":
            if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "UO":
                value = value.tolist()
            return isinstance(value, (list, tuple)) and len(value) <= self.most and all(
                isinstance(v, str) and 0 < len(v) <= MAX_NAME for v in value)
        if kind in ("floats", "ints"):
            if isinstance(value, (list, tuple)) and len(value) <= self.most:
                value = np.asarray(value) if all(
                    isinstance(v, (int, float, np.integer, np.floating))
                    and not isinstance(v, (bool, np.bool_)) for v in value) else None
            want = "iuf" if kind == "floats" else "iu"
            if not (isinstance(value, np.ndarray) and value.ndim == 1 and
                    value.size <= self.most and value.dtype.kind in want):
                return False
            return kind == "ints" or not self.finite or bool(np.all(np.isfinite(value)))
        if kind == "array":
            return (isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and
                    value.size <= self.most and bool(np.all(np.isfinite(value))))
        if kind == "bytes":
            return isinstance(value, np.ndarray) and value.dtype == np.uint8 and \
                value.ndim == 1 and value.size <= self.most
        if kind == "object":
            from .wire import role_of

            return self.role is None or role_of(value) == self.role
        return True  # "value": its check decides


# --- the declarations ------------------------------------------------------------------
@dataclass(frozen=True)
class Operation:
    """A declared site operation (see the module docstring).

    Attributes
    ----------
    name : str
        Its name on the wire (``"stats.describe"``).
    function : callable or None
        The site function: ``function(target, *arguments)``; ``None`` for the site
        service's own session operations (``fit.close``, ``sums.*``).
    releases : str or callable
        The class of its reply (:data:`RELEASES`), or ``releases(target, args) ->
        class`` where the rows (a declared weight column) or the arguments decide it.
    describes : str
        What the reply holds, for the data officer's table.
    arguments : tuple of Arg
        Its own arguments, in the function's positional order after the target.
    target : str
        ``"rows"`` (a dataset reference's rows), ``"fit"`` (a fit session's client
        objective) or ``"sums"`` (a session of masked sums).
    checks : tuple of callable
        ``check(target, args, rules)`` before the function runs (they raise
        :class:`Refused`); ``rules`` is the site's policy.
    reply : callable or None
        ``reply(target, args, value, rules) -> value``: what the reply must satisfy
        before it leaves (it may blank what the rules do not release).
    requires : str or None
        A policy flag that must be true for it to run (``"allow_exact_quantiles"``),
        and why, as ``"flag: reason"``.
    finer : str or None
        For a reply finer than the dominance rule admits by design (boosting's node
        histograms, per-time sums at event times): what it reveals. The site's policy
        must allow the operation by name (``finer_sums``) for it to run in the clear;
        inside a masked sum the consortium rule applies instead.
    maskable : bool
        Its reply is a dict of sums that a masked sum may carry (within a session of
        verified keys).
    opens : str or None
        It builds an object the site keeps (a fit session's objective): the reply is
        a handle, the object stays.
    reads_design : bool
        Its reply holds sums per feature column: each column's support (its rows with
        a non-zero value) is a row set the site records.
    packer : callable or None
        The analyst's packing of the site function's positional arguments into named
        ones, where it is not one name per position.
    counts : callable or None
        For a reply of counts that also holds the values its description names (event
        times, level names): ``counts(reply)`` gives the parts that must be integer
        counts; ``None``: every number of the reply.
    keeps_rows : bool
        A site service keeps the request's rows (with the function's cache) between the
        requests of one analyst on one dataset reference, and runs such requests one at
        a time (a boosting fit's many requests on the same rows).
    default : bool
        Served unless the policy lists fewer operations.
    combine : str, callable or None
        How the replies of parts of the rows combine into the reply on all of them, for
        a site whose dataset is partitioned on an engine (:mod:`skfed.sites.engine`):
        ``"sum"`` (dicts, tuples, arrays and numbers of sums and counts, added),
        ``combine(replies) -> reply``, or ``"objective"`` (a fit operation that only calls
        its client objective's evaluations, each of them a sum over the partitions);
        ``None``: the operation needs all the rows at once (a sort, a shuffle) and an
        engine refuses it.
    """

    name: str
    function: object
    releases: object
    describes: str
    arguments: tuple = ()
    target: str = "rows"
    checks: tuple = ()
    reply: object = None
    requires: str = None
    finer: str = None
    maskable: bool = False
    opens: str = None
    reads_design: bool = False
    packer: object = None
    counts: object = None
    keeps_rows: bool = False
    default: bool = True
    combine: object = None

    def release_class(self, target, args):
        """The class of one request's reply, on its rows (or fit session)."""
        return self.releases(target, args) if callable(self.releases) else self.releases

    def pack(self, positional):
        """The named arguments of a call of the site function with ``positional``."""
        if self.packer is not None:
            return self.packer(*positional)
        if len(positional) > len(self.arguments):
            raise TypeError(f"{self.name} takes {len(self.arguments)} arguments; got "
                            f"{len(positional)}.")
        return {a.name: v for a, v in zip(self.arguments, positional)}

    def problem(self, args, target_key=None):
        """``None`` if ``args`` are this operation's (each of its declared type), else what
        is wrong (from the request only): an unknown or missing argument, a wrong type,
        a size past its cap."""
        if target_key is None:
            target_key = TARGET_KEYS[self.target]
        if not isinstance(args, dict):
            return "it takes named arguments"
        if target_key not in args:
            return f"it needs its {target_key}"
        declared = {a.name: a for a in self.arguments}
        unknown = sorted(set(args) - set(declared) - {target_key})
        if unknown:
            return f"it takes no argument {str(unknown[0])[:32]!r}"
        for name, arg in declared.items():
            if name not in args:
                if not arg.optional:
                    return f"it needs its argument {name!r}"
                continue
            found = arg.problem(args[name])
            if found is not None:
                return found
        return None

    def call_arguments(self, args, rules):
        """The function's positional arguments from a checked request: defaults filled,
        floors raised to the site's own, values converted."""
        values = []
        for arg in self.arguments:
            value = args.get(arg.name, arg.default)
            if arg.kind in ("floats", "ints") and isinstance(value, (list, tuple)):
                value = np.asarray(value, dtype=np.float64 if arg.kind == "floats" else
                                   np.int64)
            if arg.floor is not None:
                floor = getattr(rules, arg.floor)
                value = floor if value is None else max(int(value), int(floor))
            if arg.convert is not None and value is not None:
                value = arg.convert(value)
            values.append(value)
        return values


@dataclass(frozen=True)
class RowStep:
    """A declared row step: ``function(rows, *arguments)`` returns other rows.

    ``selects`` says it may leave rows out (a filter: its row set is recorded and
    ruled on at a site); ``reads(args)`` names the columns it reads (for the audit
    line); ``remedy`` is what the analyst can do when a site refuses the rows it
    would keep or leave out (a fixed text, shown with the refusal).
    """

    name: str
    function: object
    arguments: tuple
    selects: bool = False
    reads: object = None
    checks: tuple = ()
    remedy: str = ""

    def problem(self, args):
        if not isinstance(args, dict):
            return f"row step {self.name!r} takes named arguments"
        found = Operation(self.name, None, NOTHING, "", self.arguments).problem(
            dict(args, step=None), "step")
        return None if found is None else f"row step {self.name!r}: {found}"


_OPERATIONS = {}
_BY_FUNCTION = {}
_STEPS = {}
_STEP_BY_FUNCTION = {}


def _register(table, by_function, entry):
    if entry.name in table:
        raise ValueError(f"site operation {entry.name!r} is declared twice.")
    table[entry.name] = entry
    if entry.function is not None:
        by_function[entry.function] = entry


def site_operation(name, *, releases, describes, arguments=(), target="rows", checks=(),
                   reply=None, requires=None, finer=None, maskable=False, opens=None,
                   reads_design=False, packer=None, counts=None, keeps_rows=False,
                   default=True, combine=None):
    """Declare the decorated function as the site operation ``name`` (see
    :class:`Operation` for the parameters); returns the function unchanged."""
    if not callable(releases) and releases not in RELEASES:
        raise ValueError(f"{name}: releases must be one of {RELEASES}.")
    if combine is not None and combine not in ("sum", "objective") and not callable(combine):
        raise ValueError(f"{name}: combine must be 'sum', 'objective', a function or None.")
    if target not in TARGETS:
        raise ValueError(f"{name}: target must be one of {TARGETS}.")

    def declare(function):
        _register(_OPERATIONS, _BY_FUNCTION, Operation(
            name, function, releases, describes, tuple(arguments), target, tuple(checks),
            reply, requires, finer, maskable, opens, reads_design, packer, counts,
            keeps_rows, default, combine))
        return function
    return declare


def service_operation(name, *, releases, describes, arguments=(), target="rows",
                      default=True):
    """Declare an operation of the site service's own sessions (no site function:
    ``fit.close``, the ``sums.*`` of a session of masked sums)."""
    _register(_OPERATIONS, _BY_FUNCTION, Operation(name, None, releases, describes,
                                                   tuple(arguments), target,
                                                   default=default))


def row_step(name, *, arguments=(), selects=False, reads=None, checks=(), remedy=""):
    """Declare the decorated function as the row step ``name``."""
    def declare(function):
        _register(_STEPS, _STEP_BY_FUNCTION, RowStep(name, function, tuple(arguments),
                                                     selects, reads, tuple(checks), remedy))
        return function
    return declare


def operations():
    """``{name: Operation}`` of every declared operation (read-only)."""
    return types.MappingProxyType(_OPERATIONS)


def default_operations():
    """The operations a site serves unless its policy lists fewer, in name order."""
    return tuple(sorted(name for name, op in _OPERATIONS.items() if op.default))


def operation_for(function):
    """The operation declared for ``function``, or ``None``."""
    return _BY_FUNCTION.get(function)


def row_steps():
    """``{name: RowStep}`` of every declared row step (read-only)."""
    return types.MappingProxyType(_STEPS)


def step_for(function):
    """The row step declared for ``function``, or ``None``."""
    return _STEP_BY_FUNCTION.get(function)


_DATASET_KEY_CHECKS = {}


def dataset_key_check(key):
    """Declare, beside the code that reads it, the check of a dataset key of a site's
    configuration (``transforms``: formula terms): ``check(value)`` returns a problem
    or ``None``; the configuration names the problem and the service does not start."""
    def register(check):
        _DATASET_KEY_CHECKS[key] = check
        return check
    return register


def dataset_key_checks():
    """``{key: check}`` of the declared dataset-key checks (read-only)."""
    return types.MappingProxyType(_DATASET_KEY_CHECKS)


# --- work bounded as it runs -----------------------------------------------------------
_DEADLINE = contextvars.ContextVar("skfed_site_deadline", default=None)


class deadline:
    """``with deadline(seconds):`` — the work of one request at a site; long loops call
    :func:`check_deadline`, which stops the work once the time is past (a request past
    its time stops, not only is refused afterwards). Outside a site's request it does
    nothing."""

    def __init__(self, seconds):
        self.at = time.monotonic() + float(seconds)
        self.seconds = float(seconds)

    def __enter__(self):
        self._token = _DEADLINE.set(self)
        return self

    def __exit__(self, *exc):
        _DEADLINE.reset(self._token)
        return False


def check_deadline():
    """Raise :class:`Refused` (rule ``max_request_seconds``) once the current site
    request is past its time; nothing outside a site's request."""
    current = _DEADLINE.get()
    if current is not None and time.monotonic() > current.at:
        raise Refused("max_request_seconds", f"stopped after {current.seconds:g} s")



# --- who asks, and what a site keeps for them between requests --------------------------
#: the default caps of what one analyst's fits keep at a site between requests (a
#: boosting fit's rows and model), in MB: per fit, and per analyst over all their fits
DEFAULT_FIT_STATE_MB = 2048.0
DEFAULT_ANALYST_STATE_MB = 4096.0


@dataclass(frozen=True)
class Requester:
    """Who a site function works for, and the caps of the state it may keep for them.

    ``analyst`` is the certificate's name at a site service (``""`` in this process or
    on a Dask worker: one analyst); what a site keeps between requests is keyed by it,
    so one analyst's state is never another's.
    """

    analyst: str = ""
    fit_state_mb: float = DEFAULT_FIT_STATE_MB
    analyst_state_mb: float = DEFAULT_ANALYST_STATE_MB


_REQUESTER = contextvars.ContextVar("skfed_site_requester", default=Requester())


class requester:
    """``with requester(Requester(...)):`` — a site service's request for one analyst."""

    def __init__(self, who):
        self.who = who

    def __enter__(self):
        self._token = _REQUESTER.set(self.who)
        return self.who

    def __exit__(self, *exc):
        _REQUESTER.reset(self._token)
        return False


def current_requester():
    """The :class:`Requester` of the current site request (one local analyst outside)."""
    return _REQUESTER.get()
