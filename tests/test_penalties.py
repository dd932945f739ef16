"""Penalties: values and proximal maps, checked as minimizers numerically."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from skfed.penalties import L1, L2, ElasticNet, L1Ball, L2Ball, NuclearNorm, project_l1_ball

finite = st.floats(-5, 5, allow_nan=False, allow_infinity=False)
vectors = arrays(np.float64, st.integers(1, 8), elements=finite)


def prox_objective(pen, U, W, step):
    return step * pen.value(U) + 0.5 * np.sum((U - W) ** 2)


def assert_is_prox(pen, W, step, seed=0):
    """prox(W) beats random points and small perturbations of itself (convexity:
    local optimality in every direction is global)."""
    rng = np.random.default_rng(seed)
    U = pen.prox(W, step)
    assert np.isfinite(pen.value(U))
    best = prox_objective(pen, U, W, step)
    for scale in [1e-4, 1e-2, 1.0]:
        for _ in range(30):
            V = U + scale * rng.standard_normal(U.shape)
            if pen.indicator:  # stay feasible: compare with feasible points only
                V = pen.prox(V, step)
            assert best <= prox_objective(pen, V, W, step) + 1e-10


@settings(max_examples=60, deadline=None)
@given(W=vectors, step=st.floats(0.01, 3), alpha=st.floats(0, 2), ratio=st.floats(0, 1))
def test_vector_prox_is_the_minimizer(W, step, alpha, ratio):
    for pen in [L1(alpha), L2(alpha), ElasticNet(alpha, ratio), L1Ball(alpha + 0.1),
                L2Ball(alpha + 0.1)]:
        assert_is_prox(pen, W, step)


@settings(max_examples=30, deadline=None)
@given(W=arrays(np.float64, (3, 4), elements=finite), step=st.floats(0.01, 3),
       alpha=st.floats(0, 2))
def test_nuclear_prox_is_the_minimizer(W, step, alpha):
    assert_is_prox(NuclearNorm(alpha), W, step)


def test_closed_forms():
    w = np.array([3.0, -0.5, 0.2, -2.0])
    np.testing.assert_allclose(L1(1.0).prox(w, 0.5), [2.5, 0.0, 0.0, -1.5])
    np.testing.assert_allclose(L2(1.0).prox(w, 1.0), w / 2)
    np.testing.assert_allclose(ElasticNet(2.0, 0.5).prox(w, 0.5), [2.5, 0, 0, -1.5] / np.array(1.5))
    assert L1(2.0).value(w) == pytest.approx(11.4)
    assert ElasticNet(1.0, 0.25).value(w) == pytest.approx(0.25 * 5.7 + 0.375 * np.sum(w**2))


def test_projections():
    w = np.array([3.0, -1.0, 0.5])
    p = project_l1_ball(w, 2.0)
    assert np.abs(p).sum() == pytest.approx(2.0)
    np.testing.assert_allclose(p, [2.0, 0.0, 0.0])
    np.testing.assert_allclose(project_l1_ball(w, 10.0), w)
    q = L2Ball(1.0).prox(w)
    assert np.linalg.norm(q) == pytest.approx(1.0)
    assert L1Ball(1.0).value(w) == np.inf and L1Ball(5.0).value(w) == 0.0


def test_nuclear_norm_thresholds_singular_values():
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    V, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    W = U[:, :4] @ np.diag([5.0, 3.0, 1.0, 0.5]) @ V.T
    P = NuclearNorm(1.0).prox(W, 1.5)
    np.testing.assert_allclose(np.linalg.svd(P, compute_uv=False), [3.5, 1.5, 0, 0], atol=1e-12)
    assert NuclearNorm(2.0).value(W) == pytest.approx(19.0)


def test_split_smooth():
    ns, s = ElasticNet(2.0, 0.25).split_smooth()
    assert ns == L1(0.5) and s == L2(1.5)
    assert ElasticNet(1.0, 1.0).split_smooth() == (L1(1.0), None)
    assert ElasticNet(1.0, 0.0).split_smooth() == (None, L2(1.0))
    assert L2(1.0).split_smooth() == (None, L2(1.0))
    assert L1Ball(1.0).split_smooth() == (L1Ball(1.0), None)


def test_constraints_have_no_subgradient():
    with pytest.raises(TypeError, match="constraint"):
        L1Ball(1.0).subgradient(np.ones(2))
