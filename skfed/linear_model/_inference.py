"""Wald inference for federated GLMs: standard errors, z, p-values, intervals, deviance.

After the fit, **one** extra federated pass at the optimum: each site sends
sums over its rows only (p x p matrices and scalars, never a row):

- its Fisher information ``A' diag(w f) A`` (``A = [X, 1]``, ``f = mu'^2 / v(mu)``)
  for ``cov_type="nonrobust"``;
- for the sandwich types, its observed information (the bread; statsmodels
  uses the observed Hessian there, which differs from the Fisher information
  for a non-canonical link such as Gamma's log) and either its meat
  ``A' diag(w s^2) A`` (HC0, HC1) or the outer product ``S S'`` of its own
  score sum ``S = A' (w s)`` (``cluster``: the sites are the clusters);
- its Pearson chi2, deviance, weight sum and the log-likelihood pieces of
  the family.

The null deviance (intercept-only model, offset kept, as statsmodels' ``null``)
takes a few more passes of a handful of scalars: Fisher scoring on the single
intercept (one pass without an offset). Every pass runs through the fit's
executor (Dask-resident sites included) and, under
:class:`~skfed.privacy.SecureAggregation`, through its masked sums: the server
learns the pooled sums only. Under differential privacy no inference is made
(the sums would leave the sites without noise).

Conventions (the reference is statsmodels' ``GLM``, see ``docs/epidemiology.md``):
``sample_weight`` are **frequency** weights (a row of weight 3 is three equal
rows, as scikit-learn's sample-weight equivalence), so ``n = sum(w)``;
``scale`` is 1 for binomial and Poisson, else Pearson chi2 / (n - p);
z-tests with the normal distribution; HC1 is HC0 times ``n / (n - p)``
(statsmodels 0.15's GLM ``cov_type="HC1"`` returns HC0 unscaled: GLM results
define no ``cov_HC1`` and ``get_robustcov_results`` falls back to
``cov_white_simple(use_correction=False)``); cluster uses
``G / (G - 1) * (n - 1) / (n - p)``.
"""

from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.special import gammaln, xlogy

from ..datafits.base import hessian_from_raw
from ..federation import dominance
from ..federation.combine import Combine
from ..federation.operations import SUMS, Arg, site_operation
from ..federation.wire import wire_class
from ..solvers.newton import pack_upper, unpack_upper
from ..datafits.links import inverse_link, mean_derivative, ratio_measure
from ..stats._hypothesis import warn_few_clusters
from ..stats._results import EstimatorWald

COV_TYPES = ("nonrobust", "HC0", "HC1", "cluster")
#: the null model's intercept is iterated until its step is below this (relative)
NULL_TOL = 1e-13
NULL_MAX_PASSES = 100


class InferenceError(ValueError, AttributeError):
    """Inference is not available for this fit (the message says why and what to do).

    A ``ValueError`` (what went wrong is the fit's setting or its data) and an
    ``AttributeError`` (``hasattr(est, "bse_")`` is False)."""


