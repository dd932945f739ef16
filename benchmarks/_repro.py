"""Pieces every paper reproduction shares (see benchmarks/reproduce.py).

A reproduction returns rows ``(sweep, value, solver, round, metric, number)``:
``sweep``/``value`` name the setting (``"N", 8`` or ``"config", "II"``),
``metric`` what ``number`` measures at that round.
"""

import os
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning


def fit_quietly(est, X, y, clients):
    """``est.fit`` without the ConvergenceWarning that every fixed-round run raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, clients=clients)


def curve(sweep, value, solver, metric, values, rounds=None):
    """Rows for one metric of one run; ``rounds`` defaults to 0, 1, 2, ..."""
    rounds = range(len(values)) if rounds is None else rounds
    return [(sweep, value, solver, int(r), metric, float(v)) for r, v in zip(rounds, values)]


def recording(solver):
    """The same solver, also keeping the server model after every round.

    The fitted estimator's ``solver_.models_`` then lists the flat parameter
    vector ``theta`` of rounds 1, 2, ... (the model the history's objective
    is measured at), so metrics such as F1 or rank can be followed round by
    round without refitting. Works in process (the sequential executor).
    """
    base = type(solver)

    def aggregate(self, server, replies, weights, active):
        server = base.aggregate(self, server, replies, weights, active)
        self.__dict__.setdefault("models_", []).append(np.array(self.server_model(server)))
        return server

    cls = type(base.__name__, (base,), {"aggregate": aggregate, "__module__": __name__})
    return cls(**solver.get_params(deep=False))


def trajectory(est, n_coef):
    """Coefficients of rounds 0 (the zero start), 1, ..., from a recording fit."""
    return np.array([np.zeros(n_coef)] + [m[:n_coef] for m in est.solver_.models_])


def lasso_objective(X, y, coef, intercept, alpha):
    """scikit-learn's Lasso objective, written out independently of skfed."""
    r = y - X @ coef - intercept
    return 0.5 * np.mean(r * r) + alpha * np.abs(coef).sum()


def relative(values, reference):
    """``(values - reference) / |reference|``."""
    return (np.asarray(values, dtype=float) - reference) / abs(reference)


def fit_or_none(est, X, y, clients):
    """A fit, or None when the step size made it diverge (skfed raises FloatingPointError)."""
    with np.errstate(all="ignore"):
        try:
            fit_quietly(est, X, y, clients)
        except FloatingPointError:
            return None
    return est if np.all(np.isfinite(est.history_["objective"])) else None


def tune(label, candidates, run, score):
    """The papers' tuning protocol: run every candidate, keep the best (lowest) score.

    ``candidates`` maps a description (e.g. ``"lr=0.05"``) to what ``run``
    takes; ``run`` returns a fitted estimator, or None when it diverged.
    Returns ``(estimator, description)`` of the best run.

    With the environment variable ``SKFED_REPRO_TUNING=first`` the search stops at
    the first candidate that does not diverge: the slow test's check that each
    reproduction still runs at the papers' sizes and rounds, in a tenth of the
    time (the figures and tables in the docs come from the whole grids).
    """
    first_only = os.environ.get("SKFED_REPRO_TUNING", "grid") == "first"
    best = None
    for description, candidate in candidates.items():
        est = run(candidate)
        if est is None:
            continue
        s = score(est)
        if np.isfinite(s) and (best is None or s < best[0]):
            best = (s, est, description)
        if first_only and best is not None:
            break
    if best is None:
        raise RuntimeError(f"{label}: every candidate of the grid diverged")
    print(f"  tuned {label:<26} {best[2]} (score {best[0]:.4g})", flush=True)
    return best[1], best[2]
