"""The federation session: every exchange of a fit or an analysis with the sites.

One object, opened for a fit or an analysis and closed after it:

- :meth:`FederationSession.sum` is the only way a row-derived number leaves the
  sites in aggregate: ``{field: sum_j c_j fn(site_j, *args)[field]}`` — plain (the
  server adds the sites' replies) or masked (the sites' replies are masked and only
  the totals decoded, under the protection agreed when the session opened);
- :meth:`FederationSession.per_site` is the few per-site releases the operation
  table declares (a row count, a schema, a refusal);
- :meth:`FederationSession.run_round` carries one round of a solver;
- :class:`Ledger` counts the rounds and bytes of each phase (``setup``,
  ``rounds``, ``monitor``, ``inference``, ``analysis``) from the messages'
  payloads; ``history_.ledger`` reports it.

The transport beneath is an executor (:mod:`skfed.executors`: in process, joblib,
Dask, a site service) for a fit's client objectives, or a
:class:`~skfed.data.FederatedDataset` for an analysis of its rows.
"""

import numpy as np

#: the phases of a fit or an analysis, in the order they happen
PHASES = ("setup", "rounds", "monitor", "inference", "analysis")


def payload_nbytes(value):
    """Bytes of a message's payload: array sizes, 8 per number or name, nested
    containers added up (the convention of every byte count in ``history_``)."""
    if value is None:
        return 0
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(payload_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(payload_nbytes(v) for v in value)
    return 8


def add_fields(replies, coefficients=None):
    """``sum_j c_j reply_j`` (``c`` ones by default), in site order: field by field for
    dicts, element by element for tuples, else the arrays or numbers themselves."""
    if not replies:
        raise ValueError("a sum over no site.")
    # unit coefficients checked once, not once per field (a boosting round has three)
    unit = coefficients is None or bool(np.all(np.asarray(coefficients) == 1))
    return _added(replies, np.ones(len(replies)) if coefficients is None else coefficients,
                  unit)


def _added(replies, coefficients, unit):
    """:func:`add_fields` with ``unit``: whether every coefficient is one."""
    first = replies[0]
    if isinstance(first, dict):
        return {k: _added([r[k] for r in replies], coefficients, unit) for k in first}
    if isinstance(first, tuple):
        return tuple(_added([r[i] for r in replies], coefficients, unit)
                     for i in range(len(first)))
    if unit and isinstance(first, np.ndarray) and first.ndim and \
            first.dtype.kind in "fiub" and \
            all(isinstance(r, np.ndarray) and r.shape == first.shape for r in replies):
        return _plain_sum(replies)
    return sum(c * np.asarray(r, dtype=float) for c, r in zip(coefficients, replies))


def _plain_sum(arrays):
    """``0 + r_0 + r_1 + ...`` in float64, in place (the additions of the general sum with
    unit coefficients, without a temporary per term)."""
    first = arrays[0]
    if first.dtype.kind == "u" and first.dtype.itemsize <= 4 and first.size and \
            all(r.dtype == first.dtype for r in arrays) and \
            sum(int(r.max()) for r in arrays) <= np.iinfo(first.dtype).max:
        # counts: added in their own type where no sum can wrap (each reply's largest
        # value bounds its terms), then one conversion: the same integers (a float64
        # holds them exactly), at a third of the cost of converting every term
        out = first.copy()
        for r in arrays[1:]:
            np.add(out, r, out=out)
        return out.astype(np.float64)
    out = np.add(arrays[0], 0.0, dtype=np.float64)  # 0 + r_0 (a -0.0 becomes 0.0, as there)
    for r in arrays[1:]:
        np.add(out, r, out=out)
    return out


class Ledger:
    """Rounds and bytes per phase (both directions, every site)."""

    def __init__(self):
        self.phases = {phase: {"rounds": 0, "bytes": 0} for phase in PHASES}

    def add(self, phase, n_bytes, rounds=1):
        if phase not in self.phases:
            raise ValueError(f"unknown phase {phase!r}; one of {PHASES}.")
        self.phases[phase]["rounds"] += int(rounds)
        self.phases[phase]["bytes"] += int(n_bytes)

    def bytes(self, phase):
        return self.phases[phase]["bytes"]

    def rounds(self, phase):
        return self.phases[phase]["rounds"]

    def as_dict(self):
        """``{phase: {"rounds", "bytes"}}`` (a copy)."""
        return {phase: dict(spent) for phase, spent in self.phases.items()}

    def __repr__(self):
        spent = ", ".join(f"{p}={v['rounds']}r/{v['bytes']}B" for p, v in self.phases.items())
        return f"Ledger({spent})"


class FederationSession:
    """Every exchange with the sites of one fit or analysis (see the module).

    Parameters
    ----------
    dataset : FederatedDataset, default=None
        The sites: their functions run on each site's rows (``fn(site_data, *args)``).
    executor : Executor, default=None
        Where a fit's client objectives are placed (:meth:`open_clients`): while it is
        open, the session's functions run on them (``fn(client, *args)``).

    Attributes
    ----------
    protection : FederatedSolver or None
        The masking the sites agreed when the fit's keys were exchanged (a secure
        aggregation solver): it carries every :meth:`sum` from then on; ``None``:
        plain sums.
    ledger : Ledger
        Rounds and bytes per phase.
    """

    def __init__(self, dataset=None, *, executor=None):
        self.dataset, self.executor = dataset, None
        self.protection = None
        self.ledger = Ledger()
        if executor is not None:
            self.open_clients(executor)

    @classmethod
    def for_dataset(cls, dataset):
        """A plain session over a dataset's sites (an analysis: statistics,
        preprocessing summaries, histograms, group sums)."""
        return cls(dataset)

    # -- the fit's clients -------------------------------------------------
    def open_clients(self, executor):
        """From now on the session's functions run on the executor's client objectives."""
        self.executor = executor

    def protect(self, protection):
        """The sites agreed on ``protection`` (a secure aggregation solver whose keys are
        exchanged): every later :meth:`sum` is masked, over every site."""
        self.protection = protection if protection.masked else None

    def close_clients(self):
        self.executor, self.protection = None, None

    @property
    def masked(self):
        return self.protection is not None

    @property
    def n_sites(self):
        return len(self.executor.clients) if self.executor is not None else len(self.dataset)

    def _map(self, fn, args, sites):
        if self.executor is not None:
            return self.executor.map(fn, [(j, args) for j in sites])
        replies = self.dataset.map(fn, *args)
        return [replies[j] for j in sites]

    # -- the exchanges -----------------------------------------------------
    def sum(self, fn, *args, phase, coefficients=None, scale=1.0, sites=None):
        """``sum_j c_j fn(site_j, *args)`` over ``sites`` (all by default), field by field.

        ``fn`` is a module-level site function returning a dict of numbers or arrays
        (or a tuple, or an array) of the same shapes at every site. ``coefficients``
        (public, one per site; ones by default) weigh the sum. Masked, every site's
        reply is multiplied by the public ``scale`` before it is masked (to keep it
        within the fixed-point range; the decoded totals are divided by it), and the
        sum is over every site.
        """
        if self.masked:
            if sites is not None:
                raise ValueError("a masked sum is over every site.")
            sums, traffic = self.protection.masked_sum(self.executor, fn, args,
                                                       coefficients=coefficients, scale=scale)
            self.ledger.add(phase, traffic)
            return sums
        return add_fields(self.per_site(fn, *args, phase=phase, sites=sites), coefficients)

    def per_site(self, fn, *args, phase, sites=None):
        """``[fn(site_j, *args)]``: a release the operation table declares per site
        (a row count, a schema), in site order."""
        sites = list(range(self.n_sites) if sites is None else sites)
        replies = self._map(fn, args, sites)
        self.ledger.add(phase, len(sites) * payload_nbytes(args)
                        + sum(payload_nbytes(r) for r in replies))
        return replies

    def __repr__(self):
        kind = "masked" if self.masked else "plain"
        return f"FederationSession({kind}, {self.ledger!r})"
