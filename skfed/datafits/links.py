"""Link functions, written once: the mean from the linear predictor, its derivative, and
what an exponentiated coefficient is called.

Every place that turns a linear predictor into a mean (a GLM's ``predict``, the
inference pass's family, a formula's ``predict``, a mixed model's, a site's score)
calls :func:`inverse_link`; every table or figure that names ``exp(coef)`` calls
:func:`ratio_measure`.
"""

import numpy as np
from scipy.special import expit

#: the links skfed fits, by name (statsmodels' and R's names)
LINKS = ("identity", "log", "logit", "inverse_power")


def _check(link):
    if link not in LINKS:
        raise ValueError(f"unknown link {link!r}; skfed's links are {', '.join(LINKS)}.")
    return link


def inverse_link(link, eta):
    """The mean ``g^{-1}(eta)`` of the linear predictor ``eta`` under ``link``."""
    eta = np.asarray(eta, dtype=float)
    if _check(link) == "log":
        return np.exp(eta)
    if link == "logit":
        return expit(eta)  # no overflow for large |eta|
    if link == "inverse_power":  # the Gamma family's canonical link, 1 / mu
        return 1.0 / eta
    return eta


def mean_derivative(link, mu):
    """``d mu / d eta`` at the mean ``mu``."""
    mu = np.asarray(mu, dtype=float)
    if _check(link) == "log":
        return mu
    if link == "logit":
        return mu * (1.0 - mu)
    if link == "inverse_power":
        return -mu * mu
    return np.ones_like(mu)


#: what ``exp(coef)`` is under a link, the family deciding between rate ratio and
#: ratio of means for the log link
_RATIOS = {"logit": "odds ratio", "cox": "hazard ratio"}


def ratio_measure(link, family=None):
    """What an exponentiated coefficient is called (``"odds ratio"``, ``"rate ratio"``,
    ``"ratio of means"``, ``"hazard ratio"``), or ``None`` when it is no ratio
    (the identity link). ``link="cox"`` names a Cox model's coefficients."""
    if link in _RATIOS:
        return _RATIOS[link]
    if link == "log":
        return "rate ratio" if family == "poisson" else "ratio of means"
    return None


#: the short column heads of a journal table, by measure
RATIO_ABBREVIATIONS = {"odds ratio": "OR", "hazard ratio": "HR", "rate ratio": "RR",
                       "ratio of means": "Ratio", None: "Coefficient"}
