"""Table 1 from pooled cells (issue 36, item 2).

lifelines' gbsg2 (686 patients) in three hospitals split by tumour size, 10 menostat
values missing (5 per arm, 1 or 2 per hospital and arm): each site's suppression of its
small cells blanks menostat in both arms; under secure aggregation the pooled cells are
masked sums and nothing of menostat is hidden. Every shown pooled cell equals pandas on
the pooled rows, in process and through real site services (gRPC, mutual TLS), with and
without secure aggregation. The cells released together (pooled, per-site and by-group
columns, margins) are attacked by every subtraction at once: a linear program over every
additive relation among the shown cells must leave each hidden count two values or more.
"""

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import linprog
from scipy.stats import chi2_contingency

from skfed import FederatedDataset
from skfed.stats import crosstab, describe

pytest.importorskip("cryptography")
pytest.importorskip("lifelines")

from skfed.privacy import SecureAggregation  # noqa: E402

NUMERIC, CATEGORICAL = ["age", "tsize", "pnodes"], ["menostat", "tgrade"]
QUANTILES = (0.25, 0.5, 0.75)
N_ROW = ("N", "", "count")


def _gbsg2():
    """gbsg2 in three hospitals by tumour size; 10 menostat values missing, 5 per arm and
    at most 2 per hospital and arm; 6 ages missing (2 per hospital)."""
    from lifelines.datasets import load_gbsg2

    df = load_gbsg2()
    rank = df.tsize.rank(method="first").to_numpy() - 1
    site = np.array(["h1", "h2", "h3"])[(rank * 3 // len(df)).astype(int)]
    df["age"] = df["age"].astype(float)
    per = {("no", "h1"): 2, ("no", "h2"): 2, ("no", "h3"): 1,
           ("yes", "h1"): 1, ("yes", "h2"): 2, ("yes", "h3"): 2}
    for (arm, s), n in per.items():
        rows = np.flatnonzero((df.horTh == arm).to_numpy() & (site == s))
        df.loc[rows[:n], "menostat"] = None
        if arm == "no":
            df.loc[rows[-2:], "age"] = np.nan
    return df, site


def _expected(rows, variable, level, statistic):
    """pandas' number of one Table 1 cell on ``rows``."""
    if variable == "N":
        return len(rows)
    x = rows[variable]
    if statistic == "missing":
        return x.isna().sum()
    if variable in CATEGORICAL:
        return (x == level).sum()
    if statistic in ("count", "mean", "std"):
        return getattr(x, statistic)()
    return x.quantile(float(statistic[:-1]) / 100)


def _check_pooled(result, df, groups):
    """Every shown pooled cell equals pandas on the pooled rows of its group; returns how
    many were compared."""
    checked = 0
    for g in groups:
        rows = df if g == "all" else df[df.horTh == g]
        column = result.table[(g, "pooled")]
        for (variable, level, statistic), got in column.items():
            if result.mask.loc[(variable, level, statistic), (g, "pooled")]:
                continue
            want = _expected(rows, variable, level, statistic)
            if statistic in ("mean", "std"):
                np.testing.assert_allclose(got, want, rtol=1e-13, err_msg=str((g, variable)))
            else:  # counts and quantiles: pandas' numbers exactly
                assert got == want, (g, variable, level, statistic, got, want)
            checked += 1
    return checked


@pytest.mark.parametrize("secure", [False, True])
def test_pooled_table1_equals_pandas_on_the_pooled_rows(secure):
    df, site = _gbsg2()
    result = describe(df, by="horTh", columns=NUMERIC + CATEGORICAL, clients=site,
                      quantiles=QUANTILES, privacy=SecureAggregation() if secure else None)
    # the default is the pooled Table 1: one column per group
    assert list(result.table.columns) == [("all", "pooled"), ("no", "pooled"),
                                          ("yes", "pooled")]
    assert result.masked == secure
    checked = _check_pooled(result, df, ["all", "no", "yes"])
    if secure:  # every pooled cell holds at least 5 rows: nothing is hidden
        assert not result.mask.to_numpy().any() and result.suppressed.empty
        assert checked == result.table.size
    else:
        assert checked >= result.table.size - 12
    comparison = result.comparison
    for variable in CATEGORICAL:  # the p-value from the pooled counts: scipy's
        if np.isnan(comparison.loc[variable, "p_value"]):
            assert not secure
            continue
        ref = chi2_contingency(pd.crosstab(df[variable], df.horTh), correction=False)
        np.testing.assert_allclose(comparison.loc[variable, "p_value"], ref[1], rtol=1e-10)


def test_a_few_missing_values_no_longer_blank_menostat():
    """The issue's case: 10 missing menostat values over 3 sites x 2 arms. Suppressed at
    each site, the missing counts and a level are hidden in both arms, and the p-value;
    from masked sums, every pooled cell holds 5 rows or more and all are shown."""
    df, site = _gbsg2()
    plain = describe(df, by="horTh", columns=["menostat"], clients=site, privacy=None)
    for arm in ("no", "yes"):  # the missing count and a level with it, in both arms
        hidden = plain.mask.loc["menostat", (arm, "pooled")]
        assert hidden.loc[("", "missing")] and hidden.sum() >= 2
    assert np.isnan(plain.comparison.loc["menostat", "p_value"])
    assert "privacy=SecureAggregation()" in plain.note
    pooled = describe(df, by="horTh", columns=["menostat"], clients=site,
                      privacy=SecureAggregation())
    assert not pooled.mask.to_numpy().any()
    # the default pools the cells first (masked sums over two sites or more)
    default = describe(df, by="horTh", columns=["menostat"], clients=site)
    pd.testing.assert_frame_equal(default.table, pooled.table)
    expected = pd.crosstab(df.menostat.fillna("<missing>"), df.horTh)
    for arm in ("no", "yes"):
        for level in ("Post", "Pre"):
            assert pooled.table.loc[("menostat", level, "count"), (arm, "pooled")] == \
                expected.loc[level, arm]
        assert pooled.table.loc[("menostat", "", "missing"), (arm, "pooled")] == 5
    assert pooled.comparison.loc["menostat", "p_value"] == pytest.approx(
        chi2_contingency(pd.crosstab(df.menostat, df.horTh), correction=False)[1],
        rel=1e-10)


# -- the subtraction attack ---------------------------------------------------------
def _released(result):
    """The count cells a result shows and hides: ``{(row, group, site): value}`` and the
    hidden ones, read from its table (not from skfed's own bookkeeping)."""
    values, hidden = {}, set()
    for row in result.table.index:
        if row != N_ROW and row[2] not in ("count", "missing"):
            continue
        for g, s in result.table.columns:
            cell = (row, g, s)
            if result.mask.loc[row, (g, s)]:
                hidden.add(cell)
            else:
                values[cell] = float(result.table.loc[row, (g, s)])
    return values, hidden


def _relations(result):
    """Every additive relation among a Table 1's count cells, written out here: the
    levels and missing count of a variable add up to its group's rows, the groups to all
    rows, the sites to the pooled cell."""
    rows = [r for r in result.table.index if r == N_ROW or r[2] in ("count", "missing")]
    groups = [g for g in result.table.columns.get_level_values("group").unique()
              if g != "all"]
    sites = [s for s in result.table.columns.get_level_values("site").unique()
             if s != "pooled"]
    variables = {}
    for r in rows[1:]:
        variables.setdefault(r[0], []).append(r)
    out = []
    for s in sites + ["pooled"]:
        for g in groups + ["all"]:
            out += [((N_ROW, g, s), [(r, g, s) for r in rs]) for rs in variables.values()]
        if groups:
            out += [((r, "all", s), [(r, g, s) for g in groups]) for r in rows]
    if sites:
        out += [((r, g, "pooled"), [(r, g, s) for s in sites])
                for g in groups + ["all"] for r in rows]
    return out


def _attack(values, hidden, relations):
    """Each hidden cell's least and largest value under every relation at once (counts
    >= 0): the cells pinned to one integer, with it."""
    hidden = sorted(hidden, key=repr)
    index = {c: j for j, c in enumerate(hidden)}
    A, b = [], []
    for total, parts in relations:
        row, rhs = np.zeros(len(hidden)), 0.0
        for cell, sign in [(total, -1.0)] + [(p, 1.0) for p in parts]:
            if cell in index:
                row[index[cell]] += sign
            else:
                rhs -= sign * values[cell]
        if row.any():
            A.append(row)
            b.append(rhs)
        else:  # a relation among shown cells only must hold
            assert abs(rhs) < 1e-9, (total, rhs)
    pinned = {}
    for cell, j in index.items():
        ends = []
        for sign in (1.0, -1.0):
            c = np.zeros(len(hidden))
            c[j] = sign
            res = linprog(c, A_eq=np.array(A), b_eq=np.array(b), bounds=(0, None),
                          method="highs")
            ends.append(np.inf if res.status == 3 else sign * res.fun)
        if np.floor(ends[1] + 1e-6) - np.ceil(ends[0] - 1e-6) < 1:
            pinned[cell] = ends[0]
    return pinned


def _split_level(counts):
    """Rows whose column ``x`` takes level "rare" ``counts[s]`` times at site ``s`` (the
    issue's pooled 15 beside a site's 6 and 7 and a third site's 2), two arms."""
    rng = np.random.default_rng(0)
    frames = []
    for s, n_rare in counts.items():
        n = 60
        x = np.array(["rare"] * n_rare + list(rng.choice(["a", "b"], n - n_rare)))
        arm = np.where(np.arange(n) % 2 == 0, "A", "B")
        frames.append(pd.DataFrame({"x": x, "arm": arm, "site": s}))
    return pd.concat(frames, ignore_index=True)


def test_the_issues_subtraction_is_closed():
    """A pooled 15 beside a site's 6 and 7 would give back the third site's 2: the audit
    hides another cell, and no combination of the relations pins any hidden cell."""
    df = _split_level({"s1": 6, "s2": 7, "s3": 2})
    result = describe(df, columns=["x"], clients="site", per_site=True,
                      privacy=SecureAggregation())
    table, mask = result.table, result.mask
    rare = ("x", "rare", "count")
    assert table.loc[rare, ("all", "pooled")] == 15  # shown: 15 rows pooled
    assert mask.loc[rare, ("all", "s3")]  # hidden at the site (2 rows)
    assert mask.loc[rare, [("all", "s1"), ("all", "s2")]].any()  # the second hidden cell
    values, hidden = _released(result)
    assert not _attack(values, hidden, _relations(result))


def test_the_attack_recovers_a_cell_when_the_audit_is_off(monkeypatch):
    """The attack is not vacuous: without the secondary suppression the third site's 2
    follows from the pooled 15 and the other sites' 6 and 7."""
    from skfed.stats._cells import CountCells

    monkeypatch.setattr(CountCells, "audit", lambda self: {})
    df = _split_level({"s1": 6, "s2": 7, "s3": 2})
    result = describe(df, columns=["x"], clients="site", per_site=True,
                      privacy=SecureAggregation())
    values, hidden = _released(result)
    pinned = _attack(values, hidden, _relations(result))
    assert pinned[(("x", "rare", "count"), "all", "s3")] == pytest.approx(2)


@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("per_site", [False, True])
def test_no_hidden_cell_follows_from_the_shown_ones(secure, per_site):
    """Every released table set of gbsg2 by arm (small cells at the sites and pooled,
    strata, per-site columns or not), attacked by every subtraction at once."""
    df, site = _gbsg2()
    df.loc[np.flatnonzero(site == "h3")[:3], "tgrade"] = "IV"  # a rare level at one site
    result = describe(df, by="horTh", columns=["age"] + CATEGORICAL, clients=site,
                      quantiles=(), per_site=per_site,
                      privacy=SecureAggregation() if secure else None)
    values, hidden = _released(result)
    assert hidden  # there is something to attack
    assert not _attack(values, hidden, _relations(result))
    assert len(result.suppressed) == sum(
        1 for row, g, s in hidden)  # every hidden count has its reason
    assert _check_pooled(result, df, ["all", "no", "yes"]) > 20


# -- per-site columns -------------------------------------------------------------------
def test_per_site_columns_only_when_asked():
    df, site = _gbsg2()
    result = describe(df, by="horTh", columns=NUMERIC + CATEGORICAL, clients=site,
                      per_site=True, privacy=SecureAggregation(), quantiles=QUANTILES)
    assert result.sites == ["h1", "h2", "h3"]
    checked = 0
    for s in result.sites:  # each site's own column, suppressed at the site
        for g in ("all", "no", "yes"):
            rows = df[(site == s) & ((df.horTh == g).to_numpy() | (g == "all"))]
            for (variable, level, statistic), got in result.table[(g, s)].items():
                if result.mask.loc[(variable, level, statistic), (g, s)]:
                    continue
                want = _expected(rows, variable, level, statistic)
                np.testing.assert_allclose(got, want, rtol=1e-12)
                checked += 1
    assert checked > 200
    # menostat's missing counts (1 to 4 per site) are hidden at the sites, shown pooled
    assert result.mask.loc[("menostat", "", "missing"), ("all", "h1")]
    assert not result.mask.loc[("menostat", "", "missing"), ("all", "pooled")]
    assert "at site 'h1'" in " ".join(result.suppressed.reason)


# -- the cross-table ----------------------------------------------------------------------
@pytest.mark.parametrize("secure", [False, True])
def test_crosstab_pooled_equals_pandas_and_scipy(secure):
    df, site = _gbsg2()
    result = crosstab(df, "horTh", "menostat", clients=site,
                      privacy=SecureAggregation() if secure else None)
    expected = pd.crosstab(df.horTh, df.menostat)
    assert list(result.by_site.index.get_level_values("site").unique()) == ["pooled"]
    if secure:
        pd.testing.assert_frame_equal(result.table, expected.astype(float),
                                      check_names=False)
        ref = chi2_contingency(expected.to_numpy(), correction=False)
        np.testing.assert_allclose([result.chi2, result.p_value], ref[:2], rtol=1e-12)
        assert result.n_missing == df.menostat.isna().sum()
        assert not result.mask.to_numpy().any()  # 5 missing values per arm: shown
    else:  # the missing values' cells, hidden at each site, hide their pooled cells
        assert result.mask.to_numpy().any()
        shown = result.table.notna().to_numpy()
        np.testing.assert_array_equal(result.table.to_numpy()[shown],
                                      expected.to_numpy()[shown])


# -- through site services ----------------------------------------------------------------
SERVICE_POLICY = "min_rows = 10\nallow_exact_quantiles = true"


@pytest.fixture(scope="module")
def gbsg2_services(tmp_path_factory):
    """gbsg2's three hospitals at three site services (this process, gRPC over mutual
    TLS) that allow exact quantiles, and the same rows in process."""
    pytest.importorskip("grpc")
    from ._sites import SITES, services_of

    df, site = _gbsg2()
    labels = np.array(SITES)[np.searchsorted(["h1", "h2", "h3"], site)]
    frames = [df[labels == s].reset_index(drop=True) for s in SITES]
    local = FederatedDataset.from_arrays(pd.concat(frames, ignore_index=True),
                                         clients=np.repeat(SITES, [len(f) for f in frames]))
    with services_of(tmp_path_factory.mktemp("table1"), frames, policy=SERVICE_POLICY,
                     dataset="gbsg2") as data:
        yield data, local


@pytest.mark.parametrize("secure, per_site", [(False, True), (True, False), (True, True)])
def test_through_services_equals_in_process(gbsg2_services, secure, per_site):
    """The same table through the services as in process (and so pandas' numbers): the
    pooled cells as masked sums or as the sites' released parts, per site when asked."""
    data, local = gbsg2_services
    options = dict(by="horTh", columns=NUMERIC + CATEGORICAL, quantiles=QUANTILES,
                   per_site=per_site, privacy=SecureAggregation() if secure else None)
    remote, here = describe(data, **options), describe(local, **options)
    pd.testing.assert_frame_equal(remote.table, here.table)
    pd.testing.assert_frame_equal(remote.mask, here.mask)
    pd.testing.assert_frame_equal(remote.suppressed, here.suppressed)
    df, _ = _gbsg2()
    assert _check_pooled(remote, df, ["all", "no", "yes"]) > 40
    if secure and not per_site:
        assert not remote.mask.to_numpy().any()
    ct = dict(privacy=options["privacy"], per_site=per_site)
    pd.testing.assert_frame_equal(crosstab(data, "horTh", "menostat", **ct).by_site,
                                  crosstab(local, "horTh", "menostat", **ct).by_site)


def test_a_site_requiring_secure_aggregation_serves_the_pooled_table_only(tmp_path):
    """Where every site requires secure aggregation, their own counts never leave in the
    clear: the pooled Table 1 comes from masked sums, per-site columns are refused."""
    pytest.importorskip("grpc")
    from skfed.sites import SiteRefusal

    from ._sites import SITES, services_of

    df, site = _gbsg2()
    frames = [df[site == s].reset_index(drop=True) for s in ("h1", "h2", "h3")]
    policy = ('require = ["secure_aggregation"]\nconsortium = ['
              + ", ".join(f'"{s}"' for s in SITES) + "]")
    with services_of(tmp_path, frames, policy=policy, dataset="gbsg2") as data:
        result = describe(data, by="horTh", columns=["age"] + CATEGORICAL, quantiles=(),
                          privacy=SecureAggregation())
        assert not result.mask.to_numpy().any()
        assert _check_pooled(result, df, ["all", "no", "yes"]) == result.table.size
        with pytest.raises(SiteRefusal) as info:  # the sites' own releases: refused
            describe(data, by="horTh", columns=["menostat"], quantiles=(), privacy=None)
        assert info.value.rule == "require"
        default = describe(data, by="horTh", columns=["menostat"], quantiles=())
        assert default.masked and not default.mask.to_numpy().any()  # masked by default
        with pytest.raises(SiteRefusal):
            describe(data, by="horTh", columns=["menostat"], quantiles=(), per_site=True,
                     privacy=SecureAggregation())


# -- as a journal prints it -----------------------------------------------------------------
LABELS = {"age": "Age (years)", "tsize": "Tumour size (mm)", "menostat": "Menopausal status",
          "horTh": "Hormone therapy"}


def _journal_result(secure=True):
    df, site = _gbsg2()
    df["node_positive"] = df.pnodes > 3  # a binary column: one row
    return df, describe(df, by="horTh", columns=["age", "tsize", "menostat", "tgrade",
                                                 "node_positive"],
                        clients=site, labels=LABELS,
                        privacy=SecureAggregation() if secure else None)


def test_the_laid_out_table_has_labels_group_n_binary_rows_and_missing_where_present():
    df, result = _journal_result()
    frame = result.to_frame()
    assert list(frame.columns) == ["Overall (n = 686)", "no (n = 440)", "yes (n = 246)",
                                   "p-value", "SMD"]
    labels = [label.strip() for label in frame.index]
    assert "Age (years)" in labels and "Tumour size (mm)" in labels
    assert "Menopausal status, n (%)" in labels
    # missing rows only where values are missing: age (6) and menostat (10), not tsize
    rows = list(frame.index)
    after = {v: rows[rows.index(label) + 1:] for v, label in
             [("age", "Age (years)"), ("tsize", "Tumour size (mm)")]}
    assert "  missing" in after["age"][:3] and "  missing" not in after["tsize"][:3]
    assert frame.loc["  missing"].iloc[0, 0] == "6 (0.9%)"  # age's, of 686
    # a binary column: one row, the n (%) of True, with its p-value on it
    n = int(df.node_positive.sum())
    assert frame.loc["node_positive, n (%)", "Overall (n = 686)"] == \
        f"{n} ({100 * n / len(df):.1f}%)"
    assert frame.loc["node_positive, n (%)", "p-value"] != ""
    # numbers with fixed decimals: mean (SD), median [Q1, Q3]
    yes = df[df.horTh == "yes"].age
    assert frame.loc["  mean (SD)", "yes (n = 246)"].iloc[0] == \
        f"{yes.mean():.1f} ({yes.std():.1f})"


def test_exports_to_csv_latex_and_word(tmp_path):
    import csv
    import re

    _, result = _journal_result(secure=False)  # suppressed cells, with footnotes
    frame = result.to_frame()
    assert frame.attrs["footnotes"]
    path = tmp_path / "table1.csv"
    assert result.to_csv(path) is None
    rows = list(csv.reader(open(path, encoding="utf-8")))
    assert rows[0] == ["Variable"] + list(frame.columns)
    body = rows[1:1 + len(frame)]
    assert [r[0] for r in body] == list(frame.index)
    assert [r[1:] for r in body] == frame.to_numpy().tolist()
    assert rows[-1][0].startswith(f"[{len(frame.attrs['footnotes'])}] ")
    latex = result.to_latex()
    assert latex.count(r"\\") >= len(frame) + 1 and r"\toprule" in latex
    assert r"Age (years)" in latex and r"n (\%)" in latex and "$^{1}$" in latex
    docx = pytest.importorskip("docx")
    result.to_docx(tmp_path / "table1.docx")
    document = docx.Document(tmp_path / "table1.docx")
    table = document.tables[0]
    header = [c.text for c in table.rows[0].cells]
    assert header == [""] + list(frame.columns)
    texts = [[c.text for c in row.cells] for row in table.rows[1:]]
    # the suppressed cells' footnote numbers are superscripts: "<5" + "1"
    assert [t[1:] for t in texts] == [[re.sub(r" \[(\d+)\]$", r"\1", v) for v in row]
                                      for row in frame.to_numpy().tolist()]
    paragraphs = [p.text for p in document.paragraphs]
    for k, reason in enumerate(frame.attrs["footnotes"], start=1):
        assert f"{k} {reason.split('] ', 1)[1]}" in paragraphs


def test_word_export_without_python_docx_names_the_extra(tmp_path, monkeypatch):
    import sys

    _, result = _journal_result()
    monkeypatch.setitem(sys.modules, "docx", None)
    with pytest.raises(ImportError, match=r"python-docx \(pip install 'skfed\[word\]'\)"):
        result.to_docx(tmp_path / "table1.docx")


def test_two_hidden_cells_per_line_can_still_pin_one():
    """Two rectangles of hidden cells joined by one more hidden cell: every line of the
    table holds two hidden cells or none, yet the joining cell (a bridge between two
    cycles) follows from the shown cells; the audit finds it, and protects it."""
    from skfed.stats._audit import pinned_cells, protect
    from skfed.stats._suppress import with_margins

    rng = np.random.default_rng(0)
    table = with_margins(rng.integers(5, 20, size=(4, 4)))
    cells = [(i, j) for i in range(5) for j in range(5)]
    values = {c: int(table[c]) for c in cells}
    relations = ([((i, 4), [(i, j) for j in range(4)]) for i in range(5)]
                 + [((4, j), [(i, j) for i in range(4)]) for j in range(5)])
    bridge = (1, 2)
    hidden = {(0, 0), (0, 1), (1, 0), (1, 1), (2, 2), (2, 3), (3, 2), (3, 3), bridge}
    for total, parts in relations:  # no line with exactly one hidden cell
        assert sum(c in hidden for c in (total, *parts)) != 1
    shown = {c: v for c, v in values.items() if c not in hidden}
    assert pinned_cells(shown, hidden, relations) == [bridge]
    assert _attack(shown, hidden, relations) == {bridge: pytest.approx(values[bridge])}
    added = protect(shown, hidden, relations, cost=lambda c: shown[c],
                    reason=lambda c, r: "complementary")
    assert added and not _attack({c: v for c, v in values.items() if c not in hidden},
                                 hidden, relations)


def test_the_command_line_pools_labels_and_exports(tmp_path, capsys):
    """skfed describe --secure-aggregation: the pooled table (menostat shown in both arms),
    each arm's n in the header, labels, and the table written as CSV, LaTeX and Word."""
    from skfed.cli.main import main

    df, site = _gbsg2()
    df["hospital"] = site
    path = tmp_path / "gbsg2.csv"
    df.to_csv(path, index=False)
    base = ["describe", str(path), "--clients", "hospital", "--by", "horTh", "--columns",
            "age,menostat,tgrade", "--label", "age=Age (years)", "--label",
            "menostat=Menopausal status"]
    assert main(base + ["--no-secure-aggregation"]) == 0  # the sites' released parts
    plain = capsys.readouterr().out
    assert "not pooled: site" in plain and "--secure-aggregation pools" in plain
    outputs = ["--csv", str(tmp_path / "t1.csv"), "--latex", str(tmp_path / "t1.tex")]
    if __import__("importlib").util.find_spec("docx") is not None:
        outputs += ["--docx", str(tmp_path / "t1.docx")]
    assert main(base + outputs) == 0  # the default: masked pooled cells
    out = capsys.readouterr().out
    assert "Overall (n = 686)" in out and "no (n = 440)" in out and "yes (n = 246)" in out
    assert "Age (years)" in out and "Menopausal status, n (%)" in out
    missing = [ln for ln in out.splitlines() if ln.strip().startswith("missing")]
    assert any("5 (1.1%)" in ln and "5 (2.0%)" in ln for ln in missing)  # 5 of 440, of 246
    assert "No cell is suppressed." in out and "masked sums" in out
    for i in range(0, len(outputs), 2):
        assert (tmp_path / outputs[i + 1].rsplit("/", 1)[1]).exists()
    csv_text = (tmp_path / "t1.csv").read_text()
    assert csv_text.startswith("Variable,Overall (n = 686),no (n = 440),yes (n = 246)")


def test_bad_privacy_labels_and_sites_are_named():
    from skfed.privacy import DifferentialPrivacy

    df, site = _gbsg2()
    with pytest.raises(ValueError, match="SecureAggregation"):
        describe(df, columns=["age"], clients=site, privacy=DifferentialPrivacy(epsilon=1.0))
    with pytest.raises(ValueError, match="secure aggregation needs at least two sites"):
        describe(df, columns=["age"], clients=np.zeros(len(df)),
                 privacy=SecureAggregation())
    with pytest.raises(ValueError, match="labels names 'weight'"):
        describe(df, columns=["age"], clients=site, labels={"weight": "Weight (kg)"})
    with pytest.raises(ValueError, match="the label of 'age' must be non-empty text"):
        describe(df, columns=["age"], clients=site, labels={"age": ""})
    with pytest.raises(ValueError, match="labels must be a dict"):
        describe(df, columns=["age"], clients=site, labels=["Age"])
    with pytest.raises(ValueError, match="SecureAggregation"):
        crosstab(df, "horTh", "menostat", clients=site, privacy="secure")


def test_a_modified_client_gets_no_raw_counts_in_the_clear(tmp_path):
    """The pooled cells' operations count every level, small ones included: asked in the
    clear over the raw transport (not inside a masked sum), the site refuses them (rule
    finer_sums), and names its levels without counts."""
    pytest.importorskip("grpc")
    from skfed.sites import SiteRefusal

    from ._sites import diabetes_service

    dataset = {"name": "visits", "target": "target", "drop": [], "sample_weight": None}
    with diabetes_service(tmp_path, "min_rows = 10") as conn:
        levels = conn.call("stats.levels", dataset=dataset, columns=["sex", "age"], by="sex")
        assert levels["kinds"] == {"sex": "numeric", "age": "numeric"}
        assert len(levels["strata"]) == 2 and set(levels["strata"].values()) == {True}
        layout = {"strata": list(levels["strata"]), "levels": {}}
        with pytest.raises(SiteRefusal) as info:
            conn.call("stats.table_counts", dataset=dataset, columns=["bmi"], by="sex",
                      layout=layout)
        assert info.value.rule == "finer_sums"
        with pytest.raises(SiteRefusal) as info:
            conn.call("stats.table_sums", dataset=dataset, columns=["bmi"], by="sex",
                      layout=layout, centers=[[0.0] * 4], power=1)
        assert info.value.rule == "finer_sums"


@pytest.mark.parametrize("secure", [False, True])
def test_a_binary_code_is_one_row_through_services(gbsg2_services, secure):
    """gbsg2's event indicator (0/1, numbers at the sites) named categorical: one n (%)
    row, the count of 1s, through the services as in process."""
    data, local = gbsg2_services
    options = dict(by="horTh", columns=["cens", "age"], categorical=["cens"], quantiles=(),
                   privacy=SecureAggregation() if secure else None)
    remote = describe(data, **options)
    pd.testing.assert_frame_equal(remote.table, describe(local, **options).table)
    frame = remote.to_frame()
    df, _ = _gbsg2()
    row = frame.loc["cens, n (%)"]
    n = int(df.cens.sum())
    assert row.iloc[0] == f"{n} ({100 * n / len(df):.1f}%)"
    assert "  1" not in frame.index and "  0" not in frame.index
    with pytest.raises(ValueError, match="categorical names 'time'"):
        describe(local, columns=["age"], categorical=["time"])
