"""The fit skeleton shared by every federated estimator.

``_fit_federated`` validates, groups rows into clients, opens the executor
(data shipped once), collects the clients' one-time summaries, builds the
:class:`~skfed.federation.problem.FederatedProblem`, checks the solver against it and
runs the round loop. Estimators only choose a datafit, a penalty and a layout,
and turn the flat solution back into scikit-learn attributes.
"""

import functools
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import (Interval, StrOptions,
                                            validate_parameter_constraints)
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from .federation.clients import client_weights, describe_label
from .federation.rounds import client_summary, run_federation
from .federation.session import FederationSession
from .federation.problem import FederatedProblem
from .federation.advice import convergence_advice
from .federation.wire import register_subclasses
from .federation.smoothness import pooled_smoothness
from .data import FederatedDataset, as_dataset
from .data.sources import dtype_kind
from .data.site import (Targets, client_objective, combine_scores, site_predictions,
                        site_score_terms, site_summary)
from .executors import EXECUTORS, Executor, resolve_executor
from ._messages import count, plain
from .solvers import SOLVER_CONSTRAINTS, resolve_solver
from .privacy.dp_rounds import budget_warning, noise_warning
from .privacy.secure_rounds import SecureAggregation


def _state_key(solver, labels, layout):
    """What must match for a warm start to resume a solver's internal state."""
    return (type(solver).__name__, repr(solver.get_params()), tuple(map(str, labels)),
            layout.size)


def restore_on_failure(fit):
    """Decorate ``fit`` so that a fit that does not finish changes nothing.

    An error, a client failure, a timeout or a ``KeyboardInterrupt`` during
    ``fit`` leaves the estimator as it was before the call: unfitted if it
    was, else with its previous model (its attributes are restored).
    """
    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        saved = dict(self.__dict__)
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise
        finally:  # the fit's session (and its sites) is not kept after the fit
            self.__dict__.pop("_session", None)
    return wrapper


def fit_all_or_nothing(fit):
    """:func:`restore_on_failure` for the estimators whose sites are ``clients=``: a
    ``groups=`` argument is refused with the reason (a scikit-learn splitter's)."""
    restoring = restore_on_failure(fit)

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        if "groups" in kwargs:
            raise TypeError(
                f"{type(self).__name__}.fit takes the sites as clients=, not groups=: "
                "fit(X, y, clients=site). (groups is what scikit-learn's splitters take; "
                "with metadata routing off, GridSearchCV gives groups to the splitter only, "
                "so an estimator reading groups would silently fit on one client. In a "
                "search pass both: search.fit(X, y, groups=site, clients=site).)")
        return restoring(self, *args, **kwargs)
    return wrapper


def sites_aware(method):
    """Let a prediction method take a :class:`~skfed.data.FederatedDataset`.

    On a dataset the method runs at each site, on that site's rows, and the
    result is ``{site: output}`` (the predictions of every site's rows come
    back to the caller; :meth:`SiteScoreMixin.score` returns only scores).
    """
    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if isinstance(X, FederatedDataset):
            check_is_fitted(self)
            return dict(zip(X.sites, X.map(site_predictions, self, method.__name__)))
        return method(self, X, *args, **kwargs)
    return wrapper


class SiteScoreMixin:
    """``score`` that also takes a :class:`~skfed.data.FederatedDataset`.

    On a dataset each site sends four weighted sums per target (or two
    counts for a classifier) and the server assembles the pooled score: the
    number ``score`` gives on the pooled rows, no row moved.
    """

    def score(self, X, y=None, sample_weight=None):
        """Score on arrays (as scikit-learn) or on a FederatedDataset (pooled).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or FederatedDataset
        y : array-like of shape (n_samples,) or (n_samples, n_targets), default=None
            Not used with a FederatedDataset (it carries its target).
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
            R2 for regressors, accuracy for classifiers.
        """
        if isinstance(X, FederatedDataset):
            check_is_fitted(self)
            as_dataset(X, y, None, sample_weight)
            return combine_scores(FederationSession.for_dataset(X).per_site(
                site_score_terms, self, phase="analysis"))
        return super().score(X, y, sample_weight=sample_weight)


