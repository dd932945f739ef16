"""FedMNLogit: the multinomial logit, as statsmodels' ``MNLogit``, on the pooled rows of
the sites, with its table per outcome level."""

import numpy as np
import pandas as pd
from scipy import special
from sklearn.utils.validation import check_is_fitted

from ..stats._results import FixedResults, Summary
from ..stats._summary_text import summary_text
from ._fit import DiscreteModel, newton, with_shared_params
from ._site import site_mnlogit_terms


class LevelSummary(Summary):
    """A multinomial logit's table: rows indexed by (outcome level, parameter);
    ``print`` shows one block per level below the header facts (statsmodels'
    layout)."""

    def as_text(self):
        blocks = []
        for k, level in enumerate(dict.fromkeys(self.index.get_level_values(0))):
            table = self.table.xs(level, level=0).rename_axis(None)
            table.index = [str(n) for n in table.index]
            text = summary_text(self.title if k == 0 else "", self.info if k == 0 else {},
                                table.rename(columns={table.columns[0]: f"{level}: "
                                                      f"{table.columns[0]}"}), self.digits)
            blocks.append(text if k == 0 else text.split("\n", 2)[2])
        return "".join(blocks)


def level_frame(model, frame):
    """``frame`` (one row per parameter, in the model's order) indexed by (outcome level,
    parameter)."""
    names = list(model.exog_names_)
    keys = [(f"{model.endog_name_}={level}", name) for level in model.levels_[1:]
            for name in names]
    frame = frame.copy()
    frame.index = pd.MultiIndex.from_tuples(keys, names=["level", "parameter"])
    return frame


def level_results(model, level, alpha=0.05):
    """One outcome level's coefficients (against the reference) as a results object:
    its Wald table, intervals and forest plot (``skfed.plotting.plot_forest``)."""
    check_is_fitted(model)
    levels = [str(v) for v in model.levels_]
    if str(level) not in levels[1:]:
        raise ValueError(f"level {level!r} is not a modelled level; the levels are "
                         f"{levels[1:]} (against the reference {levels[0]!r}).")
    k, p = levels.index(str(level)) - 1, len(model.exog_names_)
    rows = slice(k * p, (k + 1) * p)
    return FixedResults(model.params_[rows], model.cov_params_[rows, rows],
                        list(model.exog_names_), measure="odds ratio",
                        title=f"{model.endog_name_}={level} against "
                              f"{model.endog_name_}={levels[0]}",
                        info=model._summary_info())


