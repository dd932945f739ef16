"""``glm`` and ``coxph``: statsmodels' and lifelines' formula fits, over the sites.

Each parses its formula (formulaic), has every site keep its complete rows,
discovers levels and knots from the sites (:mod:`skfed.formula._build`), has
every site build the design from the declared term list
(:func:`~skfed.formula._design.design_rows`), and fits skfed's estimator on it:
the intercept is a column of the design (``Intercept``, as statsmodels), so
the estimator fits no intercept of its own and its parameters carry the
design's names.
"""

import re

import numpy as np
import pandas as pd

from .._messages import show
from ..data import FederatedDataset
from ..federation.session import FederationSession
from ..linear_model import (FedGammaRegressor, FedLinearRegression, FedLogisticRegression,
                            FedPoissonRegressor, FedTweedieRegressor)
from ..survival import FedCoxPH
from ._build import discover_levels, numeric_expression, start_design, type_factors
from ._design import complete_rows, design_rows
from ._errors import FormulaError
from ._knots import discover_knots
from ._parse import parse_formula
from ._results import CoxResults, GLMResults, MixedFormulaResults
from ._terms import design_columns

#: family -> (its links skfed fits, the default link)
FAMILIES = {"gaussian": (("identity",), "identity"), "binomial": (("logit",), "logit"),
            "poisson": (("log",), "log"), "gamma": (("log",), "log"),
            "tweedie": (("log",), "log")}


# --- the data ----------------------------------------------------------------------
def _site_labels(data, clients):
    if isinstance(clients, str):
        if clients not in data.columns:
            raise FormulaError(f"clients={clients!r} is not a column of the data.")
        return data[clients].to_numpy()
    return clients


def _row_values(data, value, what, log=False):
    """``value`` for a DataFrame: a column name (read at the sites) or one number per
    row (split with the rows): ``(array or None, column spec or None)``."""
    if value is None:
        return None, None
    if isinstance(value, str):
        return None, value
    values = np.asarray(value, dtype=float)
    if values.shape != (len(data),):
        raise FormulaError(f"{what} has shape {values.shape}; give one value per row of the "
                           f"data ({len(data)}) or a column name.")
    if log:
        if np.any(values <= 0):
            raise FormulaError("exposure must be positive (offset = log(exposure)).")
        values = np.log(values)
    return values, None


def formula_dataset(data, clients, *, offset=None, exposure=None, freq_weights=None):
    """``(dataset, offset column, exposure column, weights column)`` of a formula fit.

    A DataFrame is split by ``clients`` (a column name or one label per row;
    ``None``: one site); offsets and weights given as arrays travel with their
    rows. A :class:`~skfed.data.FederatedDataset` is taken as it is: its sites'
    tables hold the response too (build it without ``target=``), and offsets
    and weights are column names.
    """
    if offset is not None and exposure is not None:
        raise FormulaError("give offset= or exposure=, not both.")
    if isinstance(data, FederatedDataset):
        if clients is not None:
            raise FormulaError("a FederatedDataset carries its sites; do not pass clients=.")
        if data.has_target:
            raise FormulaError("the formula names the response: build the FederatedDataset "
                               "without target= (every column in the sites' tables).")
        if data.columns is None:
            raise FormulaError("a formula needs named columns: build the dataset from "
                               "tables.")
        for what, value in (("offset", offset), ("exposure", exposure),
                            ("freq_weights", freq_weights)):
            if value is not None and not isinstance(value, str):
                raise FormulaError(f"with a FederatedDataset, {what}= names a column of the "
                                   "sites' tables (the values stay there).")
        return data, offset, exposure, freq_weights
    if not isinstance(data, pd.DataFrame):
        raise FormulaError(f"data is a pandas DataFrame or a FederatedDataset, not "
                           f"{type(data).__name__}.")
    offset_values, offset_column = _row_values(data, offset, "offset")
    exposure_values, exposure_column = _row_values(data, exposure, "exposure", log=True)
    weights, weights_column = _row_values(data, freq_weights, "freq_weights")
    dataset = FederatedDataset.from_arrays(
        data.rename(columns=str), clients=_site_labels(data, clients), sample_weight=weights,
        offset=offset_values if offset_values is not None else exposure_values)
    return dataset, offset_column, exposure_column, weights_column


