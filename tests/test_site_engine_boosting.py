"""Boosting through a site service whose dataset is on an engine (Parquet partitions on
a local Dask cluster): the trees bit for bit the in-memory site's on the same rows.

Two federations of two services, ``other`` (in memory) and ``same``: once ``same``
reads its rows into its process, once the same rows (the same name, certificate and
partition secret) are Parquet partitions on an engine, one of them a single row. Every
field of every node, the bin thresholds, the baseline and the scores are compared
exactly. The rules a boosting check counts rows for (a node's and its sibling's
``min_rows``, a level's ``min_level_count``) are decided on the whole dataset; the
fit's state is kept per partition on the workers under the site's caps; the sketch
(a sort) is refused naming the reason; masked boosting on 1 and 3 partitions gives the
in-memory site's trees.
"""

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")
pytest.importorskip("grpc")

from skfed.ensemble import (FedHistGradientBoostingClassifier,  # noqa: E402
                            FedHistGradientBoostingRegressor)
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.policy import load_config  # noqa: E402

from ._sites import site_config  # noqa: E402

OPEN = ('min_rows = 10\nmin_level_count = 5\nallow_exact_quantiles = true\n'
        'finer_sums = ["boosting.histograms"]')
PARAMS = dict(max_iter=4, max_depth=3, min_samples_leaf=45, random_state=0,
              early_stopping=False, categorical_features=["ward"])
#: the engine's partitions of ``same``'s 500 rows: ragged, one of a single row
RAGGED = [150, 1, 249, 100]


def _frame(n=900, seed=11):
    """A continuous feature with missing values, one of few distinct values, a
    categorical ward (one level of 9 rows, spread over partitions); a continuous and a
    binary outcome."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"x1": rng.normal(size=n), "x2": rng.uniform(0, 5, n).round(1),
                          "ward": rng.choice(["a", "b", "c"], n)})
    frame.loc[::13, "x1"] = np.nan
    # 9 rows of ``same`` (rows 400-899), fewer than 5 in each of its partitions (RAGGED)
    frame.loc[[420, 470, 520, 550, 600, 650, 700, 820, 860], "ward"] = "rare"
    signal = 2 * np.nan_to_num(frame["x1"]) + np.sin(frame["x2"]) + (frame["ward"] == "b")
    frame["y"] = signal + rng.normal(0, 0.3, n)
    frame["label"] = (signal + rng.normal(0, 1, n) > 0.5).astype(int)
    return frame


def _site(folder, name, frame, certs, sizes=None, policy=OPEN):
    """A site's configuration: its rows in one Parquet file read into the service, or
    (``sizes``) Parquet partitions on a local Dask cluster."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "partition-secrets.json").write_text(json.dumps({"rows": "cd" * 32}))
    if sizes is None:
        frame.to_parquet(folder / "rows.parquet")
        path, declare = "rows.parquet", ""
    else:
        (folder / "parts").mkdir(exist_ok=True)
        cuts = np.cumsum([0, *sizes])
        for k in range(len(sizes)):
            frame.iloc[cuts[k]:cuts[k + 1]].to_parquet(folder / "parts" / f"p{k:03d}.parquet")
        path, declare = "parts/*.parquet", 'engine = "dask"\nscheduler = "local"'
    return load_config(site_config(folder, name, certs=certs, datasets={"rows": (path, None)},
                                   policy=policy, declare=declare))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    from skfed.deploy import make_certificates

    return make_certificates(tmp_path_factory.mktemp("boost-engine-certs"), ["other", "same"])


def _servers(root, certs, homes, policy=OPEN):
    """``{home: SiteServer}``: ``other``, and ``same`` once per home (``None``: in
    memory; a list: the engine's partition sizes)."""
    from skfed.sites.transport import SiteServer

    frame = _frame()
    first, second = frame.iloc[:400], frame.iloc[400:].reset_index(drop=True)
    servers = {"other": SiteServer(_site(root / "other", "other", first, certs,
                                         policy=policy))}
    for home, sizes in homes.items():
        servers[home] = SiteServer(_site(root / home, "same", second, certs, sizes, policy))
    for server in servers.values():
        server.start()
    return servers, frame


