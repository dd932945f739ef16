"""A site's dataset on an engine: Parquet partitions read by a Dask cluster the site runs.

A dataset declared ``engine = "dask"`` (``[datasets.NAME]`` of ``site.toml``) is a
set of Parquet files (``path`` a glob), one partition each, that the workers of a
Dask cluster read and keep (``scheduler = "host:port"``, or ``"local"``: a cluster
in the site's own process). The rows never gather in the site's process: a request
runs as a map over the partitions, each an in-memory
:class:`~skfed.data.site.SiteData` running the *same* declared site function, and
the replies combine as the operation declares (``combine=``,
:func:`skfed.federation.operations.site_operation`), summed pairwise in partition
order (a tree, so that the order of arrival changes nothing).

The gate is the site's, on the whole dataset: ``min_rows`` on the request's rows
counted over every partition, a reply's rules (``min_level_count``) on the combined
reply, and the dominance audit merged across partitions: each partition records each
check's totals and largest contributions (:class:`~skfed.federation.dominance.Recording`)
and the site decides once (:func:`~skfed.federation.dominance.merge`), as an audit
of all the rows in one process would.

A fit session keeps its client objective per partition, on the workers; the
site's session holds an :class:`~skfed.sites.engine_objective.EngineObjective`
whose evaluations (loss, gradient, Hessian, normal equations, curvature products,
smoothness constants) are sums of the partitions'.

Rows have a stable global index (partition offset + row, partitions in file
order, ``meta["row_ids"]``): a held-out part is drawn over it as an in-memory
site draws it. An operation not declared to combine is refused with the reason
(:data:`NEEDS_ALL_ROWS`), and so are row steps.
"""

import glob
import logging
import threading

import numpy as np
import pandas as pd

from ..data.site import SiteError, held_out_mask, site_rows
from ..data.sources import split_table
from ..federation import dominance
from ..federation.combine import Combine, tree_combine
from ..federation.operations import Refused
from .engine_kept import deferred_checks, row_shares, run_kept
from .engine_objective import EngineObjective, _audited, _describe_objective

_LOG = logging.getLogger("skfed.site")

#: why an operation an engine does not serve needs all the rows at once, by the start
#: of its name (the first that matches); the others: no declared combination
NEEDS_ALL_ROWS = (
    ("fit.cox", "a Cox model's risk sets need the rows sorted by time across partitions "
                "(a sort)"),
    ("survival.", "risk sets need the rows sorted by time across partitions (a sort)"),
    ("stats.describe", "its quantiles and small-count hiding need whole columns (a sort)"),
    ("mixed.", "a group's rows may span partitions (a shuffle by group)"),
    ("glmm.", "a group's rows may span partitions (a shuffle by group)"),
    ("gee.", "a cluster's rows may span partitions (a shuffle by cluster)"),
    ("boosting.sketch", "a sketch groups each feature's values in value order across "
                        "partitions (a sort); fit with binning='exact'"),
    ("evaluate.concordance", "concordance compares pairs of rows across partitions "
                             "(a sort)"),
)


def refusal(operation):
    """The refusal of an operation an engine does not serve, naming the reason."""
    for start, why in NEEDS_ALL_ROWS:
        if operation.name.startswith(start):
            break
    else:
        why = "its reply is not declared to combine across partitions (combine=)"
    return Refused("engine", f"{operation.name} is not served on a dataset on an engine: "
                             f"{why}", public=True)


# --- on the workers -----------------------------------------------------------------
def read_part(path, columns, domains, population):
    """One partition's rows, as :meth:`skfed.sites.rows.SiteRows.table` reads a table."""
    table = pd.read_parquet(path).rename(columns=str)
    if columns is not None:
        table = table[[c for c in table.columns if c in columns]]
    table = within_domains(table, domains)
    if population == "complete":
        table = table[~table.isna().any(axis=1)]
    return table.reset_index(drop=True)


def within_domains(table, domains):
    """A value outside its column's declared range reads as missing (a transform judged
    finite on the declared domain is then finite on every value it sees)."""
    for column, (low, high) in domains.items():
        if column in table.columns:
            values = pd.to_numeric(table[column], errors="coerce")
            table[column] = table[column].where((values >= low) & (values <= high))
    return table


