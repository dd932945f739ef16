"""Tests of linear hypotheses on fitted coefficients, and the analysis of deviance.

Everything here works on what a federated fit already holds (its estimates, their
covariance, its deviance and scale): no site is asked anything more.

- :func:`linear_hypothesis` reads a hypothesis (a matrix, coefficient names, or
  statsmodels' strings such as ``"x1 = 0, x2 = x3"``) into ``(R, q)``;
- :func:`wald_test_from` computes statsmodels' ``wald_test(R, q, scalar=True)``
  from the estimates and their covariance (the estimators'
  ``wald_test`` method calls it);
- :func:`term_groups` groups statsmodels' parameter names by term (``C(sex)[T.M]``
  and ``C(sex)[T.F]`` are the term ``C(sex)``), for the per-term joint tests;
- :func:`anova_deviance` compares nested GLM fits (R's ``anova(m1, m2, test=)``).

This module imports no skfed estimator (they import it).
"""

import re
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

#: below this many sites, cluster-robust standard errors with the sites as the clusters
#: are flagged: Cameron & Miller (2015) place "few clusters" below 20 to 50 in balanced
#: designs, where the sandwich is biased downwards and normal-based tests over-reject
FEW_CLUSTERS = 20


class FewClustersWarning(UserWarning):
    """Cluster-robust standard errors (``cov_type="cluster"``) rest on few sites.

    With ``G`` clusters the sandwich has rank at most ``G - 1`` and is biased
    downwards when ``G`` is small (Cameron and Miller, "A Practitioner's
    Guide to Cluster-Robust Inference", J. Human Resources 50(2), 2015,
    section VI). The remedy statsmodels offers, and skfed with it, is the
    small-sample factor ``G / (G - 1) (n - 1) / (n - p)`` on the variance
    (applied by the GLMs) and Student's t (F for joint tests) with ``G - 1``
    degrees of freedom (``use_t=True``).
    """


def few_clusters_message(name, n_clusters, factor_applied):
    """The text of the :class:`FewClustersWarning` of a fit with ``n_clusters`` sites."""
    factor = ("carries statsmodels' small-sample factor G/(G-1)*(n-1)/(n-p)" if factor_applied
              else "carries no small-sample factor (lifelines applies none)")
    return (f"{name}: cov_type='cluster' treats the {n_clusters} sites as the clusters; "
            f"fewer than {FEW_CLUSTERS} clusters are few (Cameron & Miller 2015): the "
            "cluster-robust variance is biased downwards and normal-based p-values and "
            f"intervals are too small. The variance {factor}; for tests and intervals use "
            f"Student's t with G - 1 = {n_clusters - 1} degrees of freedom: "
            "conf_int(use_t=True), summary(use_t=True), wald_test(..., use_f=True) "
            "(statsmodels' use_t=True with df_correction=True).")


# --- hypotheses ---------------------------------------------------------------------
def linear_hypothesis(hypothesis, names, q=None):
    """``(R, q)`` of a linear hypothesis ``R params = q`` on parameters named ``names``.

    Parameters
    ----------
    hypothesis : str, list of str or array-like
        A string of constraints in statsmodels' syntax (``"x1 = 0, x2 = x3"``,
        ``"2*x1 + x2 = 1"``; read by patsy, as statsmodels reads it); a list of
        parameter names (all of them zero) or of such constraints; or the
        matrix ``R`` (one row per constraint, one column per parameter).
    names : list of str
        The parameters' names, in the order of the estimates.
    q : array-like, default=None
        The right-hand side when ``hypothesis`` is a matrix (zeros by default).

    Returns
    -------
    R : ndarray of shape (n_constraints, n_params)
    q : ndarray of shape (n_constraints,)
    """
    names = [str(n) for n in names]
    if isinstance(hypothesis, str) or _is_list_of_str(hypothesis):
        if q is not None:
            raise ValueError("q is for a matrix hypothesis; a string states its own "
                             "right-hand side ('x1 = 2').")
        items = [hypothesis] if isinstance(hypothesis, str) else list(hypothesis)
        if all(item in names for item in items):  # a list of names: all zero
            R = np.zeros((len(items), len(names)))
            R[np.arange(len(items)), [names.index(item) for item in items]] = 1.0
            return R, np.zeros(len(items))
        return _parse_constraints(items, names)
    R = np.atleast_2d(np.asarray(hypothesis, dtype=float))
    if R.ndim != 2 or R.shape[1] != len(names):
        raise ValueError(f"R must have one column per parameter ({len(names)}: "
                         f"{', '.join(names)}); got shape {np.shape(hypothesis)}.")
    q = np.zeros(R.shape[0]) if q is None else np.broadcast_to(
        np.asarray(q, dtype=float).ravel(), (R.shape[0],)).copy()
    return R, q


