"""Each solver's update rule, pinned on tiny cases computed by hand (docs/algorithms/)."""

import numpy as np
import pytest

from skfed import FedLasso
from skfed.penalties import soft_threshold
from skfed.solvers import FedAvg, FedDualAvg, FedDualAvgOSP, FedMID, FedMIDOSP, FedProx
from skfed.local import LocalSchedule

from .conftest import fit_quietly

rng = np.random.default_rng(42)
X = rng.standard_normal((12, 3))
y = X @ np.array([1.0, 0.0, -2.0]) + 0.5 + 0.1 * rng.standard_normal(12)
CLIENTS = np.repeat([0, 1], 6)
ALPHA, LR = 0.2, 0.05


def grad(c, b, rows):
    """Gradient of the mean half squared error over ``rows``."""
    r = X[rows] @ c + b - y[rows]
    return X[rows].T @ r / len(rows), r.mean()


def fit(solver, rounds=1, clients=CLIENTS):
    est = FedLasso(alpha=ALPHA, solver=solver, max_rounds=rounds, tol=0)
    return fit_quietly(est, X, y, clients=clients)


rows = [np.arange(6), np.arange(6, 12)]


def test_feddualavg_two_local_steps_two_clients():
    eta_c, eta_s = LR, 0.5
    est = fit(FedDualAvg(client_lr=eta_c, server_lr=eta_s, local_steps=2))
    dzs = []
    for r in rows:
        zc, zb, e = np.zeros(3), 0.0, 0.0
        for _ in range(2):
            w = soft_threshold(zc, e * ALPHA)
            gc, gb = grad(w, zb, r)
            zc, zb, e = zc - eta_c * gc, zb - eta_c * gb, e + eta_c
        dzs.append((zc, zb, e))
    zc = eta_s * np.mean([d[0] for d in dzs], axis=0)
    zb = eta_s * np.mean([d[1] for d in dzs])
    eps = eta_s * 2 * eta_c
    np.testing.assert_allclose(est.coef_, soft_threshold(zc, eps * ALPHA), rtol=1e-12)
    assert est.intercept_ == pytest.approx(zb, rel=1e-12)


def test_feddualavg_osp_takes_gradients_at_the_dual_point():
    est = fit(FedDualAvgOSP(client_lr=LR, local_steps=2))
    zs = []
    for r in rows:
        zc, zb = np.zeros(3), 0.0
        for _ in range(2):
            gc, gb = grad(zc, zb, r)  # no prox on the client
            zc, zb = zc - LR * gc, zb - LR * gb
        zs.append((zc, zb))
    zc = np.mean([z[0] for z in zs], axis=0)
    np.testing.assert_allclose(est.coef_, soft_threshold(zc, 2 * LR * ALPHA), rtol=1e-12)


def test_fedmid_prox_on_client_and_server():
    est = fit(FedMID(client_lr=LR, local_steps=2, server_lr=0.7))
    ws = []
    for r in rows:
        c, b = np.zeros(3), 0.0
        for _ in range(2):
            gc, gb = grad(c, b, r)
            c, b = soft_threshold(c - LR * gc, LR * ALPHA), b - LR * gb
        ws.append((c, b))
    mean_c = np.mean([w[0] for w in ws], axis=0)
    mean_b = np.mean([w[1] for w in ws])
    expected = soft_threshold(0.7 * mean_c, 0.7 * 2 * LR * ALPHA)
    np.testing.assert_allclose(est.coef_, expected, rtol=1e-12)
    assert est.intercept_ == pytest.approx(0.7 * mean_b, rel=1e-12)


def test_fedmid_osp_one_step_is_a_proximal_gradient_step():
    est = fit(FedMIDOSP(client_lr=LR), rounds=2)
    c, b = np.zeros(3), 0.0
    for _ in range(2):
        gc, gb = grad(c, b, np.arange(12))
        c, b = soft_threshold(c - LR * gc, LR * ALPHA), b - LR * gb
    np.testing.assert_allclose(est.coef_, c, rtol=1e-12)
    assert est.intercept_ == pytest.approx(b, rel=1e-12)


def test_feddualavg_first_round_equals_fedmid_osp():
    a = fit(FedDualAvg(client_lr=LR))
    b = fit(FedMIDOSP(client_lr=LR))
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-12)


def test_fedavg_subgradient_step():
    est = fit(FedAvg(client_lr=LR, local_steps=2))
    ws = []
    for r in rows:
        c, b = np.zeros(3), 0.0
        for _ in range(2):
            gc, gb = grad(c, b, r)
            c, b = c - LR * (gc + ALPHA * np.sign(c)), b - LR * gb
        ws.append(c)
    np.testing.assert_allclose(est.coef_, np.mean(ws, axis=0), rtol=1e-12)


def test_fedprox_proximal_term_from_the_second_step():
    mu = 3.0
    est = fit(FedProx(mu=mu, client_lr=LR, local_steps=3))
    ws = []
    for r in rows:
        c, b = np.zeros(3), 0.0
        for _ in range(3):
            gc, gb = grad(c, b, r)
            c, b = c - LR * (gc + mu * c), b - LR * (gb + mu * b)
        ws.append(c)
    expected = soft_threshold(np.mean(ws, axis=0), 3 * LR * ALPHA)
    np.testing.assert_allclose(est.coef_, expected, rtol=1e-12)


def test_fedprox_with_zero_mu_is_fedmid_osp():
    a = fit(FedProx(mu=0.0, client_lr=LR, local_steps=4), rounds=3)
    b = fit(FedMIDOSP(client_lr=LR, local_steps=4), rounds=3)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-12)


def test_inverse_sqrt_schedule_scales_the_second_round():
    est = fit(FedMIDOSP(client_lr=LR, client_lr_schedule="inverse_sqrt"), rounds=2)
    c, b = np.zeros(3), 0.0
    for r, lr in enumerate([LR, LR / np.sqrt(2)]):
        gc, gb = grad(c, b, np.arange(12))
        c, b = soft_threshold(c - lr * gc, lr * ALPHA), b - lr * gb
    np.testing.assert_allclose(est.coef_, c, rtol=1e-12)


def test_partial_participation_uses_only_sampled_clients():
    est = fit(FedMIDOSP(client_lr=LR), clients=np.repeat([0, 1, 2, 3], 3))
    est_p = FedLasso(alpha=ALPHA, solver=FedMIDOSP(client_lr=LR), max_rounds=5, tol=0,
                     participation=0.5, random_state=3)
    est_p = fit_quietly(est_p, X, y, clients=np.repeat([0, 1, 2, 3], 3))
    assert list(est_p.history_["n_participants"][1:]) == [2] * 5
    assert not np.allclose(est.coef_, est_p.coef_)


class TestLocalSchedule:
    def test_full_batch(self):
        s = LocalSchedule(local_steps=3)
        assert list(s.batches(10, np.random.default_rng(0))) == [None, None, None]

    def test_epochs_and_batches_cover_every_row(self):
        s = LocalSchedule(local_epochs=2, batch_size=4)
        batches = list(s.batches(10, np.random.default_rng(0)))
        assert len(batches) == s.n_steps(10) == 5  # ceil(2 * 10 / 4)
        counts = np.bincount(np.concatenate(batches), minlength=10)
        np.testing.assert_array_equal(counts, 2)  # every row twice in two epochs
        assert all(len(b) == 4 for b in batches)

    def test_steps_with_batches(self):
        s = LocalSchedule(local_steps=7, batch_size=3)
        assert len(list(s.batches(10, np.random.default_rng(0)))) == 7
