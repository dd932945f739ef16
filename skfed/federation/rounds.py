"""The round loop: broadcast, client updates, aggregation, monitoring, stopping."""

import functools
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

from .._messages import count
from ..exceptions import ClientDroppedWarning, ClientFailureError, SiteRefusal
from ..history import ConvergenceHistory
from .operations import COUNTS, SUMS, Arg, check_deadline, site_operation
from .session import add_fields, payload_nbytes
from .smoothness import masked_smoothness


# --- client-side tasks (module level so process executors can pickle them) ---
def _summary_class(client, args):
    """Counts without smoothness constants (the setup of a protected fit: the weight sum
    is then a function of the counts and the public class weights), unless the rows
    carry a weight column; sums with them."""
    if args.get("exact") is None and not getattr(client, "weighted_rows", False):
        return COUNTS
    return SUMS


def _summary_reply(client, values, out, rules):
    """A site service never releases the largest row norm (``row``: a single row's
    value); minibatch step sizes then need an explicit ``client_lr``."""
    if out.get("lipschitz") is not None:
        out["lipschitz"] = dict(out["lipschitz"], row=None)
    return out


@site_operation(
    "fit.client_summary", releases=_summary_class, target="fit", combine="objective",
    describes="row count and weight sum; with exact set, the loss's smoothness constants "
              "(the top eigenvalue of the weighted Gram, or its trace bound), never the "
              "largest row norm",
    arguments=(Arg("exact", "choice", choices=(None, True, False)),),
    reply=_summary_reply, counts=lambda out: [out["n_samples"]],
    packer=lambda exact=True: {"exact": exact})
def client_summary(client, exact=True):
    """What a client sends once before round one: sizes and smoothness constants
    (``exact=False``: trace bounds; see :meth:`ClientObjective.lipschitz`;
    ``None``: none, under differential privacy, where they would be released
    without noise)."""
    return {"n_samples": client.n_samples, "weight_sum": client.weight_sum,
            "lipschitz": None if exact is None else client.lipschitz(exact)}


@site_operation(
    "fit.monitor", releases=SUMS, target="fit", combine="sum",
    describes="the mean loss and its gradient at the broadcast model, under the dominance "
              "rule",
    arguments=(Arg("theta", "floats", most=1 << 24),),
    checks=(lambda client, values, rules: _check_size(client, values["theta"]),))
def client_monitor(client, theta):
    """Loss and gradient at the server model: monitoring only, not the algorithm."""
    return client.value_and_gradient(theta)


def _check_size(client, vector, features=False):
    """A broadcast vector of the model's size (or the features')."""
    from .operations import Refused

    size = client.X.shape[1] if features else client.layout.size
    if vector.shape != (size,):
        raise Refused("message", f"expected a float vector of {size} entries")


def _default_monitor(solver):
    """Whether the solver's monitor is the round loop's pass of ``client_monitor`` (no
    pass of its own: :meth:`~skfed.solvers.base.FederatedSolver.monitor_sums`)."""
    from ..solvers.base import FederatedSolver

    return type(solver).monitor_sums is FederatedSolver.monitor_sums


@dataclass
class FederationResult:
    theta: np.ndarray
    history: ConvergenceHistory
    n_iter: int
    converged: bool
    server: dict = None
    states: list = None


