"""What federated linear classifiers share: classes found client by client,
class weights, targets encoded for the loss, decision function and predict."""

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ..federation.layout import Layout
from .._messages import show
from ..base import FederatedLinearModel, SiteScoreMixin, fit_all_or_nothing, sites_aware
from ..data.site import Targets


class FederatedLinearClassifier(SiteScoreMixin, ClassifierMixin, FederatedLinearModel):
    """Fit/predict shared by FedLogisticRegression and FedLinearSVC.

    Subclasses define ``_datafit(n_classes)``, ``_penalty(total_weight)`` and
    ``_target_kind(n_classes)`` (how a site encodes its labels for the loss:
    see :class:`skfed.data.site.Targets`).
    """

    @fit_all_or_nothing
    def fit(self, X, y=None, clients=None, sample_weight=None):
        """Fit the classifier on data held by several clients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or FederatedDataset
            The rows, or a :class:`~skfed.data.FederatedDataset` (which
            carries the labels, the sites and the weights: then leave
            ``y``, ``clients`` and ``sample_weight`` unset).
        y : array-like of shape (n_samples,)
            Class labels. A client may hold any subset of the classes.
        clients : array-like of shape (n_samples,), default=None
            The client (site) holding each row; any hashable labels.
            ``None``: all rows form one client and the fit is centralized
            (``n_clients_ == 1``); pass ``clients=site`` to federate. The
            name is ``clients``, not ``groups``: a ``GridSearchCV`` with
            ``GroupKFold`` needs both, ``search.fit(X, y, groups=site,
            clients=site)``.
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplied by the class weights.

        Returns
        -------
        self : object
        """
        self._validate_params()

        def validate(X, y):
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64)
            check_classification_targets(y)
            return X, y

        dataset = self._dataset(X, y, clients, sample_weight, validate=validate)
        # each site sends its labels with their counts and weight sums (no rows)
        summaries = self._site_setup(dataset, "classification")
        self.classes_ = np.unique(np.concatenate([s["classes"] for s in summaries]))
        n_classes = len(self.classes_)
        if n_classes < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                f"got 1 class: all clients together hold only {show(self.classes_[0])}."
            )
        counts = np.zeros(n_classes, dtype=np.int64)
        weight_sums = np.zeros(n_classes)
        for s in summaries:
            where = np.searchsorted(self.classes_, s["classes"])
            counts[where] += s["class_counts"]
            weight_sums[where] += s["class_weight_sums"]
        class_weight = None
        if self.class_weight is not None:
            # the pooled label multiset, rebuilt from the counts, is all this needs
            class_weight = compute_class_weight(self.class_weight, classes=self.classes_,
                                                y=np.repeat(self.classes_, counts))
        total_weight = float(np.sum(weight_sums * (1.0 if class_weight is None else class_weight)))
        targets = Targets(kind=self._target_kind(n_classes), classes=self.classes_,
                          class_weight=class_weight)
        layout = Layout(n_outputs=1 if n_classes == 2 else n_classes,
                        n_features=self.n_features_in_, fit_intercept=self.fit_intercept)
        theta = self._fit_federated(dataset, datafit=self._datafit(n_classes),
                                    penalty=self._penalty(total_weight), layout=layout,
                                    targets=targets)
        self.coef_ = layout.coef(theta).copy()
        intercept = layout.intercept(theta).copy()
        if layout.n_outputs > 1 and self._shift_invariant:
            # softmax ignores a common shift of the intercepts: report the centred ones
            intercept -= intercept.mean()
        self.intercept_ = intercept
        return self

    _shift_invariant = False

    @sites_aware
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

    @sites_aware
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
