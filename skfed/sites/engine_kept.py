"""Requests whose rows an engine keeps on its workers between requests (boosting).

A boosting fit keeps its state at a site between requests (its binned rows, the raw
predictions of the trees so far, the rows of the current nodes: the fit state of
:mod:`skfed.ensemble._fit_state`, keyed by the rows object it was computed on). On a
dataset on an engine (:mod:`skfed.sites.engine`) each partition's rows of a request
are built once on their worker and kept there (a Dask future the site's kept rows
hold), so each partition keeps its own part of the state beside its rows; they go
when the site drops the request's rows.

A declared check that reads rows (wrapped by
:func:`skfed.federation.whole_counts.on_partitions`) is not run at the site: the
engine's rows defer it, and each partition runs the checks, then the function, on
its kept rows. What the checks count (a node's rows, a level's rows) is recorded
there and decided on the whole dataset (:func:`skfed.federation.whole_counts.decide`)
before the dominance audit, as an in-memory site decides its checks before its audit.
The site's cap of a fit's state holds over the partitions together: each
partition's state is capped at its share of the rows of ``fit_state_mb`` (the state
is made of per-row arrays). An analyst's states are capped by ``analyst_state_mb`` in
each worker process (in a local cluster's one process, as in memory), the partitions
of one request's rows counting as one state of the analyst's.

What the function declares of a masked reply (its public per-row bounds,
:func:`skfed.privacy.masked_sums.declare_row_bounds`) is declared again at the site,
where the reply is masked: the same limbs as in memory. This module imports no
estimator and nothing of :mod:`skfed.sites.engine` (which uses it).
"""

import numpy as np

from ..federation import dominance, whole_counts
from ..federation.combine import tree_combine
from ..federation.operations import Refused, Requester, current_requester, requester
from ..privacy.masked_sums import declare_row_bounds, row_bounds


def deferred_checks(operation):
    """Whether ``operation``'s declared checks read rows (they then run on partitions)."""
    return any(getattr(check, "on_partitions", False) for check in operation.checks)


# --- on the workers -----------------------------------------------------------------
class Request:
    """A request's parts, as one object (Dask would look inside dicts and lists for
    its own keys)."""

    def __init__(self, checks, values, names, rules, function):
        self.checks, self.values, self.names = tuple(checks), dict(values), list(names)
        self.rules, self.function = rules, function


def run_checked(rows, who, plan, *, request, audit):
    """On a partition's kept rows, for the analyst ``who`` (a fit's state capped at
    this partition's share), with its part of the pairwise sums' ``plan``: the
    declaration's checks (their counts recorded), then the function under the
    partition's recording audit (or none). A refusal returns as a value."""
    checks, names, rules, function = request.checks, request.names, request.rules, \
        request.function
    values = dict(request.values)  # a check may rebuild a value (a scored model) here
    try:
        with requester(who), whole_counts.Recording(plan) as counts:
            with dominance.suspended():
                for check in checks:
                    check(rows, values, rules)
            args = [values[name] for name in names]
            with row_bounds() as bounds:  # a masked reply's public per-row bounds
                if audit is None:
                    with dominance.suspended():
                        out, records = function(rows, *args), None
                else:
                    with dominance.Recording(*audit) as recording:
                        out = function(rows, *args)
                    records = recording.records
            return "ok", (out, counts.records, bounds, counts.floats, counts.pairwise), \
                records
    except Refused as exc:
        return "refused", (exc.rule, exc.detail, exc.public), None


class PartRules:
    """What a check on a partition sees of the site's rules (a check's ``rules``): the
    policy's values, the request's dataset and whether it is masked; no key to sign
    with, and nothing remembered between requests."""

    sign = certificate = None

    def __init__(self, rules):
        self._policy = rules._policy
        self.name, self.dataset, self.masked = rules.name, rules.dataset, rules.masked
        self.exact, self.declared, self.memo = rules.exact, rules.declared, {}

    def __getattr__(self, key):
        if key.startswith("_"):
            raise AttributeError(key)
        return getattr(self._policy, key)

    def verify(self, *args):
        raise Refused("engine", "a release another site signed is not checked on a "
                                "dataset on an engine", public=True)

    def release_exact(self, flag):
        raise Refused("engine", f"a request under {flag} is not checked on a partition",
                      public=True)


