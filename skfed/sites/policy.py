"""A site's configuration and policy: what it serves, to whom, and what it refuses.

The site's administrator writes one TOML file (paths relative to it)::

    [site]
    name = "hospital-a"
    listen = "127.0.0.1:50051"
    [tls]
    ca = "certs/ca.pem"
    cert = "certs/hospital-a.pem"
    key = "certs/hospital-a.key"
    [datasets.visits]
    path = "data/visits.csv"
    columns = ["age", "bmi", "ward", "readmitted"]   # optional: the usable columns
    weights = ["survey_weight"]                      # optional: the weight columns
    population = "complete"                          # optional: one analysis population
    [datasets.visits.domains]                        # optional: each column's range
    bmi = [10, 80]
    [policy]
    min_rows = 10
    [audit]
    path = "audit.jsonl"
    [privacy]
    ledger = "privacy-ledger.json"                 # the site's own privacy budget
    [access.analyst-b]                             # optional, per analyst
    datasets = ["visits"]
    operations = ["dataset.describe", "evaluate.score"]

Every rule has a safe default and is checked at the site, before any
computation on the rows; a refusal names the rule and the site.

The configuration fails closed: an unknown table or key (``[polcy]``,
``colums``) stops the service, naming it, and an empty list means nothing,
never everything (``operations = []`` serves no operation, ``columns = []``
no column); a site that would answer nothing, or no one, is refused.
``skfed site check`` lists every problem (:func:`check_config`).
"""

import difflib
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..deploy.certificates import check_site_name
from ..federation.operations import (DEFAULT_ANALYST_STATE_MB, DEFAULT_FIT_STATE_MB, Refused,
                                     dataset_key_checks, default_operations, operations)

__all__ = ["Refused", "Policy", "SiteConfig", "DatasetConfig", "PolicyError", "check_config",
           "load_config", "parse_policy", "served_by_default"]

#: DataSHIELD's default for its GLM saturation filter (nfilter.glm): at most one
#: parameter per three rows
DEFAULT_MAX_PARAMETERS_PER_ROW = 0.33
REQUIREMENTS = ("secure_aggregation", "differential_privacy")
#: the operations whose finer sums a site serves in the clear unless its policy says
#: otherwise: the per-time sums of a Cox model under the event-time rule
DEFAULT_FINER_SUMS = ("fit.cox_baseline", "fit.risk_sets", "survival.schoenfeld_sums")
#: how much of the formula language a site serves (skfed.formula)
FORMULA_LEVELS = ("none", "declared", "closed")
#: the analysis population a dataset may declare
POPULATIONS = ("all", "complete")
#: the keys of [policy] (:class:`Policy`)
POLICY_KEYS = ("analysts", "operations", "solvers", "losses", "min_rows", "min_level_count",
               "max_parameters_per_row", "require", "min_sites", "epsilon_budget", "max_delta",
               "min_noise_multiplier", "allow_exact_quantiles", "allow_event_times",
               "max_local_iterations", "max_request_seconds", "dominance", "consortium",
               "finer_sums", "formulas", "fit_state_mb", "analyst_state_mb",
               "kept_datasets")
#: every table of a site's configuration and the keys it takes ([datasets] and [access]:
#: those of each [datasets.<name>] and [access.<analyst>]); anything else stops the service
TABLES = {"site": ("name", "listen", "relay"), "tls": ("ca", "cert", "key"),
          "datasets": ("path", "columns", "weights", "domains", "population", "transforms",
                       "consortium", "engine", "scheduler", "scheduler_ca",
                       "scheduler_cert", "scheduler_key"),
          "policy": POLICY_KEYS, "audit": ("path", "officer_log"),
          "privacy": ("ledger",), "access": ("datasets", "operations")}


def served_by_default():
    """The operations a site serves unless its policy lists fewer: every declared
    operation (the registry, :func:`skfed.federation.operations.default_operations`)."""
    return default_operations()


