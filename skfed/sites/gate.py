"""The gate every release of a site service passes: replies, errors and refusals.

An operation's declaration (:mod:`skfed.federation.operations`) says what its
reply releases; the gate applies the rules of that class, whatever the handler:

- **errors carry no data**: what reaches the analyst is a fixed text per rule
  (:data:`RULE_TEXTS`), with the operation and column names only (each one the
  request named or the dataset declares); the detail of a refusal or an error
  goes to the site's own officer log, never to the analyst and never to the audit
  log. Before any row is read, a refusal of the request's form may say what is
  wrong with the request (the analyst's own input); after, it says only the rule;
- **honest classes**: a ``counts`` reply holds integer counts (where the
  declaration names them); a ``sums`` reply is audited by the dominance rule as
  its sums are formed, and refused if no audit saw it;
- **protection**: where the policy requires secure aggregation or differential
  privacy, no ``sums`` reply leaves in the clear;
- **work before work**: typed arguments with caps, and a deadline the site
  functions' loops check as they go.

:class:`SiteContext` is what an operation's declared checks see of the site: its
policy's rules (as attributes), its name, whether the reply leaves masked, and the
means to sign a release with the site's certificate or check another site's.
"""

import numbers
import re

import numpy as np

from ..federation.operations import COUNTS, Refused

#: what the analyst reads for each rule: fixed, with the policy's own values only
RULE_TEXTS = {
    "analysts": "this analyst is not allowed at this site",
    "operations": "this operation is not served by this site",
    "access": "this analyst may not use this dataset or operation here",
    "datasets": "no such dataset is served here",
    "columns": "a column the request names is not one of the dataset's, or not "
               "allowed in that role",
    "message": "the request does not have the form this operation takes",
    "sessions": "no such session for this analyst",
    "engine": "this is not served on a dataset the site keeps on an engine (it needs all "
              "the rows at once: a sort or a shuffle)",
    "require": "this site requires {require}: this request would release numbers "
               "computed from this site's rows alone (only masked sums of a protected "
               "analysis leave it)",
    "min_rows": "a number would depend on fewer than {min_rows} rows here (the site's "
                "min_rows), or a row step would keep or leave out fewer",
    "min_level_count": "a level, class, time or interval would hold fewer than "
                       "{min_level_count} rows or events here (the site's "
                       "min_level_count)",
    "dominance": "a released number would be dominated by fewer than {min_rows} rows "
                 "(more than {dominance} of its absolute total: the site's dominance "
                 "rule)",
    "row_sets": "with the row sets this site has answered over before, this request's "
                "rows would single out fewer than {min_rows} rows; analyses that share "
                "one row set are answered (the site's officer can declare the dataset's "
                "analysis population: population = \"complete\")",
    "allow_exact_quantiles": "this needs single rows' values (exact quantiles), which "
                             "this site does not release (allow_exact_quantiles)",
    "allow_event_times": "this needs exact event times, which this site does not release "
                         "(allow_event_times); use a time grid or strata='site'",
    "finer_sums": "this operation releases sums over a few rows by design; this site "
                  "serves it only inside masked sums (finer_sums)",
    "formulas": "this formula term is not one this site serves (formulas = {formulas})",
    "domains": "a transform is not finite on a column's declared domain (a column "
               "without a declared domain ranges over the reals)",
    "losses": "models with this loss are not allowed at this site",
    "solvers": "this solver is not allowed at this site",
    "max_parameters_per_row": "the model has more parameters per row than this site "
                              "allows ({max_parameters_per_row})",
    "max_local_iterations": "the request asks for more iterations than this site's "
                            "{max_local_iterations}",
    "max_request_seconds": "the request ran past this site's {max_request_seconds:g} s "
                           "and was stopped",
    "fit_state": "this site holds no state of the fit the request names (restarted, "
                 "evicted, or never sent): send the fit's context and model whole",
    "fit_state_mb": "a fit's state here would hold more than this site's fit_state_mb = "
                    "{fit_state_mb:g} MB",
    "min_sites": "fewer verified sites than this site requires ({min_sites})",
    "consortium": "the masked sum's sites are not this dataset's consortium, all present "
                  "(secure aggregation over other sets of sites would single sites out)",
    "differential_privacy": "the step's differential privacy is not what this site "
                            "requires",
    "epsilon_budget": "this dataset's privacy budget at this site would be passed",
    "max_delta": "delta is above this site's max_delta ({max_delta:g})",
    "min_noise_multiplier": "the noise is below this site's min_noise_multiplier "
                            "({min_noise_multiplier:g})",
    "data": "the site's rows do not meet this operation's requirements (for example a "
            "missing, non-numeric or infinite value where numbers are needed, a target "
            "outside the model's range, a value beyond secure aggregation's fixed-point "
            "range, a group or stratum too small); the site's officer can read which in its "
            "log",
    "internal": "the operation failed at the site (the site's officer can read why in "
                "its log)",
}


