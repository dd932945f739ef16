"""Effects on survival of a fitted :class:`~skfed.causal.FedIPW`: weighted curves per arm,
the weighted Cox hazard ratio and the restricted mean survival time difference.

Each site computes its rows' IPW weights from the fitted propensity model (the
broadcast ``theta``) and releases only pooled weighted counts
(:mod:`skfed.causal._survival_site`): the weighted Kaplan-Meier curve of each arm
is ``prod (1 - d_w(t) / n_w(t))`` over the pooled weighted events ``d_w`` and
numbers at risk ``n_w`` (lifelines' ``KaplanMeierFitter(weights=...)`` on the
pooled rows), the RMST the area under it to ``tau``, and the hazard ratio
:class:`~skfed.survival.FedCoxPH`'s weighted fit with the robust sandwich
(lifelines' ``CoxPHFitter(robust=True)`` with the weights as ``weights_col``).
The weights are held fixed: the intervals do not account for the propensity
model's estimation.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from .._messages import show
from ..exceptions import SiteRefusal
from ..federation.session import FederationSession
from ..stats._survival import _dataset
from ..stats._survival_exchange import _refusal_hint, cut_points
from ..stats._survival_site import MAX_TIMES, site_survival_grid
from ..survival import FedCoxPH
from ._estimators import FedIPW, _check_privacy
from ._survival_site import (ipw_survival_rows, site_weighted_life_table,
                             site_weighted_survival_counts)

_FIXED = ("The IPW weights are held fixed (the propensity model as given): the hazard "
          "ratio's robust interval does not account for the score's estimation.")


@dataclass
class IPWSurvival:
    """Effects on survival under IPW weights.

    Attributes
    ----------
    curves : DataFrame
        Indexed by ``(arm, time)`` (arm 1 the treated): the weighted numbers
        at risk and of events, the unweighted ones, and the weighted ``survival``;
        a life table (``approximate``) is indexed by each interval's start.
    rmst : DataFrame
        The restricted mean survival time to ``tau`` of each arm and their
        difference (treated minus controls).
    tau : float
    hazard_ratio : float
        ``exp(coef)`` of the weighted Cox model of the treatment.
    hazard_ratio_ci : ndarray of shape (2,)
        Its interval from the robust (sandwich) standard error of ``coef``.
    std_err : float
        The robust standard error of the log hazard ratio.
    cox : FedCoxPH or None
        The fitted weighted Cox model (``cov_type="robust"``); ``None`` with
        ``cox=False``.
    approximate : bool
        ``True``: curves and RMST from a weighted actuarial life table on
        ``time_grid`` (the sites released no event time).
    time_grid : ndarray or None
    note : str
        What the numbers are (the weights held fixed; approximate where so).
    """

    curves: pd.DataFrame = field(repr=False)
    rmst: pd.DataFrame = field(repr=False)
    tau: float
    hazard_ratio: float
    hazard_ratio_ci: np.ndarray
    std_err: float
    cox: object = field(repr=False)
    approximate: bool = False
    time_grid: np.ndarray = field(default=None, repr=False)
    note: str = ""


def _fitted_spec(ipw):
    if not isinstance(ipw, FedIPW) or not hasattr(ipw, "spec_"):
        raise ValueError("ipw_survival takes a fitted FedIPW (its propensity model gives the "
                         f"weights); got {type(ipw).__name__}.")
    if ipw.spec_["scores"] != "logistic":
        raise ValueError("ipw_survival needs the stacked logistic propensity model "
                         "(propensity=None): a site evaluates it from its coefficients.")
    return dict(ipw.spec_)


def _curves_exact(sums, times):
    frames = {}
    for j, arm in enumerate((1, 0)):
        n, d = sums["w_at_risk"][j], sums["w_events"][j]
        keep = (d > 0) | (times == 0)  # a trimmed row's event (weight 0) is no step
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(d > 0, 1.0 - d / n, 1.0)
        frames[arm] = pd.DataFrame({
            "at_risk": n[keep], "events": d[keep], "n_at_risk": sums["at_risk"][j][keep],
            "n_events": sums["events"][j][keep], "survival": np.cumprod(step)[keep]},
            index=pd.Index(times[keep], name="time"))
    return frames


def _curves_life_table(sums, cuts):
    """The weighted actuarial life table: ``n' = n - c / 2`` per interval."""
    frames = {}
    starts = np.concatenate([[0.0], cuts])
    for j, arm in enumerate((1, 0)):
        d, r = sums["events"][j], sums["removed"][j]
        n = r.sum() - np.concatenate([[0.0], np.cumsum(r)[:-1]])
        effective = n - (r - d) / 2
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(effective > 0, d / effective, 0.0)
        survival = np.concatenate([[1.0], np.cumprod(1 - q)[:-1]])  # at each start
        frames[arm] = pd.DataFrame({
            "at_risk": n, "events": d, "removed": r, "effective_at_risk": effective,
            "interval_end": np.append(cuts, np.inf), "survival": survival},
            index=pd.Index(starts, name="time"))
    return frames


