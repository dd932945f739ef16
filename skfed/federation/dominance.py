"""The dominance rule: no sum a site releases in the clear is dominated by a few rows.

Statistical agencies publish a table cell only if no few respondents make up most
of it (the *(n, k) dominance rule*). A site service applies the same rule to every
coordinate of every sum it releases in the clear: the largest ``min_rows - 1``
absolute contributions to a released number may not make up more than ``share``
(the policy's ``dominance``, for example 0.95) of the sum of its absolute
contributions. So a number depends on at least ``min_rows`` rows that matter, and
an analyst's constants or model parameters that make near-indicators no syntax rule
sees (``I(age == a) * sbp + 1e-300``, a logistic step at ``beta = k (age - c)``
whose weights are about ``e**-50`` on every row but one) are refused: one row's
value then *is* the sum.

The rule is checked where the sums are formed, by the functions that form them
(:func:`check_rows`, :func:`check_products`), while an audit is active: the site's
gate opens one (:func:`audit`) around an operation whose reply is sums in the clear.
Elsewhere (in process, on Dask, inside a masked sum) the checks do nothing and cost
nothing, so the numbers are the same in every home.

:func:`check_products` audits the coordinates of ``A' diag(w) B`` (a Gram, a
gradient, a Hessian block) without forming every contribution: by the
rearrangement inequality the largest ``k`` of the products ``|a_ij| |w_i| |b_il|``
sum to at most the sum of the products of the ``k`` largest of each factor, sorted
separately, and their total is one product of absolute values; only coordinates
where that bound fails are checked exactly.
"""

import contextvars
import math

import numpy as np
import scipy.sparse as sp

from .operations import Refused

_ACTIVE = contextvars.ContextVar("skfed_dominance_audit", default=None)

#: the most entries of a factor densified for an audit (a larger sparse design is
#: refused rather than audited in pieces)
MAX_AUDIT_ENTRIES = 1 << 27


class Audit:
    """One request's dominance audit: ``min_rows`` and the largest ``share`` the
    ``min_rows - 1`` largest contributions may hold; ``checks`` counts the sums seen."""

    def __init__(self, min_rows, share):
        self.k = max(int(min_rows) - 1, 0)
        self.min_rows, self.share = int(min_rows), float(share)
        self.checks = 0

    def __enter__(self):
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.reset(self._token)
        return False

    def refuse(self, what):
        raise Refused("dominance", f"{what}: a released number is dominated by fewer than "
                                   f"{self.min_rows} rows (more than {self.share:g} of its "
                                   "absolute total)")


def audit(min_rows, share):
    """``with audit(min_rows, share):`` — check every sum formed inside."""
    return Audit(min_rows, share)


def active():
    """The audit of the current request, or ``None`` (no check: in process, on Dask, in
    a masked sum)."""
    return _ACTIVE.get()


class suspended:
    """``with suspended():`` — no audit inside (a sum that leaves only masked, or a
    site-internal computation that releases nothing)."""

    def __enter__(self):
        self._token = _ACTIVE.set(None)
        return self

    def __exit__(self, *exc):
        _ACTIVE.reset(self._token)
        return False


def _dense_abs(A):
    if sp.issparse(A):
        if A.shape[0] * A.shape[1] > MAX_AUDIT_ENTRIES:
            raise Refused("dominance", "a design too large to audit at this site")
        A = A.toarray()
    A = np.abs(np.asarray(A, dtype=np.float64))
    return A.reshape(A.shape[0], math.prod(A.shape[1:]))  # no rows: still q columns


def _top(A, k):
    """The ``k`` largest values of each column of ``A`` (``n x q``), largest first
    (zeros where a column has fewer than ``k`` rows)."""
    n = A.shape[0]
    if n == 0 or k == 0:
        return np.zeros((k, A.shape[1]))
    if n > k:
        A = np.partition(A, n - k, axis=0)[n - k:]
    out = -np.sort(-A, axis=0)
    if out.shape[0] < k:
        out = np.vstack([out, np.zeros((k - out.shape[0], A.shape[1]))])
    return out


def _dominated(top, total, share):
    """Coordinates whose ``top`` contributions pass ``share`` of their ``total`` (a
    coordinate with no contribution is an exact zero, and released), or whose total is
    not finite: an infinity or NaN is decided by the rows that overflow (a model's
    parameters can choose them), so it is not released either."""
    return ~np.isfinite(total) | ((total > 0) & (top > share * total * (1 + 1e-12)))


