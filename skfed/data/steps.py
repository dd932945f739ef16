"""The row steps and checks ``skfed fit`` asks each site to run on its own rows.

Each function takes one site's rows (a :class:`~skfed.data.SiteData`) and
returns its rows transformed (a *row step*, applied with
:meth:`FederatedDataset.apply <skfed.data.FederatedDataset.apply>`) or a few
counts (a *check*, run with ``FederatedDataset.map``). They run where the
rows are: in process, on a Dask worker, or in a site service, which runs
only the steps and operations declared beside their functions (these among
them: :mod:`skfed.federation.operations`) and names them on the wire.

Nothing here knows the command line: the command line calls these steps,
and the site service runs them, from this one place.
"""

import numpy as np

from ..federation.operations import COUNTS, NOTHING, Arg, row_step, site_operation
from .levels import check_levels
from .site import holdout_rows, numeric_matrix, site_rows

#: fewest rows a site needs: some to train on and some to evaluate on
MIN_SITE_ROWS = 5


@row_step("split", selects=True,
          arguments=(Arg("test_size", "float", low=0, high=1), Arg("seed", "int", low=0,
                                                                   high=2 ** 63 - 1),
                     Arg("held_out", "bool")),
          remedy="a test_size whose held-out part and rest each hold at least min_rows "
                 "of the site's rows, or no held-out rows")
def split_site(site, test_size, seed, held_out):
    """At a site: its training rows or its held-out rows.

    Parameters
    ----------
    site : SiteData
        The site's rows.
    test_size : float
        The share of the rows held out, in (0, 1).
    seed : int
        The split's seed (the site draws the rows: :func:`~skfed.data.site.holdout_rows`).
    held_out : bool
        ``True``: the held-out rows; ``False``: the training rows.

    Returns
    -------
    SiteData
        The part; at least :data:`MIN_SITE_ROWS` rows per site (some to
        train on, some to evaluate on).
    """
    return holdout_rows(site, test_size, seed, held_out, min_rows=MIN_SITE_ROWS)


@site_operation("data.check", releases=NOTHING, combine="sum",  # each part checked
                describes="nothing (the site's features are checked to be numeric and "
                          "finite; a refusal names the column)")
def check_numeric(site):
    """At a site: refuse text or non-finite features with the site's name.

    Parameters
    ----------
    site : SiteData
        The site's rows.

    Returns
    -------
    None
        Nothing leaves the site; a :class:`~skfed.data.SiteError` names the
        column otherwise.
    """
    numeric_matrix(site)


@row_step("select_columns", arguments=(Arg("names", "names", most=1 << 16),),
          reads=lambda names: names)
def select_columns(site, names):
    """At a site: only the columns ``names`` of its rows.

    Parameters
    ----------
    site : SiteData
        The site's rows, with its features as a table.
    names : list of str
        The columns kept, in this order.

    Returns
    -------
    SiteData
    """
    return site.replace(X=site.X[list(names)])


def _one_hot_rules(site, values, rules):
    """Each level of an encoded column held by ``min_level_count`` rows here: an
    encoder's categories are the analyst's, and a category of a rare value (one age)
    would make a row indicator."""
    names = [c for c in values["categorical"] if c in site.X.columns]
    check_levels([site.X[c] for c in names], names, rules.min_level_count)


@row_step("one_hot", arguments=(Arg("categorical", "names", most=1 << 16),
                                Arg("encoder", "object", role="transformer"),
                                Arg("order", "ints", most=1 << 20)), checks=(_one_hot_rules,))
def one_hot_site(site, categorical, encoder, order):
    """At a site: the numeric columns beside the one-hot encoding of ``categorical``.

    Parameters
    ----------
    site : SiteData
        The site's rows, with its features as a table.
    categorical : list of str
        The columns one-hot encoded.
    encoder : FedOneHotEncoder
        Fitted on the ``categorical`` columns of every site.
    order : ndarray of int
        The output columns rearranged (the local form's column order).

    Returns
    -------
    SiteData
        Its features as a float array.
    """
    numeric = numeric_matrix(site.replace(X=site.X.drop(columns=list(categorical))))
    encoded = np.asarray(encoder.transform(site.X[list(categorical)]), dtype=np.float64)
    return site.replace(X=np.hstack([numeric, encoded])[:, order])


@row_step("standardize", arguments=(Arg("mean", "floats", most=1 << 20),
                                    Arg("scale", "floats", most=1 << 20)))
def standardize_site(site, mean, scale):
    """At a site: its rows standardized with the server's statistics.

    Parameters
    ----------
    site : SiteData
        The site's rows.
    mean, scale : ndarray of shape (n_features,)
        The pooled statistics (:class:`~skfed.preprocessing._feature_scaler.FeatureScaler`).

    Returns
    -------
    SiteData
        ``(X - mean) / scale`` as an array (the scaler keeps the column
        names, as in a scikit-learn Pipeline).
    """
    return site.replace(X=(numeric_matrix(site) - mean) / scale)