def _is_list_of_str(value):
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(
        isinstance(v, str) for v in value)


def _parse_constraints(items, names):
    try:
        from patsy import DesignInfo, PatsyError
    except ImportError as exc:  # pragma: no cover - patsy comes with statsmodels
        raise ImportError("a hypothesis written as a string is read by patsy (as statsmodels "
                          "reads it): pip install patsy, or pass R as a matrix or a list of "
                          "parameter names") from exc
    try:
        constraint = DesignInfo(names).linear_constraint(
            items[0] if len(items) == 1 else list(items))
    except PatsyError as exc:
        raise ValueError(f"cannot read the hypothesis {', '.join(items)!r}: {exc}. The "
                         f"parameters are named {', '.join(names)}.") from None
    return np.asarray(constraint.coefs, dtype=float), np.asarray(constraint.constants,
                                                                 dtype=float).ravel()


def term_groups(names):
    """``{term: [parameter names]}``: statsmodels' names grouped by term.

    A name's term is the name without its levels' brackets: ``C(sex)[T.M]``
    and ``C(sex)[T.F]`` form the term ``C(sex)``, ``age:C(sex)[T.M]`` the
    term ``age:C(sex)``, ``bs(age, df=3)[1]`` the term ``bs(age, df=3)``; a
    name without brackets is its own term. Terms keep their first
    appearance's order.
    """
    groups = {}
    for name in map(str, names):
        groups.setdefault(re.sub(r"\[[^\[\]]*\]", "", name), []).append(name)
    return groups


# --- the Wald test ------------------------------------------------------------------
@dataclass(frozen=True)
class WaldTestResult:
    """A Wald test of ``R params = q`` (statsmodels' ``ContrastResults``).

    As statsmodels' ``wald_test(..., scalar=True)`` returns it.

    Parameters
    ----------
    statistic : float
        The chi2 statistic ``(R b - q)' (R V R')^-1 (R b - q)``, or that divided
        by ``df_num`` (the F statistic).
    pvalue : float
        The probability of a statistic at least as large under the hypothesis.
    df_num : int
        The number of constraints.
    df_denom : float or None
        The F test's denominator degrees of freedom; ``None`` for chi2.
    distribution : {"chi2", "F"}
    """

    statistic: float
    pvalue: float
    df_num: int
    df_denom: object
    distribution: str

    def __repr__(self):
        df = f"{self.df_num}" if self.df_denom is None else f"{self.df_num}, {self.df_denom:g}"
        return (f"<Wald test ({self.distribution}): statistic={self.statistic:.6g}, "
                f"p-value={self.pvalue:.4g}, df=({df})>")