class FixedFactor:
    """A factor that stays the same between audits (a fit session's design at a site):
    its columns' largest absolute entries are found once per ``k``, and its absolute
    values are kept while they are small (:data:`MAX_KEPT_BYTES`), so a round's audit
    of ``X' r`` sorts only ``r``. The owner promises not to change ``A``."""

    def __init__(self, A):
        self.A = A
        self._abs = None
        self._tops = {}

    def absolute(self):
        if self._abs is not None:
            return self._abs
        absA = _dense_abs(self.A)
        if absA.nbytes <= MAX_KEPT_BYTES:
            self._abs = absA
        return absA

    def top(self, k, absA=None):
        if k not in self._tops:
            self._tops[k] = _top(self.absolute() if absA is None else absA, k)
        return self._tops[k]

    def maxima(self, absA=None):
        """The largest absolute entry of each column (zeros without rows)."""
        if "max" not in self._tops:
            absA = self.absolute() if absA is None else absA
            self._tops["max"] = (absA.max(axis=0) if absA.shape[0]
                                 else np.zeros(absA.shape[1]))
        return self._tops["max"]


#: the largest absolute copy of a fixed factor kept between audits (bytes)
MAX_KEPT_BYTES = 64 << 20


def _factor(A):
    return A if isinstance(A, FixedFactor) else FixedFactor(A)


def check_rows(contributions, what="a sum"):
    """Audit released sums from their per-row contributions (``(n,)`` or ``(n, q)``:
    the ``q`` numbers released are the column sums)."""
    current = _ACTIVE.get()
    if current is None:
        return
    current.checks += 1
    C = _dense_abs(contributions)
    if isinstance(current, Recording):  # a part of the rows: its totals and largest
        current.record_rows(what, C)
        return
    total = C.sum(axis=0)
    # k times the largest contribution bounds the k largest: most sums pass on it unsorted
    quick = current.k * (C.max(axis=0) if C.shape[0] else np.zeros(C.shape[1]))
    dominated = _dominated(quick, total, current.share)
    if dominated.any():
        suspects = np.flatnonzero(dominated)
        top = _top(C[:, suspects], current.k).sum(axis=0)
        if np.any(_dominated(top, total[suspects], current.share)):
            current.refuse(what)


def check_groups(values, groups, n_groups, what="a sum per group", at_or_after=False):
    """Audit per-group sums of one value a row (``values``, ``(n,)``) without forming
    the ``n x n_groups`` contributions: group ``j``'s sum takes the rows of group ``j``
    (a histogram, events at a time), or with ``at_or_after`` those of every group
    ``>= j`` (the rows at risk at the ``j``-th time)."""
    current = _ACTIVE.get()
    if current is None:
        return
    current.checks += 1
    v = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    g = np.asarray(groups, dtype=np.int64).ravel()
    if isinstance(current, Recording):  # a part of the rows: per group, its sum and largest
        current.record_groups(what, v, g, n_groups, at_or_after)
        return
    if v.size == 0:
        return
    total = np.bincount(g, weights=v, minlength=n_groups)
    sg, sv, rank = _ranked(v, g, n_groups)
    keep = rank < current.k
    if not at_or_after:
        top = np.bincount(sg[keep], weights=sv[keep], minlength=n_groups)
    else:  # the k largest of groups >= j from those of j and of groups > j
        total = np.cumsum(total[::-1])[::-1]
        top, carried = np.zeros(n_groups), np.zeros(0)
        kept_g, kept_v = sg[keep], sv[keep]
        bounds = np.searchsorted(kept_g, np.arange(n_groups + 1))
        for j in range(n_groups - 1, -1, -1):
            merged = np.concatenate([carried, kept_v[bounds[j]:bounds[j + 1]]])
            carried = -np.sort(-merged)[:current.k]
            top[j] = carried.sum()
    if np.any(_dominated(top, total, current.share)):
        current.refuse(what)


def _ranked(v, g, n_groups):
    """The values sorted by group, largest first within it, and each one's rank there."""
    order = np.lexsort((-v, g))
    sg, sv = g[order], v[order]
    starts = np.searchsorted(sg, np.arange(n_groups))
    return sg, sv, np.arange(sg.size) - starts[sg]


def _group_tops(v, g, n_groups, k):
    """``(total, top)``: each group's sum of ``v`` and its ``k`` largest values (``k x
    n_groups``, largest first, zeros where a group has fewer)."""
    total = np.bincount(g, weights=v, minlength=n_groups)
    top = np.zeros((k, n_groups))
    if v.size and k:
        sg, sv, rank = _ranked(v, g, n_groups)
        keep = rank < k
        top[rank[keep], sg[keep]] = sv[keep]
    return total, top


