"""Client-level differential privacy in the rounds (``privacy=DifferentialPrivacy(...)``).

The noise and the reported epsilon are dp-accounting's for the same mechanism,
every site's message is clipped, the fit without noise is the plain fit, and
an empirical check on a tiny problem: the released sums with and without one
site differ by no more than the one-round guarantee allows (and the same
check catches a mechanism with too little noise).
"""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from skfed import FedLasso, FedLogisticRegression
from skfed.solvers import FedAvg, FedProx

dp_accounting = pytest.importorskip("dp_accounting", reason="needs skfed[privacy]")
pytest.importorskip("cryptography", reason="needs skfed[privacy]")
from skfed.privacy import DifferentialPrivacy, PrivacyBudgetWarning  # noqa: E402
from skfed.privacy import dp_rounds  # noqa: E402
from skfed.privacy.secure_rounds import SecureAggregationSolver  # noqa: E402

from .conftest import fit_quietly  # noqa: E402

DELTA = 1e-5


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    return X, y, np.arange(len(y)) % 6


def _model(**kwargs):
    kwargs.setdefault("solver", FedAvg(client_lr=0.5))
    return FedLogisticRegression(C=1.0, client_weighting="uniform", tol=0, **kwargs)


def _independent_epsilon(sigma, rounds, delta=DELTA):
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(sigma), rounds))
    return accountant.get_epsilon(delta)


def test_noise_and_epsilon_are_dp_accountings(cancer):
    X, y, sites = cancer
    est = fit_quietly(_model(max_rounds=30, privacy=DifferentialPrivacy(
        2.0, delta=DELTA, clip_norm=0.5, random_state=0)), X, y, clients=sites)
    record = est.history_.privacy
    sigma = record["noise_multiplier"]
    # the budget is planned over the rounds and the noised monitoring passes (at the
    # start and after the last round)
    releases = 30 + record["monitor_passes_allowed"]
    assert record["monitor_passes_allowed"] == 2 and record["monitor_passes"] == 2
    assert _independent_epsilon(sigma, releases) == pytest.approx(2.0, rel=1e-3)
    assert _independent_epsilon(sigma, releases) <= 2.0
    # after round t: its t rounds and the monitoring passes so far (round 0's, and the
    # last round's after it)
    np.testing.assert_allclose(est.history_["epsilon"],
                               [_independent_epsilon(sigma, t + 1 + (t == 30))
                                for t in range(31)], rtol=1e-9)
    # the objective is monitored with noise at the ends (no stationarity: no constants)
    objective = est.history_["objective"]
    assert np.isfinite(objective[0]) and np.isfinite(objective[-1])
    assert np.all(np.isnan(objective[1:-1])) and np.all(np.isnan(est.history_["stationarity"]))
    assert record["noise"] == "distributed" and record["clip_norm"] == 0.5


def test_the_monitor_is_noised_and_charged(cancer):
    """The noised objective scatters around the exact one; monitor=False spends the
    whole budget on the rounds (less noise per round) and monitors nothing."""
    X, y, sites = cancer
    objectives = [fit_quietly(_model(max_rounds=5, privacy=DifferentialPrivacy(
        5.0, delta=DELTA, clip_norm=1.0, random_state=seed)), X, y, clients=sites)
        .history_["objective"][0] for seed in range(20)]
    exact = fit_quietly(_model(max_rounds=5), X, y, clients=sites).history_["objective"][0]
    assert np.std(objectives) > 0 and abs(np.mean(objectives) - exact) < 4 * np.std(
        objectives) / np.sqrt(20) + 1e-9
    quiet = fit_quietly(_model(max_rounds=5, privacy=DifferentialPrivacy(
        5.0, delta=DELTA, clip_norm=1.0, monitor=False, random_state=0)), X, y,
        clients=sites)
    loud = fit_quietly(_model(max_rounds=5, privacy=DifferentialPrivacy(
        5.0, delta=DELTA, clip_norm=1.0, random_state=0)), X, y, clients=sites)
    assert np.all(np.isnan(quiet.history_["objective"]))
    assert quiet.history_.privacy["noise_multiplier"] < loud.history_.privacy[
        "noise_multiplier"]


