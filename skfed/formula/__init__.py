"""Formulas: statsmodels' and lifelines' model formulas, fitted over the sites.

``skfed.formula.glm("y ~ age + C(sex) + age:C(sex) + np.log(bmi)", data,
family="binomial")`` fits the GLM statsmodels fits on the pooled rows, with
its design (treatment coding, interactions, transforms, B-splines), its
parameter names (``Intercept``, ``C(sex)[T.M]``, ``age:C(sex)[T.M]``) and its
numbers; :func:`coxph` does the same for lifelines' Cox model, :func:`mixedlm`
for statsmodels' linear mixed model, :func:`gee` for statsmodels' GEE, and
:func:`two_stage` pools each site's own least-squares fit of a formula by a
meta-analysis; :func:`ipw` and :func:`aipw` estimate a treatment's effect with a
propensity formula (:mod:`skfed.causal`).

The formula is parsed by formulaic at the analyst into a declared, typed term
list (plain data: columns, allow-listed numeric transforms, categorical
factors with their levels, spline knots); each site builds its design matrix
from that list, never evaluating code. Levels come from the sites (each level
held by ``min_level_count`` rows at a site), knots from exact federated
quantiles. See ``docs/formulas.md``.
"""

from ._causal import aipw, ipw
from ._errors import DesignError, FormulaError
from ._discrete import MNLogitResults, OrdinalResults, mnlogit, ordinal
from ._gee import GEEFormulaResults, gee
from ._models import coxph, design, glm, mixedglm, mixedlm
from ._results import CoxResults, FormulaResults, GLMResults
from ._two_stage import TwoStageResults, two_stage

__all__ = ["glm", "coxph", "mixedlm", "mixedglm", "two_stage", "ordinal", "mnlogit",
           "OrdinalResults",
           "MNLogitResults", "gee", "GEEFormulaResults", "design", "FormulaError",
           "DesignError", "FormulaResults", "GLMResults", "CoxResults", "TwoStageResults",
           "ipw", "aipw"]