def check_products(A, B, weights=None, what="a sum of products"):
    """Audit the coordinates of ``A' diag(weights) B`` (``A``: ``n x p``, ``B``: ``n x
    q``; ``weights`` ``(n,)``, ones if ``None``), each coordinate's contributions being
    ``a_ij w_i b_il``. ``A`` or ``B`` may be a :class:`FixedFactor` (its sorting done
    once)."""
    current = _ACTIVE.get()
    if current is None:
        return
    current.checks += 1
    fa, fb = _factor(A), _factor(B)
    absA = fa.absolute()
    absB = absA if fb is fa else fb.absolute()
    w = np.ones(absA.shape[0]) if weights is None else np.abs(
        np.asarray(weights, dtype=np.float64)).ravel()
    total = absA.T @ (absB * w[:, None])
    k = current.k
    # three bounds, each tighter and dearer: k times the largest factors, the
    # rearrangement bound of the sorted factors, the exact contributions
    w_max = w.max() if w.size else 0.0
    if isinstance(current, Recording):
        current.record_products(what, fa, fb, absA, absB, w, total, w_max)
        return
    quick = k * np.outer(fa.maxima(absA) * w_max, fb.maxima(absB))
    suspects = _dominated(quick, total, current.share)
    if suspects.any():
        bound = (fa.top(k, absA) * _top(w[:, None], k)).T @ fb.top(k, absB)
        suspects &= _dominated(bound, total, current.share)
    for j in np.flatnonzero(suspects.any(axis=1)):  # exact, one row of coordinates at once
        cols = np.flatnonzero(suspects[j])
        exact = absA[:, j, None] * w[:, None] * absB[:, cols]
        if np.any(_dominated(_top(exact, k).sum(axis=0), total[j, cols], current.share)):
            current.refuse(what)


# --- an audit merged across parts of the rows (a site's dataset on an engine) -----------
class Recording(Audit):
    """The audit of one part of a dataset's rows (a partition on an engine): each check
    records, in order, its sums' totals and the largest contributions (for products,
    the factors' largest entries) and decides nothing; the site merges the parts'
    records and decides once on the whole dataset (:func:`merge`).

    A product's check records its factors' largest entries only (the first bound);
    ``wanted`` asks, per check, for more on a further pass of the same function:
    ``BOUNDS`` (each factor's ``k`` largest entries: the rearrangement bound) or a
    mask of coordinates (their exact ``k`` largest contributions), as a one-process
    audit goes on to them only where the bound before could not clear a coordinate."""

    def __init__(self, min_rows, share, wanted=None):
        super().__init__(min_rows, share)
        self.records, self.wanted = [], dict(wanted or {})

    def record_rows(self, what, C):
        """A sum of rows: its totals and largest contribution (its ``k`` largest on a
        further pass)."""
        want = self.wanted.get(self.checks - 1)
        maxima = C.max(axis=0) if C.shape[0] else np.zeros(C.shape[1])
        self.records.append(("rows", what, _top(C, self.k) if want is not None else None,
                             C.sum(axis=0), maxima))

    def record_groups(self, what, v, g, n_groups, at_or_after):
        """Per-group sums of one value a row: each group's total and its ``k`` largest
        values (the rows at or after a group are gathered on the whole, in
        :func:`merge`)."""
        total, top = _group_tops(v, g, int(n_groups), self.k)
        self.records.append(("groups", what, {"total": total, "top": top,
                                              "after": bool(at_or_after)}))

    def record_products(self, what, fa, fb, absA, absB, w, total, w_max):
        k, want = self.k, self.wanted.get(self.checks - 1)
        record = {"total": total, "max_a": fa.maxima(absA), "max_b": fb.maxima(absB),
                  "max_w": w_max}
        if isinstance(want, str):
            record.update(top_a=fa.top(k, absA), top_b=fb.top(k, absB),
                          top_w=_top(w[:, None], k)[:, 0])
        elif want is not None:  # k x p x q, zeros off the coordinates asked for
            suspects = np.asarray(want, dtype=bool)
            exact = np.zeros((k,) + suspects.shape)
            for j in np.flatnonzero(suspects.any(axis=1)):
                cols = np.flatnonzero(suspects[j])
                exact[:, j, cols] = _top(absA[:, j, None] * w[:, None] * absB[:, cols], k)
            record["exact"] = exact
        self.records.append(("products", what, record))


#: what a further pass records of a product's check: its factors' largest entries
BOUNDS = "bounds"


def _stacked_top(tops, k):
    return _top(np.concatenate(tops, axis=0), k)


