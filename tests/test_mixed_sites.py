"""Mixed models through three site services (gRPC over mutual TLS): the group sums and
the GLMM's per-group terms are operations of the site's table, each group at least the
site's min_rows; the fits equal the same models on the same rows in this process."""

import numpy as np
import pandas as pd
import pytest

from skfed.mixed import FedMixedGLM, FedMixedLM

from ._sites import SITES, services_of

pytest.importorskip("grpc")


def _frames(rows_per_patient=30):
    """Patients nested in three hospitals of different sizes: a continuous and a binary
    outcome with a random intercept per patient (30 rows each by default: each patient's
    sums, a random slope's sum of squares among them, pass the sites' dominance rule)."""
    rng = np.random.default_rng(7)
    frames = []
    for k, n_patients in enumerate((6, 9, 12)):
        patient = np.repeat([f"{SITES[k]}-{i}" for i in range(n_patients)], rows_per_patient)
        u = np.repeat(rng.normal(0, 0.8, n_patients), rows_per_patient)
        x = rng.normal(size=patient.size)
        frames.append(pd.DataFrame({
            "patient": patient, "x": x,
            "y": 1.0 + 0.5 * x + u + rng.normal(0, 0.5, patient.size),
            "event": (rng.random(patient.size) < 1 / (1 + np.exp(-(x + u)))).astype(int)}))
    return frames


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    frames = _frames()
    pooled = pd.concat(frames, ignore_index=True)
    labels = np.repeat(list(SITES), [len(f) for f in frames])
    with services_of(tmp_path_factory.mktemp("mixed"), frames, target="y",
                     drop=["event"]) as remote:
        yield remote, pooled, labels


def test_a_linear_mixed_model_through_services_equals_in_process(federation):
    remote, pooled, labels = federation
    through = FedMixedLM(re_columns=["x"]).fit(remote, groups="patient")
    here = FedMixedLM(re_columns=["x"]).fit(pooled[["patient", "x"]], pooled["y"],
                                              clients=labels, groups="patient")
    np.testing.assert_allclose(through.results_.fe_params, here.results_.fe_params,
                               rtol=1e-9)
    np.testing.assert_allclose(through.results_.bse_fe, here.results_.bse_fe, rtol=1e-7)
    assert through.results_.llf == pytest.approx(here.results_.llf, rel=1e-10)


def test_groups_smaller_than_the_sites_min_rows_are_refused(tmp_path):
    from skfed.sites import SiteRefusal

    frames = _frames(rows_per_patient=6)
    with services_of(tmp_path, frames, target="y", drop=["event"]) as remote:
        # the site's min_rows (10) raises the analyst's smallest group (2); the refusal
        # names the column, never a group's label or its count
        with pytest.raises(SiteRefusal, match="a group of column 'patient' holds fewer "
                                              "than 10 rows") as info:
            FedMixedLM().fit(remote, groups="patient")
        assert info.value.rule == "min_rows"
        assert "6" not in str(info.value) and "hospital-a-" not in str(info.value)


def test_a_glmm_through_services_equals_in_process(tmp_path):
    frames = _frames()
    pooled = pd.concat(frames, ignore_index=True)
    labels = np.repeat(list(SITES), [len(f) for f in frames])
    with services_of(tmp_path, frames, target="event", drop=["y"]) as remote:
        through = FedMixedGLM(family="binomial").fit(remote, groups="patient")
    here = FedMixedGLM(family="binomial").fit(pooled[["patient", "x"]], pooled["event"],
                                              clients=labels, groups="patient")
    np.testing.assert_allclose(through.results_.fe_params, here.results_.fe_params,
                               rtol=1e-8)
    assert through.results_.sigma == pytest.approx(here.results_.sigma, rel=1e-8)
    assert through.results_.llf == pytest.approx(here.results_.llf, rel=1e-10)
