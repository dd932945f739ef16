"""Support recovery on the FCO paper's synthetic LASSO sets I-IV.

For each configuration and a few alphas: the F1 score (cutoff 1e-2, as the
paper's figures) of the pooled scikit-learn Lasso, and of FedDualAvg in the
paper's client setting (10 clients sampled per round, batch 10, one local
epoch, server lr 1) after 100, 200 and 500 rounds, side by side. The client
lr is 1e-3, the largest value of the paper's grid that is stable on data
generated as its App. B.2.1 describes (its reported 1e-2 diverges; see
tests/test_paper_sparsity.py).

Run: python benchmarks/fco_lasso_support.py [--configs I II] [--alphas 0.3 1]
"""

import argparse
import warnings

from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso

from skfed import FedLasso
from skfed.datasets import LASSO_CONFIGS, make_federated_lasso
from skfed.metrics import support_scores
from skfed.solvers import FedDualAvg

CHECKPOINTS = (100, 200, 500)


def f1_by_round(X, y, clients, w_true, alpha, client_lr=1e-3):
    n_clients = len(set(clients.tolist()))
    solver = FedDualAvg(client_lr=client_lr, local_epochs=1, batch_size=10)
    scores = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for r in CHECKPOINTS:
            # each checkpoint is its own fit: a warm start would reset the dual state
            est = FedLasso(alpha=alpha, solver=solver, participation=10 / n_clients,
                           max_rounds=r, tol=0, random_state=0)
            scores[r] = support_scores(est.fit(X, y, clients=clients).coef_, w_true)["f1"]
    return scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=sorted(LASSO_CONFIGS))
    parser.add_argument("--alphas", nargs="+", type=float, default=[0.3, 1.0])
    args = parser.parse_args()
    header = f"{'config':<8}{'alpha':>7}{'pooled F1':>11}" + "".join(
        f"{'FDA F1 @' + str(r):>13}" for r in CHECKPOINTS)
    print(header)
    for config in args.configs:
        X, y, clients, w_true = make_federated_lasso(config, random_state=0)
        for alpha in args.alphas:
            pooled = support_scores(Lasso(alpha=alpha, max_iter=10_000).fit(X, y).coef_,
                                    w_true)["f1"]
            scores = f1_by_round(X, y, clients, w_true, alpha)
            print(f"{config:<8}{alpha:>7g}{pooled:>11.3f}"
                  + "".join(f"{scores[r]:>13.3f}" for r in CHECKPOINTS), flush=True)


if __name__ == "__main__":
    main()
