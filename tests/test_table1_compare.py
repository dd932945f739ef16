"""Table 1's group comparison (p-value and standardized mean difference) and the
suppression of a numeric column with a few missing values per site."""

import numpy as np
import pandas as pd
from scipy import stats

from skfed.stats import describe


def _cohort(seed=0, n=600, groups=("control", "treated")):
    rng = np.random.default_rng(seed)
    site = np.repeat(["a", "b", "c"], n // 3)
    arm = rng.choice(list(groups), n)
    shift = {g: k for k, g in enumerate(groups)}
    frame = pd.DataFrame({
        "arm": arm,
        "age": rng.normal(60, 10, n) + 2.0 * np.vectorize(shift.get)(arm),
        "bmi": rng.normal(27, 4, n) * (1 + 0.1 * np.vectorize(shift.get)(arm)),
        "sex": rng.choice(["f", "m"], n),
        "stage": rng.choice(["I", "II", "III"], n, p=[0.5, 0.3, 0.2]),
    })
    return frame, site


def test_few_missing_values_per_site_keep_the_pooled_mean():
    """A numeric column with 2 missing values at every site: the missing counts used to
    hide the non-missing counts (their complement) and with them every mean and SD."""
    frame, site = _cohort()
    for s in "abc":
        frame.loc[np.flatnonzero(site == s)[:2], "age"] = np.nan
    result = describe(frame, clients=site, columns=["age", "bmi"], min_level_count=5,
                      per_site=True)
    pooled = result.table[("all", "pooled")]
    np.testing.assert_allclose(pooled[("age", "", "mean")], frame.age.mean(), rtol=1e-12)
    np.testing.assert_allclose(pooled[("age", "", "std")], frame.age.std(), rtol=1e-12)
    assert pooled[("age", "", "count")] == frame.age.count()
    assert pooled[("age", "", "50%")] == frame.age.quantile(0.5)
    for s in "abc":
        rows = frame.age[site == s]
        cell = result.table[("all", s)]
        assert cell[("age", "", "count")] == rows.count()
        np.testing.assert_allclose(cell[("age", "", "mean")], rows.mean(), rtol=1e-12)
    assert not result.mask.loc["age"].to_numpy().any()


def test_few_values_still_hide_their_statistics():
    """The other way round: 3 values at a site are too few for a mean; the count is hidden
    with its statistics, and its complement (the missing count) with it."""
    frame, site = _cohort()
    rows_a = np.flatnonzero(site == "a")
    frame.loc[rows_a[3:], "age"] = np.nan  # site a: 3 values, 197 missing
    result = describe(frame, clients=site, columns=["age"], min_level_count=5,
                      per_site=True, privacy=None)  # the sites' released parts
    mask = result.mask
    for stat in ("count", "missing", "mean", "std", "50%"):
        assert mask.loc[("age", "", stat), ("all", "a")]
        assert mask.loc[("age", "", stat), ("all", "pooled")]
    assert not mask.loc["age", ("all", "b")].any()


def _smd_numeric(a, b):
    return abs(b.mean() - a.mean()) / np.sqrt((a.var() + b.var()) / 2)


def _smd_levels(rows, by, groups):
    """Yang and Dalton's SMD from the rows: the indicator columns of the levels (the first
    left out), their means and (population) covariances in each group."""
    dummies = pd.get_dummies(rows.dropna()).astype(float).iloc[:, 1:]
    g = by[rows.notna()]
    a, b = dummies[g == groups[0]], dummies[g == groups[1]]
    d = (b.mean() - a.mean()).to_numpy()
    s = (np.cov(a.T, ddof=0) + np.cov(b.T, ddof=0)) / 2
    return float(np.sqrt(d @ np.linalg.inv(np.atleast_2d(s)) @ d))


def test_two_groups_equal_scipy_on_the_pooled_rows():
    frame, site = _cohort()
    frame.loc[frame.index[::17], "bmi"] = np.nan
    result = describe(frame, by="arm", clients=site, columns=["age", "bmi", "sex", "stage"],
                      min_level_count=5)
    cmp = result.comparison
    assert list(cmp.index) == ["age", "bmi", "sex", "stage"]
    control, treated = (frame[frame.arm == g] for g in ("control", "treated"))
    for var in ("age", "bmi"):
        ref = stats.ttest_ind(control[var].dropna(), treated[var].dropna(), equal_var=False)
        assert cmp.loc[var, "test"] == "Welch's t-test"
        np.testing.assert_allclose(cmp.loc[var, "statistic"], ref.statistic, rtol=1e-10)
        np.testing.assert_allclose(cmp.loc[var, "df"], ref.df, rtol=1e-10)
        np.testing.assert_allclose(cmp.loc[var, "p_value"], ref.pvalue, rtol=1e-9)
        np.testing.assert_allclose(cmp.loc[var, "smd"],
                                   _smd_numeric(control[var], treated[var]), rtol=1e-10)
    for var in ("sex", "stage"):
        chi2, p, dof, _ = stats.chi2_contingency(pd.crosstab(frame[var], frame.arm),
                                                 correction=False)
        assert cmp.loc[var, "test"] == "Pearson's chi-square"
        np.testing.assert_allclose(cmp.loc[var, ["statistic", "p_value"]].astype(float),
                                   [chi2, p], rtol=1e-10)
        assert cmp.loc[var, "df"] == dof
        np.testing.assert_allclose(cmp.loc[var, "smd"],
                                   _smd_levels(frame[var], frame.arm, ["control", "treated"]),
                                   rtol=1e-10)
    # the binary case of Yang and Dalton: |p1 - p2| / sqrt((p1 q1 + p2 q2) / 2)
    p1, p2 = (g.sex.eq("m").mean() for g in (control, treated))
    np.testing.assert_allclose(cmp.loc["sex", "smd"],
                               abs(p1 - p2) / np.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / 2),
                               rtol=1e-10)
    assert (cmp.note == "").all()
    assert describe(frame, clients=site, columns=["age"]).comparison is None