def test_every_message_is_clipped(monkeypatch, cancer):
    X, y, sites = cancer
    norms = []
    clip = dp_rounds.clip_by_l2_norm

    def spy(vector, bound):
        out = clip(vector, bound)
        norms.append((np.linalg.norm(vector), np.linalg.norm(out), bound))
        return out

    monkeypatch.setattr(dp_rounds, "clip_by_l2_norm", spy)
    fit_quietly(_model(max_rounds=10, privacy=DifferentialPrivacy(
        4.0, clip_norm=0.05, random_state=0)), X, y, clients=sites)
    assert len(norms) == (10 + 2) * 6  # every round and both monitoring passes
    before, after, bound = np.array(norms).T
    assert np.all(after <= bound) and np.any(before > bound)  # the bound binds


def test_without_noise_the_fit_is_the_plain_fit(cancer):
    X, y, sites = cancer
    plain = fit_quietly(_model(max_rounds=40), X, y, clients=sites)
    private = fit_quietly(_model(max_rounds=40, privacy=DifferentialPrivacy(
        np.inf, clip_norm=1e6)), X, y, clients=sites)
    assert private.history_.privacy["noise_multiplier"] == 0.0
    np.testing.assert_allclose(private.coef_, plain.coef_, atol=1e-9)
    np.testing.assert_allclose(private.intercept_, plain.intercept_, atol=1e-9)


@pytest.mark.parametrize("noise", ["distributed", "server"])
def test_the_noise_has_the_calibrated_spread(monkeypatch, cancer, noise):
    """The released sums scatter with standard deviation sigma * C around the clipped
    sum (a frozen server makes every round the same mechanism)."""
    X, y, sites = cancer
    releases = _releases(monkeypatch, X, y, sites, rounds=300, noise_multiplier=2.0,
                         clip_norm=0.1, noise=noise)
    spread = np.std(releases - releases.mean(axis=0), axis=0, ddof=1)
    # 300 draws: the sample sd is within 4 standard errors (sd / sqrt(2 * 299))
    np.testing.assert_allclose(spread, 2.0 * 0.1, rtol=4 / np.sqrt(598))


class _FrozenFedAvg(FedAvg):
    """FedAvg whose server never moves: every round releases the same mechanism."""

    def aggregate_sums(self, server, sums, participants):
        return server


def _releases(monkeypatch, X, y, sites, *, rounds, noise_multiplier, clip_norm,
              noise="distributed", seed=0):
    """The decoded sums the server received, one row per round."""
    seen = []
    original = SecureAggregationSolver._sums

    def spy(self, replies):
        sums = original(self, replies)
        seen.append(np.concatenate([np.ravel(v) for v in sums.values()]))
        return sums

    monkeypatch.setattr(SecureAggregationSolver, "_sums", spy)
    privacy = DifferentialPrivacy(np.inf, clip_norm=clip_norm, noise=noise, monitor=False,
                                  noise_multiplier=noise_multiplier, random_state=seed)
    fit_quietly(_model(solver=_FrozenFedAvg(client_lr=0.5), max_rounds=rounds,
                       privacy=privacy), X, y, clients=sites)
    monkeypatch.setattr(SecureAggregationSolver, "_sums", original)
    released = np.array(seen)
    if noise == "server":  # the spy saw the sum before the server's noise: add it as the
        rng = np.random.default_rng(seed + 1)  # server does (same law)
        released = released + rng.normal(0, noise_multiplier * clip_norm, released.shape)
    return released


def _violations(a, b, epsilon, delta):
    """Largest excess of P_a(A) over e^eps P_b(A) + delta over tail events A = {proj > t},
    both ways, beyond three standard errors of the estimates."""
    worst = -np.inf
    for first, second in ((a, b), (b, a)):
        for t in np.quantile(np.concatenate([a, b]), np.linspace(0.02, 0.98, 49)):
            p, q = np.mean(first > t), np.mean(second > t)
            slack = 3 * (np.sqrt(p * (1 - p) / first.size) + np.exp(epsilon)
                         * np.sqrt(q * (1 - q) / second.size))
            worst = max(worst, p - np.exp(epsilon) * q - delta - slack)
    return worst


def test_removing_one_site_moves_the_release_within_the_guarantee(monkeypatch, cancer):
    """Neighbouring federations: all six sites, and the same without site 0. Along the
    direction the removal moves the release, every tail event's probability obeys
    P(A) <= e^eps1 P'(A) + delta with eps1 the one-round epsilon; a mechanism with a
    tenth of the noise visibly breaks it (the check has power)."""
    X, y, sites = cancer
    keep = sites != 0
    sigma, clip = 4.0, 0.1
    eps1 = _independent_epsilon(sigma, 1)
    assert eps1 < 2

    def both(noise_multiplier, rounds=400):
        full = _releases(monkeypatch, X, y, sites, rounds=rounds, clip_norm=clip,
                         noise_multiplier=noise_multiplier, seed=1)
        without = _releases(monkeypatch, X[keep], y[keep], sites[keep], rounds=rounds,
                            clip_norm=clip, noise_multiplier=noise_multiplier, seed=2)
        return full, without

    # the exact shift (no noise): the removed site's clipped message, norm <= C
    full, without = both(0.0, rounds=1)
    shift = full[0] - without[0]
    assert np.linalg.norm(shift) <= clip * (1 + 1e-9)
    direction = shift / np.linalg.norm(shift)
    a, b = (r @ direction for r in both(sigma))
    assert _violations(a, b, eps1, DELTA) <= 0
    a, b = (r @ direction for r in both(sigma / 10))
    assert _violations(a, b, eps1, DELTA) > 0


