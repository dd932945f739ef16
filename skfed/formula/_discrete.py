"""``ordinal`` and ``mnlogit``: statsmodels' ``OrderedModel.from_formula`` and
``smf.mnlogit`` over the sites.

The response is a column of the sites' tables: each site keeps it beside the
design (a kept column, so a row missing it is dropped with the incomplete ones),
its levels come from the sites (:func:`~skfed.formula._design.site_levels`, each
held by ``min_level_count`` rows at a site), and the estimator
(:class:`~skfed.discrete.FedOrderedModel`, :class:`~skfed.discrete.FedMNLogit`)
codes it at each site by the pooled levels.
"""

import pandas as pd

from ..discrete import FedMNLogit, FedOrderedModel
from ..discrete._fit import pooled_levels
from ..discrete._mnlogit import LevelSummary, level_frame
from ..federation.session import FederationSession
from ._design import complete_rows, site_levels
from ._errors import FormulaError
from ._models import _build, _schema, formula_dataset
from ._parse import parse_formula
from ._results import FormulaResults


def _response_column(parsed, formula, kinds):
    if len(parsed.lhs) != 1 or parsed.lhs[0].strip() not in kinds:
        raise FormulaError(f"the left of '~' in {formula!r} is the outcome: one column of "
                           f"the data (its columns: {list(kinds)}).")
    return parsed.lhs[0].strip()


def _outcome_levels(complete, response, min_level_count, levels=None):
    """The outcome's pooled levels: in the order of ``levels``, or of a categorical's
    declared categories (the same at every site), else sorted; every level in that
    order held by some site."""
    session = FederationSession.for_dataset(complete)
    replies = session.per_site(site_levels, [response], int(min_level_count), phase="setup")
    declared = [r[response]["declared"] for r in replies]
    order = (list(levels) if levels is not None else declared[0]
             if declared[0] is not None and all(d == declared[0] for d in declared) else None)
    try:
        return pooled_levels([r[response]["levels"] for r in replies], order)
    except ValueError as exc:
        raise FormulaError(f"the outcome {response!r}: {exc}") from None


def _fit(estimator, formula, data, clients, min_level_count, intercept, levels):
    parsed = parse_formula(formula)
    dataset = formula_dataset(data, clients)[0]
    kinds = _schema(dataset)
    response = _response_column(parsed, formula, kinds)
    # the ordinal model's covariates are coded as with an intercept, then dropped
    terms = parsed.terms if intercept else [()] + [t for t in parsed.terms if t]
    design, rows, design_data, session = _build(
        parsed, dataset, terms, None, keep=[response], min_level_count=min_level_count,
        drop_intercept=not intercept)
    # on the complete rows as the sites hold them (a categorical keeps its declared order)
    levels = _outcome_levels(dataset.apply(complete_rows, design), response, min_level_count,
                             levels)
    names = [c["name"] for c in design["columns"]]
    estimator.fit_sites(design_data, response, levels, names, endog=response)
    return design, rows, design_data, session


class DiscreteResults(FormulaResults):
    """A fitted ordinal or multinomial formula model: the estimator's numbers with the
    design's names (statsmodels' ``llf``, ``aic``, ``bic``, ``nobs``)."""

    @property
    def llf(self):
        """The log-likelihood at the fit."""
        return self.estimator.llf_

    @property
    def aic(self):
        """``-2 llf + 2 k``."""
        return self.estimator.aic_

    @property
    def bic(self):
        """``-2 llf + k log(nobs)``."""
        return self.estimator.bic_

    @property
    def llnull(self):
        """The null model's log-likelihood (thresholds, or intercepts, alone)."""
        return self.estimator.llnull_

    @property
    def llr_pvalue(self):
        """The likelihood-ratio test against the null model: its p-value."""
        return self.estimator.llr_pvalue_

    @property
    def prsquared(self):
        """McFadden's pseudo R-squared, ``1 - llf / llnull``."""
        return self.estimator.prsquared_

    @property
    def nobs(self):
        """The rows used (complete cases)."""
        return self.estimator.nobs_

    @property
    def levels(self):
        """The outcome's levels, in order (the reference first)."""
        return list(self.estimator.levels_)

    def predict(self, data):
        """Each level's probability for new rows (statsmodels' ``predict``).

        Parameters
        ----------
        data : pandas.DataFrame
            New rows with the formula's columns (its outcome not needed).

        Returns
        -------
        pandas.DataFrame
            One column per level; the complete rows of ``data`` (by its index).
        """
        matrix, index, _ = self._design_of(data)
        return pd.DataFrame(self.estimator.predict_proba(matrix), index=index,
                            columns=self.levels)


class OrdinalResults(DiscreteResults):
    """:func:`ordinal`'s results (the thresholds after the coefficients)."""

    def _forest_rows(self, alpha=0.05, labels=None):
        names, est, lo, hi = super()._forest_rows(alpha, labels)
        k = len(self.estimator.levels_) - 1
        return names[:-k], est[:-k], lo[:-k], hi[:-k]


    def brant_test(self):
        """Brant's test of the proportional-odds assumption on the fit's rows at the
        sites (R's ``car::poTest``; :meth:`~skfed.discrete.FedOrderedModel.brant_test`).

        Returns
        -------
        pandas.DataFrame
        """
        from ..discrete._brant import brant_test

        model = self.estimator
        if model.distr != "logit":
            raise ValueError("Brant's test is for the logit link, as car::poTest.")
        with model._session(self.training_data) as session:
            return brant_test(session, model.endog_name_, list(model.levels_),
                              list(model.exog_names_), tol=model.tol,
                              max_rounds=model.max_rounds)