def wald_test_from(params, cov, R, q, *, use_f=False, df_denom=None):
    """The Wald test of ``R params = q`` given the estimates' covariance ``cov``.

    ``use_f``: the statistic divided by the number of constraints ``J`` and
    compared with ``F(J, df_denom)`` (statsmodels' ``use_f=True``), else with
    ``chi2(J)``. A set of constraints whose rows are linearly dependent (or
    whose covariance ``R cov R'`` is singular) is refused, naming why.
    """
    params, cov = np.asarray(params, dtype=float), np.asarray(cov, dtype=float)
    R, q = np.atleast_2d(R), np.asarray(q, dtype=float).ravel()
    J = R.shape[0]
    if J == 0:
        raise ValueError("the hypothesis has no constraint.")
    if np.linalg.matrix_rank(R) < J:
        raise ValueError(f"the {J} constraints are not linearly independent (R has rank "
                         f"{np.linalg.matrix_rank(R)}); drop the redundant ones.")
    middle = R @ cov @ R.T
    eig = np.linalg.eigvalsh(middle)
    if not eig[0] > 1e-12 * max(eig[-1], 0.0):
        raise ValueError("the covariance of R params is singular: the constraints involve a "
                         "combination of the estimates that has no variance.")
    diff = R @ params - q
    chi2 = float(diff @ np.linalg.solve(middle, diff))
    if not use_f:
        return WaldTestResult(chi2, float(stats.chi2.sf(chi2, J)), J, None, "chi2")
    if df_denom is None or not df_denom > 0:
        raise ValueError("use_f=True needs residual degrees of freedom; this model has none "
                         "(use the chi2 test).")
    F = chi2 / J
    return WaldTestResult(F, float(stats.f.sf(F, J, df_denom)), J, float(df_denom), "F")


