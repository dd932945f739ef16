"""FedMixedLM: the exact linear mixed model of rows held by several sites.

The sites send their sums once (:mod:`skfed.mixed._site`): totals over their
rows in one summed exchange, and the blocks of each group they hold in one
per-site exchange. The optimiser then runs at the server on those sums
(:mod:`skfed.mixed._likelihood`), so the fit costs two exchanges whatever the
number of optimiser steps, and equals statsmodels' ``MixedLM`` on the pooled
rows (docs/mixed-models.md).
"""

import re
import warnings
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from .._messages import plain, show
from ..base import restore_on_failure
from ..federation.session import FederationSession
from . import _likelihood as lik
from ._data import (GROUP_COLUMN, check_group_sites, mixed_dataset, warn_boundary,
                    warn_few_groups)
from ._results import MixedLMResults
from ._site import site_group_blocks, site_totals


class FedMixedLM(RegressorMixin, BaseEstimator):
    """Linear mixed model with random effects by site or by groups nested in sites.

    ``y = X b + Z u_g + e`` with ``u_g ~ N(0, cov_re)`` per group and
    ``e ~ N(0, scale I)``: a random intercept per group, and optionally random
    slopes (``re_columns``). The groups are the sites (``groups=None``, a
    random site effect) or a grouping column nested within the sites (patients
    or wards inside hospitals). Fitted by REML (default) or ML, exactly: the
    estimates, standard errors and log-likelihood are statsmodels' ``MixedLM``
    ones on the pooled rows (lme4's ``lmer`` for the same model).

    Each site sends, once, ``X'X``, ``X'y``, ``y'y`` and its row count summed
    over its rows, and per group it holds ``Z_g'Z_g``, ``Z_g'X_g``,
    ``Z_g'y_g`` and ``n_g`` (for a random intercept: the group's size and
    the sums of its features and of ``y``). The optimiser runs at the server.

    Parameters
    ----------
    re_columns : list of str or int, default=None
        Feature columns with a random slope (names for a table, positions
        otherwise); ``None``: a random intercept only.
    re_intercept : bool, default=True
        Whether the random effects include an intercept (``(1 + x | g)``
        rather than ``(0 + x | g)``).
    fit_intercept : bool, default=True
        Whether the fixed effects include an intercept (named ``"Intercept"``).
    reml : bool, default=True
        Restricted maximum likelihood (``False``: maximum likelihood, needed to
        compare fixed effects by AIC/BIC or a likelihood-ratio test).
    tol : float, default=1e-8
        Convergence: the sup-norm of the gradient of ``-loglik / n_obs`` in
        the Cholesky factor of ``cov_re / scale``.
    max_iter : int, default=200
        Iterations of the server's quasi-Newton optimiser (no round each).
    min_group_size : int, default=2
        The fewest rows a group may have: a group's sums with one row are
        that row. A site refuses to send a smaller group (naming it).
    vc_formula : dict, default=None
        Variance components within the groups, as statsmodels' ``MixedLM``
        takes them: ``{"clinic": "0 + C(clinic)"}`` gives each level of the
        column ``clinic`` within a group its own random intercept, with one
        variance per component (clinics nested in hospitals: lme4's
        ``(1 | hospital/clinic)`` with ``groups="hospital"``; two components
        are crossed within the group). A level of a component within a group
        also holds at least ``min_group_size`` rows. As in statsmodels, the
        group's own random intercept is there only with ``re_intercept``.

    Attributes
    ----------
    results_ : MixedLMResults
        Everything statsmodels' ``MixedLMResults`` reports, and ``summary()``.
    fe_params_ : pandas.Series
        The fixed effects, by name.
    coef_ : ndarray of shape (n_features,)
        The fixed effects of the features (without the intercept).
    intercept_ : float
        The fixed intercept (0.0 when ``fit_intercept=False``).
    cov_re_ : pandas.DataFrame
        The random-effects covariance matrix.
    vcomp_ : pandas.Series
        The variance components' variances, by name (empty without ``vc_formula``).
    scale_ : float
        The residual variance.
    llf_ : float
        The (RE)ML log-likelihood.
    random_effects_ : pandas.DataFrame
        The predicted random effects (BLUPs): one row per group, one column
        per random effect (``results_.random_effects`` has statsmodels' dict).
    groups_ : list
        The group labels; ``group_sites_`` holds the site of each.
    group_sites_ : list
    n_groups_ : int
    converged_ : bool
    n_iter_ : int
        Optimiser iterations (at the server).
    clients_ : ndarray
        The sites.
    n_clients_ : int
    ledger_ : dict
        Exchanges with the sites and their bytes, per phase.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Feature names (the grouping column excluded).

    See Also
    --------
    skfed.stats.meta_analysis : the two-stage analysis (one estimate per site).
    skfed.mixed.compare_two_stage : both analyses side by side.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.mixed import FedMixedLM
    >>> rng = np.random.default_rng(0)
    >>> site = np.repeat(np.arange(8), 50)
    >>> x = rng.normal(size=(400, 1))
    >>> y = 1 + 2 * x[:, 0] + rng.normal(size=8)[site] + rng.normal(size=400)
    >>> model = FedMixedLM().fit(x, y, clients=site)
    >>> model.fe_params_.round(1).tolist()
    [1.0, 2.0]
    """

    _parameter_constraints = {
        "re_columns": [list, tuple, None],
        "re_intercept": ["boolean"],
        "fit_intercept": ["boolean"],
        "reml": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "min_group_size": [Interval(Integral, 1, None, closed="left")],
        "vc_formula": [dict, None],
    }

    __metadata_request__fit = {"clients": True, "groups": True}

    def __init__(self, re_columns=None, *, re_intercept=True, fit_intercept=True, reml=True,
                 tol=1e-8, max_iter=200, min_group_size=2, vc_formula=None):
        self.re_columns = re_columns
        self.re_intercept = re_intercept
        self.fit_intercept = fit_intercept
        self.reml = reml
        self.tol = tol
        self.max_iter = max_iter
        self.min_group_size = min_group_size
        self.vc_formula = vc_formula

    @restore_on_failure
    def fit(self, X, y=None, *, clients=None, groups=None):
        """Fit the mixed model from the sites' sums.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features), or FederatedDataset
            The fixed-effects features (an intercept is added with
            ``fit_intercept``). A DataFrame or the dataset's table may also
            hold the grouping column (``groups="name"``).
        y : array-like of shape (n_samples,), default=None
            The target (not with a FederatedDataset, which carries it).
        clients : array-like of shape (n_samples,), default=None
            The site of each row; ``None``: one site.
        groups : str or array-like of shape (n_samples,), default=None
            The random effects' groups: a column name, or one label per row.
            Each group must lie within one site. ``None``: the sites are the
            groups (a random site effect).

        Returns
        -------
        self : FedMixedLM
        """
        self._validate_params()
        dataset, column, names, endog = mixed_dataset(X, y, clients, groups)
        vc_names, vc_columns = _variance_components(self.vc_formula, names)
        names = [n for n in names if n not in vc_columns]
        design = self._design(column, names, vc_columns)
        session = FederationSession.for_dataset(dataset)
        sums, labels, group_sites = _collect_sums(session, dataset, design)
        fe_names = (["Intercept"] if self.fit_intercept else []) + names
        # with components, the group's intercept is named after its column (statsmodels)
        named = vc_columns and column not in (None, GROUP_COLUMN)
        re_names = ([column if named else "Group"] if self.re_intercept else []) + [
            names[j] for j in design["re_columns"]]
        _check_fixed_design(sums, fe_names)
        warn_few_groups(len(labels), column is None, "FedMixedLM")
        optimum = lik.maximize(sums, self.reml, start_psi=np.eye(sums.q), tol=self.tol,
                               max_iter=self.max_iter)
        self.results_ = _results(optimum, sums, self.reml, (fe_names, re_names, vc_names),
                                 labels, endog)
        self._record(dataset, session, names, design, labels, group_sites, optimum)
        self._warn(optimum, re_names, sums)
        return self

    def _design(self, column, names, vc_columns=()):
        """The design dict the sites build their matrices from."""
        positions = []
        for c in self.re_columns or []:
            c = plain(c)
            if isinstance(c, str):
                if c not in names:
                    raise ValueError(f"re_columns: {show(c)} is not a feature column; the "
                                     f"features are {names}.")
                positions.append(names.index(c))
            elif isinstance(c, int) and 0 <= c < len(names):
                positions.append(c)
            else:
                raise ValueError(f"re_columns: {show(c)} is neither a feature name nor a "
                                 f"position in 0..{len(names) - 1}.")
        if not self.re_intercept and not positions and not vc_columns:
            raise ValueError("re_intercept=False needs re_columns or vc_formula: the model "
                             "would have no random effect.")
        design = {"groups": column, "re_columns": positions,
                  "fit_intercept": self.fit_intercept, "re_intercept": self.re_intercept,
                  "min_group_rows": self.min_group_size}
        if vc_columns:
            if column is None:
                raise ValueError("vc_formula needs groups=: its levels are nested in the "
                                 "groups (with the sites as groups, name a site column).")
            design["vc_columns"] = list(vc_columns)
        return design

    def _record(self, dataset, session, names, design, labels, group_sites, optimum):
        results = self.results_
        self.fe_params_ = results.fe_params
        values = results.fe_params.to_numpy()
        self.intercept_ = float(values[0]) if self.fit_intercept else 0.0
        self.coef_ = values[1:] if self.fit_intercept else values
        self.cov_re_ = results.cov_re
        self.vcomp_ = results.vcomp
        self.scale_ = results.scale
        self.llf_ = results.llf
        self.random_effects_ = results.random_effects_frame
        self.groups_, self.group_sites_, self.n_groups_ = labels, group_sites, len(labels)
        self.converged_, self.n_iter_ = optimum.converged, optimum.n_iter
        self.clients_, self.n_clients_ = dataset.labels, len(dataset)
        self.ledger_ = session.ledger.as_dict()
        self.n_features_in_ = len(names)
        self.feature_names_in_ = np.asarray(names, dtype=object)
        self.group_column_ = design["groups"]
        self._vc_columns = list(design.get("vc_columns", []))
        self._re_positions = design["re_columns"]

    def _warn(self, optimum, re_names, sums):
        if not optimum.converged:
            warnings.warn(
                f"FedMixedLM did not converge: the server's optimiser stopped after "
                f"{optimum.n_iter} iterations with |gradient| = {optimum.gradient_norm:.3g} "
                f"> tol={self.tol} ({optimum.message}). The estimates may be off; raise "
                "max_iter, rescale the features, or simplify the random effects.",
                ConvergenceWarning, stacklevel=4)
        diagonal = np.diag(lik.factor(optimum.theta, sums))
        k = sums.k_re
        # each component's relative sd sits on its columns' diagonal: its first column's
        firsts = [k + int(np.flatnonzero(sums.vc_slots == j)[0]) for j in range(sums.n_vc)]
        warn_boundary(np.diag(np.concatenate([diagonal[:k], diagonal[firsts]])),
                      re_names + list(self.vcomp_.index), "FedMixedLM")
        if np.linalg.eigvalsh(self.results_.cov_params().to_numpy())[0] <= 0:
            warnings.warn("FedMixedLM: the Hessian at the estimate is not negative definite: "
                          "the standard errors are not reliable.", ConvergenceWarning,
                          stacklevel=4)

    def summary(self, alpha=0.05):
        """The regression table (statsmodels' layout).

        Parameters
        ----------
        alpha : float, default=0.05

        Returns
        -------
        summary : MixedLMSummary
        """
        check_is_fitted(self)
        return self.results_.summary(alpha)

    def predict(self, X, groups=None):
        """Predictions: the fixed part ``X b``, plus the group's predicted random
        effect for rows whose group was seen in the fit (``groups``).

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The features of the fit (a DataFrame may hold the grouping column,
            and the variance components' columns: their levels' effects are then
            added too, as in statsmodels' ``fittedvalues``).
        groups : array-like of shape (n_samples,), default=None
            Each row's group; ``None``: the population-level prediction (as
            statsmodels' ``predict``), unless ``X`` holds the grouping column.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        levels = {}
        if isinstance(X, pd.DataFrame):  # the components' levels, kept for their effects
            columns = [c for c in self._vc_columns if c in X.columns]
            levels = {c: X[c].to_numpy() for c in columns}
            X = X.drop(columns=columns)
        if (groups is None and isinstance(X, pd.DataFrame) and self.group_column_ is not None
                and self.group_column_ in X.columns):
            groups = X[self.group_column_].to_numpy()
            X = X.drop(columns=[self.group_column_])
        F = np.asarray(X, dtype=np.float64)
        if F.ndim != 2 or F.shape[1] != self.n_features_in_:
            raise ValueError(f"X has shape {F.shape}; the model was fitted on "
                             f"{self.n_features_in_} features.")
        pred = F @ self.coef_ + self.intercept_
        if groups is None:
            return pred
        Z = F[:, self._re_positions]
        if self.results_.cov_re.shape[0] > Z.shape[1]:
            Z = np.hstack([np.ones((F.shape[0], 1)), Z])
        # groups unseen in the fit get the population's prediction (effects of 0)
        effects = self.random_effects_.reindex(np.asarray(groups, dtype=object)).fillna(0.0)
        pred = pred + np.einsum("ij,ij->i", Z, effects.to_numpy())
        names = dict(zip(self._vc_columns, self.vcomp_.index))
        for column, values in levels.items():  # unseen levels: an effect of 0
            keys = pd.MultiIndex.from_arrays([np.asarray(groups, dtype=object),
                                              np.full(len(values), names[column], dtype=object),
                                              np.asarray(values, dtype=object)])
            pred = pred + self.results_.vc_effects.reindex(keys).fillna(0.0).to_numpy()
        return pred


def _collect_sums(session, dataset, design):
    """The sites' totals (one summed exchange) and group blocks (one per-site
    exchange), as :class:`~skfed.mixed._likelihood.GroupSums`."""
    totals = session.sum(site_totals, design, phase="setup")
    blocks = session.per_site(site_group_blocks, design, phase="setup")
    labels, group_sites = check_group_sites(blocks, dataset.sites)
    n_vc = len(design.get("vc_columns", []))
    widths = np.array([b.get("vc_widths", np.zeros(n_vc)) for b in blocks], dtype=int)
    widths = widths.reshape(len(blocks), n_vc)
    width = widths.max(axis=0) if len(blocks) else np.zeros(n_vc, dtype=int)
    k = blocks[0]["ztz"].shape[1] - int(widths[0].sum())
    places = [_places(k, w, width) for w in widths]
    q = k + int(width.sum())
    sums = lik.GroupSums(
        C=totals["xtx"], d=totals["xty"], s=float(totals["yty"]),
        n=np.concatenate([b["n"] for b in blocks]),
        A=np.concatenate([_pad(b["ztz"], i, q, (1, 2)) for b, i in zip(blocks, places)]),
        B=np.concatenate([_pad(b["ztx"], i, q, (1,)) for b, i in zip(blocks, places)]),
        c=np.concatenate([_pad(b["zty"], i, q, (1,)) for b, i in zip(blocks, places)]),
        vc_slots=np.repeat(np.arange(n_vc), width), n_vc=n_vc)
    sums.vc_cells = _vc_cells(blocks, k, width)
    return sums, labels, group_sites


def _vc_cells(blocks, k, width):
    """``(group, component, level label, column)`` of each component's column of each
    group: a group's levels of a component fill its columns in the sites' order."""
    starts = k + np.concatenate([[0], np.cumsum(width)[:-1]]).astype(int)
    cells, offset = [], 0
    for b in blocks:
        used = {}
        for g, j, label in zip(b.get("vc_group", []), b.get("vc_component", []),
                               b.get("vc_label", [])):
            g, j = int(g), int(j)
            rank = used.get((g, j), 0)
            used[g, j] = rank + 1
            cells.append((offset + g, j, label, int(starts[j]) + rank))
        offset += len(b["labels"])
    return cells


def _places(k, site_widths, widths):
    """Where a site's columns go among all of them: the covariance block's first,
    then each component's (a site's groups may hold fewer levels than another's)."""
    starts = k + np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(int)
    return np.concatenate([np.arange(k)] + [s + np.arange(w) for s, w in
                                            zip(starts, site_widths)]).astype(int)


