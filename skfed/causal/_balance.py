"""Balance and overlap of a weighting analysis, from pooled moments and counts.

Standardised mean differences follow cobalt's definitions: the difference of
the arms' (weighted) means over the standard deviation of the *unweighted*
arms, pooled as ``sqrt((s1^2 + s0^2) / 2)`` for the ATE and the overlap
population, the treated arm's for the ATT and the controls' for the ATC (the
same denominator before and after weighting; every covariate standardised,
binary ones too: cobalt's ``binary = "std"``). The effective sample size of
an arm is Kish's ``(sum w)^2 / sum w^2``. The overlap histogram counts each
arm's rows in fixed bins of the propensity score; a site's count of 1 to
``min_level_count - 1`` rows is released as 0 and flagged, and a pooled bin
holding such a count (or itself below ``min_level_count``) is shown as NaN.
"""

import warnings

import numpy as np
import pandas as pd

from ._site import site_balance_sums, site_overlap_counts

ARMS = (("1", "treated"), ("0", "control"))


def smd_table(sums, estimand, names):
    """The balance table from pooled sums (:func:`site_balance_sums`)."""
    mean, var, wmean = {}, {}, {}
    for arm, _ in ARMS:
        n = float(sums[f"n{arm}"])
        mean[arm] = np.asarray(sums[f"sx{arm}"], dtype=float) / n
        var[arm] = (np.asarray(sums[f"sxx{arm}"], dtype=float) - n * mean[arm] ** 2) / (n - 1)
        wmean[arm] = np.asarray(sums[f"swx{arm}"], dtype=float) / float(sums[f"sw{arm}"])
    if estimand == "ATT":
        denom = np.sqrt(var["1"])
    elif estimand == "ATC":
        denom = np.sqrt(var["0"])
    else:
        denom = np.sqrt((var["1"] + var["0"]) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        before = (mean["1"] - mean["0"]) / denom
        after = (wmean["1"] - wmean["0"]) / denom
    return pd.DataFrame({"mean treated": mean["1"], "mean control": mean["0"],
                         "SMD before": before, "weighted mean treated": wmean["1"],
                         "weighted mean control": wmean["0"], "SMD after": after},
                        index=pd.Index(names, name="covariate"))


def balance_tables(session, spec, theta, names, *, n_bins, extreme_weight, min_level_count,
                   model=None):
    """``(balance, effective sample size, overlap)`` of a fitted analysis."""
    sums = session.sum(site_balance_sums, spec, theta, model, phase="analysis")
    estimand = spec["estimand"]  # AIPW: the weights of its residual correction
    table = smd_table(sums, estimand, names)
    ess = {label: float(sums[f"sw{arm}"]) ** 2 / float(sums[f"sww{arm}"])
           for arm, label in ARMS}
    counts = session.sum(site_overlap_counts, spec, theta, int(n_bins),
                         float(extreme_weight), int(min_level_count), model,
                         phase="analysis")
    pooled = np.asarray(counts["counts"], dtype=float)
    shown = np.where((np.asarray(counts["hidden"]) > 0) |
                     ((pooled > 0) & (pooled < min_level_count)), np.nan, pooled)
    overlap = {"edges": np.linspace(0.0, 1.0, int(n_bins) + 1), "treated": shown[0],
               "control": shown[1]}
    extreme = np.asarray(counts["extreme"], dtype=int)
    hidden = np.asarray(counts["extreme_hidden"], dtype=int)
    overlap["extreme"] = {"treated": int(extreme[0]), "control": int(extreme[1])}
    _warn_extreme(extreme, hidden, extreme_weight, min_level_count)
    return table, ess, overlap


def _warn_extreme(extreme, hidden, threshold, k):
    """A warning that carries counts only (never a weight or a row's value)."""
    if not (extreme.sum() or hidden.sum()):
        return
    parts = [f"{n} {label}" for n, (_, label) in zip(extreme, ARMS)]
    more = (f"; and 1 to {k - 1} more at each of {int(hidden.sum())} site-arm(s) whose count "
            "is below the counts rule") if hidden.sum() else ""
    warnings.warn(f"extreme weights: {' and '.join(parts)} rows weigh more than {threshold:g}"
                  f"{more}. Consider truncation (truncate=) or trimming (trim=), or the "
                  "overlap population (estimand='ATO').", UserWarning, stacklevel=4)
