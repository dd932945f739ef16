"""The six findings of issue 35, replayed as a curious analyst with a valid certificate
would send them: raw transport calls (``SiteConnection.call``) to real ``skfed site
serve`` processes, crafted messages and sequences of requests.

Two deployments of the same rows (20 patients a site, ``min_rows = 10``): three sites
requiring secure aggregation over their consortium of three, and one site requiring
nothing (the exact mode, where the rules on releases, rows and sequences are all that
stands). Each test says what the attack gave before the gate owned every release.
"""

import time

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from skfed import FederatedDataset, FedLasso, FedLogisticRegression  # noqa: E402
from skfed.datafits import Logistic  # noqa: E402
from skfed.data.site import Targets  # noqa: E402
from skfed.deploy import make_certificates  # noqa: E402
from skfed.federation.layout import Layout  # noqa: E402
from skfed.linear_model._inference import Family  # noqa: E402
from skfed.privacy import SecureAggregation  # noqa: E402
from skfed.sites import SiteRefusal, SiteServiceError  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.transport import SiteConnection  # noqa: E402
from skfed.solvers import FedAvg, FedNewton  # noqa: E402

from ._sites import SITES, site_config, start_site, stop_sites  # noqa: E402

N_ROWS, MIN_ROWS = 20, 10
DECLARE = ('weights = ["w", "spike"]\n'
           "domains = { age = [18, 100], bmi = [10, 60], sbp = [70, 250] }")
CONSORTIUM = 'consortium = ["hospital-a", "hospital-b", "hospital-c"]'
FORMAT = "skfed.formula/1"


