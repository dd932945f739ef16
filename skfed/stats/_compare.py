"""Table 1's comparison of the groups of ``by``: a p-value and the standardized mean
difference per variable, from the pooled cells :func:`~skfed.stats.describe` released.

The tests are tableone's (Python) defaults, computed from pooled summaries
instead of rows, so they equal scipy's on the pooled rows:

- numeric, two groups: Welch's t-test (``scipy.stats.ttest_ind(...,
  equal_var=False)``) from each group's count, mean and SD;
- numeric, three or more groups: the one-way ANOVA F test
  (``scipy.stats.f_oneway``) from the same;
- categorical: Pearson's chi-square test of the levels x groups table of the
  pooled counts, missing values left out, without continuity correction
  (``scipy.stats.chi2_contingency(..., correction=False)``, as
  :func:`~skfed.stats.crosstab`).

The standardized mean difference (SMD) is R tableone's: for a numeric
variable ``|m2 - m1| / sqrt((s1^2 + s2^2) / 2)`` (Cohen's d with the mean of
the two variances), for a categorical one Yang and Dalton's (2012)
``sqrt(d' S^-1 d)`` over the levels but the first (``d`` the difference of
the level proportions, ``S`` the mean of the two groups' multinomial
covariances); with three or more groups the mean of the pairwise SMDs.
"""

import itertools

import numpy as np
import pandas as pd
from scipy import stats

#: the columns of :attr:`DescribeResult.comparison`
COLUMNS = ["test", "statistic", "df", "df_denom", "p_value", "smd", "note"]

POOLED = "pooled"


class _Hidden(Exception):
    """A pooled cell the comparison needs was suppressed (the message: why)."""


class _PooledCells:
    """The pooled cells of a :class:`~skfed.stats.DescribeResult`, with the reason of
    each hidden one."""

    def __init__(self, result):
        self.table, self.mask = result.table, result.mask
        self.why = {(r.variable, r.level, r.statistic, r.group, r.site): r.reason
                    for r in result.suppressed.itertuples()}

    def get(self, var, level, stat, group):
        """The pooled value of ``(var, level, stat)`` in ``group``, or :class:`_Hidden`."""
        row, col = (var, level, stat), (group, POOLED)
        if not self.mask.loc[row, col]:
            return float(self.table.loc[row, col])
        # a hidden mean or SD has no reason of its own: its count's
        reason = self.why.get((*row, *col)) or self.why.get((var, "", "count", *col))
        raise _Hidden(f"not computed: the pooled {stat} of {var!r} in group {group!r} is "
                      f"suppressed ({reason})")


def _row(test, statistic=np.nan, df=np.nan, df_denom=np.nan, p_value=np.nan, smd=np.nan,
         note=""):
    return [test, float(statistic), float(df), float(df_denom), float(p_value), float(smd),
            note]


def _mean_pairwise(values):
    """The mean over the pairs of groups (R tableone's SMD of three or more groups)."""
    return float(np.mean(values)) if values else np.nan


def _numeric(cells, var, groups):
    """Welch's t-test (two groups) or the one-way ANOVA, and the SMD, of ``var``."""
    test = "Welch's t-test" if len(groups) == 2 else "one-way ANOVA"
    try:
        n = np.array([cells.get(var, "", "count", g) for g in groups])
        mean = np.array([cells.get(var, "", "mean", g) for g in groups])
        sd = np.array([cells.get(var, "", "std", g) for g in groups])
    except _Hidden as hidden:
        return _row(test, note=str(hidden))
    few = [str(g) for g, k in zip(groups, n) if k < 2]
    if few:
        return _row(test, note=f"not computed: fewer than 2 values of {var!r} in group(s) "
                               + ", ".join(few))
    var_ = sd ** 2
    smd = _mean_pairwise([abs(mean[j] - mean[i]) / np.sqrt((var_[i] + var_[j]) / 2)
                          for i, j in itertools.combinations(range(len(groups)), 2)])
    if len(groups) == 2:
        se2 = var_ / n
        t = (mean[0] - mean[1]) / np.sqrt(se2.sum())
        df = se2.sum() ** 2 / np.sum(se2 ** 2 / (n - 1))  # Welch-Satterthwaite
        return _row(test, t, df, p_value=2 * stats.t.sf(abs(t), df), smd=smd)
    total = n.sum()
    grand = np.sum(n * mean) / total
    between, within = np.sum(n * (mean - grand) ** 2), np.sum((n - 1) * var_)
    df1, df2 = len(groups) - 1, total - len(groups)
    f = (between / df1) / (within / df2)
    return _row(test, f, df1, df2, stats.f.sf(f, df1, df2), smd)


def _yang_dalton(p1, p2):
    """Yang and Dalton's SMD of two groups' level proportions (the first level left out,
    as tableone does)."""
    d, covs = (p2 - p1)[1:], []
    for p in (p1[1:], p2[1:]):
        cov = -np.outer(p, p)
        cov[np.diag_indices_from(cov)] = p * (1 - p)
        covs.append(cov)
    try:
        return float(np.sqrt(d @ np.linalg.solve((covs[0] + covs[1]) / 2, d)))
    except np.linalg.LinAlgError:
        return np.nan


def _categorical(cells, var, levels, groups):
    """Pearson's chi-square test of levels x groups, and the SMD, of ``var``."""
    test = "Pearson's chi-square"
    try:
        counts = np.array([[cells.get(var, lv, "count", g) for g in groups] for lv in levels])
    except _Hidden as hidden:
        return _row(test, note=str(hidden))
    counts = counts[counts.sum(axis=1) > 0]  # a level no compared row has
    if len(counts) < 2 or (counts.sum(axis=0) == 0).any():
        return _row(test, note=f"not computed: {var!r} has fewer than two levels, or a "
                               "group has no value of it")
    chi2, p, dof, expected = stats.chi2_contingency(counts, correction=False)
    shares = counts / counts.sum(axis=0)
    smd = _mean_pairwise([_yang_dalton(shares[:, i], shares[:, j])
                          for i, j in itertools.combinations(range(len(groups)), 2)])
    note = ("an expected count is below 5: the chi-square approximation is rough"
            if expected.min() < 5 else "")
    return _row(test, chi2, dof, p_value=p, smd=smd, note=note)


def compare_groups(result, kinds, groups):
    """The comparison of ``groups`` for each described variable.

    Parameters
    ----------
    result : DescribeResult
        The pooled cells (``table``, ``mask``, ``suppressed``).
    kinds : dict
        ``{variable: "numeric" | "categorical"}``.
    groups : list
        The levels of ``by`` compared (two or more; rows whose ``by`` is
        missing are not).

    Returns
    -------
    comparison : pandas.DataFrame
        Index: the variables; columns ``test``, ``statistic`` (t, F or
        chi-square), ``df``, ``df_denom`` (the F test's), ``p_value``,
        ``smd`` and ``note`` (why a value is NaN: the suppressed cell and its
        reason; or a caveat).
    """
    cells = _PooledCells(result)
    rows = {}
    for var, kind in kinds.items():
        if kind == "numeric":
            rows[var] = _numeric(cells, var, groups)
        else:
            part = result.table.loc[var]
            levels = [lv for lv, stat in part.index if stat == "count" and lv != ""]
            rows[var] = _categorical(cells, var, levels, groups)
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=COLUMNS)
    frame.index.name = "variable"
    return frame
