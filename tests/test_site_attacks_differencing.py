"""Finding 1 of issue 27, replayed as a curious analyst with a valid certificate would.

Three real ``skfed site serve`` processes, 20 rows each, ``min_rows = 10``. The
attack: for each row k, pick a held-out part that is row k alone (the old rule
drew it from the analyst's seed, the site's public name and n), then
``stats.describe`` on all rows minus ``stats.describe`` on the training part gives
row k. Held-out parts are now whole partitions drawn from the site's secret, and a
part and its rest each hold at least ``min_rows`` rows: every difference of two
answers is a sum over at least ten rows, whatever seeds and sizes the analyst sends.
"""

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from skfed.deploy import make_certificates  # noqa: E402
from skfed.sites import SiteRefusal, SiteServiceError  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.transport import SiteConnection  # noqa: E402

from ._sites import SITES, site_config, start_site, stop_sites  # noqa: E402

N_ROWS, MIN_ROWS = 20, 10


@pytest.fixture(scope="module")
def small_sites(tmp_path_factory):
    """Three services of 20 rows each; both protections are not needed for this attack
    (it runs through descriptive statistics), min_rows = 10."""
    root = tmp_path_factory.mktemp("differencing")
    certs = make_certificates(root / "certs", list(SITES), analysts=["analyst-b"])
    rng = np.random.default_rng(0)
    frames, processes, connections, folders = {}, [], {}, {}
    try:
        for name in SITES:
            folder = root / name
            folder.mkdir()
            frame = pd.DataFrame({"age": rng.normal(60, 10, N_ROWS).round(3),
                                  "bmi": rng.normal(27, 4, N_ROWS).round(3),
                                  "y": rng.normal(size=N_ROWS)})
            frame.to_csv(folder / "visits.csv", index=False)
            config = site_config(folder, name, certs=certs,
                                 datasets={"visits": ("visits.csv", None)},
                                 policy=f"min_rows = {MIN_ROWS}")
            proc, port = start_site(config)
            processes.append(proc)
            frames[name], folders[name] = frame, folder
            connections[name] = SiteConnection(
                name, f"127.0.0.1:{port}", ca_file=certs.ca.cert, cert_file=certs.client.cert,
                key_file=certs.client.key)
        yield {"frames": frames, "connections": connections, "folders": folders}
    finally:
        for conn in connections.values():
            conn.close()
        stop_sites(processes)


def _describe_sum(conn, holdout=None, steps=()):
    """The sum of column ``age`` over the rows a request names (count x mean), as the
    analyst reads it from a raw ``stats.describe`` reply."""
    dataset = {"name": "visits", "target": "y", "drop": [], "sample_weight": None,
               "steps": list(steps)}
    if holdout is not None:
        dataset["holdout"] = holdout
    reply = conn.call("stats.describe", dataset=dataset, columns=["age"], by=None,
                      quantiles=[], min_count=1)
    cell = reply["cells"][(None, "age")]
    return cell["count"], cell["count"] * (cell["mean"] + cell["mean_lo"])


def _attack(conn, frame):
    """The 21-query attack: rows whose value comes back from a difference of two sums."""
    count, total = _describe_sum(conn)
    recovered = []
    for seed in range(20):  # the old rule: a test part of one row for test_size=0.05
        try:
            n_train, train = _describe_sum(conn, {"test_size": 0.05, "seed": seed,
                                                 "part": "train"})
        except (SiteRefusal, SiteServiceError):
            continue
        if count - n_train == 1:
            recovered.append(total - train)
    return [value for value in recovered
            if np.any(np.isclose(value, frame["age"], rtol=0, atol=1e-6))]


def test_differencing_through_held_out_parts_recovers_no_row(small_sites):
    for name, conn in small_sites["connections"].items():
        assert _attack(conn, small_sites["frames"][name]) == []


def test_every_held_out_part_and_its_rest_hold_min_rows(small_sites):
    """Whatever test size and seed a modified client sends, the training part and the
    part left out each hold at least min_rows rows (or the site refuses)."""
    conn = small_sites["connections"]["hospital-a"]
    count, total = _describe_sum(conn)
    differences = set()
    for test_size in (0.01, 0.05, 0.3, 0.5, 0.9, 0.99):
        for seed in range(8):
            for part in ("train", "test"):
                n, value = _describe_sum(conn, {"test_size": test_size, "seed": seed,
                                                "part": part})
                assert MIN_ROWS <= n <= count - MIN_ROWS
                differences.add(round(total - value, 6))
    # 20 rows and min_rows 10: two partitions of ten rows, so two parts at the most
    assert len(differences) <= 2


def test_a_filter_leaving_out_a_few_rows_is_refused(small_sites):
    """A declared row step that drops a few rows (here a held-out part as a step, the
    command line's split) is a part whose rest is too small: refused and audited."""
    conn = small_sites["connections"]["hospital-b"]
    step = {"step": "split", "args": {"test_size": 0.05, "seed": 3, "held_out": False}}
    n, _ = _describe_sum(conn, steps=[step])
    assert n == MIN_ROWS  # one whole partition held out, never a single row
    audit = read_audit(small_sites["folders"]["hospital-b"] / "audit.jsonl")
    assert audit[-1]["outcome"] == "ok"


def test_too_few_rows_for_two_parts_is_refused(tmp_path):
    from skfed.data.site import SiteData, SitePartitions, held_out_mask
    from skfed.data.site import SiteError

    partitions = SitePartitions.draw(b"\x01" * 32, 15, 10)  # 15 rows cannot give 10 + 10
    site = SiteData("a", np.zeros((15, 1)), meta={"row_ids": np.arange(15),
                                                 "partitions": partitions})
    with pytest.raises(SiteError, match="too few rows to hold out a part of at least 10"):
        held_out_mask(site, 0.5, 0)


def test_partitions_are_fixed_and_balanced():
    from skfed.data.site import SitePartitions

    a = SitePartitions.draw(b"\x02" * 32, 95, 10)
    assert a.count == 9 and np.bincount(a.of_row).min() >= 10
    assert np.array_equal(a.of_row, SitePartitions.draw(b"\x02" * 32, 95, 10).of_row)
    assert not np.array_equal(a.of_row, SitePartitions.draw(b"\x03" * 32, 95, 10).of_row)

