"""What a GEE asks of a site: sums over its clusters, never a cluster's own terms.

A cluster (a patient's visits) lives at one site. At broadcast regression
parameters ``b`` (and a working correlation ``alpha``) a site computes, over its
clusters ``c``, the GEE's pieces and returns only their sums:

- :func:`site_gee_terms`: the "bread" ``sum_c D_c' V_c^-1 D_c``, the score
  ``sum_c D_c' V_c^-1 (y_c - mu_c)``, the Pearson sum and the row count, and at the
  end the "meat" ``sum_c u_c u_c'`` with ``u_c = D_c' V_c^-1 (y_c - mu_c)``;
- :func:`site_gee_moments`: the Pearson-residual moment sums the working
  correlation's parameter is estimated from (statsmodels' moment estimators);
- :func:`site_gee_clusters`: the cluster and row counts, the smallest and largest
  cluster's rows, and the largest time lag within a cluster (before the first round).

A cluster is the rows of one site that share a label: the labels (a patient's
identifier) never leave the site, so a label at two sites is two clusters.

``V_c = A_c^(1/2) R_c(alpha) A_c^(1/2)`` with ``A_c`` the variances ``v(mu)`` and
``R_c`` the working correlation (independence, exchangeable or AR(1) over the rows'
order in the cluster, sorted by the time column when given), solved as statsmodels'
``covariance_matrix_solve`` does (closed forms, no matrix per cluster).

``design`` is a plain dict: ``groups`` (the cluster column), ``time`` (the time
column or ``None``: the rows' order), ``time_feature`` (the time column is a
feature too: a formula's ``y ~ visit``), ``family``, ``link``, ``fit_intercept``
and ``cov_struct``.
"""

import numpy as np

from .._messages import show
from ..data.site import SiteError, numeric_matrix
from ..datafits.links import inverse_link, mean_derivative
from ..federation import dominance
from ..federation.operations import (COUNTS, SUMS, Arg, Refused, check_deadline,
                                     site_operation)
from ..mixed._site import _group_labels

FAMILIES = ("gaussian", "binomial", "poisson", "gamma")
#: each family's links (statsmodels' defaults first where skfed has them)
FAMILY_LINKS = {"gaussian": ("identity", "log"), "binomial": ("logit", "log"),
                "poisson": ("log", "identity"), "gamma": ("inverse_power", "log")}
COV_STRUCTS = ("independence", "exchangeable", "autoregressive")
#: the most distinct within-cluster time lags an AR(1) estimate works with
MAX_LAGS = 4096
#: the most parameters a request may carry
MAX_PARAMS = 4096

DESIGN_KEYS = {"groups": (str,), "time": (str, type(None)), "time_feature": (bool,),
               "family": (str,), "link": (str,), "fit_intercept": (bool,),
               "cov_struct": (str,)}


def design_problem(design):
    """The form of a GEE's design (a plain dict of :data:`DESIGN_KEYS`)."""
    if not isinstance(design, dict) or set(design) != set(DESIGN_KEYS) or any(
            not isinstance(v, DESIGN_KEYS[k]) for k, v in design.items()):
        return "a malformed GEE design"
    if design["family"] not in FAMILIES or design["cov_struct"] not in COV_STRUCTS or \
            design["link"] not in FAMILY_LINKS[design["family"]]:
        return "a GEE design with an unknown family, link or working correlation"
    return None


def design_rules(site, values, rules):
    """The cluster and time columns are the dataset's own columns (not a transform the
    analyst built, whose values would be its labels)."""
    design = values["design"]
    raw = site.meta.get("raw_columns")
    for key in ("groups", "time"):
        column = design.get(key)
        if column is not None and raw is not None and column not in raw:
            raise Refused("columns", f"the {key} column {column!r} is not one of the "
                                     "dataset's own columns", columns=[column])