# --- families: what the sites need to compute their sums ----------------------
@wire_class(role="family")
@dataclass(frozen=True)
class Family:
    """A GLM family with its link, as seen by the inference pass.

    ``name`` is one of "gaussian", "binomial", "poisson", "gamma", "tweedie";
    ``power`` the Tweedie variance power; ``link`` "identity", "log" or "logit".
    """

    name: str
    link: str
    power: float = 0.0

    @property
    def fixed_scale(self):
        return self.name in ("binomial", "poisson")

    @property
    def canonical(self):
        return ((self.name, self.link) in (("gaussian", "identity"), ("binomial", "logit"),
                                            ("poisson", "log"))
                or (self.name == "tweedie" and self.link == "log" and self.power == 1)
                or (self.name == "tweedie" and self.link == "identity" and self.power == 0))

    @property
    def variance_power(self):
        return {"gaussian": 0.0, "poisson": 1.0, "gamma": 2.0}.get(self.name, self.power)

    def decode(self, Y):
        """The response from the target the loss sees (+-1 labels -> 0/1)."""
        y = np.asarray(Y, dtype=float)[:, 0]
        return (y + 1.0) / 2.0 if self.name == "binomial" else y

    def mean(self, eta):
        return inverse_link(self.link, eta)

    def variance(self, mu):
        if self.name == "binomial":
            return mu * (1.0 - mu)
        return np.power(mu, self.variance_power) if self.variance_power else np.ones_like(mu)

    def dmu_deta(self, mu):
        return mean_derivative(self.link, mu)

    def fisher_weight(self, mu):
        """Expected information per unit weight in the linear predictor (times the scale)."""
        return self.dmu_deta(mu) ** 2 / self.variance(mu)

    def score_factor(self, y, mu):
        """``(y - mu) mu' / v(mu)``: the row's score is this times its features."""
        return (y - mu) * self.dmu_deta(mu) / self.variance(mu)

    def observed_weight(self, y, mu):
        """Observed information in the linear predictor (times the scale)."""
        if self.canonical or self.link == "identity" and self.variance_power == 0:
            return self.fisher_weight(mu)
        if self.link == "log":  # -d/deta of (y - mu) mu^(1 - p), p the variance power
            p = self.variance_power
            return (2 - p) * mu ** (2 - p) + (p - 1) * y * mu ** (1 - p)
        raise ValueError(f"no observed information for {self}.")  # pragma: no cover

    def unit_deviance(self, y, mu):
        if self.name == "binomial":
            return 2.0 * (xlogy(y, y / mu) + xlogy(1 - y, (1 - y) / (1 - mu)))
        p = self.variance_power
        if p == 0:
            return (y - mu) ** 2
        if p == 1:
            return 2.0 * (xlogy(y, y / mu) - y + mu)
        if p == 2:
            return 2.0 * (np.log(mu / y) + y / mu - 1.0)
        y_term = np.where(y > 0, np.power(np.maximum(y, 0.0), 2 - p), 0.0) / ((1 - p) * (2 - p))
        return 2.0 * (y_term - y * mu ** (1 - p) / (1 - p) + mu ** (2 - p) / (2 - p))

    # -- log-likelihood (statsmodels' families, with their constant terms) -----
    def loglike_pieces(self, y, mu, w):
        """Sums a site sends, from which :meth:`loglike` assembles the log-likelihood."""
        if dominance.active() is not None:
            self._audit_loglike(y, mu, w)
        if self.name == "binomial":
            return {"ll": float(w @ (xlogy(y, mu) + xlogy(1 - y, 1 - mu)))}
        p = self.variance_power
        if self.name == "gaussian":
            return {"rss": float(w @ (y - mu) ** 2)}
        if p == 1:
            return {"ll": float(w @ (xlogy(y, mu) - mu - gammaln(y + 1)))}
        if p == 2:
            return {"log_y_mu": float(w @ np.log(y / mu)), "y_mu": float(w @ (y / mu)),
                    "log_y": float(w @ np.log(y))}
        if self.series_density:  # (y theta - kappa); the density's c(y, phi) comes later
            return {"y_theta_kappa": float(w @ (y * mu ** (1 - p) / (1 - p)
                                                 - mu ** (2 - p) / (2 - p)))}
        return {}

    def _audit_loglike(self, y, mu, w):
        """The dominance rule on each log-likelihood piece, row by row."""
        if self.name == "binomial":
            rows = [xlogy(y, mu) + xlogy(1 - y, 1 - mu)]
        elif self.name == "gaussian":
            rows = [(y - mu) ** 2]
        elif self.variance_power == 1:
            rows = [xlogy(y, mu) - mu - gammaln(y + 1)]
        elif self.variance_power == 2:
            rows = [np.log(y / mu), y / mu, np.log(y)]
        elif self.series_density:
            p = self.variance_power
            rows = [y * mu ** (1 - p) / (1 - p) - mu ** (2 - p) / (2 - p)]
        else:
            return
        dominance.check_rows(np.column_stack(rows) * w[:, None], "a log-likelihood")

    @property
    def series_density(self):
        """Whether the log-likelihood needs the Tweedie series density (1 < p < 2):
        statsmodels' Dunn & Smyth evaluation, whose ``log c(y, phi)`` term needs
        the dispersion, so one more pass of one scalar once it is known."""
        return self.name == "tweedie" and 1 < self.variance_power < 2

    def loglike(self, pieces, scale, n):
        """statsmodels' ``llf``: Gaussian (identity link) concentrated at the MLE
        of the scale, Poisson and Gamma at ``scale``; NaN for Tweedie powers
        other than 1 and 2 (statsmodels does not compute the series density)."""
        if self.name == "binomial":
            return pieces["ll"]
        if self.name == "gaussian":
            s = pieces["rss"] / n
            return -0.5 * (pieces["rss"] / s + n * np.log(s) + n * np.log(2 * np.pi))
        p = self.variance_power
        if p == 1:
            return pieces["ll"] / scale
        if p == 2:
            k = 1.0 / scale
            return (k * pieces["log_y_mu"] + n * k * np.log(k) - k * pieces["y_mu"]
                    - n * gammaln(k) - pieces["log_y"])
        if self.series_density:
            return pieces["y_theta_kappa"] / scale + pieces["log_c"]
        return np.nan


