"""
FedMLS: a federated linear SVM with the hinge loss (the FedMLS paper)
======================================================================

The hinge loss is not differentiable, so gradient-based federated methods do
not apply; FedAvg with subgradients at a constant step stalls at a biased
point. FedMLS runs T_k = k local subgradient steps with step lambda0 / k in
round k and converges. We take the paper's setting: scikit-learn's breast
cancer data, 10 clients from k-means (so each client sees one region of the
feature space), and compare with libsvm's pooled optimum, plus skfed's DualFL,
which solves its local hinge problems exactly in the dual.

``python benchmarks/reproduce.py fedmls-svm`` runs the full figure
(400 rounds, minibatch FedMLS averaged over seeds; see :doc:`/reproductions`).
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from skfed import FedLinearSVC
from skfed.datasets import simulate_clients
from skfed.solvers import FedMLS

# every run stops at a fixed number of rounds on purpose
warnings.simplefilter("ignore", ConvergenceWarning)

X, y = load_breast_cancer(return_X_y=True)
X = StandardScaler().fit_transform(X)
site = simulate_clients(X, y, 10, scheme="kmeans", random_state=0)
print("rows per client:", np.bincount(site))

# libsvm's optimum of 0.5||w||^2 + C sum hinge, the same problem as FedLinearSVC(loss="hinge")
pooled = SVC(kernel="linear", C=1.0, tol=1e-10).fit(X, y)
s = 2 * y - 1


def primal(coef, intercept):  # FedLinearSVC's objective (divided by C n)
    return np.mean(np.maximum(0, 1 - s * (X @ coef + intercept))) + 0.5 / len(y) * coef @ coef


p_star = primal(pooled.coef_.ravel(), pooled.intercept_[0])

fig, ax = plt.subplots(figsize=(6, 4))
runs = [("FedMLS", FedMLS()), ("FedMLS, 10% minibatches", FedMLS(batch_fraction=0.1)),
        ("FedAvg (subgradient)", "fedavg"), ("DualFL", "dualfl")]
for label, solver in runs:
    est = FedLinearSVC(loss="hinge", C=1.0, solver=solver, max_rounds=100, tol=0,
                       random_state=0)
    est.fit(X, y, clients=site)
    gap = (est.history_["objective"] - p_star) / p_star
    ax.semilogy(est.history_["round"], np.maximum(gap, 1e-16), label=label)
    print(f"{label:<25} relative suboptimality after 100 rounds: {gap[-1]:.2e}; "
          f"training accuracy {est.score(X, y):.4f} (libsvm {pooled.score(X, y):.4f})")
ax.set(xlabel="round", ylabel="(P - P*) / P*", title="linear SVM, 10 k-means clients")
ax.legend()
fig.tight_layout()
plt.show()
