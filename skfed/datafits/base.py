"""Datafits: losses of a linear model, evaluated on raw predictions.

A datafit only knows the loss of raw predictions ``Z = X @ W.T + b`` (shape
``(n_samples, n_outputs)``) against targets; :class:`ClientObjective` turns it
into the (sample-weighted) mean loss of one client as a function of the flat
parameter vector, with gradients and Lipschitz constants. This keeps intercept
and sample-weight handling in one place for every loss and every solver.
"""

from abc import ABC, abstractmethod

import numpy as np
import scipy.sparse as sp


class Datafit(ABC):
    """Loss of raw predictions, weighted-summed over samples.

    Subclasses define ``loss_sum`` and ``raw_gradient`` for per-sample weights
    ``sw`` and set ``smooth`` and ``curvature`` (an upper bound of the second
    derivative of the per-sample loss with respect to each raw prediction, or
    ``None`` for non-smooth losses).
    """

    smooth = True
    curvature = None
    #: for a non-smooth loss: the curvature used only to scale automatic step
    #: sizes and the monitor's proximal-gradient mapping (no smoothness claim)
    scale_curvature = None
    quadratic = False
    #: exact local solves by dual coordinate ascent apply (hinge)
    dual_coordinate = False
    #: shape of the targets this loss expects: "continuous", "binary", ...
    target_kind = "continuous"

    @abstractmethod
    def loss_sum(self, Z, Y, sw):
        """Sum over samples of ``sw_i * loss(Z_i, Y_i)``."""

    @abstractmethod
    def raw_gradient(self, Z, Y, sw):
        """Derivative of :meth:`loss_sum` with respect to ``Z``."""

    @property
    def step_curvature(self):
        """Curvature behind the Lipschitz constants: the loss's own, else its scale."""
        return self.curvature if self.curvature is not None else self.scale_curvature

    def __repr__(self):
        return f"{type(self).__name__}()"


