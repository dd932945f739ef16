"""FederatedDataset: rows that stay where they are, and the functions sent to them.

Two homes for the rows, one interface:

- **simulated** (:meth:`FederatedDataset.from_arrays`): every site's rows in
  this process, split by a ``clients`` array. What tests, notebooks and
  ``fit(X, y, clients=site)`` use.
- **resident** (:meth:`FederatedDataset.from_sources`): each site's rows are
  loaded by the site's own Dask worker (the worker whose ``name`` is the
  site) from a path or a callable that only that machine knows, and stay
  there. The driver holds references (Dask futures) and metadata.

Everything reaches the rows through :meth:`~FederatedDataset.map` (a function
runs at each site; its small result comes back),
:meth:`~FederatedDataset.apply` (a function turns each site's rows into new
rows, at the site) and :meth:`~FederatedDataset.build` (objects that stay at
the site, such as the client objectives the executors run rounds on).
"""

import uuid

import numpy as np

from ..executors.dask_executor import DaskExecutor, ResidentClient
from .blocks import row_blocks
from .site import SiteData, SiteError
from .sources import check_schema, describe, load_site, reorder_columns
from .steps import drop_incomplete_site


def _shard(site, index, fn, *args):
    return {index: fn(site, *args)}


class _InProcess:
    """Sites whose rows are in this process."""

    resident = False
    where = "simulated in this process"

    def __init__(self, parts):
        self.parts = list(parts)

    def map(self, fn, args):
        return [fn(part, *args) for part in self.parts]

    def apply(self, fn, args):
        return _InProcess(self.map(fn, args))

    def subset(self, positions):
        return _InProcess([self.parts[k] for k in positions])

    def build(self, fn, args):
        return self.map(fn, args)

    def executor_for(self, dataset, executor):
        return executor

    def close(self):
        pass


class _OnWorkers:
    """Sites whose rows live on Dask workers, one future each (never gathered)."""

    resident = True
    where = "resident on Dask workers"

    def __init__(self, client, futures, workers, owns_client=False):
        self.client, self.futures, self.workers = client, list(futures), list(workers)
        self.owns_client = owns_client

    def _submit(self, fn, args, k, **extra):
        return self.client.submit(fn, self.futures[k], *args, workers=[self.workers[k]],
                                  allow_other_workers=False, pure=False, **extra)

    def map(self, fn, args):
        from distributed import wait

        futures = [self._submit(fn, args, k) for k in range(len(self.futures))]
        try:
            with self.client.as_current():  # not the process's default client
                wait(futures)
            for future in futures:  # the first failing site in site order, every time
                if future.status == "error":
                    raise future.exception()
            return self.client.gather(futures)
        finally:
            self.client.cancel(futures)

    def apply(self, fn, args):
        futures = [self._submit(fn, args, k) for k in range(len(self.futures))]
        return _OnWorkers(self.client, futures, self.workers)

    def subset(self, positions):
        return _OnWorkers(self.client, [self.futures[k] for k in positions],
                          [self.workers[k] for k in positions])

    def executor_for(self, dataset, executor):
        return DaskExecutor.for_dataset(dataset, executor)

    def close(self):
        self.client.cancel(self.futures)
        if self.owns_client:
            self.client.close()

    def build(self, fn, args):
        out = []
        for k, future in enumerate(self.futures):
            shard = self.client.submit(_shard, future, k, fn, *args, workers=[self.workers[k]],
                                       allow_other_workers=False, pure=False)
            out.append(ResidentClient(shard, self.workers[k], None))
        return out


