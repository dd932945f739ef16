"""A boosting fit's state at a site: kept between requests, the analyst's alone, capped.

A site keeps, per analyst, per dataset's rows and per fit (the fit's random
identifier), what its requests would otherwise carry and recompute every time
(:mod:`._model_chain`): the fit's context, its binned rows, the model's chain of
digests and its raw predictions, and the row sets of the current iteration's nodes.
A request names the context and the model it extends; a site that does not hold
them refuses with rule ``fit_state`` (:class:`FitStateLost`), saying nothing else,
and the analyst sends them whole once.

The state is keyed by the analyst of the request
(:func:`skfed.federation.operations.current_requester`: the certificate's name at
a site service), so another analyst naming the same fit and digest finds nothing.
It is capped: a fit's state above the site's ``fit_state_mb`` is refused (rule
``fit_state_mb``); one analyst's states above ``analyst_state_mb`` together, or
more than :data:`MAX_STATES_PER_ANALYST` of them, are evicted oldest first (the
partitions of one request's rows on an engine count as one state, all of them kept
while one is in use). The state of a dataset's rows goes with those rows (a site
service drops rows it no longer keeps: the oldest of the analyst keeping the most,
:meth:`skfed.sites.rows.SiteRows.kept`); one request at a time builds a state's rows
and model (two requests after an eviction would add the trees twice). None of it
changes an answer: a request computes the same sums from a state as from the whole
model.
"""

import collections
import threading
import weakref
from collections import OrderedDict

import numpy as np

from ..federation.operations import Refused, current_requester
from ._model_chain import STATE_RULE

#: the most fit states one analyst keeps at a site (each a dataset's rows in one fit)
MAX_STATES_PER_ANALYST = 64
_MB = float(1 << 20)


class FitStateLost(Refused):
    """The site holds no state of this name for this analyst: send it whole."""

    def __init__(self, detail="this site holds no state of the fit named by the request "
                              "(restarted, evicted, or never sent): send the fit's context "
                              "and model whole"):
        super().__init__(STATE_RULE, detail, public=True)

    def __reduce__(self):  # a Dask worker's exception reaches the analyst whole
        return type(self), (self.detail,)


class FitState(dict):
    """One fit's state at one site for one analyst (see the module docstring).

    A dict of the cached values of :mod:`._site_rows` (prepared rows, raw
    predictions, gradients, node rows), with the context it holds them for.

    Attributes
    ----------
    context : dict or None
        The fit's context (as the site functions take it).
    name : str or None
        The analyst's name of the context (``None``: a request that named none).
    digest : str or None
        The site's own digest of the context (a new context under the same name is
        a new state).
    checked : set
        The checks of the context that passed (each once per state).
    digests : list of str
        The model chain whose raw predictions are held (``[]``: none).
    """

    def __init__(self, key):
        super().__init__()
        self.key, self.context, self.name, self.digest = key, None, None, None
        self.checked, self.digests, self.nbytes = set(), [], 0
        self.group = key  # what counts as one state of the analyst's (:meth:`_Store.get`)
        self.last = None  # the last full context object received (digested once)
        self.lock = threading.RLock()  # its rows and model built by one request at a time
        self.accounted = -1  # the model version last measured against the caps

    def reset(self, context, name, digest):
        self.clear()
        self.context, self.name, self.digest = context, name, digest
        self.checked, self.digests, self.accounted = set(), [], -1

    @property
    def n_trees(self):
        return max(len(self.digests) - 1, 0)


class _Store:
    """Every fit state of this process, in the order they were last used."""

    def __init__(self):
        self.states = OrderedDict()
        self.lock = threading.Lock()
        self._tracked = set()

    def get(self, site, fit, *, create):
        """The state of ``fit`` over ``site``'s rows for the current analyst (created if
        ``create``; ``None`` if absent)."""
        key = (current_requester().analyst, id(site), fit)
        with self.lock:
            state = self.states.get(key)
            if state is not None:
                self.states.move_to_end(key)
                return state
            if not create:
                return None
            state = FitState(key)
            # the partitions of one request's rows on an engine: one state of the analyst's
            state.group = (fit, getattr(site, "meta", {}).get("kept", id(site)))
            if self._track(site):
                self.states[key] = state
            return state

    def _track(self, site):
        if id(site) in self._tracked:
            return True
        try:  # a site's states go with its rows
            weakref.finalize(site, self._drop_site, id(site))
        except TypeError:  # not weakly referable: a state for this request only
            return False
        self._tracked.add(id(site))
        return True

    def _drop_site(self, site_id):
        with self.lock:
            for key in [k for k in self.states if k[1] == site_id]:
                del self.states[key]
            self._tracked.discard(site_id)

    def account(self, state):
        """Measure ``state`` and hold the caps: refuse a fit above its cap, evict the
        analyst's oldest other states above theirs."""
        who = current_requester()
        state.nbytes = _nbytes(state)
        if state.nbytes > who.fit_state_mb * _MB:
            with self.lock:
                self.states.pop(state.key, None)
            raise Refused("fit_state_mb", f"a fit's state here would hold more than this "
                                          f"site's fit_state_mb = {who.fit_state_mb:g} MB "
                                          "(fewer rows, features or trees per site)",
                          public=True)
        with self.lock:
            mine = [k for k in self.states if k[0] == who.analyst]  # oldest first
            total = sum(self.states[k].nbytes for k in mine)
            groups = collections.Counter(self.states[k].group for k in mine)
            for key in mine:
                if total <= who.analyst_state_mb * _MB and \
                        len(groups) <= MAX_STATES_PER_ANALYST:
                    break
                group = self.states[key].group
                if group != state.group:  # the state in use stays (all its partitions)
                    total -= self.states.pop(key).nbytes
                    groups[group] -= 1
                    if not groups[group]:
                        del groups[group]


STORE = _Store()


def _nbytes(value, seen=None, depth=0):
    """The bytes of the arrays ``value`` holds (dicts, lists, tuples, objects' fields)."""
    seen = set() if seen is None else seen
    if id(value) in seen or depth > 6:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return int(value.nbytes) if value.base is None or id(value.base) not in seen else 0
    if isinstance(value, dict):
        return sum(_nbytes(v, seen, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v, seen, depth + 1) for v in value)
    fields = getattr(value, "__dict__", None)
    if fields is None and hasattr(value, "__slots__"):
        fields = {s: getattr(value, s, None) for s in value.__slots__}
    return _nbytes(fields, seen, depth + 1) if fields else 0
