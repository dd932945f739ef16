"""Secure aggregation in the rounds (``privacy=SecureAggregation()``).

The server must see only sums: the fitted model equals the unmasked one to the
stated fixed-point precision, a site's masked message looks uniformly random
(and differs from round to round), solvers that read single replies are
refused, and a site lost after masking stops the fit with ``DropoutError``.
"""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from skfed import FedLasso, FedLinearSVC, FedLogisticRegression
from skfed.exceptions import ClientFailureError
from skfed.solvers import FedAvg, FedDyn, LocalGECL

pytest.importorskip("cryptography", reason="secure aggregation needs skfed[privacy]")
from skfed.privacy import DropoutError  # noqa: E402
from skfed.privacy.secure_rounds import SecureAggregation, SecureAggregationSolver  # noqa: E402

from . import _oracles as orc  # noqa: E402
from .conftest import fit_quietly  # noqa: E402


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    return X, y, np.arange(len(y)) % 4


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    # label-skewed sites: sorted by label, cut in five
    order = np.argsort(y, kind="stable")
    sites = np.empty(len(y), dtype=int)
    sites[order] = np.arange(len(y)) * 5 // len(y)
    return X, y, sites


def _perturbation_bound(X, coef, record, weights=None):
    """How far the fixed-point rounding can move a least-squares solution: the
    summed Hessian and gradient are each off by at most ``sum_error`` per
    coordinate, and the (strongly convex) solution map is ``1 / lambda_min``
    Lipschitz in them: ``|d coef| <= (||e_g|| + ||E_H|| ||coef||) / lambda_min``."""
    Z = np.column_stack([X, np.ones(len(X))])
    H = Z.T @ Z / len(X)
    p = H.shape[0]
    eps = record["sum_error"]
    lam = np.linalg.eigvalsh(H)[0]
    return (np.sqrt(p) * eps + p * eps * (np.linalg.norm(coef) + 1)) / lam


def test_newton_lasso_equals_the_unmasked_fit(diabetes):
    X, y, sites = diabetes
    plain = FedLasso(alpha=0.5).fit(X, y, clients=sites)
    secure = FedLasso(alpha=0.5, privacy=SecureAggregation()).fit(X, y, clients=sites)
    record = secure.history_.privacy
    assert record["secure_aggregation"] and record["sum_error"] < 1e-11
    assert secure.n_iter_ == plain.n_iter_ == 1
    bound = _perturbation_bound(X, plain.coef_, record)
    assert np.max(np.abs(secure.coef_ - plain.coef_)) <= bound
    assert abs(secure.intercept_ - plain.intercept_) <= bound
    # the zeros of the Lasso are the same
    np.testing.assert_array_equal(secure.coef_ == 0, plain.coef_ == 0)
    # the key agreement is one setup round (32 bytes up per site, the list down); the
    # monitor's smoothness constants one more, a masked sum of 1 + d fields per site
    # (no site's own constant is sent: the summary round carries no constants down or
    # up, 8 + 32 bytes a site fewer than the plain fit's)
    N, d = 4, X.shape[1]
    assert secure.history_.setup_rounds == plain.history_.setup_rounds + 2
    assert secure.history_.setup_bytes - plain.history_.setup_bytes == (
        32 * N + 32 * N * N + N * (8 * (1 + d) + 8) - N * (8 + 32))
    assert secure.solver_.name == "newton" and plain.history_.privacy is None


