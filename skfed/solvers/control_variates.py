"""Drift correction by control variates: SCAFFOLD (option II) and centralized Local G-ECL.

Both correct each client's local steps by an estimate of the difference
between its gradient and the average one; Local G-ECL's dual variable
``lambda_i`` plays the role of SCAFFOLD's ``c_i - c`` (Tyou et al., Prop. 2).
Smooth objectives only, as in both papers (docs/algorithms/scaffold.md and
local-gecl.md).

Clients work on ``f_j = N a_j L_j + psi`` so that the plain average of their
gradients is the gradient of the pooled objective.
"""

import numpy as np

from .._messages import show
from ._corrected_steps import _ControlVariateSolver
from .base import check_positive
from .decentralized import DecentralizedGECLImpl


_LR_DOC = """lr : float or "auto", default="auto"
        Local step size. ``"auto"``: each client's own ``1 / (K L_j)`` per
        block, with ``L_j`` the smoothness of its ``f_j`` (so that ``K`` local
        steps move as far as one full step of size ``1 / L_j``), and the server
        averages the replies weighted by ``1 / eta_j``, which keeps the pooled
        optimum a fixed point (``sum_j lambda_j = 0``). On clients whose
        smoothness spans four orders of magnitude this needed 189 (SCAFFOLD)
        and 175 (Local G-ECL) rounds to a 1e-8 gap, against 817 with the
        roughest client's step for everyone (``tests/test_control_variates.py``).
        Decentralized topologies keep one step for all (no server to weigh).
    local_steps : int, default=10
        Local steps ``K`` per round (full client batch)."""


class Scaffold(_ControlVariateSolver):
    """SCAFFOLD, option II (Karimireddy et al., 2020).

    Parameters
    ----------
    {lr}
    server_lr : float, default=1.0
        Global step ``eta_g``.

    Notes
    -----
    Client ``j`` runs ``y <- y - eta (grad f_j(y) - c_j + c)`` from the server
    model, then sets ``c_j+ = c_j - c + (x - y) / (K eta)`` and sends
    ``(Delta y, Delta c)``; the server moves ``x += eta_g mean_S Delta y`` and
    ``c += (1/N) sum_S Delta c``. Communication: 2 vectors down, 2 up.
    Partial participation is supported. Exact for smooth objectives with full
    participation (the control variates remove client drift).
    """.format(lr=_LR_DOC)

    name = "scaffold"
    per_client_steps = True

    def __init__(self, lr="auto", *, local_steps=10, server_lr=1.0):
        self.lr = lr
        self.local_steps = local_steps
        self.server_lr = server_lr

    def init_server(self, theta0):
        x = np.array(theta0, dtype=float)
        return {"x": x, "c": np.zeros_like(x)}

    def broadcast(self, server, rnd):
        return {"x": server["x"], "c": server["c"]}

    def client_update(self, client, state, message, rng):
        state = dict(state)
        x, c = message["x"], message["c"]
        c_j = state.get("c", np.zeros_like(x))
        eta = self.client_steps_[state["j"]]
        y = x.copy()
        for _ in range(self.local_steps):
            y = y - eta * (self._grad(client, state["j"], y) - c_j + c)
        # the client's own step here too: then c_j = grad f_j at a fixed point
        c_new = c_j - c + (x - y) / (self.local_steps * eta)
        state["c"] = c_new
        return {"dy": y - x, "dc": c_new - c_j}, state

    def summed_fields(self, server):
        # the 1/eta_j-weighted mean of Delta y; the sum of Delta c
        return {"dy": self._step_weighted_kind(), "dc": "sum"}

    def aggregate_sums(self, server, sums, participants):
        N = self.problem_.n_clients
        dy = self._step_weighted_mean(sums["dy"], participants)
        dc = sums["dc"] / N
        return {"x": server["x"] + self.server_lr * dy, "c": server["c"] + dc}

    def client_models(self, server, message, replies):
        return [message["x"] + r["dy"] for r in replies]