class _Monitor:
    """Objective and proximal-gradient-mapping norm of the global objective.

    The pooled loss and gradient come through the fit's ``session`` (plain, or masked
    under secure aggregation: the server never sees one client's): by the solver's
    own pass where it has one (:meth:`~skfed.solvers.base.FederatedSolver.
    monitor_sums`: a shared Cox baseline's risk-set sums, or none under differential
    privacy), else as the weighted sum of the clients' losses and gradients.
    """

    def __init__(self, problem, session, solver):
        self.problem, self.session, self.solver = problem, session, solver
        self.last_mapped = self.last_blocks = None

    @functools.cached_property
    def tau(self):  # the step of the proximal-gradient mapping, per block (first use:
        # under differential privacy no smoothness constants exist and it is never used)
        return self.problem.block_steps(worst_client=False)

    def __call__(self, theta):
        ledger = self.session.ledger
        spent = ledger.bytes("monitor")
        sums = self.solver.monitor_sums(self.session, theta)
        if sums is None:  # no monitoring (differential privacy)
            self.last_mapped = self.last_blocks = None
            return np.nan, np.nan, 0
        if sums is NotImplemented:
            sums = self.pooled_loss(theta)
        if self.solver.differentially_private:  # a noised pass: no smoothness constants
            problem = self.problem
            objective = float(sums[0]) + problem.layout.penalty_value(problem.penalty, theta)
            self.last_mapped = self.last_blocks = None
            return objective, np.nan, ledger.bytes("monitor") - spent
        objective, stationarity = self.evaluate_sums(theta, *sums)
        return objective, stationarity, ledger.bytes("monitor") - spent

    def pooled_loss(self, theta):
        """``(sum_j a_j f_j(theta), sum_j a_j grad f_j(theta))`` through the session; of
        the sites left when a transport reports some lost for good (a site service
        that stopped answering, under a solver that goes on without it)."""
        problem, session = self.problem, self.session
        lost = session.executor.lost
        if lost and not session.masked:
            alive = [j for j in range(problem.n_clients) if j not in lost]
            weights = problem.weights[alive] / problem.weights[alive].sum()
            value, grad = session.sum(client_monitor, theta, coefficients=weights,
                                      sites=alive, phase="monitor")
        else:
            value, grad = session.sum(client_monitor, theta, coefficients=problem.weights,
                                      phase="monitor")
        return float(value), grad

    def evaluate_sums(self, theta, loss, grad_sum):
        """Objective and stationarity at ``theta`` from the pooled loss
        ``sum_j a_j f_j(theta)`` and gradient ``sum_j a_j grad f_j(theta)``."""
        problem = self.problem
        grad = problem.add_smooth_gradient(grad_sum, theta)
        objective = loss + problem.layout.penalty_value(problem.penalty, theta)
        tau = self.tau
        tau_coef = float(tau[0]) if problem.layout.n_coef else 1.0
        mapped = problem.layout.apply_prox(problem.prox_penalty, theta - tau * grad, tau_coef)
        residual = (theta - mapped) / tau
        stationarity = float(np.linalg.norm(residual))
        self.last_mapped = mapped  # one proximal-gradient step from theta
        blocks = problem.output_blocks
        # separate outputs (one-vs-rest) each meet the stopping rule on their own
        self.last_blocks = (None if blocks is None else
                            np.array([np.linalg.norm(residual[b]) for b in blocks]))
        return objective, stationarity


def _model_stats(layout, theta):
    coef = theta[: layout.n_coef]
    nnz = int(np.count_nonzero(coef))
    shape = layout.penalty_shape
    if min(shape) > 1:
        s = np.linalg.svd(coef.reshape(shape), compute_uv=False)
        rank = int(np.sum(s > 1e-10 * max(s[0], np.finfo(float).tiny))) if s.size else 0
    else:
        rank = int(nnz > 0)
    return nnz, rank


def _consensus(models, weights):
    if not models:
        return np.nan
    mean = sum(a * m for a, m in zip(weights, models))
    return float(sum(a * np.sum((m - mean) ** 2) for a, m in zip(weights, models)))


def _progress_fraction(rnd, max_rounds, stationarity, start, target):
    """How much of the fit is done: the larger of the share of ``max_rounds`` run and the
    share of the way from the initial stationarity to the target, on a log scale (a fit
    that converges in 30 of 1000 rounds fills its bar)."""
    done = rnd / max(max_rounds, 1)
    if np.isfinite(stationarity) and start > 0 and 0 < target < start:
        ratio = np.log(start / max(stationarity, 1e-300)) / np.log(start / target)
        done = max(done, float(ratio))
    return min(max(done, 0.0), 1.0)


