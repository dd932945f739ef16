"""Client-level differential privacy: clipping, Gaussian noise and its accounting.

The mechanism (DP-FedAvg style, McAfee/McMahan et al. 2018): in every round
each participating client clips its message to L2 norm ``C``
(:func:`clip_by_l2_norm`), the messages are summed, and the sum receives
Gaussian noise of standard deviation ``sigma * C``. Adding or removing one
client moves the sum by at most ``C``, so one round is the Gaussian
mechanism with noise multiplier ``sigma``; ``T`` rounds are its ``T``-fold
composition, and when each client takes part in a round independently with
probability ``q`` (Poisson sampling) each round is amplified by subsampling.
The epsilon is computed by ``dp_accounting``'s RDP accountant
(:class:`GaussianAccountant`), never by hand, and
:func:`calibrate_noise_multiplier` inverts it.

Where the noise is added
------------------------
* **At the server**, after secure aggregation: the server sees the exact
  sum before adding noise, so the guarantee holds against everyone who sees
  the *released* model, not against the server.
* **Distributed across the sites** (:func:`distributed_noise_std`,
  :func:`distributed_noise_share`): each of ``n`` sites adds
  ``N(0, sigma^2 C^2 / n)`` to its clipped message before masking; the sum of
  the shares is ``N(0, sigma^2 C^2)``. Combined with secure aggregation the
  server only ever decodes the noisy sum: no party sees a noise-free sum.
  If some sites may drop out, or up to ``t`` sites may collude with the
  server (and subtract their own shares), calibrate the shares for the
  ``min_honest`` sites that are certain to contribute noise.

Caveats to state with any guarantee
-----------------------------------
* Amplification by sampling (``sampling_rate < 1``) assumes Poisson
  sampling of clients (each independently with probability ``q``). With a
  fixed number of clients drawn per round, use ``sampling_rate=1`` (no
  amplification) unless the accounting is redone for that scheme.
* The sensitivity is ``C`` for the *sum* of clipped messages. Weighted sums
  must clip the weighted message (``w_j x_j``) to ``C``, and a mean must be
  divided by a *public* count (for example the expected number of
  participants), not by a data-dependent total.
* Fixed-point rounding (secure aggregation): each site's noisy message is
  rounded to the grid ``2**-f`` before summation, which perturbs every
  coordinate of the sum by at most ``n 2**-(f+1)``. This per-site rounding
  is not a post-processing of the noisy sum, so the Gaussian accounting is
  exact only for the real-valued sum; choose ``f`` so that
  ``sqrt(d) n 2**-(f+1)`` is negligible against ``sigma C`` (for example
  ``f >= 32``). A rigorous accounting of the rounding uses the distributed
  discrete Gaussian (Kairouz, Liu & Steinke, 2021); not implemented.
* Noise is drawn with numpy's generator (seeded from OS entropy by
  default), a floating-point Gaussian sampler: adequate for research and for
  honest reporting of epsilon, not hardened against floating-point attacks.

References
----------
H. B. McMahan, D. Ramage, K. Talwar, L. Zhang, "Learning Differentially
Private Recurrent Language Models", ICLR 2018.
I. Mironov, "Renyi Differential Privacy", CSF 2017.
P. Kairouz, Z. Liu, T. Steinke, "The Distributed Discrete Gaussian Mechanism
for Federated Learning with Secure Aggregation", ICML 2021.
"""

from numbers import Integral, Real

import numpy as np

from .._messages import show

try:  # optional dependency: skfed[privacy]
    import dp_accounting
    from dp_accounting import rdp
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
except ImportError:  # pragma: no cover - exercised only without the extra
    dp_accounting = None

__all__ = ["GaussianAccountant", "calibrate_noise_multiplier", "clip_by_l2_norm",
           "distributed_noise_std", "distributed_noise_share"]


def _require_dp_accounting():
    if dp_accounting is None:
        raise ImportError("differential privacy accounting needs the 'dp-accounting' package: "
                          "pip install 'skfed[privacy]'")


def _is_real(value):
    return isinstance(value, Real) and not isinstance(value, bool)


def _check_delta(delta):
    if not _is_real(delta) or not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {show(delta)}.")
    return float(delta)


def _check_sampling_rate(q):
    if not _is_real(q) or not 0 < q <= 1:
        raise ValueError(f"sampling_rate must be in (0, 1], got {show(q)}.")
    return float(q)


def _check_rounds(rounds, *, allow_zero=False):
    if not isinstance(rounds, Integral) or isinstance(rounds, bool):
        raise TypeError(f"rounds must be an integer, got {show(rounds)}.")
    low = 0 if allow_zero else 1
    if rounds < low:
        raise ValueError(f"rounds must be >= {low}, got {rounds}.")
    return int(rounds)


