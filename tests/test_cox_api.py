"""FedCoxPH as a scikit-learn estimator: the API checks that apply to a survival
target, pipelines, executors in other processes, and the errors of what is not
available."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import (check_get_params_invariance,
                                            check_no_attributes_set_in_init,
                                            check_parameters_default_constructible,
                                            check_set_params)

from skfed.linear_model import InferenceError
from skfed.privacy import SecureAggregation
from skfed.survival import FedCoxPH, survival_target


def _data(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    time = rng.exponential(np.exp(-X @ [0.6, -0.4, 0.0]))
    event = rng.random(n) < 0.75
    site = np.repeat(["a", "b", "c"], n // 3)
    return X, survival_target(event, np.round(time, 2)), site


# scikit-learn's checks fit on numeric targets; these are the ones about parameters
@pytest.mark.parametrize("check", [check_no_attributes_set_in_init, check_get_params_invariance,
                                   check_set_params, check_parameters_default_constructible])
def test_parameter_checks(check):
    check("FedCoxPH", FedCoxPH(alpha=0.1, strata="site"))


def test_clone_pickle_and_pipeline():
    X, y, site = _data()
    cox = FedCoxPH(strata="site").fit(X, y, clients=site)
    again = pickle.loads(pickle.dumps(cox))
    np.testing.assert_array_equal(again.predict(X), cox.predict(X))
    assert clone(cox).get_params() == cox.get_params() and not hasattr(clone(cox), "coef_")
    # a Pipeline routes clients= to its last step; standardizing changes only the scale
    pipe = make_pipeline(StandardScaler(), FedCoxPH()).fit(X, y, fedcoxph__clients=site)
    plain = FedCoxPH().fit(StandardScaler().fit_transform(X), y, clients=site)
    np.testing.assert_allclose(pipe[-1].coef_, plain.coef_, rtol=1e-10)
    assert pipe.score(X, y) == pytest.approx(plain.score(StandardScaler().fit(X).transform(X), y))


@pytest.mark.parametrize("strata", [None, "site"])
def test_loky_processes_give_the_same_fit(strata):
    X, y, site = _data()
    here = FedCoxPH(strata=strata, cov_type="cluster").fit(X, y, clients=site)
    there = FedCoxPH(strata=strata, cov_type="cluster", executor="loky", n_jobs=2).fit(
        X, y, clients=site)
    np.testing.assert_allclose(there.coef_, here.coef_, rtol=1e-12)
    np.testing.assert_allclose(there.bse_, here.bse_, rtol=1e-12)


def test_secure_aggregation_with_site_strata():
    X, y, site = _data()
    plain = FedCoxPH(strata="site").fit(X, y, clients=site)
    masked = FedCoxPH(strata="site", privacy=SecureAggregation()).fit(X, y, clients=site)
    np.testing.assert_allclose(masked.coef_, plain.coef_, rtol=1e-9)
    np.testing.assert_allclose(masked.bse_, plain.bse_, rtol=1e-8)
    with pytest.raises(InferenceError, match="not a sum over sites"):
        masked.predict_survival_function(X[:2], [1.0], strata=site[:2])


@pytest.mark.parametrize("cov_type", ["nonrobust", "robust", "cluster"])
def test_secure_aggregation_of_the_risk_set_sums(cov_type):
    """A shared baseline under secure aggregation: the server decodes only the sums of
    the sites' risk-set sums (rounds, monitor, inference), and gets the same model."""
    X, y, site = _data()
    plain = FedCoxPH(cov_type=cov_type).fit(X, y, clients=site)
    masked = FedCoxPH(cov_type=cov_type, privacy=SecureAggregation()).fit(X, y, clients=site)
    np.testing.assert_allclose(masked.coef_, plain.coef_, rtol=1e-8)
    np.testing.assert_allclose(masked.bse_, plain.bse_, rtol=1e-7)
    assert masked.loglike_ == pytest.approx(plain.loglike_, rel=1e-9)
    np.testing.assert_allclose(masked.predict_survival_function(X[:3], [0.5, 1.0]),
                               plain.predict_survival_function(X[:3], [0.5, 1.0]), rtol=1e-7)
    # (the masked fit takes a few more rounds: near the optimum the line search rejects
    # trials whose decrease is below the fixed-point resolution of the masked sums)
    assert masked.history_.privacy["secure_aggregation"]


def test_differential_privacy_is_refused():
    from skfed.privacy import DifferentialPrivacy

    X, y, site = _data()
    with pytest.raises(ValueError, match="differential privacy"):
        FedCoxPH(privacy=DifferentialPrivacy(epsilon=1.0)).fit(X, y, clients=site)


def test_no_standard_errors_with_an_l1_part_and_the_reason():
    X, y, site = _data()
    cox = FedCoxPH(alpha=0.05, l1_ratio=1.0).fit(X, y, clients=site)
    assert cox.coef_[2] == 0.0  # the noise covariate is dropped exactly
    with pytest.raises(InferenceError, match="L1 part"):
        cox.bse_
    assert np.isfinite(cox.loglike_)


def test_stratified_model_needs_each_rows_stratum():
    X, y, site = _data()
    cox = FedCoxPH(strata="site").fit(X, y, clients=site)
    with pytest.raises(ValueError, match="pass strata="):
        cox.predict_survival_function(X[:2])
    with pytest.raises(ValueError, match="unknown stratum"):
        cox.predict_survival_function(X[:2], strata=["z", "a"])
    S = cox.predict_survival_function(X[:2], [0.5, 1.0], strata=["a", "b"])
    assert S.shape == (2, 2) and np.all((S > 0) & (S < 1)) and np.all(np.diff(S, axis=1) <= 0)


def test_warm_start_resumes_at_the_optimum():
    X, y, site = _data()
    cox = FedCoxPH(warm_start=True).fit(X, y, clients=site)
    first = cox.coef_.copy()
    cox.fit(X, y, clients=site)
    np.testing.assert_allclose(cox.coef_, first, rtol=1e-10)
    assert cox.n_iter_ <= 2


def test_a_monotone_likelihood_is_named_in_the_warning():
    from sklearn.exceptions import ConvergenceWarning

    X, y, site = _data()
    # a covariate that orders the event times perfectly: its coefficient is infinite
    leak = np.column_stack([-y["time"], X[:, 0]])
    with pytest.warns(ConvergenceWarning, match="monotone"):
        FedCoxPH(max_rounds=30).fit(leak, y, clients=site)
