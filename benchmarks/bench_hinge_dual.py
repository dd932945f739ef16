"""DualFL on the hinge loss: its exact local solves (dual coordinate ascent) by row width.

The hinge SVM's local problems are solved exactly in the dual
(:mod:`skfed.local.sdca`), one coordinate step per row and sweep in Python. On
rows of at most ``_PYTHON_WIDTH`` columns (features and intercept) the steps'
products run on Python floats, wider rows in numpy. For 2 to 45 features the
same fit (``FedLinearSVC(C=0.05, loss="hinge", solver="dualfl")``, 8 sites of a
2,000-row ``make_classification`` problem, to the default ``tol``) runs both
ways, and scikit-learn's ``SVC(kernel="linear")`` (libsvm: the same objective,
the intercept not penalized) on the pooled rows, the three interleaved. Prints
the median of ``--repeat`` fits each (threads pinned, one by default), the ratio
of the two ways, the ratio to scikit-learn, and the objectives' relative gap to
libsvm's.

Run: python benchmarks/bench_hinge_dual.py [--repeat 5] [--widths 2 5 10 20 30 45]
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from skfed import FedLinearSVC
from skfed.local import sdca

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _measure import add_options, measure, pinned_threads  # noqa: E402
from tests import _oracles as orc  # noqa: E402  (the independent objective)

C = 0.05


def _federated(X, y, site, width):
    """The DualFL hinge fit with the Python-float products up to ``width`` columns."""
    held = sdca._PYTHON_WIDTH
    sdca._PYTHON_WIDTH = width
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return FedLinearSVC(C=C, loss="hinge", solver="dualfl").fit(X, y, clients=site)
    finally:
        sdca._PYTHON_WIDTH = held


def _row(d, repeat):
    """One width's Markdown row."""
    X, y = make_classification(n_samples=2000, n_features=d, n_informative=max(2, d // 2),
                               n_redundant=0, n_repeated=0, flip_y=0.05, random_state=0)
    X = StandardScaler().fit_transform(X)
    site = np.random.default_rng(0).integers(0, 8, len(y))
    t = measure({"python": lambda: _federated(X, y, site, 10 ** 6),
                 "numpy": lambda: _federated(X, y, site, 0),
                 "sklearn": lambda: SVC(kernel="linear", C=C, tol=1e-8).fit(X, y)}, repeat)
    model, ref = t["python"].result, t["sklearn"].result
    best = orc.svc_objective(X, y, ref.coef_.ravel(), ref.intercept_, C, "hinge", "l2")
    ours = orc.svc_objective(X, y, model.coef_, model.intercept_, C, "hinge", "l2")
    fast, slow, pooled = t["python"].median, t["numpy"].median, t["sklearn"].median
    return (f"| {d} | {fast:.3f} s | {slow:.3f} s | {slow / fast:.2f}x | {pooled:.3f} s | "
            f"{fast / pooled:.2f}x | {len(model.history_['round']) - 1} | "
            f"{(ours - best) / abs(best):.1e} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_options(parser)
    parser.add_argument("--widths", type=int, nargs="+", default=[2, 5, 10, 20, 30, 45])
    args = parser.parse_args(argv)
    print(f"DualFL hinge fits, medians of {args.repeat}, {args.threads} thread(s); products "
          f"on Python floats up to {sdca._PYTHON_WIDTH} columns by default\n")
    print("| features | Python floats | numpy | speed-up | scikit-learn SVC | ratio | "
          "rounds | gap to libsvm |")
    print("|---|---|---|---|---|---|---|---|")
    with pinned_threads(args.threads):
        for d in args.widths:
            print(_row(d, args.repeat), flush=True)


if __name__ == "__main__":
    main()
