"""The FCO paper's sparse recovery claim on its synthetic LASSO set III.

The paper's setting: 64 clients, 10 sampled per round, batch 10, one local
epoch, server lr 1. Its reported client lr 0.01 diverges on data generated as
its App. B.2.1 describes (the batch Hessian along the shared client mean has
eigenvalue ~||mu||^2 ~ 1024, so eta_c * L ~ 10 until the iterate is sparse); we
use 1e-3 from the paper's own grid, the largest grid value that is stable.
alpha = 1 is one for which the pooled Lasso recovers the true support.
"""

import numpy as np
from sklearn.linear_model import Lasso

from skfed import FedLasso
from skfed.datasets import make_federated_lasso
from skfed.metrics import support_scores
from skfed.solvers import FedDualAvg

from .conftest import fit_quietly


def test_feddualavg_recovers_the_support_of_config_III_within_100_rounds():
    X, y, clients, w_true = make_federated_lasso("III", random_state=0)
    alpha = 1.0
    pooled = Lasso(alpha=alpha).fit(X, y)
    assert support_scores(pooled.coef_, w_true)["f1"] == 1.0
    solver = FedDualAvg(client_lr=1e-3, server_lr=1.0, local_epochs=1, batch_size=10)
    est = FedLasso(alpha=alpha, solver=solver, participation=10 / 64, max_rounds=100, tol=0,
                   random_state=0)
    est = fit_quietly(est, X, y, clients=clients)
    assert support_scores(est.coef_, w_true)["f1"] == 1.0
    assert np.all(est.history_["n_participants"][1:] == 10)
    # exact zeros, not merely small values
    assert np.count_nonzero(est.coef_) <= 2 * np.count_nonzero(w_true)
