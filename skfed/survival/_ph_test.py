"""The proportional-hazards test of a fitted :class:`~skfed.survival.FedCoxPH` on
scaled Schoenfeld residuals (Grambsch and Therneau), from sums the sites send.

The test of covariate ``j`` regresses its scaled Schoenfeld residuals on a
transform ``g`` of the event times. With ``s_i = x_i - xbar(t_i)`` the
Schoenfeld residual of event row ``i`` (``xbar`` the risk set's mean, Efron's
average over tied events), ``D`` the number of events, ``V`` the covariance
of the coefficients and ``gbar`` the mean of ``g`` over the events,

    u = sum_i (g(t_i) - gbar) s_i,    S = sum_i (g(t_i) - gbar)^2,
    T_j = D (u' V)_j^2 / (V_jj S)   ~ chi2(1),
    T_global = D u' V u / S         ~ chi2(p)

(lifelines' ``proportional_hazard_test``, and R's ``cox.zph`` before survival
3.0, whose global test this is). Since ``g`` depends on the time only, ``u``
needs, per event time ``t``, the sum of the residuals of its events:
``E_t - d_t xbar_t``, with ``E_t`` the sum of the events' covariates and
``xbar_t`` from the risk-set sums ``S0, S1, T0, T1`` the fit's Newton rounds
already exchanged at the pooled event times. Those are sums over rows
(:func:`~skfed.survival._site.site_schoenfeld_sums`); the transforms are
computed at the server from the pooled event counts (``rank``: the events'
average rank, R's ``rank``) and the pooled Kaplan-Meier (``km``: ``1 - S(t)``,
lifelines' right-continuous estimate).

A model stratified by site (``strata="site"``) never exchanged its event
times: each site sends its residual sums times ``g`` for ``identity`` and
``log`` (:func:`~skfed.survival._site.site_schoenfeld_moments`), and ``rank``
and ``km``, which need the pooled distribution of event times, are refused.

``method="survival3"`` gives R survival 3.x's score test instead
(:mod:`skfed.survival._zph`).
"""

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from ..data import FederatedDataset
from ..federation.session import FederationSession
from ._baseline import _strata_spec
from ._site import (move_strata_to_target, risk_set_means, site_schoenfeld_moments,
                    site_schoenfeld_sums)
from ._target import split_survival
from ._zph import zph_pieces, zph_pieces_by_site, zph_rows, zph_sums_args, zph_terms

TRANSFORMS = ("rank", "km", "identity", "log")
#: whose test: lifelines' (and R's cox.zph before survival 3.0), or R survival 3.x's
METHODS = ("lifelines", "survival3")
#: each method's default transform
DEFAULT_TRANSFORM = {"lifelines": "rank", "survival3": "km"}
#: the transforms a site that is its own stratum computes alone
LOCAL_TRANSFORMS = ("identity", "log")


