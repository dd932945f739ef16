"""Federated Cox proportional hazards regression."""

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..federation.session import FederationSession
from ..base import FederatedLinearModel, fit_all_or_nothing
from ..data import FederatedDataset
from ..data.site import Targets
from ..datafits.cox import CoxPartialLikelihood
from ..federation.clients import describe_label
from ..federation.layout import Layout
from ..penalties import ElasticNet
from ..solvers.newton import FedNewton
from ..solvers.risk_sets import RiskSetNewton
from ._baseline import BaselineMixin, _strata_spec
from ._concordance import concordance_index
from ._inference import CoxInferenceMixin
from ._pairs import concordance_counts, index_from_counts
from ._site import move_strata_to_target, site_event_times, site_stratum_levels
from ._target import split_survival

COV_TYPES = ("nonrobust", "robust", "cluster")


class FedCoxPH(CoxInferenceMixin, BaselineMixin, FederatedLinearModel):
    """Federated Cox proportional hazards regression (the pooled partial likelihood).

    Minimizes ``-(1/W) log PL(beta) + alpha (l1_ratio ||beta||_1 + (1 - l1_ratio)
    / 2 ||beta||^2)``, with ``W`` the sum of the sample weights and ``PL`` the
    partial likelihood with Breslow's or Efron's handling of tied times
    (lifelines' weighted Efron), by federated Newton's method: a handful of
    rounds. With ``alpha=0`` the fit is lifelines' ``CoxPHFitter`` on the
    pooled rows, with its standard errors.

    Parameters
    ----------
    alpha : float, default=0.0
        Penalty strength (>= 0). lifelines' ``penalizer`` penalizes the
        coefficients of the *standardized* covariates, ``n`` (rows) times:
        its ``penalizer=a`` is ``alpha = a n / W`` on covariates standardized
        first (``skfed.preprocessing.FedStandardScaler``; lifelines uses the
        sample standard deviation).
    l1_ratio : float in [0, 1], default=0.0
        The L1 share of the penalty (the elastic net); with an L1 part the
        Newton step solves an L1 sub-problem (exact zeros in ``coef_``).
    ties : {"efron", "breslow"}, default="efron"
        Tied event times: Efron's approximation (lifelines, R's default) or
        Breslow's (statsmodels' and scikit-survival's default).
    strata : None, "site", str, int or list, default=None
        ``None``: one baseline hazard shared by all sites. ``"site"``: each
        site its own baseline; the partial likelihood then separates by site,
        so each site sends only its gradient and Hessian and no event time
        leaves it. A column (a DataFrame column name, or an index of ``X``'s
        columns): one baseline per level of the column, shared across sites;
        the column is not a covariate (with a ``FederatedDataset`` each
        site moves it out of its covariates; at a site service every level
        must hold ``min_level_count`` rows). ``["site", column]``: both.
    time_grid : None, array-like or int, default=None
        ``None``: exact event times. A shared baseline then needs, each
        round, every site's risk-set sums at the pooled distinct event times
        (the event times leave the sites; see Notes). Cut points ``c_1 <
        ... < c_m``: each time is replaced by its interval ``(c_{k-1},
        c_k]`` before the fit, which is then the exact Cox fit of the
        grouped times (ties in an interval handled by ``ties``); only
        interval indices leave a site. An int ``k``: ``k`` intervals cut at
        the quantiles of the pooled event times (from the sites' event
        tables, coarsened at a site service to its ``min_level_count``).
        With ``strata="site"`` the fit stays exact (no risk set crosses a
        site) and the grid is only where each site reports its baseline
        hazard (else at its own event times; a site service that does not
        allow event times reports it at cut points it chooses, each interval
        holding ``min_level_count`` of its events and rows, and refuses a grid
        that breaks that rule, naming the rule only).
    cov_type : {"nonrobust", "robust", "cluster"}, default="nonrobust"
        ``"nonrobust"``: the inverse observed information (lifelines'
        default). ``"robust"``: the sandwich from the rows' score residuals
        (lifelines' ``robust=True``; at tied times the residuals see whole
        risk sets, as statsmodels' ``PHReg``, where lifelines breaks ties by
        row order). ``"cluster"``: the sandwich with the
        sites as clusters (lifelines' ``cluster_col`` with the site; no
        small-sample correction, as lifelines).
    solver : "auto", "newton" or FedNewton, default="auto"
        Newton's method. For a shared baseline the rounds carry risk-set
        sums (:class:`~skfed.solvers.risk_sets.RiskSetNewton`); with
        ``strata="site"`` each site's gradient and Hessian
        (:class:`~skfed.solvers.FedNewton`).
    max_rounds : int, default=50
    tol : float, default=1e-8
        Stop when the proximal-gradient mapping's norm is ``tol`` times its
        value at zero and Newton's predicted decrease is below ``tol**2``
        times the objective.
    monitor_every : int, default=1
        As the other estimators (Newton's replies carry the monitor).
    privacy : SecureAggregation or None, default=None
        Secure aggregation of the sites' replies: the server decodes only
        the sums over sites (of the gradients and Hessians with
        ``strata="site"``; of the risk-set sums with a shared baseline, whose
        pooled event times or grid intervals are still exchanged in the
        clear). Differential privacy is refused.
    executor : {"sequential", "threads", "loky", "dask"} or Executor, default="sequential"
    n_jobs : int or None, default=None
    random_state : int, RandomState or None, default=None
    verbose : int, default=0
    warm_start : bool, default=False

    Attributes
    ----------
    coef_ : ndarray of shape (n_covariates,)
        Log hazard ratios.
    hazard_ratios_ : ndarray of shape (n_covariates,)
    bse_, tvalues_, pvalues_ : ndarray of shape (n_covariates,)
        Standard errors (``cov_type``), z statistics and two-sided p-values.
        After a ridge fit (``alpha > 0``, ``l1_ratio=0``) they are
        lifelines': from the penalized information (the estimate is shrunk
        toward zero, so they describe its spread, not its error); with an
        L1 part there are none (reading them raises an error saying why).
    cov_params_ : ndarray of shape (n_covariates, n_covariates)
    loglike_, loglike_null_ : float
        The log partial likelihood at the fit and at ``coef_ = 0``
        (lifelines' ``log_likelihood_`` and its null model's).
    baseline_times_ : dict
        ``{stratum: times}`` of Breslow's baseline hazard (the pooled event
        times, or the grid's interval ends, or with ``strata="site"`` the cut
        points a site service chose), when it was estimated.
    baseline_cumulative_hazard_ : dict
        ``{stratum: cumulative hazard at baseline_times_}`` (covariates 0).
    strata_ : list
        The strata labels: sites (``strata="site"``), column levels, or
        ``(site, level)`` pairs; ``[None]`` without strata.
    n_events_ : int
    n_iter_ : int
        Newton rounds run.
    objective_ : float
        The final objective (mean loss plus penalty).
    history_ : ConvergenceHistory
        Per-round objective, stationarity and bytes; ``inference_bytes``
        and ``inference_rounds`` for the pass at the optimum.
    solver_ : FederatedSolver
    clients_ : ndarray
    n_clients_ : int
    n_features_in_ : int
        Covariates (the strata column excluded).
    feature_names_in_ : ndarray of str
        Defined when ``X`` has feature names.

    See Also
    --------
    skfed.stats.kaplan_meier, skfed.stats.logrank_test

    Notes
    -----
    *What leaves a site.* With ``strata="site"``: per round its gradient
    and Hessian (``p + p (p + 1) / 2`` numbers), and after the fit its
    information and score sums. With a shared baseline: per round, at each
    pooled event time (or grid interval), its sums of ``w exp(x'b)``, of
    ``w exp(x'b) x`` and of ``w exp(x'b) x x'`` over the rows at risk and
    over its events there, and its event counts: the pooled event times are
    public, and a time at which a site has one event gives away that row's
    covariates in the event sums. A time grid whose intervals each hold
    several events at every site avoids that; its error against the exact
    fit is measured in ``benchmarks/bench_cox.py`` and ``docs/survival.md``.

    References
    ----------
    D. R. Cox, "Regression models and life-tables", J. R. Stat. Soc. B 34, 1972.

    B. Efron, "The efficiency of Cox's likelihood function for censored
    data", J. Am. Stat. Assoc. 72, 1977.

    D. Y. Lin and L. J. Wei, "The robust inference for the Cox proportional
    hazards model", J. Am. Stat. Assoc. 84, 1989.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.survival import FedCoxPH, survival_target
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2))
    >>> time = rng.exponential(np.exp(-X @ [0.5, -0.3]))
    >>> event = rng.random(300) < 0.8
    >>> site = np.repeat(["a", "b", "c"], 100)
    >>> cox = FedCoxPH().fit(X, survival_target(event, time), clients=site)
    >>> cox.n_iter_ < 10
    True
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "ties": [StrOptions({"efron", "breslow"})],
        "strata": [None, str, Integral, list, tuple],
        "time_grid": [None, "array-like", Interval(Integral, 2, None, closed="left")],
        "cov_type": [StrOptions(set(COV_TYPES))],
        "solver": [StrOptions({"auto", "newton"}), FedNewton],
        # the shared parameters it takes, as every estimator checks them
        **{k: FederatedLinearModel._parameter_constraints[k]
           for k in ("max_rounds", "tol", "monitor_every", "privacy", "executor", "n_jobs",
                     "random_state", "verbose", "warm_start")},
    }
    # the Cox model has no intercept, every site takes part in every Newton round,
    # and each site weighs its share of the (weighted) rows: the pooled likelihood
    fit_intercept = False
    participation = 1.0
    client_weighting = "samples"

    def __init__(self, alpha=0.0, *, l1_ratio=0.0, ties="efron", strata=None, time_grid=None,
                 cov_type="nonrobust", solver="auto", max_rounds=50, tol=1e-8,
                 monitor_every=1, privacy=None, executor="sequential", n_jobs=None,
                 random_state=None, verbose=0, warm_start=False):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.ties = ties
        self.strata = strata
        self.time_grid = time_grid
        self.cov_type = cov_type
        self.solver = solver
        self.max_rounds = max_rounds
        self.tol = tol
        self.monitor_every = monitor_every
        self.privacy = privacy
        self.executor = executor
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start

    # -- data --------------------------------------------------------------------
    def _split_strata(self, X, column, fitting):
        """``(X without the strata column, the column's values or None)``."""
        if column is None:
            return X, None
        if hasattr(X, "columns"):
            if column not in X.columns:
                raise ValueError(f"strata column {column!r} is not a column of X; it has "
                                 f"{list(map(str, X.columns))[:10]}.")
            return X.drop(columns=[column]), np.asarray(X[column])
        if isinstance(column, str) or not isinstance(column, Integral):
            raise ValueError(f"strata={column!r} names a column, but X has no column names; "
                             "pass a DataFrame or the column's index.")
        X = np.asarray(X) if not hasattr(X, "shape") else X
        width = X.shape[1]
        if not -width <= column < width:
            raise ValueError(f"strata column index {column} is out of range for X with "
                             f"{width} columns.")
        keep = [k for k in range(width) if k != column % width]
        return X[:, keep], np.asarray(X[:, column % width])

    def _stratum_codes(self, values, fitting):
        if fitting:
            missing = np.array([v is None or v != v for v in values], dtype=bool)
            if missing.any():
                raise ValueError(f"the strata column has {int(missing.sum())} missing "
                                 "value(s); drop those rows or give them a level.")
            self.strata_levels_ = np.unique(values.astype(str) if values.dtype == object
                                            else values)
        levels = self.strata_levels_
        vals = values.astype(str) if levels.dtype.kind in "UO" else values
        codes = np.searchsorted(levels, vals)
        bad = (codes >= len(levels)) | (levels[np.minimum(codes, len(levels) - 1)] != vals)
        if bad.any():
            raise ValueError(f"strata level(s) {sorted(set(map(str, vals[bad])))[:3]} were not "
                             "seen in fit.")
        return codes.astype(float)

    # -- fit ---------------------------------------------------------------------
    @fit_all_or_nothing
    def fit(self, X, y=None, clients=None, sample_weight=None):
        """Fit the Cox model on rows held by several sites.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features) or FederatedDataset
            Covariates (and the strata column, if ``strata`` names one). A
            :class:`~skfed.data.FederatedDataset` carries its survival target
            (built with ``target=[event_column, time_column]``).
        y : structured array of shape (n_samples,)
            (event, time) per row: :func:`~skfed.survival.survival_target`
            or scikit-survival's ``Surv.from_arrays``.
        clients : array-like of shape (n_samples,), default=None
            The site holding each row; ``None``: one site.
        sample_weight : array-like of shape (n_samples,), default=None
            Case weights (lifelines' ``weights_col``).

        Returns
        -------
        self : object
        """
        self._validate_params()
        by_site, column = _strata_spec(self.strata)
        if getattr(self.privacy, "differentially_private", False) or hasattr(
                self.privacy, "epsilon"):
            raise ValueError("FedCoxPH does not run under differential privacy (its Newton "
                             "steps and standard errors would need noise calibrated to the "
                             "partial likelihood); use privacy=SecureAggregation().")
        dataset = self._survival_dataset(X, y, clients, sample_weight, column)
        summaries = self._site_setup(dataset, "survival")
        self._check_counts(dataset, summaries, by_site)
        self.n_events_ = int(sum(s["n_events"] for s in summaries))

        cuts = self._cut_points(dataset)
        self.time_grid_ = cuts
        grid = None if by_site else self._pooled_grid(dataset, cuts)
        self._fit_grid = grid
        layout = Layout(n_outputs=1, n_features=self.n_features_in_, fit_intercept=False)
        penalty = ElasticNet(self.alpha, self.l1_ratio) if self.alpha > 0 else None
        solver = self._newton_solver(grid)
        self._by_site = by_site
        # each site its own baseline: the fit is exact, the grid only places the baselines
        targets = Targets("survival", time_grid=None if by_site else cuts)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            theta = self._fit_federated(dataset, datafit=CoxPartialLikelihood(self.ties),
                                        penalty=penalty, layout=layout, targets=targets,
                                        solver=solver)
        self._pass_on_warnings(caught, stacklevel=2)
        self.coef_ = layout.coef(theta)[0].copy()
        self.hazard_ratios_ = np.exp(self.coef_)
        return self

    def _survival_dataset(self, X, y, clients, sample_weight, column):
        """The fit's sites and rows: the covariates, and the (event, time) target with the
        codes of the strata ``column`` (if any) beside it."""
        if isinstance(X, FederatedDataset):
            if column is not None:  # each site moves the column into its target
                tables = FederationSession.for_dataset(X).per_site(
                    site_stratum_levels, str(column), phase="setup")
                self.strata_levels_ = np.unique(np.concatenate([t["levels"] for t in tables]))
                X = X.apply(move_strata_to_target, str(column), self.strata_levels_)
            return self._dataset(X, y, clients, sample_weight, validate=None)
        if y is None:
            raise ValueError("FedCoxPH.fit needs y: a survival target of (event, time) "
                             "(skfed.survival.survival_target(event, time)).")
        X, strata_values = self._split_strata(X, column, fitting=True)
        event, time = split_survival(y)
        target = np.column_stack([event, time])
        if strata_values is not None:
            if len(strata_values) != len(time):
                raise ValueError(f"y has {len(time)} rows but X has {len(strata_values)}.")
            target = np.column_stack([target, self._stratum_codes(strata_values, True)])
        return self._dataset(
            X, target, clients, sample_weight,
            validate=lambda X, y: (validate_data(self, X, dtype=np.float64), y))

    def _newton_solver(self, grid):
        """The solver this fit builds: Newton on the risk sets of the pooled ``grid`` (with
        a FedNewton's sub-problem settings), else ``"newton"`` for ``solver="auto"``, else
        ``None`` (``self.solver``)."""
        if grid is not None:
            kw = {} if not isinstance(self.solver, FedNewton) else {
                "subproblem_tol": self.solver.subproblem_tol,
                "max_subproblem_iter": self.solver.max_subproblem_iter}
            return RiskSetNewton(grid, **kw)
        if self.solver == "auto":
            return "newton"
        return None

    def _pass_on_warnings(self, caught, stacklevel):
        """Warn again the warnings ``caught`` during the fit, each from where it was raised;
        without a penalty, a ConvergenceWarning says why Newton stalls (``stacklevel``: as
        :func:`warnings.warn`'s, counted from the caller)."""
        for w in caught:
            if issubclass(w.category, ConvergenceWarning) and self.alpha == 0:
                # Newton on a smooth loss stalls for one reason: a monotone likelihood
                first = str(w.message).split(";")[0]
                warnings.warn(
                    f"{first}. The partial likelihood may be monotone: a covariate (or a "
                    "combination) that orders the event times almost perfectly has an "
                    "infinite coefficient (lifelines and R warn the same). Look for a "
                    "covariate derived from the outcome, or a stratum with one event, or "
                    "add a ridge penalty (alpha > 0).", ConvergenceWarning,
                    stacklevel=stacklevel + 1)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    def _check_counts(self, dataset, summaries, by_site):
        pooled = {}
        for label, s in zip(dataset.sites, summaries):
            if by_site and s["n_events"] == 0:
                raise ValueError(f"client {describe_label(label)} has no events: with "
                                 "strata='site' its rows carry no information about the "
                                 "coefficients (its own baseline absorbs them); drop the "
                                 "site, or use a baseline shared across sites (strata=None).")
            for code, rows, events in zip(s["strata"], s["stratum_rows"], s["stratum_events"]):
                key = (label, float(code)) if by_site else float(code)
                r, e = pooled.get(key, (0, 0))
                pooled[key] = (r + int(rows), e + int(events))
        for key, (rows, events) in pooled.items():
            if rows < 2:
                where = self._stratum_label(key)
                raise ValueError(f"stratum {where} has one row: a stratum needs at least two "
                                 "(its own baseline hazard absorbs a lone row); merge it with "
                                 "another level or drop it.")
        if not any(e for _, e in pooled.values()):
            raise ValueError("no events in the data: every row is censored, so the partial "
                             "likelihood is constant.")

    def _stratum_label(self, key):
        if isinstance(key, tuple):
            site, code = key
            level = "" if not hasattr(self, "strata_levels_") else \
                f", level {self.strata_levels_[int(code)]!r}"
            return f"(site {describe_label(site)}{level})"
        if hasattr(self, "strata_levels_"):
            return repr(self.strata_levels_[int(key)])
        return "(all rows)"

    def _cut_points(self, dataset):
        grid = self.time_grid
        if grid is None:
            return None
        if isinstance(grid, Integral):
            # a site may coarsen them
            tables = self._session.per_site(site_event_times, None, 1, phase="setup")
            times = np.concatenate([t["times"] for t in tables])
            counts = np.concatenate([t["events"] for t in tables])
            order = np.argsort(times, kind="stable")
            cum = np.cumsum(counts[order]) / counts.sum()
            qs = np.arange(1, int(grid)) / int(grid)
            cuts = np.unique(times[order][np.searchsorted(cum, qs - 1e-12)])
            return cuts
        cuts = np.asarray(grid, dtype=float)
        if cuts.ndim != 1 or cuts.size == 0 or not np.all(np.isfinite(cuts)) or \
                np.any(np.diff(cuts) <= 0):
            raise ValueError("time_grid must be increasing finite cut points (or an int, the "
                             "number of intervals).")
        return cuts

    def _pooled_grid(self, dataset, cuts):
        """The pooled event times (or grid intervals) per stratum: the union of
        the sites' (public from now on: broadcast every round)."""
        tables = self._session.per_site(site_event_times, cuts, None, phase="setup")
        grid = {}
        for t in tables:
            for code, time in zip(t["strata"], t["times"]):
                grid.setdefault(float(code), set()).add(float(time))
        grid = {code: np.array(sorted(times)) for code, times in grid.items()}
        # the pooled grid goes down to each site once (with the fit's solver)
        self._session.ledger.add("setup", len(tables) * sum(
            8 * (len(times) + 1) for times in grid.values()), rounds=0)
        return grid

    # -- predictions (the baseline: ._baseline.BaselineMixin) ----------------------
    def predict(self, X):
        """Risk scores: the linear predictor ``X @ coef_`` (log partial hazard).

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            Covariates (a strata column, if any, is ignored).

        Returns
        -------
        risk : ndarray of shape (n_samples,)
            Higher means an earlier expected event.
        """
        check_is_fitted(self)
        _, column = _strata_spec(self.strata)
        if column is not None and self._has_strata_column(X):
            X, _ = self._split_strata(X, column, fitting=False)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return np.asarray(X @ self.coef_).ravel()

    def _has_strata_column(self, X):
        _, column = _strata_spec(self.strata)
        if hasattr(X, "columns"):
            return column in X.columns
        return np.shape(X)[1] == self.n_features_in_ + 1

    # -- scoring -----------------------------------------------------------------
    def score(self, X, y=None, sample_weight=None):
        """Harrell's concordance index of :meth:`predict` on ``(X, y)``.

        On arrays: every comparable pair (scikit-survival's
        ``concordance_index_censored``; what ``GridSearchCV`` maximizes). On
        a :class:`~skfed.data.FederatedDataset`: the pairs within each site
        (see :func:`~skfed.survival.concordance_index`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or FederatedDataset
        y : structured array of shape (n_samples,), default=None
        sample_weight : None
            Not supported (Harrell's index counts pairs).

        Returns
        -------
        score : float
        """
        check_is_fitted(self)
        if sample_weight is not None:
            raise ValueError("FedCoxPH.score counts pairs (Harrell's concordance); it takes "
                             "no sample_weight.")
        if isinstance(X, FederatedDataset):
            return concordance_index(self, X)["pooled"]
        event, time = split_survival(y)
        return index_from_counts(concordance_counts(event > 0, time, self.predict(X)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.target_tags.single_output = False
        tags.input_tags.sparse = False
        return tags