@pytest.fixture(scope="module")
def services(tmp_path_factory, certs):
    servers, frame = _servers(tmp_path_factory.mktemp("boost-engine"), certs,
                              {"memory": None, "engine": RAGGED})
    yield servers, frame
    for server in servers.values():
        server.stop()


def _data(servers, certs, home, target, drop):
    from skfed import FederatedDataset

    return FederatedDataset.from_sites(
        {"other": f"127.0.0.1:{servers['other'].port}",
         "same": f"127.0.0.1:{servers[home].port}"}, dataset="rows", target=target,
        drop=drop, ca_file=certs.ca.cert, cert_file=certs.client.cert,
        key_file=certs.client.key)


def _fit_each(servers, certs, make, target, drop, homes=("memory", "engine")):
    fits = {}
    for home in homes:
        data = _data(servers, certs, home, target, drop)
        try:
            est = make().fit(data)
            est.score_ = est.score(data)  # at the sites: their sums only
            fits[home] = est
        finally:
            data.close()
    return [fits[home] for home in homes]


def assert_same_trees(a, b):
    """Every field of every node of every tree, the bins, the baseline, the losses: the
    same bits; the score to round-off."""
    assert len(a._predictors) == len(b._predictors)
    for mine, theirs in zip(a._predictors, b._predictors):
        for x, y in zip(mine, theirs):
            for field in x.nodes.dtype.names:
                np.testing.assert_array_equal(x.nodes[field], y.nodes[field], err_msg=field)
            np.testing.assert_array_equal(x.binned_left_cat_bitsets,
                                          y.binned_left_cat_bitsets)
    for s, t in zip(a.bin_thresholds_, b.bin_thresholds_):
        np.testing.assert_array_equal(s, t)
    np.testing.assert_array_equal(a._baseline_prediction, b._baseline_prediction)
    # the losses are numpy's pairwise sums (summed over the partitions as numpy sums
    # them); the score's sums are BLAS dot products: to round-off
    np.testing.assert_array_equal(a.train_score_, b.train_score_)
    np.testing.assert_array_equal(a.validation_score_, b.validation_score_)
    assert a.score_ == pytest.approx(b.score_, rel=1e-12, abs=0)


@pytest.mark.parametrize("loss", ["squared_error", "absolute_error"])
def test_a_regressor_on_an_engine_equals_the_in_memory_site(services, certs, loss):
    servers, frame = services
    memory, engine = _fit_each(servers, certs, lambda: FedHistGradientBoostingRegressor(
        loss=loss, **PARAMS), "y", ["label"])
    assert_same_trees(memory, engine)
    # and the in-memory site's model is scikit-learn's on the pooled rows (the fit in
    # this process on them is, node for node: tests/test_boosting_sites.py)
    X = frame.drop(columns=["y", "label"])
    here = FedHistGradientBoostingRegressor(loss=loss, **PARAMS).fit(
        X, frame["y"], clients=np.repeat(["other", "same"], [400, 500]))
    np.testing.assert_array_equal(engine.predict(X), here.predict(X))


def test_a_classifier_with_early_stopping_on_an_engine(services, certs):
    """The validation rows are held out by the global row index (whole partitions of
    the site's secret), as the in-memory site holds them out."""
    servers, _ = services
    memory, engine = _fit_each(servers, certs, lambda: FedHistGradientBoostingClassifier(
        **dict(PARAMS, early_stopping=True, max_iter=6, validation_fraction=0.2,
               categorical_features=None)), "label", ["y", "ward"])
    assert len(memory.validation_score_) > 1
    assert_same_trees(memory, engine)