class LocalGECL(_ControlVariateSolver):
    """Local Generalized Exact Consensus Learning, centralized (Tyou et al., Alg. 2).

    Parameters
    ----------
    {lr}
    topology : "centralized", {{"ring", "torus", "complete", "erdos-renyi"}} or array
        ``"centralized"`` (default) is Algorithm 2 with a server; a graph name
        (Metropolis-Hastings weights) or a symmetric doubly stochastic mixing
        matrix runs the decentralized Algorithm 1 (no server; 2 vectors per
        edge and direction each round).
    alpha : float, default=0.0
        G-ECL's edge coupling ``alpha_{{i|j}}`` (decentralized only; 0 in all of
        the paper's experiments). In absolute units (a curvature, like the
        gradients it is added to): on the diabetes ring of the tests 0.01
        converges (faster than 0) while 0.1 diverges.
    warm_start_duals : bool, default=False
        Start the duals at ``grad f_i(x0) - grad f(x0)`` (one extra round).
    first_gradient : {{"local", "server"}}, default="local"
        Where the first local step of a round takes its gradient: at the
        client's previous local model (the paper's Algorithm 2) or at the
        server model, which makes the method SCAFFOLD option II with
        ``lambda_i = c_i - c`` (the paper's Prop. 2; pinned by a test).
        Centralized only.
    edge_probability : float or None, default=None
        Erdos-Renyi edge probability.
    seed : int, default=0
        Erdos-Renyi graph seed.

    Notes
    -----
    ``lr="auto"`` here is ``1 / (max(K, 4) L)``: the paper's bound
    ``eta <= 1 / (4 L)`` matters when ``K`` is small, because the first
    gradient of a round is a round old.

    Worker ``i`` steps with ``grad f_i - lambda_i`` from the server model, sends
    its local model (1 vector up); the server averages (1 vector down); the
    worker then sets ``lambda_i += (x_server - x_i) / (K eta)``. Full
    participation (the paper's analysis has no sampling). Decentralized
    Local G-ECL over a topology is :class:`DecentralizedLocalGECL`.
    ``warm_start_duals=True`` spends the first round on gradients:
    ``lambda_i = grad f_i(x0) - grad f(x0)`` (the paper's section IV-B; centralized
    only). By default the duals start at zero, as in all the paper's experiments.
    """.format(lr=_LR_DOC)

    name = "local-gecl"
    per_client_steps = True
    _wire_attributes = ("decentralized_",)  # see FederatedSolver
    requires_full_participation = True
    # The first local gradient is taken at the previous local model (stale by a
    # round): with K = 1, step 1/L diverges on the diabetes splits and 1/(2L)
    # oscillates; 1/(4L), the paper's bound, converges. So "auto" is 1/(max(K, 4) L).
    min_auto_divisor = 4

    def __init__(self, lr="auto", *, local_steps=10, topology="centralized", alpha=0.0,
                 warm_start_duals=False, first_gradient="local", edge_probability=None,
                 seed=0):
        self.lr = lr
        self.local_steps = local_steps
        self.topology = topology
        self.alpha = alpha
        self.warm_start_duals = warm_start_duals
        self.first_gradient = first_gradient
        self.edge_probability = edge_probability
        self.seed = seed

    def setup(self, problem, participation=1.0):
        if self.first_gradient not in ("local", "server"):
            raise ValueError("first_gradient must be 'local' or 'server'; "
                             f"got {show(self.first_gradient)}.")
        check_positive(self.alpha, "alpha", strict=False)
        self.decentralized_ = None
        if not (isinstance(self.topology, str) and self.topology == "centralized"):
            self.decentralized_ = DecentralizedGECLImpl(
                self.topology, lr=self.lr, local_steps=self.local_steps, alpha=self.alpha,
                edge_probability=self.edge_probability, seed=self.seed,
            ).setup(problem, participation)
        elif self.alpha:
            raise ValueError("alpha (the G-ECL edge term) applies to decentralized topologies only.")
        if self.warm_start_duals and self.decentralized_ is not None:
            raise ValueError("warm_start_duals is implemented for the centralized topology only "
                             "(the decentralized version needs gossiped gradients).")
        return super().setup(problem, participation)

    # a decentralized topology runs Algorithm 1 (see skfed.solvers.decentralized)
    def _impl(self):
        return self.decentralized_

    def personalize(self, server, message, j):
        impl = self._impl()
        return impl.personalize(server, message, j) if impl else message

    def round_traffic(self, messages, replies, participants):
        impl = self._impl()
        if impl:
            return impl.round_traffic(messages, replies, participants)
        return super().round_traffic(messages, replies, participants)

    def init_server(self, theta0):
        if self._impl():
            return self._impl().init_server(theta0)
        # with warm_start_duals the first round only gathers gradients
        return {"x": np.array(theta0, dtype=float), "gathering": bool(self.warm_start_duals),
                "mean_grad": None}

    def broadcast(self, server, rnd):
        if self._impl():
            return self._impl().broadcast(server, rnd)
        message = {"x": server["x"]}
        if server.get("gathering"):
            message["gather"] = 1.0
        if server.get("mean_grad") is not None:
            message["mean_grad"] = server["mean_grad"]
        return message

    def client_update(self, client, state, message, rng):
        if self._impl():
            return self._impl().client_update(client, state, message, rng)
        state = dict(state)
        x_server, j, K = message["x"], state["j"], self.local_steps
        eta = self.client_steps_[j]
        if message.get("gather"):  # warm start of the duals: send grad f_j(x0) first
            state["grad0"] = self._grad(client, j, x_server)
            return {"grad": state["grad0"]}, state
        if "lam" not in state:
            lam = np.zeros_like(x_server)
            if "mean_grad" in message:  # lambda_j = grad f_j(x0) - grad f(x0) (Section IV-B)
                lam = state.pop("grad0") - message["mean_grad"]
            state.update(lam=lam, x=x_server.copy())
        else:  # dual step of the previous round, now that its average is known
            state["lam"] = state["lam"] + (x_server - state["x"]) / (K * eta)
        first = state["x"] if self.first_gradient == "local" else x_server
        x = self._corrected_steps(client, j, x_server, first, state["lam"])
        state["x"] = x
        return {"x": x}, state

    def aggregate(self, server, replies, weights, participants):
        if self._impl():
            return self._impl().aggregate(server, replies, weights, participants)
        return super().aggregate(server, replies, weights, participants)

    def summed_fields(self, server):
        if self._impl():  # no server: each node mixes its neighbours' own models
            return None
        if server.get("gathering"):  # the mean of the gradients at x0
            return {"grad": "sum"}
        return {"x": self._step_weighted_kind()}

    def aggregate_sums(self, server, sums, participants):
        if server.get("gathering"):
            return {"x": server["x"], "gathering": False,
                    "mean_grad": sums["grad"] / len(participants)}
        return {"x": self._step_weighted_mean(sums["x"], participants),
                "gathering": False, "mean_grad": None}

    def client_models(self, server, message, replies):
        return [r["x"] for r in replies] if "x" in replies[0] else None
