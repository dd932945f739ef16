"""One results base under every model's results, as statsmodels' ``LikelihoodModelResults``.

A fitted model says three things: its estimates (``params``, their covariance,
their names), the terms they belong to (a categorical's dummies, a spline's
basis), and what ``exp(coef)`` is (an odds, rate or hazard ratio, or nothing).
From those, :class:`ModelResults` writes once what every model shows: Wald
statistics and intervals, Wald tests of linear hypotheses and of whole terms,
the regression table (:meth:`~ModelResults.summary`), the journal table (one
"OR (95% CI)" column, reference rows, a joint p per term) and the forest plot.

Two dialects read these numbers: :class:`EstimatorWald` for fitted estimators
(scikit-learn's trailing underscores, arrays: ``params_``, ``bse_``...), and
:class:`LabelledResults` for results objects (statsmodels' names, pandas:
``params``, ``bse``, ``conf_int()``...).
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ._anova_wald import anova_wald_table
from ._hypothesis import linear_hypothesis, term_groups, wald_intervals, wald_test_from
from ._journal import INTERCEPT_NAMES, column_labels, journal_rows

@dataclass(frozen=True)
class Estimates:
    """What a model's Wald inference reads: estimates, covariance and names."""

    params: np.ndarray
    cov: np.ndarray
    names: list


@dataclass
class Term:
    """A model term as a journal table shows it.

    ``columns`` pairs each parameter name with the level it contrasts (``None``
    for a numeric column); ``reference`` is a categorical's reference level;
    ``kind`` is ``"numeric"``, ``"categorical"``, ``"spline"`` or ``"interaction"``;
    ``factors`` the variables it is made of (empty for the intercept): a term
    whose factors include another's contains it (type II tests read that).
    """

    name: str
    label: str
    columns: list
    reference: object = None
    kind: str = "numeric"
    details: dict = field(default_factory=dict)
    factors: frozenset = frozenset()


