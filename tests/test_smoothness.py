"""The federated estimate of the pooled loss's smoothness."""

import numpy as np
import pytest

from skfed.federation.layout import Layout
from skfed.federation.problem import FederatedProblem
from skfed.federation.session import FederationSession
from skfed.federation.smoothness import _GRAM_UP_TO, pooled_smoothness
from skfed.datafits import ClientObjective, Quadratic
from skfed.datasets import make_federated_lasso
from skfed.executors import SequentialExecutor


def _session(n_features):
    X, y, clients, _ = make_federated_lasso("III", n_features=n_features, n_clients=6,
                                            n_samples_per_client=20, n_informative=3,
                                            random_state=0)
    lay = Layout(1, n_features)
    objs = [ClientObjective(Quadratic(), X[clients == c], y[clients == c, None],
                            np.ones(20), lay) for c in range(6)]
    ex = SequentialExecutor()
    ex.open(objs)
    problem = FederatedProblem(layout=lay, datafit=Quadratic(), penalty=None,
                               weights=np.full(6, 1 / 6), n_samples=np.full(6, 20),
                               lipschitz=[o.lipschitz() for o in objs])
    return FederationSession(executor=ex), problem


@pytest.mark.parametrize("n_features", [6, 30])  # the dense path, the Lanczos path
def test_one_block_of_products_gives_the_constants_of_one_request_per_product(
        n_features, monkeypatch):
    """The pooled block of every unit vector's products (one request per site) gives the
    constants that one request per product gives, to round-off."""
    from skfed.federation import smoothness

    session, problem = _session(n_features)
    block = pooled_smoothness(session, problem)
    assert session.ledger.rounds("setup") == 2
    monkeypatch.setattr(smoothness, "_GRAM_UP_TO", 0)
    session, problem = _session(n_features)
    single = pooled_smoothness(session, problem)
    assert session.ledger.rounds("setup") > 2
    for key in ("coef", "intercept", "joint"):
        np.testing.assert_allclose(block[key], single[key], rtol=1e-13)


@pytest.mark.parametrize("n_features", [6, 80])  # dense path and Lanczos path
def test_pooled_constant_is_the_pooled_hessians_top_eigenvalue(n_features):
    session, problem = _session(n_features)
    objs = session.executor.clients
    X, y, clients, _ = make_federated_lasso("III", n_features=n_features, n_clients=6,
                                            n_samples_per_client=20, n_informative=3,
                                            random_state=0)
    constants = pooled_smoothness(session, problem)
    n_bytes, n_rounds = session.ledger.bytes("setup"), session.ledger.rounds("setup")
    top = np.linalg.eigvalsh(X.T @ X / len(y))[-1]
    assert top <= constants["coef"] <= top * (1 + 2e-3)
    # much smaller than the average of the clients' own constants here
    assert constants["coef"] < 0.5 * np.mean([o.lipschitz()["coef"] for o in objs])
    # joint factor bounds the block-scaled pooled Hessian (with intercept)
    Xt = np.column_stack([X, np.ones(len(y))])
    D = np.diag(1 / np.sqrt(np.r_[np.full(n_features, constants["coef"]), 1.0]))
    assert np.linalg.eigvalsh(D @ (Xt.T @ Xt / len(y)) @ D)[-1] <= constants["joint"] + 1e-9
    if n_features <= _GRAM_UP_TO:  # one round: every unit vector's products, d x d each way
        assert n_rounds == 2
        assert n_bytes == 2 * 6 * 8 * n_features ** 2 + 6 * 8 * n_features
    else:  # Lanczos: a vector each way per product
        assert n_bytes == (n_rounds - 1) * 2 * 6 * 8 * n_features + 6 * 8 * n_features
