"""The results of a GEE fit: estimates, robust and model-based covariances, the table."""

import numpy as np
import pandas as pd

from ..datafits.links import ratio_measure
from ..stats._results import Estimates, LabelledResults

COV_TYPES = ("robust", "naive")
_STRUCT_NAMES = {"independence": "Independence", "exchangeable": "Exchangeable",
                 "autoregressive": "Autoregressive"}


class GEEResults(LabelledResults):
    """A fitted GEE, statsmodels' ``GEEResults`` names: ``params``, ``bse`` (of
    ``cov_type``), ``cov_robust``, ``cov_naive``, ``scale``, ``dep_params``,
    ``conf_int()``, ``summary()``, ``wald_test()``.

    Parameters
    ----------
    params : pandas.Series
    cov_robust, cov_naive : ndarray of shape (n_params, n_params)
    scale : float
    dep_params : float
        The working correlation's parameter (0 for independence).
    cov_struct, family, link : str
    cov_type : {"robust", "naive"}
    endog_name : str
    clusters : dict
        ``n_clusters``, ``nobs``, ``min_size`` and ``max_size`` (the sites' counts).
    converged : bool
    score_norm : float
    n_iter : int
    """

    _summary_title = "GEE Regression Results"

    def __init__(self, params, cov_robust, cov_naive, *, scale, dep_params, cov_struct,
                 family, link, cov_type, endog_name, clusters, converged, score_norm,
                 n_iter, privacy="none"):
        self.params = params
        names = list(params.index)
        self.cov_robust = pd.DataFrame(cov_robust, index=names, columns=names)
        self.cov_naive = pd.DataFrame(cov_naive, index=names, columns=names)
        self.scale, self.dep_params = float(scale), float(dep_params)
        self.cov_struct, self.family, self.link = cov_struct, family, link
        self.cov_type, self.endog_name = cov_type, endog_name
        self.n_clusters = int(clusters["n_clusters"])
        self.min_cluster_size = int(clusters["min_size"])
        self.max_cluster_size = int(clusters["max_size"])
        self.converged, self.score_norm, self.n_iter = converged, score_norm, n_iter
        self.nobs = int(clusters["nobs"])
        self.privacy = privacy

    def _estimates(self):
        cov = self.cov_robust if self.cov_type == "robust" else self.cov_naive
        return Estimates(self.params.to_numpy(), cov.to_numpy(), list(self.params.index))

    def _measure(self):
        return ratio_measure(self.link, self.family)

    def cov_params(self):
        """The covariance of the estimates of ``cov_type``.

        Returns
        -------
        cov : pandas.DataFrame
            The robust (sandwich) or the naive (model-based) covariance, as
            ``cov_type`` says, labelled by the parameters.
        """
        return self.cov_robust if self.cov_type == "robust" else self.cov_naive

    def standard_errors(self, cov_type="robust"):
        """Standard errors of either kind (statsmodels' ``standard_errors``).

        Parameters
        ----------
        cov_type : {"robust", "naive"}, default="robust"

        Returns
        -------
        pandas.Series
        """
        if cov_type not in COV_TYPES:
            raise ValueError(f"cov_type must be one of {COV_TYPES}; got {cov_type!r}.")
        cov = self.cov_robust if cov_type == "robust" else self.cov_naive
        return pd.Series(np.sqrt(np.diag(cov.to_numpy())), index=self.params.index)

    @property
    def bse(self):
        """Standard errors of ``cov_type`` (``pandas.Series``)."""
        return self.standard_errors(self.cov_type)

    @property
    def bse_naive(self):
        """The model-based standard errors (``pandas.Series``)."""
        return self.standard_errors("naive")

    def _summary_info(self):
        info = {"Dependent Variable:": self.endog_name, "Model:": "GEE",
                "Family:": self.family.capitalize(), "Link:": self.link,
                "Dependence structure:": _STRUCT_NAMES[self.cov_struct],
                "No. Observations:": str(self.nobs), "No. clusters:": str(self.n_clusters),
                "Min. cluster size:": str(self.min_cluster_size),
                "Max. cluster size:": str(self.max_cluster_size),
                "Mean cluster size:": f"{self.nobs / self.n_clusters:.1f}",
                "Covariance type:": self.cov_type, "Scale:": f"{self.scale:.4f}"}
        if self.cov_struct != "independence":
            info["Dependence parameter:"] = f"{self.dep_params:.4f}"
        if self.privacy != "none":
            info["Sums:"] = self.privacy
        return info