def _schema(dataset):
    """``{column: "number" | "bool" | "text"}`` over the sites (text wins)."""
    kinds = {}
    for description in dataset.metadata:
        for column, kind in zip(description["columns"], description["kinds"]):
            seen = kinds.get(column, kind)
            kinds[column] = ("text" if "text" in (seen, kind) else
                             "bool" if seen == kind == "bool" else "number")
    return kinds


def _build(parsed, dataset, terms, response, *, offset=None, keep=(), min_level_count=5,
           weights=None, drop_intercept=False):
    """``(design, rows, design dataset, session)``: the design every site builds
    (``drop_intercept``: without its ``Intercept`` column, for a Cox model)."""
    kinds = _schema(dataset)
    for column in list(keep) + ([weights] if weights else []):
        if column not in kinds:
            raise FormulaError(f"column {column!r} is not in the data (its columns: "
                               f"{list(kinds)}).")
    factors, options = type_factors(parsed, kinds)
    design = start_design(factors, response, offset, keep, weights)
    complete = dataset.apply(complete_rows, design)
    rows = pd.Series(complete.n_samples, index=pd.Index(complete.sites, name="site"))
    if (rows == 0).any():
        raise FormulaError(f"site {show(rows.index[np.argmax(rows.to_numpy() == 0)])} has no "
                           "complete row for this formula (each of its rows misses a value "
                           "the formula uses).")
    session = FederationSession.for_dataset(complete)
    levels = discover_levels(session, factors, options, min_level_count)
    widths = {n: 1 for n, f in factors.items() if f["kind"] == "numeric"}
    widths.update(discover_knots(session, factors, options))
    design["columns"] = [c for c in design_columns(terms, widths, levels)
                         if not (drop_intercept and c["name"] == "Intercept")]
    if not design["columns"]:
        raise FormulaError("the formula has no column on its right-hand side.")
    both = [c["name"] for c in design["columns"] if c["name"] in keep]
    if both:
        raise FormulaError(f"column {both[0]!r} is a stratum and a covariate; a stratum's "
                           "baseline absorbs its effect: leave it out of the formula.")
    return design, rows, complete.apply(design_rows, design), session


def design(formula, data, *, clients=None, min_level_count=5):
    """The design a formula's sites build: the declared, typed term list they receive.

    What :func:`glm` and :func:`coxph` send each site, after the levels and
    knots have come from the sites: plain data (``json.dumps`` writes it),
    for a data officer to read or an analyst to check the columns' names.

    Parameters
    ----------
    formula : str
        ``"y ~ ..."``, ``"Surv(time, event) ~ ..."`` or a right-hand side alone.
    data : pandas.DataFrame or FederatedDataset
    clients : str or array-like, default=None
    min_level_count : int, default=5

    Returns
    -------
    dict
        ``format``; ``factors`` (``{name: numeric expression tree, categorical
        column and levels, or spline column, knots and degree}``); ``columns``
        (``{"name", "term", "parts"}`` in statsmodels' order); ``response``;
        ``offset``; ``weights``; ``keep``.
    """
    parsed = parse_formula(formula)
    dataset = formula_dataset(data, clients)[0]
    kinds = _schema(dataset)
    response = None
    if parsed.lhs and parsed.lhs[0].replace(" ", "").startswith("Surv("):
        response = _survival_response(parsed, None, None, kinds, formula)
    elif parsed.lhs:
        response = {"kind": "numeric",
                    "expr": numeric_expression(parsed.lhs[0], parsed.lhs[0], kinds)}
    return _build(parsed, dataset, parsed.terms, response,
                  min_level_count=min_level_count)[0]


# --- GLM -------------------------------------------------------------------------
def _family(family, link):
    """``(family name, link name, Tweedie power)`` from a name or a statsmodels family."""
    power = None
    if not isinstance(family, str):  # statsmodels' family objects, read by their names
        name = type(family).__name__.lower()
        link = link or type(getattr(family, "link", None)).__name__.lower()
        power = getattr(family, "var_power", None)
    else:
        name = family.lower()
    if name not in FAMILIES:
        raise FormulaError(f"family {family!r} is not one skfed fits; one of "
                           f"{sorted(FAMILIES)}.")
    links, default = FAMILIES[name]
    link = (link or default).lower()
    if link not in links:
        hint = (" (statsmodels' Gamma defaults to the inverse link: pass "
                "Gamma(link=Log()))" if name == "gamma" else "")
        raise FormulaError(f"family {name!r} is fitted with the {' or '.join(links)} link; "
                           f"not {link!r}{hint}.")
    return name, link, power


