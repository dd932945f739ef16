"""FedLogisticRegression: the objective of scikit-learn's LogisticRegression."""

from numbers import Real

import warnings

import numpy as np
from scipy.special import expit, softmax
from sklearn.utils._param_validation import Hidden, Interval, StrOptions

from ._classifier import FederatedLinearClassifier
from .._constraints import CONSTRAINT_DOC, CONSTRAINT_PARAMETERS, constrain
from .._docstrings import CLASSIFIER_ATTRS_DOC, SHARED_DOC
from ..base import FederatedLinearModel
from ..datafits import Logistic, Multinomial
from ..penalties import ElasticNet
from ._inference import COV_TYPES, Family, GLMInferenceMixin, InferenceError


class FedLogisticRegression(GLMInferenceMixin, FederatedLinearClassifier):
    """Federated logistic regression: scikit-learn's ``LogisticRegression`` objective.

    Minimizes, over data pooled from all clients (never moved)::

        C * sum_i s_i loss(x_i, y_i) + l1_ratio * ||W||_1 + (1 - l1_ratio) / 2 * ||W||^2

    with the binary logistic loss for two classes and the multinomial
    (softmax) loss for more, ``s_i`` the sample weight times the class
    weight. The intercept is not penalized. Internally the objective is
    divided by ``C * sum_i s_i`` (a mean loss per client), which has the
    same minimizer.

    Parameters
    ----------
    C : float > 0 or np.inf, default=1.0
        Inverse regularization strength; ``np.inf`` means no penalty.
    penalty : {{"l1", "l2", "elasticnet"}} or None, default="l2"
        The norm of the penalty, as scikit-learn's ``LogisticRegression``:
        ``"l2"``, ``"l1"``, ``"elasticnet"`` (with ``l1_ratio``) or
        ``None`` (no penalty: ``C`` and ``l1_ratio`` are ignored). An
        explicit ``penalty`` wins over ``l1_ratio``. Deprecated as in
        scikit-learn 1.8 (removed there in 1.10): ``fit`` gives the same
        ``FutureWarning``, which says what to use instead: ``l1_ratio=0``
        for ``"l2"``, ``l1_ratio=1`` for ``"l1"``, a float in ``(0, 1)`` for
        ``"elasticnet"`` and ``C=np.inf`` for ``None``. Leave it unset (the
        default, shown as ``"deprecated"``) to use ``l1_ratio`` and ``C``.
    l1_ratio : float in [0, 1], default=0.0
        0 is the L2 penalty, 1 the L1 penalty, in between the elastic net
        (as scikit-learn 1.9, where ``penalty`` is deprecated).
    class_weight : dict, "balanced" or None, default=None
        Weights per class, multiplied into the sample weights; "balanced"
        uses the class counts over all clients (a summary each client sends).
    cov_type : {{"nonrobust", "HC0", "HC1", "cluster"}}, default="nonrobust"
        Covariance of the estimates of an unpenalized binary fit
        (``C=np.inf``), which then has statsmodels' ``GLM(..., family=
        Binomial())`` inference (``summary()``, ``bse_``, ``pvalues_``, odds
        ratios with ``summary(exponentiate=True)``): the inverse Fisher
        information, the sandwich (``"HC0"``, ``"HC1"`` with ``n / (n - p)``)
        or the sandwich with the sites as clusters (``"cluster"``). See
        :class:`FedPoissonRegressor`.
    {constraint}
    {shared}
    {attrs}
    See Also
    --------
    sklearn.linear_model.LogisticRegression : the pooled estimator with this objective.
    FedLinearSVC : hinge losses.

    Notes
    -----
    A client holding only some of the classes (even one) is normal: the
    loss of each client covers all ``n_classes`` outputs, and ``classes_``
    is the union of the clients' label sets. The multinomial intercepts are
    identified only up to a common shift; ``intercept_`` is centred (sum
    zero), as scikit-learn's solvers produce it.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfed import FedLogisticRegression
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> site = [i % 4 for i in range(len(y))]
    >>> clf = FedLogisticRegression(C=0.1, tol=1e-6).fit(X, y, clients=site)
    >>> clf.classes_, clf.coef_.shape
    (array([0, 1]), (1, 30))
    >>> round(clf.score(X, y), 3)
    0.981
    """

    _parameter_constraints = {
        **FederatedLinearModel._parameter_constraints,
        **CONSTRAINT_PARAMETERS,
        "C": [Interval(Real, 0, None, closed="right")],  # np.inf: no penalty
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "cov_type": [StrOptions(set(COV_TYPES))],
        "penalty": [StrOptions({"l1", "l2", "elasticnet"}), None,
                    Hidden(StrOptions({"deprecated"}))],
    }
    _shift_invariant = True

    def __init__(self, C=1.0, *, penalty="deprecated", l1_ratio=0.0, fit_intercept=True,
                 class_weight=None, cov_type="nonrobust", constraint=None, radius=1.0,
                 solver="auto", max_rounds=1000, tol=1e-4,
                 monitor_every=1, participation=1.0, client_weighting="samples", privacy=None,
                 executor="sequential", n_jobs=None, random_state=None, verbose=0,
                 warm_start=False):
        self.penalty = penalty
        self.C = C
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.cov_type = cov_type
        self.constraint = constraint
        self.radius = radius
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

    def _penalized(self):
        if self.constraint is not None:
            return (f"constraint={self.constraint!r} restricts the coefficients, and Wald "
                    "inference is not valid for a constrained fit; refit without it")
        if np.isfinite(self.C):
            return (f"C={self.C:g} penalizes the coefficients, and Wald standard errors, "
                    "p-values and intervals are not valid for a penalized fit (the estimate "
                    "is shrunk toward zero and its covariance is not the inverse "
                    "information); refit with C=np.inf for inference")
        return None

    def _inference_family(self):
        if len(self.classes_) != 2:
            raise InferenceError(
                f"inference is for binary logistic regression (binomial GLM); this fit has "
                f"{len(self.classes_)} classes")
        return Family("binomial", "logit")

    def _datafit(self, n_classes):
        return Logistic() if n_classes == 2 else Multinomial()

    def _target_kind(self, n_classes):
        return "binary" if n_classes == 2 else "onehot"

    def _resolved_penalty(self):
        """``(C, l1_ratio)`` the fit uses, with scikit-learn 1.9's warnings for ``penalty``.

        As ``sklearn.linear_model.LogisticRegression``: an explicit ``penalty``
        wins over ``l1_ratio`` (with a warning when they disagree), ``None``
        ignores ``C`` and ``l1_ratio``, and any explicit ``penalty`` gets the
        ``FutureWarning`` that explains ``l1_ratio``.
        """
        C, l1_ratio = self.C, self.l1_ratio
        if self.penalty == "deprecated":
            return C, l1_ratio
        warnings.warn(
            "'penalty' was deprecated in version 1.8 and will be removed in 1.10. To avoid "
            "this warning, leave 'penalty' set to its default value and use 'l1_ratio' or "
            "'C' instead. Use l1_ratio=0 instead of penalty='l2', l1_ratio=1 instead of "
            "penalty='l1', l1_ratio set to a float between 0 and 1 instead of "
            "penalty='elasticnet', and C=np.inf instead of penalty=None.", FutureWarning,
            stacklevel=5)
        if self.penalty != "elasticnet" and 0 < l1_ratio < 1:
            warnings.warn("l1_ratio parameter is only used when penalty is 'elasticnet'. Got "
                          f"(penalty={self.penalty})", stacklevel=5)
        if (self.penalty == "l2" and l1_ratio != 0) or (self.penalty == "l1"
                                                         and l1_ratio != 1):
            warnings.warn(f"Inconsistent values: penalty={self.penalty} with "
                          f"l1_ratio={l1_ratio}. penalty is deprecated. Please use "
                          "l1_ratio only.", stacklevel=5)
        if self.penalty is None:
            if C != 1.0:
                warnings.warn("Setting penalty=None will ignore the C and l1_ratio parameters",
                              stacklevel=5)
            return np.inf, 0.0
        return C, {"l2": 0.0, "l1": 1.0}.get(self.penalty, l1_ratio)

    def _penalty(self, total_weight):
        C, l1_ratio = self._resolved_penalty()
        penalty = None
        if np.isfinite(C):
            penalty = ElasticNet(1.0 / (C * total_weight), l1_ratio)
        return constrain(penalty, self.constraint, self.radius)

    def predict_proba(self, X):
        """Class probabilities.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns follow ``classes_``.
        """
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1.0 - p, p])
        return softmax(scores, axis=1)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        return np.log(self.predict_proba(X))


FedLogisticRegression.__doc__ = FedLogisticRegression.__doc__.format(
    constraint=CONSTRAINT_DOC.strip("\n").lstrip(), shared=SHARED_DOC.strip("\n").lstrip(),
    attrs=CLASSIFIER_ATTRS_DOC + """    params_, bse_, tvalues_, pvalues_, cov_params_ : ndarray
        Inference of an unpenalized binary fit (``C=np.inf``), intercept
        first; also ``deviance_``, ``null_deviance_``, ``loglike_``, ``aic_``,
        ``bic_``, ``conf_int()`` and ``summary()`` (see
        :class:`FedPoissonRegressor`). Reading one after a penalized fit
        raises an error saying why.
""")
