"""FedLasso and FedElasticNet: the objectives of scikit-learn's Lasso / ElasticNet."""

from numbers import Real

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data

from ..federation.layout import Layout
from .._constraints import CONSTRAINT_DOC, CONSTRAINT_PARAMETERS, constrain
from .._docstrings import FIT_ATTRS_DOC, SHARED_DOC as _SHARED_DOC
from ..base import FederatedLinearModel, SiteScoreMixin, fit_all_or_nothing, sites_aware
from ..datafits import Quadratic
from ..penalties import ElasticNet, L1

_ATTRS_DOC = """
    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients, with exact zeros where the solver produces them.
    sparse_coef_ : scipy.sparse.csr_matrix
        ``coef_`` as a sparse matrix.
    intercept_ : float or ndarray of shape (n_targets,)
""" + FIT_ATTRS_DOC

_NOTES_DOC = """
    Which solvers reach the pooled optimum (under any client heterogeneity):

    - ``"newton"`` (the default under full participation): each client
      sends its gradient and Hessian (its second moments ``X'X / n_j``) and
      the server solves the Lasso on the pooled quadratic exactly: one round.
      Past 8 MiB per message (about 1,450 features) it sends gradients only
      (proximal L-BFGS, tens of rounds).
    - ``"dualfl"``: exact for any convex objective (a re-centred proximal
      term handles the Lasso and the intercept), the fewest rounds of the
      first-order solvers, and a client sends only a model-sized vector;
      each client solves its local problem.
    - ``"feddyn"`` (the default under partial participation), ``"afedpd"``,
      ``"fedadmm"``, ``"fedpd"`` (full participation only): exact with exact
      local solves, the penalty applied by a server prox.
    - ``"fedmls"``: non-smooth problems by subgradients; sublinear.
    - ``"feddualavg"`` with one full-batch local step and full participation:
      exact, exactly sparse. With several local steps on
      heterogeneous clients its fixed point is biased by client drift, and
      the bias shrinks with the client learning rate.
    - ``"fedmid-osp"`` and ``"fedprox"`` with one full-batch step and full
      participation: exact (a proximal-gradient step per round); biased with
      several local steps on heterogeneous clients.
    - ``"fedmid"``: never exact for an L1 penalty: the penalty is applied on
      the clients and again on the server, so it converges to the solution
      at twice the L1 strength ("curse of primal averaging").
    - ``"fedavg"``: a subgradient method for the L1 part, no exact zeros,
      sublinear even with ``client_lr_schedule="inverse_sqrt"``.
    - ``"feddualavg-osp"``: no convergence theory (an ablation).

    ``history_.stationarity`` tells how far any solver is from the optimum.
"""


