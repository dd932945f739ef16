"""What a causal analysis asks of a site: sums and counts over its rows, never a row.

A site reads its treatment, outcome and covariates (the analysis's ``spec``, a
plain dict), builds the propensity design ``Z = [1, X]`` and answers:

- :func:`site_ee_sums`: at broadcast parameters, the stacked estimating
  equations' sum ``sum psi``, summed derivative ``sum d psi / d theta`` and meat
  ``sum psi psi'`` (:mod:`skfed.causal._equations`), with the arms' row counts
  and outcome sums (a Newton start); the scores never leave the site;
- :func:`site_balance_sums`: per arm and covariate, the unweighted and
  weighted moments of the standardised mean differences and the weights' sums
  and sums of squares (the effective sample size);
- :func:`site_overlap_counts`: per arm, the count of rows in each fixed bin of
  the propensity score and of rows whose weight exceeds a threshold, each
  count of 1 to ``min_count - 1`` rows released as 0 and flagged.
"""

import numpy as np

from .._messages import show
from ..data.site import SiteError
from ..federation import dominance
from ..federation.combine import Combine, tree_combine
from ..federation.operations import COUNTS, SUMS, Arg, row_step, site_operation
from ._equations import (ESTIMANDS, FAMILIES, arm_weights, blocks, n_parameters, scores,
                         stacked)

#: the most covariates of one analysis
MAX_COVARIATES = 512
_KEYS = {"treatment": str, "outcome": (str, type(None)), "covariates": list,
         "estimand": str, "stabilized": bool, "truncate": (list, type(None)),
         "trim": (list, type(None)), "method": str, "family": str, "scores": str}
#: keys a spec may hold besides: the outcome models' own covariates (AIPW)
_OPTIONAL = {"outcome_covariates": (list, type(None))}


def spec_problem(spec):
    """The form of a causal analysis's ``spec`` (a plain dict of :data:`_KEYS`)."""
    if not isinstance(spec, dict) or not set(_KEYS) <= set(spec) <= set(_KEYS) | set(
            _OPTIONAL) or any(not isinstance(spec[k], t) for k, t in
                              {**_KEYS, **_OPTIONAL}.items() if k in spec):
        return "a malformed causal analysis"
    for names in (spec["covariates"], spec.get("outcome_covariates") or []):
        if len(names) > MAX_COVARIATES or not all(isinstance(c, str) and 0 < len(c) <= 256
                                                  for c in names):
            return f"covariates are at most {MAX_COVARIATES} column names"
    if spec["estimand"] not in ESTIMANDS or spec["method"] not in ("ipw", "aipw") or \
            spec["family"] not in FAMILIES or spec["scores"] not in ("logistic", "model"):
        return "an unknown estimand, method, family or propensity model"
    for key in ("truncate", "trim"):
        bounds = spec[key]
        if bounds is not None and not (len(bounds) == 2 and all(
                isinstance(b, float) for b in bounds) and 0 <= bounds[0] < bounds[1] <= 1):
            return f"{key} is two increasing numbers in [0, 1]"
    return None


_SPEC = Arg("spec", "value", check=spec_problem)
_THETA = Arg("theta", "floats", most=4 * MAX_COVARIATES + 16)
#: a fitted propensity model without estimating equations (its scores held fixed): in
#: this process and on Dask workers (the analyst refuses it for site services, whose wire
#: carries an estimator's parameters only)
_MODEL = Arg("model", "object", role="estimator", nullable=True, optional=True)


def model_scores(site, spec, model):
    """The fitted model's score of each row (``None`` for the stacked logistic model)."""
    if spec["scores"] != "model":
        return None
    if model is None or not hasattr(model, "predict_proba") or not hasattr(model,
                                                                          "classes_"):
        raise SiteError(site.site, "the analysis needs its fitted propensity model (a fitted "
                                   "classifier with predict_proba).")
    classes = [float(c) for c in np.asarray(model.classes_).ravel()]
    if classes != [0.0, 1.0]:
        raise SiteError(site.site, "the propensity model's classes are not 0 and 1.")
    e = np.asarray(model.predict_proba(site.X[spec["covariates"]]))[:, 1].astype(float)
    if spec["truncate"] is None and np.any((e <= 0) | (e >= 1)):
        raise SiteError(site.site, "the propensity model gives some rows here a score of 0 "
                                   "or 1 (no overlap): truncate the scores (truncate=).")
    return e


