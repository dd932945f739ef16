"""The federation session: one sum for every exchange, and one ledger of what it cost."""

import numpy as np
import pytest

from skfed import FedCoxPH, FedLasso, FedPoissonRegressor
from skfed.data import as_dataset
from skfed.executors import SequentialExecutor
from skfed.federation.session import FederationSession, Ledger, add_fields, payload_nbytes
from skfed.privacy import SecureAggregation
from skfed.survival import survival_target


def _site_total(site, power):
    """A site's sum of its targets to ``power``, and its row count."""
    y = np.asarray(site.y, dtype=float)
    return {"total": float(np.sum(y ** power)), "rows": np.array([site.n_samples], float)}


def _rows():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((90, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.standard_normal(90)
    sites = np.repeat([0, 1, 2], 30)
    return X, y, sites


def test_a_sum_over_a_datasets_sites_is_the_pooled_sum():
    X, y, sites = _rows()
    session = FederationSession.for_dataset(as_dataset(X, y, sites))
    sums = session.sum(_site_total, 2, phase="analysis")
    assert sums["total"] == pytest.approx(np.sum(y ** 2), rel=1e-13)
    assert sums["rows"][0] == 90
    # weighted: each site's reply times its public coefficient
    weighted = session.sum(_site_total, 1, phase="analysis", coefficients=[1.0, 0.0, 2.0])
    assert weighted["total"] == pytest.approx(y[:30].sum() + 2 * y[60:].sum(), rel=1e-12)
    # the ledger: two rounds, each the power down (8 bytes) and two numbers up, per site
    assert session.ledger.rounds("analysis") == 2
    assert session.ledger.bytes("analysis") == 2 * 3 * (8 + 16)


def test_per_site_releases_keep_the_sites_apart():
    X, y, sites = _rows()
    session = FederationSession.for_dataset(as_dataset(X, y, sites))
    replies = session.per_site(_site_total, 1, phase="setup", sites=[2, 0])
    assert [r["rows"][0] for r in replies] == [30, 30]
    assert replies[0]["total"] == pytest.approx(y[60:].sum())
    assert session.ledger.as_dict()["setup"] == {"rounds": 1, "bytes": 2 * (8 + 16)}


def test_the_sum_adds_dicts_tuples_and_arrays_alike():
    replies = [{"a": 1.0, "b": (np.ones(2), 3.0)}, {"a": 2.0, "b": (np.arange(2.0), 1.0)}]
    total = add_fields(replies, [1.0, 0.5])
    assert float(total["a"]) == 2.0
    np.testing.assert_array_equal(total["b"][0], [1.0, 1.5])
    assert float(total["b"][1]) == 3.5
    with pytest.raises(ValueError, match="no site"):
        add_fields([])
    assert payload_nbytes({"x": np.zeros(3), "n": 4, "none": None, "pair": ("a", 1)}) == 24 + 8 + 16


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown phase 'round'"):
        Ledger().add("round", 8)


def _check_ledger_matches_history(history):
    ledger = history.ledger
    assert ledger["setup"] == {"rounds": history.setup_rounds, "bytes": history.setup_bytes}
    assert ledger["inference"] == {"rounds": history.inference_rounds,
                                   "bytes": history.inference_bytes}
    assert ledger["rounds"]["bytes"] == int((history["bytes_up"] + history["bytes_down"]).sum())
    assert ledger["monitor"]["bytes"] == int(history["monitor_bytes"].sum())


@pytest.mark.parametrize("privacy", [None, SecureAggregation()], ids=["plain", "masked"])
def test_a_fits_ledger_is_its_history(privacy):
    X, y, sites = _rows()
    lasso = FedLasso(alpha=0.1, solver="fedavg", max_rounds=5, tol=0, privacy=privacy)
    with pytest.warns(Warning):
        lasso.fit(X, y, clients=sites)
    _check_ledger_matches_history(lasso.history_)
    assert lasso.history_.ledger["rounds"]["rounds"] == 5
    # round 0 and each round; in the clear, rounds 1 to 4's ride the next round's calls
    # (no exchange of their own): only the start's and the last round's are passes
    assert lasso.history_.ledger["monitor"]["rounds"] == (6 if privacy else 2)
    counts = np.random.default_rng(1).poisson(np.exp(0.3 * X[:, 0]))
    glm = FedPoissonRegressor(alpha=0, privacy=privacy).fit(X, counts, clients=sites)
    _check_ledger_matches_history(glm.history_)
    assert glm.history_.inference_rounds >= 3  # the fit, the null model's start and steps


def test_masked_and_plain_sums_give_the_same_cox_model():
    """A shared Cox baseline pools its monitor from risk-set sums: masked, through the
    same session sum (the wrapped solver's own pass, masked by the session)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((120, 2))
    time = rng.exponential(np.exp(-X @ np.array([0.7, -0.4])))
    y = survival_target(rng.random(120) < 0.8, time)
    sites = np.repeat([0, 1, 2], 40)
    plain = FedCoxPH().fit(X, y, clients=sites)
    masked = FedCoxPH(privacy=SecureAggregation()).fit(X, y, clients=sites)
    np.testing.assert_allclose(masked.coef_, plain.coef_, rtol=1e-8)
    # the first monitor (at zero) is the same objective, not a per-site partial likelihood
    assert masked.history_["objective"][0] == pytest.approx(plain.history_["objective"][0],
                                                           rel=1e-9)
    assert masked.n_iter_ < masked.max_rounds  # it stopped by the rule, not the limit


def test_a_session_over_an_executor_runs_on_its_clients():
    executor = SequentialExecutor()
    executor.open([np.arange(3.0), np.arange(3.0) + 1])
    session = FederationSession(executor=executor)
    total = session.sum(_client_norm, phase="setup", coefficients=[0.5, 0.5])
    assert float(total) == pytest.approx(0.5 * (3.0 + 6.0))
    session.close_clients()
    assert session.executor is None and not session.masked


def _client_norm(client):
    return float(np.sum(client))
