"""Which rows a client uses at each local step (full batch or minibatches)."""

import math

import numpy as np

from ..federation.operations import check_deadline
from ..federation.wire import wire_class


@wire_class(role="value")
class LocalSchedule:
    """Local steps of one round.

    Parameters
    ----------
    local_steps : int or None
        Number of local steps; ignored when ``local_epochs`` is given.
    local_epochs : float or None
        Passes over the client's data; with ``batch_size`` this gives
        ``K_j = ceil(local_epochs * n_j / batch_size)`` steps (FCO paper).
    batch_size : int or None
        Rows per step; ``None`` means the full client batch (deterministic).
    """

    def __init__(self, local_steps=1, local_epochs=None, batch_size=None):
        self.local_steps = local_steps
        self.local_epochs = local_epochs
        self.batch_size = batch_size

    def n_steps(self, n_rows):
        if self.local_epochs is not None:
            batch = n_rows if self.batch_size is None else min(self.batch_size, n_rows)
            return max(1, math.ceil(self.local_epochs * n_rows / batch))
        return int(self.local_steps)

    def batches(self, n_rows, rng):
        """Yield the row indices of each local step (``None`` = all rows).

        Minibatches follow shuffle -> repeat -> batch: a fresh permutation per
        pass, cut into consecutive batches that may straddle passes.
        """
        K = self.n_steps(n_rows)
        if self.batch_size is None or self.batch_size >= n_rows:
            for _ in range(K):
                check_deadline()  # every local step, at a site
                yield None
            return
        B = self.batch_size
        stream = np.empty(0, dtype=np.intp)
        for _ in range(K):
            check_deadline()
            while stream.size < B:
                stream = np.concatenate([stream, rng.permutation(n_rows)])
            rows, stream = stream[:B], stream[B:]
            yield np.sort(rows)
