"""Client-level differential privacy in the rounds, on top of secure aggregation.

``FedLogisticRegression(privacy=DifferentialPrivacy(epsilon=2, clip_norm=1))``:

* **Each round**, every participating site concatenates the reply fields its
  solver's server update sums (:meth:`FederatedSolver.summed_fields`), *unweighted*,
  clips that vector to L2 norm ``clip_norm`` (``C``), adds its share of the
  Gaussian noise (``noise="distributed"``: ``N(0, sigma^2 C^2 / m)`` per
  coordinate, ``m`` the sites adding noise) and masks it
  (:mod:`~skfed.privacy.secure_rounds`). The server decodes
  ``S = sum_j clip(u_j) + N(0, sigma^2 C^2)`` and nothing else; a weighted
  field becomes ``S / n`` with ``n`` the round's number of participants,
  which is public and fixed in advance (``participation * n_clients``). With
  ``noise="server"`` the sites send clipped messages and the server adds the
  noise after decoding: the guarantee then protects the released model, not
  the sites against the server.
* **The guarantee.** Adding or removing one site moves ``S`` by at most ``C``
  whatever the site computed, so each round is the Gaussian mechanism with
  noise multiplier ``sigma``, and the fit is their adaptive composition over
  its rounds, accounted by ``dp_accounting``'s RDP accountant
  (:class:`~skfed.privacy.GaussianAccountant`): ``(epsilon, delta)``
  client-level DP of everything the server sees in the rounds and of the
  model. A solver's client state (duals, control variates) stays at its site
  and is covered: it only changes what the site's clipped message is.
  Participation sampling is fixed-size, not Poisson, so no amplification by
  sampling is claimed (``sampling_rate=1`` in the accounting).
* **The budget.** By default ``sigma`` is calibrated so that ``max_rounds``
  rounds and the planned monitoring passes spend exactly ``epsilon``; with
  ``noise_multiplier`` given, the fit stops (with a warning saying so) at the
  last round the budget allows.
  ``history_["epsilon"]`` is the epsilon spent after each round.
* **The monitor is noised too.** With ``monitor="ends"`` (the default) the model
  at the start and after the last round, with ``monitor="every"`` every
  monitored round (the estimator's ``monitor_every``), releases the pooled loss
  and gradient the same way: each site clips its unweighted ``[loss, gradient]``
  to ``C``, adds its noise share and masks it; the server divides the decoded sum
  by the public count. Each pass is one more Gaussian mechanism of the fit's
  composition: the budget is planned over the rounds and the monitoring passes
  together (``history_.privacy`` says how many of each), and ``history_``
  reports the noisy objective (no stationarity: there are no smoothness
  constants, so the fit runs its rounds). ``monitor=False`` spends the whole
  budget on the rounds and monitors nothing.
* **What else the server sees.** Row counts (metadata, needed for
  ``n``); no smoothness constants (the solver must take explicit step sizes:
  FedAvg or FedProx with a numeric ``client_lr``). Evaluate the fitted model
  afterwards, on data you may see.

Not covered by the accounting: the fixed-point rounding of each site's noisy
message (at most ``n 2**-(f+1)`` per coordinate of the sum; see
:mod:`skfed.privacy.accounting`), and floating-point attacks on the Gaussian
sampler.
"""

import warnings
from numbers import Integral, Real

import numpy as np

from .._messages import count, show
from ..federation.wire import wire_class
from ..solvers.local_primal import FedAvg, FedProx
from .accounting import (GaussianAccountant, calibrate_noise_multiplier, clip_by_l2_norm,
                         distributed_noise_std)
from .secure_aggregation import DropoutError
from .secure_rounds import SecureAggregation, SecureAggregationSolver, _split


class PrivacyBudgetWarning(UserWarning):
    """The privacy budget ran out before ``max_rounds``: the fit stopped there."""


class PrivacyNoiseWarning(UserWarning):
    """The noise of differential privacy swamped the signal of the fit's updates."""


#: the noise / signal ratio (of the mean update's norms) above which a DP fit warns
NOISE_WARNING_RATIO = 1.0
#: client_lr of the solver ``solver="auto"`` picks under differential privacy, times
#: 1 / the loss's curvature bound (least squares 0.5, logistic 2): a step that is
#: stable for standardized features of moderate correlation
DP_CLIENT_LR = 0.5


