"""A FederatedDataset knows its target's column name (``from_sites(target=...)``,
``from_sources``, a named pandas target), and the results tables of the models fitted
on it print the response's real name instead of a generic "y": FedMixedLM and
FedMixedGLM ("Dependent Variable:"), FedGEE, FedOrderedModel and FedMNLogit ("Dep.
Variable:" and MNLogit's parameter names); in process, on Dask and at site services."""

import numpy as np
import pandas as pd

from skfed import FederatedDataset
from skfed.discrete import FedMNLogit, FedOrderedModel
from skfed.gee import FedGEE
from skfed.mixed import FedMixedGLM, FedMixedLM

from ._homes import HOMES, homes
from .test_mixed_glmm_sites import _frames


def _pooled():
    frames = _frames()
    pooled = pd.concat(frames.values(), ignore_index=True)
    return pooled, np.repeat(list(frames), [len(f) for f in frames.values()])


def test_the_dataset_carries_its_targets_name():
    pooled, site = _pooled()
    X = pooled.drop(columns="count")
    assert FederatedDataset.from_arrays(X, pooled["count"], site).target_name == "count"
    assert FederatedDataset.from_arrays(X, pooled["count"].to_numpy(), site).target_name \
        is None
    assert FederatedDataset.from_arrays(X, pooled[["count", "x"]], site).target_name == \
        ["count", "x"]
    assert FederatedDataset.from_arrays(X, None, site).target_name is None
    data = FederatedDataset.from_arrays(X, pooled["count"], site)
    train, test = data.holdout(0.2)
    assert train.target_name == test.target_name == "count"
    assert data.drop_incomplete().target_name == "count"


def test_mixed_summaries_name_the_response_in_process():
    pooled, site = _pooled()
    data = FederatedDataset.from_arrays(pooled.drop(columns="count"), pooled["count"], site)
    lmm = FedMixedLM().fit(data, groups="herd")
    assert "Dependent Variable: count" in str(lmm.summary())
    glmm = FedMixedGLM("poisson").fit(data, groups="herd")
    assert "Dependent Variable: count" in str(glmm.summary())
    # arrays without a name: statsmodels' generic "y", as before
    plain = FederatedDataset.from_arrays(pooled.drop(columns="count"),
                                         pooled["count"].to_numpy(), site)
    assert "Dependent Variable: y" in str(FedMixedLM().fit(plain, groups="herd").summary())


def test_gee_and_discrete_models_name_the_response():
    pooled, site = _pooled()
    pooled = pooled.assign(level=np.minimum(pooled["count"] // 4, 2))
    X = pooled[["x"]]
    data = FederatedDataset.from_arrays(pooled[["x", "herd"]], pooled["count"], site)
    gee = FedGEE(family="poisson").fit(data, groups="herd")
    assert gee.results_.endog_name == "count"
    levels = FederatedDataset.from_arrays(X, pooled["level"], site)
    ordinal = FedOrderedModel().fit(levels)
    assert ordinal.endog_name_ == "level"
    assert "level" in str(ordinal.summary())
    mnlogit = FedMNLogit().fit(levels)
    assert mnlogit.param_names_[0].endswith("[level=1]")


def test_the_response_named_in_every_home(tmp_path):
    fits = {}
    with homes(tmp_path, _frames(), target="count") as data:
        for home in HOMES:
            assert data[home].target_name == "count"
            assert data[home].drop_incomplete().target_name == "count"
            fits[home] = (FedMixedLM().fit(data[home], groups="herd"),
                          FedMixedGLM("poisson").fit(data[home], groups="herd"))
    for home in HOMES:
        for est in fits[home]:
            assert "Dependent Variable: count" in str(est.summary()), home
            assert est.results_.endog_name == "count"
        np.testing.assert_allclose(fits[home][0].results_.fe_params,
                                   fits["in-process"][0].results_.fe_params, rtol=1e-10)