def _rmst(frames, tau, approximate):
    """The area under each arm's curve to ``tau``: a step function (exact), or straight
    between the cut points (a life table)."""
    out = {}
    for arm, frame in frames.items():
        t, s = frame.index.to_numpy(dtype=float), frame["survival"].to_numpy()
        if approximate:
            points = np.append(t[t < tau], tau)
            values = np.interp(points, t, s)
            out[arm] = float(np.sum(np.diff(points) * (values[1:] + values[:-1]) / 2))
        else:
            keep = t < tau
            widths = np.diff(np.append(t[keep], tau))
            out[arm] = float(widths @ s[keep])
    return pd.DataFrame({"rmst": [out[1], out[0], out[1] - out[0]]},
                        index=pd.Index(["treated (1)", "controls (0)", "difference"],
                                       name="arm"))


def _default_tau(frames):
    """The smaller of the arms' last event times (where both curves are estimated)."""
    return float(min(f.index[f["events"] > 0].max() if (f["events"] > 0).any() else 0.0
                     for f in frames.values()))


def _check_tau(tau, frames, cuts):
    if tau is None:
        return float(cuts[-1]) if cuts is not None else _default_tau(frames)
    if not (isinstance(tau, (int, float, np.integer, np.floating)) and np.isfinite(tau)
            and tau > 0) or isinstance(tau, bool):
        raise ValueError(f"tau must be a positive finite time; got {show(tau)}.")
    if cuts is not None and tau > cuts[-1]:
        raise ValueError(f"tau={tau:g} is past the last cut point {cuts[-1]:g}: a life table "
                         "gives no survival beyond it.")
    return float(tau)


def _summed(session, privacy, fn, *args):
    if privacy is None:
        return session.sum(fn, *args, phase="analysis")
    from ..privacy.masked_sums import masked

    with masked(session, privacy):  # each site's weighted counts masked: only sums decoded
        return session.sum(fn, *args, phase="analysis")


def _pooled(data, spec, theta, time, event, cuts, privacy):
    """The arms' pooled weighted counts: on the pooled event times, or on cut points."""
    session = FederationSession.for_dataset(data)
    try:
        if cuts is not None:
            return _summed(session, privacy, site_weighted_life_table, spec, theta, time,
                           event, cuts), None
        replies = session.per_site(site_survival_grid, time, event, None, True,
                                   phase="analysis")
        times = np.unique(np.concatenate([[0.0]] + [np.asarray(r["times"], dtype=float)
                                                    for r in replies]))
        if times.size > MAX_TIMES:
            raise ValueError(f"{times.size} pooled event times; at most {MAX_TIMES}.")
        return _summed(session, privacy, site_weighted_survival_counts, spec, theta, time,
                       event, times), times
    except SiteRefusal as exc:
        hinted = _refusal_hint(exc)
        if hinted is None:
            raise
        raise hinted from exc