# --- what runs at a site (module level: picklable for process and Dask executors) ---
def _design_sum(client, weights):
    """``A' diag(weights) A`` with ``A = [X, 1]`` (the intercept column when fitted)."""
    weights = np.asarray(weights, dtype=float)
    if dominance.active() is not None:
        X = client.X
        dominance.check_products(X, X, weights, "an information matrix")
        dominance.check_products(X, np.ones((X.shape[0], 1)), weights, "an information matrix")
        dominance.check_rows(weights, "an information matrix")
    return hessian_from_raw(client.X, weights[:, None], client.layout)


def _score_sum(client, factor):
    """``A' factor``: the site's score sum in the layout of theta."""
    lay = client.layout
    dominance.check_products(client.X, factor[:, None], what="a score sum")
    dominance.check_rows(factor, "a score sum")
    S = np.asarray(client.X.T @ factor).ravel()
    return np.concatenate([S, [factor.sum()]]) if lay.fit_intercept else S


def _family(value):
    from ..federation.wire import role_of

    return None if role_of(value) == "family" else "a GLM family of skfed's"


_THETA = Arg("theta", "floats", most=1 << 20)
_FAMILY = Arg("family", "object", role="family", check=_family)


def _cluster_meat(sums):
    """The site's sums with its cluster meat: the outer product of its whole score sum
    (on an engine, of the partitions' score sums added; never their outer products
    added)."""
    if "score" not in sums:
        return sums
    out = {key: value for key, value in sums.items() if key != "score"}
    out["cluster_meat"] = pack_upper(np.outer(sums["score"], sums["score"]))
    return out


@site_operation(
    "fit.inference", releases=SUMS, target="fit", maskable=True,
    # an engine's partitions' sums added; the cluster meat from the whole site's score sum
    combine=Combine("sum", part=lambda *a: _inference_sums(*a),
                    finish=lambda sums, args, site: _cluster_meat(sums)),
    describes="at the fitted model: the p x p information, and the sandwich's p x p meat "
              "(HC0/HC1) or the outer product of the site's score sum (cluster); Pearson "
              "chi-square, deviance and log-likelihood sums; under the dominance rule",
    arguments=(_THETA, _FAMILY, Arg("cov_type", "choice",
                                    choices=("nonrobust", "HC0", "HC1", "cluster"))))
def client_inference_terms(client, theta, family, cov_type):
    """One site's sums at the optimum ``theta`` (see the module docstring)."""
    return _cluster_meat(_inference_sums(client, theta, family, cov_type))


def _inference_sums(client, theta, family, cov_type):
    """The sums of :func:`client_inference_terms`; ``"cluster"``: the score sum in place
    of its outer product."""
    w = client.sample_weight
    eta = client.raw(theta)[:, 0]  # a quadratic loss's offset is folded into its target
    y = family.decode(client.Y)
    mu = family.mean(eta)
    s = family.score_factor(y, mu)
    dominance.check_rows(np.column_stack([w, w * (y - mu) ** 2 / family.variance(mu),
                                          w * family.unit_deviance(y, mu)]),
                         "a goodness-of-fit sum")
    out = {"n": float(w.sum()),
           "pearson": float(w @ ((y - mu) ** 2 / family.variance(mu))),
           "deviance": float(w @ family.unit_deviance(y, mu))}
    out.update(family.loglike_pieces(y, mu, w))
    if cov_type == "nonrobust":
        out["fisher"] = pack_upper(_design_sum(client, w * family.fisher_weight(mu)))
    else:
        out["observed"] = pack_upper(_design_sum(client, w * family.observed_weight(y, mu)))
        if cov_type == "cluster":
            out["score"] = _score_sum(client, w * s)
        else:
            out["meat"] = pack_upper(_design_sum(client, w * s * s))
    return out


