"""The site's gate over the whole operation table (issue 27, findings 3 and item 4; issue 35).

One real service (gRPC over mutual TLS) whose policy requires secure aggregation and
differential privacy, ``min_rows = 10`` and a budget. Every declared operation
(:func:`skfed.federation.operations.operations`) is called directly, as a modified client
would send it: none answers with a number computed from this site's rows alone.
Operations whose class is sums are refused (rule ``require``) before they run, whatever
their arguments; a fit's step is refused unless the site itself masks and noises it;
the others release nothing, metadata or integer counts. Every refusal is in the audit
log with its rule, and its text is the rule's fixed text.
"""

import re

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")


from skfed.data.site import Targets  # noqa: E402
from skfed.datafits import Quadratic  # noqa: E402
from skfed.federation.layout import Layout  # noqa: E402
from skfed.federation.operations import (  # noqa: E402
    RELEASES, SUMS, operations, row_steps)
from skfed.sites import SiteRefusal, SiteServiceError  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.gate import RULE_TEXTS  # noqa: E402
from skfed import FedLasso  # noqa: E402
from skfed.solvers import FedNewton  # noqa: E402

from ._sites import diabetes_service  # noqa: E402

DATASET = {"name": "visits", "target": "target", "drop": [], "sample_weight": None}
#: the operations whose replies hold no number computed from the rows, metadata or counts
#: only (each reviewed: a new operation of class sums is refused here)
NOT_SUMS = {"fit.open", "fit.close", "data.check", "data.check_target", "preprocess.schema",
            "dataset.describe", "data.summary", "data.inspect", "survival.strata_levels",
            "survival.event_times", "stats.crosstab", "stats.survival_grid",
            "stats.survival_counts", "stats.life_table", "fit.step", "stats.competing_grid",
            "stats.competing_counts",
            "formula.levels", "stats.levels", "mixed.glmm_groups", "boosting.schema",
            "gee.clusters",
            "sums.open", "sums.key_list", "sums.masked", "sums.close", "fit.client_summary",
            "preprocess.summary", "evaluate.concordance", "causal.overlap_counts"}