def part_rows(frame, offset, site, reference, keep=None):
    """A partition's rows of a dataset reference, their global row index kept (``keep``:
    the partition's share of a held-out part's mask, drawn at the site)."""
    target, weight = reference.get("target"), reference.get("sample_weight")
    drop = [c for c in reference.get("drop") or () if c in frame.columns]
    rows = split_table(site, frame, target=target, sample_weight=weight, drop=drop,
                       offset=reference.get("offset"))
    targets = list(target) if isinstance(target, (list, tuple)) else [target]
    rows.meta.update(row_ids=offset + np.arange(len(frame)),
                     raw_columns=frozenset(frame.columns),
                     read={c for c in (*targets, weight, reference.get("offset"))
                           if c is not None})
    return rows if keep is None else site_rows(rows, np.asarray(keep, dtype=bool))


def run_on_rows(frame, offset, keep, *, site, reference, function, args, audit):
    return _audited(function, part_rows(frame, offset, site, reference, keep), args, audit)


def run_plain(frame, offset, keep, *, site, reference, function, args):
    """``function`` on a partition's rows, unaudited (a check's counts, decided on the
    whole dataset at the site)."""
    with dominance.suspended():
        return function(part_rows(frame, offset, site, reference, keep), *args)


def keep_part(frame, offset, keep, position, *, site, reference, group):
    """A partition's rows of a request, built once and kept on its worker (what a
    boosting fit's state there is kept beside), with their place among the request's
    rows (scikit-learn's binning draw counts over them) and the request's ``group``
    (its partitions' fit states count as one of the analyst's)."""
    rows = part_rows(frame, offset, site, reference, keep)
    rows.meta.update(position=int(position), kept=group)
    return rows


def positive_rows(frame, offset, keep, *, site, reference):
    rows = part_rows(frame, offset, site, reference, keep)
    return int(np.count_nonzero(rows.weights() > 0))


def _numeric_columns(rows):
    X = rows.X
    return [(c, np.asarray(X[c], dtype=np.float64)) for c in X.columns
            if X[c].dtype.kind in "biuf"]


def column_values(frame, offset, keep, *, site, reference):
    """Per numeric feature column, its first two distinct non-zero values here (an
    indicator-like column has one over the whole dataset)."""
    rows = part_rows(frame, offset, site, reference, keep)
    out = {}
    for c, v in _numeric_columns(rows):
        v = np.nan_to_num(v, nan=0.0)
        out[c] = np.unique(v[v != 0])[:2]
    return out


def column_supports(frame, offset, keep, *, site, reference, columns):
    """Each named column's support over the partition's rows (packed bits in its row
    order; a row the request left out is not in it)."""
    rows = part_rows(frame, offset, site, reference, keep)
    positions = np.asarray(rows.meta["row_ids"]) - offset
    out = []
    for c, v in _numeric_columns(rows):
        if c in columns:
            full = np.zeros(len(frame), dtype=bool)
            full[positions] = np.nan_to_num(v, nan=0.0) != 0
            out.append(np.packbits(full))
    return out


def open_part(frame, offset, keep, *, site, reference, function, args):
    """A partition's client objective (the declared ``fit.open`` function), kept on
    its worker."""
    with dominance.suspended():
        return function(part_rows(frame, offset, site, reference, keep), *args)


def set_total(objective, total):
    """The partition's objective divides by the whole dataset's weight sum: the
    partitions' means then add up to the dataset's."""
    objective.weight_sum = total
    return objective


def weight_total(objective):
    return float(np.sum(objective.sample_weight))