def _pad(blocks, places, q, axes):
    """A site's group blocks with zero columns where its groups have no level."""
    shape = list(blocks.shape)
    for a in axes:
        shape[a] = q
    out = np.zeros(shape)
    out[np.ix_(*[places if a in axes else np.arange(n) for a, n in
                 enumerate(blocks.shape)])] = blocks
    return out


def _index(labels):
    """Group labels as an index (object dtype: labels of any type kept as they are)."""
    return pd.Index(np.asarray(labels + [None], dtype=object)[:-1], dtype=object)


def _check_fixed_design(sums, names):
    """Refuse a singular fixed-effects design, naming the first column that is a
    combination of the ones before it (the estimate would not be defined)."""
    p = sums.k_fe
    if sums.n_obs <= p:
        raise ValueError(f"{sums.n_obs} rows for {p} fixed effects: too few rows.")
    C = sums.C
    scale = np.sqrt(np.clip(np.diag(C), 0, None))
    for j in range(p):
        if scale[j] == 0:
            raise ValueError(f"the fixed-effects column {show(names[j])} is zero in every "
                             "row: drop it.")
        block = C[:j + 1, :j + 1] / np.outer(scale[:j + 1], scale[:j + 1])
        if np.linalg.eigvalsh(block)[0] <= 1e-10:
            raise ValueError(f"singular fixed-effects design: the column {show(names[j])} is "
                             "(nearly) a linear combination of the columns before it "
                             f"{names[:j]}; drop it or one of those.")