class ClientObjective:
    """One client's mean loss ``L_j(theta) = sum_i sw_i loss_i / sum_i sw_i``.

    Holds the client's data. Everything a solver computes on a client goes
    through this object, so that the executor can keep it where the data lives.

    Parameters
    ----------
    datafit : Datafit
    X : ndarray or sparse matrix of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, n_outputs)
        Targets, already encoded for the datafit.
    sample_weight : ndarray of shape (n_samples,)
    layout : Layout
    """

    def __init__(self, datafit, X, Y, sample_weight, layout):
        self.datafit = datafit
        self.X = X
        self.Y = Y
        self.sample_weight = sample_weight
        self.layout = layout
        self.weight_sum = float(np.sum(sample_weight))

    @property
    def n_samples(self):
        return self.X.shape[0]

    def _rows(self, rows):
        if rows is None:
            return self.X, self.Y, self.sample_weight
        return self.X[rows], self.Y[rows], self.sample_weight[rows]

    def raw(self, theta, X=None):
        X = self.X if X is None else X
        lay = self.layout
        Z = X @ lay.coef(theta).T
        if lay.fit_intercept:
            Z = Z + lay.intercept(theta)
        return np.asarray(Z)

    def value(self, theta, rows=None):
        X, Y, sw = self._rows(rows)
        return self.datafit.loss_sum(self.raw(theta, X), Y, sw) / float(np.sum(sw))

    def value_and_gradient(self, theta, rows=None):
        """Mean loss and its gradient with respect to ``theta`` (on ``rows`` if given)."""
        return self._evaluate(theta, rows, with_value=True)

    def gradient(self, theta, rows=None):
        """Gradient of the mean loss (on ``rows`` if given)."""
        return self._evaluate(theta, rows, with_value=False)[1]

    def _evaluate(self, theta, rows, with_value):
        X, Y, sw = self._rows(rows)
        total = self.weight_sum if rows is None else float(np.sum(sw))
        Z = self.raw(theta, X)
        value = self.datafit.loss_sum(Z, Y, sw) / total if with_value else None
        dZ = self.datafit.raw_gradient(Z, Y, sw) / total
        grad = np.empty(self.layout.size)
        # (X.T @ dZ).T works for dense and sparse X alike
        grad[: self.layout.n_coef] = np.asarray(X.T @ dZ).T.ravel()
        if self.layout.fit_intercept:
            grad[self.layout.n_coef :] = dZ.sum(axis=0)
        return value, grad

    def normal_equations(self):
        """``(G, B)`` with ``L_j(theta) = theta_o' G theta_o / 2 - B_o' theta_o + const``
        per output ``o``, where ``theta_o = [coef_o, intercept_o]``.

        Only for quadratic datafits. Cached on the object (computed once per
        process holding the data).
        """
        if not self.datafit.quadratic:
            raise TypeError(f"{self.datafit!r} is not a quadratic loss.")
        if getattr(self, "_normal", None) is None:
            X, sw, S = self.X, self.sample_weight, self.weight_sum
            Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
            if self.layout.fit_intercept:
                Xd = np.column_stack([Xd, np.ones(Xd.shape[0])])
            G = Xd.T @ (Xd * sw[:, None]) / S
            B = Xd.T @ (self.Y * sw[:, None]) / S
            self._normal = (G, B)
        return self._normal

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_normal", None)  # a cache, not data: never shipped
        return state

    def curvature_matvec(self, v):
        """``curvature * X.T @ diag(sw) @ X @ v / sum(sw)``: the coefficient block of
        the Hessian bound applied to ``v`` (length ``n_features``)."""
        curv = self.datafit.step_curvature
        return curv * np.asarray(self.X.T @ (self.sample_weight * (self.X @ v))).ravel() / self.weight_sum

    def feature_mean(self):
        """Sample-weighted mean of the rows of ``X``."""
        return np.asarray(self.X.T @ self.sample_weight).ravel() / self.weight_sum

    def lipschitz(self):
        """Smoothness constants of this client's mean loss, per block.

        Returns a dict with ``coef`` (the largest eigenvalue of the coefficient
        block of the Hessian bound), ``intercept`` (same for the intercept
        block) and ``joint``: the largest eigenvalue of the whole Hessian bound
        after scaling each block by its own constant (between 1 and 2). A
        gradient step of size ``1 / (joint * L_block)`` per block is then safe.
        ``row`` bounds the coefficient block of any minibatch mean loss
        (``curvature * max_i ||x_i||^2``). For a non-smooth loss they are the
        constants of its ``scale_curvature`` (step scales, not smoothness
        bounds), or ``inf`` when it has none.
        """
        curv = self.datafit.step_curvature
        if curv is None:
            return {"coef": np.inf, "intercept": np.inf, "joint": 1.0, "row": np.inf}
        X, sw = self.X, self.sample_weight
        mean = self.feature_mean()
        L_coef = curv * _top_eigenvalue_weighted_gram(X, sw) / self.weight_sum
        sq = X.multiply(X).sum(axis=1) if sp.issparse(X) else np.einsum("ij,ij->i", X, X)
        L_row = curv * float(np.max(sq)) if X.shape[0] else 0.0
        L_int = curv if self.layout.fit_intercept else 0.0
        joint = 1.0
        if self.layout.fit_intercept:
            joint = joint_factor(curv, mean, L_coef, L_int)
        return {"coef": L_coef, "intercept": L_int, "joint": joint, "row": L_row}


def joint_factor(curvature, mean, L_coef, L_int):
    """Bound on the top eigenvalue of the block-scaled Hessian bound.

    The bound is ``[[G, curv * mean], [curv * mean^T, curv]]``; scaled by
    ``diag(L_coef, L_int)^(-1/2)`` on both sides it is ``[[A, c], [c^T, 1]]``
    with ``A <= I`` and ``c = curv * mean / sqrt(L_coef * L_int)``, whose top
    eigenvalue is at most ``1 + ||c||`` (and at most 2, being PSD).
    """
    if L_coef <= 0 or L_int <= 0:
        return 1.0
    return float(min(2.0, 1.0 + curvature * np.linalg.norm(mean) / np.sqrt(L_coef * L_int)))


def _top_eigenvalue_weighted_gram(X, sw):
    """Largest eigenvalue of ``X.T @ diag(sw) @ X``.

    Uses the Gram matrix of the smaller side (same non-zero spectrum) when it
    is small enough for a dense eigensolver, else Lanczos on the operator.
    """
    n, d = X.shape
    if min(n, d) == 0:
        return 0.0
    if min(n, d) <= 2000:
        A = X.multiply(np.sqrt(sw)[:, None]).tocsr() if sp.issparse(X) else X * np.sqrt(sw)[:, None]
        G = A @ A.T if n <= d else A.T @ A
        G = G.toarray() if sp.issparse(G) else np.asarray(G)
        return float(np.linalg.eigvalsh(G)[-1])
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((d, d), matvec=lambda v: X.T @ (sw * (X @ v)), dtype=float)
    val = eigsh(op, k=1, which="LA", tol=1e-6, return_eigenvectors=False)[0]
    return float(val) * 1.001  # Lanczos converges from below; keep the bound safe