def proportional_hazard_test(estimator, X=None, y=None, clients=None, sample_weight=None, *,
                             time_transform=None, method="lifelines", terms=True):
    """Test the proportional-hazards assumption of a fitted :class:`FedCoxPH`.

    The sites send sums over their rows (no residual, no row); the result is
    lifelines' ``proportional_hazard_test(cph, df, time_transform)`` on the
    pooled rows, with R's ``cox.zph`` (survival < 3.0) global test, or
    (``method="survival3"``) R survival 3.x's ``cox.zph(fit, transform,
    terms)``.

    Parameters
    ----------
    estimator : FedCoxPH or CoxResults
        Fitted, with standard errors (no L1 part); or the result of
        :func:`skfed.formula.coxph`, whose own rows are then read (no ``X``).
    X : FederatedDataset or array-like of shape (n_samples, n_features), default=None
        The rows the model was fitted on (as lifelines' ``training_df``): a
        :class:`~skfed.data.FederatedDataset` with its survival target, or
        the fit's ``X`` (with its strata column, if any).
    y : structured array of shape (n_samples,), default=None
        The survival target, with an array ``X``.
    clients : array-like of shape (n_samples,), default=None
        The site of each row, with an array ``X``.
    sample_weight : array-like of shape (n_samples,), default=None
        The fit's case weights, with an array ``X``.
    time_transform : {"rank", "km", "identity", "log", "all"} or list, default=None
        ``g``: the events' rank among all events (tied events share their
        average rank, as R's ``rank``; lifelines numbers them in row order),
        ``1 -`` the pooled Kaplan-Meier estimate at the time (lifelines;
        R's ``cox.zph`` takes its left limit), the time, its logarithm. On a
        coarsened ``time_grid`` the time of an interval is its right end.
        ``"all"`` or a list: one block per transform. ``None``: the method's
        default (lifelines' ``"rank"``, R's ``"km"``).
    method : {"lifelines", "survival3"}, default="lifelines"
        ``"survival3"``: R survival 3.x's score test of the model with the
        covariates times ``g`` added, using the full information (not
        ``cov_params_``, as R); ``rank`` is then the time's rank among all
        rows, censored ones included, and ``km`` one minus the left limit of
        the unweighted Kaplan-Meier, as R.
    terms : bool, default=True
        With ``method="survival3"`` and a :func:`skfed.formula.coxph` result:
        one test per formula term, a categorical's columns together (R's
        ``terms=TRUE``); ``False``, or a :class:`FedCoxPH`: one per column.

    Returns
    -------
    table : pandas.DataFrame
        One row per covariate and a ``"GLOBAL"`` row: ``test_statistic``,
        ``df`` and ``p`` (chi2). Indexed by covariate, or by (covariate,
        transform) for several transforms. ``table.attrs`` holds
        ``time_transform`` and ``n_events``.

    Notes
    -----
    The scaling uses ``cov_params_`` (lifelines' ``variance_matrix_``: the
    sandwich under ``cov_type="robust"``). With ``ties="breslow"`` the risk
    set's mean is Breslow's (lifelines computes Efron's in any case). With a
    strata column the times are ranked, and the Kaplan-Meier taken, over all
    strata (R; lifelines ranks rows sorted by stratum, then time). For
    ``strata="site"`` only ``identity`` and ``log`` are available.

    With ``method="survival3"`` a penalized fit is refused; with
    ``strata="site"`` only ``identity`` and ``log`` are available too.

    References
    ----------
    P. M. Grambsch and T. M. Therneau, "Proportional hazards tests and
    diagnostics based on weighted residuals", Biometrika 81, 1994.
    T. M. Therneau, survival 3.x: ``cox.zph``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
    transforms = _transforms(DEFAULT_TRANSFORM[method] if time_transform is None
                             else time_transform)
    groups = _formula_terms(estimator) if terms and method == "survival3" else None
    estimator, X = _model_and_rows(estimator, X)
    check_is_fitted(estimator)
    if estimator.privacy is not None:
        raise ValueError("the model was fitted under secure aggregation, and the test's "
                         "sums (the risk-set sums at each event time) would leave each site "
                         "unmasked; there is no proportional-hazards test for this fit.")
    if method == "survival3":
        return _survival3(estimator, _training_dataset(estimator, X, y, clients,
                                                       sample_weight), transforms, groups)
    cov = np.asarray(estimator.cov_params_, dtype=float)  # InferenceError says why not
    dataset = _training_dataset(estimator, X, y, clients, sample_weight)
    session = FederationSession.for_dataset(dataset)
    if estimator._by_site:
        _refuse_pooled_transforms(transforms)
        moments = session.sum(site_schoenfeld_moments, estimator.coef_, estimator.ties,
                              phase="analysis")
        pieces = {t: _from_moments(moments, t) for t in transforms}
    else:
        sums = session.sum(site_schoenfeld_sums, estimator.coef_, estimator._fit_grid,
                           estimator.time_grid_, phase="analysis")
        pieces = _from_risk_sets(estimator, sums, transforms)
    return _table(pieces, cov, estimator.param_names_, transforms)


def _refuse_pooled_transforms(transforms):
    """A model stratified by site has only the transforms each site computes alone."""
    refused = [t for t in transforms if t not in LOCAL_TRANSFORMS]
    if refused:
        raise ValueError(
            f"time_transform {refused[0]!r} needs the pooled distribution of the event "
            "times, which a model stratified by site (strata='site') does not exchange; "
            f"use {' or '.join(map(repr, LOCAL_TRANSFORMS))}, or a baseline shared across "
            "sites.")


def _formula_terms(model):
    """A formula result's terms as ``{name: [column names]}`` (``None`` otherwise)."""
    structure = getattr(model, "term_structure", None)
    if structure is None:
        return None
    return {term.name: [column for column, _ in term.columns] for term in structure}