def _glm_estimator(name, power, cov_type, options):
    common = dict(fit_intercept=False, cov_type=cov_type, **options)
    if name == "binomial":
        return FedLogisticRegression(C=np.inf, **common)
    if name == "poisson":
        return FedPoissonRegressor(alpha=0.0, **common)
    if name == "gamma":
        return FedGammaRegressor(alpha=0.0, **common)
    if name == "tweedie":
        return FedTweedieRegressor(power=1.0 if power is None else float(power), link="log",
                                   alpha=0.0, **common)
    return FedLinearRegression(**common)


def glm(formula, data, *, family="gaussian", link=None, var_power=None, offset=None,
        exposure=None, freq_weights=None, cov_type="nonrobust", clients=None,
        min_level_count=5, tol=1e-8, max_rounds=100, privacy=None, executor="sequential"):
    """Fit a GLM from a formula over the sites: ``statsmodels.formula.api.glm`` on the
    pooled rows.

    The design is statsmodels' (patsy's): treatment coding against the first
    level (or ``C(x, Treatment("b"))``), interactions, ``np.log(x)``,
    ``I(x ** 2)``, ``bs(x, df=k)``; text and boolean columns are categorical;
    the rows used are the complete cases (statsmodels' ``missing="drop"``),
    dropped at each site. The parameters carry statsmodels' names
    (``Intercept``, ``C(sex)[T.M]``, ``age:C(sex)[T.M]``).

    Parameters
    ----------
    formula : str
        ``"y ~ age + C(sex) + age:C(sex) + np.log(bmi) + I(age**2)"``.
    data : pandas.DataFrame or FederatedDataset
        A DataFrame is split into sites by ``clients``; a FederatedDataset's
        sites hold tables with every column the formula names (no ``target=``).
    family : {"gaussian", "binomial", "poisson", "gamma", "tweedie"} or statsmodels family
        Gamma and Tweedie are fitted with the log link (pass statsmodels'
        ``Gamma(link=Log())`` as the reference).
    link : str, default=None
        The family's link (only the one skfed fits is accepted).
    var_power : float, default=None
        The Tweedie variance power (default 1).
    offset, exposure : str or array-like, default=None
        A column name (the values stay at the sites) or one value per row of
        a DataFrame; ``exposure`` enters as ``log(exposure)``.
    freq_weights : str or array-like, default=None
        Frequency weights (statsmodels' ``freq_weights``).
    cov_type : {"nonrobust", "HC0", "HC1", "cluster"}, default="nonrobust"
        ``"cluster"``: the sites are the clusters.
    clients : str or array-like, default=None
        With a DataFrame: the column, or the labels, of each row's site.
    min_level_count : int, default=5
        A site refuses to release the levels of a categorical column when one
        of them is held by fewer of its complete rows (merge rare levels).
    tol, max_rounds, privacy, executor
        Passed to the estimator (Newton's method reaches the pooled optimum
        in a handful of rounds).

    Returns
    -------
    GLMResults
        ``params``, ``bse``, ``tvalues``, ``pvalues``, ``conf_int()``,
        ``cov_params()``, ``deviance``, ``llf``, ``aic``, ``summary()``,
        ``predict()``, the fitted ``estimator`` and the ``design``.

    Raises
    ------
    FormulaError
        A syntax error, an unknown column, a term outside the allow-list, a
        level held by no site, a reference level that does not exist.
    """
    name, link, power = _family(family, link)
    if var_power is not None:
        power = var_power
    parsed = parse_formula(formula)
    dataset, offset_column, exposure_column, weights = formula_dataset(
        data, clients, offset=offset, exposure=exposure, freq_weights=freq_weights)
    kinds = _schema(dataset)
    if len(parsed.lhs) != 1:
        raise FormulaError(f"a GLM formula has one response on the left of '~': {formula!r}.")
    response = {"kind": "binary" if name == "binomial" else "numeric",
                "expr": numeric_expression(parsed.lhs[0], parsed.lhs[0], kinds)}
    offset_column = offset_column or exposure_column
    offset_spec = None if offset_column is None else {
        "expr": numeric_expression(offset_column, offset_column, kinds),
        "log": exposure_column is not None}
    design, rows, design_data, session = _build(
        parsed, dataset, parsed.terms, response, offset=offset_spec,
        min_level_count=min_level_count, weights=weights)
    estimator = _glm_estimator(name, power, cov_type, dict(
        tol=tol, max_rounds=max_rounds, privacy=privacy, executor=executor))
    estimator.fit(design_data)
    return GLMResults(formula, estimator, design, rows, session.ledger.as_dict(), name, link,
                      training_data=design_data)


