"""FedLowRank: nuclear-norm regularized least squares (multi-task or matrix covariates)."""

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from .._docstrings import SHARED_DOC
from ..federation.layout import Layout
from ..base import FederatedLinearModel, SiteScoreMixin, fit_all_or_nothing, sites_aware
from ..data import FederatedDataset
from ..datafits import Quadratic
from .._messages import show
from ..metrics import rank as matrix_rank
from ..penalties import NuclearNorm


class FedLowRank(SiteScoreMixin, RegressorMixin, FederatedLinearModel):
    """Federated trace-norm regression: a low-rank coefficient matrix.

    Minimizes, over data pooled from all clients (never moved)::

        1 / (2 n) * ||Y - X W^T - b||_F^2 + alpha * ||W||_*

    where ``||W||_*`` is the nuclear norm (sum of singular values). Two uses:

    - **multi-output (multi-task) regression**: ``Y`` of shape
      ``(n, n_targets)``, ``W = coef_`` of shape ``(n_targets, n_features)``:
      reduced-rank regression's convex relaxation;
    - **matrix covariates** (FedDualAvg paper, App. B.3): each sample a
      ``d1 x d2`` matrix ``X_i`` and ``y_i = <W, X_i> + b``; pass ``X`` of
      shape ``(n, d1, d2)``, or flattened ``(n, d1 * d2)`` (row-major) with
      ``coef_shape=(d1, d2)``. ``coef_`` then has shape ``(d1, d2)``.

    Parameters
    ----------
    alpha : float, default=1.0
        Nuclear-norm strength (>= 0).
    coef_shape : tuple of two ints or None, default=None
        ``(d1, d2)`` for flattened matrix covariates; inferred from a 3-D
        ``X``. ``None`` with a 2-D ``X``: multi-output regression.
    {shared}

    Attributes
    ----------
    coef_ : ndarray of shape (n_targets, n_features) or (d1, d2)
        The coefficient matrix (a row vector ``(n_features,)`` for a single
        target without ``coef_shape``).
    intercept_ : float or ndarray of shape (n_targets,)
    rank_ : int
        Numerical rank of ``coef_`` (singular values above
        ``max(shape) * eps * s_max``; the solvers' singular-value
        thresholding produces exact zeros).
    U_, s_, Vt_ : ndarray
        Compact SVD ``coef_ = U_ @ diag(s_) @ Vt_`` truncated at ``rank_``.
    n_iter_, objective_, history_, solver_, clients_, n_clients_ :
        As in :class:`~skfed.FedLasso`; ``history_["rank"]`` records the
        rank per round.
    n_features_in_ : int
        ``d1 * d2`` for matrix covariates.

    See Also
    --------
    FedLasso : the vector analogue (L1 instead of the nuclear norm).
    skfed.datasets.make_federated_low_rank : the FedDualAvg paper's sets.

    Examples
    --------
    >>> from skfed import FedLowRank
    >>> from skfed.datasets import make_federated_low_rank
    >>> X, y, site, W_true = make_federated_low_rank(
    ...     "III", n_clients=8, matrix_shape=(8, 8), random_state=0)
    >>> est = FedLowRank(alpha=0.5, tol=1e-6).fit(X, y, clients=site)
    >>> est.coef_.shape, est.rank_
    ((8, 8), 1)
    """

    _parameter_constraints = {
        **FederatedLinearModel._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "coef_shape": [tuple, list, None],
    }

    def __init__(self, alpha=1.0, *, coef_shape=None, fit_intercept=True, solver="auto",
                 max_rounds=1000, tol=1e-4, monitor_every=1, participation=1.0,
                 client_weighting="samples", privacy=None, executor="sequential", n_jobs=None,
                 random_state=None, verbose=0, warm_start=False):
        self.alpha = alpha
        self.coef_shape = coef_shape
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

    def _matrix_shape(self, X):
        """``(d1, d2)`` for matrix covariates (checked against ``X``), else None."""
        shape = self.coef_shape
        if shape is not None:
            shape = tuple(shape)
            if len(shape) != 2 or not all(isinstance(v, Integral) and v > 0 for v in shape):
                raise ValueError("coef_shape must be two positive ints (d1, d2); "
                                 f"got {show(shape)}.")
        if X.ndim == 3:
            if shape is not None and shape != X.shape[1:]:
                raise ValueError(f"X holds {X.shape[1]}x{X.shape[2]} matrices but "
                                 f"coef_shape={show(shape)}.")
            return X.shape[1:]
        if shape is not None and shape[0] * shape[1] != X.shape[1]:
            raise ValueError(
                f"coef_shape={show(shape)} needs {shape[0] * shape[1]} features per sample "
                f"(d1 * d2, flattened row-major), but X has {X.shape[1]}.")
        return shape

    def _flatten(self, X, *, reset):
        if sp.issparse(X):
            return X, None
        X = check_array(X, allow_nd=True, ensure_2d=False, dtype=None, ensure_all_finite=False)
        if X.ndim not in (2, 3):
            raise ValueError(f"X must be 2-D (samples x features) or 3-D (samples x d1 x d2); "
                             f"got {X.ndim}-D. Reshape your data: X.reshape(-1, 1) for a "
                             "single feature, X.reshape(1, -1) for a single sample.")
        shape = self._matrix_shape(X) if reset else getattr(self, "_matrix_shape_", None)
        if X.ndim == 3:
            if not reset and shape is not None and X.shape[1:] != shape:
                raise ValueError(f"X holds {X.shape[1]}x{X.shape[2]} matrices; the model was "
                                 f"fitted on {shape[0]}x{shape[1]}.")
            X = X.reshape(X.shape[0], -1)
        return X, shape

    @fit_all_or_nothing
    def fit(self, X, y=None, clients=None, sample_weight=None):
        """Fit the low-rank model on data held by several clients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or (n_samples, d1, d2)
            Or a :class:`~skfed.data.FederatedDataset` of flat feature
            tables (then ``coef_shape`` gives matrix covariates their shape,
            and ``y``, ``clients`` and ``sample_weight`` stay unset).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Matrix covariates need a single target.
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
        shape = None
        if not isinstance(X, FederatedDataset):
            X, shape = self._flatten(X, reset=True)
        dataset = self._dataset(X, y, clients, sample_weight, validate=lambda X, y: validate_data(
            self, X, y, accept_sparse="csr", dtype=np.float64, multi_output=True,
            y_numeric=True))
        if isinstance(X, FederatedDataset):
            shape = self._matrix_shape(np.empty((0, self.n_features_in_)))
        summaries = self._site_setup(dataset, "regression")
        y_ndim, n_targets = summaries[0]["y_ndim"], summaries[0]["n_targets"]
        if any(s["n_targets"] != n_targets for s in summaries):
            raise ValueError("the sites hold different numbers of targets.")
        if shape is not None and n_targets > 1:
            raise ValueError("matrix covariates (coef_shape or a 3-D X) take one target; "
                             f"y has {n_targets} columns.")
        layout = Layout(n_outputs=n_targets, n_features=self.n_features_in_,
                        fit_intercept=self.fit_intercept, coef_shape=shape)
        theta = self._fit_federated(dataset, datafit=Quadratic(), penalty=NuclearNorm(self.alpha),
                                    layout=layout)
        self._matrix_shape_ = shape
        W = layout.coef(theta).reshape(layout.penalty_shape).copy()
        self.coef_ = W if (shape is not None or y_ndim == 2) else W.ravel()
        intercept = layout.intercept(theta)
        self.intercept_ = intercept.copy() if y_ndim == 2 else float(intercept[0])
        U, s, Vt = np.linalg.svd(np.atleast_2d(W), full_matrices=False)
        self.rank_ = matrix_rank(W)
        self.U_, self.s_, self.Vt_ = U[:, :self.rank_], s[:self.rank_], Vt[:self.rank_]
        return self

    @sites_aware
    def predict(self, X):
        """Predict with the low-rank model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or (n_samples, d1, d2)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_targets)
        """
        check_is_fitted(self)
        X, _ = self._flatten(X, reset=False)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        W = np.asarray(self.coef_).reshape(-1, X.shape[1])
        pred = np.asarray(X @ W.T) + self.intercept_
        return pred.ravel() if np.ndim(self.intercept_) == 0 else pred

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.multi_output = True
        return tags


FedLowRank.__doc__ = FedLowRank.__doc__.format(shared=SHARED_DOC.strip("\n").lstrip())