def _survival3(estimator, dataset, transforms, groups):
    """R survival 3.x's score test (:mod:`skfed.survival._zph`), one block per
    transform."""
    if estimator.alpha != 0:
        raise ValueError("R's cox.zph score test here is that of an unpenalized fit "
                         f"(alpha=0); this model has alpha={estimator.alpha}.")
    session = FederationSession.for_dataset(dataset)
    if estimator._by_site:
        _refuse_pooled_transforms(transforms)
        sums = session.sum(site_schoenfeld_moments, estimator.coef_, estimator.ties, True,
                           phase="analysis")
        pieces = {t: zph_pieces_by_site(sums, t) for t in transforms}
    else:
        sums = session.sum(site_schoenfeld_sums, *zph_sums_args(estimator, transforms),
                           phase="analysis")
        pieces = {t: zph_pieces(estimator, sums, t) for t in transforms}
    names = list(estimator.param_names_)
    grouped = zph_terms(names, groups)
    index, rows = [], []
    for transform in transforms:
        for name, value, df, p in zph_rows(*pieces[transform], grouped):
            index.append(name if len(transforms) == 1 else (name, transform))
            rows.append({"test_statistic": value, "df": df, "p": p})
    table = pd.DataFrame(rows, index=pd.Index(index, name="covariate") if len(transforms) == 1
                         else pd.MultiIndex.from_tuples(index, names=["covariate", "transform"]))
    table.attrs.update(time_transform=transforms[0] if len(transforms) == 1 else transforms,
                       n_events=int(round(float(sums["n_events"] if estimator._by_site
                                                else np.sum(sums["d"])))),
                       method="survival3")
    return table


def _model_and_rows(model, X):
    """The fitted :class:`FedCoxPH` and its rows: a formula's result carries both."""
    from ._cox import FedCoxPH

    if isinstance(model, FedCoxPH):
        if X is None:
            raise TypeError("proportional_hazard_test(estimator, X, ...): X, the rows the "
                            "model was fitted on, is missing.")
        return model, X
    fitted, rows = getattr(model, "estimator", None), getattr(model, "training_data", None)
    if not isinstance(fitted, FedCoxPH) or rows is None:
        raise TypeError(f"proportional_hazard_test takes a fitted FedCoxPH or the result of "
                        f"skfed.formula.coxph; got {type(model).__name__}.")
    if X is not None:
        raise TypeError("a formula's result is tested on its own rows: pass no X.")
    return fitted, rows


def _transforms(time_transform):
    items = list(TRANSFORMS) if time_transform == "all" else (
        [time_transform] if isinstance(time_transform, str) else list(time_transform))
    unknown = [t for t in items if t not in TRANSFORMS]
    if not items or unknown:
        raise ValueError(f"time_transform must be one of {TRANSFORMS}, 'all' or a list of "
                         f"them; got {time_transform!r}.")
    return items


def _training_dataset(estimator, X, y, clients, sample_weight):
    """The fit's rows as a dataset whose sites encode them as the fit did (the strata
    column moved into the target)."""
    _, column = _strata_spec(estimator.strata)
    if isinstance(X, FederatedDataset):
        if y is not None or clients is not None or sample_weight is not None:
            raise ValueError("a FederatedDataset carries its target, sites and weights; do "
                             "not pass y, clients or sample_weight with it.")
        dataset = X if column is None else X.apply(move_strata_to_target, str(column),
                                                   estimator.strata_levels_)
    else:
        if y is None:
            raise ValueError("pass the fit's survival target y with an array X.")
        X, strata_values = estimator._split_strata(X, column, fitting=False)
        event, time = split_survival(y)
        target = np.column_stack([event, time])
        if strata_values is not None:
            target = np.column_stack([target, estimator._stratum_codes(strata_values, False)])
        X = validate_data(estimator, X, dtype=np.float64, reset=False)
        sw = None if sample_weight is None else _check_sample_weight(sample_weight, X)
        dataset = FederatedDataset.from_arrays(X, target, clients, sw)
    if estimator._by_site and list(map(str, dataset.sites)) != list(map(str,
                                                                        estimator.clients_)):
        raise ValueError("the model is stratified by site: test it on the sites it was "
                         f"fitted on ({list(estimator.clients_)[:5]}); got "
                         f"{list(dataset.sites)[:5]}.")
    return dataset


