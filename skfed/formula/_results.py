"""The results of a formula fit: statsmodels' and lifelines' names over a fitted estimator.

:class:`FormulaResults` holds the fitted skfed estimator, the design every
site built (plain data) and the rows each site used; it reads its tables with
the names statsmodels' results use (``params``, ``bse``, ``pvalues``,
``conf_int()``, ``llf``...), indexed by the design's column names
(``Intercept``, ``C(sex)[T.M]``, ``age:C(sex)[T.M]``). :class:`GLMResults` and
:class:`CoxResults` add what their models have.
"""

import numpy as np
import pandas as pd
from scipy import stats

from ..data.site import SiteData
from ..datafits.links import inverse_link
from ..mixed._results import MixedLMResults
from ..stats._journal import interaction_text
from ..stats._results import LabelledResults, Term
from ._design import complete_rows, design_matrix


def design_terms(design):
    """The terms of a formula's design as a journal table reads them (:class:`Term`):
    each categorical with its levels and reference, each spline with its basis."""
    grouped = {}
    for column in design["columns"]:
        grouped.setdefault(column["term"], []).append(column)
    return [_term(name, columns, design["factors"]) for name, columns in grouped.items()]


def _term(name, columns, factors):
    parts = columns[0]["parts"]
    made_of = frozenset(factor for factor, _ in parts)
    if not parts:
        return Term(name, name, [(c["name"], None) for c in columns], kind="intercept")
    if len(parts) != 1:  # an interaction: each column named by its variables' levels
        return Term(name, name, [(c["name"], _part_text(c["parts"], factors)) for c in columns],
                    kind="interaction", factors=made_of,
                    details={"parts": {c["name"]: _part_pairs(c["parts"], factors)
                                       for c in columns}})
    spec = factors[parts[0][0]]
    column = spec.get("column") or (spec.get("expr") or {}).get("column")
    details = {"column": column} if column == name or spec["kind"] != "numeric" else {}
    label = column if details else name
    if spec["kind"] == "categorical":
        levels = spec["levels"]
        chosen = [c["parts"][0][1] for c in columns]
        missing = [levels[i] for i in range(len(levels)) if i not in chosen]
        return Term(name, label, [(c["name"], levels[c["parts"][0][1]]) for c in columns],
                    reference=missing[0] if len(missing) == 1 else None,
                    kind="categorical", details=details, factors=made_of)
    kind = "spline" if spec["kind"] == "spline" else "numeric"
    return Term(name, label, [(c["name"], None) for c in columns], kind=kind, details=details,
                factors=made_of)


def _part_pairs(parts, factors):
    """An interaction column's ``[(variable, level or None), ...]``."""
    pairs = []
    for factor, selector in parts:
        spec = factors[factor]
        if spec["kind"] == "categorical":
            pairs.append((spec["column"], spec["levels"][selector]))
        else:
            pairs.append((factor if selector is None else f"{factor}[{selector}]", None))
    return pairs


def _part_text(parts, factors, labels=None):
    """``"horTh: yes \u00d7 age"``: an interaction column by its factors' levels."""
    return interaction_text(_part_pairs(parts, factors), labels or {})


def design_rows(design, data, offset=None):
    """The design matrix of the complete rows of ``data`` (new rows, a DataFrame), their
    index, and their offset."""
    if not isinstance(data, pd.DataFrame):
        raise TypeError("predict takes a DataFrame of new rows (the sites' own rows "
                        "stay at the sites).")
    design = dict(design, response=None, offset=None, keep=[], weights=None)
    site = SiteData("new rows", data.reset_index(drop=True),
                    meta={"row_ids": np.arange(len(data))},
                    offset=None if offset is None else np.asarray(offset, dtype=float))
    site = complete_rows(site, design)
    return (design_matrix(site, design).to_numpy(), data.index[site.meta["row_ids"]],
            site.offset)


def _effect_term(terms, name):
    """The numeric or spline term named ``name`` (or made of the variable ``name``), alone
    in the model with its variable (an interaction's effect depends on other values)."""
    matches = [t for t in terms if name in (t.name, t.details.get("column"))
               and t.kind in ("numeric", "spline")]
    if not matches:
        raise ValueError(f"no numeric or spline term {name!r}; the terms are "
                         f"{[t.name for t in terms]}.")
    term = matches[0]
    others = [t.name for t in terms if t is not term and term.name in t.factors]
    if others or len(matches) > 1:
        raise ValueError(f"the variable of {term.name!r} enters other terms too "
                         f"({', '.join(others or [m.name for m in matches[1:]])}): its effect "
                         "depends on their values, so there is no single curve.")
    return term


