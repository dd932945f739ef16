"""FedLinearSVC (alias FedSVM): linear support vector classification, federated."""

from numbers import Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ..linear_model._classifier import FederatedLinearClassifier
from .._docstrings import CLASSIFIER_ATTRS_DOC, SHARED_DOC
from ..base import FederatedLinearModel
from ..datafits import Hinge, SquaredHinge
from ..penalties import L1, L2


class FedLinearSVC(FederatedLinearClassifier):
    """Federated linear SVM: scikit-learn's ``LinearSVC`` objective, intercept unpenalized.

    Minimizes, over data pooled from all clients (never moved)::

        C * sum_i s_i loss(y_i (x_i . w + b)) + penalty(w)

    with ``loss`` the hinge ``max(0, 1 - m)`` or squared hinge
    ``max(0, 1 - m)^2`` and ``penalty`` ``||w||^2 / 2`` (l2) or ``||w||_1``
    (l1); ``s_i`` is the sample weight times the class weight. More than two
    classes are fitted one-vs-rest (one output per class, as ``LinearSVC``),
    jointly.

    **The intercept is not regularized.** liblinear (behind ``LinearSVC``)
    appends a constant feature and so penalizes the intercept; skfed fits the
    intercept of the stated objective, as every other skfed estimator. The
    coefficients therefore differ slightly from ``LinearSVC`` whenever the
    intercept matters; with ``fit_intercept=False`` the objectives coincide.

    Parameters
    ----------
    C : float > 0, default=1.0
        Inverse regularization strength.
    loss : {{"squared_hinge", "hinge"}}, default="squared_hinge"
        ``"squared_hinge"`` is smooth: every solver applies. ``"hinge"`` is
        not differentiable: DualFL (its local problems solved exactly in the
        dual; l2 only), FedMLS and subgradient FedAvg apply; the others are
        refused at ``fit``.
    penalty : {{"l2", "l1"}}, default="l2"
    class_weight : dict, "balanced" or None, default=None
    {shared}
    {attrs}
    See Also
    --------
    sklearn.svm.LinearSVC : the pooled estimator (with a penalized intercept).
    FedLogisticRegression : probabilistic linear classification.

    Notes
    -----
    With the hinge loss ``history_["stationarity"]`` is the norm of a
    subgradient mapping, which does not vanish at the optimum; such fits
    stop when the objective stops improving (by less than ``tol``
    relatively over 20 rounds).

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfed import FedLinearSVC
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> site = [i % 4 for i in range(len(y))]
    >>> svm = FedLinearSVC(C=0.01, tol=1e-6).fit(X, y, clients=site)
    >>> round(svm.score(X, y), 3)
    0.982
    """

    _parameter_constraints = {
        **FederatedLinearModel._parameter_constraints,
        "C": [Interval(Real, 0, None, closed="neither")],
        "loss": [StrOptions({"hinge", "squared_hinge"})],
        "penalty": [StrOptions({"l1", "l2"})],
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }

    def __init__(self, C=1.0, *, loss="squared_hinge", penalty="l2", fit_intercept=True,
                 class_weight=None, solver="auto", max_rounds=1000, tol=1e-4, monitor_every=1,
                 participation=1.0, client_weighting="samples", privacy=None, executor="sequential",
                 n_jobs=None, random_state=None, verbose=0, warm_start=False):
        self.C = C
        self.loss = loss
        self.penalty = penalty
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.solver = solver
        self.max_rounds = max_rounds
        self.tol = tol
        self.monitor_every = monitor_every
        self.participation = participation
        self.client_weighting = client_weighting
        self.privacy = privacy
        self.executor = executor
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start

    def _datafit(self, n_classes):
        return Hinge() if self.loss == "hinge" else SquaredHinge()

    def _target_kind(self, n_classes):
        return "binary" if n_classes == 2 else "ovr"  # one-vs-rest

    def _penalty(self, total_weight):
        strength = 1.0 / (self.C * total_weight)
        return L2(strength) if self.penalty == "l2" else L1(strength)


FedLinearSVC.__doc__ = FedLinearSVC.__doc__.format(
    shared=SHARED_DOC.strip("\n").lstrip(), attrs=CLASSIFIER_ATTRS_DOC)

#: The name users ask for; the same class.
FedSVM = FedLinearSVC
