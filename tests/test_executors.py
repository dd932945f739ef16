"""Every executor gives the same model for the same random_state."""

import numpy as np
import pytest
import scipy.sparse as sp

from skfed import FedLasso
from skfed.executors import LokyExecutor, SequentialExecutor, ThreadExecutor, resolve_executor
from skfed.solvers import FedDualAvg, FedProx

from .conftest import fit_quietly


@pytest.mark.parametrize("solver", [FedDualAvg(local_epochs=1, batch_size=7), FedProx(local_steps=3)])
@pytest.mark.parametrize("sparse", [False, True])
def test_same_coef_on_every_executor(synthetic, solver, sparse):
    X, y, clients, _ = synthetic
    X = sp.csr_matrix(X) if sparse else X
    coefs = []
    for executor in ["sequential", "threads", LokyExecutor(n_jobs=2)]:
        est = FedLasso(alpha=0.3, solver=solver, participation=0.5, max_rounds=15, tol=0,
                       executor=executor, n_jobs=2, random_state=7)
        coefs.append(fit_quietly(est, X, y, clients=clients).coef_)
    np.testing.assert_array_equal(coefs[0], coefs[1])
    np.testing.assert_array_equal(coefs[0], coefs[2])


def test_random_state_controls_sampling(synthetic):
    X, y, clients, _ = synthetic
    est = lambda seed: fit_quietly(FedLasso(alpha=0.3, participation=0.25, max_rounds=5, tol=0,  # noqa
                                            random_state=seed), X, y, clients=clients)
    np.testing.assert_array_equal(est(1).coef_, est(1).coef_)
    assert not np.array_equal(est(1).coef_, est(2).coef_)


def test_loky_ships_memory_mapped_data_once(synthetic, tmp_path):
    X, y, clients, _ = synthetic
    from skfed.datafits import ClientObjective, Quadratic
    from skfed.federation.layout import Layout

    lay = Layout(1, X.shape[1])
    objs = [ClientObjective(Quadratic(), X[clients == c], y[clients == c, None],
                            np.ones((clients == c).sum()), lay) for c in range(3)]
    ex = LokyExecutor(n_jobs=2, temp_folder=str(tmp_path))
    ex.open(objs)
    try:
        assert all(isinstance(c.X, np.memmap) for c in ex.clients)
        files = sorted(p.name for p in next(tmp_path.iterdir()).iterdir())
        assert files == ["client0.joblib", "client1.joblib", "client2.joblib"]
        out = ex.map(lambda c, k: c.n_samples * k, [(0, (2,)), (2, (3,))])
        assert out == [2 * objs[0].n_samples, 3 * objs[2].n_samples]
    finally:
        ex.close()
    assert not any(tmp_path.iterdir())  # placed data removed at close


def test_resolve_executor():
    assert isinstance(resolve_executor("sequential"), SequentialExecutor)
    assert isinstance(resolve_executor("threads", 2), ThreadExecutor)
    custom = SequentialExecutor()
    assert resolve_executor(custom) is custom
    with pytest.raises(ValueError, match="executor must be one of"):
        resolve_executor("ray")