class PolicyError(PermissionError):
    """A request the site's policy refuses: names the rule and the site."""

    def __init__(self, site, rule, detail):
        self.site, self.rule, self.detail = site, rule, detail
        super().__init__(f"site {site!r} refused: {detail} (policy rule {rule!r}).")


@dataclass
class DatasetConfig:
    """One dataset a site declares: where its file is, which columns may be used, and
    what the officer declares of them.

    Attributes
    ----------
    name : str
    path : Path
    columns : tuple of str or None
        The usable columns (``None``: every column of the file).
    weights : tuple of str
        The columns that may weigh rows (a request's sample weights, a formula's
        weights): no other column, and no transform, is a weight.
    domains : dict
        ``{column: (low, high)}``: each column's range, from which a transform is
        judged finite before it runs (a column without one ranges over the reals).
    population : {"all", "complete"}
        ``"complete"``: the dataset's rows are its complete cases over its usable
        columns, once, so that analyses with different columns share one row set.
    transforms : tuple of str or None
        Under ``formulas = "declared"``: the formula terms the site serves.
    consortium : tuple of str or None
        The sites this dataset's masked sums are over (else the policy's).
    engine : {None, "dask"}
        ``"dask"``: the dataset is a set of Parquet partitions (``path`` a glob) that a
        Dask cluster the site runs reads; its rows never gather in the site's process
        (:mod:`skfed.sites.engine`).
    scheduler : str or None
        With ``engine = "dask"``: the scheduler's ``"host:port"`` (``"tls://host:port"``
        over mutual TLS), or ``"local"`` for a cluster the site starts in its own
        process.
    scheduler_tls : tuple of Path or None
        With a ``tls://`` scheduler: the files of ``scheduler_ca``, ``scheduler_cert``
        and ``scheduler_key`` (the CA the scheduler's certificate is checked against,
        and the site's client certificate and key for its own cluster).
    """

    name: str
    path: Path
    columns: tuple = None
    weights: tuple = ()
    domains: dict = field(default_factory=dict)
    population: str = "all"
    transforms: tuple = None
    consortium: tuple = None
    engine: str = None
    scheduler: str = None
    scheduler_tls: tuple = None