def test_newton_logistic_on_label_skewed_sites(cancer):
    X, y, sites = cancer
    plain = FedLogisticRegression(C=0.1, tol=1e-8).fit(X, y, clients=sites)
    secure = FedLogisticRegression(C=0.1, tol=1e-8, privacy=SecureAggregation()).fit(
        X, y, clients=sites)
    assert secure.n_iter_ == plain.n_iter_
    # Newton's monitor reads the masked sums its rounds carry: no pass of its own
    np.testing.assert_array_equal(secure.history_["monitor_bytes"][1:] == 0,
                                  plain.history_["monitor_bytes"][1:] == 0)
    assert np.sum(secure.history_["monitor_bytes"][1:] == 0) >= secure.n_iter_ - 1
    # the logistic Hessian is at least the ridge 1 / (C n) plus the data's
    # curvature: the solution moves by O(sum_error / curvature)
    assert np.max(np.abs(secure.coef_ - plain.coef_)) <= 1e-8
    # the same objective, computed independently at both models; the reported one
    # is decoded from masked sums, off by at most sum_error (absolute)
    f_plain = orc.logistic_objective(X, y, plain.coef_, plain.intercept_, 0.1, 0.0)
    f_secure = orc.logistic_objective(X, y, secure.coef_, secure.intercept_, 0.1, 0.0)
    assert abs(f_secure - f_plain) <= 1e-12 * f_plain
    scale = 0.1 * len(y)  # scikit-learn's objective is skfed's times C n
    assert abs(secure.objective_ - f_secure / scale) <= 2 * secure.history_.privacy["sum_error"]