def _refuse_text_columns(X):
    """A DataFrame's non-numeric column is named (scikit-learn's message only
    quotes the first value it could not convert)."""
    dtypes = getattr(X, "dtypes", None)
    if dtypes is None or not hasattr(X, "columns"):
        return
    for name, dtype in zip(X.columns, dtypes):
        if dtype_kind(dtype) != "text":
            continue
        try:
            np.asarray(X[name], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(
                f"column {str(name)!r} is not numeric (dtype {dtype}); one-hot encode it "
                "(skfed.preprocessing.FedOneHotEncoder, or sklearn's OneHotEncoder in a "
                "Pipeline) or drop it.") from None


class FederatedLinearModel(BaseEstimator):
    """Base class of skfed's estimators (not used directly).

    The shared parameters are documented in each estimator.
    """

    _parameter_constraints: dict = {
        "fit_intercept": ["boolean"],
        "solver": SOLVER_CONSTRAINTS,  # any spelling: "DualFL", "local_gecl"
        "max_rounds": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "monitor_every": [Interval(Integral, 1, None, closed="left")],
        "participation": [Interval(Real, 0, 1, closed="right")],
        "client_weighting": [StrOptions({"samples", "uniform"})],
        "privacy": [SecureAggregation, None],
        "executor": [StrOptions(set(EXECUTORS)), Executor],
        "n_jobs": [Integral, None],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
    }

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the local-only baseline names the model a site fits on its own rows
        register_subclasses(FederatedLinearModel, "estimator")(cls)

    def _validate_params(self):
        # the values as Python scalars: scikit-learn's message prints repr(value),
        # which is "np.float64(-1.0)" for a numpy scalar
        validate_parameter_constraints(
            self._parameter_constraints,
            {k: plain(v) for k, v in self.get_params(deep=False).items()},
            caller_name=type(self).__name__)

    # ``clients`` is requested by default under metadata routing, so
    # GridSearchCV / cross_validate route it to ``fit`` without set_fit_request.
    __metadata_request__fit = {"clients": True}

    @property
    def sparse_coef_(self):
        """``coef_`` as a scipy CSR matrix (2-D)."""
        import scipy.sparse as sp

        return sp.csr_matrix(np.atleast_2d(self.coef_))

    # -- data entry: every fit goes through a FederatedDataset ---------------
    def _dataset(self, X, y, clients, sample_weight, *, validate, offset=None):
        """The fit's :class:`~skfed.data.FederatedDataset`.

        In-memory ``X`` is validated as one array (``validate(X, y)``, the
        scikit-learn checks and ``n_features_in_``) and split by ``clients``
        in this process; a ``FederatedDataset`` is used as it is, its
        feature count and column names coming from its metadata.
        """
        if isinstance(X, FederatedDataset):
            if offset is not None:
                raise ValueError("a FederatedDataset carries its sites' offsets (SiteData."
                                 "offset); do not pass offset= with it.")
            dataset = as_dataset(X, y, clients, sample_weight)
            if not dataset.has_target:
                raise ValueError(f"{type(self).__name__}.fit needs a target: build the "
                                 "FederatedDataset with target=... (or y=...).")
            self.n_features_in_ = dataset.n_features
            if dataset.columns is not None:
                self.feature_names_in_ = np.asarray(dataset.columns, dtype=object)
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return dataset
        _refuse_text_columns(X)
        X, y = validate(X, y)
        sw = None
        if sample_weight is not None:
            sw = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                      ensure_non_negative=True)
        return FederatedDataset.from_arrays(X, y, clients, sw, offset)

    def _site_setup(self, dataset, task):
        """The sites' one-time summaries (:func:`skfed.data.site.site_summary`),
        checked: a site without positive weight or with another feature count
        is refused, naming it."""
        # the fit's session opens with the sites' summaries: every later exchange of the
        # fit goes through it (its ledger is history_.ledger)
        self._session = FederationSession(dataset)
        summaries = self._session.per_site(site_summary, task, phase="setup")
        for label, s in zip(dataset.sites, summaries):
            if not s["weight_sum"] > 0:
                raise ValueError(f"client {describe_label(label)} has no samples with positive "
                                 "weight; drop it or give it data.")
            if s["n_features"] != summaries[0]["n_features"]:
                raise ValueError(f"client {describe_label(label)} has {s['n_features']} "
                                 f"features; client {describe_label(dataset.sites[0])} has "
                                 f"{summaries[0]['n_features']}.")
        return summaries

    def _final_pass(self, session, problem, solver, theta):
        """The estimator's own pass at the optimum, while the sites are open (the GLMs'
        and Cox's inference: :mod:`skfed.linear_model._inference`); none here."""

    def _fit_federated(self, dataset, *, datafit, penalty, layout, targets=Targets(),
                       solver=None):
        """Run the federated fit on ``dataset``; returns the flat solution ``theta``.

        Each site builds its client objective where its rows are (encoding
        its target with ``targets``); only the solver's messages and the
        monitoring pass leave it. ``solver``: one the estimator built for
        this fit (else ``self.solver``). The steps: the solver (wrapped in
        the privacy it runs under), the problem from the sites' summaries,
        the rounds, then the estimator's pass after them (:meth:`_final_pass`).
        """
        labels = dataset.labels
        solver, weighting, choice = self._fit_solver(datafit, penalty, solver)
        theta0, resume = self._start_model(solver, labels, layout)
        executor = resolve_executor(self.executor, self.n_jobs)
        executor = dataset.executor_for(executor)  # the rounds run where the rows are
        entropy = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        objectives = dataset.build(client_objective, datafit, layout, targets)
        session = self.__dict__.pop("_session", None) or FederationSession(dataset)
        try:
            executor.open(objectives, labels)
            session.open_clients(executor)
            problem = self._federated_problem(
                session, solver, layout=layout, datafit=datafit, penalty=penalty,
                weighting=weighting)
            solver.check_problem(problem, self.participation)
            solver.setup(problem, self.participation)
            # a privacy budget may allow fewer rounds than max_rounds
            rounds = (min(self.max_rounds, solver.rounds_) if solver.differentially_private
                      else self.max_rounds)
            result = run_federation(
                solver=solver, problem=problem, session=session, theta0=theta0,
                max_rounds=rounds, tol=self.tol, participation=self.participation,
                entropy=entropy, verbose=self.verbose, resume=resume,
                monitor_every=solver.loop_monitor_every(self.monitor_every))
            self._final_pass(session, problem, solver, result.theta)
        finally:
            session.close_clients()
            executor.close()
        self._record_fit(solver, labels, layout, result, choice, session.ledger)
        self._warn_fit(solver, problem, labels, result, rounds)
        return result.theta

    def _fit_solver(self, datafit, penalty, solver=None):
        """``(solver, client weighting, automatic choice)``: the solver of this fit
        (``solver``, else ``self.solver``), wrapped in the privacy it runs under."""
        solver = resolve_solver(self.solver if solver is None else solver, self.participation,
                                datafit, penalty)
        weighting, choice = self.client_weighting, None
        auto_dp = getattr(self.privacy, "auto_solver", None)
        if auto_dp is not None and isinstance(self.solver, str) and \
                self.solver.lower() == "auto":
            # the automatic solvers need smoothness constants sent in the clear: under
            # differential privacy "auto" is the solver and weighting that carry it
            solver, choice = auto_dp(datafit)
            weighting = choice["client_weighting"]
        if self.privacy is not None:  # every exchange masked; the solver works on sums
            solver = self.privacy.wrap(solver, self.max_rounds, self.monitor_every)
        return solver, weighting, choice

    def _start_model(self, solver, labels, layout):
        """``(theta0, resume)``: zeros, or the last fit's model under ``warm_start`` (with
        the solver's own state when it is the same solver on the same clients)."""
        theta0, resume = layout.zeros(), None
        if self.warm_start and hasattr(self, "_theta") and self._theta.shape == theta0.shape:
            theta0 = self._theta.copy()
            previous = getattr(self, "_solver_state", None)
            if previous is not None and previous["key"] == _state_key(solver, labels, layout):
                resume = (previous["server"], previous["states"])
        return theta0, resume

    def _federated_problem(self, session, solver, *, layout, datafit, penalty, weighting):
        """The pooled problem from the sites' summaries (and the pooled-smoothness
        pass when the solver needs one), through the fit's ``session``."""
        # solvers that take no step from the smoothness constants (Newton) get cheap
        # bounds for the monitor and skip the pooled eigenvalue pass; none at all under
        # differential privacy (they would cross without noise), nor under secure
        # aggregation, where the monitor gets the pooled constants as a masked sum once
        # the keys are agreed (skfed.federation.smoothness.masked_smoothness)
        needs = solver.needs_smoothness(layout, datafit)
        exact = None if solver.differentially_private or (solver.masked and not needs) \
            else needs
        summaries = session.per_site(client_summary, exact, phase="setup")
        sums = np.array([s["weight_sum"] for s in summaries])
        problem = FederatedProblem(
            layout=layout, datafit=datafit, penalty=penalty,
            weights=client_weights(sums, weighting),
            n_samples=np.array([s["n_samples"] for s in summaries]),
            lipschitz=[s["lipschitz"] for s in summaries],
            weight_total=float(sums.sum()),
        )
        if exact:
            problem.pooled_lipschitz = pooled_smoothness(session, problem)
        return problem

    def _record_fit(self, solver, labels, layout, result, choice, ledger):
        """The fitted attributes: the solver, the clients, ``history_``, the model."""
        secure = self.privacy is not None
        self.solver_ = solver.solver if secure else solver
        self.clients_ = labels
        self.n_clients_ = len(labels)
        self.history_ = result.history
        self.history_.n_clients = len(labels)
        self.history_.privacy = solver.privacy_record() if secure else None
        self.history_.inference_bytes = ledger.bytes("inference")
        self.history_.inference_rounds = ledger.rounds("inference")
        self.history_.ledger = ledger.as_dict()
        if choice is not None:
            self.history_.privacy.update(choice)
        self.n_iter_ = result.n_iter
        self.objective_ = result.history["objective"][-1]
        self._theta = result.theta
        # the clients' solver states stay at the sites under secure aggregation:
        # a warm start then resumes from the model only
        self._solver_state = None if result.states is None else {
            "key": _state_key(solver, labels, layout), "server": result.server,
            "states": result.states}

    def _warn_fit(self, solver, problem, labels, result, rounds):
        """The privacy record and warnings (budget, noise), or the convergence advice."""
        if solver.differentially_private:  # the epsilon spent after each round; no
            # monitor, so no stopping rule
            for record in self.history_.records:
                record["epsilon"] = solver.epsilon_after(record["round"])
            if rounds < self.max_rounds:
                budget_warning(self, rounds, self.max_rounds, self.privacy.epsilon)
            noise = solver.noise_report()
            self.history_.privacy["noise_report"] = noise
            noise_warning(self, noise, solver.n_active_, result.n_iter, self.privacy.epsilon,
                          self.privacy.clip_norm)
            if noise is not None and not noise["final_step"] <= self.tol:
                warnings.warn(
                    f"{type(self).__name__} did not reach tol={self.tol} in "
                    f"{count(result.n_iter, 'round')}: under differential privacy there is no "
                    f"stationarity (no smoothness constants leave the sites; the monitor's "
                    f"objective is noisy), so what is measured is the last round's noisy "
                    f"update: it moved the model by "
                    f"{noise['final_step']:.3g} of its norm (tol={self.tol}). The noise "
                    f"keeps the model moving; a larger epsilon or more sites make the steps "
                    f"smaller; evaluate the model on data you may see.", ConvergenceWarning)
        elif not result.converged:
            advice = convergence_advice(result.history, tol=self.tol, solver=solver,
                                        problem=problem, participation=self.participation)
            alone = ("" if len(labels) > 1 else " (one client: without clients= all rows "
                     "form one client; this fit was centralized)")
            warnings.warn(
                f"{type(self).__name__} did not reach tol={self.tol} in "
                f"{count(self.max_rounds, 'round')}: {advice}.{alone}",
                ConvergenceWarning,
            )
