"""Bad input gets a clear error naming the problem."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.utils._param_validation import InvalidParameterError

from skfed import FedElasticNet, FedLasso, FedLogisticRegression
from skfed._messages import plain, show
from skfed.federation.layout import Layout
from skfed.federation.problem import FederatedProblem
from skfed.datafits import Datafit, Quadratic
from skfed.penalties import L1, L1Ball
from skfed.solvers import (SOLVERS, AFedPD, DualFL, FedAvg, FedDualAvg, FedDualAvgOSP, FedMID,
                           FedMIDOSP, FedMLS, FedNewton, LocalGECL, Scaffold, resolve_solver,
                           solver_name)

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
    with pytest.raises(ValueError, match="unknown solver 'adam'; available: 'auto', 'afedpd'"):
        resolve_solver("adam")


@pytest.mark.parametrize("spelling, cls", [
    ("DualFL", DualFL), ("dualfl", DualFL), ("FedDualAvg", FedDualAvg),
    ("LocalGECL", LocalGECL), ("local_gecl", LocalGECL), ("Local G-ECL", LocalGECL),
    ("local-gecl", LocalGECL), ("Scaffold", Scaffold), ("SCAFFOLD", Scaffold),
    ("FedNewton", FedNewton), ("newton", FedNewton), ("FedAvg", FedAvg),
    ("FedDualAvg-OSP", FedDualAvgOSP), ("FedDualAvgOSP", FedDualAvgOSP),
    ("feddualavg_osp", FedDualAvgOSP), ("A-FedPD", AFedPD), ("FedMID OSP", FedMIDOSP),
])
def test_solver_names_accept_the_class_spelling(spelling, cls):
    assert type(resolve_solver(spelling)) is cls
    assert solver_name(spelling) == cls.name
    # the estimators' parameter validation accepts it too (ridge: every solver applies)
    est = FedElasticNet(alpha=0.1, l1_ratio=0.0, solver=spelling, max_rounds=2, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y, clients=site)
    assert type(est.solver_) is cls and est.solver == spelling  # the parameter is kept


def test_every_solver_by_its_class_name_and_its_name():
    for name, cls in SOLVERS.items():
        assert solver_name(cls.__name__) == solver_name(name.upper()) == name
    assert solver_name("Auto") == "auto"


@pytest.mark.parametrize("typo, closest", [
    ("dualf", "'dualfl'"), ("scafold", "'scaffold'"), ("FedNewtn", "'newton'"),
    ("feddualavgosb", "'feddualavg-osp'"), ("LocalGCL", "'local-gecl'"),
])
def test_unknown_solver_suggests_the_closest(typo, closest):
    with pytest.raises(ValueError, match=rf"unknown solver '{typo}'; did you mean {closest}"
                                         r".*\? Available: 'auto', 'afedpd', "):
        resolve_solver(typo)
    # the estimator's own parameter validation says the same
    with pytest.raises(InvalidParameterError, match=rf"'solver' parameter of FedLasso .*"
                                                    rf"unknown solver '{typo}'; did you mean "
                                                    rf"{closest}.* Got '{typo}' instead"):
        FedLasso(solver=typo).fit(X, y)


def test_solver_parameter_message_without_a_name():
    # a solver that is not a string gets no stale suggestion
    with pytest.raises(InvalidParameterError, match=r"or a solver name among \{'auto', "):
        FedLasso(solver=3).fit(X, y)


def test_grid_search_over_solver_spellings():
    search = GridSearchCV(FedElasticNet(alpha=0.1, l1_ratio=0.0),
                          {"solver": ["DualFL", "newton", "FedNewton", "local_gecl"]}, cv=2)
    search.fit(X, y, clients=site)
    assert list(search.cv_results_["param_solver"]) == ["DualFL", "newton", "FedNewton",
                                                        "local_gecl"]
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


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


def test_groups_says_why_for_every_estimator():
    from skfed import FedLinearSVC, FedLowRank

    Xs, ys = np.ones((6, 2)), np.array([0, 1, 0, 1, 0, 1])
    for est in (FedLogisticRegression(), FedLinearSVC(), FedLowRank(), FedElasticNet()):
        with pytest.raises(TypeError, match=r"clients=, not groups=.*GridSearchCV gives groups "
                                            r"to the splitter only.*silently fit on one client"):
            est.fit(Xs, ys, groups=[0, 0, 0, 1, 1, 1])


# -- plain values in messages (numpy 2 shows repr(np.float64(1.0)) as 'np.float64(1.0)')

def test_show_gives_plain_values():
    assert show(np.float64(-1.0)) == "-1.0"
    assert show(np.int64(0)) == "0"
    assert show(np.bool_(True)) == "True"
    assert show(np.str_("cosine")) == "'cosine'"
    assert show("auto") == "'auto'"
    assert show((np.int64(2), 3)) == "(2, 3)"
    assert show(None) == "None"
    assert plain(np.array(2.5)) == 2.5 and type(plain(np.array(2.5))) is float


@pytest.mark.parametrize("make, message", [
    (lambda: FedLasso(solver=FedDualAvg(client_lr=np.float64(-1))),
     "client_lr must be a finite number > 0 or 'auto'; got -1.0."),
    (lambda: FedElasticNet(l1_ratio=0.0, solver=Scaffold(lr=np.float64(-1))),
     "lr must be a finite number > 0 or 'auto'; got -1.0."),
    (lambda: FedLasso(solver=FedDualAvg(local_steps=np.int64(0))),
     "local_steps must be an integer >= 1; got 0."),
    (lambda: FedLasso(solver=FedMID(client_lr_schedule=np.str_("cosine"))),
     "client_lr_schedule must be one of .*; got 'cosine'."),
    (lambda: FedLasso(solver=FedMLS(t0=np.float64(0.0))),
     "t0 must be a finite number > 0; got 0.0."),
    (lambda: FedLasso(solver=FedNewton(hessian=np.str_("exact"))), "got 'exact'."),
])
def test_solver_errors_show_plain_values(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make().fit(X, y, clients=site)
    assert "np." not in str(info.value)


def test_penalty_in_a_message_shows_plain_values():
    with pytest.raises(ValueError, match=r"cannot enforce the constraint L1Ball\(radius=1.0\)"):
        FedAvg().check_problem(_problem(L1Ball(np.float64(1.0))), 1.0)


def test_single_class_message_shows_the_plain_label():
    with pytest.raises(ValueError, match="hold only 1.$") as info:
        FedLogisticRegression().fit(X, np.ones(20, dtype=np.int64), clients=site)
    assert "np." not in str(info.value)


def test_estimator_parameter_errors_show_plain_values():
    with pytest.raises(InvalidParameterError, match="'alpha' parameter of FedLasso") as info:
        FedLasso(alpha=np.float64(-1.0)).fit(X, y)
    assert "np.float64" not in str(info.value)


# -- a fit without clients= says it used one client (no warning: check_estimator
#    and every centralized use fit without clients)

def test_fit_without_clients_is_one_client_and_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = FedLasso(alpha=0.1).fit(X, y)
    assert est.n_clients_ == 1 and list(est.clients_) == [0]
    federated = FedLasso(alpha=0.1).fit(X, y, clients=site)
    assert federated.n_clients_ == 2


def test_history_repr_says_a_one_client_fit_is_centralized():
    from skfed import ConvergenceHistory

    history = ConvergenceHistory()
    assert "clients" not in repr(history)  # not recorded
    history.n_clients = 1
    assert "clients=1 (one client: a centralized fit)" in repr(history)
    history.n_clients = 4
    assert "clients=4," in repr(history)


def test_fitted_history_says_centralized():
    est = FedLasso(alpha=0.1).fit(X, y)
    assert "clients=1 (one client: a centralized fit)" in repr(est.history_)


def test_a_one_client_convergence_warning_says_the_fit_was_centralized():
    with pytest.warns(Warning, match="without clients= all rows form one client"):
        FedLasso(alpha=0.1, solver="fedmid", max_rounds=2).fit(X, y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FedLasso(alpha=0.1, solver="fedmid", max_rounds=2).fit(X, y, clients=site)
    assert caught and not any("one client" in str(w.message) for w in caught)
