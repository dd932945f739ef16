"""Drift correction by control variates: SCAFFOLD (option II) and centralized Local G-ECL.

Both correct each client's local steps by an estimate of the difference
between its gradient and the average one; Local G-ECL's dual variable
``lambda_i`` plays the role of SCAFFOLD's ``c_i - c`` (Tyou et al., Prop. 2).
Smooth objectives only, as in both papers (ALGORITHMS.md 5.2-5.3).

Clients work on ``f_j = N a_j L_j + psi`` so that the plain average of their
gradients is the gradient of the pooled objective.
"""

import numbers

import numpy as np

from .base import FederatedSolver, check_positive


class _ControlVariateSolver(FederatedSolver):
    penalty_support = "smooth"
    #: "auto" step is 1 / (max(K, this) L)
    min_auto_divisor = 1

    def _check_common(self):
        check_positive(self.lr, "lr", allow_auto=True)
        if not isinstance(self.local_steps, numbers.Integral) or self.local_steps < 1:
            raise ValueError(f"local_steps must be an integer >= 1; got {self.local_steps!r}.")

    def setup(self, problem, participation=1.0):
        self._check_common()
        super().setup(problem, participation)
        lay, N = problem.layout, problem.n_clients
        if self.lr == "auto":
            # the local loop runs on f_j = N a_j L_j + psi: its largest smoothness
            Lc = max(N * a * l["coef"] * l["joint"] for a, l in zip(problem.weights, problem.lipschitz))
            Li = max(N * a * l["intercept"] * l["joint"] for a, l in zip(problem.weights, problem.lipschitz))
            Lc += problem.smooth_curvature
            self.steps_ = lay.block_vector(1.0 / Lc if Lc > 0 else 1.0, 1.0 / Li if Li > 0 else 1.0)
            self.steps_ = self.steps_ / max(self.local_steps, self.min_auto_divisor)
        else:
            self.steps_ = lay.block_vector(self.lr, self.lr)
        return self

    def _corrected_steps(self, client, j, start, first_point, lam):
        """``K`` steps ``x <- x - eta (grad f_j(.) - lam)`` from ``start``; the first
        gradient is taken at ``first_point`` (Local G-ECL's stale first step)."""
        eta = self.steps_
        x = start - eta * (self._grad(client, j, first_point) - lam)
        for _ in range(self.local_steps - 1):
            x = x - eta * (self._grad(client, j, x) - lam)
        return x

    def _grad(self, client, j, x):
        problem = self.problem_
        g = problem.n_clients * problem.weights[j] * client.gradient(x)
        return problem.add_smooth_gradient(g, x)

    def init_client(self, j, theta0):
        return {"j": j}

    def server_model(self, server):
        return server["x"]


_LR_DOC = """lr : float or "auto", default="auto"
        Local step size. ``"auto"``: ``1 / (K L)`` per block with ``L`` the
        largest client's smoothness of ``f_j`` (so that ``K`` local steps move
        as far as one full step of size ``1 / L``).
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
        y = x.copy()
        for _ in range(self.local_steps):
            y = y - self.steps_ * (self._grad(client, state["j"], y) - c_j + c)
        c_new = c_j - c + (x - y) / (self.local_steps * self.steps_)
        state["c"] = c_new
        return {"dy": y - x, "dc": c_new - c_j}, state

    def aggregate(self, server, replies, weights, participants):
        N = self.problem_.n_clients
        dy = sum(r["dy"] for r in replies) / len(replies)
        dc = sum(r["dc"] for r in replies) / N
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
            raise ValueError(f"first_gradient must be 'local' or 'server'; got {self.first_gradient!r}.")
        check_positive(self.alpha, "alpha", strict=False)
        self.decentralized_ = None
        if not (isinstance(self.topology, str) and self.topology == "centralized"):
            from .decentralized import DecentralizedGECLImpl

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
        x_server, j, eta, K = message["x"], state["j"], self.steps_, self.local_steps
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
        if server.get("gathering"):
            return {"x": server["x"], "gathering": False,
                    "mean_grad": sum(r["grad"] for r in replies) / len(replies)}
        return {"x": sum(r["x"] for r in replies) / len(replies), "gathering": False,
                "mean_grad": None}

    def client_models(self, server, message, replies):
        return [r["x"] for r in replies] if "x" in replies[0] else None