@dataclass
class Policy:
    """What the site allows (see the module docstring and ``docs/data-officers.md``).

    ``None`` in a list allows everything (the key left out); an empty list
    allows nothing.

    Attributes
    ----------
    analysts : tuple of str or None
        Certificate identities (common names) allowed to use the site;
        ``None``: every analyst certificate the federation's CA signed.
    operations : tuple of str or None
        The named operations served (``None``: every declared operation).
    solvers : tuple of str or None
        Solver names allowed in a fit (``None``: all of skfed's).
    losses : tuple of str or None
        The models allowed, by their loss (``"Quadratic"`` for least squares,
        Lasso and ridge; ``"Logistic"``, ``"Multinomial"``, ``"Hinge"``,
        ``"SquaredHinge"``, ``"Poisson"``, ``"Gamma"``, ``"Tweedie"``);
        ``None``: all.
    min_rows : int
        No number is released that depends on fewer rows (rows with positive weight
        and a non-zero contribution), after every row step.
    min_level_count : int
        No category level (class of a target, level of a column) is
        reported with fewer rows.
    max_parameters_per_row : float
        Parameters of a model over rows of the site; a fit above it is
        refused (its second moments would reveal the rows).
    require : tuple of str
        ``"secure_aggregation"`` and/or ``"differential_privacy"``: the
        protection every fit step must carry.
    min_sites : int
        Fewest participating sites a protected fit may have.
    epsilon_budget : float
        Differential privacy each dataset may spend in total, across fits
        (the site's ledger, :mod:`skfed.sites.ledger`).
    max_delta : float
        The largest delta of one differentially private fit.
    min_noise_multiplier : float
        The weakest noise (standard deviation over the clipping bound) a
        differentially private round may add.
    allow_exact_quantiles : bool
        Whether the exact federated median (the imputer's bisection) may run:
        it releases the site's minimum, maximum and the values next to each
        threshold, single rows' values.
    max_local_iterations : int
        The most iterations of any loop (rounds of a local fit, local steps,
        inner iterations, trees) an analyst's request may ask of the site
        (:func:`skfed.sites.host.check_work`); refused before any work.
    max_request_seconds : float
        The longest a request may run: the site functions' loops check the time as
        they go and stop past it (nothing is released).
    dominance : float
        The dominance rule: the largest ``min_rows - 1`` contributions to a sum
        released in the clear may make up at most this share of its absolute total
        (:mod:`skfed.federation.dominance`).
    consortium : tuple of str or None
        The sites a masked sum over this site's datasets must be over, all of them
        (required with ``require = ["secure_aggregation"]``).
    finer_sums : tuple of str
        The operations whose finer sums by design (boosting's node histograms, a Cox
        model's per-time sums) the site serves in the clear; the others only inside
        masked sums.
    formulas : {"none", "declared", "closed"}
        How much of the formula language the site serves: none, the transforms each
        dataset declares, or the closed vocabulary (no operator that makes a row
        indicator from an analyst's constant).
    allow_event_times : bool
        Whether exact event times may leave the site (a Cox model whose
        baseline hazard is shared across sites, without a time grid; exact
        Kaplan-Meier curves and log-rank tests): the pooled event times become
        public, and the sums at a time with one event are that row's
        covariates. Without it, only event times or grid intervals holding at
        least ``min_level_count`` events (and rows leaving the risk set) are
        used.
    fit_state_mb : float
        The most memory (MB) one fit's state may hold at the site between requests (a
        boosting fit's binned rows, raw predictions and trees); a fit past it is
        refused (rule ``fit_state_mb``).
    analyst_state_mb : float
        The most memory (MB) the states of one analyst's fits may hold together;
        past it the oldest state is evicted first (the analyst's next request on it
        resends its model once).
    kept_datasets : int
        The dataset references (an analyst's dataset, with its row steps) whose rows
        the site keeps between requests, all analysts together, with their fits'
        states; past it the oldest rows of the analyst keeping the most go first.
    access : dict
        ``[access.<analyst>]`` tables: the datasets and operations one
        analyst may use (narrowing ``operations``; an analyst with no table
        may use every dataset).
    """

    analysts: tuple = None
    operations: tuple = None
    solvers: tuple = None
    losses: tuple = None
    min_rows: int = 10
    min_level_count: int = 5
    max_parameters_per_row: float = DEFAULT_MAX_PARAMETERS_PER_ROW
    require: tuple = ()
    min_sites: int = 1
    epsilon_budget: float = 10.0
    max_delta: float = 1e-5
    min_noise_multiplier: float = 0.0
    allow_exact_quantiles: bool = False
    allow_event_times: bool = False
    #: analyst-chosen work: the defaults admit skfed's own defaults (10,000 rounds of a
    #: local-only fit), and a request stops at its time whatever it asked
    max_local_iterations: int = 10_000
    max_request_seconds: float = 100.0
    dominance: float = 0.95
    consortium: tuple = None
    finer_sums: tuple = DEFAULT_FINER_SUMS
    formulas: str = "closed"
    fit_state_mb: float = DEFAULT_FIT_STATE_MB
    analyst_state_mb: float = DEFAULT_ANALYST_STATE_MB
    #: one analyst's boosting fits on a few row sets at once (a training and a held-out
    #: part), or four analysts' fits side by side
    kept_datasets: int = 4
    #: per analyst: {"datasets": (...), "operations": (...)} narrowing the rest
    access: dict = field(default_factory=dict)

    def serves(self, operation):
        """Whether the policy serves ``operation`` (every declared one by default)."""
        if self.operations is None:  # asked on every request: a lookup, not a sorted list
            declared = operations().get(operation)
            return declared is not None and declared.default
        return operation in self.operations


