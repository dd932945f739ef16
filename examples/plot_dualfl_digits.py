"""
DualFL: exact federated ridge multinomial regression on digits (the DualFL paper)
==================================================================================

Park & Xu's DualFL solves the dual of the federated problem: each round every
client solves its local problem exactly and the server takes an accelerated
dual step. On a strongly convex problem it converges linearly, whatever the
number of clients — the paper's headline figure. We take its setting with
scikit-learn's digits in place of MNIST: multinomial logistic regression with
a ridge term mu/2 ||W||^2, mu = 1e-2, the rows dealt evenly to N = 8 clients.

The reference E* is scikit-learn's :class:`~sklearn.linear_model.LogisticRegression`
on the pooled data; we plot the relative energy error (E(theta) - E*) / E*.
``python benchmarks/reproduce.py dualfl-digits`` runs the full figure
(more clients and a sweep of DualFL's rho; see :doc:`/reproductions`).
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from skfed import FedLogisticRegression

# every run stops at a fixed number of rounds on purpose
warnings.simplefilter("ignore", ConvergenceWarning)

X, y = load_digits(return_X_y=True)
X = X / 16.0
n, mu, n_clients = len(y), 1e-2, 8
rng = np.random.default_rng(0)
site = np.empty(n, dtype=int)
site[rng.permutation(n)] = np.arange(n) % n_clients  # an even split, as in the paper
C = 1.0 / (mu * n)  # mean cross-entropy + (mu/2)||W||^2 in scikit-learn's C


def energy(coef):
    Z = X @ coef.T
    log_p = Z - np.logaddexp.reduce(Z, axis=1, keepdims=True)
    return -log_p[np.arange(n), y].mean() + 0.5 * mu * np.sum(coef**2)


pooled = LogisticRegression(C=C, fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
e_star = energy(pooled.coef_)

fig, ax = plt.subplots(figsize=(6, 4))
for solver in ["dualfl", "fedpd", "feddyn", "scaffold", "feddualavg"]:
    est = FedLogisticRegression(C=C, fit_intercept=False, solver=solver, max_rounds=40,
                                tol=0, random_state=0)
    est.fit(X, y, clients=site)
    error = (est.history_["objective"] - e_star) / e_star
    ax.semilogy(est.history_["round"], np.maximum(error, 1e-16), label=solver)
    print(f"{solver:<11} relative energy error after 40 rounds: {error[-1]:.1e}  "
          f"(independent check: {(energy(est.coef_) - e_star) / e_star:.1e})")
ax.set(xlabel="round", ylabel="(E - E*) / E*", title=f"digits, N = {n_clients}, mu = {mu:g}")
ax.legend()
fig.tight_layout()
plt.show()
