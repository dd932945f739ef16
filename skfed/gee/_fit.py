"""The server side of a GEE fit: statsmodels' iteration on the sites' sums.

statsmodels' GEE iteration, run at the server on sums the sites return
(:mod:`skfed.gee._site`): from the independence GLM's estimate, each round
takes one Gauss-Newton (Fisher scoring) step on the GEE score with the
summed "bread" ``sum_c D'V^-1 D``, then re-estimates the working
correlation's parameter from pooled Pearson-residual moment sums, with
statsmodels' moment estimators and degrees-of-freedom adjustments. At the
estimate one more pass gives the robust "meat" ``sum_c u_c u_c'`` (each
cluster's score outer product, summed at its site). Every exchange is a sum,
so under secure aggregation each is a masked sum (exact).
"""

from contextlib import contextmanager

import numpy as np
import pandas as pd
from scipy.optimize import brent

from .._messages import show
from ..data import FederatedDataset
from ..federation.session import FederationSession, payload_nbytes
from ..mixed._data import _frame, mixed_dataset
from ._site import site_gee_moments, site_gee_start, site_gee_terms

#: the time column's name when ``time`` is given as an array
TIME_COLUMN = "<time>"
#: the start (the independence GLM) is iterated until its step is below this (relative)
START_TOL, START_MAX_ROUNDS = 1e-12, 100


def gee_dataset(X, y, clients, groups, time, time_feature=False):
    """``(dataset, group_column, time_column, feature_names, endog_name)``; the time
    column is a feature too where ``time_feature``."""
    if groups is None:
        raise ValueError("groups is required: the cluster of each row (a column name of X, "
                         "or one label per row), as statsmodels' GEE(groups=...).")
    if time is not None and not isinstance(time, str):
        if isinstance(X, FederatedDataset):
            raise ValueError("with a FederatedDataset, time= names a column of its table.")
        X = X.copy() if isinstance(X, pd.DataFrame) else _frame(X)
        values = np.asarray(time, dtype=np.float64)
        if values.ndim != 1 or values.shape[0] != X.shape[0]:
            raise ValueError(f"time has shape {values.shape} but X has {X.shape[0]} rows: "
                             "give one time per row (or the name of a column of X).")
        X[TIME_COLUMN] = values
        time = TIME_COLUMN
    dataset, column, names, endog = mixed_dataset(X, y, clients, groups)
    if time is not None:
        if time not in names:
            raise ValueError(f"time={show(time)} is not a column of X {names}.")
        names = names if time_feature else [n for n in names if n != time]
    return dataset, column, time, names, endog


@contextmanager
def session_for(dataset, privacy):
    """A plain session, or one whose every sum is masked (secure aggregation)."""
    from ..privacy import DifferentialPrivacy, SecureAggregation

    if privacy is None:
        yield FederationSession.for_dataset(dataset), "none"
        return
    if not isinstance(privacy, (DifferentialPrivacy, SecureAggregation)):
        raise ValueError(f"privacy must be None or SecureAggregation(); got "
                         f"{type(privacy).__name__}.")
    if isinstance(privacy, DifferentialPrivacy):  # a subclass of SecureAggregation
        raise ValueError(
            f"FedGEE: privacy={type(privacy).__name__} is refused: a GEE is fitted from "
            "exact sums (its bread, score, Pearson moments and the sandwich's meat of "
            "per-cluster score outer products), whose sensitivity to one row is unbounded, "
            "so no differential-privacy noise is calibrated for them. Use privacy=None or "
            "SecureAggregation() (exact: each sum masked, only the totals decoded).")
    from ..privacy.masked_sums import masked_session

    with masked_session(dataset, privacy) as session:
        yield session, "masked (secure aggregation)"


class Exchanges:
    """A fit's session, counting the bytes it broadcasts per phase (its ledger counts
    both directions together)."""

    def __init__(self, session):
        self.session, self.down = session, {}

    def _count(self, args, phase):
        self.down[phase] = self.down.get(phase, 0) + self.session.n_sites * payload_nbytes(
            args)

    def sum(self, fn, *args, phase):
        self._count(args, phase)
        return self.session.sum(fn, *args, phase=phase)

    def per_site(self, fn, *args, phase):
        self._count(args, phase)
        return self.session.per_site(fn, *args, phase=phase)

    def traffic(self):
        """``{"rounds", "bytes_up", "bytes_down", "setup_bytes"}`` of the fit's rounds
        (the iteration and the covariances' pass; the start and the clusters: setup)."""
        spent = self.session.ledger.as_dict()
        fit = ("rounds", "inference")
        down = sum(self.down.get(phase, 0) for phase in fit)
        return {"rounds": sum(spent[phase]["rounds"] for phase in fit),
                "bytes_down": int(down),
                "bytes_up": int(sum(spent[phase]["bytes"] for phase in fit) - down),
                "setup_bytes": int(spent["setup"]["bytes"])}


def _solve(bread, score):
    try:
        return np.linalg.solve(bread, score)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(bread) @ score


