"""Logistic losses: binary (labels +-1, one output) and multinomial (one-hot, K outputs)."""

import numpy as np
from scipy.special import expit, logsumexp, softmax

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
        return float(np.sum(sw * (logsumexp(Z, axis=1) - np.einsum("ij,ij->i", Z, Y))))

    def loss_rows(self, Z, Y, sw):
        return sw * (logsumexp(Z, axis=1) - np.einsum("ij,ij->i", Z, Y))

    def raw_gradient(self, Z, Y, sw):
        return (softmax(Z, axis=1) - Y) * sw[:, None]

    def raw_hessian(self, Z, Y, sw):
        # diag(p) - p p^T per sample: (n, K, K)
        P = softmax(Z, axis=1)
        H = -P[:, :, None] * P[:, None, :]
        idx = np.arange(P.shape[1])
        H[:, idx, idx] += P
        return H * sw[:, None, None]
