"""The Aalen-Johansen cumulative incidence of one cause among competing risks, over sites.

At each pooled event time ``t_k`` (any cause) the sites' summed counts give the
rows at risk ``n_k``, the events of any cause ``d_k`` and of the cause ``d_jk``
(:mod:`skfed.stats._competing_site`); from them

    S(t_k) = prod_{i<=k} (1 - d_i / n_i),   F_j(t_k) = sum_{i<=k} S(t_{i-1}) d_ji / n_i,

the cumulative incidence of lifelines' ``AalenJohansenFitter`` and of R's
multi-state ``survfit`` (which, unlike lifelines, keeps tied times of different
causes as they are). Two variances, each from the same counts: lifelines' (the
delta method of Collett's Greenwood-type formula, with its log(-log) interval)
and R's infinitesimal jackknife, the sum over rows of each row's squared
influence: rows that leave the risk set after the same grid time by the same
outcome have the same influence, so it needs only the counts.
"""

from numbers import Integral, Real

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval

from .._messages import show
from ..exceptions import SiteRefusal
from ..federation.session import FederationSession
from ._competing_site import site_competing_counts, site_competing_grid
from ._survival import _check_columns, _dataset, _shown
from ._survival_exchange import MAX_TIMES, _refusal_hint, _summed, check_privacy, cut_points


def incidence(n, d, dj):
    """``(S(t_{k-1}), F_j(t_k))`` from the numbers at risk and of events at each time."""
    with np.errstate(divide="ignore", invalid="ignore"):
        h, hj = np.where(n > 0, d / n, 0.0), np.where(n > 0, dj / n, 0.0)
    lag = np.concatenate([[1.0], np.cumprod(1 - h)[:-1]])
    return lag, np.cumsum(lag * hj)


