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

from ..federation import dominance
from ..federation.wire import register_subclasses


class Datafit(ABC):
    """Loss of raw predictions, weighted-summed over samples.

    Subclasses define ``loss_sum`` and ``raw_gradient`` for per-sample weights
    ``sw`` and set ``smooth`` and ``curvature`` (an upper bound of the second
    derivative of the per-sample loss with respect to each raw prediction, or
    ``None`` for non-smooth losses). A smooth loss may also define
    ``raw_hessian`` (its second derivative), which Newton's method needs
    (``solver="newton"``; without it Newton falls back to quasi-Newton).
    """

    smooth = True
    #: each output's loss depends on its own raw prediction only (one-vs-rest,
    #: multi-output least squares); not the multinomial loss
    separable_outputs = True
    curvature = None
    #: for a non-smooth loss: the curvature used only to scale automatic step
    #: sizes and the monitor's proximal-gradient mapping (no smoothness claim)
    scale_curvature = None
    quadratic = False
    #: exact local solves by dual coordinate ascent apply (hinge)
    dual_coordinate = False
    #: shape of the targets this loss expects: "continuous", "binary", ...
    target_kind = "continuous"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_subclasses(Datafit, "datafit")(cls)  # a loss a site message may carry

    @abstractmethod
    def loss_sum(self, Z, Y, sw):
        """Sum over samples of ``sw_i * loss(Z_i, Y_i)``."""

    @abstractmethod
    def raw_gradient(self, Z, Y, sw):
        """Derivative of :meth:`loss_sum` with respect to ``Z``."""

    def loss_and_raw_gradient(self, Z, Y, sw, with_value=True):
        """``(loss_sum, raw_gradient)`` at ``Z`` (the loss ``None`` without ``with_value``):
        one call, so that a loss whose two share a pass (the softmax) makes it once."""
        return (self.loss_sum(Z, Y, sw) if with_value else None), self.raw_gradient(Z, Y, sw)

    def loss_rows(self, Z, Y, sw):
        """Each row's weighted loss (their sum is :meth:`loss_sum`): what a site service's
        dominance rule audits (:mod:`skfed.federation.dominance`). A loss without it is
        refused there."""
        raise NotImplementedError(f"{self!r} does not define loss_rows.")

    def raw_hessian(self, Z, Y, sw):
        """Second derivative of :meth:`loss_sum` with respect to each row of ``Z``.

        Returns an array of shape ``(n_samples, n_outputs)`` when the loss of a
        sample is a sum of per-output terms (its Hessian in ``Z_i`` is
        diagonal: the diagonal is returned), or ``(n_samples, n_outputs,
        n_outputs)`` when the outputs are coupled (multinomial). Weighted by
        ``sw`` like :meth:`raw_gradient`. At a kink of a once-differentiable
        loss (squared hinge) any element of the generalized Hessian will do.
        """
        raise NotImplementedError(
            f"{self!r} does not define raw_hessian (its second derivative); "
            "Newton's method needs it.")

    @property
    def has_hessian(self):
        """Whether this loss defines :meth:`raw_hessian`."""
        return type(self).raw_hessian is not Datafit.raw_hessian

    @property
    def step_curvature(self):
        """Curvature behind the Lipschitz constants: the loss's own, else its scale."""
        return self.curvature if self.curvature is not None else self.scale_curvature

    def __repr__(self):
        return f"{type(self).__name__}()"


def _aligned(value):
    """``value``, copied if it is an array numpy holds unaligned (inside a transport's
    received buffer at an odd offset): numpy gives no such array to BLAS, and its own
    loops are slower and add in another order."""
    if isinstance(value, np.ndarray) and not value.flags.aligned:
        return np.array(value, order="K")
    return value


def _product_in_place(XT, n_outputs):
    """Whether the gradient's product ``X' dZ`` can be written in place: one output and
    dense contiguous float64 rows (the same BLAS call as the product's, the same bits;
    2-4 us less a local step)."""
    return (n_outputs == 1 and type(XT) is np.ndarray and XT.dtype == np.float64
            and (XT.flags.c_contiguous or XT.flags.f_contiguous))


