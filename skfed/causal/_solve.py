"""The server's side of a causal analysis: Newton on the stacked equations, the sandwich.

Every number comes from pooled sums (:func:`skfed.causal._site.site_ee_sums`):
a Newton step ``theta <- theta - D^{-1} sum psi`` on the whole stack solves the
propensity model (logistic Newton), the outcome models (Newton with the
canonical link) and the weighted means (linear in them: exact in one step) at
once; at the solution, one more pass gives the bread ``D`` and the meat
``M = sum psi psi'``, and the covariance is ``D^{-1} M D^{-T}`` (delicatessen's
``MEstimator`` on the pooled rows).
"""

import numpy as np

from ..data import FederatedDataset
from ._equations import blocks, n_parameters
from ._site import site_ee_sums


def unpack_upper(packed, k):
    M = np.zeros((k, k))
    M[np.triu_indices(k)] = packed
    return M + np.triu(M, 1).T


def newton(session, spec, q, *, tol, max_iter, model=None):
    """``(theta, sums, n_iter)``: the stacked estimating equations solved from pooled
    sums, and the sums at the solution (``model``: a fitted propensity classifier whose
    scores the stack holds fixed)."""
    k = n_parameters(spec, q)
    at = blocks(spec, q)
    theta = np.zeros(k)
    sums = session.sum(site_ee_sums, spec, theta, model, phase="rounds")
    if _start(theta, sums, spec, at):  # the sums at the start are the first step's
        sums = session.sum(site_ee_sums, spec, theta, model, phase="rounds")
    for n_iter in range(1, max_iter + 1):
        if n_iter > 1:
            sums = session.sum(site_ee_sums, spec, theta, model, phase="rounds")
        step = _step(sums)
        theta = theta - step
        if not np.all(np.isfinite(theta)):
            break
        if np.max(np.abs(step)) <= tol * (1.0 + np.max(np.abs(theta))):
            final = session.sum(site_ee_sums, spec, theta, model, phase="inference")
            return theta, final, n_iter
    raise ValueError(
        f"the stacked estimating equations did not converge in {max_iter} Newton steps: "
        "the propensity model may separate the arms (a covariate that predicts treatment "
        "perfectly), or an outcome model may have no finite solution; check overlap and "
        "drop or coarsen such covariates.")


def _start(theta, sums, spec, at):
    """Start the outcome models at each arm's mean outcome and the treated share; whether
    ``theta`` moved."""
    n, n1 = float(sums["n"]), float(sums["n1"])
    if n1 == 0 or n1 == n:
        raise ValueError(f"every row is in one arm ({int(n1)} treated of {int(n)}): there "
                         "is no contrast to estimate.")
    if spec["stabilized"]:
        theta[at["pi"]] = n1 / n
    if spec["method"] != "aipw":
        return bool(spec["stabilized"])
    for key, mean in (("gamma1", sums["sy1"] / n1), ("gamma0", sums["sy0"] / (n - n1))):
        theta[at[key].start] = _link(mean, spec["family"])
    return True


def _link(mean, family):
    if family == "gaussian":
        return mean
    if family == "poisson":
        return np.log(max(mean, 1e-8))
    mean = min(max(mean, 1e-8), 1 - 1e-8)
    return np.log(mean / (1 - mean))


def _step(sums):
    D = np.asarray(sums["jacobian"], dtype=float)
    try:
        return np.linalg.solve(D, np.asarray(sums["psi"], dtype=float))
    except np.linalg.LinAlgError:
        raise ValueError("the estimating equations' derivative is singular: a covariate "
                         "is constant or collinear with others, or an arm has no rows "
                         "(at a score bound: trimming may have left one arm empty).") from None


def sandwich(sums, k):
    """``(D^{-1} M D^{-T}, D, M)`` from the pooled sums at the solution."""
    D = np.asarray(sums["jacobian"], dtype=float)
    M = unpack_upper(np.asarray(sums["meat"], dtype=float), k)
    Dinv = np.linalg.inv(D)
    return Dinv @ M @ Dinv.T, D, M


def fixed_score_covariance(D, M):
    """The means' covariance with the propensity model held fixed (the weighted
    regression's robust variance, as the "What If" book's GEE): the means' block of
    the stack alone."""
    Dmm = D[:2, :2]
    inv = np.linalg.inv(Dmm)
    return inv @ M[:2, :2] @ inv.T


def as_dataset(X, treatment, y, clients, outcome, covariates):
    """``(dataset, treatment, outcome, covariates)`` from arrays or a FederatedDataset."""
    if isinstance(X, FederatedDataset):
        if not isinstance(treatment, str):
            raise ValueError("with a FederatedDataset, name the treatment column "
                             "(treatment='column').")
        if y is not None or clients is not None:
            raise ValueError("a FederatedDataset carries its outcome and sites: pass "
                             "outcome='column' (or use its target), not y or clients.")
        columns = list(X.columns)
        for name in [treatment, outcome] + list(covariates or []):
            if name is not None and name not in columns:
                raise ValueError(f"no column {name!r} in the dataset (columns: "
                                 f"{columns[:20]}).")
        if covariates is None:
            covariates = [c for c in columns if c not in (treatment, outcome)]
        return X, treatment, outcome, [str(c) for c in covariates]
    return _from_arrays(X, treatment, y, clients, outcome, covariates)


def _from_arrays(X, treatment, y, clients, outcome, covariates):
    import pandas as pd

    if outcome is not None:
        raise ValueError("outcome= names a column of a FederatedDataset; with arrays pass "
                         "the outcome as y.")
    if treatment is None or y is None:
        raise ValueError("fit(X, treatment, y): the treatment and the outcome are needed.")
    frame = X.copy() if isinstance(X, pd.DataFrame) else pd.DataFrame(
        np.asarray(X, dtype=float)).rename(columns=lambda j: f"x{j}")
    frame.columns = [str(c) for c in frame.columns]
    treatment = np.asarray(treatment).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if not len(treatment) == len(y) == len(frame):
        raise ValueError(f"X has {len(frame)} rows, treatment {len(treatment)} and y "
                         f"{len(y)}: one value per row each.")
    name = "treatment"
    while name in frame.columns:
        name = "_" + name
    if covariates is None:
        covariates = list(frame.columns)
    frame[name] = treatment
    return FederatedDataset.from_arrays(frame, y, clients), name, None, list(covariates)
