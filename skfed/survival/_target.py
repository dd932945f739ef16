"""The survival target: scikit-survival's structured array of (event, time)."""

import numpy as np

SURVIVAL_DTYPE = [("event", "?"), ("time", "<f8")]


def survival_target(event, time):
    """The target of :class:`FedCoxPH`: a structured array of (event, time).

    The same array as scikit-survival's ``Surv.from_arrays(event, time)``.

    Parameters
    ----------
    event : array-like of shape (n_samples,)
        1 or True: the event happened at ``time``; 0 or False: the row was
        censored then (followed up to ``time`` without the event).
    time : array-like of shape (n_samples,)
        Follow-up times, >= 0.

    Returns
    -------
    y : ndarray of shape (n_samples,), dtype ``[("event", "?"), ("time", "<f8")]``
    """
    event, time = split_survival(_pair(event, time))
    y = np.empty(len(time), dtype=SURVIVAL_DTYPE)
    y["event"], y["time"] = event > 0, time
    return y


def _pair(event, time):
    event, time = np.asarray(event), np.asarray(time)
    if event.shape != time.shape or event.ndim != 1:
        raise ValueError(f"event and time must be 1-D of one length; got shapes {event.shape} "
                         f"and {time.shape}.")
    return np.column_stack([event.astype(object), time.astype(object)])


def split_survival(y):
    """``(event, time)`` as float arrays from a survival target, checked.

    Accepts a structured array of two fields (event first, then time: the
    field names do not matter, as in scikit-survival) or an array of two
    columns (event, time). Raises a ``ValueError`` naming the problem:
    missing, negative or infinite times; an event indicator that is not
    0/1; any other shape of target.
    """
    y = np.asarray(y)
    if y.dtype.names is not None:
        if len(y.dtype.names) != 2:
            raise ValueError(f"a survival target has two fields (event, time); this one has "
                             f"{list(y.dtype.names)}.")
        event, time = y[y.dtype.names[0]], y[y.dtype.names[1]]
    elif y.ndim == 2 and y.shape[1] == 2:
        event, time = y[:, 0], y[:, 1]
    else:
        raise ValueError(
            "y must be a survival target: a structured array of (event, time) as "
            "skfed.survival.survival_target(event, time) or scikit-survival's "
            f"Surv.from_arrays make (or two columns: event, time); got shape {y.shape} "
            f"and dtype {y.dtype}.")
    try:
        time = np.asarray(time, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("the survival times are not numbers.") from None
    try:
        event_f = np.asarray(event, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("the event indicator must be 0/1 (or False/True); it is not "
                         "numeric.") from None
    if np.isnan(time).any():
        raise ValueError(f"{int(np.isnan(time).sum())} missing survival time(s) (NaN); drop "
                         "those rows or impute them.")
    if not np.all(np.isfinite(time)) or np.any(time < 0):
        raise ValueError(f"{int(np.sum(~np.isfinite(time) | (time < 0)))} negative or infinite "
                         "survival time(s): times are follow-up durations >= 0.")
    bad = ~np.isin(event_f, (0.0, 1.0))
    if bad.any():
        values = sorted(set(np.unique(event_f[bad]).tolist()))[:3]
        raise ValueError(f"the event indicator must be 0/1 (or False/True); it has {values}.")
    return event_f, time
