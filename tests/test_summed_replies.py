"""Solvers whose server reads the replies only through sums (secure aggregation, issue 15).

For every such solver the plain ``aggregate`` must equal ``aggregate_sums`` on sums
formed here from what the solver declares (``summed_fields`` and
``reply_coefficients``), and must not read anything else of the replies.
"""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes

from skfed.penalties import L1, L2
from skfed.solvers import (DSGD, AFedPD, FedADMM, FedAvg, FedDualAvg, FedDualAvgOSP, FedDyn,
                           FedMID, FedMIDOSP, FedMLS, FedPD, FedProx, LocalGECL, Scaffold)
from skfed.solvers.base import FederatedSolver

from ._harness import make_problem, quadratic_clients

N = 4
ROUNDS = 4
# uneven sites (weights and smoothness differ), diabetes
SIZES = [60, 90, 130, 162]


@pytest.fixture(scope="module")
def sites():
    X, y = load_diabetes(return_X_y=True)
    y = (y - y.mean()) / y.std()
    order = np.argsort(X[:, 2], kind="stable")  # sorted by BMI: heterogeneous sites
    bounds = np.cumsum([0] + SIZES)
    blocks = [(X[order[a:b]], y[order[a:b]]) for a, b in zip(bounds[:-1], bounds[1:])]
    return quadratic_clients(blocks, fit_intercept=True)


def _partial(r):
    return [[0, 2], [1, 2, 3], [3, 0], [1]][r % 4]


def _full(r):
    return list(range(N))


SMOOTH, SPARSE = L2(0.01), L1(0.05)
# (solver, penalty, participants per round)
CASES = [
    (FedDualAvg(), SPARSE, _full),
    (FedDualAvg(), SPARSE, _partial),  # Nesterov's server (the partial default)
    (FedDualAvg(server_momentum="none", local_steps=3), SPARSE, _partial),
    (FedDualAvgOSP(local_steps=2), SPARSE, _full),
    (FedMID(local_steps=2), SPARSE, _partial),
    (FedMIDOSP(), SPARSE, _full),
    (FedAvg(local_steps=2), SPARSE, _partial),
    (FedProx(local_steps=3), SPARSE, _partial),
    (FedPD(), SPARSE, _full),
    (FedADMM(), SPARSE, _partial),
    (FedDyn(), SPARSE, _partial),
    (FedDyn(local_steps=3), SMOOTH, _full),
    (FedMLS(), SPARSE, _full),
    (Scaffold(local_steps=3), SMOOTH, _full),  # lr="auto": per-client steps
    (Scaffold(local_steps=3), SMOOTH, _partial),
    (Scaffold(lr=0.002, local_steps=3), SMOOTH, _partial),  # one step for all
    (LocalGECL(local_steps=3), SMOOTH, _full),
    (LocalGECL(local_steps=2, warm_start_duals=True), SMOOTH, _full),  # a gathering round
    (LocalGECL(lr=0.002, local_steps=2), SMOOTH, _full),
]
IDS = [f"{type(s).__name__}-{i}-{p.__name__.strip('_')}" for i, (s, _, p) in enumerate(CASES)]


def _rounds(solver, sites, penalty, participants):
    """Each round's ``(server before, replies, weights, participants)``, the solver's own
    ``aggregate`` carrying the server from one round to the next."""
    clients, lay = sites
    problem = make_problem(clients, lay, penalty=penalty)
    partial = participants is _partial
    solver.setup(problem, 0.5 if partial else 1.0)
    theta0 = lay.zeros()
    server = solver.init_server(theta0)
    states = [solver.init_client(j, theta0) for j in range(N)]
    rng = np.random.default_rng(0)
    for r in range(ROUNDS):
        active = np.array(participants(r))
        message = solver.broadcast(server, r)
        replies = []
        for j in active:
            reply, states[j] = solver.client_update(
                clients[j], states[j], solver.personalize(server, message, j), rng)
            replies.append(reply)
        weights = problem.weights[active] / problem.weights[active].sum()
        yield server, replies, weights, active
        server = solver.aggregate(server, replies, weights, active)


def _coefficients(solver, field, kind, weights, active):
    """The declared coefficients, checked against what their kind means."""
    c = solver.reply_coefficients(field, kind, weights, active)
    assert len(c) == len(active)
    if kind == "weighted":
        np.testing.assert_array_equal(c, weights)
    elif kind == "sum":
        np.testing.assert_array_equal(c, np.ones(len(active)))
    else:  # the control-variate solvers' 1/eta_j weights, per coordinate
        assert kind == "step-weighted"
        inverse = np.array([1.0 / solver.client_steps_[j] for j in active])
        np.testing.assert_allclose(c, inverse / inverse.sum(axis=0), rtol=1e-15)
    return c