class MNLogitResults(DiscreteResults):
    """:func:`mnlogit`'s results: one table block per outcome level."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.term_structure = None  # a covariate's terms span every level: x[y=b], x[y=c]

    def summary(self, alpha=0.05, use_t=False, exponentiate=False):
        """The regression table, one block per outcome level (statsmodels' layout).

        Parameters
        ----------
        alpha : float, default=0.05
        use_t : bool, default=False
        exponentiate : bool, default=False

        Returns
        -------
        LevelSummary
        """
        frame = level_frame(self.estimator, self.summary_frame(alpha, use_t, exponentiate))
        return LevelSummary(frame, title=self._summary_title, info=self._summary_info(),
                            digits=self._summary_digits)

    def level_results(self, level, alpha=0.05):
        """One outcome level's coefficients against the reference (a results object
        whose forest plot ``skfed.plotting.plot_forest`` draws).

        Parameters
        ----------
        level : object
        alpha : float, default=0.05

        Returns
        -------
        FixedResults
        """
        return self.estimator.level_results(level, alpha)


def ordinal(formula, data, *, distr="logit", levels=None, cov_type="nonrobust", clients=None,
            min_level_count=5, tol=1e-16, max_rounds=100, privacy=None):
    """Fit a proportional-odds model from a formula over the sites: statsmodels'
    ``OrderedModel.from_formula(formula, data, distr=...)`` on the pooled rows.

    The covariates are coded as with an intercept, which is then dropped (the
    thresholds take its place), as statsmodels does; rows with a missing value
    are dropped at each site.

    Parameters
    ----------
    formula : str
        ``"grade ~ age + C(sex)"``: the outcome is a column (numbers, text, or a
        pandas ordered categorical, whose order is kept; otherwise sorted).
    data : pandas.DataFrame or FederatedDataset
    distr : {"logit", "probit"}, default="logit"
    levels : list, default=None
        The outcome's levels in order, lowest first: needed for text the sites
        read from their files (no categorical order there). ``None``: an
        ordered categorical's order, else sorted.
    cov_type : {"nonrobust", "HC0", "cluster"}, default="nonrobust"
        As :class:`~skfed.discrete.FedOrderedModel` (``"cluster"``: the sites).
    clients : str or array-like, default=None
    min_level_count : int, default=5
        A site refuses to name the levels of a column (the outcome's too) when
        one of them is held by fewer of its rows.
    tol, max_rounds, privacy
        As :class:`~skfed.discrete.FedOrderedModel`.

    Returns
    -------
    OrdinalResults
        ``params``, ``bse``, ``pvalues``, ``conf_int()``, ``llf``, ``summary()``,
        ``wald_test()``, the ``estimator`` and the ``design``.
    """
    estimator = FedOrderedModel(distr, cov_type=cov_type, tol=tol, max_rounds=max_rounds,
                                privacy=privacy)
    design, rows, design_data, session = _fit(estimator, formula, data, clients,
                                              min_level_count, False, levels)
    return OrdinalResults(formula, estimator, design, rows, session.ledger.as_dict(),
                          training_data=design_data)


def mnlogit(formula, data, *, levels=None, cov_type="nonrobust", clients=None,
            min_level_count=5, tol=1e-16, max_rounds=100, privacy=None):
    """Fit a multinomial logit from a formula over the sites: statsmodels'
    ``smf.mnlogit(formula, data)`` on the pooled rows (the first level the
    reference).

    Parameters
    ----------
    formula : str
        ``"outcome ~ age + C(sex)"`` (the outcome numbers or text).
    data : pandas.DataFrame or FederatedDataset
    levels : list, default=None
        The outcome's levels, the reference first (``None``: sorted).
    cov_type : {"nonrobust", "HC0", "cluster"}, default="nonrobust"
        As :class:`~skfed.discrete.FedMNLogit` (``"cluster"``: the sites).
    clients : str or array-like, default=None
    min_level_count : int, default=5
    tol, max_rounds, privacy
        As :class:`~skfed.discrete.FedMNLogit`.

    Returns
    -------
    MNLogitResults
        Parameters named ``"age[outcome=b]"``, level by level; ``summary()``
        one block per level; ``level_results(level)`` one level's table and
        forest plot.
    """
    estimator = FedMNLogit(fit_intercept=False, cov_type=cov_type, tol=tol,
                           max_rounds=max_rounds, privacy=privacy)
    design, rows, design_data, session = _fit(estimator, formula, data, clients,
                                              min_level_count, True, levels)
    return MNLogitResults(formula, estimator, design, rows, session.ledger.as_dict(),
                          training_data=design_data)


__all__ = ["ordinal", "mnlogit", "OrdinalResults", "MNLogitResults"]
