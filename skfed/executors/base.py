"""Executors run client work where the clients' data lives.

Data is shipped once per fit (:meth:`Executor.open`); each round only the
broadcast message and the replies travel. Tasks are returned in the order
given, so aggregation (and thus the fitted model) does not depend on the
executor.
"""

from abc import ABC, abstractmethod

import numpy as np

from ..exceptions import ClientFailure
from ..federation.operations import MASKED, Arg, Refused, site_operation
from ..federation.monitor_reuse import reusing
from ..federation.rounds import client_monitor


@site_operation(
    "fit.step", releases=MASKED, target="fit",
    describes="the solver's reply of one round (its declared sums): masked under secure "
              "aggregation, clipped, noised and charged under differential privacy, "
              "decided by the solver's class at the site; in the clear only where the "
              "policy requires no protection, under the dominance rule; a plain step "
              "may carry fit.monitor's request, answered under fit.monitor's rules",
    arguments=(Arg("solver", "bytes", most=1 << 24, optional=True),
               Arg("solver_digest", "str", most=64), Arg("client", "int", low=0, high=1 << 20),
               Arg("seed", "int", low=0, high=2 ** 63 - 1),
               Arg("message", "value", check=lambda m: None if m is None or isinstance(
                   m, dict) else "a round's message is a dict"),
               Arg("state", "value", optional=True,
                   check=lambda s: None if s is None or isinstance(s, dict) else
                   "a client's state is a dict"),
               # fit.monitor's arguments, run first under that operation's own rules
               Arg("monitor", "value", optional=True,
                   check=lambda m: None if isinstance(m, dict) else
                   "a step's monitor is fit.monitor's named arguments")))
def client_round(client, solver, state, message, seed):
    """One client's local work in one round: ``(reply, new_state)``.

    An exception raised by the client's code is returned as a
    :class:`~skfed.exceptions.ClientFailure` instead of propagating, so the
    server can drop or retry that client and keep the others' work.
    """
    try:
        return solver.client_update(client, state, message, _SeededGenerator(seed))
    except Refused:  # a site's rule (dominance, time): the site's refusal, not a fault
        raise
    except Exception as exc:  # the client's fault is reported, not raised
        return ClientFailure.from_exception(exc)


def client_round_monitored(client, solver, state, message, seed, theta):
    """``client_monitor`` at ``theta``, then :func:`client_round`, where the client's rows
    are: ``(monitored, result)``; ``monitored`` is ``None`` if the monitor raised (the
    round loop's own pass then reports the error, as without the fusion).

    The step reads the monitor's gradient where it asks for the gradient at ``theta``
    (:mod:`skfed.federation.monitor_reuse`): FedAvg's, FedMID's or FedDualAvg's one
    step computes no second pass over the rows, and its reply is the same bits.
    """
    try:
        monitored = client_monitor(client, theta)
    except Exception:  # noqa: BLE001 - reported by the monitor's own pass
        monitored = None
    return monitored, client_round(reusing(client, theta, monitored), solver, state,
                                   message, seed)


class _SeededGenerator:
    """``np.random.default_rng(seed)``, made at its first use: most solvers draw nothing,
    and making a generator costs about 30 us, a tenth of a small client's round."""

    __slots__ = ("_seed", "_generator")

    def __init__(self, seed):
        self._seed, self._generator = seed, None

    def __getattr__(self, name):
        if self._generator is None:
            self._generator = np.random.default_rng(self._seed)
        return getattr(self._generator, name)


class Executor(ABC):
    """Base class: ``open(clients)``, then rounds, then ``close()``.

    Two kinds of calls run on the clients:

    - :meth:`map` runs a stateless function (sizes, monitoring gradients)
      for ``tasks``, a list of ``(client_index, args)``, calling
      ``fn(client, *args)`` and returning the results in task order.
    - :meth:`run_round` runs one round of a solver. Each client's solver
      state (duals, control variates) is kept by the executor, next to the
      client's data, between rounds: :meth:`place_states` puts it there at
      the start of a fit, :meth:`collect_states` brings it back at the end
      (for ``warm_start``). A client whose code raises is reported as a
      failure and its state is left as it was before the round.

    Attributes
    ----------
    placement_bytes_ : int
        Bytes moved once to place the clients' data and initial state where
        they run (0 in process), reported as ``history_.placement_bytes``.
    """

    #: clients lost for good (a site service that stopped answering): the monitor then
    #: reports the objective of the others; none here
    lost = frozenset()
    placement_bytes_ = 0

    def __init__(self, n_jobs=None):
        self.n_jobs = n_jobs

    def open(self, clients, labels=None):
        """Place the client objects (once per fit); ``labels`` name them in errors."""
        self.clients = list(clients)
        labels = range(len(self.clients)) if labels is None else labels
        # plain Python labels, so errors read 'site-3', not np.str_('site-3')
        self.labels = [lab.item() if isinstance(lab, np.generic) else lab for lab in labels]
        self.placement_bytes_ = 0
        self._states = [None] * len(self.clients)
        self._start()

    def _start(self):
        """Start workers after the clients are known (in-process: nothing)."""

    @abstractmethod
    def map(self, fn, tasks):
        """Run ``fn(client, *args)`` for each ``(index, args)``, results in order."""

    def place_states(self, states):
        """Keep each client's initial solver state where the client runs."""
        self._states = list(states)

    def collect_states(self):
        """The clients' current solver states, in client order."""
        return list(self._states)

    def run_round(self, solver, rnd, jobs, *, retry=False):
        """Run ``solver.client_update`` for ``jobs``, a list of ``(index, message, seed)``.

        Returns ``(replies, failures)``: dicts from client index to its reply,
        or to a :class:`~skfed.exceptions.ClientFailure`. ``retry`` asks for a
        failed client to be run again elsewhere if the executor can (one
        process cannot: there is nowhere else to run it).
        """
        tasks = [(j, (solver, self._states[j], message, seed)) for j, message, seed in jobs]
        return self._settled(zip((j for j, _ in tasks), self.map(client_round, tasks)))

    def _settled(self, results):
        """``(replies, failures)`` from ``(j, client_round's result)`` pairs; a reply's
        new state kept, a failed client's left as it was."""
        replies, failures = {}, {}
        for j, result in results:
            if isinstance(result, ClientFailure):
                failures[j] = result
            else:
                replies[j], self._states[j] = result
        return replies, failures

    @property
    def fuses_monitor(self):
        """Whether a round may carry the monitor of the model it starts from
        (:meth:`run_round_monitored`): when the clients hold no solver state. A fit that
        stops on that monitor discards the round's step, which then changed nothing a
        later fit (``warm_start``) would read."""
        return all(state is None for state in self._states)

    def run_round_monitored(self, solver, rnd, jobs, theta, *, retry=False):
        """:meth:`run_round` whose client calls first run ``client_monitor`` at ``theta``
        (:func:`client_round_monitored`: a one-step solver's gradient is computed once
        for both). Returns ``(replies, failures, monitored)``, ``monitored[j]`` client
        ``j``'s monitor reply (the clients whose monitor ran)."""
        theta = np.asarray(theta, dtype=float)
        tasks = [(j, (solver, self._states[j], message, seed, theta))
                 for j, message, seed in jobs]
        results = list(zip((j for j, _ in tasks), self.map(client_round_monitored, tasks)))
        monitored = {j: carried for j, (carried, _) in results if carried is not None}
        return (*self._settled((j, result) for j, (_, result) in results), monitored)

    def close(self):
        """Release workers and placed data."""
        self.clients = None
        self._states = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"{type(self).__name__}(n_jobs={self.n_jobs!r})"