@wire_class(role="privacy")
class DifferentialPrivacy(SecureAggregation):
    """Client-level differential privacy with secure aggregation (pass as ``privacy=``).

    Parameters
    ----------
    epsilon : float
        The budget of the whole fit, ``> 0`` (``inf``: no noise; clipping
        and secure aggregation only).
    delta : float, default=1e-5
        The delta of the guarantee, in ``(0, 1)``; take it below one over
        the number of sites.
    clip_norm : float, default=1.0
        ``C``: each site's message (the fields its solver sums, unweighted)
        is scaled down to L2 norm at most ``C``.
    noise : {"distributed", "server"}, default="distributed"
        Where the Gaussian noise is added: shares at the sites, before
        masking (no party sees a noise-free sum), or at the server after
        secure aggregation (the server is trusted with the exact sum).
    noise_multiplier : float or None, default=None
        ``sigma``. ``None``: the smallest ``sigma`` whose ``max_rounds``
        rounds and planned monitoring passes spend ``epsilon``. A number: that
        noise, and the fit stops when the next round would exceed ``epsilon``.
    min_honest : int or None, default=None
        Sites certain to add their noise share (``noise="distributed"``);
        ``None``: every participant. Fewer makes each share larger, so
        that ``min_honest`` shares alone carry the noise.
    random_state : int or None, default=None
        Seeds the noise (for reproducible experiments only; ``None`` draws
        from the operating system, which a deployment must use).
    monitor : {"ends", "every"} or False, default="ends"
        Monitor the fit with noised passes, each charged to the budget as a round
        is: at the start and after the last round (``"ends"``: two passes), or at
        every monitored round (``"every"``: the estimator's
        ``monitor_every``); ``False``: no monitoring pass, the whole budget for the
        rounds.
    bound, fraction_bits
        The fixed-point code, as in :class:`SecureAggregation`.

    Notes
    -----
    The mechanism, the guarantee and what it does not cover are in
    :mod:`skfed.privacy.dp_rounds`. Needs ``client_weighting="uniform"`` (a
    site's weight must not depend on the data of others) and a solver with
    explicit step sizes, FedAvg or FedProx with a numeric ``client_lr``;
    other settings are refused before round one, with the reason.
    """

    def __init__(self, epsilon, *, delta=1e-5, clip_norm=1.0, noise="distributed",
                 noise_multiplier=None, min_honest=None, random_state=None, monitor="ends",
                 bound=2.0 ** 20, fraction_bits="auto"):
        super().__init__(bound=bound, fraction_bits=fraction_bits)
        self.monitor = monitor
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.noise = noise
        self.noise_multiplier = noise_multiplier
        self.min_honest = min_honest
        self.random_state = random_state

    def wrap(self, solver, max_rounds=None, monitor_every=1):
        return DifferentiallyPrivateSolver(solver, self, max_rounds, monitor_every)

    def auto_solver(self, datafit):
        """What ``solver="auto"`` runs under differential privacy: ``(solver, choice)``.

        DP-FedAvg: one full-batch local step of ``client_lr = DP_CLIENT_LR /
        curvature`` (0.5 for least squares, 2 for logistic regression: for
        standardized features), uniform site weights; ``choice`` says so for
        ``history_.privacy``. The usual automatic solvers take their steps from
        smoothness constants that would cross without noise.
        """
        lr = DP_CLIENT_LR / float(datafit.step_curvature or 1.0)
        choice = {"solver": f"fedavg(client_lr={lr:g})", "client_weighting": "uniform",
                  "chosen": "solver='auto' under differential privacy: DP-FedAvg (explicit "
                            "step, for standardized features) with uniform site weights, the "
                            "settings that carry the guarantee"}
        return FedAvg(client_lr=lr), choice

    def check(self):
        """Refuse impossible settings before any round (clear errors)."""
        eps = self.epsilon
        if not isinstance(eps, Real) or isinstance(eps, bool) or not eps > 0:
            raise ValueError(f"DifferentialPrivacy: epsilon must be > 0 (inf for no noise); "
                             f"got {show(eps)}.")
        if not isinstance(self.delta, Real) or not 0 < self.delta < 1:
            raise ValueError(f"DifferentialPrivacy: delta must be in (0, 1); got "
                             f"{show(self.delta)}.")
        c = self.clip_norm
        if not isinstance(c, Real) or isinstance(c, bool) or not np.isfinite(c) or not c > 0:
            raise ValueError(f"DifferentialPrivacy: the clipping bound clip_norm must be a "
                             f"finite number > 0; got {show(c)}.")
        if self.noise not in ("distributed", "server"):
            raise ValueError(f"DifferentialPrivacy: noise must be 'distributed' or 'server'; "
                             f"got {show(self.noise)}.")
        if self.monitor not in ("ends", "every", False):
            raise ValueError(f"DifferentialPrivacy: monitor must be 'ends', 'every' or False; "
                             f"got {show(self.monitor)}.")
        s = self.noise_multiplier
        if s is not None and (not isinstance(s, Real) or isinstance(s, bool)
                              or not np.isfinite(s) or s < 0):
            raise ValueError(f"DifferentialPrivacy: noise_multiplier must be None or a finite "
                             f"number >= 0; got {show(s)}.")
        if self.min_honest is not None and (not isinstance(self.min_honest, Integral)
                                            or self.min_honest < 1):
            raise ValueError(f"DifferentialPrivacy: min_honest must be None or an integer >= 1;"
                             f" got {show(self.min_honest)}.")

    def monitor_every(self, requested, rounds):
        """The round loop's monitoring interval under this privacy: the fit's last round
        only for ``monitor="ends"`` (and without monitoring), else ``requested``."""
        return requested if self.monitor == "every" else max(1, int(rounds))

    def monitor_passes(self, rounds, monitor_every=1):
        """The monitoring passes of a fit of ``rounds`` rounds: round 0, then every
        monitored round and the last (0 without ``monitor``): the noisy releases besides
        the rounds. (A warm start's extra pass at the zero model uses one of them: the
        fit's last model is then not monitored.)"""
        if not self.monitor:
            return 0
        every = self.monitor_every(monitor_every, rounds)
        return 1 + sum(1 for r in range(1, rounds + 1) if r % every == 0 or r == rounds)

    def plan(self, max_rounds, monitor_every=1):
        """``(noise_multiplier, rounds, monitor passes)``: the noise, and the rounds and
        monitoring passes the budget allows (each a release of the composition)."""
        self.check()

        def releases(rounds):
            return rounds + self.monitor_passes(rounds, monitor_every)

        if self.noise_multiplier is not None:
            sigma = float(self.noise_multiplier)
            if not np.isfinite(self.epsilon):
                return sigma, max_rounds, self.monitor_passes(max_rounds, monitor_every)
            if sigma == 0:
                raise ValueError("DifferentialPrivacy: the privacy budget cannot be met: "
                                 f"noise_multiplier=0 spends an infinite epsilon, not "
                                 f"{show(self.epsilon)}.")
            allowed = GaussianAccountant(sigma, 1.0, self.delta).max_rounds(
                self.epsilon, limit=releases(max_rounds))
            rounds = max((r for r in range(max_rounds + 1) if releases(r) <= allowed),
                         default=0)
            if rounds == 0:
                raise ValueError(
                    f"DifferentialPrivacy: the privacy budget cannot be met: one round at "
                    f"noise_multiplier={show(sigma)} (with its monitoring passes) already "
                    f"spends more than epsilon={show(self.epsilon)} at delta="
                    f"{show(self.delta)}; raise the noise or the budget, or monitor=False.")
            return sigma, rounds, self.monitor_passes(rounds, monitor_every)
        passes = self.monitor_passes(max_rounds, monitor_every)
        if not np.isfinite(self.epsilon):
            return 0.0, max_rounds, passes
        return (calibrate_noise_multiplier(self.epsilon, self.delta, releases(max_rounds)),
                max_rounds, passes)


