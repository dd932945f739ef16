"""``two_stage``: a formula's two-stage analysis, each site's own least squares pooled.

Stage one: every site builds the formula's design from the declared term list
(as :func:`~skfed.formula.glm` does, levels from the sites) and fits its own
least-squares model of the response on it, releasing its coefficients and
their covariance (the site operation ``mixed.site_fit``). Stage two: each
coefficient is pooled over the sites by a fixed- and random-effects
meta-analysis (:func:`skfed.stats.meta_analysis`): DataSHIELD's
``ds.lmerSLMA``, with statsmodels' names.
"""

from ._build import numeric_expression
from ._errors import FormulaError
from ._models import _build, _schema, formula_dataset
from ._parse import parse_formula


class TwoStageResults(dict):
    """``{coefficient name: MetaAnalysisResult}`` in the design's order (statsmodels'
    names), with what the fit used.

    Attributes
    ----------
    formula : str
    design : dict
        The declared term list the sites built their designs from.
    rows_by_site : pandas.Series
        Each site's complete rows (its stage-one fit's rows).
    """

    def __init__(self, results, *, formula, design, rows_by_site):
        super().__init__(results)
        self.formula, self.design, self.rows_by_site = formula, design, rows_by_site

    def __repr__(self):
        return (f"TwoStageResults({self.formula!r}: {len(self)} coefficients over "
                f"{len(self.rows_by_site)} sites)")


def two_stage(formula, data, *, clients=None, method="reml", alpha=0.05, min_level_count=5):
    """Each site's own least-squares fit of a formula, pooled per coefficient.

    Parameters
    ----------
    formula : str
        ``"y ~ age + C(sex)"`` (statsmodels' formula; a numeric response).
    data : pandas.DataFrame or FederatedDataset
        A dataset without a target: the formula names its columns.
    clients : str or array-like, default=None
        With a DataFrame: the column, or the labels, of each row's site.
    method : {"reml", "ml", "dl", "pm"}, default="reml"
        The between-site variance (:func:`skfed.stats.meta_analysis`).
    alpha : float, default=0.05
    min_level_count : int, default=5
        The fewest rows a factor's level holds at a site to be a level.

    Returns
    -------
    results : TwoStageResults
        ``{name: MetaAnalysisResult}``, one per column of the design.

    Raises
    ------
    FormulaError
        The formula has no single numeric response.
    """
    from ..mixed import two_stage as pooled_least_squares

    parsed = parse_formula(formula)
    if len(parsed.lhs) != 1 or parsed.lhs[0].replace(" ", "").startswith("Surv("):
        raise FormulaError(f"a two-stage analysis pools least-squares fits: its formula has "
                           f"one numeric response, 'y ~ ...'; got {formula!r}.")
    dataset = formula_dataset(data, clients)[0]
    response = {"kind": "numeric",
                "expr": numeric_expression(parsed.lhs[0], parsed.lhs[0], _schema(dataset))}
    design, rows, design_data, _ = _build(parsed, dataset, parsed.terms, response,
                                          min_level_count=min_level_count)
    results, _ = pooled_least_squares(design_data, fit_intercept=False, method=method,
                                      alpha=alpha)
    return TwoStageResults(results, formula=formula, design=design, rows_by_site=rows)