def test_a_given_noise_stops_the_fit_when_the_budget_is_spent(cancer):
    X, y, sites = cancer
    sigma = 8.0  # the rounds and their two monitoring passes within 1.5
    allowed = max(t for t in range(1, 200) if _independent_epsilon(sigma, t + 2) <= 1.5)
    rounds = f"{allowed} round" + ("" if allowed == 1 else "s")
    with pytest.warns(PrivacyBudgetWarning, match=f"allows {rounds} at"):
        est = _model(max_rounds=200, privacy=DifferentialPrivacy(
            1.5, noise_multiplier=sigma, random_state=0)).fit(X, y, clients=sites)
    assert est.n_iter_ == allowed
    assert est.history_["epsilon"][-1] <= 1.5 < _independent_epsilon(sigma, allowed + 3)


@pytest.mark.parametrize("privacy,match", [
    (dict(epsilon=0.0), "epsilon must be > 0"),
    (dict(epsilon=1.0, clip_norm=0.0), "clipping bound clip_norm must be a finite number > 0"),
    (dict(epsilon=1.0, clip_norm=-2.0), "clipping bound"),
    (dict(epsilon=1.0, delta=0.0), "delta must be in"),
    (dict(epsilon=1e-4, noise_multiplier=0.5), "budget cannot be met"),
    (dict(epsilon=1.0, noise_multiplier=0.0), "budget cannot be met"),
    (dict(epsilon=1.0, noise="everywhere"), "noise must be"),
])
def test_impossible_settings_are_refused_before_round_one(cancer, privacy, match):
    X, y, sites = cancer
    est = _model(max_rounds=10, privacy=DifferentialPrivacy(**privacy))
    with pytest.raises(ValueError, match=match):
        est.fit(X, y, clients=sites)
    assert not hasattr(est, "coef_")


@pytest.mark.parametrize("kwargs,match", [
    (dict(solver="newton"), "cannot run under differential privacy"),
    (dict(solver=FedAvg()), "explicit step size"),
    (dict(solver="feddyn"), "cannot run under differential privacy"),
    (dict(solver=FedAvg(client_lr=0.5), client_weighting="samples"),
     "client_weighting='uniform'"),
])
def test_solvers_and_weightings_that_cannot_carry_the_guarantee(cancer, kwargs, match):
    X, y, sites = cancer
    kwargs = {"client_weighting": "uniform", **kwargs}
    est = FedLogisticRegression(max_rounds=5, privacy=DifferentialPrivacy(1.0), **kwargs)
    with pytest.raises(ValueError, match=match):
        est.fit(X, y, clients=sites)


def test_partial_participation_and_fedprox_and_the_lasso(cancer):
    """Sampled rounds of a fixed, public size; FedProx; a Lasso (server prox)."""
    X, y, sites = cancer
    est = fit_quietly(_model(solver=FedProx(client_lr=0.5), participation=0.5, max_rounds=20,
                             privacy=DifferentialPrivacy(4.0, random_state=0)),
                      X, y, clients=sites)
    assert np.all(est.history_["n_participants"][1:] == 3)
    lasso = fit_quietly(FedLasso(alpha=1.0, solver=FedAvg(client_lr=0.1), max_rounds=20, tol=0,
                                 client_weighting="uniform", privacy=DifferentialPrivacy(
                                     8.0, clip_norm=5.0, random_state=0)),
                        X, y.astype(float), clients=sites)
    assert np.isfinite(lasso.coef_).all()
    # no stationarity under DP: the ConvergenceWarning measures the last noisy step
    with pytest.warns(ConvergenceWarning, match="under differential privacy there is no "
                      "stationarity .* the last round's noisy update: it moved the model by"):
        _model(max_rounds=5, privacy=DifferentialPrivacy(4.0, random_state=0)).fit(
            X, y, clients=sites)
