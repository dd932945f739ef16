"""The likelihood-ratio test of a variance component, with its boundary-corrected p.

Under the null a variance is 0, on the edge of its range, so twice the
log-likelihood ratio is not chi-square with the dropped parameters' count as
its degrees of freedom: for one variance it is the 50:50 mixture of chi-square
with 0 and 1 degrees of freedom (chi-bar-square; Self and Liang 1987), and for
a random effect dropped with its ``d - 1`` covariances the mixture of
chi-square with ``d - 1`` and ``d`` (Stram and Lee 1994). The naive p (chi-square
with ``d``) is twice as large; it is reported beside.
"""

from dataclasses import dataclass

from scipy import stats

from .._messages import show


@dataclass(frozen=True)
class VarianceLRT:
    """A likelihood-ratio test of variance components.

    Attributes
    ----------
    statistic : float
        ``2 (llf_full - llf_reduced)`` (0 when the full model's is lower by rounding).
    df : int
        The variance parameters the reduced model drops.
    pvalue : float
        From ``0.5 chi2(df - 1) + 0.5 chi2(df)`` (``chi2(0)`` is a point mass at 0).
    pvalue_naive : float
        From ``chi2(df)`` (conservative: ignores the boundary).
    dropped : tuple of str
        The dropped parameters' names.
    method : str
        ``"REML"`` or ``"ML"``: both fits'.
    """

    statistic: float
    df: int
    pvalue: float
    pvalue_naive: float
    dropped: tuple
    method: str

    def __str__(self):
        return (f"LR test of {', '.join(self.dropped)} = 0 ({self.method}): "
                f"chi-bar-square = {self.statistic:.4f}, df = {self.df - 1}:{self.df}, "
                f"p = {self.pvalue:.4g} (naive chi2({self.df}) p = {self.pvalue_naive:.4g})")


def lrt_variance(full, reduced):
    """Test whether the variance components the reduced model drops are zero.

    Both are results of :class:`~skfed.mixed.FedMixedLM` (or
    :func:`skfed.formula.mixedlm`) on the same rows, both REML or both ML,
    with the same fixed effects (REML likelihoods of different fixed effects
    are not comparable); the reduced model's variance parameters are a subset
    of the full model's (a component, or a random effect with its covariances).

    Parameters
    ----------
    full, reduced : MixedLMResults

    Returns
    -------
    test : VarianceLRT
    """
    if full.reml != reduced.reml:
        raise ValueError("both models must be fitted by the same method (REML or ML): the "
                         f"full one is {full.method}, the reduced one {reduced.method}.")
    if full.nobs != reduced.nobs:
        raise ValueError(f"the models were fitted on different rows ({full.nobs} and "
                         f"{reduced.nobs}): fit both on the same rows.")
    if list(full.fe_params.index) != list(reduced.fe_params.index):
        raise ValueError("the models have different fixed effects "
                         f"({list(full.fe_params.index)} and "
                         f"{list(reduced.fe_params.index)}): a variance test keeps them.")
    k = full.fe_params.size
    full_names = list(full.params.index[k:])
    kept = list(reduced.params.index[k:])
    if full.vcomp.size and full.cov_re.shape[0] and "Group Var" not in full_names:
        # with components the group's intercept is named after its column; without, "Group"
        kept = [full_names[0] if n == "Group Var" else n for n in kept]
    extra = [n for n in kept if n not in full_names]
    if extra:
        raise ValueError(f"the reduced model's variance parameter {show(extra[0])} is not "
                         f"in the full model ({full_names}): name the groups the same way.")
    dropped = tuple(n for n in full_names if n not in kept)
    if not dropped:
        raise ValueError("the reduced model drops no variance parameter of the full model.")
    statistic = max(2.0 * (full.llf - reduced.llf), 0.0)
    df = len(dropped)
    upper = stats.chi2.sf(statistic, df)
    lower = stats.chi2.sf(statistic, df - 1) if df > 1 else float(statistic <= 0)
    return VarianceLRT(float(statistic), df, float(0.5 * (lower + upper)), float(upper),
                       dropped, full.method)


__all__ = ["VarianceLRT", "lrt_variance"]