def outcome_design(site, spec, Z):
    """The outcome models' design ``[1, V]`` (``Z`` without ``outcome_covariates``)."""
    names = spec.get("outcome_covariates")
    if names is None or spec["method"] != "aipw":
        return Z
    V = np.ones((site.n_samples, 1 + len(names)))
    for j, name in enumerate(names):
        V[:, 1 + j] = _numeric(site, site.X, name, "outcome covariate")
    return V


def site_arrays(site, spec):
    """``(Z, A, Y)`` of a site's rows, checked at the site (a :class:`SiteError` names
    the column and the problem, never a value)."""
    X = site.X
    if not hasattr(X, "columns"):
        raise SiteError(site.site, "a causal analysis needs named columns: pass a DataFrame.")
    if site.sample_weight is not None:
        raise SiteError(site.site, "has sample weights; a causal analysis here weighs rows by "
                                   "its propensity model only.")
    if site.n_samples == 0:
        raise SiteError(site.site, "no rows.")
    Z = np.ones((site.n_samples, 1 + len(spec["covariates"])))
    for j, name in enumerate(spec["covariates"]):
        Z[:, 1 + j] = _numeric(site, X, name, "covariate")
    A = _numeric(site, X, spec["treatment"], "treatment")
    if not np.all((A == 0) | (A == 1)):
        raise SiteError(site.site, f"the treatment {show(spec['treatment'])} holds values "
                                   "other than 0 and 1 (code it 0/1).")
    if spec["outcome"] is None:
        if site.y is None:
            raise SiteError(site.site, "no outcome: name its column (outcome=) or give the "
                                       "dataset a target.")
        Y = np.asarray(site.y, dtype=np.float64).ravel()
        if not np.all(np.isfinite(Y)):
            raise SiteError(site.site, "the outcome (target) holds NaN or infinity.")
    else:
        Y = _numeric(site, X, spec["outcome"], "outcome")
    _check_family(site, Y, spec)
    return Z, A, Y


def _numeric(site, X, name, role):
    if name not in X.columns:
        raise SiteError(site.site, f"no {role} column {show(name)}.")
    try:
        values = np.asarray(X[name], dtype=np.float64)
    except (TypeError, ValueError):
        raise SiteError(site.site, f"the {role} column {show(name)} is not numeric (encode "
                                   "it first).") from None
    if not np.all(np.isfinite(values)):
        raise SiteError(site.site, f"the {role} column {show(name)} holds missing values "
                                   "or infinity (drop incomplete rows first).")
    return values


def _check_family(site, Y, spec):
    if spec["method"] != "aipw":
        return
    family = spec["family"]
    if family == "binomial" and not np.all((Y >= 0) & (Y <= 1)):
        raise SiteError(site.site, "a binomial outcome model needs outcomes in [0, 1].")
    if family == "poisson" and np.any(Y < 0):
        raise SiteError(site.site, "a Poisson outcome model needs outcomes >= 0.")


def _check_theta(site, theta, spec, q):
    if theta.size != n_parameters(spec, q):
        raise SiteError(site.site, f"{theta.size} parameters for an analysis of "
                                   f"{n_parameters(spec, q)}.")


def _upper(M):
    return M[np.triu_indices(M.shape[0])]


@row_step("causal_treatment_target", arguments=(
    Arg("treatment", "name"), Arg("covariates", "names", most=MAX_COVARIATES)),
    reads=lambda treatment, covariates: [treatment, *covariates])
def treatment_as_target(site, treatment, covariates):
    """A row step: the covariates become the features and the treatment the target (the
    rows a propensity classifier is fitted on)."""
    X = site.X
    if not hasattr(X, "columns"):
        raise SiteError(site.site, "a causal analysis needs named columns: pass a DataFrame.")
    A = _numeric(site, X, treatment, "treatment")
    if not np.all((A == 0) | (A == 1)):
        raise SiteError(site.site, f"the treatment {show(treatment)} holds values other "
                                   "than 0 and 1 (code it 0/1).")
    missing = [c for c in covariates if c not in X.columns]
    if missing:
        raise SiteError(site.site, f"no covariate column {show(missing[0])}.")
    return site.replace(X=X[list(covariates)], y=A)


