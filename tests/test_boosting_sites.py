"""Boosted trees through three site services (gRPC over mutual TLS), and the site's rules.

The boosting fit's site functions are operations of the site's table
(``boosting.*``, :mod:`skfed.sites.ensemble_operations`): fitted through three
real services, the regressor and the classifier equal the same fit in this
process on the rows the sites read, node for node. The site refuses a node
of fewer than ``min_rows`` of its rows (and the sibling a subtraction would
give), anything where its policy requires a protection the fit cannot carry,
exact quantiles without ``allow_exact_quantiles``, and every request whose
form is not the declared one, as a modified client would send it (a raw
:class:`~skfed.sites.transport.SiteConnection`); each refusal names its rule
and is in the audit log.
"""

import re

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from skfed.data import FederatedDataset  # noqa: E402
from skfed.data.sources import read_table  # noqa: E402
from skfed.ensemble import (FedHistGradientBoostingClassifier,  # noqa: E402
                            FedHistGradientBoostingRegressor)
from skfed.ensemble._site import pack_nodes  # noqa: E402
from skfed.ensemble._tree import pack_trees  # noqa: E402
from skfed.ensemble._wire import (MAX_NODES_PER_REQUEST, WireError,  # noqa: E402
                                 score_message)
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402

from ._sites import SITES, diabetes_service, services_of, with_site_partitions  # noqa: E402

#: a site that trusts the analyst with single rows' values: exact quantiles, and node
#: histograms in the clear (finer sums by design, allowed by name)
OPEN = ('min_rows = 10\nmin_level_count = 5\nallow_exact_quantiles = true\n'
        'finer_sums = ["boosting.histograms", "fit.risk_sets"]')
PARAMS = dict(max_iter=4, max_depth=3, min_samples_leaf=45, random_state=0,
              early_stopping=False, categorical_features=["ward"])


def _frames():
    """Three hospitals of 200 rows: a continuous feature with missing values, one of
    few distinct values, a categorical ward; a continuous and a binary outcome."""
    rng = np.random.default_rng(11)
    n = 600
    frame = pd.DataFrame({"x1": rng.normal(size=n), "x2": rng.uniform(0, 5, n).round(1),
                          "ward": rng.choice(["a", "b", "c"], n)})
    frame.loc[::13, "x1"] = np.nan
    signal = 2 * np.nan_to_num(frame["x1"]) + np.sin(frame["x2"]) + (frame["ward"] == "b")
    frame["y"] = signal + rng.normal(0, 0.3, n)
    frame["label"] = (signal + rng.normal(0, 1, n) > 0.5).astype(int)
    return [frame.iloc[k::3].reset_index(drop=True) for k in range(3)]


def _as_read(root):
    """The sites' rows as each service reads its file (pandas' CSV parser), pooled in
    site order, with every row's site: the in-process reference sees the same numbers."""
    parts = [read_table(name, root / name / "rows.csv") for name in SITES]
    return pd.concat(parts, ignore_index=True), np.repeat(list(SITES), [len(p) for p in parts])


def _federation(root, target, other):
    """Three services of :func:`_frames` predicting ``target``: ``(remote dataset, X,
    y, each row's site, the services' folder)``, the rows as the sites read them."""
    with services_of(root, _frames(), policy=OPEN, target=target, drop=[other]) as remote:
        pooled, labels = _as_read(root)
        yield remote, pooled.drop(columns=["y", "label"]), pooled[target], labels, root


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    yield from _federation(tmp_path_factory.mktemp("boosting-regression"), "y", "label")


@pytest.fixture(scope="module")
def classification(tmp_path_factory):
    yield from _federation(tmp_path_factory.mktemp("boosting-classification"), "label", "y")


def _assert_same_trees(through, here):
    """Every node of every tree: structure exactly, values to 1e-10."""
    assert len(through._predictors) == len(here._predictors)
    for mine, theirs in zip(through._predictors, here._predictors):
        for a, b in zip(mine, theirs):
            for field in ("feature_idx", "left", "right", "is_leaf", "bin_threshold",
                          "missing_go_to_left", "is_categorical", "count", "depth",
                          "num_threshold"):
                np.testing.assert_array_equal(a.nodes[field], b.nodes[field], err_msg=field)
            np.testing.assert_allclose(a.nodes["value"], b.nodes["value"], rtol=1e-10,
                                       atol=1e-12)
            np.testing.assert_allclose(a.nodes["gain"], b.nodes["gain"], rtol=1e-10,
                                       atol=1e-12)
            np.testing.assert_array_equal(a.binned_left_cat_bitsets,
                                          b.binned_left_cat_bitsets)
    for a, b in zip(through.bin_thresholds_, here.bin_thresholds_):
        np.testing.assert_array_equal(a, b)


def _assert_scored_at_the_sites(through, here, remote, X, y, labels):
    """The pooled and per-site scores (computed at each site: no prediction leaves it)
    equal the in-process model's on the same rows."""
    assert through.score(remote) == pytest.approx(here.score(X, y), rel=1e-12)
    for site in SITES:
        rows = labels == site
        assert through.score(remote.subset([site])) == pytest.approx(
            here.score(X[rows], y[rows]), rel=1e-12)
    with pytest.raises(ValueError, match="not one of the site operations"):
        through.predict(remote)  # per-row predictions are not an operation


@pytest.mark.parametrize("loss", ["squared_error", "absolute_error"])
def test_a_regressor_through_services_equals_in_process(regression, loss):
    remote, X, y, labels, _ = regression
    through = FedHistGradientBoostingRegressor(loss=loss, **PARAMS).fit(remote)
    here = FedHistGradientBoostingRegressor(loss=loss, **PARAMS).fit(X, y, clients=labels)
    _assert_same_trees(through, here)
    np.testing.assert_allclose(through.predict(X), here.predict(X), rtol=1e-10, atol=1e-10)
    _assert_scored_at_the_sites(through, here, remote, X, y, labels)


