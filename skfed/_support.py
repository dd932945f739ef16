"""The estimator x solver support matrix, computed from the code itself.

Every entry comes from fitting the estimator for one round on a tiny problem:
a refused pair is the error ``fit`` raises (its message is the reason), and an
accepted pair reports the solver's own :meth:`FederatedSolver.guarantee` for
that problem. ``tests/test_support_matrix.py`` checks each "exact" and
"sublinear" claim against an independent pooled solve, and that the table in
the docs is the one this module prints (``python -m skfed support-matrix``).
"""

import warnings

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from .solvers import SOLVERS

STATUS_LEGEND = {
    "exact": "reaches the pooled optimum (linear or accelerated rate)",
    "sublinear": "reaches the pooled optimum at a sublinear rate (non-smooth problems)",
    "biased": "converges near the optimum, not to it (drift, doubled penalty, constant subgradient step)",
    "refused": "fit raises a ValueError saying why",
}


def model_configurations():
    """``(label, estimator, task)`` for each model the matrix covers."""
    from .linear_model import (FedElasticNet, FedGammaRegressor, FedLasso,
                               FedLogisticRegression, FedPoissonRegressor,
                               FedTweedieRegressor)
    from .low_rank import FedLowRank
    from .svm import FedLinearSVC

    return [
        ("FedLasso", FedLasso(alpha=0.1), "regression"),
        ("FedLasso(constraint='l1_ball')", FedLasso(alpha=0.0, constraint="l1_ball",
                                                    radius=1.0), "regression"),
        ("FedElasticNet", FedElasticNet(alpha=0.1, l1_ratio=0.5), "regression"),
        ("FedElasticNet(l1_ratio=0) (ridge)", FedElasticNet(alpha=0.1, l1_ratio=0.0),
         "regression"),
        ("FedLogisticRegression (l2)", FedLogisticRegression(C=1.0), "classification"),
        ("FedLogisticRegression(l1_ratio=1)", FedLogisticRegression(C=1.0, l1_ratio=1.0),
         "classification"),
        ("FedLogisticRegression(constraint='l2_ball')",
         FedLogisticRegression(C=1.0, constraint="l2_ball", radius=1.0), "classification"),
        ("FedLinearSVC (squared hinge, l2)", FedLinearSVC(C=1.0), "classification"),
        ("FedLinearSVC(penalty='l1')", FedLinearSVC(C=1.0, penalty="l1"), "classification"),
        ("FedLinearSVC(loss='hinge')", FedLinearSVC(C=1.0, loss="hinge"), "classification"),
        ("FedLinearSVC(loss='hinge', penalty='l1')",
         FedLinearSVC(C=1.0, loss="hinge", penalty="l1"), "classification"),
        ("FedLowRank", FedLowRank(alpha=0.1), "multi-output"),
        # log-link GLMs: no curvature bound, Newton only (FedLinearRegression and
        # FedRidge are least squares with a ridge penalty: the ridge row above)
        ("FedPoissonRegressor", FedPoissonRegressor(alpha=0.1), "counts"),
        ("FedPoissonRegressor(l1_ratio=0.5)", FedPoissonRegressor(alpha=0.1, l1_ratio=0.5),
         "counts"),
        ("FedGammaRegressor", FedGammaRegressor(alpha=0.1), "positive"),
        ("FedTweedieRegressor(power=1.5)", FedTweedieRegressor(power=1.5, alpha=0.1),
         "positive"),
    ]


def _tiny_data(task):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    clients = np.repeat(np.arange(4), 10)
    if task == "regression":
        return X, X @ np.array([1.0, -1.0, 0.0, 0.5]), clients
    if task == "classification":
        return X, (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int), clients
    if task == "counts":
        return X, rng.poisson(np.exp(0.5 * X[:, 0])).astype(float), clients
    if task == "positive":
        return X, rng.gamma(2.0, np.exp(0.5 * X[:, 0]) / 2.0), clients
    return X, X @ rng.standard_normal((4, 3)), clients


def support_matrix(solvers=None, participation=1.0):
    """The estimator x solver table, with default solver hyper-parameters.

    Parameters
    ----------
    solvers : list of str or None, default=None
        Solver names (default: all registered).
    participation : float, default=1.0

    Returns
    -------
    rows : list of dict
        One per pair: ``model``, ``solver``, ``status`` (see
        ``STATUS_LEGEND``) and ``reason``.
    """
    names = sorted(SOLVERS) if solvers is None else list(solvers)
    rows = []
    for label, estimator, task in model_configurations():
        X, y, clients = _tiny_data(task)
        for name in names:
            est = clone(estimator).set_params(solver=name, max_rounds=1, tol=0.0,
                                              participation=participation)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    est.fit(X, y, clients=clients)
            except ValueError as exc:
                rows.append({"model": label, "solver": name, "status": "refused",
                             "reason": str(exc)})
                continue
            status, reason = est.solver_.guarantee(est.solver_.problem_, participation)
            rows.append({"model": label, "solver": name, "status": status, "reason": reason})
    return rows


def format_support_matrix(rows):
    """The table as Markdown: one row per model, one column per solver, and
    the reasons of every non-exact entry below it."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    solvers = list(dict.fromkeys(r["solver"] for r in rows))
    cell = {(r["model"], r["solver"]): r for r in rows}
    lines = ["| model | " + " | ".join(f"`{s}`" for s in solvers) + " |",
             "|---|" + "---|" * len(solvers)]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(cell[m, s]["status"] for s in solvers) + " |")
    lines += ["", "Legend: " + "; ".join(f"**{k}**: {v}" for k, v in STATUS_LEGEND.items()) + ".",
              "", "Why an entry is not exact:", ""]
    for r in rows:
        if r["status"] != "exact":
            reason = " ".join(r["reason"].split())
            lines.append(f"- {r['model']} × `{r['solver']}` ({r['status']}): {reason}")
    return "\n".join(lines) + "\n"