# --- Cox -------------------------------------------------------------------------
def _survival_response(parsed, duration_col, event_col, kinds, formula):
    """The response ``{"kind": "survival", "time", "event"}`` from ``Surv(time, event)``,
    ``time ~ ...`` with ``event_col``, or ``duration_col`` and ``event_col``."""
    import ast

    if len(parsed.lhs) > 1:
        raise FormulaError(f"the left-hand side of {formula!r} is Surv(time, event) or one "
                           "duration column.")
    if parsed.lhs:
        text = parsed.lhs[0]
        node = ast.parse(text.strip(), mode="eval").body
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Surv":
            if len(node.args) != 2 or node.keywords or duration_col or event_col:
                raise FormulaError("Surv takes (time, event), and then no duration_col= "
                                   "nor event_col=.")
            time, event = (ast.get_source_segment(text.strip(), a) for a in node.args)
        else:
            time, event = text, event_col
            if duration_col is not None:
                raise FormulaError("the formula names the duration; do not pass "
                                   "duration_col= too.")
    else:
        time, event = duration_col, event_col
    if time is None or event is None:
        raise FormulaError("a Cox formula needs its times and events: 'Surv(time, event) ~ "
                           "...', or 'time ~ ...' with event_col=, or duration_col= and "
                           "event_col= with a right-hand side.")
    return {"kind": "survival", "time": numeric_expression(time, time, kinds),
            "event": numeric_expression(event, event, kinds)}


def coxph(formula, data, *, duration_col=None, event_col=None, strata=None, ties="efron",
          cov_type="nonrobust", freq_weights=None, clients=None, min_level_count=5,
          time_grid=None, tol=1e-10, max_rounds=50, privacy=None, executor="sequential"):
    """Fit a Cox model from a formula over the sites: lifelines'
    ``CoxPHFitter().fit(df, duration_col, event_col, formula=...)`` on the pooled rows.

    The covariates are coded as with an intercept (treatment coding against the
    first level), the intercept itself left out (the baseline hazard absorbs
    it), as lifelines and statsmodels' ``PHReg.from_formula``; rows with a
    missing value are dropped at each site; names as statsmodels writes them.

    Parameters
    ----------
    formula : str
        ``"Surv(time, event) ~ age + C(sex)"`` (R's form), ``"time ~ age +
        C(sex)"`` with ``event_col=``, or ``"age + C(sex)"`` with
        ``duration_col=`` and ``event_col=`` (lifelines' form).
    data : pandas.DataFrame or FederatedDataset
    duration_col, event_col : str, default=None
    strata : None, "site", str or list, default=None
        As :class:`~skfed.survival.FedCoxPH`: ``"site"`` (each site its own
        baseline), a column (one baseline per level), or both.
    ties : {"efron", "breslow"}, default="efron"
    cov_type : {"nonrobust", "robust", "cluster"}, default="nonrobust"
    freq_weights : str or array-like, default=None
        Case weights (lifelines' ``weights_col``).
    clients : str or array-like, default=None
    min_level_count : int, default=5
    time_grid : None, array-like or int, default=None
        As :class:`~skfed.survival.FedCoxPH`: ``None`` the exact event times
        (a site service must allow them), else cut points (or their number)
        to which each site coarsens its times.
    tol, max_rounds, privacy, executor
        Passed to :class:`~skfed.survival.FedCoxPH`.

    Returns
    -------
    CoxResults
        ``params``, ``bse``, ``pvalues``, ``conf_int()``, ``hazard_ratios_``,
        ``llf``, ``summary()`` (lifelines' columns), the ``estimator``.
    """
    parsed = parse_formula(formula)
    dataset, _, _, weights = formula_dataset(data, clients, freq_weights=freq_weights)
    kinds = _schema(dataset)
    response = _survival_response(parsed, duration_col, event_col, kinds, formula)
    items = strata if isinstance(strata, (list, tuple)) else [] if strata is None else [strata]
    keep = [s for s in items if s != "site"]
    # the covariates are coded as with an intercept (lifelines adds "+ 1"), which is dropped
    terms = [()] + [t for t in parsed.terms if t]
    design, rows, design_data, session = _build(
        parsed, dataset, terms, response, keep=keep, min_level_count=min_level_count,
        weights=weights, drop_intercept=True)
    estimator = FedCoxPH(strata=strata, ties=ties, cov_type=cov_type, time_grid=time_grid,
                         tol=tol, max_rounds=max_rounds, privacy=privacy, executor=executor)
    estimator.fit(design_data)
    return CoxResults(formula, estimator, design, rows, session.ledger.as_dict(),
                      training_data=design_data)