class FormulaResults(LabelledResults):
    """A fitted formula model (see :func:`skfed.formula.glm`, :func:`skfed.formula.coxph`).

    The Wald tests, tables and figures are the estimator's numbers, written
    once in :class:`~skfed.stats._results.ModelResults`, with the design's names
    and terms.

    Attributes
    ----------
    formula : str
    estimator : estimator
        The fitted skfed estimator (its ``history_``...).
    design : dict
        The design the sites built (JSON-safe: the factors with their levels and
        knots, the columns with their names).
    rows_by_site : pandas.Series
        The complete rows each site used.
    setup_ledger : dict
        Rounds and bytes of the exchanges that built the design (levels, knots).
    training_data : FederatedDataset
        The design's rows (at the sites for a service dataset): what the
        proportional-hazards test and the analyses after the fit read.
    term_structure : list of Term
        The design's terms (a categorical's levels and reference).
    """

    def __init__(self, formula, estimator, design, rows_by_site, setup_ledger,
                 training_data=None):
        self.formula = formula
        self.estimator = estimator
        self.design = design
        self.rows_by_site = rows_by_site
        self.setup_ledger = setup_ledger
        self.training_data = training_data
        self.term_structure = design_terms(design)

    # -- what the results base reads ------------------------------------------
    def _estimates(self):
        return self.estimator._estimates()

    def _df_inference(self, use_t):
        return self.estimator._df_inference(use_t)

    def _measure(self):
        return self.estimator._measure()

    @property
    def _table_style(self):
        return self.estimator._table_style

    @property
    def _summary_title(self):
        return self.estimator._summary_title

    def _summary_info(self):
        return {"Formula:": self.formula, **self.estimator._summary_info()}

    # -- statsmodels' names ---------------------------------------------------
    @property
    def param_names(self):
        """The parameters' names, as statsmodels writes them."""
        return list(self.estimator.param_names_)

    def _series(self, values):
        return pd.Series(np.asarray(values, dtype=float), index=self.param_names)

    @property
    def params(self):
        """The estimates (``pandas.Series`` by parameter name)."""
        return self._series(self.estimator.params_)

    @property
    def bse(self):
        """Standard errors (``cov_type``)."""
        return self._series(self._wald()[1])

    def cov_params(self):
        """The estimates' covariance (``pandas.DataFrame``)."""
        names = self.param_names
        return pd.DataFrame(self.estimator.cov_params_, index=names, columns=names)

    def __repr__(self):
        return (f"{type(self).__name__}({self.formula!r}, {len(self.rows_by_site)} sites, "
                f"{int(self.rows_by_site.sum())} rows)")

    def term_effect(self, term, values=None, *, reference=None, alpha=0.05):
        """The effect of a numeric or spline term over values of its variable, against
        a reference value: ``f(x) - f(x_ref)`` with its Wald band, as a ratio where
        ``exp(coef)`` is one (odds, rate or hazard ratio).

        A spline's coefficients mean nothing one by one; its effect is this curve
        (``skfed.plotting.plot_effect`` draws it).

        Parameters
        ----------
        term : str
            The term (``"bs(age, df=4)"``) or its variable (``"age"``).
        values : array-like, default=None
            Where to evaluate; by default 101 points between a spline's boundary
            knots (a numeric term needs them).
        reference : float, default=None
            The value whose effect is 0 (ratio 1); by default a spline's middle
            knot (the median for ``df=4``), else the first value.
        alpha : float, default=0.05

        Returns
        -------
        table : pandas.DataFrame
            Indexed by the values; columns ``estimate``, ``lower``, ``upper``;
            ``attrs``: ``measure``, ``reference``, ``variable``, ``term``.
        """
        found = _effect_term(self._terms(), term)
        spec = self.design["factors"][found.name]
        if values is None:
            if spec["kind"] != "spline":
                raise ValueError(f"the term {found.name!r} is numeric: give the values at "
                                 "which to show its effect.")
            values = np.linspace(spec["knots"][0], spec["knots"][-1], 101)
        values = np.asarray(values, dtype=float)
        if reference is None:
            knots = np.unique(spec["knots"]) if spec["kind"] == "spline" else values
            reference = float(knots[len(knots) // 2]) if spec["kind"] == "spline" \
                else float(values[0])
        variable = found.details["column"]
        design = dict(self.design, factors={found.name: spec}, response=None, offset=None,
                      keep=[], weights=None,
                      columns=[c for c in self.design["columns"] if c["term"] == found.name])
        frame = pd.DataFrame({variable: np.r_[reference, values]})
        site = complete_rows(SiteData("values", frame, meta={"row_ids": np.arange(len(frame))}),
                             design)
        if site.n_samples != len(frame):
            raise ValueError(f"some values of {variable!r} are outside the term's domain.")
        basis = design_matrix(site, design).to_numpy()
        contrast = basis[1:] - basis[0]
        est = self._estimates()
        position = [list(map(str, est.names)).index(c) for c, _ in found.columns]
        effect = contrast @ np.asarray(est.params, float)[position]
        se = np.sqrt(np.einsum("ij,jk,ik->i", contrast,
                               np.asarray(est.cov, float)[np.ix_(position, position)], contrast))
        z = stats.norm.isf(alpha / 2)
        table = pd.DataFrame({"estimate": effect, "lower": effect - z * se,
                              "upper": effect + z * se}, index=pd.Index(values, name=variable))
        measure = self._measure()
        if measure is not None:
            table = np.exp(table)
        table.attrs = {"measure": measure or "difference", "reference": reference,
                       "variable": variable, "term": found.name}
        return table

    def _design_of(self, data, offset=None):
        """The design matrix of the complete rows of ``data`` (a DataFrame), their index,
        and their offset."""
        return design_rows(self.design, data, offset)


class GLMResults(FormulaResults):
    """A fitted GLM formula (:func:`skfed.formula.glm`), with statsmodels' names.

    Attributes
    ----------
    family : str
    link : str
    """

    def __init__(self, formula, estimator, design, rows_by_site, setup_ledger, family, link,
                 training_data=None):
        super().__init__(formula, estimator, design, rows_by_site, setup_ledger, training_data)
        self.family, self.link = family, link

    @property
    def nobs(self):
        """The number of rows used (statsmodels' ``nobs``; frequency weights not counted)."""
        return float(self.rows_by_site.sum())

    @property
    def wnobs(self):
        """The weighted number of rows used (the sum of the frequency weights)."""
        return float(self.estimator._result("nobs"))

    @property
    def df_model(self):
        """Parameters less the intercept (statsmodels' ``df_model``)."""
        return len(self.param_names) - ("Intercept" in self.param_names)

    @property
    def df_resid(self):
        """``wnobs`` less the parameters."""
        return self.wnobs - len(self.param_names)

    @property
    def deviance(self):
        """The deviance at the fit."""
        return self.estimator.deviance_

    @property
    def null_deviance(self):
        """The deviance of the intercept-only model (offset kept)."""
        return self.estimator.null_deviance_

    @property
    def llf(self):
        """The log-likelihood (statsmodels' definition)."""
        return self.estimator.loglike_

    @property
    def aic(self):
        """``-2 llf + 2 p``."""
        return self.estimator.aic_

    @property
    def bic(self):
        """``-2 llf + p log(nobs)`` (statsmodels' ``bic_llf``)."""
        return self.estimator.bic_

    @property
    def scale(self):
        """The dispersion (1 for binomial and Poisson)."""
        return self.estimator.scale_

    @property
    def pearson_chi2(self):
        """Pearson's chi-square at the fit."""
        return self.estimator.pearson_chi2_

    def predict(self, data, offset=None):
        """The mean response of new rows (a DataFrame), as statsmodels' ``predict``.

        Rows missing a value the formula uses are left out (their index too).

        Parameters
        ----------
        data : pandas.DataFrame
        offset : array-like of shape (n_rows,), default=None

        Returns
        -------
        pandas.Series
        """
        X, index, offset = self._design_of(data, offset)
        eta = X @ np.asarray(self.estimator.params_)
        if offset is not None:
            eta = eta + offset
        return pd.Series(inverse_link(self.link, eta), index=index)


class CoxResults(FormulaResults):
    """A fitted Cox formula (:func:`skfed.formula.coxph`), with lifelines' names too
    (``hazard_ratios_``, ``log_likelihood_``, ``summary``)."""

    @property
    def hazard_ratios_(self):
        """``exp(params)`` (lifelines' name)."""
        return np.exp(self.params)

    @property
    def llf(self):
        """The log partial likelihood at the fit."""
        return self.estimator.loglike_

    log_likelihood_ = llf

    @property
    def n_events(self):
        """Events in the rows used."""
        return self.estimator.n_events_

    def predict(self, data):
        """The risk scores (log partial hazards) of new rows (a DataFrame).

        Parameters
        ----------
        data : pandas.DataFrame

        Returns
        -------
        pandas.Series
        """
        X, index, _ = self._design_of(data)
        return pd.Series(X @ np.asarray(self.estimator.coef_), index=index)

    # -- what FedCoxPH has, on the formula's variables -------------------------
    def proportional_hazard_test(self, time_transform=None, *, method="lifelines", terms=True):
        """The proportional-hazards test on the fit's own rows
        (:func:`skfed.survival.proportional_hazard_test`).

        Parameters
        ----------
        time_transform : {"rank", "km", "identity", "log", "all"} or list, default=None
            ``None``: the method's default (lifelines' ``"rank"``, R's ``"km"``).
        method : {"lifelines", "survival3"}, default="lifelines"
            ``"survival3"``: R survival 3.x's ``cox.zph`` score test.
        terms : bool, default=True
            With ``"survival3"``: one test per formula term (R's ``terms=TRUE``).

        Returns
        -------
        table : pandas.DataFrame
            One row per design column (per term with ``"survival3"``) and
            ``"GLOBAL"``.
        """
        from ..survival import proportional_hazard_test

        return proportional_hazard_test(self, time_transform=time_transform, method=method,
                                        terms=terms)

    @property
    def baseline_times_(self):
        """The times of the baseline hazard (the fitted model's)."""
        return self.estimator.baseline_times_

    @property
    def baseline_cumulative_hazard_(self):
        """Breslow's baseline cumulative hazard (the fitted model's)."""
        return self.estimator.baseline_cumulative_hazard_

    def _profiles(self, data, strata):
        """The design of new rows as the estimator reads them, and each row's stratum
        (from the strata column of ``data`` when the model has one)."""
        X, index, _ = self._design_of(data)
        frame = pd.DataFrame(X, columns=self.param_names, index=index)
        column = next((s for s in np.atleast_1d(self.estimator.strata or [])
                       if s != "site"), None)
        if strata is None and column is not None and column in data.columns:
            strata = data.loc[index, column].to_numpy()
        return frame, strata

    def predict_cumulative_hazard(self, data, times=None, strata=None):
        """Each new row's cumulative hazard ``exp(x'b) H0(t)`` at ``times``.

        Parameters
        ----------
        data : pandas.DataFrame
            Rows in the formula's variables (incomplete rows left out).
        times : array-like, default=None
        strata : array-like, default=None
            Each row's stratum (default: the strata column of ``data``).

        Returns
        -------
        cumulative_hazard : ndarray of shape (n_rows, n_times)
        """
        frame, strata = self._profiles(data, strata)
        return self.estimator.predict_cumulative_hazard(frame, times, strata)

    def predict_survival_function(self, data, times=None, strata=None):
        """Each new row's survival probability ``exp(-exp(x'b) H0(t))``.

        Parameters
        ----------
        data : pandas.DataFrame
            Rows in the formula's variables (:func:`skfed.plotting.plot_survival`
            draws them as profiles).
        times : array-like, default=None
        strata : array-like, default=None

        Returns
        -------
        survival : ndarray of shape (n_rows, n_times)
        """
        return np.exp(-self.predict_cumulative_hazard(data, times, strata))


class MixedFormulaResults(MixedLMResults):
    """statsmodels' ``MixedLMResults`` of :func:`skfed.formula.mixedlm`, with the formula,
    its design and terms, and ``predict`` from rows in the formula's variables."""

    @classmethod
    def of(cls, results, *, formula, estimator, design, rows_by_site, training_data):
        """The results ``results`` of a mixed model's fit, with its formula's parts."""
        out = cls.__new__(cls)
        out.__dict__.update(results.__dict__)
        out.formula, out.estimator, out.design = formula, estimator, design
        out.rows_by_site, out.training_data = rows_by_site, training_data
        out.term_structure = design_terms(design)
        return out

    def predict(self, data, groups=None):
        """The fixed part ``X b`` of new rows (a DataFrame in the formula's variables),
        plus each row's predicted random effect where its group was in the fit.

        Parameters
        ----------
        data : pandas.DataFrame
            Rows missing a value the formula uses are left out (their index too).
        groups : str or array-like, default=None
            A column of ``data`` or one group per row; ``None``: statsmodels'
            population-level ``predict``.

        Returns
        -------
        pandas.Series
        """
        X, index, _ = design_rows(self.design, data)
        if isinstance(groups, str):
            groups = data.loc[index, groups].to_numpy()
        elif groups is not None:
            groups = pd.Series(np.asarray(groups), index=data.index).loc[index].to_numpy()
        return pd.Series(self.estimator.predict(X, groups=groups), index=index)