def _progress(verbose, rnd, max_rounds, objective, stationarity, target, start=np.nan):
    """verbose=1: a progress bar redrawn in place; verbose>=2: one line per round.

    ``start`` is the stationarity of the initial model: the bar fills with the
    rounds run or with the progress toward ``target`` (``tol * start``),
    whichever is further. A round without a monitor (NaN objective: between
    ``monitor_every`` rounds, or under differential privacy) moves the bar by
    its round count only.
    """
    if not verbose:
        return
    monitored = np.isfinite(objective)
    if verbose >= 2:
        if monitored:
            print(f"round {rnd:5d}  objective {objective:.10g}  stationarity "
                  f"{stationarity:.3e}  (target {target:.3e})", file=sys.stderr)
        return
    width = 30
    filled = int(round(width * _progress_fraction(rnd, max_rounds, stationarity, start,
                                                  target)))
    bar = "#" * filled + "-" * (width - filled)
    tail = (f"  objective {objective:.6g}  stationarity {stationarity:.2e}" if monitored
            else "")
    print(f"\r[{bar}] round {rnd}/{max_rounds}{tail}", end="", file=sys.stderr, flush=True)


def _progress_done(verbose, rnd, max_rounds, converged):
    if verbose:
        if verbose == 1 and converged:  # the bar ends full
            print(f"\r[{'#' * 30}] round {rnd}/{max_rounds}", end="", file=sys.stderr)
        state = "converged" if converged else "stopped at max_rounds"
        print(("\n" if verbose == 1 else "") + f"{state} after {count(rnd, 'round')}",
              file=sys.stderr)


#: rounds over which a non-smooth fit must stop improving before it stops
PLATEAU_WINDOW = 20


def _plateaued(history, tol):
    """Stopping rule for non-smooth losses, whose (sub)gradient mapping does not
    vanish at the optimum: the best objective of the last ``PLATEAU_WINDOW``
    rounds improved on the best before them by at most ``tol`` relatively."""
    values = history["objective"]
    if tol <= 0 or len(values) <= PLATEAU_WINDOW:
        return False
    before, recent = values[:-PLATEAU_WINDOW], values[-PLATEAU_WINDOW:]
    if np.all(np.isnan(before)) or np.all(np.isnan(recent)):  # monitor_every > 1
        return False
    before, recent = float(np.nanmin(before)), float(np.nanmin(recent))
    return before - recent <= tol * max(abs(before), np.finfo(float).tiny)


def _polish(monitor, layout, history, theta):
    """Return one proximal-gradient step from the final server model.

    Uses the pooled gradient the last monitoring pass gathered (no new
    algorithm traffic). By the descent lemma it cannot raise the objective,
    and the prox gives the exact zeros (or exact rank) that an average of
    clients' exactly sparse models only reaches in the limit. The last
    history record is updated to describe the returned model.
    """
    polished = monitor.last_mapped
    objective, stationarity, mon_bytes = monitor(polished)
    if objective > history.records[-1]["objective"]:  # never worse than the average
        return theta
    nnz, rank = _model_stats(layout, polished)
    history.records[-1].update(objective=objective, stationarity=stationarity, nnz=nnz,
                               rank=rank)
    history.records[-1]["monitor_bytes"] += mon_bytes
    return polished


