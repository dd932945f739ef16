"""Finding 6 of issue 27: analyst-chosen work is bounded by the site's policy.

A modified client sends ``evaluate.local_baseline`` with ``max_rounds=10**9`` and
``tol=0`` (today about 32 hours of the site's time), or a solver with a huge number of
local steps; the site refuses before any work, names the rule, and audits it.
"""

import time

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")


from skfed import FedLasso  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.host import check_work  # noqa: E402
from skfed.sites.policy import Refused  # noqa: E402
from skfed.solvers import FedAvg  # noqa: E402

from ._sites import diabetes_service  # noqa: E402

DATASET = {"name": "visits", "target": "target", "drop": [], "sample_weight": None}


@pytest.fixture
def site(tmp_path):
    with diabetes_service(tmp_path, "max_local_iterations = 2000") as conn:
        yield conn, tmp_path


def _local_baseline(conn, estimator):
    return conn.call("evaluate.local_baseline", dataset=DATASET, estimator=estimator,
                     test_size=0.25, seed=0, classifier=False, scale=True, indicators=[])


def test_an_unbounded_local_fit_is_refused_before_any_work(site):
    conn, folder = site
    started = time.monotonic()
    with pytest.raises(SiteRefusal, match="more than this site's 2000 iterations") as info:
        _local_baseline(conn, FedLasso(alpha=1.0, max_rounds=10 ** 9, tol=0.0))
    assert time.monotonic() - started < 10  # refused, not run for hours
    assert info.value.rule == "max_local_iterations"
    line = read_audit(folder / "audit.jsonl")[-1]
    assert line["outcome"] == "refused" and line["rule"] == "max_local_iterations"
    # within the bound, the same request is answered
    assert np.isfinite(_local_baseline(conn, FedLasso(alpha=1.0, max_rounds=500)))


def test_a_solver_nested_in_a_message_is_bounded_too():
    with pytest.raises(Refused, match="local_steps"):
        check_work({"solver": [FedAvg(local_steps=10 ** 7)]}, 10000)
    check_work({"solver": [FedAvg(local_steps=10)]}, 10000)


def test_a_fit_step_solver_asking_too_many_local_steps_is_refused(site):
    """The solver of a fit's step travels as its own encoded blob: the bound holds there
    too (FedAvg with 5,000 local steps, where the site allows 2,000)."""
    from skfed import FederatedDataset
    from skfed.data.sources import describe
    from skfed.sites.remote import SiteServices

    conn, folder = site
    backend = SiteServices([conn], dict(DATASET), owns=False)
    data = FederatedDataset(backend, backend.map(describe, ()))
    with pytest.raises(SiteRefusal, match="local_steps") as info:
        FedLasso(alpha=1.0, solver=FedAvg(local_steps=5000), max_rounds=3).fit(data)
    assert info.value.rule == "max_local_iterations"
    refused = [line for line in read_audit(folder / "audit.jsonl")
               if line["outcome"] == "refused"]
    assert refused[-1]["operation"] == "fit.step"
    assert refused[-1]["rule"] == "max_local_iterations"