# --- at the site ----------------------------------------------------------------------
class DaskEngine:
    """One dataset's partitions on a Dask cluster (see the module docstring).

    Parameters
    ----------
    site : str
        The site's name (errors name it).
    conf : skfed.sites.policy.DatasetConfig
    """

    def __init__(self, site, conf):
        self.site, self.conf = site, conf
        self._client = self._cluster = None
        self._parts = None
        self._lock, self._loading = threading.Lock(), threading.Lock()

    @property
    def client(self):
        from distributed import Client, LocalCluster

        with self._lock:
            if self._client is None:
                if self.conf.scheduler == "local":  # threads in the site's process
                    # Dask always serves HTTP (its dashboard): on loopback only, any port
                    self._cluster = LocalCluster(
                        processes=False, n_workers=1, threads_per_worker=2,
                        dashboard_address="127.0.0.1:0",
                        worker_dashboard_address="127.0.0.1:0")
                    self._client = Client(self._cluster, set_as_default=False)
                else:
                    self._client = self._connected()
        return self._client

    def _connected(self):
        """A client of the configured scheduler, or a refusal the analyst can read: the
        cause (an address, a certificate the scheduler refused) goes to the site's log
        only, and the next request tries again."""
        from distributed import Client

        try:
            return Client(self.conf.scheduler, security=self._security(),
                          set_as_default=False)
        except Exception as exc:  # OSError, TimeoutError, ssl errors: all alike here
            _LOG.warning("dataset %r: the scheduler %s did not answer: %s: %s",
                         self.conf.name, self.conf.scheduler, type(exc).__name__, exc)
            raise Refused("engine", f"dataset {self.conf.name!r}: the cluster this site "
                                    "keeps it on did not answer (the site's officer finds "
                                    "why in the site's log)", public=True) from None

    def _security(self):
        """Mutual TLS to a ``tls://`` scheduler (the files of ``scheduler_ca``,
        ``scheduler_cert``, ``scheduler_key``), never falling back to the clear; ``None``
        (Dask's default, no TLS) for a scheduler the config reaches without it."""
        if self.conf.scheduler_tls is None:
            return None
        from distributed.security import Security

        ca, cert, key = (str(path) for path in self.conf.scheduler_tls)
        return Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key,
                        require_encryption=True)

    def parts(self):
        """``(futures, offsets, n_rows, columns)``: each non-empty partition's rows on a
        worker, in file order, and its first row's index in the dataset; the dataset's
        rows and its usable columns."""
        with self._loading:  # two first requests read the partitions once
            if self._parts is None:
                self._parts = self._load()
        return self._parts

    def _load(self):
        files = sorted(glob.glob(str(self.conf.path)))
        if not files:
            raise Refused("datasets", f"dataset {self.conf.name!r} could not be read",
                          public=True)
        c = self.conf
        futures = self.client.map(read_part, files, columns=c.columns, domains=c.domains,
                                  population=c.population, pure=False)
        try:
            sizes = self.client.gather(self.client.map(len, futures, pure=False))
        except Exception as exc:  # its message may hold a path: the service's log only
            _LOG.warning("dataset %r could not be read: %s", c.name, exc)
            raise Refused("datasets", f"dataset {c.name!r} could not be read",
                          public=True) from None
        kept = [(f, n) for f, n in zip(futures, sizes) if n > 0]
        offsets = np.concatenate([[0], np.cumsum([n for _, n in kept])[:-1]]).astype(int)
        return ([f for f, _ in kept], [int(o) for o in offsets], int(sum(sizes)),
                self._columns(kept))

    def _columns(self, kept):
        if not kept:
            raise Refused("min_rows", "the dataset has no rows")
        head = self.client.submit(lambda frame: list(frame.columns), kept[0][0]).result()
        return frozenset(head)

    @property
    def n_rows(self):
        return self.parts()[2]

    @property
    def columns(self):
        return self.parts()[3]

    def gather_map(self, fn, targets, *iterables, **kwargs):
        futures = self.client.map(fn, targets, *iterables, pure=False, **kwargs)
        return self.client.gather(futures)

    def rows(self, reference, partitions=None):
        """The target of a request's rows: :class:`EngineRows` (``partitions``: the
        site's :class:`~skfed.data.site.SitePartitions` of the dataset, for a held-out
        part)."""
        if reference.get("steps"):
            raise Refused("engine", "row steps are not served on a dataset on an engine",
                          public=True)
        columns = self.columns
        target = reference.get("target")
        for column in ([*target] if isinstance(target, (list, tuple)) else [target]) + [
                reference.get("sample_weight"), reference.get("offset")]:
            if column is not None and column not in columns:
                raise Refused("columns", f"no usable column {column[:64]!r} in dataset "
                                         f"{self.conf.name!r}", columns=[column], public=True)
        futures, offsets = self.parts()[:2]
        selected = self._held_out(reference.get("holdout"), partitions)
        keep = [None] * len(futures) if selected is None else np.split(selected, offsets[1:])
        # a partition the held-out part leaves empty takes no part (an empty part's sums)
        parts = [(f, o, k) for f, o, k in zip(futures, offsets, keep)
                 if k is None or k.any()]
        futures, offsets, keep = (list(x) for x in zip(*parts)) if parts else ([], [], [])
        counts = self.gather_map(positive_rows, futures, offsets, keep, site=self.site,
                                 reference=reference)
        return EngineRows(self, reference, int(sum(counts)), (futures, offsets, keep),
                          selected)

    def _held_out(self, holdout, partitions):
        """A held-out part's rows over the whole dataset (its stable global row index),
        drawn as the in-memory site draws them: whole partitions of the site's secret."""
        if holdout is None:
            return None
        try:
            test_size, seed, part = float(holdout["test_size"]), int(holdout["seed"]), \
                holdout["part"]
        except (KeyError, TypeError, ValueError):
            raise Refused("message", "a malformed holdout", public=True) from None
        if part not in ("train", "test") or not 0 < test_size < 1:
            raise Refused("message", "a malformed holdout", public=True)
        whole = _WholeRows(self.site, self.n_rows, partitions)
        mask = held_out_mask(whole, test_size, seed)
        return mask if part == "test" else ~mask

    def run(self, operation, call, targets, args, extra=(), context=None):
        """``operation``'s function on every partition's target (``call`` runs it there),
        its audit merged and decided once, its replies combined."""
        if operation.combine is None:
            raise refusal(operation)
        combine = operation.combine
        whole = isinstance(combine, Combine)  # a part's own reply; the rules on the whole
        function = combine.part if whole and combine.part is not None else \
            operation.function
        audit = dominance.active()
        spec = None if audit is None else (audit.min_rows, audit.share)
        context = dict(context or {}, function=function, args=args)
        replies = self._replies(call, targets, extra, audit=spec, **context)
        if audit is not None:
            wanted = dominance.merge(audit, [r[2] for r in replies])
            while wanted:  # what the bounds could not clear: a dearer bound, then exact
                again = self._replies(call, targets, extra, audit=(*spec, wanted), **context)
                wanted = dominance.merge(audit, [r[2] for r in again], wanted)
        if whole:
            return combine([r[1] for r in replies], args, self.site)
        return tree_combine(combine, [r[1] for r in replies])

    def _replies(self, call, targets, extra, **kwargs):
        replies = self.gather_map(call, targets, *extra, **kwargs)
        for status, value, _ in replies:
            if status == "refused":
                rule, detail, public = value
                raise Refused(rule, detail, public=public)
        return replies

    def close(self):
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()