@pytest.fixture(scope="module")
def protected(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    policy = ('min_rows = 10\nrequire = ["secure_aggregation", "differential_privacy"]\n'
              'epsilon_budget = 1.0\nconsortium = ["hospital-a", "hospital-b"]')
    with diabetes_service(root, policy) as conn:
        yield conn, root


def _session(conn):
    layout = Layout(n_features=10, n_outputs=1, fit_intercept=True)
    return conn.call("fit.open", dataset=DATASET, datafit=Quadratic(), layout=layout,
                     targets=Targets())


def _release(operation):
    """The class of an operation's reply on unweighted rows, without arguments that
    change it (a client summary without constants, a preprocessing count)."""
    if callable(operation.releases):
        return "depends"
    return operation.releases


def test_every_operation_declares_what_it_releases():
    table = operations()
    assert {op.releases for op in table.values() if not callable(op.releases)} <= set(RELEASES)
    assert {n for n, op in table.items() if _release(op) != SUMS} == NOT_SUMS
    # every variable-size argument has a cap (a declaration without one is refused at
    # import, see skfed.federation.operations.Arg)
    for op in table.values():
        for arg in op.arguments:
            assert arg.most is not None or arg.kind not in ("names", "str", "floats", "ints",
                                                            "array", "bytes"), (op.name, arg)


@pytest.mark.parametrize("name", sorted(n for n, op in operations().items()
                                        if _release(op) == SUMS))
def test_sums_are_refused_before_they_run(protected, name):
    conn, root = protected
    handle = _session(conn)
    args = _declared_arguments(operations()[name], handle)
    with pytest.raises(SiteRefusal) as info:
        conn.call(name, **args)
    line = read_audit(root / "audit.jsonl")[-1]
    assert line["operation"] == name and line["outcome"] == "refused"
    # the arguments are of their declared types: the gate refuses for the class (or,
    # for the few that check their arguments' form first, for the form)
    assert info.value.rule in ("require", "message", "finer_sums", "allow_exact_quantiles")
    if info.value.rule == "require":
        assert "requires secure aggregation and differential privacy" in str(info.value)


def test_a_client_summary_gives_counts_only(protected):
    conn, _ = protected
    handle = _session(conn)
    with pytest.raises(SiteRefusal, match="fit.client_summary") as info:
        conn.call("fit.client_summary", session=handle, exact=False)
    assert info.value.rule == "require"
    summary = conn.call("fit.client_summary", session=handle, exact=None)
    assert summary["lipschitz"] is None and summary["n_samples"] == 120


def test_an_unmasked_step_is_refused(protected):
    import hashlib

    from skfed.sites.codec import encode

    conn, root = protected
    handle = _session(conn)
    blob = np.frombuffer(encode(FedNewton()), dtype=np.uint8)
    with pytest.raises(SiteRefusal) as info:
        conn.call("fit.step", session=handle, solver=blob,
                  solver_digest=hashlib.sha256(blob).hexdigest(), client=0, seed=0,
                  message={"trial": np.zeros(11)}, state={})
    assert info.value.rule == "require"
    assert read_audit(root / "audit.jsonl")[-1]["rule"] == "require"


@pytest.mark.parametrize("name", sorted(NOT_SUMS - {"fit.step", "fit.open", "fit.close",
                                                     "formula.levels", "sums.key_list",
                                                     "sums.masked", "sums.close"}))
def test_the_others_release_no_row_value(protected, name):
    """Called with arguments of the right form, they answer with counts, names or
    nothing (a refusal is fine too): never a mean, a sum of values or a curvature."""
    conn, _ = protected
    handle = _session(conn)
    args = {"dataset.describe": {}, "data.summary": {"task": "regression"},
            "data.inspect": {"categorical": []}, "data.check": {},
            "data.check_target": {"family_name": "gaussian", "lower": 0.0, "strict": False},
            "preprocess.schema": None, "preprocess.summary": None,
            "survival.strata_levels": {"column": "sex"},
            "survival.event_times": {"time_grid": None, "min_count": None},
            "stats.crosstab": {"row": "sex", "col": "sex", "min_count": 1},
            "stats.levels": {"columns": ["sex", "age"], "by": "sex"},
            "stats.survival_grid": {"time": "age", "event": "sex", "group": None,
                                    "event_times": False},
            "stats.survival_counts": {"time": "age", "event": "sex", "group": None,
                                      "levels": None, "times": [0.0, 0.01]},
            "stats.life_table": {"time": "age", "event": "sex", "group": None,
                                 "levels": None, "cuts": [0.01]},
            "stats.competing_grid": {"time": "age", "event": "sex"},
            "stats.competing_counts": {"time": "age", "event": "sex", "cause": 1,
                                       "times": [0.0, 0.01], "intervals": False},
            "mixed.glmm_groups": {"design": {"groups": "sex", "trials": None,
                                             "family": "poisson", "fit_intercept": True,
                                             "min_group_rows": 2}},
            "gee.clusters": {"design": {"groups": "sex", "time": None, "time_feature": False,
                                        "family": "gaussian", "link": "identity",
                                        "fit_intercept": True, "cov_struct": "exchangeable"}},
            "boosting.schema": {"request": {"categorical": np.zeros(10, dtype=bool),
                                            "task": "regression"}},
            "sums.open": {"key_session": np.zeros(16, dtype=np.uint8), "party": 0},
            "fit.client_summary": {"session": handle, "exact": None},
            "evaluate.concordance": {"coef": np.zeros(10), "edges": {"time": [1.0],
                                                                     "risk": [0.0]}},
            "causal.overlap_counts": {"spec": {
                "treatment": "sex", "outcome": None, "covariates": ["age", "bmi"],
                "estimand": "ATE", "stabilized": False, "truncate": None, "trim": None,
                "method": "ipw", "family": "gaussian", "scores": "logistic"},
                "theta": np.zeros(5), "n_bins": 10, "threshold": 10.0, "min_count": 1}}[name]
    if args is None:  # a transformer is needed: the form is checked elsewhere
        return
    if "session" not in args:
        args["dataset"] = DATASET
    try:
        reply = conn.call(name, **args)
    except (SiteRefusal, SiteServiceError):
        return
    assert _no_row_values(reply), (name, reply)


def test_a_formulas_levels_are_names_each_held_by_min_level_count_rows(protected):
    """A level's name is released (a column's values, when a formula makes a number
    categorical) only when at least min_level_count rows hold it: a column of many
    distinct values (age) is refused, one of two (sex) answered."""
    conn, _ = protected
    with pytest.raises(SiteRefusal, match="identifier-like") as info:
        conn.call("formula.levels", dataset=DATASET, columns=["age"], min_count=1)
    assert info.value.rule == "min_level_count"
    levels = conn.call("formula.levels", dataset=DATASET, columns=["sex"],
                       min_count=1)["sex"]["levels"]
    assert len(levels) == 2


def test_boosting_is_refused_where_protection_is_required(protected):
    """Its schema is counts; its sums are refused in the clear, and no session of masked
    sums opens where differential privacy is required (they carry no noise)."""
    conn, root = protected
    with pytest.raises(SiteRefusal, match="masked sums of an analysis carry no noise"):
        conn.call("sums.open", dataset=DATASET, key_session=np.zeros(16, dtype=np.uint8),
                  party=0)
    with pytest.raises(SiteRefusal) as info:
        conn.call("boosting.totals", dataset=DATASET, context={})
    assert info.value.rule == "require"
    assert read_audit(root / "audit.jsonl")[-1]["rule"] == "require"


def _declared_arguments(operation, handle):
    """A request of the operation's declared argument types (the table's schema)."""
    examples = {"float": 0.5, "int": 1, "bool": False, "str": "x", "name": "age",
                "names": ["age"], "floats": np.zeros(11), "ints": np.zeros(2, dtype=np.int64),
                "array": np.zeros(3), "bytes": np.zeros(4, dtype=np.uint8), "value": {},
                "object": None}
    args = {a.name: a.choices[-1] if a.kind == "choice" else examples[a.kind]
            for a in operation.arguments if not a.optional}
    args.update({"session": handle} if operation.target == "fit" else {"dataset": DATASET})
    return args


def test_arguments_outside_the_declaration_are_refused(protected):
    conn, root = protected
    with pytest.raises(SiteRefusal, match="takes no argument 'theta'") as info:
        conn.call("dataset.describe", dataset=DATASET, theta=np.zeros(3))
    assert info.value.rule == "message"
    with pytest.raises(SiteRefusal, match="'task' is not a valid choice"):
        conn.call("data.summary", dataset=DATASET, task="everything")
    with pytest.raises(SiteRefusal, match="'test_size' is not a valid float"):
        conn.call("evaluate.local_baseline", dataset=DATASET, estimator=FedLasso(), test_size=2.0,
                  seed=0, classifier=False, scale=False, indicators=[])
    assert read_audit(root / "audit.jsonl")[-1]["rule"] == "message"


def test_every_rule_has_a_fixed_text():
    """The rules the gate and the declared checks raise each have their fixed text."""
    import pathlib
    import re

    import skfed

    raised = set()
    for path in pathlib.Path(skfed.__file__).parent.rglob("*.py"):
        raised |= set(re.findall(r'Refused\(\s*"([a-z_]+)"', path.read_text()))
    assert raised <= set(RULE_TEXTS), sorted(raised - set(RULE_TEXTS))


def _no_row_values(value):
    """Counts, names, kinds and flags only: integers (or integral floats), strings,
    booleans and None, in dicts and lists (a dict's keys are names: columns, or levels,
    each held by at least min_level_count rows)."""
    if isinstance(value, dict):
        return all(_no_row_values(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_no_row_values(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biuUSO" or bool(np.all(value == np.round(value)))
    if isinstance(value, (float, np.floating)):
        return float(value).is_integer() or not np.isfinite(value)
    return value is None or isinstance(value, (bool, int, str, np.integer, np.bool_))





# --- the property over the whole registry (issue 35, item 8) ------------------------
_NUMBER = re.compile(r"(?<![A-Za-z_])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_NEAR_INDICATOR = {"format": "skfed.formula/1", "factors": {"f": {"kind": "numeric", "expr": {
    "op": "mul", "args": [{"op": "pow", "args": [{"number": 0.0}, {"op": "sub", "args": [
        {"call": "abs", "args": [{"op": "sub", "args": [{"column": "age"},
                                                        {"number": 0.0380759}]}]},
        {"op": "sub", "args": [{"column": "age"}, {"number": 0.0380759}]}]}]},
        {"column": "bmi"}]}}}}


def _adversarial(kind, arg):
    """Values of an argument a modified client would try: out of range, not finite, of
    another type, past its cap, crafted (a row indicator as a formula, a model far out)."""
    big = (arg.most or 16) + 1
    values = {"float": [np.nan, np.inf, -1e308, 1e308], "int": [-1, 2 ** 62, 3.5],
              "bool": [2, "yes"], "choice": ["everything", None], "str": ["x" * big, 3],
              "name": ["no-such-column", ["age"]], "names": [["age"] * big, "age"],
              "floats": [np.full(11, 1e300), np.full(11, np.nan), np.zeros(big)],
              "ints": [np.full(2, -5, dtype=np.int64), np.zeros(big, dtype=np.int64)],
              "array": [np.zeros(big), np.full(3, np.inf)],
              "bytes": [np.zeros(big, dtype=np.uint8), "key"],
              "value": [_NEAR_INDICATOR, {"groups": "age", "trials": None,
                                          "family": "poisson", "fit_intercept": True,
                                          "min_group_rows": 1}, [[1.0] * big]],
              "object": [FedLasso(max_rounds=10 ** 9, tol=0.0), {"__class__": "os.system"}]}
    return values[kind]


def _numbers(text):
    """The numbers of a text, as floats (``65,536`` is one number)."""
    return {float(n) for n in _NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", text))}


def _declared_numbers():
    """The numbers the declarations themselves hold (their caps and ranges: public)."""
    out = set()
    for op in [*operations().values(), *row_steps().values()]:
        for arg in op.arguments:
            out |= {float(v) for v in (arg.most, arg.low, arg.high) if v is not None}
    return out


def _allowed_numbers(policy_texts, args):
    """The numbers a refusal may hold: the policy's own (its fixed texts), the
    declarations' caps, and the request's (its arguments, column and operation names)."""
    allowed = _numbers(" ".join(policy_texts)) | _declared_numbers()
    allowed |= _numbers(repr(args)) | _numbers(repr(DATASET))
    allowed |= {float(v) for v in range(7)} | {64.0, 65536.0}  # s1..s6; design caps
    return allowed


def _requests(operation, handle):
    base = _declared_arguments(operation, handle)
    for arg in operation.arguments:
        for value in _adversarial(arg.kind, arg):
            yield dict(base, **{arg.name: value})
    yield dict(base, dataset=dict(DATASET, steps=[{"step": "formula_complete_rows",
                                                   "args": {"design": _NEAR_INDICATOR}}]))
    yield dict(base, dataset=dict(DATASET, sample_weight="bmi"))


@pytest.mark.parametrize("name", sorted(operations()))
def test_every_operation_under_adversarial_arguments(protected, name):
    """Every declared operation, called with adversarial arguments under min_rows, both
    protections and a budget: each answer is a refusal (or an error) whose text holds no
    number but the policy's and the request's, and whose audit reason is that text; or
    a reply of its declared class that holds no row's value (sums never leave here)."""
    from skfed.sites.gate import rule_text
    from skfed.sites.policy import load_config

    conn, root = protected
    policy = load_config(root / "site.toml").policy
    texts = [rule_text(rule, policy) for rule in RULE_TEXTS]
    operation = operations()[name]
    handle = _session(conn)
    for args in _requests(operation, handle):
        allowed = _allowed_numbers(texts, args)
        try:
            reply = conn.call(name, **args)
        except (SiteRefusal, SiteServiceError) as exc:
            text = str(exc)
            stray = _numbers(text) - allowed
            assert not stray, (name, text, stray)
            line = read_audit(root / "audit.jsonl")[-1]
            assert line["reason"] in text and line["operation"] == name[:64]
            continue
        assert _release(operation) != SUMS, (name, args)
        assert _no_row_values(reply) or name in ("sums.key_list", "sums.masked"), (name,
                                                                                    reply)


def test_the_officers_page_lists_every_operation_with_its_class():
    """``docs/data-officers.md``'s operation table is the registry's: every declared
    operation appears in it once, with its release class first in its row."""
    import pathlib

    page = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "data-officers.md")
    rows = {}
    for m in re.finditer(r"^\| `([a-z_]+\.[a-z_]+)` \| ([^|]+) \|", page.read_text(),
                         re.MULTILINE):
        rows.setdefault(m.group(1), m.group(2))  # the first table naming it: the operations
    assert set(operations()) <= set(rows), sorted(set(operations()) - set(rows))
    for name, operation in operations().items():
        release = _release(operation)
        if release != "depends":
            assert rows[name].startswith(release), (name, rows[name])
        if operation.finer is not None:
            assert "finer_sums" in rows[name], name
        if operation.requires is not None:
            assert operation.requires.split(":")[0] in rows[name], name