def _cox(data, spec, theta, time, event, cuts, privacy, alpha):
    rows = data.apply(ipw_survival_rows, spec, list(map(float, theta)), time, event)
    cox = FedCoxPH(cov_type="robust", time_grid=cuts, privacy=privacy).fit(rows)
    coef, se = float(cox.coef_[0]), float(np.sqrt(cox.cov_params_[0, 0]))
    z = stats.norm.isf(alpha / 2)
    return cox, float(np.exp(coef)), np.exp([coef - z * se, coef + z * se]), se


def ipw_survival(ipw, data, *, time, event, tau=None, time_grid=None, cox=True,
                 privacy=None, clients=None, alpha=0.05):
    """Weighted Kaplan-Meier curves per arm, the weighted Cox hazard ratio and the
    RMST difference, under the weights of a fitted :class:`FedIPW`.

    Each site computes its rows' weights from the fitted propensity model (the
    estimand's weights, truncated, trimmed or stabilised as the fit was) and
    releases pooled weighted counts only. The curves equal lifelines'
    ``KaplanMeierFitter().fit(T, E, weights=w)`` per arm on the pooled rows,
    the RMST the area under them to ``tau``, and the hazard ratio lifelines'
    ``CoxPHFitter(robust=True)`` with ``weights_col`` (Efron ties) on the pooled
    rows with the same weights, held fixed.

    Parameters
    ----------
    ipw : FedIPW
        Fitted on the same sites (the logistic propensity model).
    data : FederatedDataset or DataFrame
        The sites' rows: the treatment, the covariates, ``time`` and ``event``
        (a DataFrame needs ``clients``).
    time, event : str
        Columns of follow-up times and 0/1 event indicators.
    tau : float, default=None
        The RMST's horizon; ``None``: the smaller of the arms' last event
        times (the last cut point of a life table).
    time_grid : array-like of float, default=None
        ``None``: exact curves (the sites release their event times, a site
        service only with ``allow_event_times``). Cut points: an approximate
        weighted actuarial life table, no time leaving a site.
    cox : bool, default=True
        Fit the weighted Cox model. At sites that require secure aggregation
        its setup (:class:`~skfed.survival.FedCoxPH`'s sums of the weights, in
        the clear) is refused: ``cox=False`` gives the curves and the RMST
        alone (the hazard ratio NaN).
    privacy : SecureAggregation or None, default=None
        Masked sums; differential privacy is refused.
    clients : str or array-like, default=None
        The site of each row when ``data`` is a DataFrame.
    alpha : float, default=0.05
        The hazard ratio's interval has level ``1 - alpha``.

    Returns
    -------
    result : IPWSurvival
    """
    spec = _fitted_spec(ipw)
    data = _dataset(data, clients)
    for name in (time, event):
        if name not in data.columns:
            raise ValueError(f"no column {show(name)} in the dataset.")
    privacy = _check_privacy(privacy, data)
    cuts = cut_points(time_grid)
    theta = np.asarray(ipw.params_, dtype=np.float64)
    sums, times = _pooled(data, spec, theta, time, event, cuts, privacy)
    frames = _curves_exact(sums, times) if cuts is None else _curves_life_table(sums, cuts)
    tau = _check_tau(tau, frames, cuts)
    model, hr, ci, se = None, np.nan, np.full(2, np.nan), np.nan
    if cox:
        model, hr, ci, se = _cox(data, spec, theta, time, event, cuts, privacy, alpha)
    note = _FIXED
    if cuts is not None:
        note += (" Approximate: the curves and RMST from a weighted actuarial life table on "
                 "the cut points (the sites released no event time; the curve straight "
                 "between them), the hazard ratio the Cox fit of the times grouped into "
                 "their intervals.")
    curves = pd.concat(frames, names=["arm", "time"])
    return IPWSurvival(curves, _rmst(frames, tau, cuts is not None), tau, hr, ci, se, model,
                       approximate=cuts is not None, time_grid=cuts, note=note)
