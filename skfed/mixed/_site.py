"""What a linear mixed model asks of a site: sums over its rows, never a row.

A site builds its design from its own rows (fixed-effects columns ``X``,
random-effects columns ``Z``, target ``y``, and each row's group) and returns

- :func:`site_totals`: ``X'X``, ``X'y``, ``y'y`` and the row count, summed over
  all its rows (these add across sites, so a masked sum can carry them);
- :func:`site_group_blocks`: per group it holds, ``Z_g'Z_g``, ``Z_g'X_g``,
  ``Z_g'y_g`` and ``n_g``, with the group labels (a per-site release: a group
  lives at one site, so its blocks cannot be hidden in a sum across sites);
- :func:`site_ols`: the site's own least-squares estimate and its covariance
  (stage one of a two-stage meta-analysis).

``design`` is a plain dict: ``groups`` (the grouping column, or ``None`` when
the site is the group), ``re_columns`` (positions of the random-slope columns
among the features), ``fit_intercept``, ``re_intercept`` and
``min_group_rows`` (the fewest rows a group may have: one row's sums are the
row itself).
"""

import numpy as np

from .._messages import show
from ..data.site import SiteError, numeric_matrix
from ..federation import dominance
from ..federation.operations import SUMS, Arg, Refused, site_operation

#: the keys of a mixed model's design and their types
DESIGN_KEYS = {"groups": (str, type(None)), "re_columns": (list,), "fit_intercept": (bool,),
               "re_intercept": (bool,), "min_group_rows": (int,), "trials": (str, type(None)),
               "family": (str,), "vc_columns": (list,)}


def design_problem(design):
    """The form of a mixed model's design (a plain dict of :data:`DESIGN_KEYS`)."""
    if not isinstance(design, dict) or not set(design) <= set(DESIGN_KEYS) or any(
            not isinstance(v, DESIGN_KEYS[k]) for k, v in design.items()):
        return "a malformed mixed-model design"
    columns = design.get("re_columns", [])
    if len(columns) > 256 or not all(isinstance(c, int) and not isinstance(c, bool) and
                                     c >= 0 for c in columns):
        return "a malformed mixed-model design"
    vc = design.get("vc_columns", [])
    if len(vc) > 16 or not all(isinstance(c, str) for c in vc):
        return "a malformed mixed-model design"
    return None


def design_rules(site, values, rules):
    """A group's sums over fewer rows than the site's ``min_rows`` are not released, and
    groups (and trials) come from the dataset's own columns, not from a transform the
    analyst built (whose values would be its labels)."""
    design = values["design"]
    raw = site.meta.get("raw_columns")
    named = [(k, design.get(k)) for k in ("groups", "trials")]
    for key, column in named + [("variance component", c) for c in design.get("vc_columns",
                                                                                [])]:
        if column is not None and raw is not None and column not in raw:
            raise Refused("columns", f"the {key} column {column!r} is not one of the "
                                     "dataset's own columns", columns=[column])
    floor = max(int(design.get("min_group_rows", 0)), rules.min_rows)
    values["design"] = dict(design, min_group_rows=floor)
    if design.get("groups") is not None and design["groups"] in getattr(site.X, "columns", ()):
        codes, _ = _group_labels(site, design["groups"])
        if np.any(np.bincount(codes) < floor):  # a refusal says no label and no count
            raise Refused("min_rows", f"a group of column {design['groups']!r} holds fewer "
                          f"than {floor} rows here (a group's sums would disclose its rows)",
                          columns=[design["groups"]], public=True)
        for column in design.get("vc_columns", []):
            if column in site.X.columns and np.any(
                    _vc_levels(site, column, codes)[1] < floor):
                raise Refused("min_rows", f"a level of the variance component {column!r} "
                              f"holds fewer than {floor} rows of its group here (its sums "
                              "would disclose its rows)", columns=[column], public=True)


_DESIGN = Arg("design", "value", check=design_problem)


def _group_labels(site, column):
    """The group of each row (the site's own label when the site is the group)."""
    if column is None:
        return np.full(site.n_samples, 0), [site.site]
    values = site.X[column]
    missing = values.isna().to_numpy()
    if missing.any():
        raise SiteError(site.site, f"the grouping column {show(column)} has "
                                   f"{int(missing.sum())} missing value(s); every row needs a "
                                   "group (drop those rows or give them a group).")
    try:
        labels, codes = np.unique(values.to_numpy(), return_inverse=True)
    except TypeError:
        raise SiteError(site.site, f"the grouping column {show(column)} mixes labels of "
                                   "types that cannot be compared (e.g. numbers and text); "
                                   "give it one type.") from None
    return codes.ravel(), [v.item() if isinstance(v, np.generic) else v for v in labels]


