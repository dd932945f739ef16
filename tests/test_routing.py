"""The routing recipes of docs/index.md: ``clients`` reaches ``fit`` in every meta-estimator."""

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import (GridSearchCV, GroupKFold, LeaveOneGroupOut,
                                     cross_validate)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skfed import FedLasso
from skfed.solvers import FedDualAvg, FedMIDOSP

from .conftest import make_split


@pytest.fixture
def data(diabetes):
    X, y = diabetes
    return X, y, make_split(X, y, "quantile", n_clients=4)


def test_gridsearch_routing_off_groups_and_clients(data):
    X, y, site = data
    search = GridSearchCV(FedLasso(max_rounds=300), {"alpha": [0.05, 0.5]}, cv=GroupKFold(2))
    search.fit(X, y, groups=site, clients=site)
    assert search.best_estimator_.n_clients_ == 4
    assert search.best_params_["alpha"] in (0.05, 0.5)


def test_leave_one_site_out_routing_off(data):
    X, y, site = data
    res = cross_validate(FedLasso(alpha=0.1, max_rounds=300), X, y, groups=site,
                         cv=LeaveOneGroupOut(), params={"clients": site},
                         return_estimator=True)
    # each fold trains on the three other sites, federatedly
    assert [e.n_clients_ for e in res["estimator"]] == [3, 3, 3, 3]
    for est, (train, _) in zip(res["estimator"], LeaveOneGroupOut().split(X, y, site)):
        np.testing.assert_array_equal(est.clients_, np.unique(site[train]))


def test_pipeline_step_parameter(data):
    X, y, site = data
    pipe = make_pipeline(StandardScaler(), FedLasso(alpha=1.0, max_rounds=300))
    pipe.fit(X, y, fedlasso__clients=site)
    assert pipe[-1].n_clients_ == 4


def test_routing_on_clients_aliased_to_groups(data):
    X, y, site = data
    with sklearn.config_context(enable_metadata_routing=True):
        est = FedLasso(alpha=0.1, max_rounds=300).set_fit_request(clients="groups")
        res = cross_validate(est, X, y, cv=GroupKFold(4), params={"groups": site},
                             return_estimator=True)
    assert sorted(e.n_clients_ for e in res["estimator"]) == [3, 3, 3, 3]


def test_routing_on_clients_requested_by_default(data):
    X, y, site = data
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(FedLasso(max_rounds=300), {"alpha": [0.1, 1.0]}, cv=GroupKFold(2))
        search.fit(X, y, groups=site, clients=site)
    assert search.best_estimator_.n_clients_ == 4


def test_gridsearch_over_solver_parameters(data):
    X, y, site = data
    est = FedLasso(alpha=0.1, solver=FedDualAvg(local_steps=5), max_rounds=200, tol=1e-3)
    search = GridSearchCV(est, {"solver__client_lr": [1.0, 10.0]}, cv=GroupKFold(2))
    search.fit(X, y, groups=site, clients=site)
    assert search.best_estimator_.solver.client_lr in (1.0, 10.0)
    assert est.solver.client_lr == "auto"  # the template is never mutated
    assert search.best_estimator_.solver_.coef_step_ == search.best_params_["solver__client_lr"]


def test_gridsearch_over_the_solver_itself(data):
    X, y, site = data
    est = FedLasso(alpha=0.1, max_rounds=500, tol=1e-4)
    search = GridSearchCV(est, {"solver": ["fedmid-osp", FedDualAvg(), FedMIDOSP(client_lr=50.0)]},
                          cv=GroupKFold(2))
    search.fit(X, y, groups=site, clients=site)
    assert len(search.cv_results_["params"]) == 3
    assert est.solver == "auto"