def test_the_binning_draw_picks_the_same_rows(services, certs, monkeypatch):
    """Above the subsample size (200,000 rows; 300 here) scikit-learn's draw picks rows
    by their index over the pooled rows: a partition finds its own by its place among
    the site's rows, so the thresholds are the in-memory site's."""
    import skfed.ensemble._fit as fit_module

    servers, _ = services
    monkeypatch.setattr(fit_module, "SUBSAMPLE", 300)
    memory, engine = _fit_each(servers, certs, lambda: FedHistGradientBoostingRegressor(
        **PARAMS), "y", ["label"])
    monkeypatch.undo()
    plain, = _fit_each(servers, certs, lambda: FedHistGradientBoostingRegressor(**PARAMS),
                       "y", ["label"], homes=("memory",))
    assert any(not np.array_equal(s, t)  # the draw was used
               for s, t in zip(memory.bin_thresholds_, plain.bin_thresholds_))
    assert_same_trees(memory, engine)


def test_the_state_is_kept_per_partition_on_the_workers(services, certs):
    """After a fit, the engine's partitions each hold their part of the fit's state
    (their binned rows and raw predictions), beside the rows kept on the worker."""
    from skfed.ensemble._fit_state import STORE

    servers, _ = services
    before = set(STORE.states)
    _fit_each(servers, certs, lambda: FedHistGradientBoostingRegressor(**PARAMS), "y",
              ["label"], homes=("engine",))
    new = [STORE.states[k] for k in set(STORE.states) - before]
    sizes = sorted(s["prepared"].binned.shape[0] for s in new if "prepared" in s)
    assert sorted(RAGGED) == [n for n in sizes if n != 400]  # ``other``: 400 in memory


def _refusal(servers, certs, home, make, target="y", drop=("label",)):
    data = _data(servers, certs, home, target, list(drop))
    try:
        with pytest.raises(SiteRefusal) as info:
            make().fit(data)
    finally:
        data.close()
    return info.value


def test_min_rows_of_a_node_decided_on_the_whole_dataset(services, certs):
    """A node of fewer than min_rows of the dataset's rows is refused as in memory; a
    node a partition holds only a few rows of is not (the one-row partition holds one
    row of every node it is in)."""
    servers, _ = services
    refused = [_refusal(servers, certs, home, lambda: FedHistGradientBoostingRegressor(
        max_iter=2, max_depth=6, min_samples_leaf=2, categorical_features=["ward"],
        early_stopping=False)) for home in ("memory", "engine")]
    assert [r.rule for r in refused] == ["min_rows", "min_rows"]
    assert all("fewer than 10 rows here" in str(r) for r in refused)


def test_min_level_count_decided_on_the_whole_dataset(tmp_path, certs):
    """The ward level held by 9 rows of ``same`` (in four partitions, fewer than 5 in
    each) passes min_level_count = 5 on the engine as in memory; at 10 it is refused by
    both."""
    servers, _ = _servers(tmp_path / "a", certs, {"memory": None, "engine": RAGGED})
    try:
        memory, engine = _fit_each(servers, certs, lambda: FedHistGradientBoostingRegressor(
            **PARAMS), "y", ["label"])
        assert "rare" in list(engine._context["categories"][0])
        assert_same_trees(memory, engine)
    finally:
        for server in servers.values():
            server.stop()
    policy = OPEN.replace("min_level_count = 5", "min_level_count = 10")
    servers, _ = _servers(tmp_path / "b", certs, {"memory": None, "engine": RAGGED}, policy)
    try:
        refused = [_refusal(servers, certs, home, lambda: FedHistGradientBoostingRegressor(
            **PARAMS)) for home in ("memory", "engine")]
    finally:
        for server in servers.values():
            server.stop()
    assert [(r.rule, r.site) for r in refused] == [("min_level_count", "same")] * 2


