"""Wald tests per term of types II and III, as R's ``car::Anova(test.statistic = "Wald")``.

Type III tests each term's coefficients jointly zero (statsmodels'
``wald_test_terms``). Type II respects marginality: a term is tested after
every other term except those that contain it (its "relatives", higher-order
interactions with its factors). car builds that hypothesis as the conjugate
complement, in the inner product of the estimates' covariance, of the
relatives' coefficients within the relatives' and the term's together
(Fox & Weisberg, *An R Companion to Applied Regression*, ch. 5; car's
``Anova.II.default``). Without interactions both types equal the joint test.
"""

import numpy as np
import pandas as pd
from scipy import linalg, stats

#: R's rank tolerance of ``qr`` (LINPACK's ``tol = 1e-07``)
_RANK_TOL = 1e-7


def _column_basis(X):
    """An orthonormal basis of the column space of ``X`` (pivoted QR, R's tolerance)."""
    if X.shape[1] == 0:
        return X
    Q, R, _ = linalg.qr(X, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > _RANK_TOL * diag[0])) if diag.size and diag[0] > 0 else 0
    return Q[:, :rank]


def conjugate_complement(X, Z, inner):
    """The part of span(``Z``) orthogonal to span(``X``) in the inner product ``inner``:
    ``Z b`` with ``b`` spanning the null space of ``(Z' inner a)'``, ``a`` a basis of
    span(``X``) (car's ``ConjComp``)."""
    a = _column_basis(X)
    if a.shape[1] == 0:
        return Z
    za = Z.T @ inner @ a
    Q, R, _ = linalg.qr(za, pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > _RANK_TOL * diag[0])) if diag.size and diag[0] > 0 else 0
    return Z if rank == 0 else Z @ Q[:, rank:]


def _wald(params, cov, L):
    """``(statistic, df)`` of ``L params = 0``."""
    L = L[~np.all(np.abs(L) < 1e-12, axis=1)]
    if L.shape[0] == 0:
        return np.nan, 0
    value = L @ params
    statistic = float(value @ np.linalg.solve(L @ cov @ L.T, value))
    return statistic, int(L.shape[0])


def anova_wald_table(params, cov, names, terms, typ):
    """car's Wald ``Anova`` table: ``Chisq``, ``Df``, ``Pr(>Chisq)`` per term.

    Parameters
    ----------
    params, cov : ndarray
    names : list of str
        The parameters' names, in the order of ``params``.
    terms : list of (str, set, list of str)
        Each term's name, its factors and its parameters' names; an
        intercept term (factors empty) is tested only by type III.
    typ : {2, 3}

    Returns
    -------
    pandas.DataFrame
    """
    if typ not in (2, 3, "II", "III"):
        raise ValueError(f"typ must be 2 or 3 (car's type II or III); got {typ!r}.")
    typ = {"II": 2, "III": 3}.get(typ, typ)
    position = {n: k for k, n in enumerate(names)}
    identity = np.eye(len(names))
    rows = {}
    for name, factors, members in terms:
        if not factors and typ == 2:
            continue  # car's type II has no intercept row
        own = [position[m] for m in members]
        if typ == 3:
            L = identity[own]
        else:
            relatives = [position[m] for other, f, ms in terms
                         if other != name and factors and factors <= f for m in ms]
            L = (identity[own] if not relatives else conjugate_complement(
                identity[relatives].T, identity[relatives + own].T, cov).T)
        statistic, df = _wald(params, cov, L)
        rows[name] = {"Chisq": statistic, "Df": df,
                      "Pr(>Chisq)": float(stats.chi2.sf(statistic, df)) if df else np.nan}
    return pd.DataFrame.from_dict(rows, orient="index")
