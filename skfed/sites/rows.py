"""A site service's rows: its declared datasets, and the rows a request selects.

A request names its rows by a *dataset reference*: the dataset's name, its
target, weight and offset columns, columns to drop, declared row steps
(:func:`skfed.federation.operations.row_step`) and a held-out part. The site
builds them here, under its rules:

- columns: the dataset's allow-list; a weight is a column the dataset declares
  as a weight, never another column or a transform;
- the dataset's analysis population (``population = "complete"``: its complete
  cases over its usable columns, once, so that analyses share one row set);
- row steps: declared steps only, their typed arguments checked before they run;
  a step that leaves rows out leaves none or at least ``min_rows`` and keeps at
  least ``min_rows``;
- held-out parts: whole partitions drawn from the site's secret;
- across requests: the row sets requests selected, recorded per dataset for
  every analyst together (:mod:`skfed.sites.rowsets`).
"""

import collections
import hashlib
import json
import logging
import os
import secrets
import threading

import numpy as np

from ..data.site import SiteError, SitePartitions, holdout_rows
from ..data.sources import read_table, split_table
from ..federation.operations import Refused, row_steps
from .codec import encode
from .engine import DaskEngine, within_domains
from .rowsets import RowSetRecord, record_path

_LOG = logging.getLogger("skfed.site")

#: the keys of a dataset reference, and the most row steps it may carry
REFERENCE_KEYS = {"name", "target", "sample_weight", "offset", "drop", "steps", "holdout"}
MAX_STEPS = 64


def _reference_problem(reference):
    """The form of a dataset reference (before any row is read)."""
    if not isinstance(reference, dict) or not isinstance(reference.get("name"), str):
        return "the request names no dataset"
    unknown = sorted(set(reference) - REFERENCE_KEYS)
    if unknown:
        return f"a dataset reference has no key {str(unknown[0])[:32]!r}"
    target = reference.get("target")
    names = ([*target] if isinstance(target, (list, tuple)) else [target]) + [
        reference.get("sample_weight"), reference.get("offset"), *(reference.get("drop") or [])]
    if not all(n is None or isinstance(n, str) and len(n) <= 256 for n in names):
        return "a dataset reference names columns by strings"
    steps = reference.get("steps") or []
    if not isinstance(steps, (list, tuple)) or len(steps) > MAX_STEPS:
        return f"a dataset reference carries at most {MAX_STEPS} row steps"
    return None