@site_operation(
    "fit.inference_dispersion", releases=SUMS, target="fit", maskable=True, combine="sum",
    describes="the Tweedie density's series term, summed, under the dominance rule",
    arguments=(Arg("scale", "float", low=0), _FAMILY))
def client_tweedie_log_c(client, scale, family):
    """``sum_i w_i log c(y_i, phi)`` over the site's positive responses: the part of
    the Tweedie log-density (1 < p < 2) that depends on ``y`` and the dispersion
    only (Dunn & Smyth's series, as statsmodels: ``log_wright_bessel``)."""
    from scipy.special import log_wright_bessel

    w, y = client.sample_weight, family.decode(client.Y)
    p = family.variance_power
    alpha = (2 - p) / (1 - p)
    pos = y > 0
    x = ((p - 1) * scale / y[pos]) ** alpha / ((2 - p) * scale)
    terms = -np.log(y[pos]) + log_wright_bessel(-alpha, 0, x)
    dominance.check_rows(w[pos] * terms, "a log-density")
    return {"log_c": float(w[pos] @ terms)}


@site_operation(
    "fit.inference_null", releases=SUMS, target="fit", maskable=True, combine="sum",
    describes="the null model's score, information and deviance sums at a broadcast "
              "intercept, under the dominance rule",
    arguments=(Arg("intercept", "float"), _FAMILY))
def client_null_terms(client, intercept, family):
    """One site's sums for the intercept-only model ``eta = intercept + offset``:
    score and information in the intercept, deviance and log-likelihood pieces;
    and the weighted response sum (the start)."""
    w = client.sample_weight
    y = family.decode(client.Y)
    offset = client.raw_offset
    eta = np.full(len(y), float(intercept)) if offset is None else intercept + offset
    mu = family.mean(eta)
    dominance.check_rows(np.column_stack([w * y, w * family.score_factor(y, mu),
                                          w * family.fisher_weight(mu),
                                          w * family.unit_deviance(y, mu)]), "a null model's sum")
    out = {"wy": float(w @ y), "score": float(w @ family.score_factor(y, mu)),
           "information": float(w @ family.fisher_weight(mu)),
           "deviance": float(w @ family.unit_deviance(y, mu))}
    out.update(family.loglike_pieces(y, mu, w))
    return out


# --- the server side ------------------------------------------------------------
def inference_pass(session, problem, theta, family, cov_type):
    """The inference pass and the null-model passes (the ``inference`` phase of the
    fit's ``session``): the summed terms."""
    # one public scale for every masked pass: the inverse of the sites' total weight
    # (a site service checks it against the weight sums the sites signed)
    scale = 1.0 / max(float(problem.weight_total), 1.0)
    terms = session.sum(client_inference_terms, theta, family, cov_type, scale=scale,
                        phase="inference")
    total_weight = float(terms["n"])
    # the null model: Fisher scoring on the intercept (exact at the weighted mean
    # without an offset: one more pass evaluates it there)
    start = session.sum(client_null_terms, 0.0, family, scale=scale, phase="inference")
    ybar = float(start["wy"]) / total_weight
    null = None
    # the null model has a finite intercept unless the mean response is at the edge
    # of the link's range (all zeros for a log link; one class for the logit)
    if family.link == "identity" or (family.link == "log" and ybar > 0) or 0 < ybar < 1:
        b = float(np.log(ybar) if family.link == "log" else
                  np.log(ybar / (1 - ybar)) if family.link == "logit" else ybar)
        for _ in range(NULL_MAX_PASSES):
            null = session.sum(client_null_terms, b, family, scale=scale, phase="inference")
            information = float(null["information"])
            step = float(null["score"]) / information if information > 0 else 0.0
            if abs(step) <= NULL_TOL * max(1.0, abs(b)):
                break
            b += step
    terms["null"] = None if null is None else {k: float(v) for k, v in null.items()}
    if family.series_density and total_weight > problem.layout.size:
        # the dispersion is known now: its density term
        phi = float(terms["pearson"]) / (total_weight - problem.layout.size)
        extra_terms = session.sum(client_tweedie_log_c, phi, family, scale=scale,
                                  phase="inference")
        terms["log_c"] = float(extra_terms["log_c"])
        if terms["null"] is not None:
            terms["null"]["log_c"] = terms["log_c"]
    return terms