def test_the_fit_state_caps_hold_over_the_partitions(services, certs, monkeypatch):
    """Each partition keeps its state under its share of the rows of the site's
    fit_state_mb (together: the site's cap; an analyst's states under the site's
    analyst_state_mb in the process); a fit's state above it is refused on the engine
    as in memory (rule ``fit_state_mb``)."""
    from skfed.ensemble import _fit_state
    from skfed.federation.operations import current_requester

    servers, _ = services
    caps, account = [], _fit_state.STORE.account

    def recorded(state):
        who = current_requester()
        caps.append((state["prepared"].binned.shape[0], who.fit_state_mb,
                     who.analyst_state_mb))
        return account(state)

    monkeypatch.setattr(_fit_state.STORE, "account", recorded)
    _fit_each(servers, certs, lambda: FedHistGradientBoostingRegressor(**PARAMS), "y",
              ["label"], homes=("engine",))
    shares = {n: (mb, analyst) for n, mb, analyst in caps}
    assert sorted(shares) == sorted(RAGGED + [400])  # ``other``: all its rows
    whole = shares[400][0]  # in memory: the site's cap
    for n in RAGGED:
        assert shares[n][0] == pytest.approx(whole * n / sum(RAGGED), rel=1e-12)
        assert shares[n][1] == shares[400][1]  # the analyst's: the site's, per process
    monkeypatch.setattr(_fit_state, "_MB", 1.0)  # a cap of a few bytes
    refused = [_refusal(servers, certs, home, lambda: FedHistGradientBoostingRegressor(
        **PARAMS)) for home in ("memory", "engine")]
    assert [r.rule for r in refused] == ["fit_state_mb", "fit_state_mb"]


def test_the_sketch_is_refused_naming_the_sort(services, certs):
    servers, _ = services
    refused = _refusal(servers, certs, "engine", lambda: FedHistGradientBoostingRegressor(
        **dict(PARAMS, binning=10)))
    assert refused.rule == "engine" and "a sort" in str(refused)
    assert "boosting.sketch" in str(refused)


MASKED = ('min_rows = 10\nmin_level_count = 5\nallow_exact_quantiles = true\n'
          'require = ["secure_aggregation"]\nconsortium = ["other", "same"]')


@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_masked_boosting_on_one_and_three_partitions(tmp_path, certs, task):
    """Under required secure aggregation the engine site serves boosting only masked,
    and the masked fit on one partition, on three, and in memory gives the same trees
    bit for bit, its sums in the same limbs (a bounded loss's three: the bounds its
    function declares on the partitions are declared again at the site)."""
    from skfed.privacy import SecureAggregation

    make, target, drop = (FedHistGradientBoostingRegressor, "y", ["label"]) \
        if task == "regressor" else (FedHistGradientBoostingClassifier, "label", ["y"])
    homes = {"memory": None, "one": [500], "three": [200, 250, 50]}
    servers, _ = _servers(tmp_path, certs, homes, MASKED)
    try:
        refused = _refusal(servers, certs, "three", lambda: make(**PARAMS), target, drop)
        assert refused.rule == "require"
        fits = _fit_each(servers, certs, lambda: make(privacy=SecureAggregation(), **PARAMS),
                         target, drop, homes=tuple(homes))
    finally:
        for server in servers.values():
            server.stop()
    privacy = [fit.history_.privacy for fit in fits]
    assert privacy[0]["secure_aggregation"]
    for key in ("limbs", "bounded_limbs"):
        assert privacy[0].get(key) == privacy[1].get(key) == privacy[2].get(key)
    if task == "classifier":  # log loss: its gradients' public bound, fewer limbs
        assert privacy[2]["bounded_limbs"]
    assert_same_trees(fits[0], fits[1])
    assert_same_trees(fits[0], fits[2])