class FedMNLogit(DiscreteModel):
    """Multinomial logit over the sites: statsmodels' ``MNLogit`` on the pooled rows.

    ``P(y = j | x) = exp(x'b_j) / sum_k exp(x'b_k)`` with ``b_0 = 0`` for the
    reference level, the first of the sorted levels. The parameters are
    statsmodels': one coefficient vector per other level, level by level
    (``params_``, named ``"x1[y=2]"``; :meth:`summary` shows one block per
    level). Fitted by Newton's method on the pooled log-likelihood, whose
    value, gradient and Hessian the sites send as sums over their rows;
    standard errors from the pooled observed information.

    Parameters
    ----------
    fit_intercept : bool, default=True
        A constant column (``const``, as statsmodels' ``add_constant``) before
        the covariates.
    {shared}

    Attributes
    ----------
    params_ : ndarray of shape ((n_levels - 1) * n_params,)
        Level by level (statsmodels' ``params.ravel(order="F")``).
    param_names_ : list of str
    cov_params_, bse_, tvalues_, pvalues_ : ndarray
    coef_ : ndarray of shape (n_levels - 1, n_features)
    intercept_ : ndarray of shape (n_levels - 1,)
    levels_ : ndarray
        The outcome's levels, the reference first.
    {shared_attributes}

    Examples
    --------
    >>> import numpy as np
    >>> from skfed import FedMNLogit
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2))
    >>> y = rng.choice(["a", "b", "c"], 300)
    >>> model = FedMNLogit().fit(X, y, clients=rng.integers(0, 3, 300))
    >>> model.param_names_[:3]
    ['const[y=b]', 'x1[y=b]', 'x2[y=b]']
    """

    _parameter_constraints = {**DiscreteModel._parameter_constraints,
                              "fit_intercept": ["boolean"]}
    _summary_title = "MNLogit Regression Results"
    _model_name = "MNLogit"

    def __init__(self, *, fit_intercept=True, levels=None, cov_type="nonrobust", tol=1e-16,
                 max_rounds=100, privacy=None):
        self.fit_intercept = fit_intercept
        self.levels = levels
        self.cov_type = cov_type
        self.tol = tol
        self.max_rounds = max_rounds
        self.privacy = privacy

    def _design_names(self, names):
        return (["const"] if self.fit_intercept else []) + names

    def _added_columns(self):
        return int(self.fit_intercept)

    def _newton(self, session, response, levels, p):
        start = np.zeros(p * (len(levels) - 1))
        return newton(self._evaluator(session, response, levels), start, lambda z: True,
                      self.tol, self.max_rounds)

    def _null_problem(self, p, levels, names):
        """The intercepts alone (statsmodels' null model), where the design has one."""
        constant = [k for k, name in enumerate(names) if name in ("const", "Intercept")]
        if not constant:
            return None
        free = np.zeros((len(levels) - 1, p), dtype=bool)
        free[:, constant[0]] = True
        return np.zeros(free.size), free.ravel()

    def _round(self, response, levels, z):
        return site_mnlogit_terms, (response, levels, bool(self.fit_intercept), z)

    def _to_params(self, z, grad, hess, p):
        return z.copy(), np.asarray(hess)

    @staticmethod
    def _jacobian(z, p):
        return np.eye(len(z))

    def _meat_args(self, response, levels, z):
        return "mnlogit", response, levels, "logit", bool(self.fit_intercept), z

    def _param_names(self, names, levels, endog):
        return [f"{name}[{endog}={level}]" for level in levels[1:] for name in names]

    def _record(self, dataset, session, fitted, levels, names, endog):
        super()._record(dataset, session, fitted, levels, names, endog)
        B = self.params_.reshape(len(levels) - 1, len(names))
        self.intercept_ = B[:, 0].copy() if self.fit_intercept else np.zeros(len(B))
        self.coef_ = B[:, int(self.fit_intercept):].copy()

    def _measure(self):
        return "odds ratio"

    def summary(self, alpha=0.05, use_t=False, exponentiate=False):
        """The regression table, one block per outcome level (statsmodels' layout).

        Parameters
        ----------
        alpha : float, default=0.05
        use_t : bool, default=False
            Not available (the tests are normal).
        exponentiate : bool, default=False
            ``exp(coef)``: each level's odds against the reference.

        Returns
        -------
        summary : LevelSummary
            A ``pandas.DataFrame`` indexed by (level, parameter).
        """
        frame = level_frame(self, self.summary_frame(alpha, use_t, exponentiate))
        return LevelSummary(frame, title=self._summary_title, info=self._summary_info(),
                            digits=self._summary_digits)

    def level_results(self, level, alpha=0.05):
        """One outcome level's coefficients against the reference level.

        Parameters
        ----------
        level : object
            A level other than the reference (``levels_[0]``).
        alpha : float, default=0.05

        Returns
        -------
        results : FixedResults
            ``params``, ``bse``, ``conf_int()``, ``summary()``, ``wald_test``;
            ``skfed.plotting.plot_forest(results)`` draws its odds ratios.
        """
        return level_results(self, level, alpha)

    def _proba(self, F):
        eta = np.column_stack([np.zeros(len(F)), F @ self.coef_.T + self.intercept_])
        return special.softmax(eta, axis=1)


with_shared_params(FedMNLogit, ", the reference",
                   exog='``"const"`` first with ``fit_intercept``')