def _parameters(value):
    value = np.asarray(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if value is None or value.ndim != 1 or not 1 <= value.size <= MAX_PARAMS or \
            value.dtype.kind not in "iuf" or not np.all(np.isfinite(value)):
        return "parameters are a finite vector"
    return None


_DESIGN = Arg("design", "value", check=design_problem)
_PARAMS = Arg("params", "value", check=_parameters,
              convert=lambda p: np.asarray(p, dtype=np.float64))
_ALPHA = Arg("alpha", "float", low=-1.0, high=1.0)


def variance(family, mu):
    """The family's variance function ``v(mu)``, as statsmodels' (a binomial mean
    clipped away from 0 and 1)."""
    if family == "binomial":
        p = np.clip(mu, np.finfo(float).eps, 1.0 - np.finfo(float).eps)
        return p * (1.0 - p)
    if family == "poisson":
        return np.abs(mu)
    if family == "gamma":
        return np.abs(mu) ** 2
    return np.ones_like(mu)


class _Clusters:
    """A site's rows sorted by cluster (then time), with the design's arrays."""

    def __init__(self, site, design):
        if site.n_samples == 0:
            raise SiteError(site.site, "no rows.")
        if site.sample_weight is not None:
            raise SiteError(site.site, "has sample weights; the GEE is fitted unweighted.")
        if site.y is None:
            raise SiteError(site.site, "no target (y).")
        codes, self.labels = _group_labels(site, design["groups"])  # never None here
        drop = [design["groups"]] + ([design["time"]] if design["time"] is not None and
                                     not design["time_feature"] else [])
        F = numeric_matrix(site.replace(X=site.X.drop(columns=drop)))
        time = self._time(site, design["time"], codes)
        order = np.lexsort((time, codes))  # by cluster, then time (stable for ties)
        X = np.hstack([np.ones((F.shape[0], 1)), F]) if design["fit_intercept"] else F
        self.X, self.codes, self.time = X[order], codes[order], time[order]
        self.y = _response(site, design["family"])[order]
        self.sizes = np.bincount(self.codes, minlength=len(self.labels))
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        self.position = np.arange(self.codes.size) - self.starts[self.codes]
        self.family, self.link = design["family"], design["link"]

    @staticmethod
    def _time(site, column, codes):
        """Each row's time: the column's, else its position in its cluster."""
        if column is None:
            order = np.argsort(codes, kind="stable")
            position = np.empty(codes.size)
            sizes = np.bincount(codes)
            position[order] = np.arange(codes.size) - np.repeat(
                np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
            return position
        try:
            time = np.asarray(site.X[column], dtype=np.float64)
        except (TypeError, ValueError):
            raise SiteError(site.site, f"the time column {show(column)} is not "
                                       "numeric.") from None
        if not np.all(np.isfinite(time)):
            raise SiteError(site.site, f"the time column {show(column)} has missing or "
                                       "infinite values.")
        return time

    def sum(self, rows):
        """Sums of per-row values over each cluster's rows."""
        return np.add.reduceat(rows, self.starts, axis=0)

    def mean(self, params):
        eta = self.X @ params
        mu = inverse_link(self.link, eta)
        return mu, mean_derivative(self.link, mu)

    def solve(self, alpha, kind, sdev, x):
        """``V_c^-1 x`` in every cluster (``x``: rows x columns), V without the scale:
        statsmodels' ``covariance_matrix_solve``."""
        x1 = x / sdev[:, None]
        if kind == "exchangeable":
            k = self.sizes[self.codes][:, None]
            c = alpha / (1.0 - alpha) / (1.0 + alpha * (k - 1))
            y = x1 / (1.0 - alpha) - c * self.sum(x1)[self.codes]
        elif kind == "autoregressive":
            y = self._ar_solve(alpha, x1)
        else:
            y = x1
        return y / sdev[:, None]

    def _ar_solve(self, r, x1):
        """The tri-diagonal inverse of an AR(1) correlation, cluster by cluster."""
        k = self.sizes[self.codes]
        first, last = self.position == 0, self.position == k - 1
        nxt = np.vstack([x1[1:], np.zeros((1, x1.shape[1]))])
        prv = np.vstack([np.zeros((1, x1.shape[1])), x1[:-1]])
        nxt[last], prv[first] = 0.0, 0.0
        c0, c1, c2 = (1.0 + r * r) / (1.0 - r * r), 1.0 / (1.0 - r * r), -r / (1.0 - r * r)
        y = c0 * x1 + c2 * (nxt + prv)
        ends = first | last
        y[ends] = c1 * x1[ends] + c2 * (nxt[ends] + prv[ends])
        single = k == 1  # a one-row cluster: its own variance only
        y[single] = x1[single]
        return y


def _response(site, family):
    try:
        y = np.asarray(site.y, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise SiteError(site.site, "the target is not numeric.") from None
    if not np.all(np.isfinite(y)):
        raise SiteError(site.site, "the target contains NaN or infinity.")
    if family == "binomial" and np.any((y != 0) & (y != 1)):
        raise SiteError(site.site, "a binomial GEE's outcome must be 0 or 1.")
    if family == "poisson" and np.any(y < 0):
        raise SiteError(site.site, "a Poisson GEE's outcome must be a count >= 0.")
    if family == "gamma" and np.any(y <= 0):
        raise SiteError(site.site, "a Gamma GEE's outcome must be positive.")
    return y


def _clusters(site, design):
    """The site's rows as :class:`_Clusters` (sorting them is cheap beside a round)."""
    return _Clusters(site, design)


def _lags(clusters):
    """Every within-cluster pair's time lag (later minus earlier row) and the pairs'
    rows, in statsmodels' order (each row with each earlier row of its cluster)."""
    later, earlier = [], []
    for a, n in zip(clusters.starts, clusters.sizes):
        check_deadline()
        j1, j2 = np.tril_indices(int(n), -1)
        later.append(a + j1)
        earlier.append(a + j2)
    later, earlier = np.concatenate(later), np.concatenate(earlier)
    return np.abs(clusters.time[later] - clusters.time[earlier]), later, earlier


@site_operation(
    "gee.clusters", releases=COUNTS,
    describes="four counts of a GEE's clusters (never their labels): the site's "
              "clusters, its rows, the rows of its smallest and of its largest cluster; "
              "and the largest time lag within a cluster (whole numbers)",
    arguments=(_DESIGN,), checks=(design_rules,),
    counts=lambda out: [out["clusters"], out["rows"], out["sizes"], out["max_lag"]])
def site_gee_clusters(site, design):
    """The site's cluster and row counts, its smallest and largest cluster's rows (the
    table's), and its largest within-cluster lag (for an AR(1) estimate's per-lag
    sums), before the first round; the labels stay here."""
    clusters = _clusters(site, design)
    max_lag = 0.0
    if design["cov_struct"] == "autoregressive" and np.any(clusters.sizes > 1):
        lags, _, _ = _lags(clusters)
        if np.any(lags % 1):
            raise SiteError(site.site, f"the time column {show(design['time'])} has "
                                       "within-cluster lags that are not whole numbers; "
                                       "give the visits' numbers (or whole days).")
        if np.any(lags == 0):  # an AR(1) pair at lag 0 has no finite weight
            raise SiteError(site.site, f"two rows of a cluster share a time in column "
                                       f"{show(design['time'])}; an AR(1) working "
                                       "correlation needs one row per time in a cluster.")
        max_lag = float(lags.max())
    sizes = clusters.sizes
    return {"clusters": float(sizes.size), "rows": float(sizes.sum()),
            "sizes": np.array([sizes.min(), sizes.max()], dtype=np.float64),
            "max_lag": max_lag}


def _pearson(clusters, params):
    mu, _ = clusters.mean(params)
    return (clusters.y - mu) / np.sqrt(variance(clusters.family, mu))


@site_operation(
    "gee.moments", releases=SUMS, reads_design=True, maskable=True,
    describes="sums of Pearson residuals' squares and within-cluster products (by time "
              "lag for AR(1)), and of rows and pairs: a working correlation's moment "
              "estimate, under the dominance rule",
    arguments=(_DESIGN, _PARAMS, Arg("max_lag", "int", low=0, high=MAX_LAGS)),
    checks=(design_rules,))
def site_gee_moments(site, design, params, max_lag):
    """The moment sums of statsmodels' working-correlation estimators at ``params``."""
    clusters = _clusters(site, design)
    r = _pearson(clusters, params)
    dominance.check_rows(r * r, "a GEE's Pearson sum")
    out = {"ssr": float(r @ r), "n": float(r.size)}
    n = clusters.sizes.astype(np.float64)
    if design["cov_struct"] == "exchangeable":
        within = clusters.sum(r) ** 2 - clusters.sum(r * r)
        out["pair_sum"] = float(within.sum()) / 2.0
        out["n_pairs"] = float((0.5 * n * (n - 1.0)).sum())
    elif design["cov_struct"] == "autoregressive":
        out.update(_lag_sums(clusters, r, max_lag))
    return out


def _lag_sums(clusters, r, max_lag):
    """Lag-one sums (statsmodels' grid estimate) and per-lag sums of every pair's
    squares and products (its estimate over all pairs)."""
    n = clusters.sizes.astype(np.float64)
    same = np.flatnonzero(clusters.position[1:] > 0) + 1  # rows after a row of theirs
    products = np.zeros(clusters.sizes.size)
    np.add.at(products, clusters.codes[same], r[same] * r[same - 1])
    many = n > 1
    out = {"lag1": float((products[many] / (n[many] - 1.0)).sum()),
           "lag0": float((clusters.sum(r * r)[many] / n[many]).sum())}
    count, s11, s12, s22 = (np.zeros(max_lag + 1) for _ in range(4))
    if np.any(many):
        lags, later, earlier = _lags(clusters)
        if lags.size and lags.max() > max_lag:
            raise ValueError("a within-cluster lag beyond the broadcast largest lag.")
        d = lags.astype(np.int64)
        dominance.check_rows(np.column_stack([r[later] ** 2, r[later] * r[earlier],
                                              r[earlier] ** 2]), "a GEE's lag sums")
        np.add.at(count, d, 1.0)
        np.add.at(s11, d, r[later] ** 2)
        np.add.at(s12, d, r[later] * r[earlier])
        np.add.at(s22, d, r[earlier] ** 2)
    out.update(lag_count=count, s11=s11, s12=s12, s22=s22)
    return out


def _start_mean(family, y, ybar):
    """statsmodels' GLM start: the mean between each outcome and the pooled mean
    (a binomial outcome's between it and one half)."""
    return (y + 0.5) / 2.0 if family == "binomial" else (y + ybar) / 2.0


def _link_of(link, mu):
    if link == "log":
        return np.log(mu)
    if link == "logit":
        return np.log(mu / (1.0 - mu))
    return 1.0 / mu if link == "inverse_power" else mu


@site_operation(
    "gee.start", releases=SUMS, reads_design=True, maskable=True,
    describes="without a pooled mean: the outcome sum and row count; with it, the first "
              "IRLS step's p x p X'WX and X'Wz at statsmodels' starting means (the "
              "independence GLM's start), under the dominance rule",
    arguments=(_DESIGN, Arg("ybar", "float", nullable=True)), checks=(design_rules,))
def site_gee_start(site, design, ybar):
    """The outcome sum and count (``ybar`` ``None``), else the sums of the GLM's first
    IRLS step from ``mu0`` between each outcome and ``ybar``."""
    clusters = _clusters(site, design)
    y = clusters.y
    dominance.check_rows(y, "a GEE's outcome sum")
    if ybar is None:
        return {"ysum": float(y.sum()), "n": float(y.size)}
    mu = _start_mean(design["family"], y, ybar)
    dmu = mean_derivative(design["link"], mu)
    w = dmu * dmu / variance(design["family"], mu)
    z = _link_of(design["link"], mu) + (y - mu) / dmu
    X = clusters.X
    dominance.check_products(X, X, w, what="a GEE's start")
    dominance.check_products(X, (w * z)[:, None], what="a GEE's start")
    return {"xtwx": X.T @ (X * w[:, None]), "xtwz": X.T @ (w * z)}


@site_operation(
    "gee.terms", releases=SUMS, reads_design=True, maskable=True,
    describes="the GEE's p x p bread sum(D'V^-1 D), its score sum(D'V^-1 r), the Pearson "
              "sum and row count, and (with meat) the sum over clusters of the score's "
              "outer products; per-cluster terms stay at the site; under the dominance rule",
    arguments=(_DESIGN, _PARAMS, _ALPHA, Arg("meat", "bool")), checks=(design_rules,))
def site_gee_terms(site, design, params, alpha, meat):
    """The bread, score, Pearson sum and row count at ``(params, alpha)``; with
    ``meat`` the robust meat as well."""
    clusters = _clusters(site, design)
    mu, dmu = clusters.mean(params)
    sdev = np.sqrt(variance(clusters.family, mu))
    D = clusters.X * dmu[:, None]
    resid = clusters.y - mu
    solved = clusters.solve(alpha, design["cov_struct"], sdev, np.column_stack([D, resid]))
    vinv_d, vinv_r = solved[:, :-1], solved[:, -1]
    pearson = resid / sdev
    dominance.check_products(D, vinv_d, what="a GEE's bread")
    dominance.check_products(D, vinv_r[:, None], what="a GEE's score")
    dominance.check_rows(pearson * pearson, "a GEE's Pearson sum")
    out = {"bread": D.T @ vinv_d, "score": D.T @ vinv_r, "ssr": float(pearson @ pearson),
           "n": float(resid.size)}
    if meat:
        scores = D * vinv_r[:, None]
        u = clusters.sum(scores)  # each cluster's score: stays here
        # the meat row by row: sum_c u_c u_c' = sum_i s_i u_c(i)'
        dominance.check_products(scores, u[clusters.codes], what="a GEE's meat")
        out["meat"] = u.T @ u
    return out