@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_histograms_continued_in_row_order_through_a_service(tmp_path, certs, monkeypatch,
                                                             task):
    """Where partition sums might round (the terms' range too wide: forced here on every
    request; the rows that do round at a site's scale:
    test_continued_histograms_are_the_in_memory_sums), the engine continues the
    partitions' sums one after the other in row order: the trees bit for bit."""
    from skfed.federation import whole_counts
    from skfed.sites import engine_kept
    from skfed.sites.transport import SiteServer

    calls, continued = [], engine_kept.continued
    monkeypatch.setattr(engine_kept, "continued", lambda *a: calls.append(1) or continued(*a))
    monkeypatch.setattr(whole_counts, "any_order_exact",  # False where terms were seen
                        lambda floats: all(f is None for f in floats))
    frame = _frame()
    servers = {"other": SiteServer(_site(tmp_path / "other", "other", frame.iloc[:400],
                                         certs))}
    second = frame.iloc[400:].reset_index(drop=True)
    for home, sizes in {"memory": None, "engine": RAGGED}.items():
        servers[home] = SiteServer(_site(tmp_path / home, "same", second, certs, sizes))
    for server in servers.values():
        server.start()
    make, target, drop = (FedHistGradientBoostingRegressor, "y", ["label"]) \
        if task == "regressor" else (FedHistGradientBoostingClassifier, "label", ["y"])
    try:
        memory, engine = _fit_each(servers, certs, lambda: make(**PARAMS), target, drop)
    finally:
        for server in servers.values():
            server.stop()
    assert len(calls) >= len(engine._predictors)  # every tree's histograms continued
    assert_same_trees(memory, engine)


def _histograms_three_ways(frame, sizes, nodes, kept_cells=False):
    """``boosting.histograms`` of a squared-error model of baseline 0 (gradients: the
    float32 targets) over ``frame``'s rows: in one process; its partitions' replies
    added in a tree; and the partitions continued one after the other (``kept_cells``:
    the cells a row can be in only, as a masked sum asks)."""
    from skfed.data.sources import split_table
    from skfed.ensemble._site import pack_nodes, site_histograms
    from skfed.ensemble._site_continued import continued_histograms
    from skfed.ensemble._tree import pack_trees
    from skfed.federation.combine import tree_combine

    X = frame.drop(columns=["y"])
    context = FedHistGradientBoostingRegressor(**PARAMS).fit(X, frame["y"])._context
    model = {"extends": None, "baseline": np.zeros(1), "trees": pack_trees([])}
    request = dict(pack_nodes(nodes, X.shape[1]), with_loss=True, kept_cells=kept_cells)
    cuts = np.cumsum([0, *sizes])
    parts = [split_table("same", frame.iloc[a:b].reset_index(drop=True), target="y")
             for a, b in zip(cuts[:-1], cuts[1:])]
    whole = site_histograms(split_table("same", frame, target="y"), dict(context, fit="w"),
                            model, request)
    tree = tree_combine("sum", [site_histograms(p, dict(context, fit="p"), model, request)
                                for p in parts])
    reply = None
    for part in parts:
        reply = continued_histograms(part, reply, dict(context, fit="c"), model, request)
    return whole, tree, reply


@pytest.mark.parametrize("kept_cells", [False, True])
def test_continued_histograms_are_the_in_memory_sums(kept_cells):
    """Float32 gradients over 16 orders of magnitude: added over partitions the cells'
    sums round differently; continued in row order they are the in-memory site's bits
    (the counts the same integers either way), every cell or the cells a row can be in
    only (a feature of few values, a categorical one: fewer than all)."""
    frame = _frame().drop(columns=["label"])
    rng = np.random.default_rng(3)
    frame["y"] = rng.normal(size=len(frame)) * 10.0 ** rng.integers(-8, 8, len(frame))
    # the root, and a node of the rows whose x2 is in its first 20 bins
    nodes = [(0, (), None), (0, ((2, 20, False, False, None, True),), None)]
    whole, tree, continued = _histograms_three_ways(frame, [150, 1, 249, 100, 400], nodes,
                                                    kept_cells)
    assert (len(whole["counts"]) < 2 * 3 * 256) == kept_cells
    assert not np.array_equal(whole["gradients"], tree["gradients"])  # they round
    assert set(continued) == set(whole) == {"gradients", "counts", "loss", "weight"}
    for key in ("gradients", "counts"):
        np.testing.assert_array_equal(continued[key], whole[key], err_msg=key)
        assert continued[key].dtype == whole[key].dtype
    np.testing.assert_array_equal(tree["counts"], whole["counts"])
    # the loss sums are numpy's pairwise sums: to round-off
    assert continued["loss"] == pytest.approx(whole["loss"], rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_pairwise_sums_over_partitions_are_numpys(seed):
    """A boosting fit's totals are numpy's pairwise sums: each partition sums the runs
    numpy's recursion over the whole array gives it, the blocks across partitions are
    summed from their terms, and the site adds them in numpy's order: np.sum of the
    whole array, to the bit (a tree of the partitions' own sums is not)."""
    from skfed.federation import whole_counts

    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.integers(1, 5000, 6)] + [1, 130]
    terms = rng.normal(size=sum(sizes)) * 10.0 ** rng.integers(-6, 6, sum(sizes))
    parts, tree = whole_counts.pairwise_plan(sizes)
    cuts, recorded = np.cumsum([0, *sizes]), []
    for k, plan in enumerate(parts):
        with whole_counts.Recording(plan) as recording:
            whole_counts.pairwise_sum("t", terms[cuts[k]:cuts[k + 1]])
        recorded.append(recording.pairwise["t"])
    assert whole_counts.finish_pairwise(tree, recorded) == float(np.sum(terms))