@site_operation(
    "causal.ee_sums", releases=SUMS, maskable=True, reads_design=True,
    describes="at broadcast parameters of a propensity model (and outcome models), the "
              "stacked estimating equations' k sums, their k x k summed derivative and "
              "k x k sum of outer products (the sandwich's bread and meat), the arms' row "
              "counts and outcome sums; under the dominance rule",
    arguments=(_SPEC, _THETA, _MODEL), combine="sum")
def site_ee_sums(site, spec, theta, model=None):
    """One site's sums of the stacked estimating equations at ``theta``."""
    Z, A, Y = site_arrays(site, spec)
    theta = np.asarray(theta, dtype=np.float64)
    _check_theta(site, theta, spec, Z.shape[1])
    psi, D = stacked(Z, A, Y, theta, spec, model_scores(site, spec, model),
                     V=outcome_design(site, spec, Z))
    if dominance.active() is not None:
        dominance.check_rows(psi, "an estimating equation's sum")
        dominance.check_products(psi, psi, what="a sandwich's meat")
        if spec["scores"] == "logistic":
            dominance.check_products(Z, Z, what="a propensity model's information")
        dominance.check_rows(np.column_stack([A, A * Y, (1 - A) * Y]), "an arm's sums")
    return {"psi": psi.sum(axis=0), "jacobian": D, "meat": _upper(psi.T @ psi),
            "n": float(A.size), "n1": float(A.sum()), "sy1": float(A @ Y),
            "sy0": float((1 - A) @ Y)}


def ipw_weights(Z, A, theta, spec, e_model=None):
    """``(w, e)``: each row's weight in its own arm (stabilised, truncated and trimmed
    as the spec says) and its fitted propensity score."""
    at = blocks(spec, Z.shape[1])
    e, used, _, keep = scores(Z, theta[at["beta"]], spec, e_model)
    estimand = spec["estimand"]  # AIPW: the weights of its residual correction
    w1, w0, _, _ = arm_weights(used, A, estimand)
    if spec["stabilized"]:
        pi = theta[at["pi"]][0]
        w1, w0 = pi * w1, (1 - pi) * w0
    return keep * (w1 + w0), e


@site_operation(
    "causal.balance_sums", releases=SUMS, maskable=True, reads_design=True,
    describes="per arm and covariate, at a broadcast propensity model: the row count, the "
              "sums of the covariate and its square, the weighted sum of the covariate, "
              "and the weights' sum and sum of squares; under the dominance rule",
    arguments=(_SPEC, _THETA, _MODEL), combine="sum")
def site_balance_sums(site, spec, theta, model=None):
    """Per arm (treated first): counts, moments and weight sums of the covariates."""
    Z, A, Y = site_arrays(site, spec)
    theta = np.asarray(theta, dtype=np.float64)
    _check_theta(site, theta, spec, Z.shape[1])
    w, _ = ipw_weights(Z, A, theta, spec, model_scores(site, spec, model))
    X = Z[:, 1:]
    out = {}
    for arm, rows in (("1", A == 1), ("0", A == 0)):
        x, wa = X[rows], w[rows]
        # an empty arm's sums are 0; a partition of an engine records its check all the
        # same (the site merges the partitions' checks in order)
        audit = dominance.active()
        if audit is not None and (rows.any() or isinstance(audit, dominance.Recording)):
            terms = np.column_stack([x, x * x, wa[:, None] * x, wa, wa * wa])
            dominance.check_rows(terms if rows.any() else np.zeros((1, terms.shape[1])),
                                 "a balance table's sums")  # a zero row adds nothing
        out.update({f"n{arm}": float(rows.sum()), f"sx{arm}": x.sum(axis=0),
                    f"sxx{arm}": (x * x).sum(axis=0), f"sw{arm}": float(wa.sum()),
                    f"sww{arm}": float(wa @ wa), f"swx{arm}": wa @ x})
    return out


def _hide(counts, min_count):
    """Counts of 1 to ``min_count - 1`` rows released as 0, and where."""
    small = (counts > 0) & (counts < min_count)
    return np.where(small, 0, counts), small.astype(np.int64)