@dataclass
class SiteConfig:
    """A parsed site configuration (:func:`load_config`)."""

    name: str
    listen: str
    ca: Path
    cert: Path
    key: Path
    datasets: dict
    policy: Policy = field(default_factory=Policy)
    audit: Path = None
    data_dir: Path = None
    ledger: Path = None
    officer_log: Path = None
    #: ``host:port`` of a relay: the site dials out to it and listens on nothing
    relay: str = None


class _Problems(list):
    """The problems of one configuration, collected so that ``skfed site check`` names
    them all (and :func:`load_config` refuses to start on any of them)."""

    def take(self, parse, *args, default=None, **kwargs):
        """``parse(*args, **kwargs)``; on ``ValueError``, note it and return ``default``."""
        try:
            return parse(*args, **kwargs)
        except ValueError as exc:
            self.append(str(exc))
            return default

    def unknown(self, what, table, known):
        """Note each key of ``table`` (named ``what``) that is not in ``known``: a
        misspelt key would otherwise be ignored, and its rule silently not apply."""
        for key in table:
            if key not in known:
                self.append(f"{what} has an unknown key {key!r}{_closest(key, known)}; "
                            f"known keys: {sorted(known)}.")


def _closest(name, known, template="{!r}"):
    """`` (did you mean ...?)`` with the known name closest to ``name``, if one is close."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {template.format(close[0])}?)" if close else ""


def _strings(value, what):
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings; got {value!r}.")
    return tuple(value)


def _names(raw, key, known, known_as, what="[policy]"):
    """``raw[key]``: names each in ``known``; ``None`` if absent, ``()`` if empty (an
    empty list allows nothing, never everything)."""
    values = _strings(raw.get(key), f"{what} {key}")
    bad = [v for v in values or () if v not in known]
    if bad:
        raise ValueError(f"{what} {key} names {bad[0]!r}{known_as} {sorted(known)}.")
    return values


def _number(raw, key, default, *, integer, minimum):
    value = raw.get(key, default)
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value < minimum:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"[policy] {key} must be {kind} >= {minimum}; got {value!r}.")
    return value


def _boolean(raw, key, default):
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"[policy] {key} must be true or false; got {value!r}.")
    return value


#: the numeric keys of [policy]: (integer, minimum); their defaults are :class:`Policy`'s
_NUMBERS = {"min_rows": (True, 1), "min_level_count": (True, 1),
            "max_parameters_per_row": (False, 0), "min_sites": (True, 1),
            "epsilon_budget": (False, 0), "max_delta": (False, 0),
            "min_noise_multiplier": (False, 0), "max_local_iterations": (True, 1),
            "max_request_seconds": (False, 1), "dominance": (False, 0.5),
            "fit_state_mb": (False, 1), "analyst_state_mb": (False, 1),
            "kept_datasets": (True, 1)}


def _policy_names(raw, problems):
    """The name lists of ``[policy]``: who, which operations, solvers, losses, protection,
    consortium and finer sums."""
    from ..federation.wire import role_of_class as _role, wire_classes
    from ..solvers import SOLVERS

    declared = operations()
    losses = sorted({c.__name__ for c in wire_classes().values()
                     if _role(c) == "datafit" and not getattr(c, "__abstractmethods__", None)})
    solvers = sorted(SOLVERS)
    finer = [n for n, op in declared.items() if op.finer is not None]
    take = problems.take
    names = {
        "analysts": take(_strings, raw.get("analysts"), "[policy] analysts"),
        # on a bad name: every operation, so that [access] is checked against something
        "operations": take(_names, raw, "operations", declared, ", which is not a site "
                           "operation; the operations are", default=served_by_default()),
        "solvers": take(_names, raw, "solvers", solvers, "; skfed's solvers are"),
        "losses": take(_names, raw, "losses", losses, "; skfed's losses are"),
        "require": take(_names, raw, "require", REQUIREMENTS, "; use", default=()) or (),
        "consortium": take(_site_names, raw.get("consortium"), "[policy] consortium"),
        "finer_sums": take(_names, raw, "finer_sums", finer, ", which releases no finer "
                           "sums; the operations that do are", default=DEFAULT_FINER_SUMS)}
    if names["finer_sums"] is None:
        names["finer_sums"] = DEFAULT_FINER_SUMS
    # a site that answers nothing, or no one, is a mistake: refused rather than served
    if names["operations"] == ():
        problems.append("[policy] operations = [] serves no operation: the site would answer "
                        "nothing (leave the key out to serve every operation).")
    if names["analysts"] == ():
        problems.append("[policy] analysts = [] allows no analyst: the site would answer no "
                        "one (leave the key out to allow every analyst certificate of the "
                        "federation's CA).")
    return names


def _site_names(value, what):
    names = _strings(value, what)
    if names is not None:
        for name in names:
            check_site_name(name)
        if len(set(names)) != len(names):
            raise ValueError(f"{what} names a site twice.")
    return names


def _formulas(raw):
    value = raw.get("formulas", "closed")
    if value not in FORMULA_LEVELS:
        raise ValueError(f"[policy] formulas must be one of {list(FORMULA_LEVELS)}; got "
                         f"{value!r}.")
    return value


def parse_policy(raw, problems=None):
    """A :class:`Policy` from the ``[policy]`` table.

    Parameters
    ----------
    raw : dict
        The table, as TOML reads it. An empty list allows nothing (no
        operation, solver, loss or analyst), never everything.
    problems : _Problems, optional
        Where :func:`check_config` collects every problem; without it, any
        problem raises.

    Returns
    -------
    policy : Policy

    Raises
    ------
    ValueError
        Without ``problems``: naming every unknown key and bad value, one a
        line.
    """
    found = _Problems() if problems is None else problems
    found.unknown("[policy]", raw, POLICY_KEYS)
    numbers = {key: found.take(_number, raw, key, getattr(Policy, key), integer=integer,
                               minimum=minimum, default=getattr(Policy, key))
               for key, (integer, minimum) in _NUMBERS.items()}
    flags = {key: found.take(_boolean, raw, key, False, default=False)
             for key in ("allow_exact_quantiles", "allow_event_times")}
    if isinstance(numbers["dominance"], float) and numbers["dominance"] >= 1:
        found.append(f"[policy] dominance must be below 1 (the share of a sum the largest "
                     f"min_rows - 1 rows may hold); got {numbers['dominance']!r}.")
    policy = Policy(**_policy_names(raw, found), **numbers, **flags,
                    formulas=found.take(_formulas, raw, default="closed"))
    if problems is None and found:
        raise ValueError("\n".join(found))
    return policy


def _parse_access(raw, datasets, policy, problems=None):
    """``[access.<analyst>]``: the ``datasets`` and ``operations`` one analyst may use.

    An empty list there allows that analyst nothing. ``datasets``: the names
    the site declares; ``problems`` as in :func:`parse_policy`.
    """
    found = _Problems() if problems is None else problems
    access = {}
    for analyst, rules in raw.items():
        what = f"[access.{analyst}]"
        if not isinstance(rules, dict):
            found.append(f"{what} must be a table taking datasets = [...] and operations = "
                         f"[...] only; got {rules!r}.")
            continue
        found.unknown(what, rules, TABLES["access"])
        entry = {}
        # operations = [] is already a problem: not one more per [access] table
        served = policy.operations or served_by_default()
        for key, known in (("datasets", datasets), ("operations", served)):
            values = found.take(_names, rules, key, known, ", which the site does not serve; "
                                "it serves", what)
            if values is not None:
                entry[key] = values
        access[analyst] = entry
    if problems is None and found:
        raise ValueError("\n".join(found))
    return access


def _domains(value, what):
    """``{column: [low, high]}``: finite numbers, low below high."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} is a table of column = [low, high].")
    out = {}
    for column, bounds in value.items():
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(
                isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b)
                for b in bounds) and bounds[0] < bounds[1]):
            raise ValueError(f"{what} {column}: a range is [low, high] with finite numbers, "
                             f"low < high; got {bounds!r}.")
        out[str(column)] = (float(bounds[0]), float(bounds[1]))
    return out


