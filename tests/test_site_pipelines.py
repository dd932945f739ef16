"""Pipelines of skfed's steps, their cross-validation over sites and complete-case rows,
through three site services (gRPC over mutual TLS), equal to the same in process."""

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.pipeline import make_pipeline

from skfed import FedLogisticRegression, FederatedDataset
from skfed.model_selection import cross_validate_sites, site_scores
from skfed.preprocessing import FedSimpleImputer, FedStandardScaler

from ._sites import SITES, services_of

pytest.importorskip("grpc")


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """Three services of breast-cancer rows (two of their columns with gaps) and the same
    rows in process."""
    frame = load_breast_cancer(as_frame=True).frame.iloc[:, [0, 1, 2, 3, -1]]
    frame.columns = ["radius", "texture", "perimeter", "area", "target"]
    frame.loc[frame.index[::13], "texture"] = np.nan
    frame.loc[frame.index[5::17], "area"] = np.nan
    parts = [frame.iloc[k::3] for k in range(len(SITES))]
    rows = pd.concat(parts)
    sites = np.repeat(list(SITES), [len(p) for p in parts])
    local = FederatedDataset.from_arrays(rows.drop(columns="target"), rows["target"].to_numpy(),
                                         sites)
    with services_of(tmp_path_factory.mktemp("pipelines"), parts, target="target") as remote:
        yield remote, local, rows, sites


def _pipeline():
    return make_pipeline(FedSimpleImputer(strategy="mean"), FedStandardScaler(),
                         FedLogisticRegression(C=np.inf, tol=1e-10))


def test_a_pipeline_fits_through_services_as_in_process(federation):
    remote, local, _, _ = federation
    through = _pipeline().fit(remote)
    here = _pipeline().fit(local)
    np.testing.assert_allclose(through[-1].coef_, here[-1].coef_, rtol=1e-9)
    np.testing.assert_allclose(through[0].statistics_, here[0].statistics_, rtol=1e-12)


def test_a_pipeline_is_scored_and_cross_validated_at_the_sites(federation):
    remote, local, _, _ = federation
    fitted = _pipeline().fit(local)
    pooled, per_site = site_scores(fitted, remote)
    pooled_here, per_site_here = site_scores(fitted, local)
    assert pooled == pytest.approx(pooled_here, abs=1e-12)
    assert per_site == pytest.approx(per_site_here, abs=1e-12)
    through = cross_validate_sites(_pipeline(), remote)
    here = cross_validate_sites(_pipeline(), local)
    np.testing.assert_allclose(through["test_score"], here["test_score"], atol=1e-9)
    assert through["test_sites"] == [[s] for s in SITES]


def test_a_pipeline_step_that_cannot_run_at_a_site_is_named(federation):
    from sklearn.preprocessing import StandardScaler

    remote, _, rows, _ = federation
    complete = rows.dropna()
    fitted = make_pipeline(StandardScaler(), FedLogisticRegression(C=np.inf))
    fitted.fit(complete.drop(columns="target"), complete["target"])
    with pytest.raises(TypeError, match="step 'standardscaler' \\(StandardScaler\\)"):
        site_scores(fitted, remote)


def test_complete_cases_at_each_site(federation):
    remote, local, rows, sites = federation
    complete = rows.notna().all(axis=1).to_numpy()
    through = FedLogisticRegression(C=np.inf, tol=1e-10).fit(remote.drop_incomplete())
    here = FedLogisticRegression(C=np.inf, tol=1e-10).fit(
        rows[complete].drop(columns="target"), rows["target"][complete], clients=sites[complete])
    np.testing.assert_allclose(through.coef_, here.coef_, rtol=1e-9)
    assert remote.drop_incomplete().n_samples.sum() == complete.sum()
    # keeping the rows with a missing feature (for an imputer): only rows without a
    # target go, and here every row has one
    assert remote.drop_incomplete(features=False).n_samples.sum() == len(rows)