def _overlap_part(site, spec, theta, n_bins, threshold, min_count=1, model=None):
    """A partition's overlap counts, none hidden (hidden on the whole dataset's)."""
    return site_overlap_counts(site, spec, theta, n_bins, threshold, 1, model)


def _hide_overlap(out, args, site):
    """The whole dataset's counts hidden as :func:`site_overlap_counts` hides them."""
    min_count = args[4]
    counts, hidden = _hide(out["counts"], min_count)
    extreme, extreme_hidden = _hide(out["extreme"], min_count)
    return {"counts": counts, "hidden": hidden, "extreme": extreme,
            "extreme_hidden": extreme_hidden}


@site_operation(
    "causal.overlap_counts", releases=COUNTS, maskable=True,
    describes="per arm, at a broadcast propensity model: the count of rows in each fixed "
              "bin of the propensity score and of rows whose weight exceeds a broadcast "
              "threshold, each count of 1 to min_level_count - 1 rows released as 0 and "
              "flagged",
    arguments=(_SPEC, _THETA, Arg("n_bins", "int", low=2, high=200),
               Arg("threshold", "float", low=0),
               Arg("min_count", "int", low=1, floor="min_level_count"), _MODEL),
    # an engine's partitions count every bin; the small counts hidden on the whole
    combine=Combine("sum", part=_overlap_part, finish=_hide_overlap))
def site_overlap_counts(site, spec, theta, n_bins, threshold, min_count=1, model=None):
    """Per arm (treated first): binned score counts and the count of extreme weights."""
    Z, A, _ = site_arrays(site, spec)
    theta = np.asarray(theta, dtype=np.float64)
    _check_theta(site, theta, spec, Z.shape[1])
    w, e = ipw_weights(Z, A, theta, spec, model_scores(site, spec, model))
    edges = np.linspace(0.0, 1.0, int(n_bins) + 1)
    bins = np.clip(np.searchsorted(edges, e, side="right") - 1, 0, int(n_bins) - 1)
    counts = np.stack([np.bincount(bins[A == a], minlength=int(n_bins)) for a in (1, 0)])
    extreme = np.array([np.sum((A == a) & (w > threshold)) for a in (1, 0)])
    counts, hidden = _hide(counts.astype(np.int64), min_count)
    extreme, extreme_hidden = _hide(extreme.astype(np.int64), min_count)
    return {"counts": counts, "hidden": hidden, "extreme": extreme,
            "extreme_hidden": extreme_hidden}


@site_operation(
    "causal.score_count_below", releases=SUMS,
    requires="allow_exact_quantiles: percentile truncation needs the pooled scores' exact "
             "quantiles, whose bisection releases single rows' scores (the values next to "
             "each threshold)",
    describes="one step of the bisection for the pooled propensity scores' exact quantiles "
              "at a broadcast propensity model: per threshold, the count of the site's "
              "scores at or below it and the scores next to it (single rows' values: only "
              "with allow_exact_quantiles)",
    arguments=(_SPEC, _THETA, Arg("thresholds", "floats", most=64, finite=False)),
    combine=Combine(lambda parts, args: {  # each partition's count, neighbours combined
        "count": tree_combine("sum", [p["count"] for p in parts]),
        "below": np.fmax.reduce([p["below"] for p in parts], axis=0),
        "above": np.fmin.reduce([p["above"] for p in parts], axis=0)}))
def site_score_count_below(site, spec, theta, thresholds):
    """Per threshold ``t``: ``count`` of scores ``<= t``, the largest score ``<= t``
    (``below``) and the smallest ``> t`` (``above``), NaN where none."""
    Z, _, _ = site_arrays(site, spec)
    theta = np.asarray(theta, dtype=np.float64)
    _check_theta(site, theta, spec, Z.shape[1])
    e, _, _, _ = scores(Z, theta[blocks(spec, Z.shape[1])["beta"]], spec)
    v = np.sort(e)
    k = np.searchsorted(v, np.asarray(thresholds, dtype=np.float64), side="right")
    below = np.where(k > 0, v[np.maximum(k - 1, 0)], np.nan)
    above = np.where(k < v.size, v[np.minimum(k, v.size - 1)], np.nan)
    return {"count": k.astype(np.int64), "below": below, "above": above}