def _start(session, design, p):
    """The independence GLM's estimate (statsmodels' start): one IRLS step from
    statsmodels' starting means, then Fisher scoring to convergence."""
    totals = session.sum(site_gee_start, design, None, phase="setup")
    ybar = float(totals["ysum"]) / float(totals["n"])
    first = session.sum(site_gee_start, design, ybar, phase="setup")
    params = _solve(first["xtwx"], first["xtwz"])
    for _ in range(START_MAX_ROUNDS):
        terms = session.sum(site_gee_terms, design, params, 0.0, False, phase="setup")
        step = _solve(terms["bread"], terms["score"])
        params = params + step
        if np.max(np.abs(step)) <= START_TOL * (1.0 + np.max(np.abs(params))):
            break
    return params


def _scale(family, ssr, n, p):
    """statsmodels' ``estimate_scale``: 1 for binomial and Poisson, else the Pearson
    sum over ``n - p`` (written as statsmodels writes it)."""
    if family in ("binomial", "poisson"):
        return 1.0
    return ssr / (n * (n - p) / n)


def update_alpha(design, moments, alpha, p, grid):
    """The working correlation's parameter from the pooled moment sums (statsmodels'
    ``Exchangeable.update`` and ``Autoregressive.update``)."""
    n, ssr = float(moments["n"]), float(moments["ssr"])
    if design["cov_struct"] == "exchangeable":
        scale = ssr / (n * (n - p) / n)
        pairs = float(moments["n_pairs"])
        return float(moments["pair_sum"]) / scale / (pairs * (pairs - p) / pairs)
    scale = _scale(design["family"], ssr, n, p)
    if grid:
        return (float(moments["lag1"]) / scale) / (float(moments["lag0"]) / scale)
    return _ar_all_pairs(moments, alpha, scale)


def _ar_all_pairs(moments, alpha, scale):
    """statsmodels' weighted nonlinear least squares over every pair (``grid=False``),
    from per-lag sums: the same objective, the same brackets and Brent's search."""
    count = np.asarray(moments["lag_count"], dtype=float)
    lags = np.flatnonzero(count > 0).astype(float)
    count = count[lags.astype(int)]
    s11, s12, s22 = (np.asarray(moments[k], dtype=float)[lags.astype(int)] / scale
                     for k in ("s11", "s12", "s22"))
    wts = 1.0 / ((1.0 - alpha ** (2 * lags)) / (1.0 - alpha ** 2))
    wts = wts / float(count @ wts)

    def fitfunc(a):
        return float(wts @ (s11 - 2.0 * a ** lags * s12 + a ** (2 * lags) * s22))

    b_lft, f_lft = 0.0, fitfunc(0.0)
    b_ctr, f_ctr = 0.5, fitfunc(0.5)
    while f_ctr > f_lft:
        b_ctr /= 2
        f_ctr = fitfunc(b_ctr)
        if b_ctr < 1e-8:
            return 0.0
    b_rgt, f_rgt = 0.75, fitfunc(0.75)
    while f_rgt < f_ctr:
        b_rgt = b_rgt + (1.0 - b_rgt) / 2
        f_rgt = fitfunc(b_rgt)
        if b_rgt > 1.0 - 1e-6:
            raise ValueError("Autoregressive: unable to find right bracket (the "
                             "within-cluster correlation is near 1).")
    return float(brent(fitfunc, brack=[b_lft, b_ctr, b_rgt]))


def iterate(session, design, p, max_lag, est):
    """statsmodels' ``GEE.fit`` loop: a scoring step, then (unless converged after at
    least one update) the working correlation re-estimated at the new estimate."""
    params = _start(session, design, p)
    alpha, updates, score_norm, rounds = 0.0, 0, -1.0, 0
    for _ in range(est.maxiter):
        terms = session.sum(site_gee_terms, design, params, alpha, False, phase="rounds")
        params = params + _solve(terms["bread"], terms["score"])
        score_norm, rounds = float(np.sqrt(np.sum(terms["score"] ** 2))), rounds + 1
        if score_norm < est.ctol and updates > 0:
            break
        if design["cov_struct"] != "independence":
            moments = session.sum(site_gee_moments, design, params, max_lag, phase="rounds")
            alpha = update_alpha(design, moments, alpha, p, est.grid)
        updates += 1
    final = session.sum(site_gee_terms, design, params, alpha, True, phase="inference")
    return {"params": params, "alpha": alpha, "score_norm": score_norm, "rounds": rounds,
            "converged": score_norm < est.ctol, "final": final}


def covariances(final, family, p):
    """``(cov_robust, cov_naive, scale)`` at the estimate (statsmodels' ``_covmat``)."""
    scale = _scale(family, float(final["ssr"]), float(final["n"]), p)
    try:
        bmati = np.linalg.inv(final["bread"])
    except np.linalg.LinAlgError:
        bmati = np.linalg.pinv(final["bread"])
    return bmati @ final["meat"] @ bmati, bmati * scale, scale
