"""Issue 22, "the analyst's first day, round two": the small fixes a new user hit."""

import time
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from skfed import FedLogisticRegression


@pytest.fixture(scope="module")
def binary():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 6))
    w = np.array([2.0, -1.5, 0.0, 0.0, 1.0, 0.0])
    y = (X @ w + 0.5 * rng.normal(size=240) > 0).astype(int)
    return X, y, np.arange(240) % 3


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("penalty, l1_ratio, C", [("l1", 1.0, 0.2), ("l2", 0.0, 0.2),
                                                  (None, 0.0, np.inf)])
def test_penalty_is_deprecated_like_scikit_learn(binary, penalty, l1_ratio, C):
    """``penalty=`` fits the model of the matching ``l1_ratio``/``C`` and gives scikit-learn
    1.9's FutureWarning, whose text explains ``l1_ratio``."""
    X, y, site = binary
    with pytest.warns(FutureWarning, match="l1_ratio=1 instead of penalty='l1'") as record:
        old = FedLogisticRegression(penalty=penalty, C=0.2 if penalty else 1.0,
                                    l1_ratio=l1_ratio, tol=1e-8).fit(X, y, clients=site)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        new = FedLogisticRegression(C=C, l1_ratio=l1_ratio, tol=1e-8).fit(X, y, clients=site)
    np.testing.assert_allclose(old.coef_, new.coef_, atol=1e-6)
    # the same warning as scikit-learn's own estimator
    with pytest.warns(FutureWarning) as sk:
        LogisticRegression(penalty=penalty, C=0.2 if penalty else 1.0,
                           l1_ratio=l1_ratio, solver="saga", max_iter=5).fit(X, y)
    ours = [str(w.message) for w in record if w.category is FutureWarning]
    theirs = [str(w.message) for w in sk if w.category is FutureWarning]
    assert ours == theirs
    if penalty == "l1":
        assert np.any(old.coef_ == 0)  # an L1 model, although l1_ratio's default is 0


def test_penalty_l1_overrides_default_l1_ratio(binary):
    """``FedLogisticRegression(penalty="l1")`` (tutorials) is the L1 model, with scikit-learn's
    warning that ``l1_ratio`` disagrees; a bad value is refused by name."""
    X, y, site = binary
    with pytest.warns(UserWarning, match="Inconsistent values: penalty=l1 with l1_ratio=0"), \
            pytest.warns(FutureWarning, match="deprecated in version 1.8"):
        est = FedLogisticRegression(penalty="l1", C=0.2, tol=1e-8).fit(X, y, clients=site)
    ref = FedLogisticRegression(C=0.2, l1_ratio=1.0, tol=1e-8).fit(X, y, clients=site)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-6)
    with pytest.raises(ValueError, match="penalty"):
        FedLogisticRegression(penalty="l3").fit(X, y, clients=site)


@pytest.mark.parametrize("sample", [None, 200])
def test_kmeans_split_deterministic_and_sensible(monkeypatch, sample):
    """``scheme="kmeans"`` fits its centres on a sample of rows (``KMEANS_SAMPLE``) and sends
    every row to its nearest centre: the same split for the same seed, and well-separated
    blobs become the clients exactly."""
    from sklearn.datasets import make_blobs

    from skfed.datasets import _simulate, simulate_clients

    if sample is not None:
        monkeypatch.setattr(_simulate, "KMEANS_SAMPLE", sample)
    X, blob = make_blobs(n_samples=900, centers=4, cluster_std=0.5, center_box=(-20, 20),
                         random_state=3)
    y = X[:, 0]
    a = simulate_clients(X, y, 4, scheme="kmeans", random_state=7)
    b = simulate_clients(X, y, 4, scheme="kmeans", random_state=7)
    np.testing.assert_array_equal(a, b)
    assert set(a) == {0, 1, 2, 3}
    # one client per blob: the contingency table is a permutation matrix
    table = np.zeros((4, 4), dtype=int)
    np.add.at(table, (blob, a), 1)
    assert np.all((table > 0).sum(axis=1) == 1) and np.all((table > 0).sum(axis=0) == 1)


def _bars(text):
    return [part.split("]")[0] for part in text.split("\r[")[1:]]


