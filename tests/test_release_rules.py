"""The rules a site applies to what it releases, as units (issue 35): the dominance
rule, the record of row sets (the sum auditor) and a formula's rules at a site.

Each is checked against a brute-force reference on small cases: the dominance
bound never lets a dominated coordinate through, and the record refuses exactly the
sequences of row sets whose span holds a small group's indicator.
"""

import itertools
import math
import time

import numpy as np
import pandas as pd
import pytest

from skfed.data.site import SiteData
from skfed.federation import dominance
from skfed.federation.operations import Refused
from skfed.formula._site_rules import check_vocabulary, interval, matrix_rules
from skfed.sites.policy import DatasetConfig
from skfed.sites.rowsets import MAX_SETS, RowSetRecord


# --- the dominance rule --------------------------------------------------------------
def _exactly_dominated(contributions, k, share):
    """Brute force: each released coordinate's largest k contributions and its total."""
    C = np.abs(np.asarray(contributions, dtype=float)).reshape(len(contributions), -1)
    top = -np.sort(-C, axis=0)[:k].sum(axis=0)
    total = C.sum(axis=0)
    return bool(np.any(~np.isfinite(total) | ((total > 0) & (top > share * total))))


def _refused(check, *args):
    with dominance.audit(min_rows=10, share=0.95):
        try:
            check(*args)
        except Refused as exc:
            assert exc.rule == "dominance"
            return True
    return False


def test_one_row_making_up_a_sum_is_refused_spread_sums_are_not():
    rng = np.random.default_rng(0)
    spread = rng.uniform(1, 2, size=(50, 3))
    assert not _refused(dominance.check_rows, spread)
    spike = spread.copy()
    spike[:, 1] = 1e-300
    spike[7, 1] = 1.0  # I(age == a) * sbp + 1e-300: one row's value is the sum
    assert _refused(dominance.check_rows, spike)
    assert _refused(dominance.check_rows, np.r_[spread[:, 0], np.nan])  # not finite


@pytest.mark.parametrize("seed", range(20))
def test_the_products_bound_never_misses_a_dominated_coordinate(seed):
    """``check_products`` refuses exactly when some coordinate of ``A' diag(w) B`` is
    dominated (the rearrangement bound only spares the exact check)."""
    rng = np.random.default_rng(seed)
    n, p, q = 30, 4, 3
    A, B = rng.normal(size=(n, p)), rng.normal(size=(n, q))
    w = rng.uniform(0.5, 1.5, n)
    if seed % 2:  # a near-indicator: weights ~e^-50 on every row but one
        w = np.full(n, np.exp(-50.0))
        w[rng.integers(n)] = 0.25
    contributions = A[:, :, None] * w[:, None, None] * B[:, None, :]
    expected = _exactly_dominated(contributions.reshape(n, -1), 9, 0.95)
    assert _refused(dominance.check_products, A, B, w) == expected
    # a fit session's design, sorted once and audited again with each round's B
    fixed = dominance.FixedFactor(A)
    for _ in range(2):
        assert _refused(dominance.check_products, fixed, B, w) == expected
    gram = A[:, :, None] * w[:, None, None] * A[:, None, :]
    assert (_refused(dominance.check_products, fixed, fixed, w)
            == _exactly_dominated(gram.reshape(n, -1), 9, 0.95))


@pytest.mark.parametrize("seed", range(20))
def test_the_rows_quick_bound_never_misses_a_dominated_sum(seed):
    """``check_rows`` refuses exactly when a column's largest k make up too much of it
    (k times the largest contribution only spares the sort)."""
    rng = np.random.default_rng(seed)
    C = rng.lognormal(sigma=1 + seed % 4, size=(12 + seed, 3))
    if seed % 3 == 0:
        C[:, 2] = 1e-300
        C[rng.integers(len(C)), 2] = 1.0
    assert _refused(dominance.check_rows, C) == _exactly_dominated(C, 9, 0.95)


