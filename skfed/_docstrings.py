"""Parameter documentation shared by every estimator."""

SHARED_DOC = """
    fit_intercept : bool, default=True
        Fit an unpenalized intercept (one per output: per class for a
        multiclass classifier, per target for several targets).
    solver : str or FederatedSolver, default="auto"
        ``"auto"``: for a smooth loss under full participation, Newton's
        method (``"newton"``): each client sends its gradient and Hessian,
        i.e. its second moments ``X'DX`` (not only a gradient), and the
        pooled optimum takes a handful of rounds (one for least squares);
        past 8 MiB per message it sends gradients only (quasi-Newton). Under
        partial participation FedDyn; for the hinge loss DualFL (l2), FedMLS
        (l1) or FedAvg (partial participation). All reach the pooled
        optimum under any heterogeneity without tuning. Or a name
        (``"newton"``, ``"dualfl"``, ``"feddyn"``, ``"afedpd"``,
        ``"fedadmm"``, ``"fedpd"``, ``"feddualavg"``, ``"feddualavg-osp"``,
        ``"fedmid"``, ``"fedmid-osp"``, ``"fedavg"``, ``"fedprox"``,
        ``"fedmls"``; for a smooth penalty also ``"scaffold"``,
        ``"local-gecl"``, ``"dsgd"``) or a solver object such as
        ``FedDualAvg(client_lr=0.01, local_epochs=1, batch_size=10)``.
        Names ignore case, ``-``, ``_`` and spaces, and class names work too
        (``"DualFL"``, ``"LocalGECL"``, ``"FedNewton"``); an unknown name is
        refused with the closest valid ones.
        ``solver_`` is the solver used. Which solver suits which model, and
        which reach the pooled optimum: ``skfed.support_matrix()``.
    max_rounds : int, default=1000
        Communication rounds at most.
    tol : float, default=1e-4
        Stop when the norm of the proximal-gradient mapping of the global
        objective at the server model falls below ``tol`` times its value at
        the zero model. ``tol=0`` runs ``max_rounds`` rounds.
    monitor_every : int, default=1
        Evaluate the objective and the stopping rule after every
        ``monitor_every``-th round (and the last): the monitor is a pass of
        its own (a gradient from each client), so ``monitor_every=10`` makes
        a first-order round about half as costly, at the price of stopping
        up to ``monitor_every - 1`` rounds late; ``history_`` has NaN
        objective and stationarity in the rounds between. Newton's replies
        already carry what the monitor needs: it never pays the extra pass.
    participation : float in (0, 1], default=1.0
        Fraction of clients sampled each round.
    client_weighting : {"samples", "uniform"}, default="samples"
        ``"samples"``: each client's mean loss weighs its share of the
        (sample-weighted) data, so the objective is exactly the pooled one.
        ``"uniform"``: every client weighs ``1 / n_clients`` (the papers').
    privacy : SecureAggregation, DifferentialPrivacy or None, default=None
        :class:`skfed.privacy.SecureAggregation`: the server learns only the
        sums of the sites' messages that its update needs (pairwise masks
        from X25519 key agreements, fixed point modulo ``2**64``); the model
        equals the unmasked one to the fixed-point precision, reported in
        ``history_.privacy``. Solvers whose server reads one site's reply
        (A-FedPD, decentralized topologies) are refused before round one.
        :class:`skfed.privacy.DifferentialPrivacy`: also client-level
        ``(epsilon, delta)`` differential privacy (clipping, Gaussian noise
        shared by the sites, ``dp-accounting``), with FedAvg or FedProx at an
        explicit ``client_lr`` and ``client_weighting="uniform"``;
        ``history_["epsilon"]`` per round. See the Privacy page of the docs.
    executor : {"sequential", "threads", "loky", "dask"} or Executor, default="sequential"
        Where client work runs; data is shipped once per fit. ``"dask"`` (or
        :class:`~skfed.executors.DaskExecutor` with ``placement=``) uses the
        running Dask client, each client's data and solver state resident on
        one worker (needs ``skfed[dask]``). A client that fails is dropped from
        its round or the fit stops with :class:`~skfed.exceptions.ClientFailureError`;
        a fit that does not finish leaves the estimator as it was.
    n_jobs : int or None, default=None
        Workers for the threads / loky executors.
    random_state : int, RandomState or None, default=None
        Seeds client sampling and minibatches (same result on every executor).
    verbose : int, default=0
        1 shows a progress bar, 2 one line per round (on stderr).
    warm_start : bool, default=False
        Continue from the previous fit: the same solver on the same clients
        resumes its whole state (duals, control variates, anchors); otherwise
        it restarts from the previous model.
"""

# attributes every fitted estimator has (after its own coef_ / intercept_)
FIT_ATTRS_DOC = """    n_iter_ : int
        Rounds run.
    objective_ : float
        Final value of the objective (in skfed's units: the mean loss plus the penalty).
    history_ : ConvergenceHistory
        Per-round objective, stationarity, sparsity and bytes communicated.
    solver_ : FederatedSolver
        The solver used, with its resolved step sizes.
    clients_ : ndarray
        Client labels, in the order clients are indexed (``array([0])`` after
        a fit without ``clients=``).
    n_clients_ : int
        Number of clients. 1 after ``fit(X, y)`` without ``clients=``: all
        rows then form one client and the fit is centralized.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Defined when ``X`` has feature names.
"""

CLASSIFIER_ATTRS_DOC = """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The union of the labels held by the clients, sorted.
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        One row for two classes (the score of ``classes_[1]``), else one per class.
    intercept_ : ndarray of shape (1,) or (n_classes,)
""" + FIT_ATTRS_DOC