class ModelResults:
    """The numbers and tables of a fitted model, written once.

    A subclass provides :meth:`_estimates`; it may refine :meth:`_df_inference`
    (Student's t), :meth:`_terms` (how parameters group into terms),
    :meth:`_measure` (what ``exp(coef)`` is), :meth:`_summary_info` (the header
    facts) and the class attributes ``_summary_title`` and ``_table_style``
    (``"statsmodels"``, ``"lifelines"`` or ``"summary2"``: the columns' names).
    """

    _summary_title = "Regression Results"
    _table_style = "statsmodels"
    _summary_digits = 4
    #: the model's terms when known from its design (a formula's): a list of :class:`Term`
    term_structure = None

    # -- what a subclass provides -------------------------------------------
    def _estimates(self):
        """The :class:`Estimates` of the Wald inference."""
        raise NotImplementedError

    def _df_inference(self, use_t):
        """Student's t degrees of freedom for ``use_t``; ``None``: the normal."""
        if use_t:
            raise ValueError(f"{type(self).__name__}: use_t is not available here: this "
                             "model's tests are normal (z).")
        return None

    def _measure(self):
        """What ``exp(coef)`` is (``"odds ratio"``...), ``None`` when no ratio."""
        return None

    def _summary_info(self):
        """``{label: text}``: the facts above the regression table."""
        return {}

    def _terms(self):
        """The model's terms (:class:`Term`): its design's when known
        (``term_structure``), else statsmodels' names grouped (``C(sex)[T.M]``
        with ``C(sex)[T.F]``), any other name its own term."""
        if self.term_structure is not None:
            return self.term_structure
        return [Term(name, name, [(member, None) for member in members],
                     kind="categorical" if len(members) > 1 else "numeric",
                     factors=frozenset() if name in INTERCEPT_NAMES else frozenset([name]))
                for name, members in term_groups(self._estimates().names).items()]

    # -- the numbers ---------------------------------------------------------
    def _wald(self, alpha=0.05, use_t=False):
        """``(estimates, bse, statistic, pvalue, intervals, df)`` as arrays."""
        est = self._estimates()
        variances = np.diag(np.asarray(est.cov, dtype=float))
        # a covariance that is not positive on its diagonal (a boundary) has no SE there
        bse = np.sqrt(np.where(variances > 0, variances, np.nan))
        statistic = np.asarray(est.params, dtype=float) / bse
        df = self._df_inference(use_t)
        p = (2.0 * stats.norm.sf(np.abs(statistic)) if df is None
             else 2.0 * stats.t.sf(np.abs(statistic), df))
        intervals = wald_intervals(np.asarray(est.params, dtype=float), bse, alpha, df)
        return est, bse, statistic, p, intervals, df

    # -- the regression table ------------------------------------------------
    def summary_frame(self, alpha=0.05, use_t=False, exponentiate=False):
        """The regression table as numbers: estimate, standard error, statistic,
        p-value and interval per parameter, with the model's column names.

        Parameters
        ----------
        alpha : float, default=0.05
            One minus the confidence level of the intervals.
        use_t : bool, default=False
            Student's t (where the model has its degrees of freedom).
        exponentiate : bool, default=False
            ``exp(coef)`` and the exponentiated interval in place of the
            coefficient (where ``exp(coef)`` is a ratio); the standard error,
            statistic and p stay the coefficient's.

        Returns
        -------
        table : pandas.DataFrame
        """
        est, bse, statistic, p, ci, df = self._wald(alpha, use_t)
        params = np.asarray(est.params, dtype=float)
        z = "z" if df is None else "t"
        index = pd.Index([str(n) for n in est.names])
        if self._table_style == "lifelines":
            level = f"{100 * (1 - alpha):g}%"
            columns = {"coef": params, "exp(coef)": np.exp(params), "se(coef)": bse,
                       f"coef lower {level}": ci[:, 0], f"coef upper {level}": ci[:, 1],
                       f"exp(coef) lower {level}": np.exp(ci[:, 0]),
                       f"exp(coef) upper {level}": np.exp(ci[:, 1]), z: statistic, "p": p}
            return pd.DataFrame(columns, index=index.rename("covariate"))
        label = "coef" if self._table_style == "statsmodels" else "Coef."
        if exponentiate:
            if self._measure() is None:
                raise ValueError(f"exponentiate=True is for models whose exp(coef) is a ratio "
                                 f"(log and logit links, Cox); {type(self).__name__}'s is not.")
            params, ci, label = np.exp(params), np.exp(ci), "exp(coef)"
        se = "std err" if self._table_style == "statsmodels" else "Std.Err."
        lo, hi = f"[{alpha / 2:g}", f"{1 - alpha / 2:g}]"
        return pd.DataFrame({label: params, se: bse, z: statistic, f"P>|{z}|": p,
                             lo: ci[:, 0], hi: ci[:, 1]}, index=index)

    def summary(self, alpha=0.05, use_t=False, exponentiate=False):
        """The regression table with its header facts.

        Parameters
        ----------
        alpha, use_t, exponentiate
            As :meth:`summary_frame`.

        Returns
        -------
        summary : Summary
            A ``pandas.DataFrame`` (the table, as :meth:`summary_frame`) that
            also carries ``title`` and ``info``; ``print(summary)`` shows
            statsmodels' ``summary2`` layout.
        """
        return Summary(self.summary_frame(alpha, use_t, exponentiate),
                       title=self._summary_title, info=self._summary_info(),
                       digits=self._summary_digits)

    # -- the journal table and the forest plot --------------------------------
    def journal_table(self, alpha=0.05, *, labels=None, decimals=None, use_t=False):
        """The table a journal prints: one "OR (95% CI)" column (HR, RR, or the
        coefficient for an identity link), a p column, reference-level rows and
        a joint p per multi-column term.

        Parameters
        ----------
        alpha : float, default=0.05
        labels : dict, default=None
            Readable names by column or term (``{"horTh": "Hormone therapy"}``);
            levels keep their own names.
        decimals : int, default=None
            The estimates' decimals: by default two significant digits of the
            narrowest interval, from 2 to 3.
        use_t : bool, default=False

        Returns
        -------
        table : pandas.DataFrame
            Strings; index the rows' labels (a multi-level term's levels
            indented under its name); ``table.attrs["measure"]``.
        """
        return journal_rows(self, alpha, labels or {}, decimals, use_t)

    def wald_test(self, R, q=None, use_f=False):
        """Wald test of the linear hypothesis ``R params = q``.

        statsmodels' ``wald_test(R, q, scalar=True)``, from the fit's
        estimates and their covariance (no site is asked anything).

        Parameters
        ----------
        R : str, list of str or array-like
            A matrix with one column per parameter (in the order of the
            estimates); a list of parameter names (all of them zero: the
            joint test of a categorical's dummies); or statsmodels' string
            syntax on the parameters' names (``"x1 = 0, x2 = x3"``, read by
            patsy).
        q : array-like, default=None
            Right-hand side for a matrix ``R`` (zeros by default).
        use_f : bool, default=False
            The F test: the statistic over the number of constraints ``J``,
            compared with ``F(J, df)`` (``df`` as ``conf_int(use_t=True)``);
            else chi2 with ``J`` degrees of freedom (statsmodels' default for
            GLMs).

        Returns
        -------
        result : WaldTestResult
            ``statistic``, ``pvalue``, ``df_num``, ``df_denom``, ``distribution``.
        """
        est = self._estimates()
        R, q = linear_hypothesis(R, est.names, q)
        return wald_test_from(est.params, est.cov, R, q, use_f=use_f,
                              df_denom=self._df_inference(use_f))

    def wald_test_terms(self, terms=None, use_f=False):
        """Joint Wald tests that all parameters of a term are zero, one per term.

        statsmodels' ``wald_test_terms(scalar=True)``.

        Parameters
        ----------
        terms : dict, default=None
            ``{term: [parameter names]}``. By default the model's terms: a
            formula's, else statsmodels' names grouped by term (``C(sex)[T.M]``
            and ``C(sex)[T.O]`` form the term ``C(sex)``; any other name is its
            own term).
        use_f : bool, default=False
            F tests instead of chi2 (as :meth:`wald_test`).

        Returns
        -------
        table : pandas.DataFrame
            One row per term: ``statistic``, ``pvalue``, ``df_constraint``
            (and ``df_denom`` for F tests).
        """
        if terms is None:
            terms = {t.name: [c for c, _ in t.columns] for t in self._terms()}
        rows = {}
        for term, members in dict(terms).items():
            result = self.wald_test(list(members), use_f=use_f)
            rows[term] = {"statistic": result.statistic, "pvalue": result.pvalue,
                          "df_constraint": result.df_num}
            if use_f:
                rows[term]["df_denom"] = result.df_denom
        return pd.DataFrame.from_dict(rows, orient="index")

    def anova_wald(self, typ=2):
        """Wald tests per term, R's ``car::Anova(model, type=typ, test.statistic="Wald")``.

        Type II tests each term after all the others but those containing it
        (its interactions), respecting marginality; type III tests each term's
        coefficients jointly zero, the intercept too. Without interactions the
        two agree with :meth:`wald_test_terms`.

        Parameters
        ----------
        typ : {2, 3}, default=2

        Returns
        -------
        table : pandas.DataFrame
            One row per term: ``Chisq``, ``Df``, ``Pr(>Chisq)``.
        """
        est = self._estimates()
        terms = [(t.name, set(t.factors), [c for c, _ in t.columns]) for t in self._terms()]
        return anova_wald_table(np.asarray(est.params, dtype=float),
                                np.asarray(est.cov, dtype=float),
                                [str(n) for n in est.names], terms, typ)

    def _forest_rows(self, alpha=0.05, labels=None):
        """``(names, estimates, lower, upper)`` on the model's scale, for the forest
        plot (:func:`skfed.plotting.plot_forest` draws them), each row named as a
        reader reads it (``Hormone therapy: yes vs no``): a spline's basis columns
        are no effect a reader can read, so they are left out (its effect is a
        curve: :func:`skfed.plotting.plot_effect`)."""
        est, _, _, _, ci, _ = self._wald(alpha)
        terms = self._terms()
        basis = {c for t in terms if t.kind == "spline" for c, _ in t.columns}
        readable = column_labels(terms, labels or {})
        keep = [k for k, n in enumerate(est.names) if str(n) not in basis]
        return ([readable.get(str(est.names[k]), str(est.names[k])) for k in keep],
                np.asarray(est.params, float)[keep], ci[keep, 0], ci[keep, 1])


