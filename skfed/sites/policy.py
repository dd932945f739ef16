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
"""

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..deploy.certificates import check_site_name

#: operations a site serves unless its policy lists fewer
DEFAULT_OPERATIONS = ("dataset.describe", "data.summary", "fit.open", "fit.client_summary",
                      "fit.monitor", "fit.curvature", "fit.feature_mean", "fit.step",
                      "fit.close", "evaluate.score", "preprocess.schema", "preprocess.summary",
                      "data.check", "evaluate.local_baseline", "stats.describe",
                      "stats.count_below", "stats.crosstab", "stats.event_table",
                      "fit.inference", "fit.inference_null", "fit.inference_dispersion",
                      "data.check_target", "data.inspect", "evaluate.response_sums",
                      "evaluate.deviances", "survival.event_times", "fit.risk_sets",
                      "fit.cox_inference", "fit.cox_baseline", "fit.cox_residuals",
                      "evaluate.concordance", "survival.strata_levels")
#: DataSHIELD's default for its GLM saturation filter (nfilter.glm): at most one
#: parameter per three rows
DEFAULT_MAX_PARAMETERS_PER_ROW = 0.33
REQUIREMENTS = ("secure_aggregation", "differential_privacy")


class Refused(Exception):
    """Raised inside the site when a request breaks a rule; ``rule`` names it (the
    host turns it into a :class:`PolicyError` reply and an audit line)."""

    def __init__(self, rule, detail):
        super().__init__(detail)
        self.rule, self.detail = rule, detail


class PolicyError(PermissionError):
    """A request the site's policy refuses: names the rule and the site."""

    def __init__(self, site, rule, detail):
        self.site, self.rule, self.detail = site, rule, detail
        super().__init__(f"site {site!r} refused: {detail} (policy rule {rule!r}).")


@dataclass
class DatasetConfig:
    """One dataset a site declares: where its file is and which columns may be used."""

    name: str
    path: Path
    columns: tuple = None  # None: every column of the file


@dataclass
class Policy:
    """What the site allows (see the module docstring and ``docs/data-officers.md``).

    Attributes
    ----------
    analysts : tuple of str or None
        Certificate identities (common names) allowed to use the site;
        ``None``: every analyst certificate the federation's CA signed.
    operations : tuple of str
        The named operations served.
    solvers : tuple of str or None
        Solver names allowed in a fit (``None``: all of skfed's).
    losses : tuple of str or None
        The models allowed, by their loss (``"Quadratic"`` for least squares,
        Lasso and ridge; ``"Logistic"``, ``"Multinomial"``, ``"Hinge"``,
        ``"SquaredHinge"``, ``"Poisson"``, ``"Gamma"``, ``"Tweedie"``);
        ``None``: all.
    min_rows : int
        No reply is computed from fewer rows (rows with positive weight).
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
    allow_event_times : bool
        Whether exact event times may leave the site (a Cox model whose
        baseline hazard is shared across sites, without a time grid): the
        pooled event times become public, and the sums at a time with one
        event are that row's covariates. Without it, only event times or
        grid intervals holding at least ``min_level_count`` events (and rows
        leaving the risk set) are used.
    access : dict
        ``[access.<analyst>]`` tables: the datasets and operations one
        analyst may use (narrowing ``operations``; an analyst with no table
        may use every dataset).
    """

    analysts: tuple = None
    operations: tuple = DEFAULT_OPERATIONS
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
    #: per analyst: {"datasets": (...), "operations": (...)} narrowing the rest
    access: dict = field(default_factory=dict)


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


def _strings(value, what):
    if value is None:
        return None
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings; got {value!r}.")
    return tuple(value)


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


