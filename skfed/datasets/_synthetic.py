"""The FedDualAvg paper's synthetic federated problems: LASSO, low rank, fMRI-like scans."""

import numpy as np
from sklearn.utils import check_random_state

from .._messages import show

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
        raise ValueError(f"config must be one of {sorted(LASSO_CONFIGS)}; got {show(config)}.")
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


# config: (true rank r, clients M, samples per client n_m), 32 x 32 matrices
LOW_RANK_CONFIGS = {"I": (16, 64, 128), "II": (4, 64, 128), "III": (1, 64, 128),
                    "IV": (16, 256, 32)}


def make_federated_low_rank(config="I", *, matrix_shape=(32, 32), n_clients=None,
                            n_samples_per_client=None, rank=None, noise=1.0,
                            flatten=False, random_state=None):
    """Synthetic low-rank matrix regression with strong client heterogeneity.

    For client ``m`` a centre ``mu_m`` (a ``d1 x d2`` matrix of iid N(0, 1)
    entries) is drawn, and its samples are ``X = mu_m + delta`` (iid N(0, 1)
    entries); ``y = <W_true, X> + b + eps`` with ``W_true = diag(1_r, 0)``,
    ``b ~ N(0, 1)`` and ``eps ~ N(0, noise^2)`` (Yuan, Zaheer & Reddi, ICML
    2021, App. B.3.1).

    Parameters
    ----------
    config : {"I", "II", "III", "IV"}, default="I"
        The paper's sets: (rank, clients, samples per client) =
        I (16, 64, 128), II (4, 64, 128), III (1, 64, 128), IV (16, 256, 32),
        all with 32 x 32 matrices.
    matrix_shape : tuple of two ints, default=(32, 32)
    n_clients, n_samples_per_client, rank : int, optional
        Override the configuration (for smaller experiments).
    noise : float, default=1.0
        Standard deviation of the label noise.
    flatten : bool, default=False
        Return ``X`` as ``(n_samples, d1 * d2)`` (row-major) instead of
        ``(n_samples, d1, d2)``.
    random_state : int, RandomState or None, default=None

    Returns
    -------
    X : ndarray of shape (n_samples, d1, d2) or (n_samples, d1 * d2)
    y : ndarray of shape (n_samples,)
    clients : ndarray of shape (n_samples,)
    W_true : ndarray of shape (d1, d2)
    """
    if config not in LOW_RANK_CONFIGS:
        raise ValueError(f"config must be one of {sorted(LOW_RANK_CONFIGS)}; got {show(config)}.")
    r, M, n_m = LOW_RANK_CONFIGS[config]
    r = rank if rank is not None else r
    M = n_clients if n_clients is not None else M
    n_m = n_samples_per_client if n_samples_per_client is not None else n_m
    d1, d2 = (int(v) for v in matrix_shape)
    if not 0 <= r <= min(d1, d2):
        raise ValueError(f"rank={r} must be between 0 and min(matrix_shape)={min(d1, d2)}.")
    rng = check_random_state(random_state)
    W_true = np.zeros((d1, d2))
    W_true[np.arange(r), np.arange(r)] = 1.0
    b_true = rng.standard_normal()
    centres = rng.standard_normal((M, d1, d2))
    X = np.repeat(centres, n_m, axis=0) + rng.standard_normal((M * n_m, d1, d2))
    y = np.einsum("ijk,jk->i", X, W_true) + b_true + noise * rng.standard_normal(M * n_m)
    clients = np.repeat(np.arange(M), n_m)
    if flatten:
        X = X.reshape(M * n_m, d1 * d2)
    return X, y, clients, W_true


def make_federated_fmri_like(n_subjects=6, n_sessions=12, n_scans=18, n_voxels=2000,
                             n_active=40, amplitude=(0.1, 0.3), random_state=None):
    """Two-stimulus block-design "scans" with subject and session effects.

    A stand-in for the Haxby fMRI data of the FedDualAvg paper's sparse
    logistic regression (Yuan, Zaheer & Reddi, ICML 2021, Sec. 5.3), which
    needs a download: more voxels than scans, sessions as natural clients,
    subjects as natural held-out groups. Each subject has its own anatomy (a
    voxel-wise offset, N(0, 0.5^2)) and response gain (uniform in [0.6, 1.4]);
    each session adds a drift (N(0, 0.3^2) per voxel); half the scans of a
    session show each stimulus (0 or 1), which moves ``n_active`` voxels by
    ``+-a * gain`` with ``a`` uniform in ``amplitude``; every scan adds
    N(0, 1) noise.

    Parameters
    ----------
    n_subjects, n_sessions, n_scans : int, default=6, 12, 18
        Subjects, sessions per subject and scans per session (the paper's
        data: 6 subjects, 11-12 sessions, 18 scans).
    n_voxels, n_active : int, default=2000, 40
        Features, and how many respond to the stimulus.
    amplitude : tuple of two floats, default=(0.1, 0.3)
        Range of the active voxels' response.
    random_state : int, RandomState or None, default=None

    Returns
    -------
    X : ndarray of shape (n_subjects * n_sessions * n_scans, n_voxels)
    y : ndarray of shape (n_samples,)
        The stimulus, 0 or 1.
    sessions : ndarray of shape (n_samples,)
        Session index (the clients).
    subjects : ndarray of shape (n_samples,)
        Subject index.
    pattern : ndarray of shape (n_voxels,)
        The stimulus response; its non-zeros are the active voxels.
    """
    if not 0 <= n_active <= n_voxels:
        raise ValueError(f"n_active={n_active} must be between 0 and n_voxels={n_voxels}.")
    if n_scans < 2 or n_scans % 2:
        raise ValueError(f"n_scans={n_scans} must be even (half the scans per stimulus).")
    rng = check_random_state(random_state)
    pattern = np.zeros(n_voxels)
    active = rng.choice(n_voxels, n_active, replace=False)
    pattern[active] = rng.choice([-1.0, 1.0], n_active) * rng.uniform(*amplitude, n_active)
    X, y = [], []
    for _ in range(n_subjects):
        anatomy, gain = rng.normal(0, 0.5, n_voxels), rng.uniform(0.6, 1.4)
        for _ in range(n_sessions):
            labels = rng.permutation(np.arange(n_scans) % 2)
            drift = rng.normal(0, 0.3, n_voxels)
            X.append(anatomy + drift + gain * np.outer(2 * labels - 1, pattern)
                     + rng.standard_normal((n_scans, n_voxels)))
            y.append(labels)
    sessions = np.repeat(np.arange(n_subjects * n_sessions), n_scans)
    subjects = np.repeat(np.arange(n_subjects), n_sessions * n_scans)
    return np.vstack(X), np.concatenate(y), sessions, subjects, pattern
