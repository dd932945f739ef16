"""``skfed fit --summary``: a GLM's regression table, or a Cox model's hazard ratios, on
the original columns."""

import numpy as np
import pandas as pd

from .._format import format_p
from .errors import CLIError

#: a GLM's fit statistics ``(attribute, label)``, in the text and the HTML report
FIT_STATISTICS = (("nobs_", "observations"), ("deviance_", "deviance"),
                  ("null_deviance_", "null deviance"), ("loglike_", "log-likelihood"),
                  ("aic_", "AIC"), ("bic_", "BIC"), ("n_clusters_", "clusters"),
                  ("dep_params_", "working correlation parameter"))


#: the estimators' parameters as the command line's flags, in its messages
_FLAGS = (("C=np.inf", "--C inf"), ("l1_ratio=0", "--l1-ratio 0"), ("alpha=0", "--alpha 0"))


def _in_flags(error):
    """An estimator's message in the command line's words (``--C inf``, not ``C=np.inf``)."""
    message = str(error)
    for parameter, flag in _FLAGS:
        message = message.replace(parameter, flag)
    return message


def regression_results(report):
    """The fitted model's estimates on the **original** columns, as a results object
    (:class:`skfed.stats._results.FixedResults`: its tables written once there).

    The model is fitted on standardized columns (unless ``--no-scale``); its
    estimates and their covariance are mapped back linearly: ``b_j / s_j`` and
    ``b_0 - sum_j b_j m_j / s_j`` (no intercept in a Cox model), with
    ``cov = A C A'`` for that map ``A``. A formula's fit is its own result.
    """
    from ..datafits.links import ratio_measure
    from ..stats._results import FixedResults

    if report.formula is not None:
        return report.formula
    est, scaler = report.estimator, report.scaler
    try:
        if report.survival:
            params, cov, k = np.asarray(est.coef_, dtype=float), est.cov_params_, 0
            measure = "hazard ratio"
        else:
            params, cov = np.asarray(est.params_, dtype=float), est.cov_params_
            family, k = est._result("family"), int(est.fit_intercept)
            measure = ratio_measure(family.link, family.name)
    except (AttributeError, ValueError) as exc:  # InferenceError is both
        raise CLIError(f"--summary: {_in_flags(exc)}") from None
    cov = np.asarray(cov, dtype=float)
    if scaler is not None:  # back to the original columns
        A = np.eye(len(params))
        A[k:, k:] = np.diag(1.0 / scaler.scale_)
        if k:
            A[0, 1:] = -scaler.mean_ / scaler.scale_
        params, cov = A @ params, A @ cov @ A.T
    names = ["(intercept)"] * k + list(report.feature_names)
    return FixedResults(params, cov, names, measure=measure,
                        table_style="lifelines" if report.survival else "statsmodels")


def regression_table(report, alpha=0.05):
    """The fitted model's regression table on the **original** columns (``--summary``):
    estimate, standard error, z, p-value and interval (and the exponentiated estimate
    and interval for a log or logit link); a Cox model's: lifelines' ``coef``,
    ``se(coef)``, ``exp(coef)`` and its interval, ``z``, ``p``."""
    results = regression_results(report)
    table = results.summary_frame(alpha)
    if report.survival:
        level = f"{100 * (1 - alpha):g}%"
        return table[["coef", "se(coef)", "exp(coef)", f"exp(coef) lower {level}",
                      f"exp(coef) upper {level}", "z", "p"]]
    if results._measure() is not None:  # rate ratios (log link), odds ratios (logit)
        lower, upper = f"[{alpha / 2:g}", f"{1 - alpha / 2:g}]"
        table = table.assign(**{"exp(coef)": np.exp(table["coef"]),
                                f"exp {lower}": np.exp(table[lower]),
                                f"exp {upper}": np.exp(table[upper])})
    return table