def test_a_binary_classifier_through_services_equals_in_process(classification):
    remote, X, y, labels, _ = classification
    through = FedHistGradientBoostingClassifier(**PARAMS).fit(remote)
    here = FedHistGradientBoostingClassifier(**PARAMS).fit(X, y, clients=labels)
    _assert_same_trees(through, here)
    np.testing.assert_allclose(through.predict_proba(X), here.predict_proba(X), rtol=1e-10,
                               atol=1e-10)
    np.testing.assert_array_equal(through.predict(X), here.predict(X))
    _assert_scored_at_the_sites(through, here, remote, X, y, labels)


def test_a_node_of_fewer_than_min_rows_is_refused(tmp_path):
    """A deep tree reaches nodes of a few rows of a site: the site refuses, naming the
    rule, and its message does not say how many rows the node holds."""
    with services_of(tmp_path, _frames(), policy=OPEN.replace("10", "60"), target="y",
                     drop=["label"]) as remote:
        with pytest.raises(SiteRefusal, match="fewer than 60 rows here") as info:
            FedHistGradientBoostingRegressor(max_iter=3, min_samples_leaf=5,
                                             categorical_features=["ward"]).fit(remote)
    assert info.value.rule == "min_rows"
    assert set(re.findall(r"\d+", str(info.value))) == {"60"}
    line = read_audit(tmp_path / info.value.site / "audit.jsonl")[-1]
    assert (line["operation"], line["rule"]) == ("boosting.histograms", "min_rows")


def _weighted_frames(dominant=False):
    """:func:`_frames` with a declared weight column ``w`` (with ``dominant``, one row
    of each site holds nearly all of its weight)."""
    rng = np.random.default_rng(5)
    frames = _frames()
    for frame in frames:
        frame["w"] = rng.uniform(0.5, 2.0, len(frame)).round(2)
        if dominant:
            frame.loc[0, "w"] = 1e6
    return frames


@pytest.mark.parametrize("target", ["y", "label"])
def test_a_weighted_fit_through_services_equals_in_process(tmp_path, target):
    """A declared weight column: the site's schema audits its weight sums (and each
    class's) by the dominance rule, as ``data.summary`` does, and the fit through three
    services equals the weighted fit in this process node for node (it was refused:
    the schema's weight sums reached no audit)."""
    other = "label" if target == "y" else "y"
    with services_of(tmp_path, _weighted_frames(), policy=OPEN, declare='weights = ["w"]',
                     target=target, drop=[other], sample_weight="w") as remote:
        pooled, labels = _as_read(tmp_path)
        X, y, w = pooled.drop(columns=["y", "label", "w"]), pooled[target], pooled["w"]
        Model = FedHistGradientBoostingRegressor if target == "y" else \
            FedHistGradientBoostingClassifier
        through = Model(**PARAMS).fit(remote)
        here = Model(**PARAMS).fit(X, y, clients=labels, sample_weight=w)
        unweighted = Model(**PARAMS).fit(X, y, clients=labels)
    _assert_same_trees(through, here)
    assert not np.array_equal(here._predictors[0][0].nodes["value"],
                              unweighted._predictors[0][0].nodes["value"])


def test_a_weight_column_dominated_by_one_row_is_refused(tmp_path):
    """One row holding nearly all of a site's weight: the weight sums are not released
    (the dominance rule), and the refusal is in the site's audit log."""
    with services_of(tmp_path, _weighted_frames(dominant=True), policy=OPEN,
                     declare='weights = ["w"]', target="y", drop=["label"],
                     sample_weight="w") as remote:
        with pytest.raises(SiteRefusal) as info:
            FedHistGradientBoostingRegressor(**PARAMS).fit(remote)
    assert info.value.rule == "dominance"
    line = read_audit(tmp_path / info.value.site / "audit.jsonl")[-1]
    assert (line["operation"], line["rule"]) == ("boosting.schema", "dominance")


MASKED = 'min_rows = 60\nmin_level_count = 5\nallow_exact_quantiles = true\n' \
    'require = ["secure_aggregation"]\nconsortium = ["hospital-a", "hospital-b", "hospital-c"]'


@pytest.fixture(scope="module")
def protected(tmp_path_factory):
    """Three services requiring secure aggregation, ``min_rows = 60``: plain boosting
    is refused, masked boosting served (nodes of fewer rows only inside masked sums)."""
    root = tmp_path_factory.mktemp("boosting-masked")
    with services_of(root, _frames(), policy=MASKED, target="y", drop=["label"]) as remote:
        pooled, labels = _as_read(root)
        yield remote, pooled.drop(columns=["y", "label"]), pooled["y"], labels, root


def test_a_site_requiring_secure_aggregation_refuses_plain_boosting(protected):
    remote, *_, root = protected
    with pytest.raises(SiteRefusal, match="boosting.totals: this site requires secure "
                                          "aggregation") as info:
        FedHistGradientBoostingRegressor(**PARAMS).fit(remote)
    assert info.value.rule == "require"
    line = read_audit(root / info.value.site / "audit.jsonl")[-1]
    assert (line["operation"], line["rule"]) == ("boosting.totals", "require")