@pytest.mark.parametrize("at_or_after", [False, True])
def test_the_grouped_check_is_the_rule_on_its_contributions(at_or_after):
    """``check_groups`` (one value a row, summed per group, or over the groups at or
    after each: a number at risk) refuses exactly when the brute-force rule on the
    ``n x groups`` contributions does, over many random cases of both outcomes."""
    outcomes = []
    for seed in range(150):
        rng = np.random.default_rng(seed)
        n, n_groups = int(rng.integers(1, 60)), int(rng.integers(1, 7))
        values = rng.lognormal(sigma=rng.uniform(0, 3), size=n)
        groups = rng.integers(0, n_groups, n)
        C = np.zeros((n, n_groups))
        for i, g in enumerate(groups):
            if at_or_after:
                C[i, :g + 1] = values[i]
            else:
                C[i, g] = values[i]
        expected = _exactly_dominated(C, 9, 0.95)
        refused = _refused(dominance.check_groups, values, groups, n_groups, "a sum",
                           at_or_after)
        assert refused == expected, seed
        outcomes.append(refused)
    assert 0 < sum(outcomes) < len(outcomes)


def test_outside_an_audit_and_when_suspended_nothing_is_checked():
    spike = np.zeros(20)
    spike[3] = 1.0
    dominance.check_rows(spike)  # in process: no audit, no refusal
    with dominance.audit(10, 0.95), dominance.suspended():
        dominance.check_rows(spike)


# --- the record of row sets -------------------------------------------------------
def _determined_atoms(sets, n, min_rows):
    """Brute force: the groups of rows that no answered set tells apart (atoms) and
    whose indicator lies in the span of the sets (and of all rows)."""
    M = np.array([np.ones(n)] + [s.astype(float) for s in sets]).T
    pattern = [tuple(row) for row in M.astype(int)]
    found = []
    for atom in set(pattern):
        indicator = np.array([p == atom for p in pattern], dtype=float)
        if indicator.sum() >= min_rows:
            continue
        coef = np.linalg.lstsq(M, indicator, rcond=None)[0]
        if np.allclose(M @ coef, indicator, atol=1e-8):
            found.append(atom)
    return found


def _mask(rows, n):
    mask = np.zeros(n, dtype=bool)
    mask[list(rows)] = True
    return mask


def test_the_three_set_tracker_is_refused_and_nothing_recorded():
    n = 40
    P, Q, r = range(0, 15), range(15, 30), 30
    record = RowSetRecord(n, 10)
    record.admit([_mask([*P, r], n)])
    record.admit([_mask([*P, *Q], n)])  # pairwise far apart: both answered
    with pytest.raises(Refused) as info:
        record.admit([_mask(Q, n)])
    assert info.value.rule == "row_sets"
    assert len(record.sets) == 2  # the refused set is not recorded
    record.admit([_mask([*P, *Q], n)])  # a set answered before: answered again


@pytest.mark.parametrize("seed", range(12))
def test_the_record_refuses_exactly_what_brute_force_finds(seed):
    rng = np.random.default_rng(seed)
    n, min_rows = 36, 4
    record, answered = RowSetRecord(n, min_rows), []
    for _ in range(8):
        mask = rng.random(n) < rng.uniform(0.2, 0.8)
        would_single_out = bool(_determined_atoms(answered + [mask], n, min_rows))
        try:
            record.admit([mask])
            refused = False
        except Refused:
            refused = True
        assert refused == would_single_out
        if not refused:
            answered.append(mask)


def test_the_record_survives_a_restart_and_caps_its_sets(tmp_path):
    n = 200
    path = tmp_path / "record.npz"
    record = RowSetRecord(n, 10, path)
    record.admit([_mask(range(0, 100), n)])
    again = RowSetRecord(n, 10, path)  # a restart: the same sets, the same refusals
    assert len(again.sets) == 1
    with pytest.raises(Refused):
        again.admit([_mask(range(0, 99), n)])  # differs by one row from a recorded set
    capped = RowSetRecord(n, 1)
    for k in range(MAX_SETS):
        capped.admit([_mask(range(k, k + 50), n)])
    with pytest.raises(Refused, match="more than"):
        capped.admit([_mask(range(150, 199), n)])


def test_one_analysis_population_keeps_every_analysis_answered():
    """Complete cases over different columns are different row sets; a dataset that
    declares its analysis population reads the same rows for every analysis."""
    n = 1000
    record = RowSetRecord(n, 10)
    for _ in range(MAX_SETS + 10):
        record.admit([np.ones(n, dtype=bool)])
    assert len(record.sets) == 0