def test_three_groups_use_the_anova_and_the_mean_pairwise_smd():
    groups = ("low", "mid", "high")
    frame, site = _cohort(seed=1, groups=groups)
    result = describe(frame, by="arm", clients=site, columns=["age", "stage"])
    cmp = result.comparison
    parts = [frame.age[frame.arm == g] for g in sorted(groups)]
    ref = stats.f_oneway(*parts)
    assert cmp.loc["age", "test"] == "one-way ANOVA"
    np.testing.assert_allclose(cmp.loc["age", ["statistic", "p_value"]].astype(float),
                               [ref.statistic, ref.pvalue], rtol=1e-10)
    assert (cmp.loc["age", "df"], cmp.loc["age", "df_denom"]) == (2, len(frame) - 3)
    pairs = [_smd_numeric(parts[i], parts[j]) for i, j in [(0, 1), (0, 2), (1, 2)]]
    np.testing.assert_allclose(cmp.loc["age", "smd"], np.mean(pairs), rtol=1e-10)
    chi2, p, dof, _ = stats.chi2_contingency(pd.crosstab(frame.stage, frame.arm),
                                             correction=False)
    np.testing.assert_allclose(cmp.loc["stage", ["statistic", "p_value"]].astype(float),
                               [chi2, p], rtol=1e-10)


def test_a_suppressed_cell_makes_the_comparison_nan_with_the_reason():
    frame, site = _cohort()
    # 3 treated rows of stage IV at site b: hidden there, and so pooled
    rows = np.flatnonzero((site == "b") & (frame.arm == "treated").to_numpy())[:3]
    frame.loc[rows, "stage"] = "IV"
    # site c's treated ages: only 4 values, too few for a mean
    treated_c = np.flatnonzero((site == "c") & (frame.arm == "treated").to_numpy())
    frame.loc[treated_c[4:], "age"] = np.nan
    result = describe(frame, by="arm", clients=site, columns=["age", "bmi", "stage"],
                      privacy=None)  # the sites' released parts: a site hides its cell
    cmp = result.comparison
    for var in ("age", "stage"):
        assert np.isnan(cmp.loc[var, ["statistic", "p_value", "smd"]].astype(float)).all()
        assert cmp.loc[var, "note"].startswith("not computed: the pooled")
    # (the control group's count at site c is hidden too: its complement along the groups)
    assert "site 'c'" in cmp.loc["age", "note"]
    assert "site 'b'" in cmp.loc["stage", "note"]
    assert np.isfinite(cmp.loc["bmi", "p_value"])


def test_rows_with_a_missing_group_are_not_compared():
    frame, site = _cohort()
    frame.loc[frame.index[::10], "arm"] = None
    result = describe(frame, by="arm", clients=site, columns=["age"])
    kept = frame.dropna(subset=["arm"])
    ref = stats.ttest_ind(*(kept.age[kept.arm == g] for g in ("control", "treated")),
                          equal_var=False)
    np.testing.assert_allclose(result.comparison.loc["age", "p_value"], ref.pvalue,
                               rtol=1e-9)


def test_describe_command_prints_and_writes_the_comparison(tmp_path, capsys):
    import json

    from skfed.cli.main import main
    from skfed.plotting import format_p

    frame, site = _cohort()
    path, out_json = tmp_path / "cohort.csv", tmp_path / "t1.json"
    frame.assign(hospital=site).to_csv(path, index=False)
    assert main(["describe", str(path), "--clients", "hospital", "--by", "arm", "--columns",
                 "age,stage", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    ref = describe(frame, by="arm", clients=site, columns=["age", "stage"]).comparison
    header = next(line for line in out.splitlines() if "p-value" in line)
    assert header.split()[-2:] == ["p-value", "SMD"]
    age = next(line for line in out.splitlines() if line.strip() == "age" or
               line.startswith("age "))
    assert age.split()[-2:] == [format_p(ref.loc["age", "p_value"]),
                                f"{ref.loc['age', 'smd']:.3f}"]
    rows = {r["variable"]: r for r in json.loads(out_json.read_text())["comparison"]}
    assert rows["stage"]["test"] == "Pearson's chi-square"
    np.testing.assert_allclose(rows["stage"]["p_value"], ref.loc["stage", "p_value"],
                               rtol=1e-15)
