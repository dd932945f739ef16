"""Drive a solver's rounds by hand, keeping every client state (for update-rule tests)."""

import numpy as np

from skfed.federation.layout import Layout
from skfed.federation.problem import FederatedProblem
from skfed.datafits import ClientObjective, Quadratic


def quadratic_clients(blocks, fit_intercept=False):
    """One ClientObjective per (X_j, y_j) pair, least squares."""
    d = blocks[0][0].shape[1]
    lay = Layout(1, d, fit_intercept=fit_intercept)
    return [ClientObjective(Quadratic(), X, np.asarray(y, float).reshape(-1, 1),
                            np.ones(len(y)), lay) for X, y in blocks], lay


def make_problem(clients, layout, penalty=None, weights=None):
    sums = np.array([c.weight_sum for c in clients])
    problem = FederatedProblem(
        layout=layout, datafit=clients[0].datafit, penalty=penalty,
        weights=sums / sums.sum() if weights is None else np.asarray(weights, float),
        n_samples=np.array([c.n_samples for c in clients]),
        lipschitz=[c.lipschitz() for c in clients])
    return problem


def drive(solver, clients, problem, rounds, theta0=None, participants=None, seed=0):
    """Run ``rounds`` rounds; return the server states, client states and replies per round."""
    solver.setup(problem, 1.0 if participants is None else 0.5)
    theta0 = problem.layout.zeros() if theta0 is None else theta0
    server = solver.init_server(theta0)
    states = [solver.init_client(j, theta0) for j in range(len(clients))]
    trace = []
    rng = np.random.default_rng(seed)
    for r in range(rounds):
        active = list(range(len(clients))) if participants is None else participants(r)
        message = solver.broadcast(server, r)
        replies = []
        for j in active:
            mine = solver.personalize(server, message, j)
            reply, states[j] = solver.client_update(clients[j], states[j], mine, rng)
            replies.append(reply)
        w = problem.weights[active] / problem.weights[active].sum()
        server = solver.aggregate(server, replies, w, np.array(active))
        trace.append({"server": server, "states": [dict(s) if s else s for s in states],
                      "replies": replies, "message": message})
    return trace