def _symmetric_inverse(H, names):
    """``H^-1``, or the reason it does not exist naming the collinear columns.

    Decided on the equilibrated matrix ``D^-1/2 H D^-1/2`` (``D`` its diagonal:
    a correlation-like matrix), so that covariates on very different scales
    (incomes in thousands beside proportions) are not mistaken for collinear
    ones; inverted in that form too."""
    diag = np.diag(H)
    if not np.all(diag > 0):
        zero = [names[k] for k in np.flatnonzero(~(diag > 0))]
        return None, (f"the information matrix has no information on {', '.join(zero)} "
                      "(a column that is zero, or whose rows all have zero weight); drop it "
                      "and refit")
    d = np.sqrt(diag)
    eig, vec = np.linalg.eigh(H / d[:, None] / d[None, :])
    if eig[0] <= 1e-10 * eig[-1]:
        v = vec[:, 0]
        condition = eig[-1] / eig[0] if eig[0] > 0 else np.inf
        involved = [names[k] for k in np.flatnonzero(np.abs(v) > 0.1 * np.abs(v).max())]
        return None, (
            "the information matrix is singular (condition number of its equilibrated form "
            f"{condition:.3g}): the columns {', '.join(map(str, involved))} are (nearly) "
            "collinear, so their coefficients are not identified. Drop one of them (or a "
            "redundant one-hot level) and refit")
    return ((vec / eig) @ vec.T) / d[:, None] / d[None, :], None


def finish_inference(terms, family, cov_type, p, n_clients, names):
    """The fitted inference attributes from the pooled sums (order of ``names``:
    the layout's, coefficients then intercept)."""
    n = float(terms["n"])
    resid_df = n - p
    pearson = float(terms["pearson"])
    if not resid_df > 0:
        nan = float("nan")
        why = (f"the fit has {n:g} (weighted) rows for {p} parameters: no residual degrees "
               "of freedom, so no dispersion or covariance can be estimated")
        return {"scale": nan, "deviance": float(terms["deviance"]), "null_deviance": nan,
                "pearson_chi2": pearson, "nobs": n, "df_resid": resid_df, "df_model": p - 1,
                "loglike": nan, "loglike_null": nan, "aic": nan, "bic": nan, "cov": None,
                "why": why}
    scale = 1.0 if family.fixed_scale else pearson / resid_df
    if cov_type == "nonrobust":
        Hinv, why = _symmetric_inverse(unpack_upper(terms["fisher"], p), names)
        cov = None if Hinv is None else scale * Hinv
    else:
        Hinv, why = _symmetric_inverse(unpack_upper(terms["observed"], p), names)
        if Hinv is not None:
            if cov_type == "cluster":
                if n_clients < 2:
                    why = ("cov_type='cluster' treats the sites as the clusters, and this fit "
                           "has one site; pass clients=site (at least two sites).")
                M = unpack_upper(terms["cluster_meat"], p)
                factor = n_clients / (n_clients - 1.0) * (n - 1.0) / resid_df if (
                    n_clients > 1) else np.nan
            else:
                M = unpack_upper(terms["meat"], p)
                factor = n / resid_df if cov_type == "HC1" else 1.0
            cov = factor * (Hinv @ M @ Hinv)
    null = terms["null"]  # None: the intercept-only model has no finite optimum
    out = {"scale": scale, "deviance": float(terms["deviance"]),
           "null_deviance": np.nan if null is None else null["deviance"],
           "pearson_chi2": pearson, "nobs": n, "df_resid": resid_df, "df_model": p - 1,
           "loglike": family.loglike(terms, scale, n),
           "loglike_null": np.nan if null is None else family.loglike(null, scale, n),
           "cov": None, "why": why}
    out["aic"] = -2.0 * out["loglike"] + 2.0 * p
    out["bic"] = -2.0 * out["loglike"] + p * np.log(n)  # statsmodels' bic (= bic_llf)
    if why is None:
        out["cov"] = cov
    return out