class EstimatorWald(ModelResults):
    """Wald inference of a fitted estimator (``params_``, ``cov_params_``,
    ``param_names_``, ``cov_type``, ``n_clients_``), scikit-learn's way:
    arrays, trailing underscores."""

    _summary_title = "Regression Results"

    def _estimates(self):
        return Estimates(np.asarray(self.params_, dtype=float),
                         np.asarray(self.cov_params_, dtype=float), list(self.param_names_))

    def _df_inference(self, use_t):
        """Degrees of freedom of Student's t (and of the F tests' denominator): the
        number of sites minus one for ``cov_type="cluster"`` (statsmodels'
        ``df_correction=True``); ``None`` without ``use_t``."""
        if not use_t:
            return None
        if self.cov_type == "cluster":
            return float(self.n_clients_ - 1)
        raise ValueError(f"{type(self).__name__}: use_t (and use_f) is for "
                         "cov_type='cluster' here: Student's t (F) with the number of sites "
                         "minus one degrees of freedom; this model's tests are normal (chi2).")

    @property
    def bse_(self):
        """Standard errors, in the order of ``params_``."""
        return self._wald()[1]

    @property
    def tvalues_(self):
        """Wald statistics ``params_ / bse_`` (z: compared with the normal)."""
        return self._wald()[2]

    @property
    def pvalues_(self):
        """Two-sided p-values of the z statistics."""
        return self._wald()[3]

    def conf_int(self, alpha=0.05, use_t=False):
        """Wald confidence intervals ``params_ -+ c bse_``.

        Parameters
        ----------
        alpha : float, default=0.05
            One minus the confidence level.
        use_t : bool, default=False
            ``c`` from Student's t (statsmodels' ``use_t=True``): with the
            number of sites minus one degrees of freedom for
            ``cov_type="cluster"``, the residual degrees of freedom otherwise
            (GLMs only); else from the normal.

        Returns
        -------
        intervals : ndarray of shape (n_params, 2)
            Lower and upper bounds, in the order of ``params_``.
        """
        return self._wald(alpha, use_t)[4]