class FederatedDataset:
    """Rows held by several sites, reached only through functions run at the sites.

    Create one with :meth:`from_arrays` (simulated: rows in this process) or
    :meth:`from_sources` (resident: each site's rows loaded and kept by its
    own Dask worker). Every skfed estimator and transformer takes one in
    place of ``X`` (``est.fit(data)``, ``est.score(data)``); the numbers are
    those of ``fit(X, y, clients=site)`` on the same rows.

    Attributes
    ----------
    sites : list
        Site labels, in a fixed order (the order of ``clients_`` in a fit).
    n_samples : ndarray of shape (n_sites,)
        Rows per site (metadata).
    columns : list of str or None
        Feature column names (``None`` for arrays without names).
    n_features : int
    target_name : str, list of str or None
        The target's column name (``target=`` of :meth:`from_sites` and
        :meth:`from_sources`, a pandas ``y``'s name), or ``None``.
    resident : bool
        Whether the rows live on Dask workers.
    """

    def __init__(self, backend, descriptions, labels=None):
        self._backend = backend
        self._descriptions = list(descriptions)
        self._labels = labels

    @property
    def labels(self):
        """Site labels as an array (``clients_`` of a fit on this dataset)."""
        if self._labels is not None:
            return self._labels
        sites = self.sites
        if all(isinstance(s, str) for s in sites) or all(
                isinstance(s, (int, np.integer)) for s in sites):
            return np.asarray(sites)
        out = np.empty(len(sites), dtype=object)
        out[:] = sites
        return out

    # -- metadata (all the driver knows) ------------------------------------
    @property
    def sites(self):
        return [d["site"] for d in self._descriptions]

    @property
    def n_samples(self):
        return np.array([d["n_samples"] for d in self._descriptions])

    @property
    def columns(self):
        return self._descriptions[0]["columns"]

    @property
    def n_features(self):
        return self._descriptions[0]["n_columns"]

    @property
    def has_target(self):
        return self._descriptions[0]["has_target"]

    @property
    def target_name(self):
        """The target's column name (a list for several), or ``None`` when the target
        came without one (an array): what results tables call the response."""
        if not self.has_target:
            return None
        return self._descriptions[0].get("target_name")

    @property
    def resident(self):
        return self._backend.resident

    def parts_in_this_process(self):
        """Every site's rows (``SiteData``, in site order) where the sites are simulated
        in this process, else ``None`` (rows on Dask workers or at site services): an
        analysis may then compute a sum over the sites in one pass."""
        backend = self._backend
        return list(backend.parts) if isinstance(backend, _InProcess) else None

    @property
    def metadata(self):
        """Per site: rows, columns, dtype kinds and whether it has a target and weights."""
        return [dict(d) for d in self._descriptions]

    def __len__(self):
        return len(self._descriptions)

    def __repr__(self):
        where = self._backend.where  # each home of the rows says where they are
        return (f"FederatedDataset({len(self)} sites, {int(self.n_samples.sum())} rows, "
                f"{self.n_features} features, {where})")

    # -- reaching the rows --------------------------------------------------
    def map(self, fn, *args):
        """``[fn(site_data, *args) for each site]``, each call run where that site's rows are.

        ``fn`` must be picklable (a module-level function) for resident data;
        what it returns crosses the network, so it should be a summary.
        """
        return self._backend.map(fn, args)

    def apply(self, fn, *args):
        """A new dataset whose site ``s`` holds ``fn(site_data_s, *args)`` (run at the site)."""
        backend = self._backend.apply(fn, args)
        return FederatedDataset(backend, backend.map(describe, ()), self._labels)

    def build(self, fn, *args):
        """Objects built and kept at each site (for executors): in-process objects,
        or :class:`ResidentClient` references to objects on the sites' workers."""
        return self._backend.build(fn, args)

    def holdout(self, test_size=0.2, *, random_state=0):
        """Split every site's rows into training and held-out rows, at the site.

        In this process and on Dask workers each site draws its held-out rows
        from ``random_state`` and its name
        (:func:`skfed.data.site.held_out_mask`). A site service holds out whole
        partitions of its rows instead, dealt from a secret only the site
        holds, each of at least its ``min_rows`` rows; ``random_state`` picks
        the partitions and ``test_size`` is rounded to whole partitions, so
        that no analyst chooses which rows are left out (see
        ``docs/data-officers.md``). No row moves.

        Parameters
        ----------
        test_size : float, default=0.2
            The share of each site's rows held out (at least one row).
        random_state : int, default=0

        Returns
        -------
        train, test : FederatedDataset
        """
        from .site import holdout_rows

        if not isinstance(random_state, (int, np.integer)):
            raise ValueError("random_state must be an int (each site draws its rows from it).")
        parts = [self._backend.holdout(test_size, int(random_state), part)
                 if hasattr(self._backend, "holdout")
                 else self._backend.apply(holdout_rows, (test_size, int(random_state),
                                                         part == "test"))
                 for part in ("train", "test")]
        return tuple(FederatedDataset(b, b.map(describe, ()), self._labels) for b in parts)

    def with_columns(self, names):
        """The same sites and rows, their feature columns named ``names`` (after row
        steps that leave arrays: a fit then gives its parameters, and every message
        about them, the columns' names). Nothing is sent to the sites.

        Parameters
        ----------
        names : sequence of str
            One name per feature column.

        Returns
        -------
        dataset : FederatedDataset
        """
        names = [str(n) for n in names]
        if len(names) != self.n_features:
            raise ValueError(f"{len(names)} names for {self.n_features} feature columns.")
        described = [dict(d, columns=list(names)) for d in self._descriptions]
        return FederatedDataset(self._backend, described, self._labels)

    def drop_incomplete(self, *, features=True):
        """The dataset without its incomplete rows, dropped at each site.

        A row without a target is dropped; with ``features=True`` (the default,
        complete-case analysis as statsmodels' ``missing="drop"``) so is a row with
        a missing feature; ``features=False`` keeps those for an imputer. At a
        site service it is a declared row step: the site drops the rows, and its
        ``min_rows`` applies to the rows kept and to the rows dropped; a site that
        would drop (or keep) fewer refuses, saying what to do: impute instead
        (``features=False``), or its officer declares the dataset's analysis
        population (``population = "complete"``).

        Returns
        -------
        dataset : FederatedDataset
        """
        return self.apply(drop_incomplete_site, not features)

    def subset(self, sites):
        """The dataset restricted to ``sites`` (no row moves)."""
        wanted = [s.item() if isinstance(s, np.generic) else s for s in sites]
        position = {s.item() if isinstance(s, np.generic) else s: k
                    for k, s in enumerate(self.sites)}
        unknown = [s for s in wanted if s not in position]
        if unknown:
            raise ValueError(f"unknown sites {unknown!r}; the dataset has {self.sites!r}.")
        positions = [position[s] for s in wanted]
        labels = None if self._labels is None else self._labels[positions]
        return FederatedDataset(self._backend.subset(positions),
                                [self._descriptions[k] for k in positions], labels)

    @property
    def dask_client(self):
        """The ``distributed.Client`` of resident data (``None`` when simulated)."""
        return getattr(self._backend, "client", None)

    @property
    def workers(self):
        """Worker of each site (resident data), else ``None``."""
        return getattr(self._backend, "workers", None)

    def executor_for(self, executor):
        """The executor a fit on this dataset runs with: ``executor`` for rows in this
        process; the dataset's own Dask cluster or site services otherwise (the
        rows never move to another executor)."""
        return self._backend.executor_for(self, executor)

    def masking_parties(self):
        """The sites' side of secure aggregation of this dataset's sums where the sites
        keep it themselves (site services: each holds its own key pair), else ``None``
        (:class:`skfed.privacy.masked_sums.MaskedSums` decides what that means)."""
        maker = getattr(self._backend, "masking_parties", None)
        return None if maker is None else maker()

    def close(self):
        """Release the sites' rows on the workers (and a client this dataset opened),
        or the connections to the site services."""
        self._backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- construction -------------------------------------------------------
    @classmethod
    def from_arrays(cls, X, y=None, clients=None, sample_weight=None, offset=None):
        """A simulated federated dataset: rows in this process, split by ``clients``.

        Parameters
        ----------
        X : array-like, sparse matrix or DataFrame of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets), default=None
        clients : array-like of shape (n_samples,), default=None
            The site of each row (any hashable labels); ``None``: one site.
        sample_weight : array-like of shape (n_samples,), default=None
        offset : array-like of shape (n_samples,), default=None
            A known term of each row's linear predictor (a GLM's offset),
            kept at the row's site like the target.

        Returns
        -------
        dataset : FederatedDataset

        Notes
        -----
        A C-ordered array whose rows are grouped by site is not copied: each
        site holds a read-only view of its rows (interleaved rows are reordered
        once, into one copy). A change made to ``X`` afterwards is then seen by
        the dataset; pass ``X.copy()`` to keep a snapshot.
        """
        from ..federation.clients import group_clients

        n = X.shape[0] if hasattr(X, "shape") else len(X)
        if not hasattr(X, "shape"):
            X = np.asarray(X)
        for name, values in (("y", y), ("sample_weight", sample_weight), ("offset", offset)):
            if values is not None and len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries but X has {n} rows.")
        labels, indices = group_clients(clients, n)
        name = _target_name(y)
        y = None if y is None else np.asarray(y)
        sw = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        offset = None if offset is None else np.asarray(offset)
        # views of the caller's rows where they are grouped by site (no copy)
        Xs, ys, sws, offsets = (
            [None] * len(indices) if v is None else row_blocks(v, indices)
            for v in (X, y, sw, offset))
        meta = {} if name is None else {"target_name": name}
        parts = [SiteData(label.item() if isinstance(label, np.generic) else label, Xs[k],
                          ys[k], sws[k], dict(meta), offset=offsets[k])
                 for k, label in enumerate(labels)]
        for part in parts:
            if part.n_samples == 0:
                raise SiteError(part.site, "no rows.")
        return cls(_InProcess(parts), [describe(p) for p in parts], labels)

    @classmethod
    def from_sources(cls, sources, *, target=None, sample_weight=None, drop=(), offset=None,
                     client=None, address=None, security=None):
        """A resident federated dataset: each site's rows loaded by the site's own worker.

        Parameters
        ----------
        sources : dict
            ``{site: source}``. The site is the ``name`` of its Dask worker
            (``dask worker ... --name hospital-a``); placement is by that name
            only. A source is a path on *that* machine (CSV, TSV or Parquet;
            a relative path is resolved against the worker's
            ``SKFED_DATA_DIR``), or a picklable callable run there that
            returns a DataFrame, ``(X, y)``, ``(X, y, sample_weight)`` or a
            :class:`SiteData`.
        target : str, default=None
            The target column of the sites' tables (``None``: no target,
            e.g. for unsupervised preprocessing).
        sample_weight : str, default=None
            A column of sample weights.
        drop : sequence of str, default=()
            Columns that are not features (identifiers, dates).
        offset : str, default=None
            A column of offsets (a GLM's ``log(exposure)``), kept at the site.
        client : distributed.Client, default=None
            The analyst's connection to the cluster. Default: the current
            client, or a new one to ``address`` (with ``security``, e.g.
            :func:`skfed.deploy.tls_security`), closed by :meth:`close`.
        address : str, default=None
        security : distributed.security.Security, default=None

        Returns
        -------
        dataset : FederatedDataset

        Raises
        ------
        ValueError
            A site without a worker of its name, or whose rows are missing,
            unreadable, empty or of another schema than the others; the
            message names the site (and the column). No site keeps rows
            loaded after an error.
        """
        import distributed

        if not isinstance(sources, dict) or not sources:
            raise ValueError("sources must be a non-empty dict {site: path or callable}.")
        owns = client is None and address is not None
        if client is None:
            if address is not None:
                client = distributed.Client(address, security=security)
            else:
                try:
                    client = distributed.get_client()
                except ValueError:
                    raise ValueError("no Dask client: pass client= or address= (the "
                                     "coordinator's scheduler address).") from None
        try:
            return cls._load(client, sources, target, sample_weight, tuple(drop), owns, offset)
        except BaseException:
            if owns:
                client.close()
            raise

    @classmethod
    def _load(cls, client, sources, target, sample_weight, drop, owns, offset=None):
        names = {str(w.get("name", a)) for a, w in
                 client.scheduler_info(n_workers=-1)["workers"].items()}
        missing = [s for s in sources if str(s) not in names]
        if missing:
            raise ValueError(f"no worker named {str(missing[0])!r} in the cluster (a site's "
                             f"worker must be started with --name {str(missing[0])}); "
                             f"workers: {sorted(names)!r}.")
        token = uuid.uuid4().hex[:8]
        sites, workers, futures = list(sources), [str(s) for s in sources], []
        for site in sites:
            futures.append(client.submit(
                load_site, site, sources[site], target, sample_weight, drop, offset,
                workers=[str(site)], allow_other_workers=False, pure=False,
                key=f"skfed-site-{str(site)[:40]}-{token}"))
        backend = _OnWorkers(client, futures, workers, owns)
        try:
            descriptions = backend.map(describe, ())
            columns = check_schema(descriptions)
        except BaseException:
            client.cancel(futures)  # nothing stays half-loaded
            raise
        if columns is not None and any(d["columns"] != columns for d in descriptions):
            backend = backend.apply(reorder_columns, (columns,))
            client.cancel(futures)
            descriptions = backend.map(describe, ())
        return cls(backend, descriptions)

    @classmethod
    def from_sites(cls, sites, *, dataset, target=None, sample_weight=None, drop=(),
                   offset=None, ca_file, cert_file, key_file, timeout=None, relay=None):
        """A dataset served by site services (``skfed site serve CONFIG`` at each site).

        Every computation on the rows is one of the named operations the sites
        run (:mod:`skfed.federation.operations`), under each site's own policy;
        nothing sent is executed or unpickled at a site.

        Parameters
        ----------
        sites : dict or list of str
            ``{site name: "host:port"}``. The site's certificate must name it.
            Through a relay: the sites' names (a list).
        dataset : str
            The dataset's name in the sites' configurations.
        target : str or list of str, default=None
            The target column (several: a multi-output target, for
            :class:`~skfed.FedLowRank`).
        sample_weight : str, default=None
            A column of sample weights.
        drop : sequence of str, default=()
            Columns that are not features (identifiers, dates).
        offset : str, default=None
            A column of per-row offsets (a GLM's log exposure).
        ca_file, cert_file, key_file : path-like
            The federation's CA certificate and the analyst's certificate and
            key (:func:`skfed.deploy.make_certificates`).
        timeout : float, default=None
            Seconds to wait for one site's reply (default 120) before the site
            counts as lost: solvers allowing partial participation go on
            without it, the others stop naming it.
        relay : str, default=None
            ``host:port`` of a relay (``skfed relay serve``) the sites dial out
            to: each request then travels signed by the analyst and encrypted
            to its site, each reply encrypted to the analyst
            (:mod:`skfed.sites.relay`).

        Returns
        -------
        dataset : FederatedDataset

        Raises
        ------
        skfed.sites.SiteRefusal
            A site's policy refused (the message names the site and the rule).
        skfed.sites.SiteUnavailable
            A site did not answer.
        """
        from ..sites.remote import SiteServices
        from ..sites.transport import DEFAULT_TIMEOUT

        sites = _site_addresses(sites, relay)
        if not isinstance(dataset, str) or not dataset:
            raise ValueError("dataset must name a dataset the sites serve.")
        connections = []
        try:
            for name, address in sites.items():
                connections.append(_connection(
                    relay)(str(name), address, ca_file=ca_file, cert_file=cert_file,
                           key_file=key_file,
                           timeout=DEFAULT_TIMEOUT if timeout is None else timeout))
        except BaseException:
            for conn in connections:
                conn.close()
            raise
        backend = SiteServices(connections, {"name": dataset, "target": target,
                                             "sample_weight": sample_weight,
                                             "drop": list(drop), "offset": offset})
        try:
            descriptions = backend.map(describe, ())
            for name, d in zip(sites, descriptions):  # the site's own label, not the file's
                d["site"] = str(name)
            columns = check_schema(descriptions)
            if columns is not None and any(d["columns"] != columns for d in descriptions):
                raise ValueError("the sites serve the columns in different orders; the site "
                                 "service does not reorder them yet: declare the same column "
                                 "order at every site.")
        except BaseException:
            backend.close()
            raise
        return cls(backend, descriptions)

    def scatter(self, client=None, *, placement=None):
        """Move a simulated dataset's sites onto Dask workers (the *scatter* path).

        For tests and benchmarks of the distributed path with in-memory data:
        the rows do leave this process (counted nowhere else), so this is not
        the cross-silo deployment, :meth:`from_sources` is.

        Parameters
        ----------
        client : distributed.Client, default=None
        placement : dict, default=None
            ``{site: worker name}``; default: sites spread over the workers.
        """
        import distributed

        if self.resident:
            raise ValueError("this dataset is already on Dask workers.")
        client = client or distributed.get_client()
        info = client.scheduler_info(n_workers=-1)["workers"]
        # a worker by the text of its name: a LocalCluster names its workers 0, 1, ...,
        # and Dask reads the text "0" as an address, so tasks go to the name itself
        by_name = {str(w.get("name", a)): w.get("name", a) for a, w in info.items()}
        names = sorted(by_name)
        placement = placement or {s: names[k % len(names)] for k, s in enumerate(self.sites)}
        unknown = sorted({str(w) for w in placement.values()} - set(by_name))
        if unknown:
            raise ValueError(f"placement names worker {unknown[0]!r}, which is not in the "
                             f"cluster; workers: {names!r}.")
        futures, workers = [], []
        for site, part in zip(self.sites, self._backend.parts):
            worker = by_name[str(placement[site])]
            futures.append(client.scatter(part, workers=[worker], hash=False))
            workers.append(worker)
        return FederatedDataset(_OnWorkers(client, futures, workers), self._descriptions,
                                self._labels)