# --- at the site ----------------------------------------------------------------------
def run_kept(rows, operation, pending):
    """``operation`` on the kept partitions of ``rows`` (:class:`~.engine.EngineRows`),
    its deferred checks (``pending``: ``(checks, values, rules)``) run there first, their
    counts decided on the whole dataset, then its audit merged, its replies combined."""
    checks, values, rules = pending
    engine = rows.engine
    kept, shares, sizes = rows.kept()
    parts, tree = whole_counts.pairwise_plan(sizes)
    who = current_requester()
    # a fit's state capped by the partitions' shares of its rows; an analyst's states
    # by the site's cap in each worker process (all of them in a local cluster's)
    whos = [Requester(who.analyst, fit_state_mb=who.fit_state_mb * share,
                      analyst_state_mb=who.analyst_state_mb) for share in shares]
    context = {"request": Request(checks, values, [a.name for a in operation.arguments],
                                  PartRules(rules), operation.function)}
    audit = dominance.active()
    spec = None if audit is None else (audit.min_rows, audit.share)
    replies = engine._replies(run_checked, kept, (whos, parts), audit=spec, **context)
    whole_counts.decide([r[1][1] for r in replies])
    if audit is not None:
        wanted = dominance.merge(audit, [r[2] for r in replies])
        while wanted:  # what the bounds could not clear: a dearer bound, then exact
            again = engine._replies(run_checked, kept, (whos, parts),
                                    audit=(*spec, wanted), **context)
            wanted = dominance.merge(audit, [r[2] for r in again], wanted)
    declared(r[1][2] for r in replies)
    if whole_counts.any_order_exact([r[1][3] for r in replies]):
        reply = tree_combine(operation.combine, [r[1][0] for r in replies])
    else:
        reply = continued(rows, operation, context["request"], whos, replies[0][1][0])
    return pairwise(reply, tree, [r[1][4] for r in replies])


def pairwise(reply, tree, recorded):
    """The reply's fields that are numpy's pairwise sums of the rows' terms
    (:func:`skfed.federation.whole_counts.pairwise_sum`), summed as numpy sums all the
    dataset's terms in one array: the in-memory site's bits."""
    for name in recorded[0] if recorded else ():
        reply[name] = whole_counts.finish_pairwise(tree, [r[name] for r in recorded])
    return reply


def continued(rows, operation, request, whos, first):
    """The reply whose float sums would round differently added over partitions than in
    one process: the operation's ``continued`` function on the partitions one after the
    other, each continuing the previous ones' sums in row order (the in-memory site's
    additions, in its order), from the first partition's own reply ``first`` (its sums
    from zero, in its row order: already those)."""
    function = getattr(operation.function, "continued", None)
    if function is None:
        raise Refused("engine", f"{operation.name}: its float sums would round differently "
                                "over partitions than over the whole dataset", public=True)
    client, reply = rows.engine.client, first
    for part, who in zip(rows.kept()[0][1:], whos[1:]):
        status, value = client.submit(run_continued, part, who, request=request,
                                      function=function, seed=reply, pure=False).result()
        if status == "refused":
            raise Refused(value[0], value[1], public=value[2])
        reply = value
    return reply


def run_continued(rows, who, *, request, function, seed):
    """On a partition's kept rows: ``function(rows, seed, *args)``, the checks and the
    audit already passed on every partition."""
    args = [request.values[name] for name in request.names]
    try:
        with requester(who), dominance.suspended(), row_bounds():
            return "ok", function(rows, seed, *args)
    except Refused as exc:
        return "refused", (exc.rule, exc.detail, exc.public)


def declared(bounds):
    """The per-row bounds the partitions' function declared (public facts of the
    analysis, the same in each), declared again at the site, where a masked reply is
    coded: the same limbs as an in-memory site's."""
    merged = {}
    for part in bounds:
        for field, bound in part.items():
            merged[field] = max(bound, merged.get(field, bound))
    if merged:
        declare_row_bounds(**merged)


def row_shares(sizes):
    """Each partition's share of the rows (its part of the caps)."""
    sizes = np.asarray(sizes, dtype=np.float64)
    return (sizes / sizes.sum()).tolist() if sizes.sum() > 0 else [1.0] * len(sizes)