class _WholeRows:
    """What a held-out draw reads of a dataset's rows: their number, the site's name and
    partitions, every row's index (no row step before it)."""

    def __init__(self, site, n_rows, partitions):
        self.site, self.n_samples = site, n_rows
        self.meta = {"row_ids": np.arange(n_rows), "partitions": partitions}


class EngineRows:
    """A request's rows on an engine: what the gate sees of them (their count, whether
    a weight column weighs them, the columns read), and how an operation runs on them."""

    def __init__(self, engine, reference, n_positive, parts, selected):
        self.engine, self.reference = engine, dict(reference)
        self.site, self.parts, self.selected = engine.site, parts, selected
        self.sample_weight = reference.get("sample_weight")  # its name: the reply's class
        self.n_samples = engine.n_rows if selected is None else int(selected.sum())
        self.n_positive = n_positive
        target = reference.get("target")
        self.meta = {"raw_columns": engine.columns, "n_positive": n_positive,
                     "read": {c for c in ([*target] if isinstance(target, (list, tuple))
                                          else [target]) + [self.sample_weight,
                                                            reference.get("offset")]
                              if c is not None}}
        self._kept, self._kept_lock = None, threading.Lock()
        self._deferred = threading.local()

    def kept(self):
        """``(futures, shares, sizes)``: each partition's rows of this request, built
        once and kept on its worker (:func:`keep_part`), its share and number of rows."""
        with self._kept_lock:
            if self._kept is None:
                futures, offsets, keep = self.parts
                sizes = self.engine.gather_map(len, futures) if futures else []
                sizes = [n if k is None else int(np.count_nonzero(k))
                         for n, k in zip(sizes, keep)]
                positions = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
                self._kept = (self.engine.client.map(
                    keep_part, futures, offsets, keep, positions.tolist(), site=self.site,
                    reference=self.reference, group=id(self), pure=False),
                    row_shares(sizes), sizes)
            return self._kept

    def weights(self):
        """What the site reads of the rows' weights outside an operation (the weight sum
        a masked-sums key signs, ``np.sum(rows.weights())``): their sum over the
        partitions (:class:`_WeightSum`); no row's weight is here."""
        return _WeightSum(self)

    def defer_check(self, check, values, rules):
        """A declared check that reads rows: run on each partition with the request's
        function (:mod:`.engine_kept`), its counts decided on the whole dataset."""
        pending = getattr(self._deferred, "pending", None)
        if pending is None or pending[1] is not values:  # a new request
            pending = self._deferred.pending = ([], values, rules)
        pending[0].append(check)

    def _pending(self, operation, args):
        """The checks deferred by this request (its arguments are their values)."""
        pending, self._deferred.pending = getattr(self._deferred, "pending", None), None
        names = [a.name for a in operation.arguments]
        if pending is not None and len(names) == len(args) and all(
                pending[1].get(n) is a for n, a in zip(names, args)):
            return pending
        if deferred_checks(operation):  # never run without its checks
            raise Refused("engine", f"{operation.name}: its checks did not run",
                          public=True)
        return None

    def supports(self):
        """The row sets a reply's per-column sums are over, as an in-memory site records
        them (:func:`skfed.sites.rows._supports`): each indicator-like column's rows
        (one distinct non-zero value over the whole dataset), as masks over its rows."""
        futures, offsets, keep = self.parts
        engine, context = self.engine, {"site": self.site, "reference": self.reference}
        values = engine.gather_map(column_values, futures, offsets, keep, **context)
        columns = [c for c in (values[0] if values else {})
                   if np.unique(np.concatenate([v[c] for v in values])).size <= 1]
        if not columns:
            return []
        bits = engine.gather_map(column_supports, futures, offsets, keep, columns=columns,
                                 **context)
        sizes = engine.gather_map(len, futures)
        masks = [np.zeros(engine.n_rows, dtype=bool) for _ in columns]
        for part, offset, size in zip(bits, offsets, sizes):
            for mask, packed in zip(masks, part):
                mask[offset:offset + size] = np.unpackbits(packed, count=size).astype(bool)
        return masks

    def map_parts(self, function, *args):
        """``function(rows, *args)`` on every partition's rows, in order: what a check
        reads of the rows (their level counts), to decide on the whole dataset."""
        futures, offsets, keep = self.parts
        return self.engine.gather_map(run_plain, futures, offsets, keep, site=self.site,
                                      reference=self.reference, function=function,
                                      args=args)

    def run(self, operation, args):
        futures, offsets, keep = self.parts
        if operation.opens == "fit":
            return self._open(operation, args, futures, offsets, keep)
        if operation.combine is None:
            raise refusal(operation)
        pending = self._pending(operation, args)
        if pending is not None:
            return run_kept(self, operation, pending)
        return self.engine.run(operation, run_on_rows, futures, args,
                               extra=(offsets, keep),
                               context={"site": self.site, "reference": self.reference})

    def _open(self, operation, args, futures, offsets, keep):
        engine = self.engine
        objectives = engine.client.map(open_part, futures, offsets, keep,
                                       site=self.site,
                                       reference=self.reference, function=operation.function,
                                       args=args, pure=False)
        partial = engine.client.gather(engine.client.map(weight_total, objectives, pure=False))
        total = float(tree_combine("sum", partial))
        objectives = engine.client.map(set_total, objectives, total=total, pure=False)
        engine.client.gather(engine.client.map(weight_total, objectives, pure=False))
        first = engine.client.submit(_describe_objective, objectives[0]).result()
        return EngineObjective(engine, objectives, total, self.n_samples, **first)


def part_weight_sum(rows):
    return float(np.sum(rows.weights()))


class _WeightSum:
    """The weights of a request's rows on an engine, of which only the sum is read
    (``np.sum`` calls :meth:`sum`): each partition's sum, added in a tree."""

    def __init__(self, rows):
        self.rows = rows

    def sum(self, *args, **kwargs):
        futures = self.rows.kept()[0]
        parts = self.rows.engine.gather_map(part_weight_sum, futures)
        return float(tree_combine("sum", parts)) if parts else 0.0

    def __array__(self, *args, **kwargs):
        raise SiteError(self.rows.site, "the rows' weights of a dataset on an engine are "
                                        "not here (only their sum)")