def delta_variance(n, d, dj, lag, F):
    """lifelines' variance of ``F_j`` (Collett's formula, summed as lifelines sums it:
    ``nan`` from a time where every row at risk has an event)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = d / n / (n - d)
        a[d == 0] = 0.0
        # a time past every row (a cut point) adds nothing
        second = np.cumsum(np.where(n > 0, lag ** 2 * dj * (n - dj) / n ** 3, 0.0))
        c = np.where(n > 0, lag * dj / n ** 2, 0.0)
        first = F ** 2 * np.cumsum(a) - 2 * F * np.cumsum(a * F) + np.cumsum(a * F ** 2)
        third = F * np.cumsum(c) - np.cumsum(c * F)
    return first + second - 2 * third


def jackknife_variance(n, d, dj):
    """R's ``survfit`` variance of ``F_j``: the infinitesimal jackknife, summed over the
    groups of rows with the same influence (censored after grid time ``m``; an event of
    the cause, or of another, at ``m``)."""
    K = n.size
    lag, _ = incidence(n, d, dj)
    with np.errstate(divide="ignore", invalid="ignore"):
        h, hj = np.where(n > 0, d / n, 0.0), np.where(n > 0, dj / n, 0.0)
    censored = n - d - np.append(n[1:], 0)
    counts = np.concatenate([censored, dj, d - dj]).astype(np.float64)
    kind, last = np.repeat([0, 1, 2], K), np.tile(np.arange(K), 3)
    keep = counts > 0
    counts, kind, last = counts[keep], kind[keep], last[keep]
    U0, Uj, variance = np.zeros(counts.size), np.zeros(counts.size), np.zeros(K)
    for k in range(K):
        if n[k] == 0:
            variance[k] = variance[k - 1] if k else 0.0
            continue
        at_risk = (last >= k).astype(np.float64)
        here = last == k
        dh = ((here & (kind > 0)) - at_risk * h[k]) / n[k]
        dhj = ((here & (kind == 1)) - at_risk * hj[k]) / n[k]
        U0, Uj = U0 * (1 - h[k]) - lag[k] * dh, Uj + U0 * hj[k] + lag[k] * dhj
        variance[k] = np.sum(counts * Uj ** 2)
    return variance


def _bounds(F, variance, alpha):
    """lifelines' interval: the log(-log) transform of ``F``, ordered low to high."""
    z = stats.norm.ppf(1 - alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        centre = np.log(-np.log(F))
        se = np.sqrt(variance) / (F * np.abs(np.log(F)))
        a, b = np.exp(-np.exp(centre + z * se)), np.exp(-np.exp(centre - z * se))
    return np.fmin(a, b), np.fmax(a, b)


def _refused(exc):
    return _refusal_hint(exc, "the cumulative incidence", "approximate", also="")


def pooled_competing_counts(data, time, event, cause, cuts, privacy):
    """``(times, n, d, d_j)``: the public grid from 0 and the pooled counts on it."""
    session = FederationSession.for_dataset(data)
    try:
        if cuts is None:
            replies = session.per_site(site_competing_grid, time, event, phase="analysis")
            grid = np.unique(np.concatenate(
                [[0.0]] + [np.asarray(r["times"], dtype=float) for r in replies]))
            if grid.size > MAX_TIMES:
                raise ValueError(f"{grid.size} pooled event times; at most {MAX_TIMES}.")
        else:
            grid = cuts
        sums = _summed(session, privacy, site_competing_counts, time, event, cause, grid,
                       cuts is not None)
    except SiteRefusal as exc:
        hinted = _refused(exc)
        if hinted is None:
            raise
        raise hinted from exc
    n, d, dj = (np.rint(np.asarray(sums[k], dtype=float)).astype(np.int64)
                for k in ("at_risk", "events", "cause_events"))
    if cuts is not None:  # the curve starts at 0 with every row at risk
        grid, n, d, dj = (np.concatenate([[v], a]) for v, a in
                          ((0.0, grid), (n[0], n), (0, d), (0, dj)))
    return grid, n, d, dj


def _note(cuts):
    if cuts is None:
        return ""
    return (f"Approximate: the Aalen-Johansen estimate of the times rounded up to the cut "
            f"points {_shown(cuts)} (the sites released counts per interval, not event "
            "times); events beyond the last cut point are not counted.")


class FedAalenJohansen(BaseEstimator):
    """The Aalen-Johansen cumulative incidence of one cause among competing risks, over
    all sites' rows.

    lifelines' ``AalenJohansenFitter`` on rows held by several sites. Exact
    (``time_grid=None``): each site releases its distinct event times of any
    cause (without counts; a site service only with ``allow_event_times``); on
    their union, with 0, each site counts its rows at risk, its events and its
    events of the cause, and the server needs only their sums (masked under
    ``privacy=SecureAggregation()``). The curve equals lifelines' on the pooled
    rows where no two causes share a time, and R's multi-state ``survfit`` on
    any rows (lifelines jitters tied times of different causes at random; R and
    this estimate keep them). On cut points (``time_grid=``): the same estimate
    of the times rounded up to their cut point, labelled approximate.

    Parameters
    ----------
    alpha : float, default=0.05
        The intervals have level ``1 - alpha``.
    time_grid : array-like of float, default=None
        ``None``: exact. Positive increasing cut points: the estimate of the
        times rounded up to them (no time leaves a site).
    privacy : SecureAggregation or None, default=None
        ``SecureAggregation()``: each site's counts leave it masked and only
        their sums are decoded (at least two sites). Differential privacy is
        refused: the estimate needs exact counts at each event time.

    Attributes
    ----------
    cumulative_density_ : pandas.DataFrame
        Column ``CIF_<cause>``, indexed by ``event_at``: time 0 and every
        pooled event time of any cause (the cut points on a grid).
    variance_ : pandas.Series
        lifelines' variance of the estimate (Collett's delta-method formula).
    variance_ij_ : pandas.Series
        R ``survfit``'s variance (the infinitesimal jackknife); its square
        root is R's ``std.err``.
    confidence_interval_ : pandas.DataFrame
        lifelines' log(-log) interval from ``variance_``: columns
        ``CIF_<cause>_lower_<1-alpha>`` and ``CIF_<cause>_upper_<1-alpha>``.
    event_table_ : pandas.DataFrame
        At each time: ``at_risk``, ``observed`` (events of any cause),
        ``observed_<cause>`` and ``censored`` (rows leaving before the next
        time without an event).
    event_of_interest_ : int
    approximate_ : bool
        ``True`` on cut points.
    time_grid_ : ndarray or None
    note_ : str
        What the estimate is, when it is approximate.

    Examples
    --------
    >>> from sksurv.datasets import load_bmt
    >>> X, y = load_bmt()
    >>> df = pd.DataFrame({"ftime": y["ftime"], "status": y["status"],
    ...                    "site": np.arange(len(y)) % 2})
    >>> aj = FedAalenJohansen().fit(df, duration_col="ftime", event_col="status",
    ...                             event_of_interest=1, clients="site")
    >>> round(float(aj.cumulative_density_["CIF_1"].iloc[-1]), 4)
    0.2728
    """

    _parameter_constraints = {"alpha": [Interval(Real, 0, 1, closed="neither")],
                              "time_grid": ["array-like", None],
                              "privacy": "no_validation"}

    def __init__(self, alpha=0.05, *, time_grid=None, privacy=None):
        self.alpha = alpha
        self.time_grid = time_grid
        self.privacy = privacy

    def fit(self, data, event_observed=None, *, event_of_interest, duration_col=None,
            event_col=None, clients=None):
        """Pool the sites' counts and compute the cumulative incidence.

        Parameters
        ----------
        data : FederatedDataset, DataFrame or array-like of shape (n_samples,)
            The sites' rows with ``duration_col`` and ``event_col``, or the
            durations themselves (then ``event_observed`` and ``clients``).
        event_observed : array-like of shape (n_samples,), default=None
            With durations: the event codes, 0 censored, 1, 2, ... the causes.
        event_of_interest : int
            The cause whose incidence is estimated (a positive code); the
            other positive codes are its competing events.
        duration_col, event_col : str, default=None
            With a table: its column of follow-up times (finite,
            non-negative) and of event codes.
        clients : str or array-like of shape (n_samples,), default=None
            The site of each row (a column name, or one label per row) when the
            rows are not a FederatedDataset.

        Returns
        -------
        self : FedAalenJohansen

        Raises
        ------
        ValueError
            A column missing, negative or missing times, event codes that are
            not 0 and positive integers, a cause that is not a positive
            integer, differential privacy, bad cut points.
        SiteRefusal
            A site service's rule: exact times without ``allow_event_times``
            (the message says to pass ``time_grid=``), a count below
            ``min_level_count``.
        """
        self._validate_params()
        data, duration_col, event_col = _rows(data, event_observed, duration_col, event_col,
                                              clients)
        cause = _cause(event_of_interest)
        _check_privacy(self.privacy)
        cuts = cut_points(self.time_grid)
        grid, n, d, dj = pooled_competing_counts(data, duration_col, event_col, cause, cuts,
                                                 self.privacy)
        self._set_estimates(grid, n, d, dj, cause, cuts)
        return self

    def _set_estimates(self, grid, n, d, dj, cause, cuts):
        index = pd.Index(grid, name="event_at")
        lag, F = incidence(n, d, dj)
        variance = delta_variance(n.astype(float), d.astype(float), dj.astype(float), lag, F)
        label, level = f"CIF_{cause}", f"{1 - self.alpha:g}"
        lower, upper = _bounds(F, variance, self.alpha)
        self.cumulative_density_ = pd.DataFrame({label: F}, index=index)
        self.variance_ = pd.Series(variance, index=index, name="variance")
        self.variance_ij_ = pd.Series(jackknife_variance(n, d, dj), index=index,
                                      name="variance_ij")
        self.confidence_interval_ = pd.DataFrame(
            {f"{label}_lower_{level}": lower, f"{label}_upper_{level}": upper}, index=index)
        self.event_table_ = pd.DataFrame(
            {"at_risk": n, "observed": d, f"observed_{cause}": dj,
             "censored": n - d - np.append(n[1:], 0)}, index=index)
        self.event_of_interest_ = cause
        self.approximate_, self.time_grid_, self.note_ = cuts is not None, cuts, _note(cuts)


def _rows(data, event_observed, duration_col, event_col, clients):
    """``(dataset, duration column, event column)`` from a table or arrays."""
    if event_observed is not None:
        if duration_col is not None or event_col is not None:
            raise ValueError("pass durations and event_observed, or a table with "
                             "duration_col= and event_col=, not both.")
        durations = np.asarray(data)
        events = np.asarray(event_observed)
        if durations.ndim != 1 or events.shape != durations.shape:
            raise ValueError(f"durations and event_observed are 1-D of the same length; got "
                             f"shapes {durations.shape} and {events.shape}.")
        if isinstance(clients, str):
            raise ValueError("with arrays, clients= is one site label per row.")
        data = pd.DataFrame({"duration": durations, "event": events})
        duration_col, event_col = "duration", "event"
    elif duration_col is None or event_col is None:
        raise ValueError("name the table's columns: duration_col= and event_col= (or pass "
                         "durations and event_observed arrays).")
    data = _dataset(data, clients)
    _check_columns(data, duration=duration_col, event=event_col)
    return data, duration_col, event_col


def _cause(event_of_interest):
    if isinstance(event_of_interest, (bool, np.bool_)) or not isinstance(
            event_of_interest, (Integral, np.integer, float, np.floating)) or not (
            float(event_of_interest).is_integer() and 1 <= event_of_interest < 1 << 30):
        raise ValueError("event_of_interest is the positive integer code of a cause (0 is "
                         f"censoring); got {show(event_of_interest)}.")
    return int(event_of_interest)


def _check_privacy(privacy, model="FedAalenJohansen"):
    from ..privacy.dp_rounds import DifferentialPrivacy

    if isinstance(privacy, DifferentialPrivacy):
        raise ValueError(f"{model} refuses differential privacy: it needs exact counts (and "
                         "sums) at each event time, and noise enough to protect counts that "
                         "small would swamp them; use privacy=SecureAggregation() (exact, "
                         "masked).")
    check_privacy(privacy)