def _population(value, what):
    if value not in POPULATIONS:
        raise ValueError(f"{what} population must be one of {list(POPULATIONS)}; got "
                         f"{value!r}.")
    return value


def _dataset(name, conf, base, problems):
    """One ``[datasets.<name>]`` table, its keys checked."""
    what = f"[datasets.{name}]"
    take = problems.take
    columns = take(_strings, conf.get("columns"), f"{what} columns")
    weights = take(_strings, conf.get("weights"), f"{what} weights") or ()
    for column in weights:
        if columns is not None and column not in columns:
            problems.append(f"{what} weights names {column!r}, which is not one of its "
                            "columns.")
    transforms = take(_strings, conf.get("transforms"), f"{what} transforms")
    for key, check in dataset_key_checks().items():  # declared beside their readers
        problem = check(conf[key]) if conf.get(key) is not None else None
        if problem:
            problems.append(f"{what} {key}: {problem}")
    engine, scheduler = take(_engine, conf, what, default=(None, None))
    return DatasetConfig(
        name, (base / conf["path"]).resolve(), columns, tuple(weights),
        take(_domains, conf.get("domains"), f"[datasets.{name}.domains]", default={}),
        take(_population, conf.get("population", "all"), what, default="all"),
        transforms, take(_site_names, conf.get("consortium"), f"{what} consortium"),
        engine, scheduler, take(_scheduler_tls, conf, scheduler, base, what))