def _sums(solver, server, replies, weights, active):
    """``{field: sum_j c_j r_j[field]}`` formed here, from the declared fields only."""
    sums = {}
    for field, kind in solver.summed_fields(server).items():
        c = _coefficients(solver, field, kind, weights, active)
        terms = [np.asarray(c[k], dtype=float) * np.asarray(r[field], dtype=float)
                 for k, r in enumerate(replies)]
        total = np.sum(terms, axis=0)
        sums[field] = float(total) if total.ndim == 0 else total
    return sums


def _assert_same_state(a, b, rtol=1e-12):
    assert a.keys() == b.keys()
    for key in a:
        if a[key] is None or isinstance(a[key], (bool, int)):
            assert a[key] == b[key], key
        else:
            scale = max(1.0, float(np.max(np.abs(a[key]))))
            np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=1e-13 * scale,
                                       err_msg=key)


@pytest.mark.parametrize("solver, penalty, participants", CASES, ids=IDS)
def test_aggregate_is_the_update_from_the_sums(sites, solver, penalty, participants):
    for server, replies, weights, active in _rounds(solver, sites, penalty, participants):
        fields = solver.summed_fields(server)
        assert fields, "a converted solver declares its summed fields"
        plain = solver.aggregate(server, replies, weights, active)
        from_sums = solver.aggregate_sums(server, _sums(solver, server, replies, weights,
                                                        active), active)
        _assert_same_state(plain, from_sums)


@pytest.mark.parametrize("solver, penalty, participants", CASES, ids=IDS)
def test_aggregate_reads_only_the_declared_sums(sites, solver, penalty, participants):
    """Replies stripped of every undeclared field give the same update, and so do
    replies moved apart with the same sums (what a masked sum leaves the server)."""
    shift = np.random.default_rng(1)
    for server, replies, weights, active in _rounds(solver, sites, penalty, participants):
        fields = solver.summed_fields(server)
        plain = solver.aggregate(server, replies, weights, active)
        stripped = [{f: r[f] for f in fields} for r in replies]
        _assert_same_state(plain, solver.aggregate(server, stripped, weights, active), rtol=0)
        if len(active) < 2:
            continue
        moved = [dict(r) for r in stripped]
        for field, kind in fields.items():  # c_0 r_0 + c_1 r_1 unchanged
            c = solver.reply_coefficients(field, kind, weights, active)
            value = np.asarray(replies[0][field], dtype=float)
            delta = 0.1 * (np.abs(value) + 1.0) * shift.standard_normal(value.shape)
            moved[0][field] = value + delta / np.asarray(c[0])
            moved[1][field] = np.asarray(replies[1][field], dtype=float) - delta / np.asarray(c[1])
        _assert_same_state(plain, solver.aggregate(server, moved, weights, active), rtol=1e-9)


def test_step_weighted_mean_is_the_papers_weighting(sites):
    """With per-client steps SCAFFOLD's server moves by sum_j (dy_j / eta_j) / sum_j (1 / eta_j)."""
    solver = Scaffold(local_steps=3)
    for server, replies, weights, active in _rounds(solver, sites, SMOOTH, _partial):
        assert not solver.uniform_steps_
        inverse = [1.0 / solver.client_steps_[j] for j in active]
        dy = sum(i * r["dy"] for i, r in zip(inverse, replies)) / sum(inverse)
        out = solver.aggregate(server, replies, weights, active)
        np.testing.assert_allclose(out["x"], server["x"] + dy, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(out["c"], server["c"] + sum(r["dc"] for r in replies) / N,
                                   rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("solver", [AFedPD(), LocalGECL(topology="ring", local_steps=2),
                                    DSGD(topology="ring", local_steps=2)], ids=repr)
def test_servers_reading_individual_replies_declare_none(sites, solver):
    """A-FedPD keeps each site's dual on the server; a decentralized topology has no
    server. Their own aggregate still runs."""
    clients, lay = sites
    solver.setup(make_problem(clients, lay, penalty=SMOOTH), 1.0)
    server = solver.init_server(lay.zeros())
    assert solver.summed_fields(server) is None
    rounds = _rounds(solver, sites, SMOOTH, _full)
    server, replies, weights, active = next(rounds)
    assert solver.summed_fields(server) is None
    solver.aggregate(server, replies, weights, active)


def test_a_solver_without_aggregate_or_sums_says_so():
    class Bare(FederatedSolver):
        def init_server(self, theta0):
            return {}

        def broadcast(self, server, rnd):
            return {}

        def client_update(self, client, state, message, rng):
            return {}, state

        def server_model(self, server):
            return None

    with pytest.raises(NotImplementedError, match="summed_fields and aggregate_sums"):
        Bare().aggregate({}, [{}], np.ones(1), np.arange(1))
    with pytest.raises(ValueError, match="unknown kind"):
        Bare().reply_coefficients("g", "mean", np.ones(1), np.arange(1))
