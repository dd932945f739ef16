"""A formula on rows resident on Dask workers (each site's CSV read by its own worker)
gives the fit of the same rows in this process: the site functions (complete rows,
levels, extremes, the quantiles' counts, the design) run where the rows are."""

import numpy as np
import pandas as pd
import pytest

from skfed import FederatedDataset
from skfed.formula import glm

distributed = pytest.importorskip("distributed")


def test_resident_rows_give_the_in_process_fit(tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    frame = pd.DataFrame({"age": rng.normal(60, 10, n), "sex": rng.choice(["F", "M"], n),
                          "x": rng.normal(size=n)})
    frame["y"] = (rng.random(n) < 1 / (1 + np.exp(-(frame["x"] + (frame["sex"] == "M"))))
                  ).astype(int)
    frame.loc[rng.random(n) < 0.05, "sex"] = None
    names = ["north", "south"]
    site = np.where(frame["age"] < 60, "north", "south")
    for name in names:
        frame[site == name].to_csv(tmp_path / f"{name}.csv", index=False)
    # the rows as the workers read them (each number the float nearest its text)
    pooled = pd.concat([pd.read_csv(tmp_path / f"{n}.csv", float_precision="round_trip")
                        for n in names], ignore_index=True)
    labels = np.repeat(names, [int(np.sum(site == n)) for n in names])
    formula = "y ~ C(sex) + bs(x, df=4) + np.log(age)"
    local = glm(formula, pooled, family="binomial", clients=labels)
    workers = {n: {"cls": distributed.Worker, "options": {"name": n, "nthreads": 1}}
               for n in names}
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": ":0"}}
    with distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster, \
            distributed.Client(cluster) as client:
        with FederatedDataset.from_sources({n: str(tmp_path / f"{n}.csv") for n in names},
                                           client=client) as resident:
            remote = glm(formula, resident, family="binomial")
    assert remote.param_names == local.param_names
    np.testing.assert_allclose(remote.params, local.params, rtol=1e-12)
    np.testing.assert_allclose(remote.bse, local.bse, rtol=1e-12)
    assert remote.rows_by_site.tolist() == local.rows_by_site.tolist()