# --- what the estimators expose ---------------------------------------------------
class GLMInferenceMixin(EstimatorWald):
    """Fitted inference (``bse_``, ``pvalues_``, ``summary()``...) shared by the GLMs and
    :class:`~skfed.FedLogisticRegression`.

    A subclass defines ``_inference_family()`` (a :class:`Family`, or raises
    :class:`InferenceError` when the model has none) and ``_penalized()``
    (the reason inference is invalid, or ``None``).
    """

    # -- during fit: called by FederatedLinearModel._fit_federated --------------
    def _final_pass(self, session, problem, solver, theta):
        self._inference = None
        self._inference_why = None
        why = self._penalized()
        if why is None and solver.differentially_private:
            why = ("inference is not made under differential privacy: the pass would send "
                   "each site's information matrix and sums without noise, outside the "
                   "privacy budget")
        if why is None:
            try:
                family = self._inference_family()
            except InferenceError as exc:
                why = str(exc)
        if why is not None:
            self._inference_why = why
            return
        if not np.all(np.isfinite(theta)):
            self._inference_why = "the fitted coefficients are not finite"
            return
        terms = inference_pass(session, problem, theta, family, self.cov_type)
        lay = problem.layout
        names = self._parameter_names(lay)
        self._inference = finish_inference(terms, family, self.cov_type, lay.size,
                                           problem.n_clients, names)
        self._inference["theta"] = np.asarray(theta, dtype=float).copy()
        self._inference["names"] = names
        self._inference["family"] = family
        if self._inference["why"] is not None:
            self._inference_why = self._inference["why"]
        elif self.cov_type == "cluster":
            warn_few_clusters(self, problem.n_clients, factor_applied=True)

    def _parameter_names(self, layout):
        names = (list(map(str, self.feature_names_in_)) if hasattr(self, "feature_names_in_")
                 else [f"x{k}" for k in range(layout.n_features)])
        return names + (["intercept"] if layout.fit_intercept else [])

    # -- reading the results -----------------------------------------------------
    def _result(self, key):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        why = getattr(self, "_inference_why", None)
        info = getattr(self, "_inference", None)
        if info is not None and key in info and key not in ("cov",) and info[key] is not None:
            return info[key]
        if why is not None:
            raise InferenceError(f"{type(self).__name__}: no inference for this fit: "
                                 f"{why.rstrip('.')}.")
        if info is None:
            raise InferenceError(f"{type(self).__name__}: no inference for this fit.")
        return info[key]

    def _order(self, v):
        """From the layout's order (coefficients, intercept) to the table's
        (intercept first, as statsmodels' ``add_constant``)."""
        v = np.asarray(v)
        if not self.fit_intercept:
            return v
        return np.concatenate([v[-1:], v[:-1]]) if v.ndim == 1 else v[np.ix_(
            self._perm(len(v)), self._perm(len(v)))]

    @staticmethod
    def _perm(p):
        return np.r_[p - 1, np.arange(p - 1)]

    @property
    def params_(self):
        """Fitted parameters in the order of the inference table: the intercept
        first (when fitted), then the coefficients."""
        return self._order(self._result("theta"))

    @property
    def param_names_(self):
        """Names of the rows of the inference table (``"intercept"``, then the
        feature names or ``x0, x1, ...``)."""
        return list(self._order(np.asarray(self._result("names"), dtype=object)))

    @property
    def cov_params_(self):
        """Covariance of the estimates (``cov_type``), in the order of ``params_``."""
        return self._order(self._result("cov"))

    @property
    def scale_(self):
        """Dispersion: 1 for binomial and Poisson, else Pearson chi2 / (n - p)."""
        return self._result("scale")

    @property
    def family_(self):
        """The inference's :class:`Family` (``name``, ``link``, variance ``power``)."""
        return self._result("family")

    @property
    def nobs_(self):
        """The (weighted) number of rows: the sum of the sample weights."""
        return self._result("nobs")

    @property
    def df_resid_(self):
        """Residual degrees of freedom ``nobs_ - len(params_)``."""
        return self._result("df_resid")

    def _df_inference(self, use_t):
        """Student's t degrees of freedom: the sites minus one for ``cov_type="cluster"``
        (statsmodels' ``df_correction=True``), else the residual df ``n - p``."""
        if use_t and self.cov_type != "cluster":
            return float(self.df_resid_)
        return super()._df_inference(use_t)

    @property
    def deviance_(self):
        """Deviance at the fit (sum over the sites' rows, weighted)."""
        return self._result("deviance")

    @property
    def null_deviance_(self):
        """Deviance of the intercept-only model (offset kept), fitted federatedly."""
        return self._result("null_deviance")

    @property
    def pearson_chi2_(self):
        """Pearson's chi2 statistic at the fit."""
        return self._result("pearson_chi2")

    @property
    def loglike_(self):
        """Log-likelihood with statsmodels' definition (its constant terms included)."""
        return self._result("loglike")

    @property
    def aic_(self):
        """``-2 loglike_ + 2 p`` (p parameters, intercept included)."""
        return self._result("aic")

    @property
    def bic_(self):
        """``-2 loglike_ + p log(n)``: statsmodels 0.15's ``bic`` (``bic_llf``)."""
        return self._result("bic")

    # -- the regression table (written once in skfed.stats._results) --------------
    _summary_title = "Generalized Linear Model Regression Results"

    def _measure(self):
        family = self._result("family")
        return ratio_measure(family.link, family.name)

    def summary(self, alpha=0.05, exponentiate=False, use_t=False):
        """The regression table: estimate, standard error, z, p-value, interval.

        Parameters
        ----------
        alpha : float, default=0.05
            One minus the confidence level of the intervals.
        exponentiate : bool, default=False
            Report ``exp(coef)`` and the exponentiated interval (rate ratios
            for a log link, odds ratios for the logit); standard error, z and
            p-value stay those of the coefficient.
        use_t : bool, default=False
            p-values and intervals from Student's t (columns ``t`` and
            ``P>|t|``), with the degrees of freedom of
            ``conf_int(use_t=True)``: statsmodels' ``use_t=True``.

        Returns
        -------
        table : Summary
            A ``pandas.DataFrame``: rows ``param_names_``; columns ``coef``
            (or ``exp(coef)``), ``std err``, ``z``, ``P>|z|`` and the
            interval's bounds (named ``[0.025`` and ``0.975]`` at the default
            alpha); ``print(table)`` adds the fit's facts above it.
        """
        return super().summary(alpha, use_t, exponentiate)

    def _summary_info(self):
        family = self._result("family")
        info = {"Model:": type(self).__name__, "Family:": family.name.capitalize(),
                "Link:": family.link, "No. Observations:": f"{self.nobs_:g}",
                "Df Residuals:": f"{self.df_resid_:g}", "Covariance:": self.cov_type,
                "Scale:": f"{self.scale_:.4g}", "Log-Likelihood:": f"{self.loglike_:.4f}",
                "Deviance:": f"{self.deviance_:.4f}", "AIC:": f"{self.aic_:.4f}",
                "Sites:": str(getattr(self, "n_clients_", ""))}
        return info


