"""Decentralized solvers: no server, nodes talk to their graph neighbours.

The "server" state here is the network's memory in a simulation: it holds
every node's last message and hands each node only the mixtures of its
neighbours' messages (``sum_j W_ij x_j``), which the node would compute from
what its neighbours sent it. Traffic is counted per edge: every node sends
its reply to each neighbour.

The history's server model is the average of the nodes' models, and
``consensus`` their spread.
"""

import numpy as np

from .base import message_nbytes
from ._corrected_steps import _ControlVariateSolver
from .topology import mixing_matrix


class _DecentralizedSolver(_ControlVariateSolver):
    requires_full_participation = True
    min_auto_divisor = 4
    _wire_attributes = ("mixing_", "adjacency_", "degrees_")  # see FederatedSolver

    def setup(self, problem, participation=1.0):
        super().setup(problem, participation)
        topology = self.topology
        self.mixing_ = mixing_matrix(topology, problem.n_clients,
                                     edge_probability=self.edge_probability, seed=self.seed)
        self.adjacency_ = (self.mixing_ > 0) & ~np.eye(problem.n_clients, dtype=bool)
        self.degrees_ = self.adjacency_.sum(axis=1)
        return self

    def init_server(self, theta0):
        N = self.problem_.n_clients
        X = np.tile(np.asarray(theta0, dtype=float), (N, 1))
        return self._network_state(X, None, None)

    def _network_state(self, X, V, mixed_prev):
        """What the network holds after a round; ``mixed`` (``W @ X``, what every node
        will mix next round) is computed once here, and each node reads its row."""
        return {"X": X, "V": V, "mixed": self.mixing_ @ X, "mixed_prev": mixed_prev,
                "x": X.mean(axis=0)}

    def broadcast(self, server, rnd):
        return {"round": rnd}

    def server_model(self, server):
        return server["x"]

    def client_models(self, server, message, replies):
        return [r["x"] for r in replies]

    def round_traffic(self, messages, replies, participants):
        # every node sends its reply to each neighbour, and receives theirs
        sent = int(sum(d * message_nbytes(r) for d, r in zip(self.degrees_[participants], replies)))
        return sent, sent


class DSGD(_DecentralizedSolver):
    """Decentralized (gossip) gradient descent with local steps.

    Each round node ``i`` averages its neighbours' models with the mixing
    matrix and takes ``K`` gradient steps on its own ``f_i``. Under
    heterogeneity a constant step leaves it biased (client drift): the
    baseline decentralized Local G-ECL corrects.

    Parameters
    ----------
    topology : {"ring", "torus", "complete", "erdos-renyi"} or array, default="ring"
        The graph (Metropolis-Hastings weights) or a mixing matrix
        (symmetric, doubly stochastic, connected).
    lr : float or "auto", default="auto"
        ``"auto"``: ``1 / (max(K, 4) L)``.
    local_steps : int, default=10
    edge_probability : float or None, default=None
        Erdos-Renyi edge probability (default ``2 log n / n``).
    seed : int, default=0
        Erdos-Renyi graph seed.
    """

    name = "dsgd"

    def guarantee(self, problem, participation=1.0):
        return "biased", "constant-step gossip SGD: nodes disagree by a drift-dependent amount"

    def __init__(self, topology="ring", *, lr="auto", local_steps=10, edge_probability=None,
                 seed=0):
        self.topology = topology
        self.lr = lr
        self.local_steps = local_steps
        self.edge_probability = edge_probability
        self.seed = seed

    def personalize(self, server, message, j):
        return {"mixed_x": server["mixed"][j]}

    def client_update(self, client, state, message, rng):
        x = message["mixed_x"].copy()
        for _ in range(self.local_steps):
            x = x - self.steps_ * self._grad(client, state["j"], x)
        return {"x": x}, state

    def aggregate(self, server, replies, weights, participants):
        return self._network_state(np.array([r["x"] for r in replies]), None, None)


class DecentralizedGECLImpl(_DecentralizedSolver):
    """Decentralized Local G-ECL (Tyou et al., Alg. 1; body reconstructed).

    Used through ``LocalGECL(topology=...)``; the reconstruction is described in
    docs/algorithms/local-gecl.md.
    """

    name = "local-gecl"

    def __init__(self, topology="ring", *, lr="auto", local_steps=10, alpha=0.0,
                 edge_probability=None, seed=0):
        self.topology = topology
        self.lr = lr
        self.local_steps = local_steps
        self.alpha = alpha
        self.edge_probability = edge_probability
        self.seed = seed

    def personalize(self, server, message, j):
        out = {"mixed_x": server["mixed"][j]}
        if server["V"] is not None:
            out["mixed_v"] = self.mixing_[j] @ server["V"]
            if self.alpha:
                prev = server["mixed_prev"]
                out["laplacian"] = self.adjacency_[j] @ prev - self.degrees_[j] * prev[j]
        return out

    def client_update(self, client, state, message, rng):
        state = dict(state)
        mixed = message["mixed_x"]
        eta, K, j = self.steps_, self.local_steps, state["j"]
        if "lam" not in state:
            state.update(lam=np.zeros_like(mixed), x=mixed.copy())
        else:
            state["lam"] = state["lam"] + state["v"] - message["mixed_v"]
            if self.alpha:
                state["lam"] = state["lam"] + 0.5 * self.alpha * message["laplacian"]
        # first step: gradient at the node's previous model, step from the mixed model
        x = self._corrected_steps(client, j, mixed, state["x"], state["lam"])
        state["v"] = (mixed - x) / (K * eta)
        state["x"] = x
        return {"x": x, "v": state["v"]}, state

    def aggregate(self, server, replies, weights, participants):
        X = np.array([r["x"] for r in replies])
        V = np.array([r["v"] for r in replies])
        # server["mixed"] is what every node mixed this round (the edge term's x-tilde)
        return self._network_state(X, V, server["mixed"])
