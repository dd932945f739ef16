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


def test_a_glm_with_offsets_is_scored_at_the_sites_as_in_process(tmp_path):
    """A log-link GLM's held-out score at a site uses its link and the site's own
    offsets (the family travels with the model), as the same score in process."""
    from skfed import FedPoissonRegressor

    rng = np.random.default_rng(2)
    frames = []
    for k in range(len(SITES)):
        n = 120
        x = rng.normal(size=n) + 0.5 * k
        years = rng.uniform(0.5, 3.0, n)
        frames.append(pd.DataFrame({"x": x, "log_years": np.log(years),
                                    "cases": rng.poisson(years * np.exp(0.3 + 0.4 * x))}))
    rows = pd.concat(frames, ignore_index=True)
    sites = np.repeat(list(SITES), [len(f) for f in frames])
    local = FederatedDataset.from_arrays(rows[["x"]], rows["cases"].to_numpy(), sites,
                                         offset=rows["log_years"].to_numpy())
    model = FedPoissonRegressor(alpha=0, tol=1e-10).fit(local)
    here, here_by_site = site_scores(model, local)
    with services_of(tmp_path, frames, target="cases", offset="log_years") as remote:
        through, through_by_site = site_scores(model, remote)
    assert through == pytest.approx(here, abs=1e-12)
    assert through_by_site == pytest.approx(here_by_site, abs=1e-12)
    assert 0 < through < 1  # not the identity link's R2 (far below 0 here)