def _from_moments(moments, transform):
    """``(u, S, D)`` from the sums of sites that are their own strata."""
    D = float(moments["n_events"])
    total, square = float(moments[f"{transform}_sum"]), float(moments[f"{transform}_sq"])
    weighted = np.asarray(moments[f"{transform}_resid"], dtype=float)
    if not (np.isfinite(total) and np.isfinite(square) and np.all(np.isfinite(weighted))):
        raise ValueError(f"time_transform={transform!r} is not finite at an event time (the "
                         "logarithm of a time 0); use another transform.")
    mean = total / D
    return weighted - mean * np.asarray(moments["resid"], dtype=float), square - D * mean ** 2, D


def _from_risk_sets(estimator, sums, transforms):
    """``{transform: (u, S, D)}`` from the pooled sums at the fit's grid."""
    grid = estimator._fit_grid
    d = np.asarray(sums["d"], dtype=float)
    resid = np.asarray(sums["event_x"]) - d[:, None] * risk_set_means(sums, estimator.ties)
    # each grid entry's time (on a time grid: its interval's right end) and its place
    # among the times of all strata (the union, where the pooled Kaplan-Meier is)
    entries = np.concatenate([np.asarray(grid[code], dtype=float) for code in sorted(grid)])
    union = np.unique(entries)
    where = np.searchsorted(union, entries)
    events = np.bincount(where, weights=d, minlength=union.size)
    D = float(d.sum())
    g = {"identity": estimator._time_of(entries),
         "rank": (np.cumsum(events) - events + (events + 1) / 2)[where],
         "km": 1.0 - np.cumprod(1.0 - np.asarray(sums["km_events"])
                                / np.asarray(sums["km_at_risk"]))[where]}
    with np.errstate(divide="ignore"):
        g["log"] = np.log(g["identity"])
    out = {}
    for transform in transforms:
        values = g[transform][d > 0]
        if not np.all(np.isfinite(values)):
            raise ValueError(
                f"time_transform={transform!r} is not finite at an event time (the logarithm "
                "of a time 0, or the open last interval of a time grid, whose right end is "
                "infinite); use 'rank' or 'km', or a time grid whose last cut point follows "
                "the last event.")
        centred = g[transform][d > 0] - d[d > 0] @ values / D
        out[transform] = (centred @ resid[d > 0], float(d[d > 0] @ centred ** 2), D)
    return out


def _table(pieces, cov, names, transforms):
    """The per-covariate and global statistics, one block per transform."""
    se2 = np.diag(cov)
    p = len(names)
    index, rows = [], []
    for transform in transforms:
        u, S, D = pieces[transform]
        uV = u @ cov
        per_covariate = D * uV ** 2 / (se2 * S)
        overall = D * float(u @ cov @ u) / S
        for name, value, df in [*zip(names, per_covariate, [1] * p), ("GLOBAL", overall, p)]:
            index.append(name if len(transforms) == 1 else (name, transform))
            rows.append({"test_statistic": float(value), "df": df,
                         "p": float(stats.chi2.sf(value, df))})
    table = pd.DataFrame(rows, index=pd.Index(index, name="covariate") if len(transforms) == 1
                         else pd.MultiIndex.from_tuples(index, names=["covariate", "transform"]))
    table.attrs.update(time_transform=transforms[0] if len(transforms) == 1 else transforms,
                       n_events=int(round(pieces[transforms[0]][2])))
    return table