def test_verbose_progress_bar_fills(binary, capsys):
    """verbose=1: the bar fills with the progress toward tol, not only with the share of
    max_rounds (a fit converging in a few of 1000 rounds showed an empty bar), and ends
    full; the closing line agrees in number."""
    X, y, site = binary
    est = FedLogisticRegression(C=1.0, tol=1e-8, max_rounds=1000, verbose=1)
    est.fit(X, y, clients=site)
    err = capsys.readouterr().err
    bars = _bars(err)
    assert est.n_iter_ < 50 and len(bars) >= est.n_iter_
    filled = [bar.count("#") for bar in bars]
    assert filled[-1] == 30 and all(len(bar) == 30 for bar in bars)
    assert 0 < filled[len(filled) // 2] < 30  # part-way, part-filled
    assert filled == sorted(filled)  # never moves back here: stationarity falls steadily
    assert f"converged after {est.n_iter_} rounds" in err


def test_one_round_is_singular_and_plotted_on_whole_rounds(capsys):
    """A one-round fit says "1 round" and its history plot has whole-round ticks."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from skfed import FedLasso

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = X @ np.array([1.0, 2.0, 0.0])
    est = FedLasso(alpha=0.01, solver="newton", verbose=1).fit(X, y, clients=np.arange(60) % 2)
    assert est.n_iter_ == 1
    assert "converged after 1 round\n" in capsys.readouterr().err
    for ax in est.history_.plot():
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks)
    with pytest.warns(Warning, match=r"in 1 round: ") as record:
        FedLogisticRegression(max_rounds=1, tol=1e-12).fit(X, (y > 0).astype(int))
    assert all("1 rounds" not in str(w.message) for w in record)


def test_a_rejected_line_search_trial_is_not_recorded_as_a_model():
    """Newton's server broadcasts trial points; one the Armijo test rejects was never a model,
    so its round has no objective (it showed as a spike: 0.685 -> 8.43 -> converging)."""
    import scipy.sparse as sp

    from skfed import FedLinearSVC
    from skfed.solvers import FedNewton

    rng = np.random.default_rng(0)
    X = sp.random(300, 60, density=0.1, random_state=0, format="csr")
    X.data = rng.exponential(3, size=X.data.size)
    w = np.zeros(60)
    w[:10] = 3 * rng.normal(size=10)
    y = (X @ w + rng.normal(size=300) > 0).astype(int)
    rejected = []
    original = FedNewton.aggregate_sums

    def spy(self, server, sums, participants):
        out = original(self, server, sums, participants)
        rejected.append(out["rejected"])
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FedNewton, "aggregate_sums", spy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = FedLinearSVC(C=1.0, max_rounds=60, solver=FedNewton(
                hessian="quasi-newton")).fit(X, y, clients=np.arange(300) % 3)
    objective = est.history_["objective"]
    # the aggregate of round r + 1 judges the trial that round r's record is about
    judged = np.array([False] + rejected[1:] + [False])[:len(objective)]
    assert judged.any()
    np.testing.assert_array_equal(np.isnan(objective), judged)
    kept = objective[~np.isnan(objective)]
    assert np.all(np.diff(kept) <= 1e-12 * np.abs(kept[1:]))


@pytest.mark.parametrize("seed", [0, 7])
def test_a_fit_ending_on_a_worse_trial_returns_the_accepted_model(seed):
    """At max_rounds Newton's server may hold a trial the line search has not judged; when
    its monitored objective fails the Armijo test, the returned model is the last accepted
    point and the final record describes it (it once showed a rise in the last round)."""
    import scipy.sparse as sp

    from skfed import FedLinearSVC
    from skfed.solvers import FedNewton

    rng = np.random.default_rng(seed)
    X = sp.random(300, 60, density=0.1, random_state=seed, format="csr")
    X.data = rng.exponential(3, size=X.data.size)
    w = np.zeros(60)
    w[:10] = 3 * rng.normal(size=10)
    y = (X @ w + rng.normal(size=300) > 0).astype(int)
    kw = dict(C=1.0, solver=FedNewton(hessian="quasi-newton"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FedLinearSVC(max_rounds=60, **kw).fit(X, y, clients=np.arange(300) % 3)
    objective = est.history_["objective"]
    kept = objective[~np.isnan(objective)]
    assert kept[-1] <= kept[-2]
    # the returned model's objective is the one recorded, evaluated independently
    margin = 1 - np.where(y == 1, 1, -1) * (X @ est.coef_.ravel() + est.intercept_[0])
    value = np.sum(np.maximum(margin, 0) ** 2) / 300 + 0.5 * est.coef_ @ est.coef_.T / 300
    np.testing.assert_allclose(value.item(), est.objective_, rtol=1e-10)