def test_the_record_at_ten_thousand_rows_is_compact():
    """The record's cost grows with rows x sets (measured at 10^6 rows in
    benchmarks/bench_site_service.py: about 0.1 s a request, 13 to 23 MiB)."""
    rng = np.random.default_rng(1)
    n = 10_000
    record = RowSetRecord(n, 10)
    started = time.perf_counter()
    for k in range(20):
        record.admit([rng.random(n) < 0.5])
    assert time.perf_counter() - started < 60
    assert record.memory_bytes() < 50 * n * 8


# --- a formula's rules at a site --------------------------------------------------
def _tree(text):
    from skfed.formula._parse import read_factor

    return read_factor(text)["expr"]


@pytest.mark.parametrize("text, domains, refused", [
    ("np.log(bmi)", {"bmi": (10, 60)}, False),
    ("np.log(bmi)", {}, True),
    ("np.log(bmi - 20)", {"bmi": (10, 60)}, True),
    ("np.log(bmi - 5)", {"bmi": (10, 60)}, False),
    ("np.sqrt(age - 40)", {"age": (18, 100)}, True),
    ("I(1 / age)", {"age": (18, 100)}, False),
    ("I(1 / (age - 50))", {"age": (18, 100)}, True),
    ("np.exp(age)", {"age": (18, 100)}, False),
    ("np.exp(age)", {}, True),
    ("I(age ** -2)", {"age": (-5, 5)}, True),
    ("I(age ** 0.5)", {"age": (0, 5)}, False),
    ("I((age - 50) ** 2)", {}, False),
], ids=lambda v: str(v))
def test_a_transform_is_judged_on_the_declared_domain(text, domains, refused):
    try:
        low, high = interval(_tree(text), domains, text)
    except Refused as exc:
        assert refused and exc.rule == "domains"
        return
    assert not refused
    # the range holds every value of the transform on a grid of the domain
    from skfed.formula._design import evaluate

    columns = {c: np.linspace(*domains.get(c, (-50, 50)), 101) for c in ("age", "bmi")}
    site = SiteData("a", pd.DataFrame(columns))
    with np.errstate(all="ignore"):
        values = evaluate(site, _tree(text))
    assert np.all(np.isfinite(values))
    assert low - 1e-9 <= values.min() and values.max() <= high + 1e-9


@pytest.mark.parametrize("text", ["np.abs(age - 50)", "I(2 ** age)", "I(age ** bmi)"])
def test_no_indicator_operator(text):
    with pytest.raises(Refused) as info:
        check_vocabulary(text, _tree(text))
    assert info.value.rule == "formulas"


class _Rules:
    min_rows, min_level_count, allow_exact_quantiles, formulas = 10, 5, False, "closed"

    def __init__(self, **domains):
        self.declared = DatasetConfig("d", None, domains=domains)


def _spline(knots):
    return {"format": "skfed.formula/1", "factors": {"s": {
        "kind": "spline", "basis": "bs", "column": "age", "degree": 0,
        "knots": knots, "include_intercept": True}}}


def test_spline_knots_at_an_approved_grid_only():
    """A degree-0 spline between close knots is a row indicator: each basis function's
    support holds 0 or at least min_rows rows, and the declared range lies within the
    bounds (else a row outside them would answer whether one exists)."""
    site = SiteData("a", pd.DataFrame({"age": np.linspace(20, 80, 40)}))
    rules = _Rules(age=(18.0, 100.0))
    matrix_rules(site, {"design": _spline([18.0, 50.0, 100.0])}, rules)
    with pytest.raises(Refused) as info:  # an interval holding one row
        matrix_rules(site, {"design": _spline([18.0, 49.0, 50.0, 100.0])}, rules)
    assert info.value.rule == "min_rows" and "fewer than 10" in info.value.detail
    with pytest.raises(Refused) as info:
        matrix_rules(site, {"design": _spline([30.0, 50.0, 100.0])}, rules)
    assert info.value.rule == "domains"


def test_the_interval_product_covers_every_sign():
    for a, b in itertools.product([(-2.0, 3.0), (1.0, 2.0), (-4.0, -1.0), (0.0, 0.0)],
                                  repeat=2):
        tree = {"op": "mul", "args": [{"column": "x"}, {"column": "y"}]}
        low, high = interval(tree, {"x": a, "y": b}, "x * y")
        corners = [x * y for x in a for y in b]
        assert math.isclose(low, min(corners)) and math.isclose(high, max(corners))