def _patients(k):
    """Twenty patients of site ``k``: distinct ages half a year apart at least (one
    decimal), two wards of ten, both outcomes, an ordinary weight and a spike."""
    rng = np.random.default_rng(40 + k)
    age = rng.choice(np.arange(300, 800, 7), N_ROWS, replace=False) / 10 + 0.1 * k
    return pd.DataFrame({
        "age": age, "bmi": rng.normal(27, 3, N_ROWS).round(1),
        "sbp": rng.normal(130, 12, N_ROWS).round(1),
        "ward": np.repeat(["a", "b"], N_ROWS // 2),
        "readmitted": np.tile([0, 1], N_ROWS // 2),
        "w": rng.uniform(1, 2, N_ROWS).round(3),
        "spike": np.where(np.arange(N_ROWS) == 3, 1.0, 1e-300)})


def _tracker_rows():
    """40 rows whose columns a, b, c are complete on P + {r}, P + Q and Q (15, 30 and
    15 rows; P and Q of 15, r one row): the three sets of the classic tracker."""
    rng = np.random.default_rng(7)
    P, Q, r = np.arange(0, 15), np.arange(15, 30), 30
    frame = pd.DataFrame({"x": rng.normal(50, 10, 40).round(2), "y": rng.normal(size=40),
                          "a": np.nan, "b": np.nan, "c": np.nan})
    frame.loc[np.r_[P, r], "a"] = 1.0
    frame.loc[np.r_[P, Q], "b"] = 1.0
    frame.loc[Q, "c"] = 1.0
    return frame, r


def _connect(certs, name, port, analyst=None):
    identity = certs.client if analyst is None else certs.analysts[analyst]
    return SiteConnection(name, f"127.0.0.1:{port}", ca_file=certs.ca.cert,
                          cert_file=identity.cert, key_file=identity.key)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """The three protected sites, and the exact-mode site (a fourth process, serving
    the patients of site a and the tracker's rows)."""
    root = tmp_path_factory.mktemp("requests")
    certs = make_certificates(root / "certs", list(SITES) + ["exact"],
                              analysts=["analyst-b"])
    processes, out = [], {"certs": certs, "frames": {}, "ports": {}, "folders": {}}
    protected = f'min_rows = {MIN_ROWS}\nrequire = ["secure_aggregation"]\n{CONSORTIUM}'
    exact = f"min_rows = {MIN_ROWS}\nmax_request_seconds = 3"
    tracker, out["tracker_row"] = _tracker_rows()
    try:
        for k, name in enumerate([*SITES, "exact"]):
            folder = root / name
            folder.mkdir()
            frame = _patients(0 if name == "exact" else k)
            frame.to_csv(folder / "patients.csv", index=False)
            datasets = {"patients": ("patients.csv", None)}
            if name == "exact":
                tracker.to_csv(folder / "tracker.csv", index=False)
                datasets["tracker"] = ("tracker.csv", None)
            config = site_config(folder, name, certs=certs, datasets=datasets,
                                 policy=protected if name != "exact" else exact,
                                 declare=DECLARE)
            proc, port = start_site(config)
            processes.append(proc)
            out["frames"][name], out["ports"][name], out["folders"][name] = frame, port, folder
        out["tracker"] = tracker
        connections = {n: _connect(certs, n, p) for n, p in out["ports"].items()}
        out["conn"] = connections
        yield out
    finally:
        for conn in out.get("conn", {}).values():
            conn.close()
        stop_sites(processes)


def _ref(name="patients", target="readmitted", steps=(), drop=("ward",), weight=None):
    return {"name": name, "target": target, "drop": list(drop), "sample_weight": weight,
            "steps": list(steps)}


def _formula_step(step, factors, **more):
    return {"step": step, "args": {"design": {"format": FORMAT, "factors": factors,
                                              **more}}}


def _numeric(tree):
    return {"kind": "numeric", "expr": tree}


def _col(name):
    return {"column": name}


def _num(value):
    return {"number": float(value)}


def _op(op, *args):
    return {"op": op, "args": list(args)}


def _call(name, *args):
    return {"call": name, "args": list(args)}


def _refused(conn, op, **args):
    with pytest.raises(SiteRefusal) as info:
        conn.call(op, **args)
    return info.value


def _row_values(frame):
    """Every value of the rows as the site's files write them (one decimal or more)."""
    return {f"{v:g}" for c in ("age", "bmi", "sbp") for v in frame[c]}


# --- finding 1: errors carry no data -----------------------------------------------
def test_a_formula_error_says_the_rule_never_a_count(deployment):
    """Before: a factor infinite on the analyst's condition answered "f is infinite in 10
    row(s)", the exact count of any predicate. Now a transform is judged on the declared
    domain before any row is read: the same fixed refusal whatever the constant."""
    conn = deployment["conn"]["hospital-a"]
    texts = set()
    for c in (35.0, 50.0, 65.0):
        factor = _numeric(_call("log", _op("sub", _col("age"), _num(c))))
        refusal = _refused(conn, "data.summary", task="none",
                           dataset=_ref(steps=[_formula_step("formula_complete_rows",
                                                             {"f": factor})]))
        assert refusal.rule == "domains"
        texts.add(str(refusal))
    assert len(texts) == 1, texts


def test_a_data_error_after_the_rows_are_read_is_the_rules_text(deployment):
    """A binomial response on a measurement: the design step fails on the rows. Before,
    its text counted the rows that are not 0 or 1; now the analyst reads the fixed text
    of rule ``data``, and the officer's log holds the detail."""
    conn, folder = deployment["conn"]["exact"], deployment["folders"]["exact"]
    step = _formula_step("formula_design", {"x": _numeric(_col("bmi"))},
                         columns=[{"name": "x", "parts": [["x", None]]}],
                         response={"kind": "binary", "expr": _col("age")})
    with pytest.raises(SiteServiceError) as info:
        conn.call("data.summary", task="none", dataset=_ref(steps=[step]))
    text = str(info.value)
    assert "the site's rows do not meet this operation's requirements" in text
    assert not set(_row_values(deployment["frames"]["exact"])) & set(text.split())
    assert "value(s)" not in text and "20" not in text
    # the detail, with its count, is in the officer's own log, not the audit log
    assert "a binomial response is 0 or 1" in (folder / "officer-log.jsonl").read_text()
    assert "binomial" not in (folder / "audit.jsonl").read_text()


def test_group_labels_and_values_never_reach_the_analyst(deployment):
    """Before: ``mixed.glmm_groups`` grouped by an analyst-built column answered "group
    30.3 has 1 row(s)" and "got e.g. array([1025.25])". Groups are the dataset's own
    columns, each group of at least min_rows rows; a refusal names the column only."""
    conn = deployment["conn"]["exact"]
    values = _row_values(deployment["frames"]["exact"])
    for groups in ("age", "sbp", "made_up"):
        refusal = _refused(conn, "mixed.glmm_groups", dataset=_ref(drop=()), design={
            "groups": groups, "trials": None, "family": "binomial", "fit_intercept": True,
            "min_group_rows": 1})
        assert refusal.rule in ("min_rows", "columns")
        assert not any(v in str(refusal) for v in values), str(refusal)


def test_the_audit_log_holds_no_value_of_the_rows(deployment):
    """Every audit line's reason is the text the analyst read: after the attacks of this
    module that ran on this worker (at least those of finding 1), no row's value is in
    it (before, the values of the 142-request reconstruction were written into it)."""
    test_a_formula_error_says_the_rule_never_a_count(deployment)
    test_group_labels_and_values_never_reach_the_analyst(deployment)
    test_a_data_error_after_the_rows_are_read_is_the_rules_text(deployment)
    for name, folder in deployment["folders"].items():
        values = _row_values(deployment["frames"][name])
        for line in read_audit(folder / "audit.jsonl"):
            reason = line.get("reason") or ""
            assert not any(v in reason for v in values), (name, reason)


# --- finding 3: weights and near-indicators ----------------------------------------
def test_a_weight_is_a_declared_column_never_a_transform(deployment):
    """Before: ``weight_sum`` of any column, or of a formula column such as
    ``I(age == a) * sbp + 1e-300``, came back as a "count" (the table in 179 requests)."""
    conn = deployment["conn"]["hospital-a"]
    refusal = _refused(conn, "data.summary", task="none", dataset=_ref(weight="sbp"))
    assert refusal.rule == "columns"
    weights = {"column": "sbp"}
    step = _formula_step("formula_complete_rows", {"x": _numeric(_col("bmi"))},
                         weights=weights)
    refusal = _refused(conn, "data.summary", task="none", dataset=_ref(steps=[step]))
    assert refusal.rule == "columns"
    # a declared weight's sum is a sum over rows: under secure aggregation, not in clear
    refusal = _refused(conn, "data.summary", task="none", dataset=_ref(weight="w"))
    assert refusal.rule == "require"


@pytest.mark.parametrize("tree, rule", [
    (_op("pow", _num(0), _op("sub", _call("abs", _op("sub", _col("age"), _num(50))),
                            _op("sub", _col("age"), _num(50)))), "formulas"),
    ({"op": "eq", "args": [_col("age"), _num(47.3)]}, "message"),
    (_op("pow", _num(2), _col("age")), "formulas"),
], ids=["pow-abs-indicator", "equality", "data-exponent"])
def test_no_formula_builds_a_row_indicator(deployment, tree, rule):
    conn = deployment["conn"]["exact"]
    step = _formula_step("formula_complete_rows", {"f": _numeric(
        _op("mul", tree, _col("sbp")))})
    assert _refused(conn, "data.summary", task="none",
                    dataset=_ref(steps=[step])).rule == rule


def test_a_weight_sum_dominated_by_one_row_is_refused(deployment):
    """Exact mode: a declared weight's sum is released, unless a few rows make up more
    than the dominance share of it (a weight of 1 on one row, 1e-300 on the others)."""
    conn = deployment["conn"]["exact"]
    frame = deployment["frames"]["exact"]
    summary = conn.call("data.summary", task="none", dataset=_ref(weight="w"))
    assert summary["weight_sum"] == pytest.approx(frame["w"].sum())
    refusal = _refused(conn, "data.summary", task="none", dataset=_ref(weight="spike"))
    assert refusal.rule == "dominance"


def test_model_parameters_that_single_out_a_row_are_refused(deployment):
    """A logistic model at ``beta = k (age - c)`` (c a patient's age, k = 100) has
    weights mu (1 - mu) about e^-50 on every row but that patient's: its Fisher
    information would be that patient's x x' / 4, the whole record. The dominance rule
    refuses it; at an ordinary model the same request is answered."""
    conn = deployment["conn"]["exact"]
    frame = deployment["frames"]["exact"]
    columns = ["age", "bmi", "sbp", "w", "spike"]
    dataset = _ref(drop=("ward", "w", "spike"))
    layout = Layout(n_features=3, n_outputs=1, fit_intercept=True)
    handle = conn.call("fit.open", dataset=dataset, datafit=Logistic(), layout=layout,
                       targets=Targets(kind="binary", classes=np.array([0, 1])))
    family = Family("binomial", "logit")
    ordinary = conn.call("fit.inference", session=handle, theta=np.zeros(4), family=family,
                         cov_type="nonrobust")
    assert np.all(np.isfinite(ordinary["fisher"]))
    c, k = float(frame["age"].iloc[5]), 100.0
    theta = layout.pack(np.array([k, 0.0, 0.0]), np.array([-k * c]))
    refusal = _refused(conn, "fit.inference", session=handle, theta=theta, family=family,
                       cov_type="nonrobust")
    assert refusal.rule == "dominance", columns


# --- finding 4: differencing through row steps and sequences ----------------------
@pytest.mark.parametrize("site", ["hospital-a", "exact"])
def test_a_threshold_filter_is_refused_from_the_schema(deployment, site):
    """Before: complete cases of ``sqrt(age - c)`` kept ``{age >= c}``; thresholds that
    kept 10..30 of 40 rows each passed, and consecutive answers differed by one row.
    ``sqrt`` of a range below 0 is refused before any row is read, whatever c."""
    conn = deployment["conn"][site]
    for c in (40.0, 55.5, 70.0):
        step = _formula_step("formula_complete_rows", {"f": _numeric(
            _call("sqrt", _op("sub", _col("age"), _num(c))))})
        refusal = _refused(conn, "data.summary", task="none", dataset=_ref(steps=[step]))
        assert refusal.rule == "domains"


def test_a_category_of_one_value_is_refused(deployment):
    """A one-hot step whose encoder the analyst fitted on one patient's age would make
    that patient's indicator: each encoded level must be held by min_level_count rows."""
    from skfed.preprocessing import FedOneHotEncoder

    conn, frame = deployment["conn"]["exact"], deployment["frames"]["exact"]
    encoder = FedOneHotEncoder(handle_unknown="ignore").fit(
        frame[["age"]].iloc[:1], clients=np.zeros(1))
    step = {"step": "one_hot", "args": {"categorical": ["age"], "encoder": encoder,
                                        "order": list(range(5))}}
    refusal = _refused(conn, "data.summary", task="none", dataset=_ref(steps=[step]))
    assert refusal.rule == "min_level_count"


def _complete_on(column):
    return [{"step": "select_columns", "args": {"names": [column, "x"]}},
            {"step": "drop_incomplete", "args": {"impute": False}}]


def _x_sum(conn, column):
    reply = conn.call("stats.describe", dataset=_ref("tracker", "y", _complete_on(column),
                                                     drop=()),
                      columns=["x"], by=None, quantiles=[], min_count=1)
    cell = reply["cells"][(None, "x")]
    return cell["count"] * (cell["mean"] + cell["mean_lo"])


def test_the_three_set_tracker_is_refused_for_every_analyst(deployment):
    """``P + {r}``, ``P + Q`` and ``Q``: pairwise far apart, each of at least min_rows
    rows, yet ``(P + {r}) - (P + Q) + Q = {r}``. The site keeps the row sets it answered
    over (for every analyst together): the first two are answered, the third refused,
    whoever asks; the row's value never follows."""
    certs, port = deployment["certs"], deployment["ports"]["exact"]
    conn = deployment["conn"]["exact"]
    first, second = _x_sum(conn, "a"), _x_sum(conn, "b")
    assert np.isfinite(first) and np.isfinite(second)
    refusal = _refused(conn, "stats.describe", dataset=_ref("tracker", "y", _complete_on("c"),
                                                           drop=()),
                       columns=["x"], by=None, quantiles=[], min_count=1)
    assert refusal.rule == "row_sets"
    other = _connect(certs, "exact", port, analyst="analyst-b")
    try:  # a second certificate does not start afresh
        refusal = _refused(other, "stats.describe", dataset=_ref(
            "tracker", "y", _complete_on("c"), drop=()), columns=["x"], by=None,
            quantiles=[], min_count=1)
        assert refusal.rule == "row_sets"
        assert np.isfinite(_x_sum(other, "b"))  # a set already answered: answered again
    finally:
        other.close()
    assert "population" in str(refusal)  # the refusal names the remedy


# --- finding 5: secure aggregation over a subset of the consortium ----------------
def _subset(deployment, names):
    certs = deployment["certs"]
    return FederatedDataset.from_sites(
        {n: f"127.0.0.1:{deployment['ports'][n]}" for n in names}, dataset="patients",
        target="readmitted", drop=("ward", "w", "spike"), ca_file=certs.ca.cert,
        cert_file=certs.client.cert, key_file=certs.client.key)


@pytest.mark.parametrize("pair", [("hospital-a", "hospital-b"), ("hospital-a", "hospital-c")])
def test_masked_sums_over_part_of_the_consortium_are_refused(deployment, pair):
    """Before: honest secure Newton fits over {a,b}, {a,c} and {b,c} gave site a's X'X
    (error 6e-13). A site requiring secure aggregation masks over its whole consortium,
    all present: a fit, and a session of masked sums, over two of three are refused."""
    from skfed import FedHistGradientBoostingClassifier

    data = _subset(deployment, pair)
    try:
        with pytest.raises(SiteRefusal) as info:
            FedLogisticRegression(C=1.0, solver=FedNewton(), max_rounds=3,
                                  privacy=SecureAggregation()).fit(data)
        assert info.value.rule == "consortium"
        with pytest.raises(SiteRefusal) as info:
            FedHistGradientBoostingClassifier(max_iter=2,
                                              privacy=SecureAggregation()).fit(data)
        assert info.value.rule == "consortium"
    finally:
        data.close()


# --- finding 6: work bounded before (and while) it is done -------------------------
def test_a_huge_knot_list_is_refused_before_any_work(deployment):
    """Before: 200,000 knots held a core for 29 s (and a 94 MB request for hours)."""
    conn = deployment["conn"]["exact"]
    knots = np.linspace(18, 100, 200_000).tolist()
    step = _formula_step("formula_design", {"s": {"kind": "spline", "basis": "bs",
                                                  "column": "age", "degree": 3,
                                                  "knots": knots,
                                                  "include_intercept": False}},
                         columns=[{"name": "s", "parts": [["s", 0]]}])
    started = time.monotonic()
    refusal = _refused(conn, "data.summary", task="none", dataset=_ref(steps=[step]))
    assert refusal.rule == "message" and "at most 64" in str(refusal)
    assert time.monotonic() - started < 10


def test_a_long_local_fit_stops_at_the_sites_deadline(deployment):
    """Each loop bound passes (10,000 rounds of 10,000 local steps, within
    max_local_iterations), but their product would run for hours: the loops check the
    request's deadline (3 s here) and the request stops, refused with its rule."""
    conn = deployment["conn"]["exact"]
    # a small step: no round reaches the optimum exactly (which would end the fit early)
    estimator = FedLasso(alpha=1e-6, max_rounds=10_000, tol=0.0,
                         solver=FedAvg(local_steps=10_000, client_lr=1e-4))
    started = time.monotonic()
    refusal = _refused(conn, "evaluate.local_baseline", dataset=_ref(drop=("ward",)),
                       estimator=estimator, test_size=0.5, seed=0, classifier=False,
                       scale=True, indicators=[])
    elapsed = time.monotonic() - started
    assert refusal.rule == "max_request_seconds"
    assert elapsed < 20, elapsed