def wald_intervals(params, bse, alpha, df=None):
    """``params -+ c bse`` as an ``(n_params, 2)`` array: ``c`` the normal's
    ``1 - alpha/2`` quantile, or Student's t's with ``df`` degrees of freedom."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}.")
    q = stats.norm.ppf(1 - alpha / 2) if df is None else stats.t.ppf(1 - alpha / 2, df)
    return np.column_stack([params - q * bse, params + q * bse])


def warn_few_clusters(estimator, n_clusters, factor_applied):
    """A :class:`~skfed.stats.FewClustersWarning` when ``cov_type="cluster"`` rests on
    fewer than ``FEW_CLUSTERS`` sites."""
    if 2 <= n_clusters < FEW_CLUSTERS:
        warnings.warn(few_clusters_message(type(estimator).__name__, n_clusters,
                                           factor_applied), FewClustersWarning, stacklevel=4)


# --- analysis of deviance -------------------------------------------------------------
def anova_deviance(*models, test=None):
    """Compare nested GLM fits by their deviances (R's ``anova(m1, m2, ..., test=)``).

    Each model after the first adds parameters to the one before it. Row
    ``k`` compares model ``k`` with model ``k - 1``: the deviance drop
    ``D_(k-1) - D_k`` on ``df_diff`` degrees of freedom, tested with the
    dispersion ``phi`` of the largest model (1 for binomial and Poisson, else
    its Pearson chi2 / residual df, as R and statsmodels estimate it):

    - ``"chisq"``: ``(D_(k-1) - D_k) / phi`` against ``chi2(df_diff)`` (the
      likelihood-ratio test for binomial and Poisson);
    - ``"F"``: ``(D_(k-1) - D_k) / df_diff / phi`` against ``F(df_diff,
      df_resid)``, ``df_resid`` the largest model's (R's ``test="F"``; for
      the Gaussian family it is the extra-sum-of-squares F test,
      statsmodels' ``compare_f_test``).

    Parameters
    ----------
    *models : fitted skfed GLM estimators or results of :func:`skfed.formula.glm`
        At least two unpenalized fits of the same family on the same rows and
        sites, from the smallest to the largest. Formulas are nested when each
        term of the smaller is a term of the larger, or a numeric column that
        a spline of the larger spans (``y ~ x`` in ``y ~ bs(x, df=4)``).
    test : {"chisq", "F"}, default=None
        ``None``: ``"chisq"`` for a family whose scale is fixed (binomial,
        Poisson), ``"F"`` for one whose scale is estimated.

    Returns
    -------
    table : pandas.DataFrame
        One row per model: ``df_resid``, ``deviance``, ``df_diff``,
        ``deviance_diff``, then ``chi2`` (the scaled deviance drop) and
        ``Pr(>Chi)``, or ``F`` and ``Pr(>F)``; the first row's comparisons
        are NaN. ``table.attrs`` holds ``test`` and ``scale``.
    """
    if len(models) < 2:
        raise ValueError("anova_deviance compares at least two nested fits.")
    formulas = all(getattr(model, "term_structure", None) is not None for model in models)
    if formulas:
        _check_formulas_nested(models)
    # a formula's result compares as its fitted estimator
    models = [model.estimator if getattr(model, "term_structure", None) is not None
              else model for model in models]
    _check_nested(models, check_names=not formulas)
    largest = models[-1]
    family = largest.family_
    test = ("chisq" if family.fixed_scale else "F") if test is None else test
    if test not in ("chisq", "F"):
        raise ValueError(f"test must be 'chisq' or 'F'; got {test!r}.")
    if test == "F" and family.fixed_scale:
        raise ValueError(f"the {family.name} family's scale is 1, not estimated: its test is "
                         "test='chisq' (the F test is for families with a dispersion).")
    scale, df_scale = float(largest.scale_), float(largest.df_resid_)
    rows = []
    for k, model in enumerate(models):
        row = {"df_resid": float(model.df_resid_), "deviance": float(model.deviance_)}
        if k:
            previous = models[k - 1]
            df = len(model.params_) - len(previous.params_)
            drop = float(previous.deviance_) - row["deviance"]
            row.update(df_diff=float(df), deviance_diff=drop)
            if test == "F":
                F = drop / df / scale
                row.update({"F": F, "Pr(>F)": float(stats.f.sf(F, df, df_scale))})
            else:
                row.update({"chi2": drop / scale, "Pr(>Chi)": float(stats.chi2.sf(drop / scale,
                                                                                  df))})
        rows.append(row)
    table = pd.DataFrame(rows, index=pd.RangeIndex(1, len(models) + 1, name="model"))
    table.attrs.update(test=test, scale=scale)
    return table


def _check_formulas_nested(models):
    """Each formula's terms among the next one's, or a numeric column the next one's
    spline of that column spans (with an intercept: a cubic spline basis and the
    constant span the linear functions)."""
    for k in range(1, len(models)):
        smaller, larger = models[k - 1].term_structure, models[k].term_structure
        names = {t.name for t in larger}
        splines = {t.details.get("column") for t in larger if t.kind == "spline"}
        intercept = "Intercept" in names
        for term in smaller:
            spanned = (term.kind == "numeric" and intercept
                       and term.details.get("column") in splines)
            if term.name not in names and not spanned:
                raise ValueError(f"model {k} is not nested in model {k + 1}: its term "
                                 f"{term.name!r} is not a term of model {k + 1} (nor a "
                                 "column that one of its splines spans).")


def _check_nested(models, check_names=True):
    """Same family, rows and sites, increasing parameters (names nested when known)."""
    first = models[0]
    for k, model in enumerate(models):
        if not hasattr(type(model), "family_"):
            raise TypeError(f"model {k + 1} is a {type(model).__name__}, not a skfed GLM "
                            "estimator.")
        model.deviance_  # noqa: B018 - fitted and unpenalized, else InferenceError says why
        if model.family_ != first.family_:
            raise ValueError(f"models 1 and {k + 1} have different families "
                             f"({first.family_.name}/{first.family_.link}, "
                             f"{model.family_.name}/{model.family_.link}).")
        if model.nobs_ != first.nobs_ or model.n_clients_ != first.n_clients_:
            raise ValueError(f"models 1 and {k + 1} are fitted on different rows or sites "
                             f"({first.nobs_:g} and {model.nobs_:g} weighted rows, "
                             f"{first.n_clients_} and {model.n_clients_} sites).")
        if k == 0:
            continue
        smaller = models[k - 1]
        if not len(model.params_) > len(smaller.params_):
            raise ValueError(f"model {k + 1} must have more parameters than model {k}: list "
                             "the models from the smallest to the largest.")
        if (check_names and hasattr(model, "feature_names_in_")
                and hasattr(smaller, "feature_names_in_")):
            missing = set(smaller.param_names_) - set(model.param_names_)
            if missing:
                raise ValueError(f"model {k} is not nested in model {k + 1}: "
                                 f"{', '.join(sorted(missing))} is not among its parameters.")