def _results(optimum, sums, reml, names, labels, endog):
    """The results object from the optimum (scale, covariances, Hessian, BLUPs);
    ``names`` are the fixed effects', the covariance block's and the components'."""
    fe_names, re_names, vc_names = names
    fit = optimum.fit
    scale = fit.r2 / lik.residual_df(sums, reml)
    k = len(re_names)
    cov_names = [f"{re_names[i]} Var" if i == j else f"{re_names[j]} x {re_names[i]} Cov"
                 for i, j in zip(*np.tril_indices(k))]
    names = fe_names + cov_names + [f"{v} Var" for v in vc_names]
    H = lik.hessian(fit, sums, reml)
    try:
        cov = np.linalg.inv(-H)
    except np.linalg.LinAlgError:
        cov = np.linalg.pinv(-H)
    blups, cond = lik.random_effects(fit, sums)
    vcomp = lik.packed_psi(fit.psi, sums)[k * (k + 1) // 2:]
    cells = getattr(sums, "vc_cells", [])
    vc_effects = pd.Series(
        [blups[g, col] for g, _, _, col in cells], dtype=float,
        index=pd.MultiIndex.from_tuples([(labels[g], vc_names[j], label)
                                         for g, j, label, _ in cells],
                                        names=["group", "component", "level"])
        if cells else None)
    return MixedLMResults(
        fe_params=pd.Series(fit.fe_params, index=fe_names),
        cov_params=pd.DataFrame(cov, index=names, columns=names), scale=scale,
        cov_re=pd.DataFrame(scale * fit.psi[:k, :k], index=re_names, columns=re_names),
        vcomp=pd.Series(scale * vcomp, index=list(vc_names), dtype=float),
        llf=lik.loglike(fit, sums, reml), reml=reml, converged=optimum.converged,
        group_sizes=sums.n.astype(int),
        random_effects=pd.DataFrame(blups[:, :k], index=_index(labels), columns=re_names),
        random_effects_cov=scale * cond[:, :k, :k],
        endog_name=endog, n_iter=optimum.n_iter, message=optimum.message,
        vc_effects=vc_effects)


#: statsmodels' form of a variance component: a column's levels as indicators
_VC_FORM = re.compile(r"^\s*0\s*\+\s*C\(\s*([^()\s]+)\s*\)\s*$")


def _variance_components(vc_formula, names):
    """``(component names, their columns)`` of ``vc_formula`` in statsmodels' order
    (sorted by name)."""
    if not vc_formula:
        return [], []
    components, columns = [], []
    for name in sorted(vc_formula):
        form = vc_formula[name]
        match = _VC_FORM.match(form) if isinstance(form, str) else None
        if match is None:
            raise ValueError(f"vc_formula[{show(name)}] = {show(form)}: a variance component "
                             "is written '0 + C(column)' (each level of the column within a "
                             "group gets a random intercept); other forms are not supported.")
        column = match.group(1)
        if column not in names:
            raise ValueError(f"vc_formula[{show(name)}]: {show(column)} is not a column of X "
                             f"{names}.")
        components.append(str(name))
        columns.append(column)
    return components, columns