class SiteRows:
    """The datasets a site serves and the rows of its requests (see the module).

    Parameters
    ----------
    config : skfed.sites.policy.SiteConfig
    """

    def __init__(self, config):
        self.config, self.policy, self.name = config, config.policy, config.name
        self._tables, self._partitions, self._records = {}, {}, {}
        self._kept = collections.OrderedDict()
        self._engines = {}
        self._lock = threading.RLock()

    def engine(self, conf):
        """The engine of a dataset declared ``engine = "dask"`` (started on first use)."""
        with self._lock:
            if conf.name not in self._engines:
                self._engines[conf.name] = DaskEngine(self.name, conf)
            return self._engines[conf.name]

    def _n_rows(self, conf):
        return self.engine(conf).n_rows if conf.engine else len(self.table(conf))

    def close(self):
        for engine in self._engines.values():
            engine.close()

    # -- the datasets ------------------------------------------------------------
    def declaration(self, reference, analyst):
        """The dataset a reference names, if this analyst may use it."""
        problem = _reference_problem(reference)
        if problem is not None:
            raise Refused("message" if "dataset" not in problem else "datasets", problem,
                          public=True)
        name = reference["name"]
        conf = self.config.datasets.get(name)
        if conf is None:
            raise Refused("datasets", f"no dataset {name[:64]!r} is served here", public=True)
        allowed = self.policy.access.get(analyst, {}).get("datasets")
        if allowed is not None and name not in allowed:
            raise Refused("access", f"analyst {analyst!r} may not use dataset {name!r}",
                          public=True)
        return conf

    def table(self, conf):
        """The dataset's table: its usable columns, its analysis population."""
        with self._lock:
            if conf.name not in self._tables:
                try:
                    table = read_table(self.name, conf.path)
                except SiteError as exc:  # its message holds a local path: the service's log
                    _LOG.warning("dataset %r could not be read: %s", conf.name, exc.detail)
                    raise Refused("datasets", f"dataset {conf.name!r} could not be read",
                                  public=True) from None
                table = table.rename(columns=str)
                if conf.columns is not None:  # the site's allow-list of columns
                    table = table[[c for c in table.columns if c in conf.columns]]
                table = within_domains(table, conf.domains)
                if conf.population == "complete":  # one row set for every analysis
                    table = table[~table.isna().any(axis=1)].reset_index(drop=True)
                self._tables[conf.name] = table
            return self._tables[conf.name]

    def record(self, conf):
        """The dataset's record of row sets (kept between restarts)."""
        with self._lock:
            if conf.name not in self._records:
                n = self._n_rows(conf)
                path = record_path(self._folder(), conf.name)
                self._records[conf.name] = RowSetRecord(n, self.policy.min_rows, path)
            return self._records[conf.name]

    def _folder(self):
        return self.config.data_dir or self.config.ledger.parent

    def partitions(self, conf):
        """The dataset's fixed partitions, from the site's secret for it (kept in the
        site's folder, readable by the service's account only; made on first use)."""
        with self._lock:
            if conf.name not in self._partitions:
                secret = partition_secret(self._folder() / "partition-secrets.json", conf.name)
                self._partitions[conf.name] = SitePartitions.draw(
                    secret, self._n_rows(conf), self.policy.min_rows)
            return self._partitions[conf.name]

    # -- a request's rows -----------------------------------------------------------
    def rows(self, reference, analyst, record, rules):
        """The rows of a dataset reference after its steps and held-out part, with the
        columns they were read from (recorded for the audit line)."""
        conf = self.declaration(reference, analyst)
        record["dataset"] = conf.name
        rules.declared = conf
        if conf.engine:  # its partitions on the engine: never gathered here
            return conf, self._engine_rows(conf, reference, record)
        table = self.table(conf)
        site = self._split(conf, table, reference)
        site.meta.update(row_ids=np.arange(len(table)), partitions=self.partitions(conf),
                         raw_columns=frozenset(table.columns), read=set(site.meta.get("read",
                                                                                      ())))
        for step in reference.get("steps") or ():
            site = self._step(site, step, rules)
        if reference.get("holdout") is not None:
            site = self._holdout(site, reference["holdout"])
        n = int(np.count_nonzero(site.weights() > 0))
        record["rows"] = n
        if n < self.policy.min_rows:
            raise Refused("min_rows", f"the request's rows number {n}")
        return conf, site

    def _engine_rows(self, conf, reference, record):
        weight = reference.get("sample_weight")
        if weight is not None and weight not in conf.weights:
            raise Refused("columns", f"column {weight!r} is not one this dataset declares "
                                     "as a weight (weights = [...])", columns=[weight],
                          public=True)
        site = self.engine(conf).rows(reference, self.partitions(conf)
                                      if reference.get("holdout") is not None else None)
        record["rows"] = site.n_positive
        if site.n_positive < self.policy.min_rows:
            raise Refused("min_rows", f"the request's rows number {site.n_positive}")
        return site

    def _split(self, conf, table, reference):
        target, weight = reference.get("target"), reference.get("sample_weight")
        offset = reference.get("offset")
        targets = list(target) if isinstance(target, (list, tuple)) else [target]
        for role, column in [*(("target", t) for t in targets), ("weight", weight),
                             ("offset", offset)]:
            if column is not None and column not in table.columns:
                raise Refused("columns", f"no usable {role} column {column[:64]!r} in "
                              f"dataset {conf.name!r}", columns=[column], public=True)
        if weight is not None and weight not in conf.weights:
            raise Refused("columns", f"column {weight!r} is not one this dataset declares "
                                     "as a weight (weights = [...])", columns=[weight],
                          public=True)
        drop = [c for c in reference.get("drop") or () if c in table.columns]
        site = split_table(self.name, table, target=target, sample_weight=weight, drop=drop,
                           offset=offset)
        site.meta["read"] = {c for c in (*targets, weight, offset) if c is not None}
        return site

    def _step(self, site, step, rules):
        """One declared row step, its arguments checked, its rows ruled on."""
        steps = row_steps()
        name = step.get("step") if isinstance(step, dict) else None
        declared = steps.get(name) if isinstance(name, str) else None
        if declared is None:
            raise Refused("message", "a row step that is not one of skfed's declared steps",
                          public=True)
        args = step.get("args")
        problem = declared.problem(args)
        if problem is not None:  # the request's form: its own words
            raise Refused("message", problem, public=True)
        values = {a.name: args.get(a.name, a.default) for a in declared.arguments}
        for check in declared.checks:
            check(site, values, rules)
        kept = declared.function(site, *[values[a.name] for a in declared.arguments])
        if declared.reads is not None:
            kept.meta["read"] = set(site.meta.get("read", ())) | set(
                declared.reads(*[values[a.name] for a in declared.arguments]))
        left_out = site.n_samples - kept.n_samples
        floor = self.policy.min_rows
        if 0 < left_out < floor or 0 < kept.n_samples < floor:
            # a fixed text (the step's name and remedy, the policy's floor), never which
            # of the two or a count: the refusal itself is the only bit the rows give
            remedy = f": {declared.remedy}" if declared.remedy else ""
            raise Refused("min_rows", f"the row step {name!r} would leave out, or keep, "
                                      f"fewer than {floor} rows here (the site's min_rows)"
                                      + remedy, public=True)
        return kept

    def _holdout(self, site, holdout):
        try:
            test_size, seed, part = float(holdout["test_size"]), int(holdout["seed"]), \
                holdout["part"]
        except (KeyError, TypeError, ValueError):
            raise Refused("message", "a malformed holdout", public=True) from None
        if part not in ("train", "test") or not 0 < test_size < 1:
            raise Refused("message", "a malformed holdout", public=True)
        return holdout_rows(site, test_size, seed, part == "test")

    # -- across requests --------------------------------------------------------
    def admit(self, conf, site, *, design=False):
        """Record the row sets of a request's rows (and, where its reply holds sums per
        feature column, each column's support), or refuse (rule ``row_sets``)."""
        if conf.engine:  # no row step: the dataset's rows, or a held-out part of them
            selected = site.selected
            masks = [np.ones(self._n_rows(conf), dtype=bool) if selected is None
                     else selected]
            self.record(conf).admit(masks + (site.supports() if design else []))
            return
        n = len(self.table(conf))
        masks = [_mask(site.meta["row_ids"], n)]
        if design:
            masks += [_mask(site.meta["row_ids"][support], n) for support in _supports(site)]
        self.record(conf).admit(masks)

    def kept(self, analyst, reference, build):
        """The rows of ``reference`` kept between one analyst's requests, else
        ``build()`` (whose result is kept): the last ``kept_datasets`` references of all
        analysts (the policy's), the oldest of the analyst keeping the most going first
        (:func:`_kept_to_evict`)."""
        key = (analyst, hashlib.sha256(encode(reference)).hexdigest())
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        value = build()
        with self._lock:
            self._kept[key] = value
            while len(self._kept) > self.policy.kept_datasets:
                del self._kept[_kept_to_evict(self._kept)]
        return value