@row_step("impute", arguments=(Arg("imputer", "object", role="transformer"),))
def impute_site(site, imputer):
    """At a site: its feature columns selected, cleaned and imputed by ``imputer``.

    Parameters
    ----------
    site : SiteData
        The site's rows, with its features as a table.
    imputer : ColumnImputer
        Fitted (:class:`~skfed.preprocessing._column_imputer.ColumnImputer`).

    Returns
    -------
    SiteData
    """
    return site.replace(X=imputer.transform(site.X))


def _small_counts_blanked(site, values, out, rules):
    """Counts of 1 to ``min_level_count - 1`` rows (a column's few missing or bad values)
    are not released: ``None`` stands for them (what a site service sends)."""
    k = rules.min_level_count

    def blank(count):
        return None if 0 < count < k else count

    out["columns"] = {name: tuple(blank(c) for c in counts)
                      for name, counts in out["columns"].items()}
    for key in ("no_target", "incomplete"):
        out[key] = blank(out[key])
    return out


@site_operation(
    "data.inspect", releases=COUNTS,
    describes="counts only: per column the numbers of missing, non-numeric and "
              "non-finite values, rows without a target and incomplete rows; each count "
              "from 1 to min_level_count - 1 blanked",
    arguments=(Arg("categorical", "names", most=1 << 16),), reply=_small_counts_blanked,
    combine="sum",  # counts per value add over partitions; blanked on the whole's sums
    counts=lambda out: [c for counts in out["columns"].values() for c in counts
                        if c is not None] + [c for c in (out["no_target"], out["incomplete"],
                                                         out["rows"]) if c is not None])
def inspect_site(site, categorical):
    """At a site: counts of its input problems, per column (no value leaves the site).

    Parameters
    ----------
    site : SiteData
        The site's rows, with its features as a table.
    categorical : list of str
        The columns not checked to be numeric.

    Returns
    -------
    dict
        ``{"columns": {name: (missing, non-numeric, non-finite)}, "no_target":
        rows without a target, "incomplete": rows with a missing feature,
        "rows": n}``.
    """
    import pandas as pd

    X = site.X
    columns, any_missing = {}, np.zeros(len(X), dtype=bool)
    for name in X.columns:
        col = X[name]
        missing = col.isna().to_numpy()
        any_missing |= missing
        text = non_finite = 0
        if name not in categorical:
            numbers = pd.to_numeric(col, errors="coerce")
            text = int((numbers.isna().to_numpy() & ~missing).sum())
            non_finite = int(np.isinf(numbers.to_numpy(dtype=float, na_value=np.nan)).sum())
        columns[str(name)] = (int(missing.sum()), text, non_finite)
    no_target = (_missing_target(site.y) if site.y is not None
                 else np.zeros(len(X), dtype=bool))
    return {"columns": columns, "no_target": int(no_target.sum()),
            "incomplete": int((any_missing | no_target).sum()), "rows": len(X)}


def _missing_target(y):
    """Rows whose target (any of its columns: a survival target's event and time) is
    missing."""
    import pandas as pd

    y = np.asarray(y, dtype=object)
    if y.ndim == 1:
        return pd.isna(pd.Series(y)).to_numpy()
    return pd.isna(pd.DataFrame(y)).to_numpy().any(axis=1)


@row_step("drop_incomplete", selects=True, arguments=(Arg("impute", "bool"),),
          remedy="impute the missing features instead of dropping their rows "
                 "(drop_incomplete(features=False) drops only the rows without a target; "
                 "--impute on the command line), or ask the site's officer to declare the "
                 "dataset's analysis population, population = \"complete\" (its complete "
                 "cases, the rows of every analysis; docs/data-officers.md)")
def drop_incomplete_site(site, impute):
    """At a site: its rows without a missing value.

    Parameters
    ----------
    site : SiteData
        The site's rows, with its features as a table.
    impute : bool
        ``True``: only the rows without a target are dropped (the features'
        missing values are imputed later).

    Returns
    -------
    SiteData
        The rows kept; a target read as objects (a column with gaps) as
        numbers again where it can be.
    """
    keep = ~_missing_target(site.y)
    if not impute:
        keep &= ~site.X.isna().any(axis=1).to_numpy()
    site = site_rows(site, keep)
    y = site.y
    if y.dtype == object:  # a column with gaps read as objects: its numbers back
        try:
            y = y.astype(float)
        except (TypeError, ValueError):
            pass
    return site.replace(y=y)
