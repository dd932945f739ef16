"""Logistic losses: binary (labels +-1, one output) and multinomial (one-hot, K outputs)."""

import numpy as np
from scipy.special import expit

from .base import Datafit


class Logistic(Datafit):
    """Binary logistic loss ``log(1 + exp(-y z))`` with ``y`` in {-1, +1}.

    With the client mean and ``psi = ||w||^2 / (2 C n)`` this is scikit-learn's
    ``LogisticRegression`` objective divided by ``C n``.
    """

    smooth = True
    #: the second derivative of log(1 + exp(-yz)) is sigma(1 - sigma) <= 1/4
    curvature = 0.25
    target_kind = "binary"

    def loss_sum(self, Z, Y, sw):
        return float(np.sum(sw[:, None] * np.logaddexp(0.0, -Y * Z)))

    def loss_rows(self, Z, Y, sw):
        return sw * np.logaddexp(0.0, -Y * Z).sum(axis=1)

    def raw_gradient(self, Z, Y, sw):
        return -Y * expit(-Y * Z) * sw[:, None]

    def raw_hessian(self, Z, Y, sw):
        s = expit(Z)
        return s * (1.0 - s) * sw[:, None]


class Multinomial(Datafit):
    """Multinomial (softmax) cross-entropy ``logsumexp(z) - z_y``; ``Y`` one-hot.

    Invariant to adding a constant to every class's raw prediction: only the
    penalty makes the coefficients identifiable, and the intercepts are
    identified up to a common shift (estimators centre them).
    """

    separable_outputs = False
    smooth = True
    #: the Hessian in z is diag(p) - p p^T, whose top eigenvalue is <= 1/2
    curvature = 0.5
    target_kind = "multiclass"

    def loss_sum(self, Z, Y, sw):
        return float(sw @ _cross_entropy(Z, Y))

    def loss_rows(self, Z, Y, sw):
        return sw * _cross_entropy(Z, Y)

    def raw_gradient(self, Z, Y, sw):
        return self.loss_and_raw_gradient(Z, Y, sw, with_value=False)[1]

    def loss_and_raw_gradient(self, Z, Y, sw, with_value=True):
        log_norm, P = _softmax_parts(Z)
        value = float(sw @ _cross_entropy(Z, Y, log_norm)) if with_value else None
        P -= Y
        P *= sw[:, None]
        return value, P

    def raw_hessian(self, Z, Y, sw):
        # diag(p) - p p^T per sample: (n, K, K)
        P = _softmax_parts(Z)[1]
        H = -P[:, :, None] * P[:, None, :]
        idx = np.arange(P.shape[1])
        H[:, idx, idx] += P
        return H * sw[:, None, None]


def _softmax_parts(Z, with_probabilities=True):
    """Each row's ``logsumexp`` and (``with_probabilities``) its softmax, from one
    shifted exponential. Plain numpy: scipy.special's array-API layer costs about
    five times the arithmetic on a client's few hundred rows, once per local step."""
    shift = Z.max(axis=1, keepdims=True)
    E = np.exp(Z - shift)
    norm = E @ np.ones(E.shape[1])  # a product: numpy's sum along short rows is slower
    log_norm = shift.ravel() + np.log(norm)
    if not with_probabilities:
        return log_norm, None
    E /= norm[:, None]
    return log_norm, E


def _cross_entropy(Z, Y, log_norm=None):
    """Each row's ``logsumexp(z) - z_y`` (``Y`` one-hot; ``log_norm`` the rows'
    ``logsumexp`` when already made)."""
    if log_norm is None:
        log_norm = _softmax_parts(Z, with_probabilities=False)[0]
    return log_norm - np.einsum("ij,ij->i", Z, Y)
