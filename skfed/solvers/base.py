"""The contract every federated solver follows.

A solver is a :class:`~sklearn.base.BaseEstimator` holding only
hyper-parameters, so it can be cloned, compared and searched over by
``GridSearchCV(est, {"solver__client_lr": [...]})``. During ``fit`` the
estimator clones it and calls :meth:`FederatedSolver.setup`, which resolves
``"auto"`` values into attributes ending in ``_`` on the clone.

One round, as data flows::

    message = solver.broadcast(server, round)          # server -> clients
    reply_j, state_j = solver.client_update(            # on client j, pure
        client_j, state_j, message, rng_j)
    server = solver.aggregate(server, replies, weights, participants)  # server
    theta = solver.server_model(server)

Only ``message`` and ``reply_j`` cross the client boundary; their sizes are
what ``history_`` counts in ``bytes_down`` / ``bytes_up``.

Most servers need the replies only through (weighted) sums. Such a solver
declares the summed fields (:meth:`FederatedSolver.summed_fields`) and writes
its update from the sums (:meth:`FederatedSolver.aggregate_sums`) instead of
``aggregate``; the plain rounds form the sums from the replies, secure
aggregation (:mod:`skfed.privacy.secure_rounds`) from masked messages, and
both then run the same update.
"""

import numbers
from abc import ABCMeta, abstractmethod

import numpy as np
from sklearn.base import BaseEstimator

from .._messages import show
from ..federation.session import add_fields
from ..federation.wire import register_subclasses


