"""
A-FedPD: exact under partial participation (the A-FedPD paper)
===============================================================

When only a fraction of the clients takes part in each round, primal-dual
methods keep a dual variable for every client. The absent clients' duals go
stale; A-FedPD updates them virtually (as if the absent client had solved its
problem at the current model), which keeps the server model on course. Here
100 clients hold breast-cancer rows with a Dirichlet(0.3) label skew, and
each round samples 10 % of them. We compare A-FedPD with FedDyn, FedADMM and
FedAvg, then vary the participation. On this convex problem A-FedPD and
FedDyn (whose stale duals the virtual update corrects) stay close, and both
keep converging to the pooled optimum at every participation; FedAvg with ten
local steps per round is still far from it after 100 rounds.

The reference is scikit-learn's :class:`~sklearn.linear_model.LogisticRegression`
on the pooled rows. ``python benchmarks/reproduce.py afedpd-participation``
runs the full figure on digits with each method's parameter tuned (see
:doc:`/reproductions`).
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from skfed import FedLogisticRegression
from skfed.datasets import simulate_clients
from skfed.solvers import AFedPD, FedADMM, FedAvg, FedDyn

# every run stops at a fixed number of rounds on purpose
warnings.simplefilter("ignore", ConvergenceWarning)

X, y = load_breast_cancer(return_X_y=True)
X = StandardScaler().fit_transform(X)
site = simulate_clients(X, y, 100, scheme="dirichlet", alpha=0.3, random_state=0)
mu = 1e-3
C = 1.0 / (mu * len(y))  # mean log-loss + (mu/2)||w||^2
pooled = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(X, y)


def objective(coef, intercept):
    z = X @ coef + intercept
    return np.mean(np.logaddexp(0, z) - y * z) + 0.5 * mu * coef @ coef


p_star = objective(pooled.coef_.ravel(), pooled.intercept_[0])


def gap(solver, participation, rounds=100):
    est = FedLogisticRegression(C=C, solver=solver, participation=participation,
                                max_rounds=rounds, tol=0, random_state=0)
    est.fit(X, y, clients=site)
    return est.history_["round"], (est.history_["objective"] - p_star) / p_star


fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for label, solver in [("A-FedPD", AFedPD(rho=0.1)), ("FedDyn", FedDyn(rho=0.1)),
                      ("FedADMM", FedADMM(rho=0.1)), ("FedAvg, 10 steps", FedAvg(local_steps=10))]:
    rounds, g = gap(solver, 0.1)
    axes[0].semilogy(rounds, np.maximum(g, 1e-16), label=label)
    if label == "A-FedPD":
        axes[1].semilogy(rounds, np.maximum(g, 1e-16), label="participation 0.1")
    print(f"{label:<17} participation 0.1, 100 rounds: relative suboptimality {g[-1]:.2e}")
axes[0].set(xlabel="round", ylabel="(P - P*) / P*", title="10 of 100 clients per round")
axes[0].legend()
for p in [0.05, 0.3]:
    rounds, g = gap(AFedPD(rho=0.1), p)
    axes[1].semilogy(rounds, np.maximum(g, 1e-16), label=f"participation {p}")
    print(f"A-FedPD participation {p:<5} 100 rounds: relative suboptimality {g[-1]:.2e}")
axes[1].set(xlabel="round", title="A-FedPD: participation")
axes[1].legend()
fig.tight_layout()
plt.show()
