"""Cause-specific hazards need no new model (docs/survival.md): ``FedCoxPH`` on the event
indicator ``status == cause``, the other causes censored, equals lifelines' Cox fit of
the same indicator on the pooled rows (scikit-survival's bmt, three sites)."""

import numpy as np
import pandas as pd
import pytest

from skfed.survival import FedCoxPH, survival_target

lifelines = pytest.importorskip("lifelines")
pytest.importorskip("sksurv")


@pytest.mark.parametrize("cause", [1, 2])
def test_a_cause_specific_cox_fit_is_the_pooled_one(cause):
    from sksurv.datasets import load_cgvhd

    X, y = load_cgvhd()
    rows = pd.DataFrame({"ftime": y["ftime"], "status": y["status"],
                         "age": X["age"].astype(float).to_numpy(),
                         "tx_pb": (X["tx"] == "PB").astype(int).to_numpy()})
    event = (rows["status"] == cause).to_numpy()
    site = np.arange(len(rows)) % 3
    fed = FedCoxPH(tol=1e-12).fit(rows[["age", "tx_pb"]],
                                  survival_target(event, rows["ftime"].to_numpy()),
                                  clients=site)
    ref = lifelines.CoxPHFitter().fit(
        rows[["age", "tx_pb"]].assign(T=rows["ftime"], E=event.astype(int)), "T", "E")
    np.testing.assert_allclose(fed.coef_, ref.params_.to_numpy(), rtol=1e-6, atol=1e-8)
    assert 0 < event.sum() < len(rows)  # both causes occur: a real competing-risk split
