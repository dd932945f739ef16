"""Per-iteration records of a federated boosting fit (``est.history_``)."""

import numpy as np

FIELDS = ("iteration", "rounds", "bytes", "histograms", "train_loss", "validation_loss",
          "n_leaves", "max_depth", "wall_time")


class BoostingHistory:
    """One record per boosting iteration, plus the baseline as iteration 0.

    Notes
    -----
    The fields of each record (``history_["field"]`` gives one as an array):

    iteration : int
        0 is the baseline (no tree); iteration ``i`` added the ``i``-th tree
        (or, with several classes, the ``i``-th tree of each class).
    rounds : int
        Rounds of exchange with the sites that grew the iteration's trees
        (about the trees' depth plus one; the leaf refits of the absolute
        error and quantile losses included).
    bytes : int
        Bytes of those rounds, both directions, every site (the federation
        session's ledger).
    histograms : int
        Node histograms the sites summed for the iteration.
    train_loss : float
        The training loss after the iteration (scikit-learn's loss, a weighted
        mean), pooled from the sites' sums of losses and weights.
    validation_loss : float
        The same on the held-out rows (early stopping), else NaN.
    n_leaves, max_depth : int
        Of the iteration's trees (leaves summed over classes).
    wall_time : float
        Seconds since the first iteration started.

    Attributes
    ----------
    setup_rounds, setup_bytes : int
        The schema, the totals and the bin thresholds' search.
    monitor_rounds, monitor_bytes : int
        Loss evaluations outside the trees' rounds (the held-out rows, the
        last training loss).
    binning_rounds : int
        Rounds of the bin thresholds' search (part of the setup).
    n_clients : int or None
    privacy : dict or None
        Under ``privacy=SecureAggregation()``: the fixed-point code
        (``fraction_bits``, ``bound``, ``sum_error`` per summed coordinate
        before the public scale is undone, ``scale``) and the number of masked
        sums (``masked_sums``); ``None`` for plain sums.
    """

    def __init__(self):
        self.records = []
        self.setup_rounds = self.setup_bytes = 0
        self.monitor_rounds = self.monitor_bytes = 0
        self.binning_rounds = 0
        self.n_clients = None
        self.privacy = None

    def append(self, **record):
        self.records.append(record)

    def __len__(self):
        return len(self.records)

    def __getitem__(self, field):
        """All iterations' values of one field, as an array."""
        if field not in FIELDS:
            raise KeyError(f"unknown history field {field!r}; fields are {FIELDS}.")
        return np.array([r.get(field, np.nan) for r in self.records])

    def __repr__(self):
        last = self.records[-1] if self.records else {}
        return (f"BoostingHistory(iterations={max(len(self) - 1, 0)}, "
                f"clients={self.n_clients}, train_loss={last.get('train_loss')})")

    def to_dict(self):
        """``{field: list}`` with one entry per iteration."""
        return {f: [r.get(f, np.nan) for r in self.records] for f in FIELDS}

    def to_frame(self):
        """A :class:`pandas.DataFrame`, one row per iteration (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("history_.to_frame() needs pandas; use to_dict().") from exc
        return pd.DataFrame(self.to_dict())

    def plot(self, fields=("train_loss", "validation_loss"), ax=None):
        """The loss per iteration (needs matplotlib); returns the axes."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("history_.plot() needs matplotlib.") from exc
        if ax is None:
            _, ax = plt.subplots(figsize=(5, 3.5))
        for field in [fields] if isinstance(fields, str) else fields:
            values = self[field]
            if np.isfinite(values).any():
                ax.plot(self["iteration"], values, label=field)
        ax.set_xlabel("iteration")
        ax.set_ylabel("loss")
        ax.legend()
        return ax