class FederatedSolver(BaseEstimator, metaclass=ABCMeta):
    """Base class of federated solvers.

    Subclasses declare what they need of the problem in class attributes,
    checked by :meth:`check_problem` before any round runs:

    - ``requires_smooth_datafit``: the loss must be differentiable.
    - ``requires_curvature_bound``: the loss's second derivative must be
      bounded (``Datafit.curvature``), since the solver's steps come from
      it; a smooth loss without a global bound (Poisson, Gamma: the
      curvature of ``exp``) is refused, not run with a step that may diverge.
    - ``requires_full_participation``: every client must take part in every
      round (``participation=1``).
    - ``penalty_support``: ``"prox"`` (any penalty with a proximal map),
      ``"subgradient"`` (a penalty with a subgradient; no constraints) or
      ``"smooth"`` (only differentiable penalties, or none).
    """

    requires_smooth_datafit = True
    requires_curvature_bound = True
    requires_full_participation = False
    penalty_support = "prox"
    #: name under which ``solver="..."`` finds this class
    name = None
    #: the server model is an average of clients' local solutions: return one
    #: proximal-gradient step from it (exact zeros; see ``_federation._polish``)
    polish_output = False
    #: every reply carries the client's mean loss ``value`` and its ``grad`` at
    #: the broadcast ``theta``, which is the current server model: the monitor
    #: reads them instead of a pass of its own (``federation.rounds``)
    monitors_in_replies = False
    #: the server decodes only masked sums of the sites' messages (secure aggregation)
    masked = False
    #: each site clips and noises its message (differential privacy; masked as well)
    differentially_private = False
    #: the clients' states stay at the sites after the fit (keys, duals): not returned
    keeps_states_at_sites = False
    #: how the clients talk: through a server, or along a graph (decentralized solvers
    #: take ``topology`` as a parameter)
    topology = "centralized"
    #: what :meth:`setup` derives that a site's client code reads: sent to a site
    #: service with the constructor's parameters, and nothing else is accepted
    #: (:mod:`skfed.sites.codec`; each subclass declares the attributes its own
    #: ``setup`` sets)
    _wire_attributes = ("problem_",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_subclasses(FederatedSolver, "solver")(cls)  # a site message may carry it

    def loop_monitor_every(self, requested):
        """How often the round loop monitors this solver's fit (``requested``, the
        estimator's ``monitor_every``, by default; a differentially private fit monitors
        at its ends unless asked otherwise, each pass charged to its budget)."""
        return requested

    #: the declared site operation whose release this solver's replies are, where they are
    #: finer sums by design (a shared Cox baseline's risk-set sums: ``"fit.risk_sets"``):
    #: a site applies that operation's rule to its rounds instead of the dominance rule
    replies_as = None

    def withheld_trial(self, server):
        """The server state after a site refused to answer the round at its broadcast
        model under the dominance rule (a few rows would dominate its sums there): a
        line search's trial point is then treated as rejected (its step halved);
        ``None`` (the default): the fit stops with the refusal."""
        return None

    def check_at_site(self, client, rules):
        """A site service's rule on what this solver's rounds release beyond the
        dominance rule (a shared Cox baseline's risk sets); raises
        :class:`~skfed.federation.operations.Refused`. None by default."""

    @property
    def site_protection(self):
        """What the site adds to each reply, by this solver's class (never by what a
        message says, nor by an attribute an object was given): ``"masked"`` (secure
        aggregation), ``"noised"`` (differential privacy, masked too) or ``None``."""
        cls = type(self)
        if cls.differentially_private:
            return "noised"
        return "masked" if cls.masked else None

    def monitor_sums_in_replies(self, replies, weights):
        """``(sum_j a_j f_j, sum_j a_j grad f_j)`` at the broadcast model from a
        round's replies (``monitors_in_replies`` solvers; every client replied,
        ``weights`` are the objective weights ``a_j``)."""
        values = np.array([r["value"] for r in replies])
        return float(weights @ values), sum(a * r["grad"] for a, r in zip(weights, replies))

    def monitor_from_sums(self, sums):
        """``(pooled loss, pooled gradient)`` from the decoded sums of a round's declared
        fields (:meth:`summed_fields`): their weighted ``value`` and ``grad`` by default;
        a solver whose replies carry other sums pools its monitor from them."""
        return sums["value"], sums["grad"]

    def open_session(self, executor):
        """Exchanges of the fit's session before round one (secure aggregation's key
        agreement); returns the ``(bytes, rounds)`` spent: none by default."""
        return 0, 0

    def monitor_sums(self, session, theta):
        """The monitor's ``(pooled loss, pooled gradient)`` at ``theta`` by a pass of the
        solver's own through ``session`` (:class:`~skfed.federation.session.
        FederationSession`: masked where the sites agreed to it); ``None``: no
        monitoring is allowed (differential privacy); ``NotImplemented`` (the default):
        the round loop's pass of the clients' losses and gradients
        (:mod:`skfed.federation.rounds`)."""
        return NotImplemented

    def rejected_trial(self, server):
        """Whether the aggregate that produced ``server`` rejected the point the
        clients had just evaluated (a line-search trial): that point was never a
        model, and the round loop does not record its objective as one."""
        return False

    def fallback_model(self, server, objective):
        """The model to return instead of the server model when the fit ends on a
        point the solver has not accepted yet and whose ``objective`` (monitored)
        it would reject; ``None``: the server model stands."""
        return None

    def may_stop(self, server, tol):
        """A condition of the solver's own, besides the stopping rule, for the
        fit to stop at the current server model (``True``: none)."""
        return True

    def needs_smoothness(self, layout, datafit):
        """Whether :meth:`setup` needs the smoothness constants (each client's
        top eigenvalue and the pooled one, a federated eigenvalue pass before
        round one). ``False`` when the solver takes no step from them: the
        clients then send trace bounds, used only by the monitor."""
        return True

    # -- checks ---------------------------------------------------------
    def check_problem(self, problem, participation):
        """Raise a clear error if this solver cannot solve ``problem``."""
        label = f"solver {self.name!r} ({type(self).__name__})"
        if self.requires_smooth_datafit and not problem.datafit.smooth:
            raise ValueError(
                f"{label} needs a smooth loss, but {problem.datafit!r} is not "
                "differentiable; use a subgradient solver (e.g. 'fedmls' or 'fedavg')."
            )
        fit = problem.datafit
        if (self.requires_curvature_bound and fit.smooth and fit.curvature is None
                and fit.scale_curvature is not None):
            raise ValueError(
                f"{label} takes its steps from a bound on the loss's curvature, but "
                f"{fit!r} has none (its second derivative grows without bound with the "
                "linear predictor), so no step size is safe; use solver='newton' (with an "
                "Armijo line search on the pooled objective; full participation).")
        if self.requires_full_participation and participation < 1.0:
            raise ValueError(
                f"{label} needs full participation (every client in every round); "
                f"got participation={participation}."
            )
        pen = problem.penalty
        if pen is not None:
            if self.penalty_support == "subgradient" and pen.indicator:
                raise ValueError(
                    f"{label} handles the penalty by subgradients and cannot enforce "
                    f"the constraint {pen!r}; use 'feddualavg' or 'fedmid'."
                )
            if self.penalty_support == "smooth" and not pen.smooth:
                raise ValueError(
                    f"{label} only handles smooth penalties, not {pen!r}."
                )

    # -- what the solver promises (skfed.support_matrix) -----------------
    def guarantee(self, problem, participation=1.0):
        """What this solver, with its current hyper-parameters, reaches on ``problem``.

        Returns ``(status, reason)`` with ``status`` one of ``"exact"`` (the
        pooled optimum, at a linear or accelerated rate), ``"sublinear"``
        (the pooled optimum, slowly: subgradient-type methods) or
        ``"biased"`` (a nearby point: client drift, a doubled penalty, a
        constant subgradient step). Call after :meth:`check_problem`; the
        claims are tested by ``tests/test_support_matrix.py``.
        """
        return "exact", "reaches the pooled optimum"

    # -- lifecycle ------------------------------------------------------
    def setup(self, problem, participation=1.0):
        """Resolve defaults for ``problem``; sets attributes ending in ``_``."""
        self.problem_ = problem
        return self

    @abstractmethod
    def init_server(self, theta0):
        """Server state for the initial model ``theta0``."""

    def init_client(self, j, theta0):
        """Initial state kept by client ``j`` between rounds (``None`` if stateless)."""
        return None

    @abstractmethod
    def broadcast(self, server, rnd):
        """The message the server sends to each participant in round ``rnd``."""

    def personalize(self, server, message, j):
        """The message client ``j`` receives (default: the common broadcast).

        Solvers that keep per-client variables on the server (A-FedPD's
        duals) add them here; ``bytes_down`` counts each client's message.
        """
        return message

    def personalize_round(self, server, message, participants):
        """The messages of one round, one per participant (in order): by default
        :meth:`personalize` for each. Secure aggregation adds each site's public
        coefficients and the round's exchange identifier here."""
        return [self.personalize(server, message, j) for j in participants]

    @abstractmethod
    def client_update(self, client, state, message, rng):
        """Local work of one client: returns ``(reply, new_state)``.

        Must be a pure function of its arguments (it may run in another
        process or on another machine).
        """

    def aggregate(self, server, replies, weights, participants):
        """New server state from the participants' replies.

        ``weights`` are the participants' objective weights ``a_j``,
        renormalized to sum to one; ``participants`` the clients' indices,
        in the order of ``replies``. By default: the sums that
        :meth:`summed_fields` declares (:meth:`sum_replies`), then
        :meth:`aggregate_sums`, the same update as under secure aggregation,
        where only the sums reach the server. A solver whose server reads
        individual replies overrides this instead (its :meth:`summed_fields`
        stays ``None``).
        """
        if self.summed_fields(server) is None:
            raise NotImplementedError(f"{type(self).__name__} must define aggregate, or "
                                      "summed_fields and aggregate_sums.")
        return self.aggregate_sums(server, self.sum_replies(server, replies, weights,
                                                            participants), participants)

    def summed_fields(self, server):
        """The reply fields the server update reads, and only through sums.

        Returns
        -------
        fields : dict or None
            ``{field: kind}`` for the round whose server state is ``server``.
            Kind ``"weighted"``: the update needs ``sum_j w_j r_j[field]``
            with the round's normalized weights ``w``; ``"sum"``:
            ``sum_j r_j[field]``; any other kind is the solver's own, whose
            coefficients its :meth:`reply_coefficients` gives. ``None`` (the
            default): the update reads individual replies, and secure
            aggregation is refused.
        """
        return None

    def reply_coefficients(self, field, kind, weights, participants):
        """Public multipliers ``c_j`` of ``field`` in its sum ``sum_j c_j r_j[field]``.

        Returns
        -------
        coefficients : ndarray of shape (len(participants),) or (len(participants), ...)
            ``weights`` for ``"weighted"``, ones for ``"sum"``. A solver that
            weighs replies by another public quantity (per-client step
            sizes) overrides this for a kind of its own; an entry may then be
            an array, broadcast against the field and multiplied elementwise.
        """
        if kind == "weighted":
            return np.asarray(weights, dtype=float)
        if kind == "sum":
            return np.ones(len(participants))
        raise ValueError(f"{type(self).__name__}: unknown kind {kind!r} of the summed "
                         f"field {field!r}.")

    def sum_replies(self, server, replies, weights, participants):
        """``{field: sum_j c_j r_j[field]}`` from the individual replies (the plain path),
        with ``c`` from :meth:`reply_coefficients`."""
        sums = {}
        for field, kind in self.summed_fields(server).items():
            coefficients = self.reply_coefficients(field, kind, weights, participants)
            sums[field] = add_fields([r[field] for r in replies], coefficients)
        return sums

    def aggregate_sums(self, server, sums, participants):
        """New server state from the sums alone (solvers with :meth:`summed_fields`).

        ``sums`` maps each declared field to its sum (see
        :meth:`sum_replies`); ``participants`` (public: which clients took
        part) gives their number, ``len(participants)``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not aggregate from sums.")

    @abstractmethod
    def server_model(self, server):
        """The model (flat ``theta``) the server would output now."""

    def round_traffic(self, messages, replies, participants):
        """``(bytes_up, bytes_down)`` of one round: by default the sizes of the
        replies and of the messages. Decentralized solvers count per edge."""
        return (int(sum(message_nbytes(r) for r in replies)),
                int(sum(message_nbytes(m) for m in messages)))

    def client_models(self, server, message, replies):
        """Client models implied by the replies (for the consensus metric), or ``None``."""
        return None


def check_positive(value, name, *, allow_auto=False, allow_none=False, strict=True):
    """Validate a positive scalar hyper-parameter with a message naming it."""
    if allow_auto and isinstance(value, str) and value == "auto":
        return value
    if allow_none and value is None:
        return value
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    ok = ok and (value > 0 if strict else value >= 0)
    if not ok:
        extra = " or 'auto'" if allow_auto else ""
        extra += " or None" if allow_none else ""
        sign = "> 0" if strict else ">= 0"
        raise ValueError(f"{name} must be a finite number {sign}{extra}; got {show(value)}.")
    return value


def message_nbytes(message):
    """Bytes of a message: array sizes plus 8 per scalar."""
    total = 0
    for value in message.values():
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif value is not None:
            total += 8
    return total
