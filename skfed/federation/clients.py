"""Grouping samples into clients, and the weight each client has in the objective."""

import numbers

import numpy as np

from .._messages import show

CLIENT_WEIGHTINGS = ("samples", "uniform")


def group_clients(clients, n_samples):
    """Split sample indices by client label.

    Parameters
    ----------
    clients : array-like of shape (n_samples,) or None
        Any hashable labels; ``None`` puts every sample in one client.
    n_samples : int

    Returns
    -------
    labels : ndarray of shape (n_clients,)
        The distinct labels, sorted when they are comparable, else in order of
        first appearance.
    indices : list of ndarray
        Row indices of each client, in the order of ``labels``.
    """
    if clients is None:
        return np.array([0]), [np.arange(n_samples)]
    clients = np.asarray(clients)
    if clients.ndim != 1:
        clients = clients.reshape(-1) if clients.size == n_samples else clients
    if clients.ndim != 1 or clients.shape[0] != n_samples:
        raise ValueError(
            f"clients has {clients.shape[0] if clients.ndim else 0} entries but X has "
            f"{n_samples} rows: give one client label per sample."
        )
    if clients.dtype.kind == "f" and np.isnan(clients).any():
        raise ValueError("clients contains NaN: every sample needs a client label.")
    if clients.dtype.kind == "O" and any(
        c is None or (isinstance(c, numbers.Real) and c != c) for c in clients
    ):
        raise ValueError("clients contains missing labels (None or NaN).")
    try:
        labels, inverse = np.unique(clients, return_inverse=True)
    except TypeError:  # labels of mixed, non-comparable types
        order = {}
        inverse = np.array([order.setdefault(c, len(order)) for c in clients])
        labels = np.empty(len(order), dtype=object)
        labels[:] = list(order)
    indices = [np.flatnonzero(inverse == k) for k in range(len(labels))]
    return labels, indices


def client_weights(sample_weight_sums, weighting):
    """Weight ``a_j`` of each client's mean loss in the global objective.

    ``"samples"``: ``a_j = S_j / S`` (sum of sample weights), which makes the
    federated objective exactly the pooled one. ``"uniform"``: ``a_j = 1/N``,
    the objective of most papers.
    """
    sums = np.asarray(sample_weight_sums, dtype=float)
    if weighting == "samples":
        return sums / sums.sum()
    if weighting == "uniform":
        return np.full(sums.shape, 1.0 / sums.size)
    raise ValueError(
        f"client_weighting must be one of {CLIENT_WEIGHTINGS}, got {show(weighting)}."
    )


def describe_label(label):
    """A client label for messages: ``1`` or ``'paris'``, never ``np.int64(1)``."""
    return repr(label.item() if isinstance(label, np.generic) else label)


def check_clients_nonempty(labels, indices, sample_weight):
    """Refuse a client with no rows, or whose rows all have zero weight."""
    for label, idx in zip(labels, indices):
        if idx.size == 0 or not np.any(sample_weight[idx] > 0):
            raise ValueError(
                f"client {describe_label(label)} has no samples with positive weight; "
                "drop it or give it data."
            )