def _handle_failures(solver, executor, history, rnd, failures, n_active):
    """Drop the failed clients from round ``rnd``, or stop the fit if that is not sound.

    Dropping is sound for solvers that allow partial participation: the
    round is then one with fewer participants, and a dropped client's state
    is left as it was. Solvers that need everyone (the executor has already
    retried where it could) and lost state stop the fit with the reason. A
    client whose iterates diverged (``FloatingPointError``) always stops it:
    the step size is too large, and leaving the client out would hide that.
    """
    def describe(j):
        f = failures[j]
        where = f" on worker {f.worker}" if f.worker else ""
        return f"client {executor.labels[j]!r}{where}: {f.error}"

    diverged = [j for j in failures if failures[j].diverged]
    if diverged:  # dropping would hide a step size that is too large
        j = diverged[0]
        message = f"round {rnd}: {solver.name!r} diverged on {describe(j)}".rstrip(".") + "."
        if "step size" not in message:
            message += " Lower the step size (client_lr, lr or server_lr)."
        raise FloatingPointError(
            f"{message} Traceback of client {executor.labels[j]!r}:\n{failures[j].traceback}")
    lost = [j for j in failures if failures[j].state_lost]
    if solver.requires_full_participation or lost or len(failures) == n_active:
        if lost:
            why = ("its solver state (duals, control variates) was lost with its worker, "
                   "so the algorithm cannot continue exactly; re-run the fit")
        elif len(failures) == n_active:
            why = "every participant failed"
        else:
            why = (f"solver {solver.name!r} needs every client in every round, and no "
                   "retry succeeded; fix the client or use a solver that allows partial "
                   "participation (e.g. 'feddyn', 'fedavg')")
        first = (lost or list(failures))[0]
        detail = "; ".join(describe(j) for j in failures)
        raise ClientFailureError(
            f"round {rnd} failed: {detail}. The fit stopped because {why}. "
            f"Traceback of client {executor.labels[first]!r}:\n{failures[first].traceback}")
    for j in failures:
        history.dropped.append({"round": rnd, "client": executor.labels[j],
                                "worker": failures[j].worker, "error": failures[j].error})
    warnings.warn(
        f"round {rnd} went on without {len(failures)} failed client(s): "
        + "; ".join(describe(j) for j in failures) + " (see history_.dropped).",
        ClientDroppedWarning, stacklevel=4)


def run_federation(*, solver, problem, session, theta0, max_rounds, tol, participation,
                   entropy, verbose=0, resume=None, monitor_every=1):
    """Run rounds until the stopping rule or ``max_rounds``.

    Stopping rule: ``stationarity <= tol * stationarity(0)``, the norm of the
    proximal-gradient mapping relative to its value at the zero model, which
    each client can contribute to with one gradient (``monitor_bytes``). For
    a non-smooth loss (hinge) that mapping does not vanish at the optimum:
    the fit stops when the objective stops improving (:func:`_plateaued`).

    The monitor is a pass of its own (a gradient each way) after every
    ``monitor_every``-th round and the last; rounds between are recorded
    with a NaN objective and stationarity, and the stopping rule waits for
    the next monitored round. A solver whose replies carry every client's
    loss value and gradient at the current server model
    (``monitors_in_replies``, e.g. Newton) is monitored from them under full
    participation: no extra pass, except after a round where the solver's own
    condition ``may_stop`` holds, which is checked by a gradient pass (cheaper
    than a round with Hessians) before the fit stops. Where the executor
    ``fuses_monitor`` (site services; in process and on Dask, when the clients
    hold no solver state), a plain fit whose solver monitors by this loop's pass
    sends a monitored round's pass with the next round's step calls instead (one
    call per client and round; the same sums, so the same history; the step
    reuses its gradient at that model: :mod:`~skfed.federation.monitor_reuse`),
    unless a client was lost; the start's and the last round's passes stay their
    own.

    A round whose model the next round's line search rejects (Newton's
    trial points, :meth:`FederatedSolver.rejected_trial`) is recorded with a
    NaN objective and stationarity: that point was never a model.

    Randomness (client sampling, minibatches) comes from ``entropy`` through
    ``SeedSequence``s keyed by (round, client), so any executor gives the
    same result.

    ``resume=(server, states)`` continues from a previous run's solver state
    (``warm_start``): duals, control variates and anchors included.
    """
    loop = _RoundLoop(solver, problem, session, max_rounds=max_rounds, tol=tol,
                      participation=participation, entropy=entropy, verbose=verbose,
                      monitor_every=monitor_every)
    loop.open(theta0, resume)
    loop.start()
    while not loop.converged and loop.rnd < max_rounds:
        check_deadline()  # a fit inside a site's request (a local baseline) stops in time
        if loop.one_round():
            break
    return loop.finish()


