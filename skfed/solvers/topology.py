"""Communication graphs and mixing matrices for decentralized solvers."""

import numpy as np

from .._messages import show

TOPOLOGIES = ("ring", "torus", "complete", "erdos-renyi")


def metropolis_hastings(adjacency):
    """``W_ij = 1 / (1 + max(d_i, d_j))`` on edges, ``W_ii = 1 - sum_j W_ij``."""
    A = np.asarray(adjacency, dtype=bool)
    np.fill_diagonal(A, False)
    deg = A.sum(axis=1)
    W = np.where(A, 1.0 / (1.0 + np.maximum.outer(deg, deg)), 0.0)
    W[np.diag_indices_from(W)] = 1.0 - W.sum(axis=1)
    return W


def _connected(A):
    seen, frontier = {0}, [0]
    while frontier:
        i = frontier.pop()
        for j in np.flatnonzero(A[i]):
            if j not in seen:
                seen.add(j)
                frontier.append(j)
    return len(seen) == A.shape[0]


def adjacency(topology, n, *, edge_probability=None, seed=0):
    """Adjacency matrix of a named topology over ``n`` nodes."""
    A = np.zeros((n, n), dtype=bool)
    if n == 1:
        return A
    if topology == "ring":
        for i in range(n):
            A[i, (i + 1) % n] = A[(i + 1) % n, i] = True
    elif topology == "complete":
        A[:] = True
    elif topology == "torus":
        rows = next((r for r in range(int(np.sqrt(n)), 1, -1) if n % r == 0), None)
        if rows is None or rows < 2 or n // rows < 2:
            raise ValueError(f"a torus needs a composite number of nodes (rows x cols); got {n}.")
        cols = n // rows
        for r in range(rows):
            for c in range(cols):
                i = r * cols + c
                for j in (r * cols + (c + 1) % cols, ((r + 1) % rows) * cols + c):
                    if i != j:
                        A[i, j] = A[j, i] = True
    elif topology == "erdos-renyi":
        p = edge_probability if edge_probability is not None else min(1.0, 2 * np.log(n) / n)
        rng = np.random.default_rng(seed)
        for _ in range(100):
            upper = np.triu(rng.random((n, n)) < p, 1)
            A = upper | upper.T
            if _connected(A):
                break
        else:
            raise ValueError(f"no connected Erdos-Renyi graph with n={n}, p={p} in 100 draws; "
                             "raise edge_probability.")
    else:
        raise ValueError(f"topology must be one of {TOPOLOGIES} or a mixing matrix; "
                         f"got {show(topology)}.")
    np.fill_diagonal(A, False)
    return A


def mixing_matrix(topology, n, *, edge_probability=None, seed=0):
    """Mixing matrix ``W`` for a named topology (Metropolis-Hastings weights) or a
    user matrix, validated: ``n x n``, symmetric, non-negative, rows summing to one."""
    if isinstance(topology, str):
        return metropolis_hastings(adjacency(topology, n, edge_probability=edge_probability,
                                             seed=seed))
    W = np.asarray(topology, dtype=float)
    if W.shape != (n, n):
        raise ValueError(f"the mixing matrix must be {n} x {n} (one row per client); got {W.shape}.")
    if not np.allclose(W, W.T, atol=1e-12):
        raise ValueError("the mixing matrix must be symmetric.")
    if np.any(W < -1e-12):
        raise ValueError("the mixing matrix must be non-negative.")
    if not np.allclose(W.sum(axis=1), 1.0, atol=1e-10):
        raise ValueError("the mixing matrix must be doubly stochastic (rows summing to 1).")
    if n > 1 and not _connected((W > 0) & ~np.eye(n, dtype=bool)):
        raise ValueError("the mixing matrix's graph must be connected.")
    return W