class LabelledResults(ModelResults):
    """Wald inference of a results object, statsmodels' way: pandas objects indexed by
    the parameters' names (``tvalues``, ``pvalues``, ``conf_int()``...)."""

    def _labelled(self, values):
        return pd.Series(np.asarray(values, dtype=float),
                         index=[str(n) for n in self._estimates().names])

    @property
    def tvalues(self):
        """Wald z statistics (``pandas.Series``)."""
        return self._labelled(self._wald()[2])

    @property
    def pvalues(self):
        """Two-sided normal p-values (``pandas.Series``)."""
        return self._labelled(self._wald()[3])

    def conf_int(self, alpha=0.05, use_t=False):
        """Wald confidence intervals (columns ``0`` and ``1``, as statsmodels').

        Parameters
        ----------
        alpha : float, default=0.05
        use_t : bool, default=False
            Student's t quantiles where the model has its degrees of freedom
            (cluster-robust errors from few sites).

        Returns
        -------
        pandas.DataFrame
        """
        ci = self._wald(alpha, use_t)[4]
        return pd.DataFrame(ci, index=[str(n) for n in self._estimates().names])


class FixedResults(LabelledResults):
    """A results object from numbers: estimates, their covariance and names, and what
    ``exp(coef)`` is (the command line's tables on the original columns, a fit mapped
    back from standardized columns).

    Parameters
    ----------
    params : array-like of shape (n_params,)
    cov : array-like of shape (n_params, n_params)
    names : list of str
    measure : str, default=None
        ``"odds ratio"``, ``"rate ratio"``, ``"ratio of means"``, ``"hazard ratio"``
        or ``None`` (no ratio).
    table_style : {"statsmodels", "lifelines"}, default="statsmodels"
    title : str, default="Regression Results"
    info : dict, default=None
    """

    def __init__(self, params, cov, names, *, measure=None, table_style="statsmodels",
                 title="Regression Results", info=None):
        self._fixed = Estimates(np.asarray(params, dtype=float), np.asarray(cov, dtype=float),
                                [str(n) for n in names])
        self.measure, self._table_style = measure, table_style
        self._summary_title, self._info = title, dict(info or {})

    def _estimates(self):
        return self._fixed

    def _measure(self):
        return self.measure

    def _summary_info(self):
        return dict(self._info)

    @property
    def params(self):
        """The estimates (``pandas.Series``)."""
        return self._labelled(self._fixed.params)

    @property
    def bse(self):
        """Standard errors (``pandas.Series``)."""
        return self._labelled(self._wald()[1])


class Summary(pd.DataFrame):
    """A regression table (a ``pandas.DataFrame``) with its title and header facts.

    ``print(summary)`` shows statsmodels' ``summary2`` layout: the title, the
    facts in two columns, the table with ``digits`` decimals (NaN blank).
    ``summary.table`` is the plain table; slices are plain DataFrames.
    """

    _metadata = ["title", "info", "digits"]

    def __init__(self, table, *, title="", info=None, digits=4):
        super().__init__(table)
        self.title, self.info, self.digits = title, dict(info or {}), int(digits)

    @property
    def _constructor(self):
        return pd.DataFrame

    @property
    def table(self):
        """The table alone (``pandas.DataFrame``)."""
        return pd.DataFrame(self)

    def as_text(self):
        """The summary as text (statsmodels' ``summary2`` layout)."""
        from ._summary_text import summary_text

        return summary_text(self.title, self.info, self.table, self.digits)

    def __str__(self):
        return self.as_text()

    def __repr__(self):
        return self.as_text()

    def _repr_html_(self):
        facts = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in self.info.items())
        head = f"<p><b>{self.title}</b></p>" + (f"<table>{facts}</table>" if facts else "")
        return head + self.table.to_html(float_format=lambda v: f"{v:.{self.digits}f}",
                                         na_rep="")


__all__ = ["Estimates", "EstimatorWald", "FixedResults", "LabelledResults", "ModelResults",
           "Summary", "Term",
           "INTERCEPT_NAMES"]
