"""Brant's test of the proportional-odds assumption over the sites, as R's
``car::poTest`` (Brant 1990).

The binary logits of ``y > j``, one per cut point, are fitted together by Newton's
method on the sites' summed log-likelihoods and gradients (their Hessian is
block-diagonal: each logit's information); the sites also send the cross
information ``X' diag(p_l - p_j p_l) X`` of every pair of cut points, from which the
joint covariance of the slopes is ``A_j^-1 C_jl A_l^-1``. The test asks whether the
slopes are equal across the cut points: one Wald statistic over all covariates, and
one per covariate.
"""

import numpy as np
import pandas as pd
from scipy import stats

from ._fit import newton
from ._site import site_cumulative_logits


def _terms(session, response, levels, m, p):
    def evaluate(z):
        out = session.sum(site_cumulative_logits, response, levels, z, phase="analysis")
        hess = np.zeros_like(out["cross"])
        for j in range(m):  # each logit's information: the diagonal blocks
            block = slice(j * p, (j + 1) * p)
            hess[block, block] = -out["cross"][block, block]
        return dict(out, hess=hess)
    return evaluate


def _wald(beta, V, D):
    d = D @ beta
    return float(d @ np.linalg.solve(D @ V @ D.T, d))


def brant_test(session, response, levels, names, *, tol=1e-16, max_rounds=100):
    """Brant's test on the sites of ``session`` (see the module).

    Parameters
    ----------
    session : FederationSession
    response : str or None
        The outcome's column (``None``: the target).
    levels : list
        The outcome's levels in order.
    names : list of str
        The covariates (the design without an intercept).

    Returns
    -------
    table : pandas.DataFrame
        car's layout: ``b[>level]`` (each binary logit's slopes), ``Chisquare``, ``df``
        and ``Pr(>Chisq)``; the first row ``Overall``.
    """
    m, k = len(levels) - 1, len(names)
    p = k + 1
    fitted = newton(_terms(session, response, levels, m, p), np.zeros(m * p),
                    lambda z: True, tol, max_rounds)
    if not fitted["converged"]:
        raise ValueError("Brant's test: a binary logit of y above a cut point did not "
                         f"converge ({fitted['reason']}); a covariate may separate the "
                         "levels there.")
    cross, B = fitted["terms"]["cross"], fitted["z"].reshape(m, p)
    inverse = [np.linalg.inv(cross[j * p:(j + 1) * p, j * p:(j + 1) * p]) for j in range(m)]
    slopes = np.r_[[j * p + 1 + np.arange(k) for j in range(m)]].ravel()
    V = np.block([[inverse[j] @ cross[j * p:(j + 1) * p, l * p:(l + 1) * p] @ inverse[l]
                   for l in range(m)] for j in range(m)])[np.ix_(slopes, slopes)]
    beta = B[:, 1:].ravel()
    D = np.hstack([np.tile(np.eye(k), (m - 1, 1)), -np.eye((m - 1) * k)])
    rows = {"Overall": (_wald(beta, V, D), (m - 1) * k)}
    for i, name in enumerate(names):
        D_i = D[i::k]  # the rows of D comparing covariate i
        rows[name] = (_wald(beta, V, D_i), m - 1)
    table = pd.DataFrame(B[:, 1:].T, index=names,
                         columns=[f"b[>{level}]" for level in levels[:-1]])
    table = pd.concat([pd.DataFrame(np.nan, index=["Overall"], columns=table.columns),
                       table])
    table["Chisquare"] = [rows[n][0] for n in table.index]
    table["df"] = [rows[n][1] for n in table.index]
    table["Pr(>Chisq)"] = stats.chi2.sf(table["Chisquare"], table["df"])
    return table