def rule_text(rule, policy):
    """The fixed text of ``rule`` with the policy's own values."""
    template = RULE_TEXTS.get(rule, "the site's rule {rule!r} refused the request")
    values = {k: getattr(policy, k) for k in ("min_rows", "min_level_count", "dominance",
                                               "max_parameters_per_row",
                                               "max_local_iterations",
                                               "max_request_seconds", "min_sites",
                                               "max_delta", "min_noise_multiplier",
                                               "formulas", "fit_state_mb")}
    values["require"] = " and ".join(r.replace("_", " ") for r in policy.require) or "none"
    return template.format(rule=rule, **values)


def shown_columns(columns, allowed):
    """The column names a refusal may show: those the request named or the dataset
    declares (never a value that happens to look like a name)."""
    return [c for c in dict.fromkeys(columns) if c in allowed][:8]


def public_message(site, rule, operation, *, policy, columns=(), detail=None):
    """What the analyst reads of a refusal or an error (see the module docstring)."""
    text = detail if detail is not None else rule_text(rule, policy)
    where = f" (columns: {', '.join(repr(c) for c in columns)})" if columns else ""
    op = f"{operation}: " if operation else ""
    return f"site {site!r} refused: {op}{text}{where} (policy rule {rule!r})."


def mentioned_columns(text, allowed):
    """The declared column names a detail mentions (quoted), for a fixed text."""
    quoted = set(re.findall(r"'([^']{1,256})'", str(text)))
    return [c for c in allowed if c in quoted]


class SiteContext:
    """What an operation's declared checks and reply rules see of the site.

    The policy's rules are attributes (``min_rows``, ``allow_exact_quantiles``...);
    ``name`` is the site's, ``dataset`` the request's dataset name, ``masked`` says
    whether the reply leaves only inside a masked sum; ``sign(payload)`` signs with the
    site's certificate key, ``verify(certificate, signature, payload, site)`` checks a
    release another site signed, ``memo`` is the service's memory between requests;
    ``declared`` is the request's dataset as the site declares it (its weights, domains,
    transforms).
    """

    def __init__(self, policy, *, name, dataset=None, masked=False, signer=None, memo=None):
        self._policy, self.name, self.dataset, self.masked = policy, name, dataset, masked
        self._signer = signer
        self.memo = {} if memo is None else memo
        self.exact = None  # the flag under which a request releases single rows' values
        self.declared = None  # the request's dataset as the site declares it (DatasetConfig)

    def release_exact(self, flag):
        """This request releases single rows' values by design, as the policy's ``flag``
        (``allow_exact_quantiles``) allows: no dominance audit (it would refuse them);
        refused where the flag is not set."""
        if not getattr(self._policy, flag):
            raise Refused(flag, f"this request needs {flag}", public=True)
        self.exact = flag

    def __getattr__(self, key):
        if key.startswith("_"):
            raise AttributeError(key)
        return getattr(self._policy, key)

    @property
    def sign(self):
        return None if self._signer is None else self._signer.sign

    @property
    def certificate(self):
        return None if self._signer is None else self._signer.certificate

    def verify(self, certificate, signature, payload, site):
        self._signer.verify(certificate, signature, payload, site)


def check_counts(operation, reply):
    """A ``counts`` reply holds integer counts where its declaration says (every number,
    unless it names the count parts): a weight sum or a mean is refused."""
    parts = operation.counts(reply) if operation.counts is not None else [reply]
    if not all(_integral(part) for part in parts):
        raise Refused("message", f"{operation.name} declares counts but its reply holds "
                                 "other numbers")


def _integral(value):
    if value is None or isinstance(value, (str, bytes, bool, np.bool_)):
        return True
    if isinstance(value, dict):
        return all(_integral(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_integral(v) for v in value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuUSO":
            return value.dtype.kind != "O" or all(_integral(v) for v in value.ravel())
        finite = value[np.isfinite(value)] if value.dtype.kind == "f" else value
        return bool(np.all(finite == np.round(finite)))
    if isinstance(value, numbers.Real):
        return not np.isfinite(value) or float(value).is_integer()
    return True


def release_rule(operation, release, policy):
    """Refuse, before it runs, what the class of a reply may not release here: sums in
    the clear where the policy requires protection; finer sums the policy does not allow
    by name; an operation needing a flag the policy does not set."""
    if release == "sums" and policy.require:
        raise Refused("require", f"{operation.name} releases sums of this site's rows")
    if operation.finer is not None and operation.name not in policy.finer_sums:
        raise Refused("finer_sums", f"{operation.name} releases finer sums by design "
                      f"({operation.finer})", public=True)
    check_flag(operation, policy)


def check_flag(operation, policy):
    """An operation that needs a policy flag (``allow_exact_quantiles``), refused with its
    declared reason where the flag is not set (inside a masked sum too)."""
    if operation.requires is not None:
        flag, _, why = operation.requires.partition(":")
        if not getattr(policy, flag):
            raise Refused(flag, f"{operation.name} needs {flag}: {why.strip()}", public=True)


def is_counts(release):
    return release == COUNTS


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
                              f"{count:g}) asks for more than this site's {most} iterations",
                              public=True)
        children = list(vars(value).values()) if hasattr(value, "__dict__") else []
    else:
        return
    for child in children:
        check_work(child, most, seen)