@pytest.mark.parametrize("solver,participation", [
    ("feddyn", 1.0), ("feddyn", 0.5), ("fedadmm", 0.5), ("fedpd", 1.0), ("feddualavg", 1.0),
    ("fedmid", 0.5), ("fedavg", 1.0), ("fedprox", 1.0), ("scaffold", 1.0),
    ("local_gecl", 1.0), ("fedmls", 1.0), ("dualfl", 1.0),
])
def test_first_order_solvers_follow_the_unmasked_iterates(diabetes, solver, participation):
    """Same rounds, same sampled sites, the same iterates to the fixed-point precision
    (accumulated over 30 rounds of a contracting iteration)."""
    X, y, sites = diabetes
    kwargs = dict(alpha=0.5, solver=solver, participation=participation, max_rounds=30,
                  tol=0.0, random_state=0)
    if solver in ("scaffold", "local_gecl"):  # smooth penalties only
        from skfed import FedElasticNet
        make = lambda **kw: FedElasticNet(l1_ratio=0.0, **kw)  # noqa: E731
    else:
        make = FedLasso
    plain = fit_quietly(make(**kwargs), X, y, clients=sites)
    secure = fit_quietly(make(**kwargs, privacy=SecureAggregation()), X, y, clients=sites)
    np.testing.assert_allclose(secure.coef_, plain.coef_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(secure.history_["objective"], plain.history_["objective"],
                               rtol=1e-9)
    np.testing.assert_array_equal(secure.history_["n_participants"],
                                  plain.history_["n_participants"])
    assert np.all(np.isnan(secure.history_["consensus"][1:]))  # it reads single models


def _server_views(monkeypatch, make, X, y, sites):
    """Every masked message the server received, per exchange and site."""
    views = []
    original = SecureAggregationSolver._sums

    def spy(self, replies):
        views.append({r["masked"].party_id: r["masked"].data.copy() for r in replies})
        return original(self, replies)

    monkeypatch.setattr(SecureAggregationSolver, "_sums", spy)
    fit_quietly(make(), X, y, clients=sites)
    return views


def _looks_uniform(words):
    """Chi-square test of the top byte of uint64 words against the uniform law
    (p > 1e-4); a plain fixed-point code has top byte 0x00 or 0xff."""
    from scipy.stats import chisquare

    counts = np.bincount((np.asarray(words, dtype=np.uint64) >> np.uint64(56)).astype(int),
                         minlength=256)
    return chisquare(counts).pvalue > 1e-4


def test_the_server_sees_uniform_words_never_twice_the_same_mask(monkeypatch, cancer):
    """A masked message is uniform whatever it hides, and the masks change from one
    exchange to the next (the difference of two messages from one site is uniform too:
    it would be a small fixed-point number if a mask were reused). The same statistic
    rejects the unmasked code, so the test cannot pass without the masks."""
    X, y, sites = cancer
    views = _server_views(monkeypatch, lambda: FedLogisticRegression(
        C=0.1, solver="feddyn", max_rounds=40, tol=0, privacy=SecureAggregation()), X, y, sites)
    assert len(views) > 40  # monitoring passes and rounds
    site_words = {j: np.concatenate([v[j].ravel() for v in views]) for j in range(5)}
    for j, words in site_words.items():
        assert words.size > 2000
        assert _looks_uniform(words), f"site {j}'s masked words are not uniform"
    for j in range(5):
        same_kind = {}  # rounds and monitoring passes, each kind in its order
        for v in views:
            same_kind.setdefault(v[j].shape, []).append(v[j].ravel())
        diffs = np.concatenate([b - a for seq in same_kind.values()
                                for a, b in zip(seq, seq[1:])])
        assert _looks_uniform(diffs), f"site {j} reused a mask"
    # the statistic has power: an unmasked fixed-point message fails it
    from skfed.privacy import FixedPoint

    code = FixedPoint(40, bound=2.0 ** 20, n_parties=5).encode(
        np.random.default_rng(0).normal(size=4000))
    assert not _looks_uniform(code)


@pytest.mark.parametrize("solver,match", [
    ("afedpd", "keeps every site's dual"),
    (LocalGECL(topology="ring"), "decentralized"),
])
def test_solvers_that_read_single_replies_are_refused(diabetes, solver, match):
    X, y, sites = diabetes
    from skfed import FedElasticNet

    est = FedElasticNet(alpha=0.5, l1_ratio=0.0, solver=solver, privacy=SecureAggregation())
    with pytest.raises(ValueError, match=f"secure aggregation needs a solver.*{match}"):
        est.fit(X, y, clients=sites)
    assert not hasattr(est, "coef_")


def test_bad_settings_are_refused_before_round_one(diabetes):
    X, y, sites = diabetes
    with pytest.raises(ValueError, match="at least two sites"):
        FedLasso(privacy=SecureAggregation()).fit(X, y)
    with pytest.raises(ValueError, match="bound must be a positive finite number; got -1"):
        FedLasso(privacy=SecureAggregation(bound=-1)).fit(X, y, clients=sites)
    with pytest.raises(OverflowError, match="fixed point overflow"):
        FedLasso(privacy=SecureAggregation(fraction_bits=60)).fit(X, y, clients=sites)
    with pytest.raises(ValueError, match="privacy"):
        FedLasso(privacy="secure").fit(X, y, clients=sites)


def test_a_message_outside_the_bound_names_the_fix(diabetes):
    X, y, sites = diabetes
    with pytest.raises(ClientFailureError, match="value out of the fixed-point range.*raise "
                                                 "the bound"):
        FedLasso(privacy=SecureAggregation(bound=1e-3)).fit(X, y, clients=sites)


def _flaky(monkeypatch, solver_cls, failing_call):
    """Make the ``failing_call``-th client update of ``solver_cls`` raise (a site lost
    after the round started), counting from the next fit."""
    original = solver_cls.client_update
    calls = {"n": 0}

    def flaky(self, client, state, message, rng):
        calls["n"] += 1
        if calls["n"] == failing_call:
            raise RuntimeError("the site went offline")
        return original(self, client, state, message, rng)

    monkeypatch.setattr(solver_cls, "client_update", flaky)
    return calls


def test_a_site_lost_in_a_round_is_left_out_as_without_masking(monkeypatch, diabetes):
    """FedDyn goes on without a failed site; under secure aggregation the others masked
    against it, so they mask their replies again for the smaller round: the same fit
    as the unmasked one with the same failure."""
    X, y, sites = diabetes
    fits = []
    for privacy in (None, SecureAggregation()):
        calls = _flaky(monkeypatch, FedDyn, 6)  # round 2, site 1
        est = FedLasso(alpha=0.5, solver="feddyn", max_rounds=8, tol=0, privacy=privacy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(est.fit(X, y, clients=sites))
        monkeypatch.undo()
        assert calls["n"] == 8 * 4
    plain, secure = fits
    assert [(d["round"], d["client"]) for d in secure.history_.dropped] == [(2, 1)]
    np.testing.assert_array_equal(secure.history_["n_participants"],
                                  plain.history_["n_participants"])
    np.testing.assert_allclose(secure.coef_, plain.coef_, atol=1e-9)
    (recovery,) = secure.history_.privacy["dropout_recoveries"]
    assert recovery["sites"] == 3 and recovery["bytes"] == 3 * 11 * 8


def test_a_site_lost_under_differential_privacy_stops_the_fit(monkeypatch, diabetes):
    from skfed.privacy import DifferentialPrivacy

    X, y, sites = diabetes
    _flaky(monkeypatch, FedAvg, 6)
    est = FedLasso(alpha=0.5, solver=FedAvg(client_lr=0.1), max_rounds=5,
                   client_weighting="uniform",
                   privacy=DifferentialPrivacy(4.0, clip_norm=10.0, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DropoutError, match=r"sites \[1\] dropped after masking"):
            est.fit(X, y, clients=sites)
    assert not hasattr(est, "coef_")


def test_a_site_lost_under_a_solver_needing_everyone_stops_the_fit(monkeypatch, cancer):
    from skfed.solvers import FedNewton

    X, y, sites = cancer
    _flaky(monkeypatch, FedNewton, 7)
    est = FedLogisticRegression(privacy=SecureAggregation())
    with pytest.raises(ClientFailureError, match="needs every client in every round"):
        est.fit(X, y, clients=sites)


def test_keys_and_client_states_stay_at_the_sites(diabetes):
    """Nothing of a site's solver state (its private key, its duals) comes back: the
    fitted estimator holds no party, and a warm start resumes from the model only."""
    X, y, sites = diabetes
    est = fit_quietly(FedLasso(alpha=0.5, solver="feddyn", max_rounds=20, tol=0,
                               privacy=SecureAggregation(), warm_start=True), X, y,
                      clients=sites)
    assert est._solver_state is None
    assert b"SecureAggregationParty" not in pickle.dumps(est)
    before = est.objective_
    fit_quietly(est, X, y, clients=sites)
    assert est.objective_ <= before + 1e-12


@pytest.mark.parametrize("make,kwargs", [
    # auto: DualFL with dual local solves; stops on its objective plateau
    (lambda **kw: FedLinearSVC(C=0.05, loss="hinge", **kw), dict(max_rounds=400, tol=1e-9)),
    (lambda **kw: FedLinearSVC(C=0.05, loss="hinge", solver="fedmls", **kw),
     dict(max_rounds=40, tol=0)),
    # DualFL's curvature measurements (a weighted sum at re-centrings) and L1
    (lambda **kw: FedLogisticRegression(C=0.05, l1_ratio=1.0, solver="dualfl", **kw),
     dict(max_rounds=1000, tol=1e-9)),
], ids=["hinge-auto", "hinge-fedmls", "l1-logistic-dualfl"])
def test_classifiers_under_secure_aggregation(cancer, make, kwargs):
    """DualFL runs to convergence: its restart and re-centring tests are discontinuous,
    so a rounding difference can change the round they fire in (not where they lead)."""
    X, y, sites = cancer
    est = fit_quietly(make(**kwargs, privacy=SecureAggregation()), X, y, clients=sites)
    plain = fit_quietly(make(**kwargs), X, y, clients=sites)
    assert est.solver_.name == plain.solver_.name
    if kwargs["tol"]:  # both converged
        assert max(est.n_iter_, plain.n_iter_) < kwargs["max_rounds"]
    np.testing.assert_allclose(est.coef_, plain.coef_, atol=1e-6)
    np.testing.assert_array_equal(est.coef_ == 0, plain.coef_ == 0)


def test_fit_on_dask_worker_processes_equals_the_sequential_secure_fit(cancer):
    distributed = pytest.importorskip("distributed")
    X, y, sites = cancer
    ref = FedLogisticRegression(C=0.1, privacy=SecureAggregation()).fit(X, y, clients=sites)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=":0") as cluster, \
                distributed.Client(cluster):
            est = FedLogisticRegression(C=0.1, privacy=SecureAggregation(),
                                        executor="dask").fit(X, y, clients=sites)
    assert est.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-9)
    assert est._solver_state is None
