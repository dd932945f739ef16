"""Independent pooled references for the Cox model, written from the formulas.

Nothing here uses skfed. The partial likelihood is evaluated by a direct loop
over the distinct event times of each stratum (boolean risk-set masks, no
recursions or cumulative sums), in lifelines' weighted-Efron convention:

    logPL = sum_strata sum_t [ sum_{D_t} w_i x_i'b
                               - (W_t / d_t) sum_{l<d_t} log(S0 - (l/d_t) E0) ]

with ``S0 = sum_{R_t} w_i exp(x_i'b)``, ``E0`` the same over the events ``D_t``
at ``t``, ``d_t = |D_t|`` (a row count) and ``W_t`` the events' weight sum;
Breslow replaces the Efron sum by ``W_t log S0`` (so integer weights are
replicated rows). The estimator's objective is

    -(1/W) logPL(b) + alpha * (l1_ratio ||b||_1 + (1 - l1_ratio)/2 ||b||^2).

``cox_fit`` minimizes it by damped Newton (smooth case) or proximal Newton
with a coordinate-descent inner solver (an L1 part), to machine precision;
``kkt_violation`` is the certificate. ``breslow_cumhaz`` is the Breslow
baseline, ``robust_cov`` the Lin-Wei sandwich with Breslow-type score
residuals over the full risk sets (statsmodels' ``PHReg.score_residuals``;
lifelines' ``_compute_score_within_strata`` on data without tied times).
"""

import numpy as np

__all__ = ["cox_derivatives", "cox_objective", "cox_fit", "kkt_violation", "breslow_cumhaz",
           "predict_cumhaz", "score_residuals", "robust_cov", "harrell_c", "coarsen",
           "load", "split_sites", "standardize", "DATASETS"]


# --- the partial likelihood ----------------------------------------------------------
def _groups(n, strata):
    if strata is None:
        return [np.arange(n)]
    strata = np.asarray(strata)
    if strata.ndim == 2:  # several strata columns: their combinations
        _, strata = np.unique(strata, axis=0, return_inverse=True)
        strata = strata.ravel()
    return [np.flatnonzero(strata == s) for s in np.unique(strata)]


def _prep(X, time, event, weights):
    X = np.asarray(X, dtype=float)
    time = np.asarray(time, dtype=float)
    event = np.asarray(event).astype(bool)
    w = np.ones(len(time)) if weights is None else np.asarray(weights, dtype=float)
    return X, time, event, w


def cox_derivatives(beta, X, time, event, weights=None, strata=None, ties="efron"):
    """Log partial likelihood, its gradient and Hessian at ``beta``."""
    X, time, event, w = _prep(X, time, event, weights)
    beta = np.asarray(beta, dtype=float)
    p = X.shape[1]
    ll, grad, hess = 0.0, np.zeros(p), np.zeros((p, p))
    for idx in _groups(len(time), strata):
        Xs, ts, es, ws = X[idx], time[idx], event[idx], w[idx]
        eta = Xs @ beta
        r = ws * np.exp(eta)
        for t in np.unique(ts[es]):
            R = ts >= t
            D = (ts == t) & es
            d = int(D.sum())
            Wt = ws[D].sum()
            S0, S1, S2 = r[R].sum(), r[R] @ Xs[R], (Xs[R] * r[R][:, None]).T @ Xs[R]
            E0, E1, E2 = r[D].sum(), r[D] @ Xs[D], (Xs[D] * r[D][:, None]).T @ Xs[D]
            ll += ws[D] @ eta[D]
            grad += ws[D] @ Xs[D]
            fracs = [0.0] if (ties == "breslow" or d == 1) else [l / d for l in range(d)]
            share = Wt / len(fracs)  # Breslow: W_t log S0; Efron: (W_t/d) sum_l ...
            for f in fracs:
                den = S0 - f * E0
                num = S1 - f * E1
                ll -= share * np.log(den)
                grad -= share * num / den
                hess -= share * ((S2 - f * E2) / den - np.outer(num, num) / den**2)
    return ll, grad, hess


def cox_objective(beta, X, time, event, weights=None, strata=None, ties="efron", alpha=0.0,
                  l1_ratio=0.0):
    """The estimator's objective, with the smooth part's gradient and Hessian."""
    X, time, event, w = _prep(X, time, event, weights)
    W = w.sum()
    ll, g, H = cox_derivatives(beta, X, time, event, w, strata, ties)
    l2 = alpha * (1 - l1_ratio)
    smooth = -ll / W + 0.5 * l2 * beta @ beta
    value = smooth + alpha * l1_ratio * np.abs(beta).sum()
    return value, -g / W + l2 * beta, -H / W + l2 * np.eye(len(beta))