@pytest.mark.parametrize("loss", ["squared_error", "quantile"])
def test_masked_boosting_through_services_equals_the_plain_fit_in_process(protected, loss):
    """Every sum masked at the services (their own key pairs, signed keys): the trees
    of the plain fit in process, node for node; nodes of fewer than min_rows rows of a
    site are computed, since they leave it only inside masked sums."""
    from skfed.privacy import SecureAggregation

    remote, X, y, labels, root = protected
    params = dict(PARAMS, min_samples_leaf=5, max_depth=4, loss=loss, quantile=0.3
                  if loss == "quantile" else None, early_stopping=True,
                  validation_fraction=0.25, n_iter_no_change=2)
    through = FedHistGradientBoostingRegressor(**params, privacy=SecureAggregation()).fit(
        remote)
    # the held-out rows: whole partitions each site draws from its own secret
    local = with_site_partitions(FederatedDataset.from_arrays(X, y.to_numpy(), labels),
                                 {name: root / name for name in SITES}, "rows", min_rows=60)
    here = FedHistGradientBoostingRegressor(**params).fit(local)
    _assert_same_trees(through, here)
    np.testing.assert_allclose(through.validation_score_, here.validation_score_,
                               rtol=1e-14)
    assert np.min([t.nodes["count"].min() for it in here._predictors for t in it]) < 60
    assert through.history_.privacy["masked_sums"] > 0
    # scored at the sites from masked sums (their own score sums would be refused)
    assert through.score(remote) == pytest.approx(here.score(X, y), rel=1e-12)
    operations = {line["kind"] for line in read_audit(root / "hospital-b" / "audit.jsonl")}
    assert {"sums.open", "sums.key_list", "sums.masked:boosting.histograms",
            "sums.masked:boosting.bin_counts", "sums.close"} <= operations
    if loss == "quantile":  # the leaves refitted to pooled quantiles, masked too
        assert "sums.masked:boosting.residual_counts" in operations


def _service_regressor_argv(federation):
    """``skfed fit`` of a small regressor through a fixture's three services."""
    remote, *_, root = federation
    certs = root / "certs"
    return ["fit", "--dataset", "rows", "--model", "boosting-regressor", "--target", "y",
            "--drop", "label", "--categorical", "ward", "--max-rounds", "3", "--max-depth",
            "2", "--min-samples-leaf", "30", "--tls-ca-file", str(certs / "ca.pem"),
            "--tls-cert", str(certs / "analyst.pem"), "--tls-key", str(certs / "analyst.key"),
            *(f"--site-service={c.site}={c.address}" for c in remote._backend.connections)]


def test_skfed_fit_secure_aggregation_through_services_requiring_it(protected, capsys):
    """``skfed fit --model boosting --secure-aggregation --site-service ...`` at sites
    requiring it: served masked; without the flag, the refusal says what to do."""
    from skfed.cli.main import main

    argv = _service_regressor_argv(protected)
    assert main(argv) != 0
    assert "serves boosting masked only: --secure-aggregation" in capsys.readouterr().err
    assert main([*argv, "--secure-aggregation"]) == 0
    assert "held-out R2" in capsys.readouterr().out


def test_a_site_requiring_differential_privacy_serves_no_boosting(tmp_path):
    from skfed.privacy import SecureAggregation

    with services_of(tmp_path, _frames(), target="y", drop=["label"],
                     policy='min_rows = 10\nrequire = ["differential_privacy"]') as remote:
        with pytest.raises(SiteRefusal, match="this site requires differential privacy") \
                as info:
            FedHistGradientBoostingRegressor(**PARAMS).fit(remote)
        assert info.value.rule == "require"
        with pytest.raises(SiteRefusal, match="masked sums of an analysis carry no noise"):
            FedHistGradientBoostingRegressor(**PARAMS, privacy=SecureAggregation()).fit(
                remote)


# -- bins from the sites' signed sketches, without exact quantiles ---------------------
SKETCHED = 'min_rows = 10\nmin_level_count = 5\nfiner_sums = ["boosting.histograms"]'


@pytest.fixture(scope="module")
def sketched(tmp_path_factory):
    """Three services that do not allow exact quantiles (``min_rows = 10``)."""
    root = tmp_path_factory.mktemp("boosting-sketch")
    with services_of(root, _frames(), policy=SKETCHED, target="y", drop=["label"]) as remote:
        pooled, labels = _as_read(root)
        yield remote, pooled.drop(columns=["y", "label"]), pooled["y"], labels, root