def _vc_levels(site, column, codes):
    """``(slot, sizes)``: each row's level of ``column`` numbered within its group
    (0, 1, ... in sorted order), and the rows of each (group, level) cell."""
    return _vc_cells(site, column, codes)[:2]


def vc_cells(site, design, codes):
    """The (group, component, level label) of each variance component's column of
    each group, in the columns' order (the predicted effects' names)."""
    group, component, label = [], [], []
    for j, column in enumerate(design.get("vc_columns", [])):
        _, _, cells, levels = _vc_cells(site, column, codes)
        group.append(cells[:, 0])
        component.append(np.full(cells.shape[0], j))
        label.extend(levels[i] for i in cells[:, 1])
    if not group:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=object)
    return (np.concatenate(group).astype(np.float64),
            np.concatenate(component).astype(np.float64), np.asarray(label + [None],
                                                                     dtype=object)[:-1])


def _vc_cells(site, column, codes):
    level_codes, levels = _group_labels(site, column)
    cells, cell_of_row = np.unique(np.column_stack([codes, level_codes]), axis=0,
                                   return_inverse=True)
    cell_of_row = cell_of_row.ravel()
    first = np.concatenate([[0], np.flatnonzero(np.diff(cells[:, 0])) + 1])
    rank = np.arange(cells.shape[0]) - np.repeat(first, np.diff(np.append(first,
                                                                         cells.shape[0])))
    return rank[cell_of_row], np.bincount(cell_of_row), cells, levels


def vc_design(site, design, codes, labels):
    """The variance components' indicator columns of a site's rows (each level's
    column numbered within its group, so groups share columns) and the number of
    columns per component (the most levels one group holds)."""
    blocks, widths = [], []
    for column in design.get("vc_columns", []):
        slot, sizes = _vc_levels(site, column, codes)
        small = np.flatnonzero(sizes < design["min_group_rows"])
        if small.size:
            raise SiteError(site.site, f"a level of the variance component {show(column)} "
                                       f"holds {int(sizes[small[0]])} row(s) of its group, "
                                       f"fewer than {design['min_group_rows']}: its sums "
                                       "would disclose its rows. Merge or drop it.")
        width = int(slot.max()) + 1
        blocks.append(np.eye(width)[slot])
        widths.append(width)
    return (np.hstack(blocks) if blocks else np.zeros((codes.size, 0))), widths


def site_design(site, design):
    """``(X, Z, y, codes, labels)`` of a site's rows, checked at the site.

    Raises
    ------
    SiteError
        No rows, sample weights (a mixed model here is unweighted), no target, a
        target or feature with NaN or infinity, a grouping column with missing
        values, or a group with fewer than ``design["min_group_rows"]`` rows.
    """
    if site.n_samples == 0:
        raise SiteError(site.site, "no rows.")
    if site.sample_weight is not None:
        raise SiteError(site.site, "has sample weights; a linear mixed model is fitted "
                                   "unweighted (as statsmodels' MixedLM and lme4's lmer).")
    if site.y is None:
        raise SiteError(site.site, "no target (y).")
    column = design["groups"]
    codes, labels = _group_labels(site, column)
    dropped = ([] if column is None else [column]) + list(design.get("vc_columns", []))
    features = site.X.drop(columns=dropped) if dropped else site.X
    F = numeric_matrix(site.replace(X=features))
    y = np.asarray(site.y)
    if y.ndim != 1 or y.shape[0] != F.shape[0]:
        raise SiteError(site.site, f"{F.shape[0]} rows but a target of shape {y.shape}.")
    try:
        y = y.astype(np.float64)
    except (TypeError, ValueError):
        raise SiteError(site.site, f"the target is not numeric (dtype {y.dtype}).") from None
    if not np.all(np.isfinite(y)):
        raise SiteError(site.site, "the target contains NaN or infinity.")
    ones = np.ones((F.shape[0], 1))
    X = np.hstack([ones, F]) if design["fit_intercept"] else F
    slopes = F[:, list(design["re_columns"])]
    Z = np.hstack([ones, slopes]) if design["re_intercept"] else slopes
    _check_group_sizes(site, codes, labels, design["min_group_rows"])
    V, _ = vc_design(site, design, codes, labels)
    return X, np.hstack([Z, V]), y, codes, labels