def _refusal(solver):
    """Why ``solver`` cannot carry the guarantee, or None."""
    if isinstance(solver, (FedAvg, FedProx)) and not isinstance(solver.client_lr, str):
        return None
    return (f"solver {solver.name!r} cannot run under differential privacy here: the step "
            "sizes of skfed's other solvers come from each site's smoothness constants "
            "(sent in the clear before round one), and their exactness relies on "
            "noise-free sums. Use solver=FedAvg(client_lr=...) or FedProx(client_lr=...) "
            "with an explicit step size")


class DifferentiallyPrivateSolver(SecureAggregationSolver):
    """A solver run with clipping, Gaussian noise and secure aggregation
    (made by :meth:`DifferentialPrivacy.wrap`)."""

    polish_output = False  # the polish step needs a noise-free monitoring pass
    monitors_in_replies = False  # monitored by noised passes of their own
    differentially_private = True
    #: what a site service receives besides the fixed-point code: the noise, and the
    #: rounds and monitoring passes it checks against its policy and charges its ledger
    #: for. The server's accountant, noise seeds and noise report stay with it: a site
    #: service accounts and draws its noise itself (skfed.sites.guard)
    _wire_attributes = ("noise_multiplier_", "rounds_", "monitor_passes_")

    def __init__(self, solver, config, max_rounds=None, monitor_every=1):
        super().__init__(solver, config, max_rounds)
        self.monitor_every = monitor_every

    def loop_monitor_every(self, requested):
        return self.config.monitor_every(requested, self.rounds_)

    def needs_smoothness(self, layout, datafit):
        return False

    def setup(self, problem, participation=1.0):
        why = _refusal(self.solver)
        if why is not None:
            raise ValueError(why + ".")
        if not np.allclose(problem.weights, problem.weights[0], rtol=1e-12, atol=0):
            raise ValueError(
                "differential privacy needs client_weighting='uniform': with 'samples' a "
                "site's weight is its share of all rows, so removing one site would change "
                "every other site's coefficient (the sensitivity bound needs public, fixed "
                "coefficients).")
        super().setup(problem, participation)
        config = self.config
        N = problem.n_clients
        self.n_active_ = N if participation >= 1.0 else max(1, int(round(participation * N)))
        sigma, self.rounds_, self.monitor_passes_ = config.plan(self.max_rounds,
                                                                self.monitor_every)
        self.monitors_done_, self.monitor_rounds_ = 0, []
        self.noise_multiplier_ = sigma
        self.accountant_ = GaussianAccountant(sigma, 1.0, config.delta)
        m = config.min_honest if config.min_honest is not None else self.n_active_
        if m > self.n_active_:
            raise ValueError(f"DifferentialPrivacy: min_honest={m} is more than the "
                             f"{self.n_active_} sites of a round.")
        self.share_std_ = distributed_noise_std(sigma, config.clip_norm, self.n_active_,
                                                min_honest=m) if sigma > 0 else 0.0
        self.noise_rng_ = np.random.default_rng(config.random_state)
        # the noise on the mean update: per coordinate sigma * C / n (every share added)
        total_std = (self.share_std_ * np.sqrt(self.n_active_) if config.noise == "distributed"
                     else sigma * config.clip_norm)
        self.mean_noise_std_ = float(total_std) / self.n_active_
        self.noisy_energy_, self.noise_energy_, self.final_step_ = [], 0.0, np.nan
        return self

    def privacy_record(self):
        record = super().privacy_record()
        record.update(epsilon=float(self.config.epsilon), delta=float(self.config.delta),
                      clip_norm=float(self.config.clip_norm), noise=self.config.noise,
                      noise_multiplier=self.noise_multiplier_, rounds_allowed=self.rounds_,
                      monitor_passes_allowed=self.monitor_passes_,
                      monitor_passes=self.monitors_done_)
        return record

    def epsilon_after(self, rounds, monitor_passes=None):
        """Epsilon after ``rounds`` rounds and ``monitor_passes`` monitoring passes (by
        default, those the fit ran by the end of round ``rounds``)."""
        passes = (sum(1 for r in self.monitor_rounds_ if r <= rounds)
                  if monitor_passes is None else monitor_passes)
        return self.accountant_.epsilon_after(rounds + passes)

    def noise_report(self):
        """What the noise did to the fit, measured from the released (noisy) updates.

        Returns a dict: ``noise_norm``, the expected L2 norm of the noise on
        the mean update (``std * sqrt(d)``, ``std = sigma * C / n`` per
        coordinate); ``signal_norm``, the root mean square norm of the
        noise-free mean update, estimated from the released ones
        (``E||u + z||^2 = ||u||^2 + d std^2``, averaged over the rounds; 0
        if the noise alone explains them); ``ratio`` of the two;
        ``fit_ratio``, ``ratio / sqrt(rounds)``: the noise added over the fit
        against its signal (see :func:`noise_warning`); ``rounds``;
        ``final_step``: the last round's (noisy) change of the model
        relative to the model's norm.
        """
        if not self.noisy_energy_:
            return None
        noise2 = self.noise_energy_
        signal2 = max(0.0, float(np.mean(self.noisy_energy_)) - noise2)
        ratio = np.sqrt(noise2 / signal2) if signal2 > 0 else np.inf
        rounds = len(self.noisy_energy_)
        return {"noise_norm": float(np.sqrt(noise2)), "signal_norm": float(np.sqrt(signal2)),
                "ratio": float(ratio), "fit_ratio": float(ratio / np.sqrt(rounds)),
                "rounds": rounds, "final_step": self.final_step_}

    # -- rounds -----------------------------------------------------------
    def personalize_round(self, server, message, participants):
        if len(participants) != self.n_active_:
            raise ValueError(f"differential privacy: round with {len(participants)} sites, "
                             f"{self.n_active_} planned (the count must be public and fixed).")
        messages = super().personalize_round(server, message, participants)
        seeds = self.noise_rng_.integers(0, 2 ** 63, size=len(messages)) \
            if self.config.random_state is not None else [None] * len(messages)
        distributed = self.config.noise == "distributed"
        for m, seed in zip(messages, seeds):
            # the site sends its fields unweighted; the server divides by the public count
            m["coefficients"] = {f: 1.0 for f in m["coefficients"]}
            m["clip"] = float(self.config.clip_norm)
            m["noise_std"] = self.share_std_ if distributed else 0.0
            m["noise_seed"] = None if seed is None else int(seed)
        return messages

    def _privatize(self, vector, message):
        """Clip the site's unweighted message to ``C``; add its noise share."""
        vector = clip_by_l2_norm(vector, message["clip"])
        if message["noise_std"] > 0:
            noise_rng = np.random.default_rng(message["noise_seed"])  # None: OS entropy
            vector = vector + noise_rng.normal(0.0, message["noise_std"], size=vector.shape)
        return vector

    def _kept_for_recovery(self, reply, vector, shapes, message):
        """The clipped, noised vector the round released: a site keeps nothing from
        before its noise, so no later message can make it send that."""
        return {"vector": vector, "shapes": shapes,
                "coefficients": dict(message["coefficients"])}

    def _recovery_vector(self, pending, message):
        """The released vector again, unchanged: its coefficients were fixed (ones) when
        its noise was added, and a recovery cannot weigh it anew."""
        if set(message["coefficients"]) != set(pending["coefficients"]) or any(
                not np.array_equal(message["coefficients"][f], c)
                for f, c in pending["coefficients"].items()):
            raise ValueError("differential privacy: a noised reply can be masked again "
                             "only with the coefficients it was released with.")
        return pending["vector"], pending["shapes"]

    def aggregate(self, server, replies, weights, participants):
        masked = set(replies[0]["masked"].parties)
        if masked != {int(j) for j in participants}:
            lost = sorted(masked - {int(j) for j in participants})
            raise DropoutError(
                f"differential privacy: sites {lost} dropped after masking. The round's "
                f"noise shares and its public count of {self.n_active_} sites were set for "
                f"every participant, so the round cannot go on without them; re-run the fit "
                f"(min_honest below the round size makes each share large enough for fewer "
                f"sites, but a lost site's masks still cannot be removed).", missing=lost)
        sums = self._sums(replies)
        if self.config.noise == "server" and self.noise_multiplier_ > 0:
            total = np.concatenate([np.ravel(sums[f]) for f in sums])
            total = total + self.noise_rng_.normal(
                0.0, self.noise_multiplier_ * self.config.clip_norm, size=total.shape)
            sums = _split(total, {f: np.shape(v) for f, v in sums.items()})
        n = self.n_active_  # public: fixed before the fit
        kinds = self.solver.summed_fields(server)
        sums = {f: (v / n if kinds[f] == "weighted" else v) for f, v in sums.items()}
        # what the noise does, from released numbers only (no extra disclosure)
        released = np.concatenate([np.ravel(sums[f]) for f in sums])
        self.noisy_energy_.append(float(released @ released))
        self.noise_energy_ = self.mean_noise_std_ ** 2 * released.size
        before = self.solver.server_model(server)
        out = self.solver.aggregate_sums(server, sums, participants)
        after = self.solver.server_model(out)
        self.final_step_ = float(np.linalg.norm(after - before)
                                 / max(np.linalg.norm(after), np.finfo(float).tiny))
        return out

    def monitor_sums(self, session, theta):
        # a noised pass of its own (masked_sum below), or none at all
        if not self.config.monitor or self.monitors_done_ >= self.monitor_passes_:
            return None
        return NotImplemented

    def masked_sum(self, executor, fn, args, *, coefficients=None, scale=1.0):
        """The noised monitoring pass: each site's unweighted loss and gradient, clipped
        to ``C``, with its noise share, masked; the decoded sum divided by the public
        count. No other pass runs under differential privacy (its sums would carry no
        noise)."""
        from ..federation.rounds import client_monitor

        if fn is not client_monitor:
            raise ValueError("differential privacy: no pass but the rounds and the noised "
                             "monitor (an inference or smoothness pass would carry no "
                             "noise).")
        if self.monitors_done_ >= self.monitor_passes_:
            raise ValueError("differential privacy: more monitoring passes than planned.")
        self.monitors_done_ += 1
        self.monitor_rounds_.append(len(self.noisy_energy_))  # after the rounds so far
        N = self.problem_.n_clients
        exchange, parties = self._next_exchange(), tuple(range(N))
        seeds = self.noise_rng_.integers(0, 2 ** 63, size=N) \
            if self.config.random_state is not None else [None] * N
        distributed = self.config.noise == "distributed"
        jobs = [(j, {"kind": "monitor", "theta": args[0], "weight": 1.0,
                     "clip": float(self.config.clip_norm),
                     "noise_std": self.share_std_ if distributed else 0.0,
                     "noise_seed": None if seeds[j] is None else int(seeds[j]),
                     "exchange": exchange, "parties": parties}) for j in range(N)]
        replies = self._run(executor, "monitoring", jobs)
        sums = self._sums([replies[j] for j in range(N)])
        if not distributed and self.noise_multiplier_ > 0:
            total = np.concatenate([np.ravel(sums[f]) for f in ("value", "grad")])
            total = total + self.noise_rng_.normal(
                0.0, self.noise_multiplier_ * self.config.clip_norm, size=total.shape)
            sums = _split(total, {f: np.shape(sums[f]) for f in ("value", "grad")})
        traffic = sum(replies[j]["masked"].nbytes for j in replies) + N * (args[0].nbytes + 8)
        return (float(np.ravel(sums["value"])[0]) / N, np.asarray(sums["grad"]) / N), traffic

    def _privatize_pass(self, vector, message):
        """A monitoring pass is clipped and noised as a round is; no other pass runs."""
        if message["kind"] != "monitor":
            raise ValueError("differential privacy: a site answers rounds and noised "
                             "monitoring passes only.")
        return self._privatize(vector, message)