def parse_policy(raw):
    """A :class:`Policy` from the ``[policy]`` table (unknown keys are refused)."""
    from . import operations

    known = {"analysts", "operations", "solvers", "losses", "min_rows", "min_level_count",
             "max_parameters_per_row", "require", "min_sites", "epsilon_budget", "max_delta",
             "min_noise_multiplier", "allow_exact_quantiles", "allow_event_times"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"[policy] has an unknown key {unknown[0]!r}; known keys: "
                         f"{sorted(known)}.")
    ops = _strings(raw.get("operations"), "[policy] operations") or DEFAULT_OPERATIONS
    bad = [op for op in ops if op not in operations.OPERATIONS]
    if bad:
        raise ValueError(f"[policy] operations names {bad[0]!r}, which is not a site "
                         f"operation; the operations are {sorted(operations.OPERATIONS)}.")
    require = _strings(raw.get("require", []), "[policy] require")
    bad = [r for r in require if r not in REQUIREMENTS]
    if bad:
        raise ValueError(f"[policy] require names {bad[0]!r}; use {list(REQUIREMENTS)}.")
    solvers = _strings(raw.get("solvers"), "[policy] solvers")
    if solvers is not None:
        from ..solvers import SOLVERS

        bad = [s for s in solvers if s not in SOLVERS]
        if bad:
            raise ValueError(f"[policy] solvers names {bad[0]!r}; skfed's solvers are "
                             f"{sorted(SOLVERS)}.")
    losses = _strings(raw.get("losses"), "[policy] losses")
    if losses is not None:
        from .. import datafits

        known_losses = sorted(n for n, c in vars(datafits).items()
                              if isinstance(c, type) and issubclass(c, datafits.Datafit)
                              and c is not datafits.Datafit)
        bad = [x for x in losses if x not in known_losses]
        if bad:
            raise ValueError(f"[policy] losses names {bad[0]!r}; skfed's losses are "
                             f"{known_losses}.")
    return Policy(
        analysts=_strings(raw.get("analysts"), "[policy] analysts"), operations=ops,
        solvers=solvers, losses=losses,
        min_rows=_number(raw, "min_rows", 10, integer=True, minimum=1),
        min_level_count=_number(raw, "min_level_count", 5, integer=True, minimum=1),
        max_parameters_per_row=_number(raw, "max_parameters_per_row",
                                       DEFAULT_MAX_PARAMETERS_PER_ROW, integer=False,
                                       minimum=0),
        require=require, min_sites=_number(raw, "min_sites", 1, integer=True, minimum=1),
        epsilon_budget=_number(raw, "epsilon_budget", 10.0, integer=False, minimum=0),
        max_delta=_number(raw, "max_delta", 1e-5, integer=False, minimum=0),
        min_noise_multiplier=_number(raw, "min_noise_multiplier", 0.0, integer=False,
                                     minimum=0),
        allow_exact_quantiles=_boolean(raw, "allow_exact_quantiles", False),
        allow_event_times=_boolean(raw, "allow_event_times", False))


def _parse_access(raw, datasets, policy):
    """``[access.<analyst>]``: ``datasets`` and ``operations`` that analyst may use."""
    access = {}
    for analyst, rules in raw.items():
        if not isinstance(rules, dict) or set(rules) - {"datasets", "operations"}:
            raise ValueError(f"[access.{analyst}] takes datasets = [...] and operations = "
                             "[...] only.")
        entry = {}
        for key, known in (("datasets", datasets), ("operations", policy.operations)):
            values = _strings(rules.get(key), f"[access.{analyst}] {key}")
            if values is not None:
                bad = [v for v in values if v not in known]
                if bad:
                    raise ValueError(f"[access.{analyst}] {key} names {bad[0]!r}, which the "
                                     f"site does not serve; it serves {sorted(known)}.")
                entry[key] = values
        access[analyst] = entry
    return access


def load_config(path):
    """Read a site's TOML configuration; paths are resolved against its folder.

    Raises ``ValueError`` naming the missing or malformed key.
    """
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"no site configuration at {str(path)!r}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not valid TOML: {exc}.") from None
    base = path.resolve().parent

    def table(name):
        value = raw.get(name)
        if not isinstance(value, dict):
            raise ValueError(f"{str(path)!r} needs a [{name}] table.")
        return value

    def file(tab, key):
        value = table(tab).get(key)
        if not isinstance(value, str) or not value:
            raise ValueError(f"[{tab}] {key} must be a path (relative to the config file).")
        return (base / value).resolve()

    site = table("site")
    name = check_site_name(site.get("name"))
    listen = site.get("listen")
    if not isinstance(listen, str) or ":" not in listen:
        raise ValueError("[site] listen must be 'host:port' (e.g. '127.0.0.1:50051').")
    datasets = {}
    for dname, dconf in table("datasets").items():
        if not isinstance(dconf, dict) or not isinstance(dconf.get("path"), str):
            raise ValueError(f"[datasets.{dname}] needs path = '...'.")
        datasets[dname] = DatasetConfig(dname, (base / dconf["path"]).resolve(),
                                        _strings(dconf.get("columns"),
                                                 f"[datasets.{dname}] columns"))
    if not datasets:
        raise ValueError("[datasets] declares no dataset: the site would serve nothing.")
    audit = raw.get("audit", {})
    audit_path = (base / audit["path"]).resolve() if audit.get("path") else base / "audit.jsonl"
    privacy = raw.get("privacy", {})
    ledger = ((base / privacy["ledger"]).resolve() if privacy.get("ledger")
              else base / "privacy-ledger.json")
    policy = parse_policy(raw.get("policy", {}))
    policy.access = _parse_access(raw.get("access", {}), datasets, policy)
    return SiteConfig(name=name, listen=listen, ca=file("tls", "ca"), cert=file("tls", "cert"),
                      key=file("tls", "key"), datasets=datasets,
                      policy=policy, audit=audit_path,
                      data_dir=base, ledger=ledger)