def _round_event(noise_multiplier, sampling_rate):
    event = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sampling_rate < 1:
        event = dp_accounting.PoissonSampledDpEvent(sampling_rate, event)
    return event


class GaussianAccountant:
    """Privacy spent by repeated (Poisson-subsampled) Gaussian rounds, by RDP.

    One round is ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` (or the
    bare Gaussian event when ``q = 1``); ``T`` rounds are
    ``SelfComposedDpEvent(round, T)``, accounted by
    ``dp_accounting.rdp.RdpAccountant`` under the add-or-remove-one-client
    relation. The per-order RDP of one round is computed once by the
    accountant and scaled by ``T`` (RDP composes additively, which is how the
    accountant itself composes ``SelfComposedDpEvent``), so per-round
    histories and budget searches cost one accountant call.

    Parameters
    ----------
    noise_multiplier : float
        ``sigma``: noise standard deviation divided by the clipping bound
        ``C``. ``0`` means no noise (epsilon is infinite).
    sampling_rate : float, default=1.0
        ``q``, each client's probability of taking part in a round (Poisson
        sampling). ``1`` means every client in every round.
    delta : float, default=1e-5
        The delta at which epsilon is reported, in ``(0, 1)``.
    orders : sequence of float, optional
        RDP orders; ``dp_accounting``'s defaults if ``None``.

    Examples
    --------
    >>> acc = GaussianAccountant(noise_multiplier=1.1, sampling_rate=0.1, delta=1e-5)
    >>> eps = acc.epsilon_after(100)                      # doctest: +SKIP
    """

    def __init__(self, noise_multiplier, sampling_rate=1.0, delta=1e-5, *, orders=None):
        _require_dp_accounting()
        if not _is_real(noise_multiplier) or not np.isfinite(noise_multiplier) \
                or noise_multiplier < 0:
            raise ValueError(f"noise_multiplier must be a finite number >= 0, "
                             f"got {show(noise_multiplier)}.")
        self.noise_multiplier = float(noise_multiplier)
        self.sampling_rate = _check_sampling_rate(sampling_rate)
        self.delta = _check_delta(delta)
        self.orders = None if orders is None else tuple(float(o) for o in orders)
        self._round_rdp = None

    def _accountant(self):
        return rdp.RdpAccountant(orders=self.orders)

    def _rdp_per_round(self):
        # RDP composes additively: T rounds have T times the RDP of one round, which
        # is what the RdpAccountant computes for SelfComposedDpEvent(round, T). The
        # per-order RDP of one subsampled round is the expensive part: compute it once.
        if self._round_rdp is None:
            accountant = self._accountant().compose(self.round_event())
            self._round_rdp = (accountant.orders, accountant.rdp)
        return self._round_rdp

    def round_event(self):
        """The ``DpEvent`` of one round."""
        return _round_event(self.noise_multiplier, self.sampling_rate)

    def event(self, rounds):
        """The ``DpEvent`` of ``rounds`` rounds (``SelfComposedDpEvent``)."""
        rounds = _check_rounds(rounds, allow_zero=True)
        return dp_accounting.SelfComposedDpEvent(self.round_event(), rounds)

    def epsilon_after(self, rounds):
        """Epsilon at :attr:`delta` after ``rounds`` rounds.

        Parameters
        ----------
        rounds : int
            Number of rounds, ``>= 0`` (``0`` gives ``0.0``).

        Returns
        -------
        float
            ``inf`` when ``noise_multiplier == 0``.
        """
        rounds = _check_rounds(rounds, allow_zero=True)
        if rounds == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return float("inf")
        orders, per_round = self._rdp_per_round()
        return float(compute_epsilon(orders, rounds * per_round, self.delta)[0])

    def epsilons(self, rounds):
        """Epsilon after each of the rounds ``1, ..., rounds`` (for a per-round history).

        Parameters
        ----------
        rounds : int
            ``>= 1``.

        Returns
        -------
        ndarray of float, shape (rounds,)
            Non-decreasing; entry ``t - 1`` equals :meth:`epsilon_after` ``(t)``.
        """
        rounds = _check_rounds(rounds)
        if self.noise_multiplier == 0:
            return np.full(rounds, np.inf)
        return np.array([self.epsilon_after(t) for t in range(1, rounds + 1)])

    def max_rounds(self, epsilon, limit=10 ** 6):
        """The largest number of rounds whose epsilon stays within ``epsilon``.

        Parameters
        ----------
        epsilon : float
            The budget, ``> 0``.
        limit : int, default=10**6
            Search no further (returned if the budget lasts that long).

        Returns
        -------
        int
            ``0`` if even one round exceeds the budget.
        """
        if not _is_real(epsilon) or not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {show(epsilon)}.")
        limit = _check_rounds(limit)
        if self.epsilon_after(1) > epsilon:
            return 0
        low, high = 1, 2
        while high <= limit and self.epsilon_after(high) <= epsilon:
            low, high = high, 2 * high
        if high > limit:
            if self.epsilon_after(limit) <= epsilon:
                return limit
            high = limit
        while high - low > 1:  # eps(low) <= epsilon < eps(high)
            mid = (low + high) // 2
            if self.epsilon_after(mid) <= epsilon:
                low = mid
            else:
                high = mid
        return low

    def __repr__(self):
        return (f"GaussianAccountant(noise_multiplier={show(self.noise_multiplier)}, "
                f"sampling_rate={show(self.sampling_rate)}, delta={show(self.delta)})")


