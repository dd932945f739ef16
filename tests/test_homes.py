"""Every home of the rows gives the same model (issue 27): one fixture opens the same
sites' rows in this process, on Dask workers named after the sites, and at real site
services, and one :func:`~tests._homes.assert_same_fit` compares each fit with the
in-process one."""

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from sklearn.datasets import load_breast_cancer, load_diabetes  # noqa: E402

from skfed import (FedLasso, FedLinearRegression, FedLogisticRegression,  # noqa: E402
                   FedPoissonRegressor)
from skfed.privacy import SecureAggregation  # noqa: E402

from ._homes import HOMES, assert_same_fit, homes  # noqa: E402
from ._sites import SITES, split_frames  # noqa: E402


@pytest.fixture(scope="module")
def diabetes_homes(tmp_path_factory):
    frame = load_diabetes(as_frame=True).frame
    frames = dict(zip(SITES, split_frames(frame, 3, by="bmi")))  # covariate shift
    with homes(tmp_path_factory.mktemp("diabetes"), frames, target="target") as data:
        yield data


@pytest.fixture(scope="module")
def cancer_homes(tmp_path_factory):
    frame = load_breast_cancer(as_frame=True).frame.iloc[:, [0, 1, 2, 3, 4, 5, 30]]
    frame.columns = [c.replace(" ", "_") for c in frame.columns]
    frames = dict(zip(SITES, split_frames(frame, 3, by="mean_radius")))
    with homes(tmp_path_factory.mktemp("cancer"), frames, target="target") as data:
        yield data


REGRESSION = {
    "lasso-newton": lambda: FedLasso(alpha=0.5, solver="newton"),
    "lasso-fedavg": lambda: FedLasso(alpha=0.5, solver="fedavg", max_rounds=30, tol=0),
    "lasso-dualfl": lambda: FedLasso(alpha=0.5, solver="dualfl"),
    "ols-table": lambda: FedLinearRegression(),
    "lasso-secure-newton": lambda: FedLasso(alpha=0.5, privacy=SecureAggregation()),
    "poisson-table": lambda: FedPoissonRegressor(alpha=0.0),  # a positive target
}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", sorted(REGRESSION))
def test_regression_in_every_home(diabetes_homes, name):
    make = REGRESSION[name]
    reference = make().fit(diabetes_homes["in-process"])
    for home in HOMES[1:]:
        assert_same_fit(make().fit(diabetes_homes[home]), reference)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver", ["newton", "scaffold"])
def test_classification_in_every_home(cancer_homes, solver):
    def make():
        return FedLogisticRegression(C=1.0, solver=solver, max_rounds=40)

    reference = make().fit(cancer_homes["in-process"])
    for home in HOMES[1:]:
        fitted = make().fit(cancer_homes[home])
        assert_same_fit(fitted, reference)
        np.testing.assert_array_equal(fitted.classes_, reference.classes_)


def test_the_score_and_held_out_parts_agree_where_the_rows_are_the_same(diabetes_homes):
    """Scores through each home are sums from the sites: the same number."""
    reference = FedLasso(alpha=0.5).fit(diabetes_homes["in-process"])
    score = reference.score(diabetes_homes["in-process"])
    for home in HOMES[1:]:
        assert reference.score(diabetes_homes[home]) == pytest.approx(score, rel=1e-12)
