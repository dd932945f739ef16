"""``gee``: statsmodels' ``smf.gee`` formula fit, over the sites (:class:`~skfed.gee.FedGEE`).

The formula's design is built at each site (:mod:`skfed.formula._build`), the
cluster and time columns kept beside it; the estimates carry the design's names
(``Intercept``, ``C(sex)[T.M]``) and the summary the response's.
"""

import pandas as pd

from .._messages import show
from ..gee import FedGEE, GEEResults
from ..gee._site import COV_STRUCTS
from ._build import numeric_expression
from ._errors import FormulaError
from ._models import _build, _schema, formula_dataset
from ._parse import parse_formula
from ._results import design_rows, design_terms

#: statsmodels' family and link classes, by name, as skfed's
_FAMILIES = {"Gaussian": "gaussian", "Binomial": "binomial", "Poisson": "poisson",
             "Gamma": "gamma"}
_LINKS = {"Identity": "identity", "Log": "log", "Logit": "logit",
          "InversePower": "inverse_power"}
_STRUCTS = {"Independence": "independence", "Exchangeable": "exchangeable",
            "Autoregressive": "autoregressive"}


class GEEFormulaResults(GEEResults):
    """statsmodels' ``GEEResults`` of :func:`skfed.formula.gee`, with the formula, its
    design and terms, and ``predict`` from rows in the formula's variables."""

    @classmethod
    def of(cls, results, *, formula, estimator, design, rows_by_site):
        out = cls.__new__(cls)
        out.__dict__.update(results.__dict__)
        out.formula, out.estimator, out.design = formula, estimator, design
        out.rows_by_site = rows_by_site
        out.term_structure = design_terms(design)
        return out

    def predict(self, data):
        """The marginal mean of new rows (a DataFrame in the formula's variables).

        Parameters
        ----------
        data : pandas.DataFrame
            Rows missing a value the formula uses are left out (their index too).

        Returns
        -------
        pandas.Series
        """
        X, index, _ = design_rows(self.design, data)
        return pd.Series(self.estimator.predict(X), index=index)


def _family(family, link):
    """``(family, link)`` names from skfed's names or statsmodels' objects."""
    if not isinstance(family, str):
        name = _FAMILIES.get(type(family).__name__)
        if name is None:
            raise FormulaError(f"family={show(family)}: one of {', '.join(_FAMILIES)} "
                               "(statsmodels' families) or their names.")
        if link is None:
            link = _LINKS.get(type(getattr(family, "link", None)).__name__, "?")
            if link == "?":
                raise FormulaError(f"family's link {type(family.link).__name__} is not one "
                                   f"of skfed's ({', '.join(_LINKS)}).")
        family = name
    return family, link


def _cov_struct(cov_struct):
    """``(name, grid)`` from skfed's names or statsmodels' objects."""
    if cov_struct is None:
        return "independence", False
    if isinstance(cov_struct, str):
        return cov_struct, False
    name = _STRUCTS.get(type(cov_struct).__name__)
    if name is None:
        raise FormulaError(f"unknown cov_struct={show(cov_struct)}; FedGEE's working "
                           f"correlations are {', '.join(COV_STRUCTS)}.")
    return name, bool(getattr(cov_struct, "grid", False))


def gee(formula, data, *, groups, time=None, family="gaussian", link=None, cov_struct=None,
        cov_type="robust", clients=None, min_level_count=5, maxiter=60, ctol=1e-6,
        privacy=None):
    """Fit a GEE from a formula over the sites: ``statsmodels.formula.api.gee(formula,
    groups, data, time=..., family=..., cov_struct=...)`` on the pooled rows, exactly
    (:class:`~skfed.gee.FedGEE`).

    Parameters
    ----------
    formula : str
        ``"seizures ~ age + C(treatment)"``.
    data : pandas.DataFrame or FederatedDataset
    groups : str
        The cluster column (a patient), each cluster at one site.
    time : str, default=None
        AR(1): the time column (whole numbers); ``None``: the rows' order.
    family : str or statsmodels family, default="gaussian"
        ``"gaussian"``, ``"binomial"``, ``"poisson"``, ``"gamma"`` or statsmodels'
        ``Gaussian()``... (with its link).
    link : str, default=None
        The family's default (statsmodels'), or ``"log"``, ``"identity"``.
    cov_struct : str or statsmodels covariance structure, default=None
        ``"independence"`` (``None``), ``"exchangeable"``, ``"autoregressive"``, or
        statsmodels' ``Independence()``, ``Exchangeable()``,
        ``Autoregressive(grid=...)``.
    cov_type : {"robust", "naive"}, default="robust"
    clients : str or array-like, default=None
        With a DataFrame: the column, or the labels, of each row's site.
    min_level_count : int, default=5
    maxiter : int, default=60
    ctol : float, default=1e-6
    privacy : None or SecureAggregation, default=None

    Returns
    -------
    GEEFormulaResults
        statsmodels' names (``params``, ``bse``, ``cov_robust``, ``cov_naive``,
        ``dep_params``, ``scale``, ``conf_int()``, ``summary()``), with the fitted
        ``estimator`` and the ``design``.
    """
    parsed = parse_formula(formula)
    if len(parsed.lhs) != 1:
        raise FormulaError(f"a GEE's formula has one response: {formula!r}.")
    if not isinstance(groups, str) or (time is not None and not isinstance(time, str)):
        raise FormulaError("groups (and time) name columns of the data (they stay at the "
                           "sites).")
    family, link = _family(family, link)
    struct, grid = _cov_struct(cov_struct)
    dataset, _, _, _ = formula_dataset(data, clients)
    response = {"kind": "numeric", "expr": numeric_expression(parsed.lhs[0], parsed.lhs[0],
                                                                _schema(dataset))}
    # a time column that is also a term (``y ~ visit``) is a design column already
    time_feature = time is not None and (time,) in parsed.terms
    keep = [groups] + ([time] if time is not None and not time_feature else [])
    design, rows, design_data, _ = _build(parsed, dataset, parsed.terms, response,
                                          keep=keep, min_level_count=min_level_count)
    # the design's own Intercept column: no intercept of the estimator's
    estimator = FedGEE(family, link=link, cov_struct=struct, grid=grid, fit_intercept=False,
                       cov_type=cov_type, maxiter=maxiter, ctol=ctol, privacy=privacy)
    estimator._fit(design_data, None, None, groups, time, time_feature=time_feature)
    results = GEEFormulaResults.of(estimator.results_, formula=formula, estimator=estimator,
                                   design=design, rows_by_site=rows)
    results.endog_name = str(parsed.lhs[0])  # the response's name in the summary
    return results