def _bracket(eps, epsilon, max_noise_multiplier):
    """An explicit bracket ``[low, high]`` of noise multipliers with ``eps(low) > epsilon
    >= eps(high)``, both finite (``low`` below 1e-6 when almost no noise meets it)."""
    high = 1.0
    while eps(high) > epsilon:
        high = min(2 * high, max_noise_multiplier)
    low = high / 2
    while eps(low) <= epsilon:
        high, low = low, low / 2
        if low < 1e-6:
            break
    return low, high


def calibrate_noise_multiplier(epsilon, delta, rounds, sampling_rate=1.0, *, orders=None,
                               rtol=1e-4, max_noise_multiplier=1e4):
    """Smallest noise multiplier whose ``rounds`` rounds spend at most ``epsilon``.

    Brackets the root of ``epsilon(sigma) - epsilon`` (epsilon decreases in
    sigma) and refines it with ``dp_accounting.calibrate_dp_mechanism``
    (Brent's method, then a guarantee that the returned value is on the
    private side), every evaluation by a fresh
    :class:`~dp_accounting.rdp.RdpAccountant` on the same events as
    :class:`GaussianAccountant`.

    Parameters
    ----------
    epsilon : float
        Target epsilon, ``> 0``.
    delta : float
        Target delta, in ``(0, 1)``.
    rounds : int
        Number of rounds of the whole fit, ``>= 1``.
    sampling_rate : float, default=1.0
        Poisson sampling rate of clients per round, in ``(0, 1]``.
    orders : sequence of float, optional
        RDP orders (``dp_accounting``'s defaults if ``None``).
    rtol : float, default=1e-4
        Relative tolerance on sigma.
    max_noise_multiplier : float, default=1e4
        Give up beyond this noise multiplier.

    Returns
    -------
    float
        ``sigma`` with ``GaussianAccountant(sigma, sampling_rate, delta,
        orders=orders).epsilon_after(rounds) <= epsilon``, within ``rtol`` of
        the smallest such value.

    Raises
    ------
    ValueError
        If an argument is out of range (``epsilon <= 0``, ``delta`` outside
        ``(0, 1)``, ``rounds < 1``, ``sampling_rate`` outside ``(0, 1]``), or
        if the budget cannot be met with ``sigma <= max_noise_multiplier``.
    """
    _require_dp_accounting()
    if not _is_real(epsilon) or not np.isfinite(epsilon) or not epsilon > 0:
        raise ValueError(f"the privacy budget cannot be met: epsilon must be a finite "
                         f"number > 0, got {show(epsilon)}.")
    delta = _check_delta(delta)
    rounds = _check_rounds(rounds)
    sampling_rate = _check_sampling_rate(sampling_rate)
    if not _is_real(rtol) or not 0 < rtol < 1:
        raise ValueError(f"rtol must be in (0, 1), got {show(rtol)}.")

    def eps(sigma):
        return GaussianAccountant(sigma, sampling_rate, delta,
                                  orders=orders).epsilon_after(rounds)

    if eps(max_noise_multiplier) > epsilon:
        raise ValueError(
            f"the privacy budget cannot be met: epsilon = {show(epsilon)} at delta = {show(delta)} over "
            f"{rounds} rounds (sampling rate {show(sampling_rate)}) needs a noise multiplier above "
            f"max_noise_multiplier = {show(max_noise_multiplier)}. Raise epsilon or delta, or run "
            f"fewer rounds.")
    low, high = _bracket(eps, epsilon, max_noise_multiplier)
    if eps(low) <= epsilon:  # the budget is met by (almost) no noise: the tiny sigma
        return float(low)

    def make_event(sigma):
        event = _round_event(sigma, sampling_rate)
        return dp_accounting.SelfComposedDpEvent(event, rounds)

    sigma = dp_accounting.calibrate_dp_mechanism(
        lambda: rdp.RdpAccountant(orders=orders), make_event, float(epsilon), delta,
        bracket_interval=dp_accounting.ExplicitBracketInterval(low, high),
        tol=rtol * low)
    # calibrate_dp_mechanism's contract: epsilon(sigma) <= target (decreasing in sigma)
    return float(sigma)


