"""Bad input gets a clear error naming the problem."""

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from skfed import FedElasticNet, FedLasso
from skfed.federation.layout import Layout
from skfed.federation.problem import FederatedProblem
from skfed.datafits import Datafit, Quadratic
from skfed.penalties import L1, L1Ball
from skfed.solvers import FedAvg, FedDualAvg, FedMID, resolve_solver

X = np.random.default_rng(0).standard_normal((20, 3))
y = X @ [1.0, 2.0, 0.0]
site = np.repeat([0, 1], 10)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_X(bad):
    Xb = X.copy()
    Xb[3, 1] = bad
    with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
        FedLasso().fit(Xb, y, clients=site)


def test_non_finite_y():
    yb = y.copy()
    yb[0] = np.nan
    with pytest.raises(ValueError, match="Input y contains NaN"):
        FedLasso().fit(X, yb, clients=site)


def test_clients_wrong_length():
    with pytest.raises(ValueError, match="clients has 19 entries but X has 20 rows"):
        FedLasso().fit(X, y, clients=site[:-1])


def test_clients_with_missing_labels():
    labels = site.astype(float)
    labels[4] = np.nan
    with pytest.raises(ValueError, match="clients contains NaN"):
        FedLasso().fit(X, y, clients=labels)
    with pytest.raises(ValueError, match="missing labels"):
        FedLasso().fit(X, y, clients=np.array(["a"] * 10 + [None] * 10, dtype=object))


def test_empty_client():
    sw = np.ones(20)
    sw[site == 1] = 0.0
    with pytest.raises(ValueError, match="client 1 has no samples with positive weight"):
        FedLasso().fit(X, y, clients=site, sample_weight=sw)


def test_string_client_labels_work():
    est = FedLasso(alpha=0.01).fit(X, y, clients=np.where(site == 0, "paris", "lyon"))
    assert list(est.clients_) == ["lyon", "paris"]


def test_unknown_solver():
    with pytest.raises(InvalidParameterError, match="'solver' parameter of FedLasso"):
        FedLasso(solver="adam").fit(X, y)
    with pytest.raises(ValueError, match="unknown solver 'adam'"):
        resolve_solver("adam")


@pytest.mark.parametrize("participation", [0.0, -0.5, 1.5])
def test_participation_outside_unit_interval(participation):
    with pytest.raises(InvalidParameterError, match="'participation' parameter"):
        FedLasso(participation=participation).fit(X, y, clients=site)


def test_negative_alpha():
    with pytest.raises(InvalidParameterError, match="'alpha' parameter of FedLasso"):
        FedLasso(alpha=-1.0).fit(X, y)
    with pytest.raises(InvalidParameterError, match="'l1_ratio' parameter"):
        FedElasticNet(l1_ratio=1.5).fit(X, y)


@pytest.mark.parametrize("solver, message", [
    (FedDualAvg(client_lr=-1.0), "client_lr must be a finite number > 0 or 'auto'"),
    (FedDualAvg(server_lr=0.0), "server_lr must be a finite number > 0"),
    (FedDualAvg(local_steps=0), "local_steps must be an integer >= 1"),
    (FedDualAvg(batch_size=0), "batch_size must be an integer >= 1 or None"),
    (FedMID(client_lr_schedule="cosine"), "client_lr_schedule must be one of"),
])
def test_bad_solver_parameters(solver, message):
    with pytest.raises(ValueError, match=message):
        FedLasso(solver=solver).fit(X, y, clients=site)


def _problem(penalty=None, datafit=None):
    return FederatedProblem(layout=Layout(1, 3), datafit=datafit or Quadratic(), penalty=penalty,
                            weights=np.array([0.5, 0.5]), n_samples=np.array([10, 10]))


def test_solver_penalty_mismatch():
    with pytest.raises(ValueError, match="solver 'fedavg'.*cannot enforce the constraint L1Ball"):
        FedAvg().check_problem(_problem(L1Ball(1.0)), 1.0)
    FedDualAvg().check_problem(_problem(L1Ball(1.0)), 1.0)  # projections are fine


def test_solver_needing_a_smooth_loss():
    class Hinge(Datafit):
        smooth = False

        def loss_sum(self, Z, Y, sw):
            return float(np.sum(sw * np.maximum(0, 1 - Y * Z).sum(axis=1)))

        def raw_gradient(self, Z, Y, sw):
            return -Y * (Y * Z < 1) * sw[:, None]

    with pytest.raises(ValueError, match="needs a smooth loss"):
        FedDualAvg().check_problem(_problem(L1(1.0), Hinge()), 1.0)


def test_solver_needing_full_participation():
    class Everyone(FedDualAvg):
        requires_full_participation = True
        name = "everyone"

    with pytest.raises(ValueError, match="needs full participation.*participation=0.5"):
        Everyone().check_problem(_problem(), 0.5)


def test_solver_of_the_wrong_type():
    with pytest.raises(InvalidParameterError, match="'solver' parameter"):
        FedLasso(solver=object()).fit(X, y)


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_divergence_is_reported_not_silent():
    with pytest.raises(FloatingPointError, match="diverged"):
        FedLasso(alpha=0.0, solver=FedDualAvg(client_lr=1e3), max_rounds=500).fit(X * 100, y)


def test_groups_points_to_clients():
    from skfed import FedLasso

    X, y = np.ones((6, 2)), np.arange(6.0)
    with pytest.raises(TypeError, match=r"takes the sites as clients=, not groups=.*"
                                        r"search.fit\(X, y, groups=site, clients=site\)"):
        FedLasso().fit(X, y, groups=[0, 0, 0, 1, 1, 1])


def test_a_text_column_of_a_dataframe_is_named():
    import pandas as pd

    from skfed import FedLogisticRegression

    X = pd.DataFrame({"age": [30.0, 40, 50, 60], "ward": ["a", "b", "a", "b"],
                      "code": np.array(["1", "2", "3", "4"], dtype=object)})
    with pytest.raises(ValueError, match="column 'ward' is not numeric"):
        FedLogisticRegression().fit(X, [0, 1, 0, 1])
    # an object column of numbers converts, as scikit-learn's would
    FedLogisticRegression().fit(X.drop(columns="ward"), [0, 1, 0, 1])