def noise_warning(estimator, report, n_sites, rounds, epsilon, clip_norm):
    """Warn when the noise added over the fit outweighs the signal of its updates.

    Over ``T`` rounds independent noise adds up as ``sqrt(T)`` times its
    per-round norm and a steady update as ``T`` times its norm: the fit warns
    when ``noise_norm / (signal_norm * sqrt(T))`` (``report["fit_ratio"]``)
    exceeds :data:`NOISE_WARNING_RATIO`.
    """
    if report is None or not report["fit_ratio"] > NOISE_WARNING_RATIO:
        return
    measured = ("no update could be measured above the noise" if report["signal_norm"] == 0
                else f"the update without noise is estimated at {report['signal_norm']:.3g} "
                     f"(from the released updates): over the {count(rounds, 'round')} the "
                     f"noise adds up to {report['fit_ratio']:.3g} times the signal (noise x "
                     f"sqrt(rounds) against signal x rounds)")
    warnings.warn(
        f"{type(estimator).__name__}: the differential-privacy noise swamps the signal: the "
        f"noise on the mean update has norm {report['noise_norm']:.3g} per round; {measured}. "
        f"With {count(n_sites, 'site')}, epsilon={show(epsilon)} and clip_norm="
        f"{show(clip_norm)} the model may be no better than a constant. What helps: more "
        f"sites (the noise on the mean shrinks as 1/sites), a larger epsilon, fewer rounds "
        f"(max_rounds: less noise per round) or a larger clip_norm (if the updates are "
        f"clipped).", PrivacyNoiseWarning, stacklevel=4)


def budget_warning(estimator, rounds, max_rounds, epsilon):
    warnings.warn(
        f"{type(estimator).__name__}: the privacy budget epsilon={show(epsilon)} allows "
        f"{count(rounds, 'round')} at the given noise_multiplier; the fit stopped there "
        f"(max_rounds={max_rounds}).", PrivacyBudgetWarning, stacklevel=3)