def _engine(conf, what):
    """``engine = "dask"`` with ``scheduler = "host:port"`` or ``"local"``."""
    engine, scheduler = conf.get("engine"), conf.get("scheduler")
    if engine is None:
        if scheduler is not None:
            raise ValueError(f"{what} scheduler is for engine = \"dask\"; no engine is named.")
        return None, None
    if engine != "dask":
        raise ValueError(f"{what} engine must be \"dask\"; got {engine!r}.")
    if not isinstance(scheduler, str) or not scheduler or (
            scheduler != "local" and ":" not in scheduler):
        raise ValueError(f"{what} engine = \"dask\" needs scheduler = \"host:port\" (or "
                         f"\"tls://host:port\", \"local\"); got {scheduler!r}.")
    return engine, scheduler


#: the keys naming the files of a TLS link to a dataset's scheduler (as [tls]'s keys)
SCHEDULER_TLS = ("scheduler_ca", "scheduler_cert", "scheduler_key")


def _scheduler_tls(conf, scheduler, base, what):
    """``(ca, cert, key)`` of a ``tls://`` scheduler, each file readable and the key the
    certificate's; ``None`` for a scheduler reached without TLS. A config that names
    the files asks for TLS: a ``tcp://`` or bare address would send them unused and
    the rows' requests in the clear."""
    named = [key for key in SCHEDULER_TLS if key in conf]
    tls = isinstance(scheduler, str) and scheduler.startswith("tls://")
    if not named and not tls:
        return None
    if not tls:
        raise ValueError(f"{what} names {', '.join(named)}, so its scheduler must be "
                         f"reached over TLS: scheduler = \"tls://host:port\"; got "
                         f"{scheduler!r}.")
    missing = [key for key in SCHEDULER_TLS if key not in conf]
    if missing:
        raise ValueError(f"{what} scheduler = {scheduler!r} needs {', '.join(missing)} "
                         "(the CA file, the site's client certificate and key for its "
                         "cluster).")
    files = tuple(_path(conf, what.strip("[]"), key, base) for key in SCHEDULER_TLS)
    _check_tls_files(files, what)
    return files


