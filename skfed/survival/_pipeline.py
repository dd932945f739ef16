"""A scikit-learn Pipeline ending in a Cox model that predicts survival curves too."""

from sklearn.pipeline import Pipeline


class SurvivalPipeline(Pipeline):
    """A :class:`sklearn.pipeline.Pipeline` whose last step is a
    :class:`~skfed.survival.FedCoxPH`, with the model's survival predictions.

    scikit-learn's Pipeline forwards ``predict``, ``score`` and the like to
    its last step but knows nothing of survival curves; this one transforms
    the rows with its first steps and hands them to the model's
    :meth:`~skfed.survival.FedCoxPH.predict_survival_function` and
    :meth:`~skfed.survival.FedCoxPH.predict_cumulative_hazard`
    (scikit-survival adds the same methods to its pipelines). ``skfed fit
    --model cox --output`` saves one.

    Parameters
    ----------
    steps : list of (name, estimator) tuples
        As :class:`~sklearn.pipeline.Pipeline`'s; the last one a fitted or
        unfitted Cox model.
    transform_input : list of str, default=None
    memory : str or object, default=None
    verbose : bool, default=False
    """

    def _transformed(self, X):
        """``X`` through every step but the last."""
        for _, _, transformer in self._iter(with_final=False):
            X = transformer.transform(X)
        return X

    def predict_cumulative_hazard(self, X, times=None, strata=None):
        """Each row's cumulative hazard at ``times``, after the pipeline's steps.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_columns)
            Rows as the first step takes them.
        times : array-like of shape (n_times,), default=None
        strata : array-like of shape (n_samples,), default=None
            Each row's stratum when the model has several (the site with
            ``strata="site"``).

        Returns
        -------
        cumulative_hazard : ndarray of shape (n_samples, n_times)
        """
        return self.steps[-1][1].predict_cumulative_hazard(self._transformed(X), times,
                                                            strata)

    def predict_survival_function(self, X, times=None, strata=None):
        """Each row's survival probability at ``times``, after the pipeline's steps.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_columns)
            Rows as the first step takes them.
        times : array-like of shape (n_times,), default=None
        strata : array-like of shape (n_samples,), default=None
            Each row's stratum when the model has several (the site with
            ``strata="site"``).

        Returns
        -------
        survival : ndarray of shape (n_samples, n_times)
        """
        return self.steps[-1][1].predict_survival_function(self._transformed(X), times, strata)