class _RoundLoop:
    """The state of one fit's rounds, shared by the steps of :func:`run_federation`."""

    def __init__(self, solver, problem, session, *, max_rounds, tol, participation, entropy,
                 verbose, monitor_every):
        self.solver, self.problem, self.session = solver, problem, session
        self.executor = session.executor
        self.max_rounds, self.tol, self.entropy = max_rounds, tol, entropy
        self.verbose, self.monitor_every = verbose, monitor_every
        self.layout, N = problem.layout, problem.n_clients
        self.history = ConvergenceHistory()
        self.monitor = _Monitor(problem, session, solver)
        self.sampler = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(0,)))
        self.n_active = N if participation >= 1.0 else max(1, int(round(participation * N)))
        self.smooth = problem.datafit.smooth
        # the monitor of a round's model read from the next round's replies
        self.fused = solver.monitors_in_replies and self.n_active == N
        self.pending = None  # that round's record, awaiting them
        # a site service's step can carry the monitor of the model it starts from
        # (``_open``: plain sessions whose solver monitors by the default pass)
        self.requests_fused, self.monitored = False, None
        self.rnd, self.converged = 0, False

    def open(self, theta0, resume):
        """The initial states placed at the clients, and the session's setup exchanges:
        under secure aggregation the keys, after which every sum is masked."""
        solver, problem, session = self.solver, self.problem, self.session
        self.theta = np.array(theta0, dtype=float)
        if resume is not None:
            self.server, states = resume
        else:
            self.server = solver.init_server(self.theta)
            states = [solver.init_client(j, self.theta) for j in range(problem.n_clients)]
        self.executor.place_states(states)  # client state lives with the client from now on
        # under secure aggregation the keys are agreed before anything else is sent
        key_bytes, key_rounds = solver.open_session(self.executor)
        if key_rounds:
            session.ledger.add("setup", key_bytes, key_rounds)
        if solver.masked:
            session.protect(solver)
        if solver.masked and not solver.differentially_private and None in problem.lipschitz:
            # the monitor's constants as one masked sum (no site's own constant leaves it)
            problem.pooled_lipschitz = masked_smoothness(session, problem)
        self.requests_fused = (
            getattr(self.executor, "fuses_monitor", False) and not self.fused
            and self.n_active == problem.n_clients and not session.masked
            and not solver.differentially_private and _default_monitor(solver))

    def start(self):
        """Round 0: the monitor at the start and at zero (the stopping rule's scale)."""
        monitor, tol = self.monitor, self.tol
        objective, stationarity, mon_bytes = monitor(self.theta)
        blocks_now = monitor.last_blocks
        if np.any(self.theta):
            _, self.scale, extra = monitor(self.layout.zeros())
            mon_bytes += extra
        else:
            self.scale = stationarity
        self.target = tol * self.scale
        # per output (one-vs-rest): tol times that output's own stationarity at zero;
        # an output already stationary there is held to the overall target
        self.block_targets = None
        if monitor.last_blocks is not None:
            self.block_targets = np.where(monitor.last_blocks > 0, tol * monitor.last_blocks,
                                          self.target)
        monitor.last_blocks = blocks_now
        nnz, rank = _model_stats(self.layout, self.theta)
        self.started = time.perf_counter()
        self.history.append(round=0, objective=objective, stationarity=stationarity, nnz=nnz,
                            rank=rank, consensus=np.nan, bytes_up=0, bytes_down=0,
                            monitor_bytes=mon_bytes, n_participants=0, n_dropped=0,
                            wall_time=0.0)
        self.converged = self.smooth and self.stationary(stationarity) and \
            self.solver.may_stop(self.server, tol)

    # -- the stopping rule ------------------------------------------------
    def stationary(self, stationarity):
        if not stationarity <= self.target:
            return False
        return self.block_targets is None or bool(
            np.all(self.monitor.last_blocks <= self.block_targets))

    def record(self, objective, stationarity, mon_bytes, fields):
        self.history.append(objective=objective, stationarity=stationarity,
                            monitor_bytes=mon_bytes, **fields)
        if not np.isnan(objective):
            self.converged = ((self.stationary(stationarity) if self.smooth
                               else _plateaued(self.history, self.tol))
                              and self.solver.may_stop(self.server, self.tol))
        _progress(self.verbose, fields["round"], self.max_rounds, objective, stationarity,
                  self.target, self.scale)

    def would_stop(self, stationarity):
        """``record``'s stopping rule, before the record (fused monitor, smooth loss)."""
        return self.smooth and self.stationary(stationarity) and self.solver.may_stop(
            self.server, self.tol)

    # -- one round --------------------------------------------------------
    def one_round(self):
        """Broadcast, client updates, aggregation and the round's record; ``True`` when
        the round was spent on monitoring only (the fit stops)."""
        solver, N, rnd = self.solver, self.problem.n_clients, self.rnd
        if self.n_active == N:
            active = np.arange(N)
        else:
            active = np.sort(self.sampler.choice(N, size=self.n_active, replace=False))
        message = solver.broadcast(self.server, rnd)
        # one seed per client and round, whoever runs it
        seeds = np.random.SeedSequence(self.entropy, spawn_key=(1, rnd)).generate_state(N)
        messages = solver.personalize_round(self.server, message, active)
        jobs = [(j, m, seeds[j]) for j, m in zip(active, messages)]
        retry = solver.requires_full_participation
        try:
            if self.pending is not None and self.requests_fused and not self.executor.lost:
                # the pending model's monitor rides this round's requests
                by_client, failures, self.monitored = self.executor.run_round_monitored(
                    solver, rnd + 1, jobs, self.theta, retry=retry)
            else:
                by_client, failures = self.executor.run_round(solver, rnd + 1, jobs,
                                                              retry=retry)
        except SiteRefusal as refusal:  # a site would not answer at this model
            withheld = (solver.withheld_trial(self.server) if refusal.rule == "dominance"
                        else None)
            if withheld is None:
                raise
            return self._withheld_round(withheld, len(active))
        if failures:
            _handle_failures(solver, self.executor, self.history, rnd + 1, failures,
                             len(active))
            active = np.array([j for j in active if j in by_client])
        replies = [by_client[j] for j in active]
        bytes_up, bytes_down = solver.round_traffic(messages, replies, active)
        self.session.ledger.add("rounds", bytes_up + bytes_down)
        deferred = self._monitor_pending(replies, active)
        if self.converged:  # the fused monitor stopped the fit: the round was spent on
            # monitoring only
            self.history.records[-1]["monitor_bytes"] += bytes_up + bytes_down
            return True
        weights = self.problem.weights[active] / self.problem.weights[active].sum()
        previous = self.server
        self.server = solver.aggregate(self.server, replies, weights, active)
        self._settle_trial(deferred)
        self.theta = solver.server_model(self.server)
        self.rnd += 1
        nnz, rank = _model_stats(self.layout, self.theta)
        models = solver.client_models(previous, message, replies)
        fields = dict(
            round=self.rnd, nnz=nnz, rank=rank,
            consensus=_consensus(models, weights) if models is not None else np.nan,
            bytes_up=bytes_up, bytes_down=bytes_down, n_participants=len(active),
            n_dropped=len(failures), wall_time=time.perf_counter() - self.started,
        )
        self._record_round(fields)
        return False

    def _withheld_round(self, server, n_active):
        """A round whose trial model a site refused under the dominance rule, and the
        solver treats as rejected: recorded with no objective, the step halved."""
        if self.pending is not None:  # that trial's model was never answered at
            fields, self.pending = self.pending, None
            self.record(np.nan, np.nan, 0, fields)
        self.server = server
        self.theta = self.solver.server_model(server)
        self.rnd += 1
        nnz, rank = _model_stats(self.layout, self.theta)
        self.history.append(round=self.rnd, objective=np.nan, stationarity=np.nan, nnz=nnz,
                            rank=rank, consensus=np.nan, bytes_up=0, bytes_down=0,
                            monitor_bytes=0, n_participants=n_active, n_dropped=0,
                            wall_time=time.perf_counter() - self.started)
        return False

    def _monitor_pending(self, replies, active):
        """The fused monitor: the model of the last round read from these replies (which
        are at it). Returns its record when it must wait for the aggregate (the model may
        be a rejected trial), else ``None`` (recorded now, or nothing was pending)."""
        if self.pending is None:
            return None
        N, monitored, self.monitored = self.problem.n_clients, self.monitored, None
        if self.fused and len(active) == N:
            objective, stationarity = self.monitor.evaluate_sums(
                self.theta, *self.solver.monitor_sums_in_replies(replies,
                                                                 self.problem.weights))
            mon_bytes = 0
        elif monitored is not None and len(monitored) == N:
            objective, stationarity, mon_bytes = self._monitor_carried(monitored)
        else:  # a client dropped: monitor on a pass of its own
            objective, stationarity, mon_bytes = self.monitor(self.theta)
        fields, self.pending = self.pending, None
        if not self.smooth or self.would_stop(stationarity):
            self.record(objective, stationarity, mon_bytes, fields)
            return None
        return objective, stationarity, mon_bytes, fields

    def _monitor_carried(self, monitored):
        """The monitor the round's requests carried (``client_monitor`` at every site):
        summed and counted as the monitor's own pass (:meth:`_Monitor.pooled_loss`)."""
        replies = [monitored[j] for j in range(self.problem.n_clients)]
        value, grad = add_fields(replies, self.problem.weights)
        spent = len(replies) * payload_nbytes((self.theta,)) + sum(
            payload_nbytes(r) for r in replies)
        self.session.ledger.add("monitor", spent, rounds=0)  # no exchange of its own
        return (*self.monitor.evaluate_sums(self.theta, float(value), grad), spent)

    def _settle_trial(self, deferred):
        """After the aggregate: a line-search trial the solver has just rejected is not a
        model, and its objective (possibly far above the model's) is not the round's."""
        rejected = self.solver.rejected_trial(self.server)
        if deferred is not None:
            objective, stationarity, mon_bytes, fields = deferred
            if rejected:
                objective = stationarity = np.nan
            self.record(objective, stationarity, mon_bytes, fields)
            self.converged = False  # would_stop said so, at the server that was monitored
        elif rejected and self.history.records[-1]["round"] == self.rnd:  # monitored by a pass
            self.history.records[-1]["objective"] = np.nan
            self.history.records[-1]["stationarity"] = np.nan

    def _record_round(self, fields):
        """The round's record: monitored now, by the next round's replies (fused), or not
        at all (between ``monitor_every`` rounds)."""
        rnd, max_rounds = self.rnd, self.max_rounds
        # fused: the next round's replies monitor this model; but when the solver
        # may stop here, a gradient pass is cheaper than a round (Newton: no Hessians)
        if rnd < max_rounds and self.fused and not self.solver.may_stop(self.server, self.tol):
            self.pending = fields
        elif rnd < max_rounds and rnd % self.monitor_every:
            self.record(np.nan, np.nan, 0, fields)
        elif rnd < max_rounds and self.requests_fused:  # with the next round's requests
            self.pending = fields
        else:
            self.record(*self.monitor(self.theta), fields)

    # -- the end ----------------------------------------------------------
    def finish(self):
        """The model (the last accepted point, polished where the solver asks), the
        history and the client states."""
        history, rnd = self.history, self.rnd
        if not self.converged and rnd > 0:
            # the fit ended on a point the solver had not accepted yet (a line-search
            # trial): if it would reject it, the model is the last accepted point, whose
            # record is the one before (the round that evaluated it)
            fallback = self.solver.fallback_model(self.server, history.records[-1]["objective"])
            if fallback is not None and len(history.records) > 1:
                self.theta = np.array(fallback, dtype=float)
                nnz, rank = _model_stats(self.layout, self.theta)
                previous_record = history.records[-2]
                history.records[-1].update(objective=previous_record["objective"],
                                           stationarity=previous_record["stationarity"],
                                           nnz=nnz, rank=rank)
        if self.solver.polish_output and rnd > 0:
            self.theta = _polish(self.monitor, self.layout, history, self.theta)
        _progress_done(self.verbose, rnd, self.max_rounds, self.converged)
        history.placement_bytes = self.executor.placement_bytes_
        ledger = self.session.ledger
        history.setup_bytes, history.setup_rounds = ledger.bytes("setup"), ledger.rounds("setup")
        # client states stay at the sites under secure aggregation (keys, duals)
        states = None if self.solver.keeps_states_at_sites else self.executor.collect_states()
        return FederationResult(theta=self.theta, history=history, n_iter=rnd,
                                converged=self.converged, server=self.server, states=states)