def kkt_violation(beta, grad_smooth, lam):
    """Largest violation of the optimality conditions of smooth + lam * ||b||_1."""
    beta = np.asarray(beta)
    nz = beta != 0
    out = np.empty(len(beta))
    out[nz] = np.abs(grad_smooth[nz] + lam * np.sign(beta[nz]))
    out[~nz] = np.maximum(np.abs(grad_smooth[~nz]) - lam, 0.0)
    return float(out.max()) if len(out) else 0.0


def _cd_quadratic(H, b, lam, z, sweeps=10000, tol=1e-17):
    """min 0.5 z'Hz - b'z + lam ||z||_1 by cyclic coordinate descent."""
    z = z.copy()
    for _ in range(sweeps):
        delta = 0.0
        for j in range(len(z)):
            rho = b[j] - H[j] @ z + H[j, j] * z[j]
            new = np.sign(rho) * max(abs(rho) - lam, 0.0) / H[j, j]
            delta = max(delta, abs(new - z[j]))
            z[j] = new
        if delta < tol:
            break
    return z


def cox_fit(X, time, event, weights=None, strata=None, ties="efron", alpha=0.0, l1_ratio=0.0,
            max_iter=200):
    """The pooled optimum of the estimator's objective, to machine precision."""
    X = np.asarray(X, dtype=float)
    lam = alpha * l1_ratio
    beta = np.zeros(X.shape[1])

    def full(b):
        return cox_objective(b, X, time, event, weights, strata, ties, alpha, l1_ratio)

    value, g, H = full(beta)
    for _ in range(max_iter):
        if lam == 0:
            target = beta - np.linalg.solve(H, g)
        else:  # proximal Newton: the quadratic model plus the L1 term, solved exactly
            target = _cd_quadratic(H, H @ beta - g, lam, beta)
        step = target - beta
        t = 1.0
        while True:
            cand = beta + t * step
            v_new, g_new, H_new = full(cand)
            if v_new <= value + 1e-15 * abs(value) or t < 1e-10:
                break
            t *= 0.5
        beta, value, g, H = cand, v_new, g_new, H_new
        if np.max(np.abs(t * step)) < 1e-15 * max(1.0, np.max(np.abs(beta))):
            break
    return beta


# --- baseline, residuals, sandwich -----------------------------------------------------
def breslow_cumhaz(beta, X, time, event, weights=None, strata=None):
    """{stratum: (event times, cumulative baseline hazard there)} (Breslow's estimator,
    weighted: dL(t) = W_t / sum_{R_t} w_i exp(x_i'b)). One key, None, when unstratified."""
    X, time, event, w = _prep(X, time, event, weights)
    out = {}
    labels = [None] if strata is None else list(np.unique(strata))
    for label, idx in zip(labels, _groups(len(time), strata)):
        ts, es, ws = time[idx], event[idx], w[idx]
        r = ws * np.exp(X[idx] @ beta)
        times = np.unique(ts[es])
        jumps = np.array([ws[(ts == t) & es].sum() / r[ts >= t].sum() for t in times])
        out[label] = (times, np.cumsum(jumps))
    return out


def predict_cumhaz(baseline, beta, X, times, strata=None):
    """(n_samples, n_times): the step function H0(t) exp(x'b) of each row's stratum."""
    X = np.asarray(X, dtype=float)
    times = np.asarray(times, dtype=float)
    out = np.empty((len(X), len(times)))
    for i, x in enumerate(X):
        ev, H0 = baseline[None if strata is None else strata[i]]
        k = np.searchsorted(ev, times, side="right")
        out[i] = np.where(k > 0, H0[np.maximum(k - 1, 0)], 0.0) * np.exp(x @ beta)
    return out


def score_residuals(beta, X, time, event, weights=None, strata=None):
    """Breslow-type score residuals over full risk sets (ties included), weighted:
    U_i = w_i [d_i (x_i - xbar(t_i)) - exp(x_i'b) sum_{t_k <= t_i} dL_k (x_i - xbar(t_k))]."""
    X, time, event, w = _prep(X, time, event, weights)
    U = np.zeros_like(X)
    for idx in _groups(len(time), strata):
        Xs, ts, es, ws = X[idx], time[idx], event[idx], w[idx]
        e = np.exp(Xs @ beta)
        r = ws * e
        for t in np.unique(ts[es]):
            R = ts >= t
            D = (ts == t) & es
            xbar = (r[R] @ Xs[R]) / r[R].sum()
            dL = ws[D].sum() / r[R].sum()
            U[idx[D]] += ws[D][:, None] * (Xs[D] - xbar)
            U[idx[R]] -= (ws[R] * e[R] * dL)[:, None] * (Xs[R] - xbar)
    return U


