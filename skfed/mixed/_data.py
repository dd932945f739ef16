"""Data entry and warnings shared by the mixed models.

:func:`mixed_dataset` turns ``fit``'s arguments into a
:class:`~skfed.data.FederatedDataset` whose sites hold a table with the
grouping column beside the features; the warnings are the ones a
statistician expects from lme4 and statsmodels (few groups, a boundary fit).
"""

import warnings

import numpy as np
import pandas as pd

from .._messages import show
from ..data import FederatedDataset, as_dataset

#: the grouping column's name when ``groups`` is given as an array
GROUP_COLUMN = "<groups>"

#: below this many groups a variance component is reported with a warning (lme4's
#: optional ``check.nlev.gtreq.5``)
FEW_GROUPS = 5


class FewGroupsWarning(UserWarning):
    """A variance component estimated from fewer than five groups."""


class BoundaryFitWarning(UserWarning):
    """A random-effects covariance at (or next to) the boundary: a variance at
    zero or a correlation at +-1 (lme4's "boundary (singular) fit")."""


def mixed_dataset(X, y, clients, groups):
    """``(dataset, group_column, feature_names, endog_name)`` for a mixed model's fit.

    ``groups``: ``None`` (each site is a group), a column name of ``X`` (a
    DataFrame or the dataset's table) or an array with one label per row.
    """
    if isinstance(X, FederatedDataset):
        dataset = as_dataset(X, y, clients)
        if not dataset.has_target:
            raise ValueError("the FederatedDataset has no target: build it with target=... "
                             "(or y=...).")
        columns = dataset.columns
        if groups is not None and (columns is None or not isinstance(groups, str)
                                   or groups not in columns):
            raise ValueError(f"groups={show(groups)} must name a column of the dataset's "
                             f"table {columns}; with a FederatedDataset the groups travel "
                             "with the rows.")
        names = None if columns is None else [c for c in columns if c != groups]
        if names is None:
            names = [f"x{j + 1}" for j in range(dataset.n_features)]
        name = dataset.target_name  # the table's target column, or None for arrays
        return dataset, groups, names, name if isinstance(name, str) else "y"
    endog_name = str(getattr(y, "name", None) or "y")
    if y is None:
        raise ValueError("y is required: the target of the mixed model.")
    frame = X.copy() if isinstance(X, pd.DataFrame) else _frame(X)
    frame.columns = [str(c) for c in frame.columns]
    column = None
    if isinstance(groups, str):
        if groups not in frame.columns:
            raise ValueError(f"groups={show(groups)} is not a column of X "
                             f"{list(frame.columns)}; give a column name or one label per "
                             "row.")
        column = groups
    elif groups is not None:
        labels = np.asarray(groups)
        if labels.ndim != 1 or labels.shape[0] != frame.shape[0]:
            raise ValueError(f"groups has {labels.shape[0] if labels.ndim else 0} entries but "
                             f"X has {frame.shape[0]} rows: give one group label per row (or "
                             "the name of a column of X).")
        column = GROUP_COLUMN
        frame[column] = labels
    names = [c for c in frame.columns if c != column]
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be one target (1-D); got shape {y.shape}.")
    return as_dataset(frame, y, clients), column, names, endog_name


def _frame(X):
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (rows, features); got shape {X.shape}.")
    return pd.DataFrame(X, columns=[f"x{j + 1}" for j in range(X.shape[1])])


def check_group_sites(replies, sites):
    """Group labels in model order and the site of each; a group at two sites is
    refused (its predicted effect must stay with one site, and its rows would be
    two groups' to each site)."""
    home, labels, group_sites = {}, [], []
    for site, reply in zip(sites, replies):
        for label in reply["labels"]:
            if label in home:
                raise ValueError(f"group {show(label)} is at two sites, {show(home[label])} "
                                 f"and {show(site)}: groups must be nested in sites (give "
                                 "the two parts different labels, or group by site).")
            home[label] = site
            labels.append(label)
            group_sites.append(site)
    return labels, group_sites


def warn_few_groups(n_groups, by_site, estimator, stacklevel=4):
    """lme4's optional check: a variance from fewer than five groups is unreliable."""
    if n_groups < FEW_GROUPS:
        unit = "sites" if by_site else "groups"
        warnings.warn(
            f"{estimator}: only {n_groups} {unit}: the random-effects variance is estimated "
            f"from {n_groups} group effects, so it is very uncertain (often exactly zero) and "
            "its standard error is unreliable. Report it with caution, or treat the "
            f"{unit} as fixed effects (lme4 warns below {FEW_GROUPS} levels).",
            FewGroupsWarning, stacklevel=stacklevel)


def warn_boundary(relative_factor, names, estimator, tol=1e-4, stacklevel=5):
    """lme4's ``isSingular``: a diagonal entry of the relative Cholesky factor
    (random-effects standard deviations over the residual's) below ``tol``."""
    diagonal = np.abs(np.diag(np.atleast_2d(relative_factor)))
    small = [names[j] for j in np.flatnonzero(diagonal < tol)]
    if small:
        warnings.warn(
            f"{estimator}: boundary (singular) fit: the random-effects covariance is "
            f"singular along {', '.join(small)} (a variance at zero or a correlation at "
            "+-1). The data show no variation between groups there beyond the residual "
            "noise; a simpler random-effects structure may fit as well, and the standard "
            "errors of the variances are not meaningful.", BoundaryFitWarning,
            stacklevel=stacklevel)
