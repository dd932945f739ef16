"""``skfed fit --summary``: a GLM's regression table on the original columns."""

import numpy as np

from .fit import CLIError


def regression_table(report, alpha=0.05):
    """The fitted model's regression table on the **original** columns (``--summary``).

    The model is fitted on standardized columns (unless ``--no-scale``); its
    estimates and their covariance are mapped back linearly: ``b_j / s_j`` and
    ``b_0 - sum_j b_j m_j / s_j``, with ``cov = A C A'`` for that map ``A``.
    Returns a DataFrame: estimate, standard error, z, p-value and interval
    (and the exponentiated estimate and interval for a log or logit link).
    """
    import pandas as pd
    from scipy import stats

    est, scaler = report.estimator, report.scaler
    try:
        params, cov = np.asarray(est.params_, dtype=float), np.asarray(est.cov_params_)
        link = est._result("family").link
    except (AttributeError, ValueError) as exc:  # InferenceError is both
        raise CLIError(f"--summary: {exc}") from None
    names = ["(intercept)", *report.feature_names] if est.fit_intercept else list(
        report.feature_names)
    if scaler is not None:  # back to the original columns
        p, k = len(params), int(est.fit_intercept)
        A = np.eye(p)
        A[k:, k:] = np.diag(1.0 / scaler.scale_)
        if k:
            A[0, 1:] = -scaler.mean_ / scaler.scale_
        params, cov = A @ params, A @ cov @ A.T
    se = np.sqrt(np.diag(cov))
    q = stats.norm.ppf(1 - alpha / 2)
    z = params / se
    table = pd.DataFrame({"coef": params, "std err": se, "z": z,
                          "P>|z|": 2 * stats.norm.sf(np.abs(z)),
                          f"[{alpha / 2:g}": params - q * se, f"{1 - alpha / 2:g}]": params + q * se},
                         index=names)
    if link in ("log", "logit"):  # rate ratios (log link), odds ratios (logit)
        table["exp(coef)"] = np.exp(params)
        table[f"exp [{alpha / 2:g}"] = np.exp(params - q * se)
        table[f"exp {1 - alpha / 2:g}]"] = np.exp(params + q * se)
    return table


def summary_lines(report):
    """The text of the regression table (``--summary``)."""
    est = report.estimator
    cov = getattr(est, "cov_type", "nonrobust")
    what = {"nonrobust": "model-based", "HC0": "robust (HC0)", "HC1": "robust (HC1)",
            "cluster": "cluster-robust with the sites as clusters"}.get(cov, cov)
    table = report.summary
    ratio = {"log": "; exp(coef): rate ratios", "logit": "; exp(coef): odds ratios"}.get(
        est._result("family").link, "")
    lines = [f"regression table on the original columns: standard errors {what}, Wald "
             f"intervals{ratio}; every number from the sites' sums"]
    width = max(12, max(len(str(n)) for n in table.index) + 2)
    lines.append(f"  {'':<{width}}" + "".join(f"{c:>14}" for c in table.columns))
    for name, row in table.iterrows():
        lines.append(f"  {str(name):<{width}}" + "".join(f"{v:>#14.5g}" for v in row))
    for attr, label in (("deviance_", "deviance"), ("loglike_", "log-likelihood"),
                        ("aic_", "AIC"), ("bic_", "BIC")):
        value = getattr(est, attr, None)
        if value is not None:
            lines.append(f"  {label}: {value:.6g}")
    return lines
