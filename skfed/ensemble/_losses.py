"""The losses of scikit-learn's histogram boosting, and their baselines from pooled sums.

The sites compute gradients, hessians and losses with scikit-learn's own loss
objects (:mod:`sklearn._loss`), in the same float32 / float64 arithmetic as
``HistGradientBoosting*``; the server turns pooled sums into the baseline
prediction with the same object (``fit_intercept_only``), fed with one value
(the pooled mean) or, for several classes, the pooled class weights.
"""

import numpy as np
from sklearn._loss.loss import (AbsoluteError, HalfBinomialLoss, HalfGammaLoss,
                                HalfMultinomialLoss, HalfPoissonLoss, HalfSquaredError,
                                PinballLoss)

from ..federation import dominance, whole_counts

#: the regressor's losses (scikit-learn 1.9's names)
REGRESSION_LOSSES = ("squared_error", "absolute_error", "gamma", "poisson", "quantile")
#: losses whose leaves are refitted to a quantile of the residuals
QUANTILE_LOSSES = ("absolute_error", "quantile")


def make_loss(name, *, n_classes=None, quantile=None, weighted=False):
    """The scikit-learn loss object of a fit.

    ``weighted`` says whether the fit has sample weights (constant hessians
    only without them, as in scikit-learn).
    """
    sample_weight = np.ones(1) if weighted else None
    if name == "log_loss":
        if n_classes <= 2:
            return HalfBinomialLoss(sample_weight=sample_weight)
        return HalfMultinomialLoss(sample_weight=sample_weight, n_classes=n_classes)
    if name == "quantile":
        return PinballLoss(sample_weight=sample_weight, quantile=quantile)
    losses = {"squared_error": HalfSquaredError, "absolute_error": AbsoluteError,
              "gamma": HalfGammaLoss, "poisson": HalfPoissonLoss}
    return losses[name](sample_weight=sample_weight)


def baseline_from_sums(loss, totals):
    """The baseline raw prediction, shape (1, n_trees_per_iteration).

    ``totals`` holds the pooled ``w`` (sum of weights) and ``wy`` (sum of
    weighted targets), or ``class_w`` (weights per class) for several classes.
    """
    if isinstance(loss, HalfMultinomialLoss):
        k = len(totals["class_w"])
        return loss.fit_intercept_only(y_true=np.arange(k, dtype=np.float64),
                                       sample_weight=np.asarray(totals["class_w"],
                                                                dtype=np.float64)
                                       ).reshape((1, -1))
    wy = totals["wy"] if "wy" in totals else totals["class_w"][1:].sum()  # codes 0 / 1
    mean = np.asarray([wy / totals["w"]], dtype=np.float64)
    return np.asarray(loss.fit_intercept_only(y_true=mean)).reshape((1, -1))


def gradients(loss, y, raw, sample_weight):
    """Per-row gradients and hessians in float32 (hessians ``None`` when constant).

    ``raw`` has shape (n_samples, n_trees_per_iteration), as scikit-learn's
    raw predictions during fit.
    """
    gradient, hessian = loss.init_gradient_and_hessian(n_samples=raw.shape[0],
                                                       dtype=np.float32, order="F")
    if loss.constant_hessian:
        loss.gradient(y_true=y, raw_prediction=raw, sample_weight=sample_weight,
                      gradient_out=gradient)
        return gradient.reshape(raw.shape[0], -1), None
    loss.gradient_hessian(y_true=y, raw_prediction=raw, sample_weight=sample_weight,
                          gradient_out=gradient, hessian_out=hessian)
    return gradient.reshape(raw.shape[0], -1), hessian.reshape(raw.shape[0], -1)


def row_bounds_of(loss, weighted):
    """The public per-row bounds of a node histogram's fields under a loss (``{field:
    bound}``), what a masked histogram's words are sized from: a row counts once; the
    gradients and hessians of scikit-learn's binomial and multinomial losses, ``p - y``
    and ``p (1 - p)``, are at most 1 and 1/4, absolute error's and quantile's at most 1
    (their hessians constant, not sent); none for squared error, Poisson or gamma
    (unbounded gradients). ``{}`` under weights: the public sum the bounds multiply is
    then the rows' weight sum, not their count (sample and class weights scale the
    gradients)."""
    if weighted:
        return {}
    if isinstance(loss, (HalfBinomialLoss, HalfMultinomialLoss)):
        return {"counts": 1.0, "gradients": 1.0, "hessians": 0.25}
    if isinstance(loss, (AbsoluteError, PinballLoss)):
        return {"counts": 1.0, "gradients": 1.0}
    return {"counts": 1.0}


def loss_sums(loss, y, raw, sample_weight):
    """``{"loss": sum w * loss, "weight": sum w}`` over a site's rows."""
    per_row = loss.loss(y_true=y, raw_prediction=raw, sample_weight=None)
    dominance.check_rows(per_row if sample_weight is None else per_row * sample_weight,
                         "a loss")
    # numpy's pairwise sums (on an engine: of all the partitions' terms, as one array);
    # a weighted loss is a BLAS dot product (on an engine: to round-off)
    if sample_weight is None:
        return {"loss": whole_counts.pairwise_sum("loss", per_row),
                "weight": float(len(per_row))}
    return {"loss": float(per_row @ sample_weight),
            "weight": whole_counts.pairwise_sum("weight", sample_weight)}