def _check_tls_files(files, what):
    """Each file readable and PEM, the key the certificate's (as the TLS link loads them)."""
    import ssl

    for key, path in zip(SCHEDULER_TLS, files):
        try:
            path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{what} {key} = {str(path)!r} cannot be read: "
                             f"{exc.strerror or exc}.") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=str(files[0]))
    except ssl.SSLError as exc:
        raise ValueError(f"{what} scheduler_ca = {str(files[0])!r} is not a PEM CA "
                         f"certificate: {exc}.") from None
    try:
        context.load_cert_chain(str(files[1]), str(files[2]))
    except ssl.SSLError as exc:
        raise ValueError(f"{what} scheduler_cert and scheduler_key ({str(files[1])!r}, "
                         f"{str(files[2])!r}) are not a PEM certificate and its key: "
                         f"{exc}.") from None


def _parse_datasets(raw, base, problems):
    """``[datasets.<name>]``: each dataset's file and usable columns (``columns = []``: no
    column); a site whose datasets serve nothing is refused."""
    datasets = {}
    for name, conf in raw.items():
        what = f"[datasets.{name}]"
        if not isinstance(conf, dict) or not isinstance(conf.get("path"), str) \
                or not conf["path"]:
            problems.append(f"{what} needs path = '...'.")
            if not isinstance(conf, dict):
                continue
        problems.unknown(what, conf, TABLES["datasets"])
        if isinstance(conf.get("path"), str) and conf["path"]:
            datasets[name] = _dataset(name, conf, base, problems)
    if not raw:
        problems.append("[datasets] declares no dataset: the site would serve nothing.")
    elif datasets and all(d.columns == () for d in datasets.values()):
        problems.append("every dataset has columns = []: the site would serve no column "
                        "(leave the key out to serve every column of the file).")
    return datasets


def _path(table, tab, key, base, default=None):
    value = table.get(key, default)
    if not isinstance(value, str) or not value:
        got = "" if value is None else f"; got {value!r}"
        raise ValueError(f"[{tab}] {key} must be a path (relative to the config file){got}.")
    return (base / value).resolve()


def _site_name(value):
    try:
        return check_site_name(value)
    except ValueError as exc:
        raise ValueError(f"[site] name: {exc}") from None


def _listen(value):
    if not isinstance(value, str) or ":" not in value:
        raise ValueError("[site] listen must be 'host:port' (e.g. '127.0.0.1:50051').")
    return value


def _endpoints(site):
    """``(listen, relay)``: a site listens, or dials out to a relay, never both."""
    if "relay" not in site:
        return _listen(site.get("listen")), None
    if "listen" in site:
        raise ValueError("[site] has both listen and relay: a site that dials out to a relay "
                         "listens on nothing; remove one.")
    relay = site["relay"]
    if not isinstance(relay, str) or ":" not in relay:
        raise ValueError("[site] relay must be 'host:port' (the relay's address).")
    return None, relay


def _tables(raw, where, problems):
    """Each known table of ``raw`` (``{}`` if absent); notes unknown, missing and
    malformed tables. An unknown table is never ignored: ``[polcy]`` would drop its
    rules."""
    for name, value in raw.items():
        if name not in TABLES:
            kind = (f"an unknown table [{name}]{_closest(name, TABLES, '[{}]')}"
                    if isinstance(value, dict)
                    else f"an unknown top-level key {name!r}{_closest(name, TABLES)}")
            problems.append(f"{where} has {kind}, whose rules would not apply; the tables "
                            f"are {', '.join(f'[{t}]' for t in TABLES)}.")
    tables = {}
    for name in TABLES:
        value = raw.get(name, {})
        if name not in raw and name in ("site", "tls"):
            problems.append(f"{where} needs a [{name}] table.")
        elif not isinstance(value, dict):
            problems.append(f"[{name}] must be a table; got {name} = {value!r}.")
            value = {}
        if name not in ("datasets", "access", "policy"):  # those are checked by their parsers
            problems.unknown(f"[{name}]", value, TABLES[name])
        tables[name] = value
    return tables