def _check_group_sizes(site, codes, labels, min_rows):
    sizes = np.bincount(codes, minlength=len(labels))
    small = np.flatnonzero(sizes < min_rows)
    if small.size:
        g = small[0]
        raise SiteError(site.site, f"group {show(labels[g])} has {int(sizes[g])} row(s), "
                                   f"fewer than {int(min_rows)}: a group's sums would "
                                   "disclose its rows. Merge it with another group or drop it "
                                   f"({small.size} such group(s) at this site).")


def _audit_design(X, y, what):
    """The dominance rule on ``X'X``, ``X'y`` and ``y'y`` of some rows."""
    dominance.check_products(X, X, what=what)
    dominance.check_products(X, y[:, None], what=what)
    dominance.check_rows(y * y, what)


@site_operation(
    "mixed.totals", releases=SUMS, reads_design=True,
    describes="a linear mixed model's sums over the site's rows: X'X, X'y, y'y and the row "
              "count, under the dominance rule",
    arguments=(_DESIGN,), checks=(design_rules,), maskable=True)
def site_totals(site, design):
    """``X'X``, ``X'y``, ``y'y`` and the row count over all of a site's rows."""
    X, _, y, _, _ = site_design(site, design)
    _audit_design(X, y, "a mixed model's totals")
    return {"xtx": X.T @ X, "xty": X.T @ y, "yty": float(y @ y), "n": float(y.size)}


@site_operation(
    "mixed.group_blocks", releases=SUMS, reads_design=True,
    describes="per group of the site (each of >= min_rows rows): its label, row count, "
              "Z'Z, Z'X and Z'y, each group's sums under the dominance rule (variance "
              "components: an indicator column per level within the group, each level of "
              ">= min_rows rows, and the levels' labels)",
    arguments=(_DESIGN,), checks=(design_rules,))
def site_group_blocks(site, design):
    """Per group of the site: its label, ``n_g``, ``Z_g'Z_g``, ``Z_g'X_g`` and ``Z_g'y_g``."""
    X, Z, y, codes, labels = site_design(site, design)
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=len(labels))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    Zs, Xs, ys = Z[order], X[order], y[order]
    if dominance.active() is not None:
        for a, n in zip(starts, sizes):
            part = slice(a, a + n)
            dominance.check_products(Zs[part], np.column_stack([Zs[part], Xs[part],
                                                                ys[part]]),
                                     what="a group's sums")

    def group_sums(rows):  # sums of per-row products over each group's rows
        return np.add.reduceat(rows, starts, axis=0)

    _, widths = vc_design(site, design, codes, labels)
    vc_group, vc_component, vc_label = vc_cells(site, design, codes)
    return {"labels": np.asarray(labels, dtype=object),
            "n": sizes.astype(np.float64), "vc_widths": np.asarray(widths, dtype=np.float64),
            "vc_group": vc_group, "vc_component": vc_component, "vc_label": vc_label,
            "ztz": group_sums(np.einsum("ia,ib->iab", Zs, Zs)),
            "ztx": group_sums(np.einsum("ia,ib->iab", Zs, Xs)),
            "zty": group_sums(Zs * ys[:, None])}


@site_operation(
    "mixed.site_fit", releases=SUMS, reads_design=True,
    describes="the site's own least-squares coefficients, their covariance and residual "
              "degrees of freedom (stage one of a two-stage meta-analysis), from sums under "
              "the dominance rule",
    arguments=(_DESIGN,), checks=(design_rules,))
def site_ols(site, design):
    """The site's own least-squares fit of ``y`` on ``X``: coefficients, their
    covariance ``s2 (X'X)^{-1}`` and the residual degrees of freedom."""
    X, _, y, _, _ = site_design(site, design)
    n, p = X.shape
    if n <= p:
        raise SiteError(site.site, f"{n} rows for {p} coefficients: too few for its own "
                                   "least-squares fit (stage one of a two-stage analysis).")
    coef, _, rank, _ = np.linalg.lstsq(X, y, rcond=None)
    if rank < p:
        raise SiteError(site.site, "its own design is singular (a column is constant or a "
                                   "combination of others at this site); its stage-one "
                                   "estimate is not defined.")
    resid = y - X @ coef
    _audit_design(X, y, "a site's own fit")
    dominance.check_rows(resid * resid, "a site's own fit")
    s2 = float(resid @ resid) / (n - p)
    return {"coef": coef, "cov": s2 * np.linalg.inv(X.T @ X), "df_resid": float(n - p)}
