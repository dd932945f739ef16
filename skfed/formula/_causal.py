"""``ipw`` and ``aipw``: a causal analysis from formulas, over the sites.

``ipw("wt82_71 ~ qsmk", data, ps="qsmk ~ C(sex) + age + I(age**2) + ...")``: the
outcome formula names the outcome and the treatment, the propensity formula the
treatment and the propensity model's terms (statsmodels' design: treatment coding,
transforms, B-splines). Every site keeps its complete rows and builds the design
(:mod:`skfed.formula._design`), the treatment kept beside it; then
:class:`~skfed.causal.FedIPW` or :class:`~skfed.causal.FedAIPW` is fitted on it, its
covariates the design's columns (the intercept its own).
"""

import re

from ..causal import FedAIPW, FedIPW
from ._build import numeric_expression
from ._errors import FormulaError
from ._models import _build, _schema, formula_dataset
from ._parse import parse_formula

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _sides(formula, ps):
    """``(outcome text, treatment column, parsed propensity formula)``."""
    if not isinstance(formula, str) or formula.count("~") != 1:
        raise FormulaError(f"the outcome formula is 'outcome ~ treatment'; got {formula!r}.")
    outcome, treatment = (side.strip() for side in formula.split("~"))
    if not outcome or not _NAME.match(treatment):
        raise FormulaError("the outcome formula is 'outcome ~ treatment', its right-hand "
                           f"side one column (the 0/1 treatment); got {formula!r}.")
    parsed = parse_formula(ps)
    if [t.strip() for t in parsed.lhs] != [treatment]:
        raise FormulaError(f"the propensity formula's left-hand side is the treatment "
                           f"({treatment!r}): 'treatment ~ covariates'; got {ps!r}.")
    return outcome, treatment, parsed


def _fit(estimator, formula, data, ps, clients, min_level_count):
    outcome, treatment, parsed = _sides(formula, ps)
    dataset = formula_dataset(data, clients)[0]
    kinds = _schema(dataset)
    if treatment not in kinds:
        raise FormulaError(f"the treatment {treatment!r} is not a column of the data.")
    response = {"kind": "numeric", "expr": numeric_expression(outcome, outcome, kinds)}
    design, _, rows, _ = _build(parsed, dataset, parsed.terms, response, keep=[treatment],
                                min_level_count=min_level_count)
    names = [c["name"] for c in design["columns"] if c["name"] != "Intercept"]
    if not names:
        raise FormulaError("the propensity formula has no covariate.")
    estimator.fit(rows, treatment=treatment, covariates=names)
    estimator.design_ = design
    return estimator


def ipw(formula, data, *, ps, estimand="ATE", clients=None, min_level_count=5, **options):
    """Inverse probability weighting from formulas: :class:`~skfed.causal.FedIPW` on the
    propensity formula's design.

    Parameters
    ----------
    formula : str
        ``"outcome ~ treatment"`` (the treatment a 0/1 column; the outcome a column or
        a numeric expression).
    data : pandas.DataFrame or FederatedDataset
        A DataFrame is split into sites by ``clients``; a FederatedDataset's sites hold
        tables with every column the formulas name (no ``target=``).
    ps : str
        The propensity model: ``"treatment ~ age + I(age**2) + C(sex) + bs(bmi, df=4)"``
        (an unpenalized logistic regression; its intercept is always fitted).
    estimand : {"ATE", "ATT", "ATC", "ATO"}, default="ATE"
    clients : str or array-like, default=None
        With a DataFrame: the column, or the labels, of each row's site.
    min_level_count : int, default=5
        A site refuses to release a categorical column's levels held by fewer rows.
    **options
        :class:`~skfed.causal.FedIPW`'s other parameters (``stabilized``,
        ``truncate``, ``trim``, ``privacy``...).

    Returns
    -------
    FedIPW
        Fitted; ``design_`` is the propensity formula's declared design, and the
        parameters carry its columns' names (``ps[C(sex)[T.M]]``).
    """
    return _fit(FedIPW(estimand, **options), formula, data, ps, clients, min_level_count)


def aipw(formula, data, *, ps, outcome_family="gaussian", clients=None, min_level_count=5,
         **options):
    """Augmented IPW from formulas: :class:`~skfed.causal.FedAIPW`, the propensity
    formula's design also the outcome models' (one per arm).

    Parameters
    ----------
    formula : str
        ``"outcome ~ treatment"``.
    data : pandas.DataFrame or FederatedDataset
    ps : str
        ``"treatment ~ covariates"``: the propensity model's and the outcome models'
        terms.
    outcome_family : {"gaussian", "binomial", "poisson"}, default="gaussian"
    clients : str or array-like, default=None
    min_level_count : int, default=5
    **options
        :class:`~skfed.causal.FedAIPW`'s other parameters.

    Returns
    -------
    FedAIPW
        Fitted, with ``design_``.
    """
    return _fit(FedAIPW(outcome_family=outcome_family, **options), formula, data, ps,
                clients, min_level_count)