# --- linear mixed models -----------------------------------------------------------
def _random_effects(re_formula, names):
    """``(random intercept?, the design columns with a random slope)`` of statsmodels'
    ``re_formula`` (``None``: a random intercept only; ``"~x"``: intercept and a slope
    on ``x``; ``"0 + x"``: the slope only)."""
    if re_formula is None:
        return True, []
    terms = [t.strip() for t in str(re_formula).replace("~", " ").split("+") if t.strip()]
    intercept = not any(t in ("0", "-1") for t in terms)
    slopes = [t for t in terms if t not in ("0", "1", "-1")]
    unknown = [t for t in slopes if t not in names]
    if unknown:
        raise FormulaError(f"re_formula: {show(unknown[0])} is not a column of the fixed "
                           f"design {names} (a random slope is on a fixed-effect column; "
                           "write it as the design names it).")
    return intercept, slopes


#: lme4's random-intercept term: ``(1 | group)`` or ``(1 | group/level)``
_BAR = re.compile(r"\+?\s*\(\s*1\s*\|\s*([^()|/\s]+)\s*(?:/\s*([^()|/\s]+)\s*)?\)")


def _bar_terms(formula, groups, re_formula, vc_formula):
    """``(fixed formula, groups, re_formula, vc_formula)``: lme4's ``(1 | hospital/clinic)`` as
    statsmodels' ``groups="hospital"`` and ``vc_formula={"clinic": "0 + C(clinic)"}``."""
    bars = _BAR.findall(formula)
    if not bars:
        if "|" in formula:
            raise FormulaError(f"{formula!r}: a random-effects term is written (1 | group) or "
                               "(1 | group/level) (random slopes: re_formula=).")
        return formula, groups, re_formula, vc_formula
    if len(bars) > 1:
        raise FormulaError(f"{formula!r}: one (1 | group/level) term (crossed components "
                           "within the group: vc_formula= with several entries).")
    group, level = bars[0]
    if groups is not None and groups != group:
        raise FormulaError(f"groups={groups!r} and the formula's (1 | {group}...) disagree: "
                           "give the group once.")
    if re_formula not in (None, "1", "~1"):
        raise FormulaError("re_formula= with a (1 | group) term: write the random slopes "
                           "with re_formula and the group with groups=.")
    fixed = _BAR.sub("", formula).strip()
    if fixed.endswith("~"):
        fixed += " 1"
    if level:
        if vc_formula and level in vc_formula:
            raise FormulaError(f"{level!r} is in the formula's (1 | {group}/{level}) and in "
                               "vc_formula=: give it once.")
        vc_formula = dict(vc_formula or {}, **{level: f"0 + C({level})"})
    return fixed, group, "1", vc_formula