def merge(audit, parts, wanted=None):
    """Decide the checks the parts recorded (``parts``: each part's records, in the
    same order) as one audit of all their rows would: refuse through ``audit``, or
    return ``{check: what}`` that a further pass of the same function must record
    (:class:`Recording`'s ``wanted``; then call again with it), ``{}`` when all pass.
    The largest ``k`` contributions of the whole are among the parts' largest ``k``,
    and the factors' largest entries likewise, so each bound is the one-process
    audit's; a further pass decides only the checks it was asked for."""
    if not parts:
        return {}
    counts = {len(p) for p in parts}
    kinds = {tuple((r[0], _shape(r)) for r in p) for p in parts}
    if len(counts) != 1 or len(kinds) != 1:  # a check one part formed and another did not
        raise Refused("dominance", "the parts of the dataset formed different sums; "
                                   "the audit cannot decide them as one")
    if wanted is None:
        audit.checks += counts.pop()
    more = {}
    for index, records in enumerate(zip(*parts)):
        kind, what = records[0][0], records[0][1]
        if wanted is not None and index not in wanted:
            continue  # decided on an earlier pass
        if kind == "groups":  # decided on the first pass: its records hold the largest
            _groups_step(audit, [r[2] for r in records], what)
            continue
        if kind == "rows":
            step = _rows_step(audit, records, wanted is not None, what)
            if step is not None:
                more[index] = step
            continue
        step = _product_step(audit, [r[2] for r in records],
                             None if wanted is None else wanted[index], what)
        if step is not None:
            more[index] = step
    return more


def _shape(record):
    return np.shape(record[3]) if record[0] == "rows" else np.shape(record[2]["total"])


def _groups_step(audit, records, what):
    """Per-group sums, merged: each group's total added over the parts and its ``k``
    largest among the parts' ``k`` largest; with ``after``, group ``j``'s sum over the
    groups ``>= j`` (the rows at risk), its ``k`` largest carried down from the last
    group, as :func:`check_groups` does in one process."""
    if len({r["after"] for r in records}) != 1:
        raise Refused("dominance", "the parts of the dataset formed different sums; "
                                   "the audit cannot decide them as one")
    total = np.sum([r["total"] for r in records], axis=0)
    top = _stacked_top([r["top"] for r in records], audit.k)
    largest = top.sum(axis=0)
    if records[0]["after"]:
        total = np.cumsum(total[::-1])[::-1]
        carried = np.zeros(0)
        for j in range(top.shape[1] - 1, -1, -1):
            carried = -np.sort(-np.concatenate([carried, top[:, j]]))[:audit.k]
            largest[j] = carried.sum()
    if np.any(_dominated(largest, total, audit.share)):
        audit.refuse(what)


def _rows_step(audit, records, asked, what):
    """A sum of rows, merged: refused, passed, or ``BOUNDS`` (the next pass records
    each part's ``k`` largest contributions) where ``k`` times the largest could not
    clear it."""
    total = np.sum([r[3] for r in records], axis=0)
    if not asked:
        quick = audit.k * np.max([r[4] for r in records], axis=0)
        return BOUNDS if np.any(_dominated(quick, total, audit.share)) else None
    top = _stacked_top([r[2] for r in records], audit.k).sum(axis=0)
    if np.any(_dominated(top, total, audit.share)):
        audit.refuse(what)
    return None


def _product_step(audit, records, asked, what):
    """A product's check, merged: refused, passed (``None``), or what the next pass
    must record (``BOUNDS``, then the coordinates to check exactly)."""
    k, share = audit.k, audit.share
    total = np.sum([r["total"] for r in records], axis=0)
    if not np.all(np.isfinite(total)):
        audit.refuse(what)
    if asked is None:  # k times the largest of each factor
        max_a = np.max([r["max_a"] for r in records], axis=0)
        max_b = np.max([r["max_b"] for r in records], axis=0)
        max_w = max(r["max_w"] for r in records)
        suspects = _dominated(k * np.outer(max_a * max_w, max_b), total, share)
        return BOUNDS if suspects.any() else None
    if isinstance(asked, str):  # the rearrangement bound of the sorted factors
        top_w = _stacked_top([r["top_w"][:, None] for r in records], k)
        bound = (_stacked_top([r["top_a"] for r in records], k) * top_w).T @ \
            _stacked_top([r["top_b"] for r in records], k)
        suspects = _dominated(bound, total, share)
        # below the first bound: its suspects are among the first's, as in one process
        return suspects if suspects.any() else None
    mask = np.asarray(asked, dtype=bool)
    top = _stacked_top([r["exact"] for r in records], k).sum(axis=0)
    if np.any(_dominated(top[mask], total[mask], share)):
        audit.refuse(what)
    return None
