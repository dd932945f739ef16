"""The fit skeleton shared by every federated estimator.

``_fit_federated`` validates, groups rows into clients, opens the executor
(data shipped once), collects the clients' one-time summaries, builds the
:class:`~skfed._problem.FederatedProblem`, checks the solver against it and
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
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight

from ._clients import check_clients_nonempty, client_weights, group_clients
from ._federation import SUMMARY_NBYTES, client_summary, run_federation
from ._problem import FederatedProblem
from ._smoothness import pooled_smoothness
from .datafits import ClientObjective
from .executors import EXECUTORS, Executor, resolve_executor
from .solvers import SOLVERS, FederatedSolver, resolve_solver


def _state_key(solver, labels, layout):
    """What must match for a warm start to resume a solver's internal state."""
    return (type(solver).__name__, repr(solver.get_params()), tuple(map(str, labels)),
            layout.size)


def fit_all_or_nothing(fit):
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
    return wrapper


class FederatedLinearModel(BaseEstimator):
    """Base class of skfed's estimators (not used directly).

    The shared parameters are documented in each estimator.
    """

    _parameter_constraints: dict = {
        "fit_intercept": ["boolean"],
        "solver": [StrOptions(set(SOLVERS) | {"auto"}), FederatedSolver],
        "max_rounds": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "participation": [Interval(Real, 0, 1, closed="right")],
        "client_weighting": [StrOptions({"samples", "uniform"})],
        "executor": [StrOptions(set(EXECUTORS)), Executor],
        "n_jobs": [Integral, None],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
    }

    # ``clients`` is requested by default under metadata routing, so
    # GridSearchCV / cross_validate route it to ``fit`` without set_fit_request.
    __metadata_request__fit = {"clients": True}

    @property
    def sparse_coef_(self):
        """``coef_`` as a scipy CSR matrix (2-D)."""
        import scipy.sparse as sp

        return sp.csr_matrix(np.atleast_2d(self.coef_))

    def _fit_federated(self, X, Y, *, clients, sample_weight, datafit, penalty, layout):
        """Run the federated fit; returns the flat solution ``theta``."""
        n = X.shape[0]
        sw = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        labels, indices = group_clients(clients, n)
        check_clients_nonempty(labels, indices, sw)

        solver = resolve_solver(self.solver, self.participation, datafit, penalty)
        theta0, resume = layout.zeros(), None
        if self.warm_start and hasattr(self, "_theta") and self._theta.shape == theta0.shape:
            theta0 = self._theta.copy()
            # continue the solver itself (duals, control variates) when it is the
            # same solver on the same clients; otherwise restart it from the model
            previous = getattr(self, "_solver_state", None)
            if previous is not None and previous["key"] == _state_key(solver, labels, layout):
                resume = (previous["server"], previous["states"])
        executor = resolve_executor(self.executor, self.n_jobs)
        entropy = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        objectives = [ClientObjective(datafit, X[idx], Y[idx], sw[idx], layout) for idx in indices]
        try:
            executor.open(objectives, labels)
            summaries = executor.map(client_summary, [(j, ()) for j in range(len(labels))])
            sums = np.array([s["weight_sum"] for s in summaries])
            problem = FederatedProblem(
                layout=layout, datafit=datafit, penalty=penalty,
                weights=client_weights(sums, self.client_weighting),
                n_samples=np.array([s["n_samples"] for s in summaries]),
                lipschitz=[s["lipschitz"] for s in summaries],
            )
            problem.pooled_lipschitz, lz_bytes, lz_rounds = pooled_smoothness(executor, problem)
            solver.check_problem(problem, self.participation)
            solver.setup(problem, self.participation)
            result = run_federation(
                solver=solver, problem=problem, executor=executor, theta0=theta0,
                max_rounds=self.max_rounds, tol=self.tol, participation=self.participation,
                entropy=entropy, verbose=self.verbose,
                setup_bytes=SUMMARY_NBYTES * len(labels) + lz_bytes, setup_rounds=1 + lz_rounds,
                resume=resume,
            )
        finally:
            executor.close()

        self.solver_ = solver
        self.clients_ = labels
        self.n_clients_ = len(labels)
        self.history_ = result.history
        self.n_iter_ = result.n_iter
        self.objective_ = result.history["objective"][-1]
        self._theta = result.theta
        self._solver_state = {"key": _state_key(solver, labels, layout),
                              "server": result.server, "states": result.states}
        if not result.converged:
            if datafit.smooth:
                where = f"stationarity {result.history['stationarity'][-1]:.3e}"
            else:  # non-smooth losses stop on an objective plateau
                where = "the objective was still improving by more than tol"
            warnings.warn(
                f"{type(self).__name__} did not reach tol={self.tol} in {self.max_rounds} "
                f"rounds ({where}); increase max_rounds, or choose another solver.",
                ConvergenceWarning,
            )
        return result.theta
