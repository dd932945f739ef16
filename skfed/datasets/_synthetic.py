"""The FedDualAvg paper's synthetic federated LASSO sets (App. B.2.1)."""

import numpy as np
from sklearn.utils import check_random_state

# config: (number of true non-zeros d1, clients M, samples per client n_m)
LASSO_CONFIGS = {"I": (512, 64, 128), "II": (64, 64, 128), "III": (8, 64, 128),
                 "IV": (512, 256, 32)}


def make_federated_lasso(config="I", *, n_features=1024, n_clients=None,
                         n_samples_per_client=None, n_informative=None, noise=1.0,
                         random_state=None):
    """Synthetic sparse regression with strong client heterogeneity.

    For client ``m``, a centre ``mu_m ~ N(0, I)`` is drawn and its samples are
    ``x = mu_m + delta`` with ``delta ~ N(0, I)``; ``y = w_true . x + b + eps``
    with ``w_true = [1, ..., 1, 0, ..., 0]`` (``n_informative`` ones),
    ``b ~ N(0, 1)`` and ``eps ~ N(0, noise^2)`` (Yuan, Zaheer & Reddi, ICML
    2021, App. B.2.1).

    Parameters
    ----------
    config : {"I", "II", "III", "IV"}, default="I"
        The paper's sets: (non-zeros, clients, samples per client) =
        I (512, 64, 128), II (64, 64, 128), III (8, 64, 128), IV (512, 256, 32),
        all with 1024 features.
    n_features, n_clients, n_samples_per_client, n_informative : int, optional
        Override the configuration (for smaller experiments).
    noise : float, default=1.0
        Standard deviation of the label noise.
    random_state : int, RandomState or None, default=None

    Returns
    -------
    X : ndarray of shape (n_clients * n_samples_per_client, n_features)
    y : ndarray of shape (n_samples,)
    clients : ndarray of shape (n_samples,)
        Client index of each row.
    w_true : ndarray of shape (n_features,)
    """
    if config not in LASSO_CONFIGS:
        raise ValueError(f"config must be one of {sorted(LASSO_CONFIGS)}; got {config!r}.")
    d1, M, n_m = LASSO_CONFIGS[config]
    d1 = n_informative if n_informative is not None else d1
    M = n_clients if n_clients is not None else M
    n_m = n_samples_per_client if n_samples_per_client is not None else n_m
    if not 0 <= d1 <= n_features:
        raise ValueError(f"n_informative={d1} must be between 0 and n_features={n_features}.")
    rng = check_random_state(random_state)
    w_true = np.zeros(n_features)
    w_true[:d1] = 1.0
    b_true = rng.standard_normal()
    centres = rng.standard_normal((M, n_features))
    X = np.repeat(centres, n_m, axis=0) + rng.standard_normal((M * n_m, n_features))
    y = X @ w_true + b_true + noise * rng.standard_normal(M * n_m)
    clients = np.repeat(np.arange(M), n_m)
    return X, y, clients, w_true
