"""
Local G-ECL: decentralized training under label skew (the Local G-ECL paper)
=============================================================================

Without a server, nodes on a ring average only with their neighbours. Gossip
SGD (DSGD) then drifts towards each node's own optimum when the nodes' data
differ; Local Generalized Exact Consensus Learning (Local G-ECL) corrects the
drift with dual variables on the edges, like SCAFFOLD's control variates do
with a server. The paper's claims: Local G-ECL is robust to heterogeneity,
and its centralized form behaves like SCAFFOLD.

Ten nodes hold scikit-learn's digits with a Dirichlet(h) label skew; every
method takes K = 8 local steps of size 0.2 (the best of the paper's step-size
grid in ``python benchmarks/reproduce.py local-gecl``; see
:doc:`/reproductions`). The model is a multinomial logistic regression with a
small ridge; the reference is scikit-learn's pooled optimum.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from skfed import FedLogisticRegression
from skfed.datasets import simulate_clients
from skfed.solvers import DSGD, LocalGECL, Scaffold

# every run stops at a fixed number of rounds on purpose
warnings.simplefilter("ignore", ConvergenceWarning)

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.2,
                                                    random_state=0)
mu = 1e-3
C = 1.0 / (mu * len(y_train))  # mean cross-entropy + (mu/2)||W||^2
pooled = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(X_train, y_train)
Z = X_train @ pooled.coef_.T + pooled.intercept_
e_star = (np.mean(np.logaddexp.reduce(Z, axis=1) - Z[np.arange(len(y_train)), y_train])
          + 0.5 * mu * np.sum(pooled.coef_**2))

methods = {"Local G-ECL (ring)": LocalGECL(topology="ring", local_steps=8, lr=0.2),
           "gossip SGD (ring)": DSGD(topology="ring", local_steps=8, lr=0.2),
           "Local G-ECL (centralized)": LocalGECL(local_steps=8, lr=0.2),
           "SCAFFOLD": Scaffold(local_steps=8, lr=0.2)}
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, h in zip(axes, [0.1, np.inf]):
    if np.isinf(h):
        site = simulate_clients(X_train, y_train, 10, scheme="iid", random_state=0)
    else:
        site = simulate_clients(X_train, y_train, 10, scheme="dirichlet", alpha=h,
                                random_state=0)
    for label, solver in methods.items():
        est = FedLogisticRegression(C=C, solver=solver, max_rounds=100, tol=0, random_state=0)
        est.fit(X_train, y_train, clients=site)
        gap = (est.history_["objective"] - e_star) / e_star
        ax.semilogy(est.history_["round"], gap, label=label)
        print(f"h={h:<4} {label:<26} relative suboptimality {gap[-1]:.2e}, "
              f"test accuracy {est.score(X_test, y_test):.4f}")
    ax.set(xlabel="round", title=f"Dirichlet h = {h}")
    ax.legend(fontsize=8)
axes[0].set_ylabel("(E - E*) / E*")
print(f"pooled scikit-learn test accuracy {pooled.score(X_test, y_test):.4f}")
fig.tight_layout()
plt.show()