def hazard_ratio_notes(report):
    """The lines under a Cox model's table: the penalty's caveat and the likelihoods."""
    from scipy import stats

    est, notes = report.estimator, []
    if est.alpha > 0:
        notes.append("penalized fit (--alpha > 0): the estimates are shrunk toward 0 and the "
                     "standard errors (lifelines') come from the penalized information")
    ll, ll0 = est.loglike_, est.loglike_null_
    lr, df = 2 * (ll - ll0), len(report.summary)
    p = format_p(stats.chi2.sf(lr, df))
    test = "" if est.alpha > 0 else (  # no chi-square reference for a penalized fit
        f"; likelihood-ratio test: {lr:.2f} on {df} df, p {p if p[0] == '<' else '= ' + p}")
    notes.append(f"log partial likelihood: {ll:.2f} (no covariates: {ll0:.2f}){test}")
    return notes


def fit_statistics(report):
    """A GLM's ``(label, value)`` of :data:`FIT_STATISTICS`: the rows (weighted), the
    deviance and the null model's, the log-likelihood, AIC and BIC (statsmodels')."""
    est = report.estimator
    return [(label, float(getattr(est, attr))) for attr, label in FIT_STATISTICS
            if hasattr(est, attr)]  # an ordinal or multinomial model has no deviance


def journal_lines(report):
    """The regression as a journal prints it (one ratio column and p, reference rows, a
    joint p per multi-level factor), as text lines."""
    table = regression_results(report).journal_table()
    width = max(12, max(len(str(n)) for n in table.index) + 2)
    cell = max(len(table.columns[0]), *(len(v) for v in table.iloc[:, 0])) + 2
    lines = ["as a journal prints it:",
             f"  {'':<{width}}{table.columns[0]:>{cell}}{'p':>9}"]
    for name, (estimate, p) in zip(table.index, table.to_numpy()):
        lines.append(f"  {str(name).replace(chr(0x2003), '  '):<{width}}{estimate:>{cell}}"
                     f"{p:>9}")
    return lines


def _hazard_ratio_lines(report):
    est, table = report.estimator, report.summary
    what = {"nonrobust": "model-based (inverse information)",
            "robust": "robust (the sandwich of the rows' score residuals)",
            "cluster": "cluster-robust with the sites as clusters"}[est.cov_type]
    lines = [f"hazard ratios on the original columns: standard errors {what}, Wald "
             "intervals; exp(coef): the hazard ratio per unit of the column; every number "
             "from the sites' sums"]
    width = max(12, max(len(str(n)) for n in table.index) + 2)
    cells = [max(11, len(c) + 2) for c in table.columns]
    lines.append(f"  {'':<{width}}" + "".join(f"{c:>{w}}" for c, w in zip(table.columns,
                                                                        cells)))
    for name, row in table.iterrows():
        lines.append(f"  {str(name):<{width}}" + "".join(f"{v:>#{w}.5g}" for v, w in zip(row,
                                                                                        cells)))
    from .ph_test import ph_test_lines

    return (lines + [f"  {note}" for note in hazard_ratio_notes(report)]
            + ph_test_lines(report.ph_test))


def summary_lines(report):
    """The text of the regression table (``--summary``)."""
    if report.survival:
        return _hazard_ratio_lines(report)
    est = report.estimator
    cov = getattr(est, "cov_type", "nonrobust")
    what = {"nonrobust": "model-based", "HC0": "robust (HC0)", "HC1": "robust (HC1)",
            "cluster": "cluster-robust with the sites as clusters",
            "naive": "model-based (naive)"}.get(cov, cov)
    table = report.summary
    if isinstance(table.index, pd.MultiIndex):  # a multinomial logit: (level, parameter)
        table = table.set_axis([": ".join(map(str, k)) for k in table.index], axis=0)
    measure = regression_results(report)._measure()  # "rate ratio", "odds ratio"...
    ratio = f"; the {measure}s (exp(coef)) in the journal table below" if measure else ""
    lines = [f"regression table on the original columns: standard errors {what}, Wald "
             f"intervals{ratio}; every number from the sites' sums"]
    width = max(12, max(len(str(n)) for n in table.index) + 2)
    lines.append(f"  {'':<{width}}" + "".join(f"{c:>14}" for c in table.columns))
    for name, row in table.iterrows():
        lines.append(f"  {str(name):<{width}}" + "".join(f"{v:>#14.5g}" for v in row))
    lines += [f"  {label}: {value:.6g}" for label, value in fit_statistics(report)]
    return lines + [""] + journal_lines(report)