def robust_cov(beta, X, time, event, weights=None, strata=None, ties="efron", groups=None,
               penalty_hessian=0.0):
    """V (sum_g U_g U_g') V with V the inverse observed information (plus the ridge
    part of a penalty, in log-likelihood units); groups None: each row its own."""
    _, _, H = cox_derivatives(beta, X, time, event, weights, strata, ties)
    V = np.linalg.inv(-H + penalty_hessian * np.eye(len(beta)))
    U = score_residuals(beta, X, time, event, weights, strata)
    if groups is not None:
        labels, inv = np.unique(groups, return_inverse=True)
        U = np.array([U[inv.ravel() == k].sum(0) for k in range(len(labels))])
    return V @ (U.T @ U) @ V


def harrell_c(time, event, risk):
    """Harrell's C by a direct loop: pairs (i, j) with i an event and t_i < t_j, or
    t_i = t_j with j censored (j outlived i's event time); concordant if risk_i >
    risk_j, half for tied risks. Two events at the same time are not comparable."""
    time, event, risk = np.asarray(time, float), np.asarray(event, bool), np.asarray(risk, float)
    num = den = 0.0
    for i in np.flatnonzero(event):
        later = (time > time[i]) | ((time == time[i]) & ~event)
        den += later.sum()
        num += (risk[i] > risk[later]).sum() + 0.5 * (risk[i] == risk[later]).sum()
    return num / den


def coarsen(time, cuts):
    """Each time replaced by the index k of the bin (c_{k-1}, c_k] that holds it."""
    cuts, time = np.asarray(cuts, float), np.asarray(time, float)
    return np.searchsorted(cuts, time, side="left").astype(float)


def standardize(X):
    """Mean 0, standard deviation 1 (ddof=1, pandas' std): lifelines' normalization of
    such columns is the identity."""
    X = np.asarray(X, dtype=float)
    return (X - X.mean(0)) / X.std(0, ddof=1)


# --- data sets lifelines and scikit-survival ship, split into sites --------------------
def _encode(frame):
    import pandas as pd

    out = {}
    for col in frame.columns:
        s = frame[col]
        if isinstance(s.dtype, pd.CategoricalDtype):
            cats = list(s.cat.categories)
            for c in cats[1:]:  # one indicator per level but the first
                out[f"{col}={c}" if len(cats) > 2 else col] = (s == c).to_numpy(float)
        else:
            out[col] = s.to_numpy(float)
    return pd.DataFrame(out, index=frame.index)


def load(name):
    """(X DataFrame of float covariates, event bool array, time float array)."""
    import pandas as pd

    if name == "rossi":
        from lifelines.datasets import load_rossi

        df = load_rossi()
        return (df.drop(columns=["week", "arrest"]).astype(float), df["arrest"].to_numpy(bool),
                df["week"].to_numpy(float))
    if name == "regression":  # continuous times: no ties at all
        from lifelines.datasets import load_regression_dataset

        df = load_regression_dataset()
        return (df[["var1", "var2", "var3"]].astype(float), df["E"].to_numpy(bool),
                df["T"].to_numpy(float))
    from sksurv import datasets

    X, y = {"whas500": datasets.load_whas500, "veterans": datasets.load_veterans_lung_cancer,
            "gbsg2": datasets.load_gbsg2}[name]()
    ev, tm = y.dtype.names
    X = _encode(X)
    if name == "whas500":
        X = X[["age", "gender", "hr", "bmi", "sysbp", "chf", "afb", "sho"]]
    if name == "veterans":  # the cell type as one integer column: a strata column
        celltype = np.zeros(len(X))
        for k, col in enumerate([c for c in X.columns if c.startswith("Celltype=")]):
            celltype[X[col].to_numpy() == 1] = k + 1
        X = X.drop(columns=[c for c in X.columns if c.startswith("Celltype=")])
        X.insert(0, "celltype", celltype)
    if name == "gbsg2":
        X = X.rename(columns={"tgrade=II": "tgrade_II", "tgrade=III": "tgrade_III"})
    return pd.DataFrame(X).reset_index(drop=True), y[ev].astype(bool), y[tm].astype(float)


DATASETS = ("rossi", "regression", "whas500", "veterans", "gbsg2")


def split_sites(X, kind, n_sites=4, column=None, seed=0):
    """Site labels: "iid" (a random balanced split) or "quantile" (sites by the
    quantiles of one covariate, a strongly heterogeneous split)."""
    n = len(X)
    if kind == "iid":
        return np.random.default_rng(seed).permutation(np.arange(n) % n_sites)
    values = np.asarray(X[column] if column is not None else X.iloc[:, 0], dtype=float)
    cuts = np.quantile(values, np.arange(1, n_sites) / n_sites)
    return np.searchsorted(cuts, values, side="right")