def likelihood_ratio_test(restricted, full):
    """Likelihood-ratio test of two nested federated GLM fits on the same rows.

    The statistic is the drop in deviance divided by the full model's scale,
    ``(D_restricted - D_full) / scale_full``: twice the log-likelihood
    difference for binomial and Poisson (scale 1); for families with a
    dispersion the scaled-deviance test with the full model's Pearson scale.
    Compared with chi2 with ``p_full - p_restricted`` degrees of freedom.

    Parameters
    ----------
    restricted, full : fitted estimator
        Unpenalized fits of the same family on the same rows and sites, the
        restricted model's columns a subset of the full model's (the function
        checks the counts and the family, not the nesting itself).

    Returns
    -------
    result : dict
        ``statistic``, ``df`` and ``pvalue``.
    """
    for label, est in (("restricted", restricted), ("full", full)):
        if not isinstance(est, GLMInferenceMixin):
            raise TypeError(f"{label} is a {type(est).__name__}, not a skfed GLM estimator.")
        est._result("deviance")  # fitted, unpenalized (else a clear error)
    fam_r, fam_f = restricted._result("family"), full._result("family")
    if fam_r != fam_f:
        raise ValueError(f"the two fits have different families ({fam_r.name}, {fam_f.name}).")
    if restricted._result("nobs") != full._result("nobs"):
        raise ValueError("the two fits are on different rows (different weighted counts).")
    df = len(full._result("theta")) - len(restricted._result("theta"))
    if df <= 0:
        raise ValueError("the restricted model must have fewer parameters than the full one.")
    statistic = (restricted.deviance_ - full.deviance_) / full.scale_
    return {"statistic": float(statistic), "df": int(df),
            "pvalue": float(stats.chi2.sf(statistic, df))}
