"""The table a journal prints from a fitted model: one "OR (95% CI)" column and p.

gtsummary's ``tbl_regression`` and tableone's layout: a categorical with two
levels is one row (``Hormone therapy: yes vs no``); one with more is a header
row carrying the joint Wald p of all its levels, then its reference level and
each other level, indented; a spline is one row with its joint p (its basis
coefficients mean nothing alone: its effect is a curve, see ``plot_effect``).
"""

import numpy as np
import pandas as pd

from ..datafits.links import RATIO_ABBREVIATIONS
from .._format import decimals_for, fixed, format_p

#: the names an intercept goes by (skfed, statsmodels' formulas, add_constant)
INTERCEPT_NAMES = ("intercept", "Intercept", "const", "(intercept)")

#: indentation of a level under its variable's header row
INDENT = "\u2003"


def journal_rows(results, alpha, labels, decimals, use_t):
    """The journal table of ``results`` (see :meth:`ModelResults.journal_table`)."""
    est, _, _, p, ci, _ = results._wald(alpha, use_t)
    measure = results._measure()
    ratio = measure is not None
    position = {str(n): k for k, n in enumerate(est.names)}
    shown = np.exp if ratio else (lambda v: v)
    values = {name: (float(shown(est.params[k])), *map(float, shown(ci[k])), float(p[k]))
              for name, k in position.items()}
    if decimals is None:
        kept = [v for n, v in values.items() if n not in INTERCEPT_NAMES]
        decimals = default_decimals([v[1] for v in kept], [v[2] for v in kept]) if kept else 2
    reference = "1 (reference)" if ratio else "0 (reference)"
    rows = []
    for term in results._terms():
        names = [c for c, _ in term.columns]
        if set(names) & set(INTERCEPT_NAMES):
            continue
        label = labels.get(term.details.get("column"), labels.get(term.name, term.label))
        joint = (results.wald_test(names).pvalue if len(names) > 1 else values[names[0]][3])
        if term.kind == "spline":
            rows.append((f"{label} (spline, {len(names)} df)", "", format_p(joint)))
            continue
        if term.kind == "categorical" and len(names) == 1 and term.reference is not None:
            e, lo, hi, pv = values[names[0]]
            rows.append((f"{label}: {term.columns[0][1]} vs {term.reference}",
                         estimate_text(e, lo, hi, decimals), format_p(pv)))
            continue
        columns, parts = term.columns, term.details.get("parts")
        if parts:  # an interaction: its columns by their variables' labels and levels
            columns = [(c, interaction_text(parts[c], labels)) for c, _ in columns]
            if len(names) == 1:
                label = columns[0][1]
        if len(names) == 1:
            e, lo, hi, pv = values[names[0]]
            rows.append((label, estimate_text(e, lo, hi, decimals), format_p(pv)))
            continue
        rows.append((label, "", format_p(joint)))
        if term.reference is not None:
            rows.append((INDENT + str(term.reference), reference, ""))
        for name, level in columns:
            e, lo, hi, pv = values[name]
            rows.append((INDENT + str(name if level is None else level),
                         estimate_text(e, lo, hi, decimals), format_p(pv)))
    head = ratio_label(measure, alpha)
    table = pd.DataFrame([r[1:] for r in rows], index=pd.Index([r[0] for r in rows], name=""),
                         columns=[head, "p"])
    table.attrs = {"measure": measure or "coefficient", "alpha": alpha}
    return table


def column_labels(terms, labels):
    """``{parameter name: readable text}``: ``"Hormone therapy: yes vs no"`` for a
    factor's level, an interaction by its variables' labels, a numeric column by its
    variable's label."""
    out = {}
    for term in terms:
        label = labels.get(term.details.get("column"), labels.get(term.name, term.label))
        parts = term.details.get("parts") or {}
        for name, level in term.columns:
            if name in parts:
                out[name] = interaction_text(parts[name], labels)
            elif term.kind == "categorical" and level is not None:
                versus = f" vs {term.reference}" if term.reference is not None else ""
                out[name] = f"{label}: {level}{versus}"
            elif len(term.columns) == 1:
                out[name] = str(label)
    return out


def interaction_text(pairs, labels):
    """``"Hormone therapy: yes \u00d7 Age (years)"``: an interaction column's variables,
    by their labels, with their levels."""
    return " \u00d7 ".join(f"{labels.get(v, v)}: {level}" if level is not None
                           else str(labels.get(v, v)) for v, level in pairs)


def ratio_label(measure, alpha):
    """The journal table's column head: ``"OR (95% CI)"``."""
    return f"{RATIO_ABBREVIATIONS.get(measure, 'Ratio')} ({100 * (1 - alpha):g}% CI)"


def estimate_text(estimate, lower, upper, decimals):
    """``"1.23 (0.98 to 1.54)"``; blank when not finite."""
    if not np.all(np.isfinite([estimate, lower, upper])):
        return ""
    return (f"{fixed(estimate, decimals)} ({fixed(lower, decimals)} to "
            f"{fixed(upper, decimals)})")


def default_decimals(lower, upper):
    """Two significant digits of the narrowest interval (on the scale shown), 2 to 3."""
    widths = np.asarray(upper, float) - np.asarray(lower, float)
    widths = widths[np.isfinite(widths) & (widths > 0)]
    return decimals_for(float(widths.min()), lowest=2, highest=3) if widths.size else 2