def clip_by_l2_norm(vector, bound):
    """Scale ``vector`` down to L2 norm at most ``bound`` (unchanged if within it).

    Parameters
    ----------
    vector : array-like of float
        The message (any shape; the norm is over all entries).
    bound : float
        The clipping bound ``C``, ``> 0``.

    Returns
    -------
    ndarray of float64
        ``vector * min(1, bound / ||vector||_2)`` (a new array).

    Raises
    ------
    ValueError
        If ``bound <= 0`` or not finite, or the vector has non-finite entries.
    """
    if not _is_real(bound) or not np.isfinite(bound) or not bound > 0:
        raise ValueError(f"the clipping bound must be a finite number > 0, got {show(bound)}.")
    x = np.array(vector, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError("cannot clip a vector with non-finite entries.")
    norm = float(np.linalg.norm(x.ravel()))
    if norm > bound:
        x *= bound / norm
        # guard the last ulp: the scaled norm may exceed the bound by rounding
        over = float(np.linalg.norm(x.ravel()))
        if over > bound:
            x *= np.nextafter(bound / over, 0.0)
    return x


def distributed_noise_std(noise_multiplier, clip_norm, n_parties, *, min_honest=None):
    """Standard deviation of each site's share of distributed Gaussian noise.

    With ``m`` sites each adding ``N(0, sigma^2 C^2 / m)``, the sum of their
    shares is ``N(0, sigma^2 C^2)``: the noise of the centralized mechanism.

    Parameters
    ----------
    noise_multiplier : float
        ``sigma`` (>= 0), for example from :func:`calibrate_noise_multiplier`.
    clip_norm : float
        ``C`` (> 0), the L2 bound every message is clipped to.
    n_parties : int
        Sites adding noise in the round.
    min_honest : int, optional
        The number ``m <= n_parties`` of sites guaranteed to add their share
        and not collude with the server (dropouts and colluders subtract
        theirs). Defaults to ``n_parties``; ``n_parties - t`` tolerates ``t``
        colluding or dropped sites at the price of ``n / (n - t)`` times the
        total noise variance.

    Returns
    -------
    float
        ``sigma * C / sqrt(m)``.
    """
    if not _is_real(noise_multiplier) or not np.isfinite(noise_multiplier) \
            or noise_multiplier < 0:
        raise ValueError(f"noise_multiplier must be a finite number >= 0, "
                         f"got {show(noise_multiplier)}.")
    if not _is_real(clip_norm) or not np.isfinite(clip_norm) or not clip_norm > 0:
        raise ValueError(f"the clipping bound must be a finite number > 0, got {show(clip_norm)}.")
    if not isinstance(n_parties, Integral) or isinstance(n_parties, bool) or n_parties < 1:
        raise ValueError(f"n_parties must be an integer >= 1, got {show(n_parties)}.")
    m = n_parties if min_honest is None else min_honest
    if not isinstance(m, Integral) or isinstance(m, bool) or not 1 <= m <= n_parties:
        raise ValueError(f"min_honest must be an integer in [1, n_parties={n_parties}], "
                         f"got {show(min_honest)}.")
    return float(noise_multiplier) * float(clip_norm) / np.sqrt(m)


def distributed_noise_share(shape, noise_multiplier, clip_norm, n_parties, *, min_honest=None,
                            random_state=None):
    """One site's noise share, ``N(0, (sigma C)^2 / m)`` per coordinate.

    Add it to the clipped message before fixed-point encoding and masking.

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the message.
    noise_multiplier, clip_norm, n_parties, min_honest
        As in :func:`distributed_noise_std`.
    random_state : None, int or numpy.random.Generator
        ``None`` seeds from OS entropy (what a deployment should use); an
        int or generator is for reproducible experiments only.

    Returns
    -------
    ndarray of float64
    """
    std = distributed_noise_std(noise_multiplier, clip_norm, n_parties, min_honest=min_honest)
    rng = np.random.default_rng(random_state)
    return rng.normal(0.0, std, size=shape)