def check_config(path):
    """Every problem of a site's configuration, and the configuration if it has none.

    Parameters
    ----------
    path : str or Path
        The site's TOML file; the paths in it are relative to its folder.

    Returns
    -------
    config : SiteConfig or None
        ``None`` if any problem was found.
    problems : list of str
        Each problem, naming its table and key (with the closest known name
        of a misspelt one); empty if the configuration is fine.
    """
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return None, [f"no site configuration at {str(path)!r}."]
    except tomllib.TOMLDecodeError as exc:
        return None, [f"{str(path)!r} is not valid TOML: {exc}."]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [f"{str(path)!r} cannot be read: {exc}."]
    base, problems = path.resolve().parent, _Problems()
    tables = _tables(raw, repr(str(path)), problems)
    site, tls, take = tables["site"], tables["tls"], problems.take
    name = take(_site_name, site.get("name")) if "site" in raw else None
    listen, relay = take(_endpoints, site, default=(None, None)) if "site" in raw else \
        (None, None)
    ca, cert, key = ((take(_path, tls, "tls", k, base) for k in TABLES["tls"])
                     if "tls" in raw else (None, None, None))
    audit = take(_path, tables["audit"], "audit", "path", base, "audit.jsonl")
    officer = take(_path, tables["audit"], "audit", "officer_log", base, "officer-log.jsonl")
    ledger = take(_path, tables["privacy"], "privacy", "ledger", base, "privacy-ledger.json")
    datasets = _parse_datasets(tables["datasets"], base, problems)
    policy = parse_policy(tables["policy"], problems)
    policy.access = _parse_access(tables["access"], list(tables["datasets"]), policy,
                                  problems)
    _check_consortium(name, policy, datasets, problems)
    if problems:
        return None, list(problems)
    return SiteConfig(name=name, listen=listen, ca=ca, cert=cert, key=key, datasets=datasets,
                      policy=policy, audit=audit, data_dir=base, ledger=ledger,
                      officer_log=officer, relay=relay), []


def _check_consortium(name, policy, datasets, problems):
    """A site requiring secure aggregation names the sites its masked sums are over (one
    party set per dataset: sums over different subsets of sites would single it out),
    itself among them and at least two."""
    for dataset in datasets.values():
        consortium = dataset.consortium or policy.consortium
        where = f"[datasets.{dataset.name}] consortium" if dataset.consortium else \
            "[policy] consortium"
        if consortium is None:
            if "secure_aggregation" in policy.require:
                problems.append(f"[policy] require = [\"secure_aggregation\"] needs a "
                                f"consortium = [...] (the sites dataset {dataset.name!r}'s "
                                "masked sums are over, all of them): masked sums over "
                                "different subsets of sites would give this site's own sums "
                                "by difference.")
            continue
        if name is not None and name not in consortium:
            problems.append(f"{where} must name this site ({name!r}).")
        if len(consortium) < 2:
            problems.append(f"{where} needs at least two sites.")


def load_config(path):
    """Read a site's TOML configuration; paths are resolved against its folder.

    Parameters
    ----------
    path : str or Path
        The site's TOML file.

    Returns
    -------
    config : SiteConfig

    Raises
    ------
    ValueError
        On any problem :func:`check_config` finds, naming every one, one a
        line: an unknown table or key, a missing or malformed value, a
        service that would answer nothing. The service fails closed: it does
        not start on a configuration it does not fully understand.
    """
    config, problems = check_config(path)
    if problems:
        raise ValueError("\n".join(problems))
    return config