class _FedLinearRegression(SiteScoreMixin, RegressorMixin, FederatedLinearModel):
    """Shared fit/predict of least-squares estimators with an L1/L2 penalty."""

    @fit_all_or_nothing
    def fit(self, X, y=None, clients=None, sample_weight=None):
        """Fit the model on data held by several clients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or FederatedDataset
            The rows, or a :class:`~skfed.data.FederatedDataset` (which
            carries the target, the sites and the weights: then leave
            ``y``, ``clients`` and ``sample_weight`` unset).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        clients : array-like of shape (n_samples,), default=None
            The client (site) holding each row; any hashable labels.
            ``None``: all rows form one client and the fit is centralized
            (``n_clients_ == 1``); pass ``clients=site`` to federate. The
            name is ``clients``, not ``groups``: a ``GridSearchCV`` with
            ``GroupKFold`` needs both, ``search.fit(X, y, groups=site,
            clients=site)``.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        self._validate_params()
        dataset = self._dataset(X, y, clients, sample_weight, validate=lambda X, y: validate_data(
            self, X, y, accept_sparse="csr", dtype=np.float64, multi_output=True,
            y_numeric=True))
        summaries = self._site_setup(dataset, "regression")
        y_ndim, n_targets = summaries[0]["y_ndim"], summaries[0]["n_targets"]
        if any(s["n_targets"] != n_targets for s in summaries):
            raise ValueError("the sites hold different numbers of targets.")
        layout = Layout(n_outputs=n_targets, n_features=self.n_features_in_,
                        fit_intercept=self.fit_intercept)
        theta = self._fit_federated(dataset, datafit=self._datafit(), penalty=self._penalty(),
                                    layout=layout)
        coef, intercept = layout.coef(theta), layout.intercept(theta)
        if y_ndim == 1:
            self.coef_, self.intercept_ = coef[0].copy(), float(intercept[0])
        else:
            self.coef_, self.intercept_ = coef.copy(), intercept.copy()
        return self

    def _datafit(self):
        """The loss (least squares; a subclass may use another, see docs/extending.md)."""
        return Quadratic()

    @sites_aware
    def predict(self, X):
        """Predict with the federated linear model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_targets)
        """
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return np.asarray(X @ np.asarray(self.coef_).T) + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.multi_output = True
        return tags


class FedElasticNet(_FedLinearRegression):
    """Federated elastic net: scikit-learn's ``ElasticNet`` objective, fitted on siloed data.

    Minimizes, over data pooled from all clients (never moved)::

        1 / (2 n) * ||y - X w - b||^2
        + alpha * l1_ratio * ||w||_1 + 0.5 * alpha * (1 - l1_ratio) * ||w||^2

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength (>= 0).
    l1_ratio : float in [0, 1], default=0.5
        Mix of L1 (1) and squared L2 (0).
    {shared}
    {attrs}
    See Also
    --------
    FedLasso : ``l1_ratio=1``.
    sklearn.linear_model.ElasticNet : the pooled estimator with this objective.

    Notes
    -----
    {notes}

    Examples
    --------
    >>> from skfed import FedElasticNet
    >>> from skfed.datasets import make_federated_lasso
    >>> X, y, site, w_true = make_federated_lasso(
    ...     "III", n_features=50, n_informative=5, n_clients=8, random_state=0)
    >>> est = FedElasticNet(alpha=0.5, l1_ratio=0.9).fit(X, y, clients=site)
    >>> est.n_clients_, int((est.coef_ != 0).sum())
    (8, 5)
    """

    _parameter_constraints = {
        **FederatedLinearModel._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
    }

    def __init__(self, alpha=1.0, *, l1_ratio=0.5, fit_intercept=True, solver="auto",
                 max_rounds=1000, tol=1e-4, monitor_every=1, participation=1.0,
                 client_weighting="samples", privacy=None, executor="sequential", n_jobs=None,
                 random_state=None, verbose=0, warm_start=False):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
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

    def _penalty(self):
        return ElasticNet(self.alpha, self.l1_ratio)


class FedLasso(_FedLinearRegression):
    """Federated Lasso: scikit-learn's ``Lasso`` objective, fitted on siloed data.

    Minimizes, over data pooled from all clients (never moved)::

        1 / (2 n) * ||y - X w - b||^2 + alpha * ||w||_1

    Parameters
    ----------
    alpha : float, default=1.0
        L1 strength (>= 0).
    {constraint}
    {shared}
    {attrs}
    See Also
    --------
    FedElasticNet : adds a squared L2 term.
    sklearn.linear_model.Lasso : the pooled estimator with this objective.

    Notes
    -----
    {notes}

    Examples
    --------
    >>> from skfed import FedLasso
    >>> from skfed.datasets import make_federated_lasso
    >>> X, y, site, w_true = make_federated_lasso(
    ...     "III", n_features=50, n_informative=5, n_clients=8, random_state=0)
    >>> est = FedLasso(alpha=0.5).fit(X, y, clients=site)
    >>> est.coef_[:6].round(2)
    array([0.59, 0.59, 0.79, 0.78, 0.41, 0.  ])
    >>> est.n_iter_, int(est.history_["nnz"][-1])
    (1, 5)
    """

    _parameter_constraints = {
        **FederatedLinearModel._parameter_constraints,
        **CONSTRAINT_PARAMETERS,
        "alpha": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, alpha=1.0, *, constraint=None, radius=1.0, fit_intercept=True,
                 solver="auto", max_rounds=1000, tol=1e-4, monitor_every=1, participation=1.0,
                 client_weighting="samples", privacy=None, executor="sequential", n_jobs=None,
                 random_state=None, verbose=0, warm_start=False):
        self.alpha = alpha
        self.constraint = constraint
        self.radius = radius
        self.fit_intercept = fit_intercept
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

    def _penalty(self):
        return constrain(L1(self.alpha), self.constraint, self.radius)


for _cls in (FedElasticNet, FedLasso):
    _cls.__doc__ = _cls.__doc__.format(shared=_SHARED_DOC.strip("\n").lstrip(),
                                       constraint=CONSTRAINT_DOC.strip("\n").lstrip(),
                                       attrs=_ATTRS_DOC, notes=_NOTES_DOC.strip("\n").lstrip())