def _target_name(y):
    """A pandas target's name (a Series' name, a DataFrame's columns), else ``None``."""
    columns = getattr(y, "columns", None)
    if columns is not None:
        return [str(c) for c in columns]
    name = getattr(y, "name", None)
    return None if name is None or not hasattr(y, "index") else str(name)


def as_dataset(X, y=None, clients=None, sample_weight=None):
    """``X`` if it is already a :class:`FederatedDataset` (then ``y``, ``clients``
    and ``sample_weight`` must be None), else :meth:`FederatedDataset.from_arrays`."""
    if isinstance(X, FederatedDataset):
        given = [n for n, v in (("y", y), ("clients", clients), ("sample_weight", sample_weight))
                 if v is not None]
        if given:
            raise ValueError(f"a FederatedDataset carries its own target, sites and weights; "
                             f"do not pass {given[0]}= with it.")
        return X
    return FederatedDataset.from_arrays(X, y, clients, sample_weight)


def _site_addresses(sites, relay):
    """``{site: address}`` of :meth:`FederatedDataset.from_sites`'s ``sites`` (through a
    relay: every site's address is the relay's)."""
    if relay is None:
        if not isinstance(sites, dict) or not sites:
            raise ValueError("sites must be a non-empty dict {site name: 'host:port'} (or, "
                             "with relay='host:port', a list of site names).")
        return sites
    if not isinstance(relay, str) or ":" not in relay:
        raise ValueError(f"relay must be 'host:port'; got {relay!r}.")
    if isinstance(sites, dict) or isinstance(sites, str) or not sites:
        raise ValueError("through a relay, sites must be a non-empty list of site names (the "
                         "relay knows where they are).")
    return {str(name): relay for name in sites}


def _connection(relay):
    from ..sites.relay_connection import RelayConnection
    from ..sites.transport import SiteConnection

    return SiteConnection if relay is None else RelayConnection
