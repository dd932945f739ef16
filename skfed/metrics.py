"""Support recovery and suboptimality metrics."""

import numpy as np


def support(coef, cutoff=1e-2):
    """Boolean mask of coefficients with ``|coef| > cutoff``."""
    return np.abs(np.asarray(coef)).ravel() > cutoff


def support_scores(coef, true_coef, cutoff=1e-2):
    """Precision, recall, F1 and density of the estimated support.

    Parameters
    ----------
    coef : array-like
        Estimated coefficients.
    true_coef : array-like of the same size
        True coefficients; its non-zeros are the true support.
    cutoff : float, default=1e-2
        A coefficient is in the support when ``|coef| > cutoff`` (the FCO
        paper's figures use 1e-2).

    Returns
    -------
    scores : dict
        ``precision = |found & true| / |found|``, ``recall = |found & true| /
        |true|``, ``f1`` (0 when nothing is found), ``density = |found| / size``.
    """
    found = support(coef, cutoff)
    true = np.asarray(true_coef).ravel() != 0
    if found.shape != true.shape:
        raise ValueError(f"coef has {found.size} entries but true_coef has {true.size}.")
    hits = np.sum(found & true)
    precision = hits / found.sum() if found.any() else 0.0
    recall = hits / true.sum() if true.any() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"precision": float(precision), "recall": float(recall), "f1": float(f1),
            "density": float(found.mean())}


def density(coef, cutoff=1e-2):
    """Fraction of coefficients with ``|coef| > cutoff``."""
    return float(support(coef, cutoff).mean())


def relative_suboptimality(objective, objective_star):
    """``(objective - objective_star) / |objective_star|``."""
    return (np.asarray(objective) - objective_star) / max(abs(objective_star), np.finfo(float).tiny)


def rank(W, cutoff=None):
    """Rank of a coefficient matrix: the number of singular values above ``cutoff``.

    Parameters
    ----------
    W : array-like of shape (d1, d2)
    cutoff : float or None, default=None
        Absolute threshold (the FedDualAvg paper counts singular values above
        1e-2). ``None``: the numerical rank (``max(d1, d2) * eps * s_max``).

    Returns
    -------
    rank : int
    """
    W = np.atleast_2d(np.asarray(W, dtype=float))
    if W.size == 0:
        return 0
    s = np.linalg.svd(W, compute_uv=False)
    if cutoff is None:
        cutoff = max(W.shape) * np.finfo(float).eps * (s[0] if s.size else 0.0)
    return int(np.sum(s > cutoff))


def recovery_error(W, W_true):
    """Frobenius distance ``||W - W_true||_F`` (the FedDualAvg paper's recovery error).

    Parameters
    ----------
    W, W_true : array-like of the same shape

    Returns
    -------
    error : float
    """
    W, W_true = np.asarray(W, dtype=float), np.asarray(W_true, dtype=float)
    if W.shape != W_true.shape:
        raise ValueError(f"W has shape {W.shape} but W_true has shape {W_true.shape}.")
    return float(np.linalg.norm(W - W_true))