def mixedlm(formula, data, *, groups=None, re_formula=None, vc_formula=None, reml=True,
            clients=None, min_level_count=5, min_group_size=2):
    """Fit a linear mixed model from a formula over the sites:
    ``statsmodels.formula.api.mixedlm(formula, data, groups=..., re_formula=...,
    vc_formula=...)`` on the pooled rows, exactly (:class:`~skfed.mixed.FedMixedLM`).

    Parameters
    ----------
    formula : str
        The fixed effects, ``"weight ~ time + C(evit)"``; lme4's
        ``"y ~ x + (1 | hospital/clinic)"`` is ``groups="hospital"`` with
        ``vc_formula={"clinic": "0 + C(clinic)"}`` (and ``(1 | hospital)`` is
        ``groups="hospital"``).
    data : pandas.DataFrame or FederatedDataset
    groups : str, default=None
        The column of the random effects' groups, nested in the sites (each group at
        one site); ``None``: the sites are the groups.
    re_formula : str, default=None
        The random effects: ``None`` (a random intercept; none with ``vc_formula``,
        as in statsmodels: give ``"1"``), ``"~time"`` (intercept and a slope on
        ``time``), ``"0 + time"`` (the slope only). A slope is on a column of the
        fixed design.
    vc_formula : dict, default=None
        Variance components within the groups, ``{"clinic": "0 + C(clinic)"}``
        (:class:`~skfed.mixed.FedMixedLM`'s ``vc_formula``).
    reml : bool, default=True
    clients : str or array-like, default=None
        With a DataFrame: the column, or the labels, of each row's site.
    min_level_count : int, default=5
    min_group_size : int, default=2
        The fewest rows a group (and a component's level within it) may hold (a
        site service raises it to its ``min_rows``).

    Returns
    -------
    MixedLMResults
        statsmodels' results (``fe_params``, ``bse_fe``, ``cov_re``, ``vcomp``,
        ``scale``, ``llf``, ``summary()``, ``variance_components()``...), with the
        fitted ``estimator`` and the ``design`` as attributes.
    """
    from ..mixed import FedMixedLM
    from ..mixed._linear import _variance_components

    formula, groups, re_formula, vc_formula = _bar_terms(str(formula), groups, re_formula,
                                                         vc_formula)
    parsed = parse_formula(formula)
    dataset, _, _, _ = formula_dataset(data, clients)
    kinds = _schema(dataset)
    if len(parsed.lhs) != 1:
        raise FormulaError(f"a mixed model's formula has one response: {formula!r}.")
    if groups is not None and not isinstance(groups, str):
        raise FormulaError("groups names a column of the data (the groups stay at the sites).")
    _, vc_columns = _variance_components(vc_formula, list(kinds))
    response = {"kind": "numeric", "expr": numeric_expression(parsed.lhs[0], parsed.lhs[0],
                                                                kinds)}
    keep = ([] if groups is None else [groups]) + [c for c in vc_columns if c != groups]
    design, rows, design_data, _ = _build(parsed, dataset, parsed.terms, response,
                                          keep=keep, min_level_count=min_level_count)
    names = [c["name"] for c in design["columns"]]
    intercept, slopes = _random_effects(re_formula, names)
    if vc_formula and re_formula is None:
        intercept = False  # statsmodels: with vc_formula, no group intercept unless asked
    estimator = FedMixedLM(re_columns=slopes, re_intercept=intercept, fit_intercept=False,
                           reml=reml, min_group_size=min_group_size, vc_formula=vc_formula)
    estimator.fit(design_data, groups=groups)
    results = MixedFormulaResults.of(estimator.results_, formula=formula, estimator=estimator,
                                     design=design, rows_by_site=rows,
                                     training_data=design_data)
    results.endog_name = str(parsed.lhs[0])  # the response's name in the summary
    return results


#: lme4's random-effects term of a GLMM: ``(1 | herd)`` or ``(1 + x | herd)``
_GLMM_BAR = re.compile(r"\+?\s*\(([^()|]*)\|\s*([^()|/\s]+)\s*\)")


