"""What federated linear classifiers share: classes found client by client,
class weights, targets encoded for the loss, decision function and predict."""

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from ._clients import group_clients
from ._layout import Layout
from .base import FederatedLinearModel, fit_all_or_nothing


def binary_targets(y_index):
    """``+1`` for ``classes_[1]``, ``-1`` for ``classes_[0]``, as one output column."""
    return np.where(y_index == 1, 1.0, -1.0)[:, None]


def union_of_client_classes(y, clients):
    """Sorted union of the label sets each client reports (no pooling needed:
    a client sends its distinct labels once; a client may hold only some)."""
    _, indices = group_clients(clients, len(y))
    return np.unique(np.concatenate([np.unique(y[idx]) for idx in indices]))


class FederatedLinearClassifier(ClassifierMixin, FederatedLinearModel):
    """Fit/predict shared by FedLogisticRegression and FedLinearSVC.

    Subclasses define ``_datafit(n_classes)``, ``_penalty(total_weight)`` and
    ``_encode(y_index, n_classes)`` (targets for the loss, ``(n, n_outputs)``).
    """

    @fit_all_or_nothing
    def fit(self, X, y, clients=None, sample_weight=None):
        """Fit the classifier on data held by several clients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels. A client may hold any subset of the classes.
        clients : array-like of shape (n_samples,), default=None
            The client (site) holding each row; ``None`` means one client.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplied by the class weights.

        Returns
        -------
        self : object
        """
        self._validate_params()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = union_of_client_classes(y, clients)
        n_classes = len(self.classes_)
        if n_classes < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                f"got 1 class: all clients together hold only {self.classes_[0]!r}."
            )
        y_index = np.searchsorted(self.classes_, y)
        sw = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if self.class_weight is not None:
            # class counts are a summary each client can send (no rows move)
            weights = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
            sw = sw * weights[y_index]
        Y = self._encode(y_index, n_classes)
        layout = Layout(n_outputs=Y.shape[1], n_features=X.shape[1],
                        fit_intercept=self.fit_intercept)
        theta = self._fit_federated(X, Y, clients=clients, sample_weight=sw,
                                    datafit=self._datafit(n_classes),
                                    penalty=self._penalty(float(sw.sum())), layout=layout)
        self.coef_ = layout.coef(theta).copy()
        intercept = layout.intercept(theta).copy()
        if Y.shape[1] > 1 and self._shift_invariant:
            # softmax ignores a common shift of the intercepts: report the centred ones
            intercept -= intercept.mean()
        self.intercept_ = intercept
        return self

    _shift_invariant = False

    def decision_function(self, X):
        """Raw scores ``X @ coef_.T + intercept_``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            One column (the score of ``classes_[1]``) for binary problems.
        """
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        scores = np.asarray(X @ self.coef_.T) + self.intercept_
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, X):
        """Predict class labels.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        scores = self.decision_function(X)
        index = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[index]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