def _kept_to_evict(kept):
    """The key of the kept rows to drop (``kept``: ordered from the least recently used):
    the oldest of the analyst who keeps the most references. So an analyst's requests
    on new references never evict the rows (and the fit states kept with them) of an
    analyst who keeps fewer references."""
    counts = collections.Counter(analyst for analyst, _ in kept)
    most = max(counts.values())
    return next(key for key in kept if counts[key[0]] == most)


def _mask(row_ids, n):
    mask = np.zeros(n, dtype=bool)
    mask[np.asarray(row_ids, dtype=np.intp)] = True
    return mask


def _supports(site):
    """The row sets a reply's per-column sums are over: a design's columns' supports as
    its categorical levels and spline intervals select them (``meta["supports"]``), else
    each indicator-like column's rows (one non-zero value: a dummy, a binary column).

    A column whose values vary on its rows weighs them rather than selecting them: its
    sums are judged number by number by the dominance rule, and an incidental zero (a
    basis function at its boundary knot) does not make a row set.
    """
    if "supports" in site.meta:
        supports = np.asarray(site.meta["supports"], dtype=bool)
        return [supports[:, j] for j in range(supports.shape[1])]
    X = site.X
    if hasattr(X, "columns"):
        values = [np.asarray(X[c], dtype=np.float64) for c in X.columns
                  if X[c].dtype.kind in "biuf"]
    else:
        A = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
        values = [A[:, j].astype(np.float64) for j in range(A.shape[1])] \
            if A.dtype.kind in "biuf" else []
    masks = []
    for v in values:
        support = np.nan_to_num(v, nan=0.0) != 0
        if np.unique(v[support]).size <= 1:
            masks.append(support)
    return masks


def partition_secret(path, dataset):
    """The site's secret for ``dataset``'s partitions (32 random bytes), persisted in
    ``path`` (JSON, mode 0600) so that partitions stay the same across restarts: a new
    draw would let two answers differ by a few rows."""
    secrets_by_dataset = json.loads(path.read_text()) if path.exists() else {}
    if dataset not in secrets_by_dataset:
        secrets_by_dataset[dataset] = secrets.token_hex(32)
        temporary = path.with_name(path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(secrets_by_dataset, out)
        os.replace(temporary, path)
    return bytes.fromhex(secrets_by_dataset[dataset])