def _glmm_bar(formula, groups):
    """``(fixed formula, groups, slopes)`` of a GLMM's formula: one ``(1 | group)``
    or ``(1 + x | group)`` term (a random intercept, and random slopes on design
    columns)."""
    if re.search(r"\|\s*[^()|]*/", formula):
        raise FormulaError(f"{formula!r}: a GLMM here has one grouping, (1 | group) or "
                           "(1 + x | group); nested components are the linear model's "
                           "(mixedlm).")
    bars = _GLMM_BAR.findall(formula)
    if len(bars) > 1:
        raise FormulaError(f"{formula!r}: one (1 + x | group) term (one grouping).")
    if not bars:
        if "|" in formula:
            raise FormulaError(f"{formula!r}: a random intercept is written (1 | group).")
        return formula, groups, []
    terms, group = bars[0]
    terms = [t.strip() for t in terms.split("+") if t.strip()]
    if any(t in ("0", "-1") for t in terms):
        raise FormulaError(f"{formula!r}: a GLMM's random effects include the intercept "
                           "here: (1 + x | group), not (0 + x | group).")
    if groups is not None and groups != group:
        raise FormulaError(f"groups={groups!r} and the formula's (... | {group}) disagree: "
                           "give the group once.")
    fixed = _GLMM_BAR.sub("", formula).strip()
    return fixed + (" 1" if fixed.endswith("~") else ""), group, [t for t in terms
                                                                  if t != "1"]


def mixedglm(formula, data, *, family="binomial", groups=None, trials=None, n_nodes=1,
             clients=None, min_level_count=5, min_group_size=2):
    """Fit a binomial or Poisson GLMM with a random intercept per group from a formula:
    lme4's ``glmer(y ~ x + (1 | herd), family, nAGQ=n_nodes)`` on the pooled rows
    (:class:`~skfed.mixed.FedMixedGLM`).

    Parameters
    ----------
    formula : str
        ``"cases ~ x + C(period) + (1 | herd)"``, or ``(1 + x | herd)`` for a
        random slope of ``x`` (Laplace only, as lme4); the ``(1 | group)`` term
        may be left out for ``groups=`` (``None`` for both: the sites are the
        groups).
    data : pandas.DataFrame or FederatedDataset
    family : {"binomial", "poisson"}, default="binomial"
    groups : str, default=None
        The random intercept's groups (a column, each group at one site).
    trials : str, default=None
        Binomial: the column of each row's trials; the response counts successes
        (lme4's ``cbind(cases, size - cases)``). ``None``: a 0/1 response.
    n_nodes : int, default=1
        1: the Laplace approximation (glmer's default); more: adaptive
        Gauss-Hermite quadrature with that many nodes (glmer's ``nAGQ``).
    clients : str or array-like, default=None
        With a DataFrame: the column, or the labels, of each row's site.
    min_level_count : int, default=5
    min_group_size : int, default=2

    Returns
    -------
    GLMMResults
        With ``formula``, ``design`` and the fitted ``estimator`` as attributes,
        and the response's name in the summary.
    """
    from ..mixed import FedMixedGLM

    formula, groups, slopes = _glmm_bar(str(formula), groups)
    parsed = parse_formula(formula)
    dataset, _, _, _ = formula_dataset(data, clients)
    kinds = _schema(dataset)
    if len(parsed.lhs) != 1:
        raise FormulaError(f"a GLMM's formula has one response: {formula!r}.")
    response = {"kind": "numeric", "expr": numeric_expression(parsed.lhs[0], parsed.lhs[0],
                                                                kinds)}
    keep = [c for c in (groups, trials) if c is not None]
    design, rows, design_data, _ = _build(parsed, dataset, parsed.terms, response,
                                          keep=keep, min_level_count=min_level_count)
    names = [c["name"] for c in design["columns"]]
    unknown = [t for t in slopes if t not in names]
    if unknown:
        raise FormulaError(f"random slope {unknown[0]!r} is not a column of the fixed design "
                           f"{names} (write it as the design names it).")
    estimator = FedMixedGLM(family, trials=trials, n_nodes=n_nodes, fit_intercept=False,
                            min_group_size=min_group_size, re_columns=slopes or None)
    estimator.fit(design_data, groups=groups)
    results = estimator.results_
    results.formula, results.estimator, results.design = formula, estimator, design
    results.rows_by_site = rows
    results.endog_name = str(parsed.lhs[0])  # the response's name in the summary
    return results