def test_without_exact_quantiles_the_bins_come_from_the_sites_sketches(sketched):
    """The exact bin search is refused; ``binning=10`` (the sites' min_rows) fits from
    the sites' signed sketches the model fitted in process on the same rows, and
    scikit-learn's on the rows' bin indices; another group size is refused."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from skfed.ensemble._site import bin_features

    remote, X, y, labels, root = sketched
    with pytest.raises(SiteRefusal, match="binning=min_rows bins at the sites' sketches") \
            as info:
        FedHistGradientBoostingRegressor(**PARAMS).fit(remote)
    assert info.value.rule == "allow_exact_quantiles"
    with pytest.raises(SiteRefusal, match="groups of its min_rows = 10 rows: fit with "
                                          "binning=10"):
        FedHistGradientBoostingRegressor(**PARAMS, binning=12).fit(remote)
    through = FedHistGradientBoostingRegressor(**PARAMS, binning=10).fit(remote)
    here = FedHistGradientBoostingRegressor(**PARAMS, binning=10).fit(X, y, clients=labels)
    _assert_same_trees(through, here)
    assert not through.binning_exact_
    codes = bin_features(here._model_input(X), here.bin_thresholds_, here.max_bins)
    codes = codes.astype(np.float64)
    codes[codes == here.max_bins] = np.nan  # missing values: their own bin
    ref = HistGradientBoostingRegressor(
        **{k: v for k, v in PARAMS.items() if k != "categorical_features"},
        categorical_features=[0]).fit(codes, y)
    np.testing.assert_allclose(through.predict(X), ref.predict(codes), rtol=1e-10,
                               atol=1e-10)


def test_a_forged_sketch_or_a_chosen_threshold_is_refused(sketched):
    """A request binned at continuous thresholds must carry every site's sketch as its
    site signed it, and the thresholds those sketches give."""
    remote, X, y, labels, root = sketched
    fitted = FedHistGradientBoostingRegressor(**PARAMS, binning=10).fit(remote)
    message = score_message(fitted)
    conn = remote._backend.connections[0]
    ok = conn.call("boosting.score", dataset=DATASET_ROWS, estimator=message)
    assert ok["w"] == 200.0
    forged = copy_message(message)
    forged["context"]["sketch"]["sites"][1]["means"][0] = \
        forged["context"]["sketch"]["sites"][1]["means"][0] + 0.5
    with pytest.raises(SiteRefusal, match="a forged sketch") as info:
        conn.call("boosting.score", dataset=DATASET_ROWS, estimator=forged)
    assert info.value.rule == "message"
    chosen = copy_message(message)
    j = int(np.flatnonzero(~chosen["context"]["categorical"])[0])
    chosen["context"]["thresholds"][j] = chosen["context"]["thresholds"][j][:-1]
    with pytest.raises(SiteRefusal, match="not the sketches'") as info:
        conn.call("boosting.score", dataset=DATASET_ROWS, estimator=chosen)
    assert info.value.rule == "allow_exact_quantiles"
    alone = copy_message(message)
    alone["context"]["sketch"]["sites"] = alone["context"]["sketch"]["sites"][1:]
    with pytest.raises(SiteRefusal, match="include this site's own"):
        conn.call("boosting.score", dataset=DATASET_ROWS, estimator=alone)


def test_skfed_fit_binning_through_services_without_exact_quantiles(sketched, capsys):
    from skfed.cli.main import main

    argv = _service_regressor_argv(sketched)
    assert main(argv) != 0
    assert "--binning K (the sites' min_rows) bins at their sketches" in capsys.readouterr().err
    assert main([*argv, "--binning", "10"]) == 0
    assert "held-out R2" in capsys.readouterr().out


def copy_message(message):
    import copy

    return copy.deepcopy(message)


DATASET_ROWS = {"name": "rows", "target": "y", "drop": ["label"], "sample_weight": None}


# -- masked sums, as a modified client sends them -------------------------------------
def _open_sum_sessions(remote):
    """A sum session at each of the three services (raw ``sums.open`` calls): ``(the
    connections, their handles, the public keys, their proofs)``."""
    import os

    backend = remote._backend
    session = np.frombuffer(os.urandom(16), dtype=np.uint8)
    replies = [conn.call("sums.open", dataset=backend.dataset, key_session=session, party=j)
               for j, conn in enumerate(backend.connections)]
    keys = {j: r["public_key"] for j, r in enumerate(replies)}
    proofs = {j: {f: r[f] for f in ("signature", "certificate", "site", "weight_sum")}
              for j, r in enumerate(replies)}
    return backend.connections, [r["handle"] for r in replies], keys, proofs


def _histogram_request(X, y, labels):
    """A well-formed ``boosting.histograms`` request (the root node) for these columns."""
    est = FedHistGradientBoostingRegressor(**PARAMS).fit(X, y, clients=labels)
    message = score_message(est)
    nodes = dict(pack_nodes([(0, (), None)], X.shape[1]), with_loss=False)
    return {"context": message["context"], "model": message["model"], "request": nodes}


def _masked(conn, handle, request, exchange, *, parties=(0, 1, 2), coefficient=1.0,
            operation="boosting.histograms"):
    return conn.call("sums.masked", session=handle, operation=operation, args=request,
                     exchange=exchange, parties=list(parties), coefficient=coefficient)


def test_masked_sums_refuse_what_would_single_a_site_out(protected):
    """Before a verified key list, with a key no site signed, at a coefficient other
    than one, over fewer than every verified site, at a replayed exchange, or of an
    operation whose reply is not a sum: each refused, naming its rule, and audited."""
    remote, X, y, labels, root = protected
    conns, handles, keys, proofs = _open_sum_sessions(remote)
    request = _histogram_request(X, y, labels)
    conn, handle = conns[0], handles[0]
    with pytest.raises(SiteRefusal, match="before a verified key list"):
        _masked(conn, handle, request, 1)
    forged = dict(keys)
    forged[2] = _open_sum_sessions(remote)[2][2]  # a real key of another session
    with pytest.raises(SiteRefusal, match="not signed by a site of the federation") as info:
        conn.call("sums.key_list", session=handle, keys=forged, proofs=proofs)
    assert info.value.rule == "require"
    with pytest.raises(SiteRefusal, match="carries no signature"):
        conn.call("sums.key_list", session=handle, keys=keys,
                  proofs={j: p for j, p in proofs.items() if j != 1})
    for c, h in zip(conns, handles):
        assert c.call("sums.key_list", session=h, keys=keys, proofs=proofs) is True
    with pytest.raises(SiteRefusal, match="coefficient"):
        _masked(conn, handle, request, 1, coefficient=3.0)
    with pytest.raises(SiteRefusal, match="every verified site"):
        _masked(conn, handle, request, 2, parties=(0, 1))
    with pytest.raises(SiteRefusal, match="not an operation whose reply a masked sum"):
        _masked(conn, handle, {"request": {}}, 3, operation="boosting.schema")
    with pytest.raises(SiteRefusal, match="not an operation whose reply a masked sum"):
        _masked(conn, handle, {}, 4, operation="stats.describe")
    reply = _masked(conn, handle, request, 5)
    assert reply["masked"].data.dtype == np.uint64
    with pytest.raises(SiteRefusal, match="replayed exchange") as info:
        _masked(conn, handle, request, 5)
    assert info.value.rule == "require"
    line = read_audit(root / "hospital-a" / "audit.jsonl")[-1]
    assert (line["kind"], line["rule"]) == ("sums.masked:boosting.histograms", "require")
    for c, h in zip(conns, handles):
        c.call("sums.close", session=h)
    with pytest.raises(SiteRefusal, match="no such session of masked sums"):
        _masked(conn, handle, request, 6)


def test_the_decoded_masked_histogram_is_the_exact_pooled_one(protected):
    """The three services' masked replies to one root histogram, added and decoded
    from the wire: the pooled histogram of the rows the sites read."""
    from skfed.ensemble._site import site_histograms
    from skfed.privacy.masked_sums import unflatten_total
    from skfed.privacy.secure_aggregation import sum_masked

    remote, X, y, labels, _ = protected
    conns, handles, keys, proofs = _open_sum_sessions(remote)
    for c, h in zip(conns, handles):
        c.call("sums.key_list", session=h, keys=keys, proofs=proofs)
    request = _histogram_request(X, y, labels)
    replies = [_masked(c, h, request, 1) for c, h in zip(conns, handles)]
    layout = [tuple(e) for e in replies[0]["layout"]]
    # the analyst's decoding: the words added modulo 2**64 (range-checked), then the limbs
    total = unflatten_total(sum_masked([r["masked"] for r in replies], 3), layout, 3)
    local = FederatedDataset.from_arrays(X, y.to_numpy(), labels)
    expected = local.map(site_histograms, request["context"], request["model"],
                         request["request"])
    np.testing.assert_array_equal(total["counts"], sum(e["counts"] for e in expected))
    np.testing.assert_array_equal(total["gradients"], sum(e["gradients"] for e in expected))
    # one reply alone is noise: its words decode to no valid sum (refused, not decoded)
    with pytest.raises(ValueError, match="out of range"):
        unflatten_total(replies[0]["masked"].data, layout, 3)


# -- crafted requests, as a modified client sends them --------------------------------
DATASET = {"name": "visits", "target": "target", "drop": [], "sample_weight": None}


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """One service (hospital-a, 120 diabetes rows) allowing exact quantiles, with at most
    1000 trees per request; a valid context and model of the same columns."""
    from sklearn.datasets import load_diabetes

    root = tmp_path_factory.mktemp("boosting-crafted")
    frame = load_diabetes(as_frame=True).frame.iloc[:120]
    est = FedHistGradientBoostingRegressor(max_iter=3, max_depth=2, random_state=0,
                                           categorical_features=["sex"]).fit(
        frame.drop(columns="target"), frame["target"])
    message = score_message(est)
    with diabetes_service(root, OPEN + "\nmax_local_iterations = 1000") as conn:
        yield conn, root, message["context"], message["model"], frame


def _root_nodes(n):
    return dict(pack_nodes([(0, (), None)] * n, 10), with_loss=False)


def _histograms(conn, context, model, nodes):
    return conn.call("boosting.histograms", dataset=DATASET, context=context, model=model,
                     request=nodes)


def test_a_well_formed_request_is_answered(crafted):
    """Every feature's cells at the root hold every row: all 256 of them, or, asked for
    (as a masked sum asks), the cells a row can be in only (its thresholds' bins and the
    missing bin)."""
    from skfed.ensemble._site_rows import kept_bins

    conn, _, context, model, frame = crafted
    reply = _histograms(conn, context, model, _root_nodes(1))
    assert reply["counts"].reshape(10, 256).sum(axis=1).tolist() == [len(frame)] * 10
    kept = _histograms(conn, context, model, dict(_root_nodes(1), kept_cells=True))
    widths = [256 if bins is None else len(bins) for bins in kept_bins(context)]
    assert len(kept["counts"]) == sum(widths) < 10 * 256
    per_feature = np.split(kept["counts"], np.cumsum(widths)[:-1])
    assert [int(c.sum()) for c in per_feature] == [len(frame)] * 10
    np.testing.assert_array_equal(
        kept["counts"], reply["counts"][_kept_cells(context)])


def _kept_cells(context):
    from skfed.ensemble._site_rows import node_cells

    return node_cells(context, np.arange(10))


def _corrupt_context(context, how):
    context = dict(context)
    if how == "extra key":
        context["code"] = "import os"
    elif how == "order":
        context["order"] = np.zeros(10, dtype=np.int64)
    elif how == "thresholds":
        context["thresholds"] = [t[::-1].copy() for t in context["thresholds"]]
    elif how == "categorical codes":  # a categorical feature's bins at chosen values
        context["thresholds"] = [np.array([0.01]) if c else t for t, c in
                                 zip(context["thresholds"], context["categorical"])]
    elif how == "loss":
        context["loss"] = "__import__"
    return context


@pytest.mark.parametrize("how", ["extra key", "order", "thresholds", "categorical codes",
                                 "loss"])
def test_a_malformed_context_is_refused_and_audited(crafted, how):
    conn, root, context, model, _ = crafted
    with pytest.raises(SiteRefusal, match="a malformed boosting request") as info:
        _histograms(conn, _corrupt_context(context, how), model, _root_nodes(1))
    assert info.value.rule == "message"
    line = read_audit(root / "audit.jsonl")[-1]
    assert (line["operation"], line["outcome"], line["rule"]) == (
        "boosting.histograms", "refused", "message")


def test_oversized_and_endless_requests_are_refused_unrun(crafted):
    conn, root, context, model, _ = crafted
    with pytest.raises(SiteRefusal, match=f"more than {MAX_NODES_PER_REQUEST}") as info:
        _histograms(conn, context, model, _root_nodes(MAX_NODES_PER_REQUEST + 1))
    assert info.value.rule == "message"
    looping = {k: v.copy() for k, v in model["trees"].items()}
    looping["right"][0] = 0  # the root's right child is the root: a walk without end
    with pytest.raises(SiteRefusal, match="children after it") as info:
        _histograms(conn, context, {"baseline": model["baseline"], "trees": looping},
                    _root_nodes(1))
    assert info.value.rule == "message"
    stumps = {"start": np.arange(1002, dtype=np.int32), "feature": np.zeros(1001, np.int32),
              "bin": np.zeros(1001, np.uint8), "flags": np.ones(1001, np.uint8),
              "right": np.zeros(1001, np.int32), "value": np.full(1001, 0.1),
              "bitsets": np.zeros((0, 8), np.uint32)}  # 1001 one-leaf trees
    many = {"baseline": model["baseline"], "trees": stumps}
    with pytest.raises(SiteRefusal, match="1001 trees") as info:
        conn.call("boosting.loss", dataset=DATASET, context=context, model=many)
    assert info.value.rule == "max_local_iterations"
    assert read_audit(root / "audit.jsonl")[-1]["rule"] == "max_local_iterations"


def _youngest_apart(context, frame):
    """The context with age cut between its smallest and next value (the site's CSV
    values may differ from these in the last bit: a midpoint is safe)."""
    values = np.unique(frame["age"])
    feature = list(context["order"]).index(list(frame.columns).index("age"))
    thresholds = list(context["thresholds"])
    thresholds[feature] = np.array([(values[0] + values[1]) / 2])
    return dict(context, thresholds=thresholds), feature, int(np.sum(frame["age"] ==
                                                                     values[0]))


def test_a_node_of_a_few_rows_and_its_complement_are_refused(crafted):
    """Asking for the youngest patient's node, or for every patient but the youngest
    (the root's sums minus that node's are the youngest's): both refused, rule min_rows."""
    conn, root, context, model, frame = crafted
    context, age, n_youngest = _youngest_apart(context, frame)
    assert 0 < n_youngest < 10
    for goes_left in (True, False):
        nodes = dict(pack_nodes([(0, ((age, 0, False, False, None, goes_left),), None)], 10),
                     with_loss=False)
        with pytest.raises(SiteRefusal, match="or its sibling") as info:
            _histograms(conn, context, model, nodes)
        assert info.value.rule == "min_rows"
        assert str(n_youngest) not in re.sub(r"fewer than 10", "", str(info.value))
    assert read_audit(root / "audit.jsonl")[-1]["rule"] == "min_rows"


def test_counts_at_the_analysts_values_need_exact_quantiles(tmp_path, crafted):
    """Under the default policy a histogram at continuous thresholds (counts at values
    the analyst chose) and the bin search are refused; bins of categories only are not."""
    _, _, context, model, _ = crafted
    with diabetes_service(tmp_path, "min_rows = 10") as conn:  # the default: no histogram
        with pytest.raises(SiteRefusal, match="finer sums by design") as info:
            _histograms(conn, context, model, _root_nodes(1))
        assert info.value.rule == "finer_sums"
    with diabetes_service(tmp_path / "b", 'min_rows = 10\nfiner_sums = ["boosting.histograms"]'
                          ) as conn:
        with pytest.raises(SiteRefusal, match="thresholds the analyst sends") as info:
            _histograms(conn, context, model, _root_nodes(1))
        assert info.value.rule == "allow_exact_quantiles"
        sampling = {"mode": "all", "features": np.array([1], dtype=np.int32)}
        with pytest.raises(SiteRefusal) as info:
            conn.call("boosting.bin_counts", dataset=DATASET,
                      context=dict(context, thresholds=None), sampling=sampling,
                      probes=np.array([0.0]), starts=np.array([0, 1], dtype=np.int64))
        assert info.value.rule == "allow_exact_quantiles"
        levels_only = dict(context, thresholds=[
            t if c else np.zeros(0) for t, c in zip(context["thresholds"],
                                                    context["categorical"])])
        untouched = {"baseline": model["baseline"], "trees": pack_trees([])}
        reply = _histograms(conn, levels_only, untouched, _root_nodes(1))
        assert reply["counts"].sum() == 120 * 10


# -- the command line -------------------------------------------------------------------
def test_skfed_fit_boosting_through_site_services(classification, capsys):
    """``skfed fit --model boosting-classifier --site-service ...``: each site's held-out
    accuracy, scored at the site, equals the same split and fit in this process."""
    from skfed.cli.main import main
    from skfed.data.steps import split_site

    remote, X, y, labels, root = classification
    certs = root / "certs"
    argv = ["fit", "--dataset", "rows", "--model", "boosting-classifier", "--target", "label",
            "--drop", "y", "--categorical", "ward", "--max-rounds", "4", "--max-depth", "3",
            # leaves of 80 pooled rows: ~27 a site, far above a site's min_rows whatever
            # partitions the sites' secrets hold out (30 left ~10 a site: refused at times)
            "--min-samples-leaf", "80", "--tls-ca-file", str(certs / "ca.pem"),
            "--tls-cert", str(certs / "analyst.pem"), "--tls-key", str(certs / "analyst.key"),
            *(f"--site-service={c.site}={c.address}" for c in remote._backend.connections)]
    page = root / "services.html"
    assert main([*argv, "--report", str(page)]) == 0
    out = capsys.readouterr().out
    assert "held-out accuracy" in out and "training loss per tree" in out
    # the report of the services' fit: each site's score as scored at the site
    text = page.read_text()
    _assert_boosting_page(text, out, SITES)
    assert "local-only and pooled: not fitted" in text
    import importlib.util

    if importlib.util.find_spec("matplotlib"):
        assert '<figure id="figure-loss"><svg' in text
    else:  # the plot extra not installed: the note instead of the figure
        assert "No figure of the loss per tree" in text
    local = with_site_partitions(FederatedDataset.from_arrays(X, y.to_numpy(), labels),
                                 {name: root / name for name in SITES}, "rows")
    here = FedHistGradientBoostingClassifier(
        max_iter=4, max_depth=3, min_samples_leaf=80, random_state=0,
        categorical_features=["ward"]).fit(local.apply(split_site, 0.2, 0, False))
    for site in SITES:
        test = local.apply(split_site, 0.2, 0, True).subset([site])
        line = next(line for line in out.splitlines() if line.strip().startswith(site))
        assert float(line.split()[3]) == pytest.approx(here.score(test), abs=5e-5)
    # a site's policy refusal reaches the command line with what to do about it
    assert main([*argv, "--max-depth", "12", "--min-samples-leaf", "1"]) == 2
    assert "--max-depth, or a larger --min-samples-leaf" in capsys.readouterr().err


def test_skfed_fit_boosting_of_numeric_features_through_site_services(regression, capsys):
    """Numeric features only (no --categorical): the schema request carries a mask of
    False per column (it was None, refused as "the categorical mask must be a 1-D array
    of bool"), and each site's held-out R2 equals the same split and fit here."""
    from skfed.cli.main import main
    from skfed.data.steps import split_site

    remote, X, y, labels, root = regression
    certs = root / "certs"
    argv = ["fit", "--dataset", "rows", "--model", "boosting", "--target", "y",
            # leaves of 80 pooled rows: ~27 per site (the round-robin sites), far above a
            # site's min_rows whatever partitions the sites' secrets hold out
            "--drop", "label", "ward", "--max-rounds", "3", "--max-depth", "2",
            "--min-samples-leaf", "80", "--tls-ca-file", str(certs / "ca.pem"),
            "--tls-cert", str(certs / "analyst.pem"), "--tls-key", str(certs / "analyst.key"),
            *(f"--site-service={c.site}={c.address}" for c in remote._backend.connections)]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "categorical: none" in out and "held-out R2" in out
    local = with_site_partitions(
        FederatedDataset.from_arrays(X.drop(columns="ward"), y.to_numpy(), labels),
        {name: root / name for name in SITES}, "rows")
    here = FedHistGradientBoostingRegressor(
        max_iter=3, max_depth=2, min_samples_leaf=80, random_state=0,
        categorical_features=None).fit(local.apply(split_site, 0.2, 0, False))
    for site in SITES:
        test = local.apply(split_site, 0.2, 0, True).subset([site])
        line = next(line for line in out.splitlines() if line.strip().startswith(site))
        assert float(line.split()[3]) == pytest.approx(here.score(test), abs=5e-5)


def _csv_argv(folder, rounds):
    """``skfed fit`` of boosted trees on one CSV of the three sites' rows (written)."""
    frames = _frames()
    for k, frame in enumerate(frames):
        frame["site"] = SITES[k]
    pd.concat(frames).to_csv(folder / "rows.csv", index=False)
    return ["fit", str(folder / "rows.csv"), "--clients", "site", "--target", "y",
            "--drop", "label", "--model", "boosting", "--categorical", "ward",
            "--max-rounds", str(rounds), "--max-depth", "3"]


def test_skfed_fit_boosting_from_a_csv(tmp_path, capsys):
    """Local files: the federated column equals the pooled one (the same model), and
    --json holds the per-site scores and the training loss after each tree."""
    import json

    from skfed.cli.main import main

    argv = _csv_argv(tmp_path, rounds=6)
    assert main([*argv, "--json", str(tmp_path / "fit.json")]) == 0
    out = capsys.readouterr().out
    assert "FedHistGradientBoostingRegressor" in out and "held-out R2" in out
    numbers = json.loads((tmp_path / "fit.json").read_text())
    for row in numbers["sites"]:
        assert row["federated"] == pytest.approx(row["pooled"], abs=1e-12)
        assert row["local_only"] is not None
    losses = [r["train_loss"] for r in numbers["loss_per_tree"]]
    assert len(losses) == 7 and losses == sorted(losses, reverse=True)
    # --secure-aggregation: every sum masked, the same model (scores to the bit)
    assert main([*argv, "--secure-aggregation", "--json", str(tmp_path / "masked.json")]) == 0
    masked = json.loads((tmp_path / "masked.json").read_text())
    assert [r["federated"] for r in masked["sites"]] == \
        [r["federated"] for r in numbers["sites"]]


def _score_cells(out, sites):
    """Each site's row of the terminal's held-out table as the page's table cells."""
    cells = {}
    for site in [*sites, "overall"]:
        line = next(x for x in out.splitlines() if x.strip().startswith(site + " "))
        values = line.split()[1:]
        if site == "overall":  # no local-only score overall: a blank in the terminal
            values.insert(3, "n/a")
        cells[site] = f'<td class="name">{site}</td>' + "".join(f"<td>{v}</td>"
                                                               for v in values)
    return cells


def _assert_boosting_page(page, out, sites):
    for site, row in _score_cells(out, sites).items():
        assert row in page, site
    assert "<th>federated</th><th>local-only</th><th>pooled</th>" in page
    assert "<h2>Settings</h2>" in page and "<h2>Rounds and traffic</h2>" in page
    assert '<td class="name">setup: schema, totals, bins</td>' in page
    assert "http" not in page  # self-contained


def test_skfed_fit_boosting_html_report(tmp_path, capsys, monkeypatch):
    """--report: the page holds the terminal's held-out scores, the loss per tree as an
    inline figure (and beside the page as SVG and PDF), the settings and the cost;
    without matplotlib it is still written, with a note instead of the figure."""
    pytest.importorskip("matplotlib")
    import sys

    from skfed.cli.main import main

    argv = _csv_argv(tmp_path, rounds=5)
    assert main([*argv, "--report", str(tmp_path / "fit.html")]) == 0
    out = capsys.readouterr().out
    assert f"report written to {tmp_path / 'fit.html'}" in out
    page = (tmp_path / "fit.html").read_text()
    _assert_boosting_page(page, out, SITES)
    assert re.search(r'<figure id="figure-loss"><svg[^>]*>.{1000,}</svg>', page, re.DOTALL)
    assert "loss per tree" in page and '<td class="name">baseline</td>' in page
    assert (tmp_path / "fit-loss.svg").stat().st_size > 1000
    assert (tmp_path / "fit-loss.pdf").read_bytes().startswith(b"%PDF")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # the plot extra not installed
    assert main([*argv, "--report", str(tmp_path / "bare.html")]) == 0
    out = capsys.readouterr().out
    page = (tmp_path / "bare.html").read_text()
    _assert_boosting_page(page, out, SITES)
    assert "<svg" not in page and "No figure of the loss per tree" in page
    assert "pip install 'skfed[plot]'" in page
    assert not (tmp_path / "bare-loss.svg").exists()


# -- the form of every argument, field by field -------------------------------------
_SCALAR_MUTATIONS = {"max_bins": [1, 256, 2.5, "255", True], "loss": ["hinge", 3, None],
                     "quantile": [0.5], "classes": [np.array([0, 1])],
                     "class_weight": [np.ones(1)], "weighted": ["no", 1],
                     "with_loss": [1, "yes", None],
                     "sketch": [{}, "x", {"rows": 10, "sites": []},
                                {"rows": 10, "sites": [{"rows": 10, "means": [],
                                                        "counts": []}]}]}


def _mutations(key, value):
    """Values of ``key`` of another form than ``value``'s (each one invalid)."""
    if key in _SCALAR_MUTATIONS:
        return _SCALAR_MUTATIONS[key]
    if isinstance(value, list):
        return [value[:-1], tuple(value), "x"]
    other = np.float32 if value.dtype != np.float32 else np.int64
    resized = value[:-1] if value.shape[0] else np.zeros((1,) + value.shape[1:], value.dtype)
    return [value.astype(other), resized, value[None], value.tolist()]


def _assert_every_mutation_refused(check, valid):
    check(valid)
    for key, value in valid.items():
        for bad in _mutations(key, value):
            with pytest.raises(WireError):
                check({**valid, key: bad})
        with pytest.raises(WireError, match="lacks its key"):
            check({k: v for k, v in valid.items() if k != key})
    with pytest.raises(WireError, match="takes no key"):
        check({**valid, "extra": 1})


def test_every_field_of_the_wrong_form_is_a_wire_error(crafted):
    """Each key of the context, the model's trees and the nodes, given another dtype,
    length, shape or type, is refused as malformed: never an internal error, never a
    run on it."""
    from skfed.ensemble._wire import check_context, check_model, check_nodes

    _, _, context, model, _ = crafted
    nodes = dict(pack_nodes([(0, (), None), (0, ((2, 3, True, False, None, True),),
                                             np.array([1, 4]))], 10), with_loss=True)
    _assert_every_mutation_refused(lambda c: check_context(c, 10, binned=True), context)
    _assert_every_mutation_refused(lambda t: check_model(
        {"baseline": model["baseline"], "trees": t}, context), model["trees"])
    _assert_every_mutation_refused(lambda n: check_nodes(n, context, with_loss=True), nodes)
    # the optional flag of a histogram request (the cells a row can be in only)
    for flag in (True, False):
        check_nodes({**nodes, "kept_cells": flag}, context, with_loss=True)
    for bad in (1, "yes", None, np.array([True])):
        with pytest.raises(WireError, match="kept_cells"):
            check_nodes({**nodes, "kept_cells": bad}, context, with_loss=True)
    leaves = {k: v for k, v in nodes.items() if k != "with_loss"}
    with pytest.raises(WireError, match="takes no key 'kept_cells'"):
        check_nodes({**leaves, "kept_cells": True}, context, with_loss=False)


def test_a_sketch_of_the_wrong_form_is_a_wire_error(crafted):
    """A context's sketch: each site's groups must be increasing finite means of at
    least the sketch's rows, one array per continuous feature, of the declared dtypes."""
    from skfed.ensemble._wire import check_context

    _, _, context, _, _ = crafted
    n_continuous = int(np.count_nonzero(~context["categorical"]))
    entry = {"rows": 10, "means": [np.array([1.0, 2.0])] * n_continuous,
             "counts": [np.array([10, 12])] * n_continuous}
    check_context(dict(context, sketch={"rows": 10, "sites": [entry]}), 10, binned=True)
    bad_entries = [dict(entry, means=[np.array([2.0, 1.0])] * n_continuous),
                   dict(entry, counts=[np.array([10, 9])] * n_continuous),
                   dict(entry, means=[np.array([1.0, np.nan])] * n_continuous),
                   dict(entry, means=[np.array([1.0, 2.0], dtype=np.float32)] * n_continuous),
                   dict(entry, rows=11), dict(entry, extra=1), dict(entry, site=3),
                   dict(entry, means=entry["means"][1:])]
    for bad in bad_entries:
        with pytest.raises(WireError):
            check_context(dict(context, sketch={"rows": 10, "sites": [bad]}), 10,
                          binned=True)