def test_a_tree_of_partition_sums_is_not_numpys():
    """Why the plan: the partitions' own sums added differ from np.sum of the whole
    array in the last bits for most draws (a baseline one ulp off)."""
    from skfed.federation.combine import tree_combine

    rng, differ = np.random.default_rng(0), 0
    for _ in range(20):
        terms = rng.normal(size=500)
        cuts = np.cumsum([0, *RAGGED])
        parts = [float(np.sum(terms[a:b])) for a, b in zip(cuts[:-1], cuts[1:])]
        differ += tree_combine("sum", parts) != float(np.sum(terms))
    assert differ >= 5


def test_the_weighted_binning_draw_is_refused_on_a_partition():
    """Above the subsample size with sample weights, scikit-learn's draw runs over the
    rows' cumulative weights, across partitions: a partition's rows refuse it with the
    reason (rule ``engine``); the unweighted draw, by row index, is served."""
    from skfed.data.sources import split_table
    from skfed.ensemble._site import _multiplicity
    from skfed.federation.operations import Refused

    frame = _frame().drop(columns=["label"])
    rows = split_table("same", frame.iloc[:100].reset_index(drop=True), target="y")
    rows.meta["position"] = 400  # its place among the site's rows
    draw = {"mode": "draw", "seed": 0, "n_total": 900, "size": 300,
            "offsets": {"same": 0}}
    counts, weights = _multiplicity(rows, None, draw)
    whole, _ = _multiplicity(split_table("same", frame, target="y"), None, draw)
    np.testing.assert_array_equal(counts, whole[400:500])  # the same rows drawn
    assert weights is None
    with pytest.raises(Refused, match="weighted 200,000-row draw") as info:
        _multiplicity(rows, None, dict(draw, weight_total=1.0, p_total=1.0,
                                       weight_offsets={"same": 0.0}))
    assert info.value.rule == "engine"


def test_many_partitions_keep_their_fit_state(tmp_path, certs):
    """More partitions than an analyst may keep fit states (64) in one process: a fit's
    partitions count as one state of the analyst's, so none evicts another and no
    request is refused for a lost state (as in memory)."""
    from skfed.sites.audit import read_audit
    from skfed.sites.transport import SiteServer

    frame = _frame()
    servers = {"other": SiteServer(_site(tmp_path / "other", "other", frame.iloc[:400],
                                         certs))}
    second = frame.iloc[400:].reset_index(drop=True)
    for home, sizes in {"memory": None, "engine": [7] * 70 + [10]}.items():
        servers[home] = SiteServer(_site(tmp_path / home, "same", second, certs, sizes))
    for server in servers.values():
        server.start()
    try:
        memory, engine = _fit_each(servers, certs, lambda: FedHistGradientBoostingRegressor(
            **PARAMS), "y", ["label"])
    finally:
        for server in servers.values():
            server.stop()
    assert_same_trees(memory, engine)
    lost = [line for line in read_audit(tmp_path / "engine" / "audit.jsonl")
            if line.get("rule") == "fit_state"]
    assert not lost
