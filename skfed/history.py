"""Per-round convergence records of a federated fit (``est.history_``)."""

import numpy as np

FIELDS = (
    "round", "objective", "stationarity", "suboptimality", "nnz", "rank",
    "consensus", "bytes_up", "bytes_down", "monitor_bytes", "n_participants",
    "n_dropped", "wall_time", "epsilon",
)


class ConvergenceHistory:
    """One record per round, plus the initial model as round 0.

    Notes
    -----
    The fields of each record (``history_["field"]`` gives one as an array):

    round : int
        0 is the initial model; ``n_iter_`` rounds follow.
    objective : float
        Global objective ``sum_j a_j L_j + psi`` at the server model.
    stationarity : float
        Norm of the proximal-gradient mapping of the global objective at the
        server model (the gradient norm when there is no penalty); zero
        exactly at the optimum. The stopping rule compares it with ``tol``
        times its value at the zero model.
    suboptimality : float
        ``(objective - P*) / |P*|`` once a reference optimum is set with
        :meth:`set_reference` (NaN before).
    nnz, rank : int
        Exact non-zero coefficients; numerical rank of the coefficient matrix
        (singular values above ``1e-10`` times the largest; 1 for vectors).
    consensus : float
        Weighted mean squared distance of the participants' models (implied
        by their replies) to their average; NaN where a solver has no client
        models.
    bytes_up, bytes_down : int
        Bytes the algorithm sent this round, counted from the arrays really
        exchanged (all participants together).
    monitor_bytes : int
        Extra traffic spent only on monitoring (every client sends its loss
        and gradient at the server model).
    n_participants : int
        Clients whose replies were aggregated this round.
    n_dropped : int
        Clients that failed this round and were left out (see ``dropped``).
    wall_time : float
        Seconds since the first round started.
    epsilon : float
        Under :class:`~skfed.privacy.DifferentialPrivacy`: the privacy
        budget spent after this round (``dp_accounting``'s RDP accountant);
        NaN otherwise.

    Attributes
    ----------
    setup_bytes : int
        One-time traffic before round one: client sizes and smoothness
        constants, and the federated Lanczos estimate of the pooled loss's
        smoothness (see :mod:`skfed.federation.smoothness`).
    setup_rounds : int
        Communication rounds spent on that setup.
    placement_bytes : int
        One-time bytes moved to place the clients' data and initial solver
        state where they run (a Dask worker, loky's memory-mapped files; 0 in
        process). Not part of any round's traffic.
    dropped : list of dict
        One entry per client left out of a round because it failed:
        ``round``, ``client`` (its label), ``worker`` and ``error``.
    inference_bytes : int
        Bytes of the passes after the last round that gather the sums of a
        GLM's inference (information matrices, deviance, the null model's
        sums; see :mod:`skfed.linear_model._inference`); 0 without inference.
    inference_rounds : int
        Those passes (one at the optimum, the rest for the null model).
    ledger : dict
        The fit's session ledger (:class:`skfed.federation.session.Ledger`):
        ``{phase: {"rounds", "bytes"}}`` for ``setup``, ``rounds``, ``monitor``,
        ``inference`` and ``analysis``, counted from every message's payload
        (both directions, every site). ``setup`` and ``inference`` are
        ``setup_*`` and ``inference_*``; ``rounds`` and ``monitor`` add up the
        records' ``bytes_up + bytes_down`` and ``monitor_bytes``.
    reference_objective : float or None
    n_clients : int or None
        Clients in the fit (None when not recorded). 1 after ``fit(X, y)``
        without ``clients=`` (the repr then says the fit was centralized).
    privacy : dict or None
        Under ``privacy=SecureAggregation()``: ``secure_aggregation`` (True),
        the fixed-point ``fraction_bits`` and ``bound``, and ``sum_error``,
        the largest error of a decoded sum per coordinate and exchange.
        ``None`` without privacy. (``setup_rounds`` / ``setup_bytes`` then
        include the key agreement: one round, 32 bytes per public key.)
    """

    def __init__(self):
        self.records = []
        self.setup_bytes = 0
        self.setup_rounds = 0
        self.placement_bytes = 0
        self.dropped = []
        self.inference_bytes = 0
        self.inference_rounds = 0
        self.ledger = {}
        self.reference_objective = None
        self.n_clients = None
        self.privacy = None

    def append(self, **record):
        record.setdefault("suboptimality", np.nan)
        self.records.append(record)

    def __len__(self):
        return len(self.records)

    def __getitem__(self, field):
        """All rounds' values of one field, as an array."""
        if field not in FIELDS:
            raise KeyError(f"unknown history field {field!r}; fields are {FIELDS}.")
        return np.array([r.get(field, np.nan) for r in self.records])

    def __repr__(self):
        last = self.records[-1] if self.records else {}
        n_clients = getattr(self, "n_clients", None)  # histories pickled before it existed
        clients = "" if n_clients is None else f"clients={n_clients}, "
        if n_clients == 1:
            clients = "clients=1 (one client: a centralized fit), "
        return (f"ConvergenceHistory(rounds={max(len(self) - 1, 0)}, {clients}"
                f"objective={last.get('objective')}, stationarity={last.get('stationarity')})")

    def set_reference(self, objective_star):
        """Fill ``suboptimality`` against a known optimal objective value."""
        self.reference_objective = float(objective_star)
        denom = max(abs(self.reference_objective), np.finfo(float).tiny)
        for r in self.records:
            r["suboptimality"] = (r["objective"] - self.reference_objective) / denom
        return self

    def to_dict(self):
        """``{field: list}`` with one entry per round."""
        return {f: [r.get(f, np.nan) for r in self.records] for f in FIELDS}

    def to_frame(self):
        """A :class:`pandas.DataFrame`, one row per round (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("history_.to_frame() needs pandas; use to_dict() without it.") from exc
        return pd.DataFrame(self.to_dict())

    def plot(self, fields=("objective", "stationarity"), axes=None, label=None):
        """Plot fields against rounds (log scale where positive); needs matplotlib.

        Returns the matplotlib axes.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("history_.plot() needs matplotlib: pip install 'skfed[plot]'.") from exc
        fields = [fields] if isinstance(fields, str) else list(fields)
        if axes is None:
            _, axes = plt.subplots(1, len(fields), figsize=(4.5 * len(fields), 3.5), squeeze=False)
            axes = axes[0]
        rounds = self["round"]
        for ax, field in zip(np.atleast_1d(axes), fields):
            values = self[field]
            if field == "objective" and self.reference_objective is not None:
                values, field = self["suboptimality"], "suboptimality"
            ax.plot(rounds, values, label=label)
            if np.all(values[np.isfinite(values)] > 0):
                ax.set_yscale("log")
            ax.set_xlabel("round")
            ax.set_ylabel(field)
            integer_round_ticks(ax)
        return axes


def integer_round_ticks(ax):
    """Ticks only at whole rounds on the x axis of ``ax`` (a one-round fit would
    otherwise get ticks at 0.2, 0.4, ...)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