def _gradient_of(XT, dZ, n_coef, size, intercept, in_place):
    """``theta``'s gradient from the raw predictions' ``dZ``: ``dZ' X`` per output (made
    as ``(X' dZ)'``, or written in place where :func:`_product_in_place`), then ``dZ``'s
    sums for the intercepts."""
    grad = np.empty(size)
    if in_place:
        np.dot(XT, dZ[:, 0], out=grad[:n_coef])
    else:
        grad[:n_coef] = np.asarray(XT @ dZ).T.ravel()
    if intercept:
        grad[n_coef:] = dZ.sum(axis=0)
    return grad


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
    offset : ndarray of shape (n_samples,) or None, default=None
        A known term added to every output's raw prediction (a GLM's offset).
        For a quadratic loss it is a shift of the target, ``Y - offset``
        (folded in here, so that the normal equations and every local
        solver see it); otherwise :meth:`raw` adds it.
    """

    def __init__(self, datafit, X, Y, sample_weight, layout, offset=None):
        self.datafit = datafit
        self.X = X = _aligned(X)  # rows handed over in a transport's buffer: see below
        self._design_factor = None  # the dominance audit's view of X, made at a site
        self.sample_weight = sample_weight = _aligned(sample_weight)
        self.layout = layout
        self.weight_sum = float(np.sum(sample_weight))
        self.offset = None if offset is None else _aligned(np.asarray(offset, dtype=float))
        if self.offset is not None and datafit.quadratic:
            Y = Y - self.offset[:, None]
            self.raw_offset = None
        else:
            self.raw_offset = self.offset
        self.Y = _aligned(Y)

    @property
    def n_samples(self):
        return self.X.shape[0]

    def _rows(self, rows):
        if rows is None:
            return self.X, self.Y, self.sample_weight
        return self.X[rows], self.Y[rows], self.sample_weight[rows]

    def _transposed(self, X):
        """``X.T``; for the whole sparse design, made once (scipy builds a new matrix on
        each ``.T``, a quarter of a sparse local step's time)."""
        if X is not self.X or not sp.issparse(X):
            return X.T
        if getattr(self, "_design_transpose", None) is None:
            self._design_transpose = X.T
        return self._design_transpose

    def raw(self, theta, X=None, rows=None):
        """Raw predictions ``X @ coef.T + intercept (+ offset)`` of all rows, or of
        ``rows`` (``X`` then the rows' features)."""
        if X is None:
            X = self.X if rows is None else self.X[rows]
        lay = self.layout
        Z = np.asarray(X @ lay.coef(theta).T, dtype=float)
        if lay.fit_intercept:
            Z += lay.intercept(theta)  # Z is this call's own array
        if self.raw_offset is not None:
            Z = Z + (self.raw_offset if rows is None else self.raw_offset[rows])[:, None]
        return Z

    def value(self, theta, rows=None):
        X, Y, sw = self._rows(rows)
        return self.datafit.loss_sum(self.raw(theta, X, rows), Y, sw) / float(np.sum(sw))

    def value_and_gradient(self, theta, rows=None):
        """Mean loss and its gradient with respect to ``theta`` (on ``rows`` if given)."""
        return self._evaluate(theta, rows, with_value=True)

    def gradient(self, theta, rows=None):
        """Gradient of the mean loss (on ``rows`` if given)."""
        return self._evaluate(theta, rows, with_value=False)[1]

    def _audit(self, X, Z, Y, sw, dZ, with_value, D=None):
        """The dominance rule on what this evaluation releases (at a site service only:
        :mod:`skfed.federation.dominance`): the rows' losses, their gradient terms
        ``x_ij dZ_ik`` and, with ``D``, the Hessian's ``x_ij D_i x_il``."""
        if dominance.active() is None:
            return
        if with_value:
            dominance.check_rows(self.datafit.loss_rows(Z, Y, sw), "the loss")
        if dZ is None:  # a loss coupling the rows: its gradient is still X' (dloss/dZ)
            dZ = self.datafit.raw_gradient(Z, Y, sw)
        if X is self.X:  # the whole design: its audit factor is sorted once
            if self._design_factor is None:
                self._design_factor = dominance.FixedFactor(X)
            X = self._design_factor
        dominance.check_products(X, dZ, what="the gradient")
        if self.layout.fit_intercept:
            dominance.check_rows(dZ, "the gradient")
        if D is not None:
            for k in range(D.shape[1]):
                dominance.check_products(X, X, D[:, k] if D.ndim == 2 else D[:, k, k],
                                         what="the Hessian")
                if self.layout.fit_intercept:
                    dominance.check_rows(D[:, k] if D.ndim == 2 else D[:, k, k],
                                         "the Hessian")

    #: what an evaluation on every row reads, fixed for the client (:meth:`_whole_plan`)
    _plan = None

    def _whole_plan(self):
        """``(X, X', n_coef, coef shape, intercept?, size, one dense output?)``, made at the
        first evaluation on every row: the layout's and the design's fixed facts, read
        once instead of through three calls a local step."""
        lay, X = self.layout, self.X
        XT = self._transposed(X)
        self._plan = (X, XT, lay.n_coef, (lay.n_outputs, lay.n_features), lay.fit_intercept,
                      lay.size, _product_in_place(XT, lay.n_outputs))
        return self._plan

    def _evaluate(self, theta, rows, with_value):
        # a local solver's inner loop calls this thousands of times a round on every row:
        # there, :meth:`raw` and :meth:`_gradient_from_raw` inlined, the same operations
        # in the same order (the same bits), about 4 us less a call
        if rows is not None or self.raw_offset is not None or \
                hasattr(self.datafit, "design_terms"):
            return self._evaluate_rows(theta, rows, with_value)
        X, XT, n_coef, shape, intercept, size, vector = self._plan or self._whole_plan()
        Z = np.asarray(X @ theta[:n_coef].reshape(shape).T, dtype=float)
        if intercept:
            Z += theta[n_coef:]  # Z is this call's own array
        Y, sw, total = self.Y, self.sample_weight, self.weight_sum
        value, dZ = self.datafit.loss_and_raw_gradient(Z, Y, sw, with_value)
        dZ = dZ / total
        if dominance.active() is not None:
            self._audit(X, Z, Y, sw, dZ, with_value)
        return (value / total if with_value else None), _gradient_of(XT, dZ, n_coef, size,
                                                                      intercept, vector)

    def _evaluate_rows(self, theta, rows, with_value):
        """:meth:`_evaluate` on ``rows`` (all when None), with an offset or a loss
        coupling the rows (Cox)."""
        if rows is None:
            X, Y, sw, total = self.X, self.Y, self.sample_weight, self.weight_sum
        else:
            X, Y, sw = self._rows(rows)
            total = float(np.sum(sw))
        Z = self.raw(theta, X, rows)
        datafit = self.datafit
        if hasattr(datafit, "design_terms"):  # a loss coupling the rows (Cox)
            self._audit(X, Z, Y, sw, None, with_value)
            value, grad, _ = datafit.design_terms(X, Z, Y, sw, hessian=False)
            return (value / total if with_value else None), grad / total
        value, dZ = datafit.loss_and_raw_gradient(Z, Y, sw, with_value)
        dZ = dZ / total
        if dominance.active() is not None:
            self._audit(X, Z, Y, sw, dZ, with_value)
        return (value / total if with_value else None), self._gradient_from_raw(X, dZ)

    def _gradient_from_raw(self, X, dZ):
        """``theta``'s gradient from the raw predictions' ``dZ``: ``dZ' X`` per output
        (made as ``(X' dZ)'``, for dense and sparse ``X`` alike), then ``dZ``'s sums."""
        lay, XT = self.layout, self._transposed(X)
        return _gradient_of(XT, dZ, lay.n_coef, lay.size, lay.fit_intercept,
                            _product_in_place(XT, dZ.shape[1]))

    def hessian(self, theta, rows=None):
        """Hessian of the mean loss with respect to ``theta`` (on ``rows`` if given).

        A dense ``(size, size)`` matrix in the layout of ``theta``
        (``[coef.ravel(), intercepts]``). For a quadratic loss it does not
        depend on ``theta`` and is computed once (cached like
        :meth:`normal_equations`).
        """
        return self.value_gradient_hessian(theta, rows, with_value=False)[2]

    def value_gradient_hessian(self, theta, rows=None, with_value=True):
        """Mean loss, gradient and Hessian at ``theta`` from one pass over the rows."""
        constant = self.datafit.quadratic and rows is None
        X, Y, sw = self._rows(rows)
        total = self.weight_sum if rows is None else float(np.sum(sw))
        Z = self.raw(theta, X, rows)
        if hasattr(self.datafit, "design_terms"):  # a loss coupling the rows (Cox)
            self._audit(X, Z, Y, sw, None, with_value, self.datafit.audited_hessian(Z, Y, sw)
                        if dominance.active() is not None else None)
            value, grad, H = self.datafit.design_terms(X, Z, Y, sw, hessian=True)
            return (value / total if with_value else None), grad / total, H / total
        value, dZ = self.datafit.loss_and_raw_gradient(Z, Y, sw, with_value)
        value = value / total if with_value else None
        dZ = dZ / total
        grad = self._gradient_from_raw(X, dZ)
        if constant and getattr(self, "_hessian", None) is not None:
            self._audit(X, Z, Y, sw, dZ, with_value, self.datafit.raw_hessian(Z, Y, sw)
                        if dominance.active() is not None else None)
            return value, grad, self._hessian
        D = self.datafit.raw_hessian(Z, Y, sw) / total
        self._audit(X, Z, Y, sw, dZ, with_value, D)
        H = hessian_from_raw(X, D, self.layout)
        if constant:
            self._hessian = H
        return value, grad, H

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
        if dominance.active() is not None:  # each time they are used for a reply
            X = self.X
            Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
            dominance.check_products(Xd, Xd, self.sample_weight, "the Gram matrix")
            dominance.check_products(Xd, self.Y, self.sample_weight, "X'y")
            if self.layout.fit_intercept:
                dominance.check_rows(np.column_stack([Xd, self.Y, np.ones(len(Xd))])
                                     * self.sample_weight[:, None], "a sum")
        return self._normal

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_normal", None)  # caches, not data: never shipped
        state.pop("_hessian", None)
        state.pop("_design_transpose", None)
        state.pop("_plan", None)  # views of X: never shipped twice
        return state

    def __setstate__(self, state):
        # a transport may hand its arrays over in place, inside a received buffer at any
        # byte offset (Dask's frames); numpy cannot give an unaligned array to BLAS, and
        # its own loops add in another order: the sums would differ from the in-process
        # fit's in their last bits, and run slower. One aligned copy, at placement.
        for name in ("X", "Y", "sample_weight", "offset", "raw_offset"):
            if name in state:
                state[name] = _aligned(state[name])
        self.__dict__.update(state)

    def curvature_matvec(self, v):
        """``curvature * X.T @ diag(sw) @ X @ v / sum(sw)``: the coefficient block of
        the Hessian bound applied to ``v`` (length ``n_features``)."""
        curv = self.datafit.step_curvature
        Xv = self.X @ v
        dominance.check_products(self.X, np.asarray(Xv).reshape(-1, 1), self.sample_weight,
                                 "a curvature product")
        return curv * np.asarray(self.X.T @ (self.sample_weight * Xv)).ravel() / self.weight_sum

    def feature_mean(self):
        """Sample-weighted mean of the rows of ``X``."""
        dominance.check_products(self.X, np.ones((self.X.shape[0], 1)), self.sample_weight,
                                 "a mean")
        return np.asarray(self.X.T @ self.sample_weight).ravel() / self.weight_sum

    def lipschitz(self, exact=True):
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

        ``exact=False`` bounds the top eigenvalue by the trace (the weighted
        mean squared row norm, up to ``n_features`` times too large) from one
        pass over the rows: for solvers that take no step from it (Newton),
        where only the monitor's stationarity measure uses it.
        """
        curv = self.datafit.step_curvature
        if curv is None:
            return {"coef": np.inf, "intercept": np.inf, "joint": 1.0, "row": np.inf}
        X, sw = self.X, self.sample_weight
        with dominance.suspended():  # not released: only the joint factor, in [1, 2]
            mean = self.feature_mean()
        sq = np.asarray(X.multiply(X).sum(axis=1)).ravel() if sp.issparse(X) else np.einsum(
            "ij,ij->i", X, X)
        # released: one number per block (the Gram's top eigenvalue, or the trace bound),
        # between the largest row's weighted squared norm and the trace: audited as the
        # trace (a row dominating it would be that number)
        dominance.check_rows(sw * sq, "a smoothness constant")
        if exact:
            L_coef = curv * _top_eigenvalue_weighted_gram(X, sw) / self.weight_sum
        else:
            L_coef = curv * float(sw @ sq) / self.weight_sum
        L_row = curv * float(np.max(sq)) if X.shape[0] else 0.0
        L_int = curv if self.layout.fit_intercept else 0.0
        joint = 1.0
        if self.layout.fit_intercept:
            joint = joint_factor(curv, mean, L_coef, L_int)
        return {"coef": L_coef, "intercept": L_int, "joint": joint, "row": L_row}


def hessian_from_raw(X, D, layout):
    """``sum_i J_i' D_i J_i`` in the layout of ``theta``, with ``J_i`` the
    Jacobian of the raw predictions ``Z_i`` of sample ``i`` in ``theta``.

    ``D`` is :meth:`Datafit.raw_hessian` (already divided by the weight sum):
    ``(n, K)`` for a diagonal per-sample Hessian, ``(n, K, K)`` for a full
    one. Block ``(k, l)`` of outputs is ``A' diag(D[:, k, l]) A`` with
    ``A = [X, 1]`` (the ones only with an intercept), scattered to the rows
    of ``coef[k]`` / ``intercept[k]`` and the columns of ``coef[l]`` /
    ``intercept[l]``. A few large products rather than one per block: small
    BLAS calls are slow when the machine is shared.
    """
    K, d = layout.n_outputs, layout.n_features
    D = np.asarray(D, dtype=float)
    diagonal = D.ndim == 2  # D[:, k] is block (k, k); no (k, l) blocks

    def weights(k, l):
        return D[:, k] if diagonal else D[:, k, l]

    n = X.shape[0]
    if not sp.issparse(X) and K == 1 and np.all(weights(0, 0) >= 0):
        # one output: the columns of [X, 1] are already in the layout of theta;
        # the intercept's row from column sums (no copy of X with a ones column)
        h, A = weights(0, 0), np.asarray(X)
        H = np.empty((layout.size, layout.size))
        _gram(A, h, out=H[:d, :d])  # written in place: no block assembly copies
        if layout.fit_intercept:
            H[:d, d] = H[d, :d] = A.T @ h
            H[d, d] = h.sum()
        return H
    if layout.fit_intercept:
        A = sp.hstack([X, np.ones((n, 1))], format="csr") if sp.issparse(X) else np.hstack(
            [X, np.ones((n, 1))])
    else:
        A = X
    q = A.shape[1]
    blocks = np.zeros((K, q, K, q))  # output-major: blocks[k, a, l, b]
    if sp.issparse(A):
        for k in range(K):
            for l in ((k,) if diagonal else range(k, K)):
                G = (A.T @ sp.csr_matrix(A.multiply(weights(k, l)[:, None]))).toarray()
                blocks[k, :, l, :] = G
                blocks[l, :, k, :] = G.T
    else:
        # rows in chunks so that the scaled copies stay small
        step = max(1, 2**22 // (K * q))
        for lo in range(0, n, step):
            Ac, Dc = A[lo:lo + step], D[lo:lo + step]
            if diagonal:  # all K diagonal blocks from one product
                scaled = Dc[:, :, None] * Ac[:, None, :]
                R = (Ac.T @ scaled.reshape(len(Ac), K * q)).reshape(q, K, q)
                for k in range(K):
                    blocks[k, :, k, :] += R[:, k, :]
            else:  # blocks (k, l >= k) of row k from one product; the rest by symmetry
                for k in range(K):
                    scaled = Dc[:, k, k:, None] * Ac[:, None, :]
                    blocks[k, :, k:] += (Ac.T @ scaled.reshape(len(Ac), (K - k) * q)).reshape(
                        q, K - k, q)
                for k in range(K):
                    for l in range(k):
                        blocks[k, :, l, :] = blocks[l, :, k, :].T
    # theta index -> output-major index: coef[k, a] -> (k, a), intercept[k] -> (k, d)
    order = np.arange(K * q).reshape(K, q)
    perm = np.concatenate([order[:, :d].ravel(), order[:, d] if layout.fit_intercept
                           else np.array([], dtype=int)])
    flat = blocks.reshape(K * q, K * q)
    return flat[np.ix_(perm, perm)]


def _gram(A, h, out=None):
    """``A' diag(h) A`` for ``h >= 0``: a symmetric rank-k update on the
    ``sqrt(h)``-scaled rows (half the flops of a product), written into
    ``out`` (a ``(p, p)`` array or view) when given."""
    p = A.shape[1]
    out = np.empty((p, p)) if out is None else out
    if min(A.shape) == 0:
        out[...] = 0.0
        return out
    from scipy.linalg.blas import dsyrk

    if h.size and np.all(h == h[0]) and A.flags.c_contiguous and A.dtype == np.float64:
        upper = dsyrk(float(h[0]), A.T, trans=0, lower=0)  # equal weights: no scaled copy
    else:
        B = np.multiply(A, np.sqrt(h)[:, None])  # C-ordered, so B.T is Fortran-ordered
        upper = dsyrk(1.0, B.T, trans=0, lower=0)  # the strict lower triangle is zero
    # the full matrix from the upper triangle (the lower one is exactly its mirror)
    np.add(upper, upper.T, out=out)
    out[np.diag_indices(p)] = np.diagonal(upper)
    return out


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
        root = np.sqrt(sw)[:, None]
        A = X.multiply(root).tocsr() if sp.issparse(X) else X * root
        G = A @ A.T if n <= d else A.T @ A
        G = G.toarray() if sp.issparse(G) else np.asarray(G)
        return float(np.linalg.eigvalsh(G)[-1])
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((d, d), matvec=lambda v: X.T @ (sw * (X @ v)), dtype=float)
    val = eigsh(op, k=1, which="LA", tol=1e-6, return_eigenvectors=False)[0]
    return float(val) * 1.001  # Lanczos converges from below; keep the bound safe
