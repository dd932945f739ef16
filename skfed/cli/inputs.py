"""What ``skfed fit`` does with the input columns before fitting.

Every problem of the input is found in one pass and reported in one error
(all columns with missing values, all text columns not declared
``--categorical``, non-finite numbers, a target with gaps), each with what
would fix it. ``--impute median|mean|most_frequent`` fills missing feature
values with :class:`~skfed.preprocessing.FedSimpleImputer` (statistics from
per-site summaries of the training rows; ``--categorical`` columns always
with their most frequent value); ``--drop-incomplete`` drops the rows with
a missing value instead (with ``--impute``: only rows without a target),
and the output says how many rows each site lost.

The fitted preprocessing is two steps of the saved scikit-learn
``Pipeline`` (``impute``, then ``encode``; then ``scale`` and ``model``),
so ``joblib.load(path).predict(frame)`` takes rows like the input file's
(``pandas.read_csv`` of it: extra columns such as the target or the site
are ignored, missing values are imputed as in the fit).
"""

import math

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._messages import count
from ..preprocessing import FedOneHotEncoder, FedSimpleImputer
from ..data.site import site_rows

#: cells read as missing values (``pandas.read_csv`` reads these as NaN too)
MISSING = {"", "na", "nan", "null", "n/a", "none"}
IMPUTE_STRATEGIES = ("median", "mean", "most_frequent")


def is_missing(cell):
    return cell.lower() in MISSING


def _number(cell):
    try:
        return float(cell)
    except ValueError:
        return None


def _where(table, i):
    return "{} line {}".format(*table.origin[i])


def event_value(cell):
    """A survival target's event cell as 1.0 or 0.0 (``1``/``0``, ``true``/``false``);
    ``None`` for anything else."""
    text = cell.strip().lower()
    if text in ("true", "false"):
        return float(text == "true")
    number = _number(text)
    return number if number in (0.0, 1.0) else None


def _survival_problems(table, event, time, missing):
    """The problems of a survival target's event column (0/1) and time column (numbers
    >= 0), each naming its column and where its first bad value is."""
    problems = []
    k = table.columns.index(event)
    bad = [i for i, row in enumerate(table.rows) if not missing[event][i]
           and event_value(row[k]) is None]
    if bad:
        examples = sorted({table.rows[i][k] for i in bad})[:3]
        problems.append(f"event column {event!r} (the first --target) must be 0/1 (1: the "
                        f"event happened, 0: censored at the time): {count(len(bad), 'value')}"
                        f" such as {', '.join(map(repr, examples))} (the first in "
                        f"{_where(table, bad[0])})")
    k = table.columns.index(time)
    cells = [row[k] for row in table.rows]
    text = [i for i, c in enumerate(cells) if not missing[time][i] and _number(c) is None]
    if text:
        problems.append(f"time column {time!r} (the second --target) is not numeric: "
                        f"{count(len(text), 'value')} such as {cells[text[0]]!r} in "
                        f"{_where(table, text[0])}; it must hold follow-up times")
        return problems
    bad = [i for i, c in enumerate(cells) if not missing[time][i] and not (
        math.isfinite(float(c)) and float(c) >= 0)]
    if bad:
        problems.append(f"time column {time!r} (the second --target) has "
                        f"{count(len(bad), 'negative or non-finite value')} such as "
                        f"{cells[bad[0]]!r} in {_where(table, bad[0])}: times are follow-up "
                        "durations >= 0")
    return problems


def check_columns(table, *, features, categorical, targets, regression, impute,
                  drop_incomplete, survival=False, strata=None):
    """Every problem of the input at once: returns ``keep`` (the rows to use) and the
    per-row notes, or raises one :class:`~skfed.cli.fit.CLIError` listing them all.

    ``survival``: ``targets`` are the event column (0/1) and the time column
    (>= 0). ``strata``: the Cox model's strata column (any values, none
    missing).
    """
    from .errors import CLIError

    n = len(table.rows)
    problems, incomplete = [], np.zeros(n, dtype=bool)
    no_target = np.zeros(n, dtype=bool)
    columns = [(name, "feature") for name in features] + [(t, "target") for t in targets]
    if strata is not None:
        columns.append((strata, "strata"))
    target_missing = {}
    for name, role in columns:
        k = table.columns.index(name)
        cells = [row[k] for row in table.rows]
        missing = np.array([is_missing(c) for c in cells])
        numeric = role == "feature" and name not in categorical or (
            role == "target" and regression and not survival)
        if role == "target":
            target_missing[name] = missing
        if missing.any():
            first = _where(table, int(np.argmax(missing)))
            if role == "strata":
                no_target |= missing  # never imputed: its rows go with --drop-incomplete
                problems.append(f"strata column {name!r} has "
                                f"{count(int(missing.sum()), 'missing value')} (the first in "
                                f"{first}): --drop-incomplete drops those rows")
            elif role == "target":
                no_target |= missing
                problems.append(f"target {name!r} has {count(int(missing.sum()), 'missing value')}"
                                f" (the first in {first}): a target is never imputed; "
                                "--drop-incomplete drops those rows")
            elif missing.all():
                problems.append(f"{role} column {name!r} has no value in any row: leave it "
                                f"out with --drop {name}")
                continue
            else:
                incomplete |= missing
                if not impute:
                    how = ("--impute most_frequent" if name in categorical else
                           "--impute median (or mean, most_frequent)")
                    problems.append(f"{role} column {name!r} has "
                                    f"{count(int(missing.sum()), 'missing value')} (the first "
                                    f"in {first}): {how} fills them at the sites, or "
                                    "--drop-incomplete drops those rows")
        if not numeric:
            continue
        bad = [(i, c) for i, c in enumerate(cells) if not missing[i] and _number(c) is None]
        if bad:
            i, cell = bad[0]
            hint = (f"declare it --categorical {name} (one-hot), or leave it out with "
                    f"--drop {name}" if role == "feature" else "it must hold numbers")
            problems.append(f"{role} column {name!r} is not numeric: "
                            f"{count(len(bad), 'value')} such as {cell!r} in "
                            f"{_where(table, i)}; {hint}")
            continue
        inf = [i for i, c in enumerate(cells) if not missing[i] and not math.isfinite(
            float(c))]
        if inf:
            problems.append(f"{role} column {name!r} has {count(len(inf), 'non-finite value')}"
                            f" such as {cells[inf[0]]!r} in {_where(table, inf[0])}")
    if survival:
        problems += _survival_problems(table, targets[0], targets[1], target_missing)
    drop = no_target | (incomplete if not impute else False)
    if drop_incomplete:
        # what dropping fixes is no longer a problem
        problems = [p for p in problems if "missing value" not in p]
    if problems:
        listed = "" if len(problems) == 1 else " (all of them, one per line)"
        raise CLIError(f"the input has {count(len(problems), 'problem')}{listed}:\n  - "
                       + "\n  - ".join(problems))
    return ~drop if drop_incomplete else np.ones(n, dtype=bool)


def dropped_note(sites, keep, impute):
    """``"dropped 3 incomplete rows: a 2, b 1"`` (every site named, 0 included)."""
    labels = np.unique(sites)
    per_site = [(lab, int(np.sum(~keep & (sites == lab)))) for lab in labels]
    what = "rows without a target" if impute else "incomplete rows (a missing value)"
    return (f"--drop-incomplete: dropped {count(int((~keep).sum()), 'row')} of {len(keep)}, "
            f"the {what}; by site: " + ", ".join(f"{lab} {k}" for lab, k in per_site))


def feature_frame(table, features, categorical, keep):
    """The feature columns of the kept rows as a DataFrame: numbers as floats, categories
    as strings, missing values as NaN (what ``pandas.read_csv`` gives for the file)."""
    import pandas as pd

    data = {}
    rows = [row for row, k in zip(table.rows, keep) if k]
    for name in features:
        k = table.columns.index(name)
        if name in categorical:
            data[name] = pd.Series([np.nan if is_missing(r[k]) else r[k] for r in rows],
                                   dtype=object)
        else:
            data[name] = np.array([np.nan if is_missing(r[k]) else float(r[k]) for r in rows])
    return pd.DataFrame(data, columns=list(features))


def _category_text(value):
    """A category as the CSV wrote it: ``pandas.read_csv`` reads a column of integer codes
    with gaps as floats (``2.0``); the fit saw ``"2"``."""
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return np.nan
        if value.is_integer():
            return str(int(value))
    return value if isinstance(value, str) else str(value)


class ColumnImputer(TransformerMixin, BaseEstimator):
    """Select the feature columns of a raw frame and fill their missing values.

    Numeric columns with a :class:`~skfed.preprocessing.FedSimpleImputer` of
    ``strategy``, ``categorical`` ones with the most frequent category (also
    a ``FedSimpleImputer``); both fitted from per-site summaries.

    Parameters
    ----------
    features : list of str
        The feature columns, in the order of the fit; other columns of the
        input are ignored.
    categorical : list of str, default=()
        The categorical columns among ``features``.
    strategy : {"median", "mean", "most_frequent"} or None, default=None
        The numeric columns' statistic; ``None``: no imputation (a missing
        value then stops ``predict`` with an error naming it).

    Attributes
    ----------
    numeric_imputer_ : FedSimpleImputer or None
        Fitted on the numeric columns (``None`` without ``strategy`` or
        numeric columns).
    categorical_imputer_ : FedSimpleImputer or None
        Fitted on the categorical columns.
    feature_names_in_ : ndarray of str
        ``features``.
    n_features_in_ : int
        Number of features.
    """

    #: the fitted state a site service receives with the constructor's parameters for
    #: ``transform`` (:mod:`skfed.sites.codec`; nothing else is accepted)
    _wire_attributes = ("numeric_imputer_", "categorical_imputer_", "feature_names_in_",
                        "n_features_in_")

    def __init__(self, features, categorical=(), strategy=None):
        self.features = features
        self.categorical = categorical
        self.strategy = strategy

    def _parts(self):
        numeric = [f for f in self.features if f not in self.categorical]
        return numeric, [f for f in self.features if f in self.categorical]

    def fit(self, X, y=None, clients=None):
        """Fit the imputers on the rows ``X`` (a DataFrame) held by ``clients``.

        Parameters
        ----------
        X : DataFrame
            Rows with at least the ``features`` columns.
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site of each row.

        Returns
        -------
        self : object
        """
        numeric, cats = self._parts()
        frame = self._select(X)
        self.numeric_imputer_ = self.categorical_imputer_ = None
        if self.strategy is not None and numeric:
            self.numeric_imputer_ = FedSimpleImputer(strategy=self.strategy).fit(
                frame[numeric].to_numpy(dtype=float), clients=clients)
        if self.strategy is not None and cats:
            self.categorical_imputer_ = FedSimpleImputer(
                strategy="most_frequent", keep_empty_features=True).fit(
                frame[cats].to_numpy(dtype=object), clients=clients)
        self.feature_names_in_ = np.asarray(self.features, dtype=object)
        self.n_features_in_ = len(self.features)
        return self

    def fit_sites(self, data):
        """Fit the imputers on a :class:`~skfed.FederatedDataset` whose sites hold the
        feature columns as tables: the statistics come from per-site summaries computed
        where the rows are (``skfed fit --scheduler``).

        Parameters
        ----------
        data : FederatedDataset
            The sites' rows (tables with at least the ``features`` columns).

        Returns
        -------
        self : object
        """
        numeric, cats = self._parts()
        self.numeric_imputer_ = self.categorical_imputer_ = None
        if self.strategy is not None and numeric:
            self.numeric_imputer_ = FedSimpleImputer(strategy=self.strategy).fit(
                data.apply(_site_columns, self, numeric, "float"))
        if self.strategy is not None and cats:
            self.categorical_imputer_ = FedSimpleImputer(
                strategy="most_frequent", keep_empty_features=True).fit(
                data.apply(_site_columns, self, cats, "object"))
        self.feature_names_in_ = np.asarray(self.features, dtype=object)
        self.n_features_in_ = len(self.features)
        return self

    def _select(self, X):
        import pandas as pd

        if not hasattr(X, "columns"):
            raise ValueError("the saved skfed fit model takes a pandas DataFrame with the "
                             "input file's columns (e.g. pandas.read_csv of a file like it).")
        absent = [f for f in self.features if f not in X.columns]
        if absent:
            raise ValueError(f"the rows lack the feature column(s) {absent}; the model was "
                             f"fitted on {list(self.features)}.")
        out = {}
        for name in self.features:
            col = X[name]
            if name in self.categorical:
                out[name] = pd.Series([_category_text(v) for v in col], dtype=object,
                                      index=X.index)
            else:
                out[name] = pd.to_numeric(col, errors="raise").astype(float)
        return pd.DataFrame(out, index=X.index)

    def transform(self, X):
        """The feature columns of ``X``, in the fit's order, missing values filled.

        Parameters
        ----------
        X : DataFrame
            Rows with at least the ``features`` columns.

        Returns
        -------
        frame : DataFrame of shape (n_samples, n_features)
        """
        check_is_fitted(self, "n_features_in_")
        numeric, cats = self._parts()
        frame = self._select(X)
        if self.numeric_imputer_ is not None:
            frame[numeric] = self.numeric_imputer_.transform(frame[numeric].to_numpy(float))
        if self.categorical_imputer_ is not None:
            frame[cats] = self.categorical_imputer_.transform(
                frame[cats].to_numpy(dtype=object))
        return frame


class ColumnEncoder(TransformerMixin, BaseEstimator):
    """One-hot encode the ``categorical`` columns (a :class:`~skfed.preprocessing.
    FedOneHotEncoder`, categories pooled from the sites' sets) in place of each.

    Parameters
    ----------
    features : list of str
        The columns, in order.
    categorical : list of str, default=()
        Those replaced by their one-hot columns (``name=value``).

    Attributes
    ----------
    encoder_ : FedOneHotEncoder or None
        Fitted on the categorical columns (``handle_unknown="ignore"``: a
        category the sites never held encodes as all zeros).
    feature_names_out_ : list of str
        The output columns.
    indicators_ : list of int
        Positions of the one-hot columns in the output.
    n_features_in_ : int
        Number of input columns.
    """

    #: the fitted state a site service receives with the constructor's parameters for
    #: ``transform`` (:mod:`skfed.sites.codec`; nothing else is accepted)
    _wire_attributes = ("encoder_", "feature_names_out_", "indicators_", "n_features_in_")

    def __init__(self, features, categorical=()):
        self.features = features
        self.categorical = categorical

    def fit(self, X, y=None, clients=None):
        """Pool the categories of the rows ``X`` (a DataFrame) held by ``clients``.

        Parameters
        ----------
        X : DataFrame
            The columns ``features``.
        y : None
            Ignored.
        clients : array-like of shape (n_samples,), default=None
            The site of each row.

        Returns
        -------
        self : object
        """
        cats = [f for f in self.features if f in self.categorical]
        self.encoder_ = None
        names, indicators = [], []
        levels = {}
        if cats:
            self.encoder_ = FedOneHotEncoder(handle_unknown="ignore").fit(
                X[cats].to_numpy(dtype=object), clients=clients)
            levels = dict(zip(cats, self.encoder_.categories_))
        for name in self.features:
            if name in levels:
                for level in levels[name]:
                    indicators.append(len(names))
                    names.append(f"{name}={level}")
            else:
                names.append(name)
        self.feature_names_out_, self.indicators_ = names, indicators
        self.n_features_in_ = len(self.features)
        return self

    def transform(self, X):
        """The numeric columns and the one-hot columns, as a float array.

        Parameters
        ----------
        X : DataFrame
            The columns ``features``.

        Returns
        -------
        Z : ndarray of shape (n_samples, len(feature_names_out_))
        """
        check_is_fitted(self, "n_features_in_")
        blocks, cats = [], [f for f in self.features if f in self.categorical]
        onehot = (None if self.encoder_ is None else
                  np.asarray(self.encoder_.transform(X[cats].to_numpy(dtype=object)),
                             dtype=np.float64))
        start = 0
        for name in self.features:
            if name in self.categorical:
                width = len(self.encoder_.categories_[cats.index(name)])
                blocks.append(onehot[:, start:start + width])
                start += width
            else:
                blocks.append(np.asarray(X[name], dtype=np.float64)[:, None])
        return np.hstack(blocks)

    def get_feature_names_out(self, input_features=None):
        """The output columns (``name=value`` for a one-hot column).

        Parameters
        ----------
        input_features : None
            Ignored.

        Returns
        -------
        names : ndarray of str
        """
        check_is_fitted(self, "n_features_in_")
        return np.asarray(self.feature_names_out_, dtype=object)


def _site_columns(site, imputer, names, dtype):
    """At a site: the columns ``names`` of its rows, cleaned as ``imputer`` reads them."""
    frame = imputer._select(site.X)[list(names)]
    return site.replace(X=frame.to_numpy(dtype=float if dtype == "float" else object))


def impute_site(site, imputer):
    """At a site: its feature columns selected, cleaned and imputed by ``imputer``."""
    return site.replace(X=imputer.transform(site.X))


def inspect_site(site, categorical):
    """At a site: counts of its input problems, per column (no value leaves the site).

    Returns ``{"columns": {name: (missing, non-numeric, non-finite)}, "no_target":
    rows without a target, "incomplete": rows with a missing feature, "rows": n}``.
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


def drop_incomplete_site(site, impute):
    """At a site: its rows without a missing value (with ``impute``: with a target)."""
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


def site_problems(sites, reports, categorical, *, impute, drop_incomplete):
    """The problems of the sites' inputs from :func:`inspect_site` reports, as the lines of
    one error (empty: none); every column and every site at once."""
    problems = []
    names = list(reports[0]["columns"])
    for name in names:
        per = [(s, r["columns"][name]) for s, r in zip(sites, reports)]
        where = lambda k: ", ".join(f"{s} {c[k]}" for s, c in per if c[k])  # noqa: E731
        missing = sum(c[0] for _, c in per)
        if missing == sum(r["rows"] for r in reports):
            problems.append(f"feature column {name!r} has no value at any site: leave it out "
                            f"with --drop {name}")
            continue
        if missing and not impute and not drop_incomplete:
            how = ("--impute most_frequent" if name in categorical else
                   "--impute median (or mean, most_frequent)")
            problems.append(f"feature column {name!r} has {count(missing, 'missing value')} "
                            f"(by site: {where(0)}): {how} fills them at the sites, or "
                            "--drop-incomplete drops those rows")
        text = sum(c[1] for _, c in per)
        if text:
            problems.append(f"feature column {name!r} is not numeric: {count(text, 'value')} "
                            f"(by site: {where(1)}); declare it --categorical {name} "
                            f"(one-hot), or leave it out with --drop {name}")
        inf = sum(c[2] for _, c in per)
        if inf:
            problems.append(f"feature column {name!r} has {count(inf, 'non-finite value')} "
                            f"(by site: {where(2)})")
    no_target = sum(r["no_target"] for r in reports)
    if no_target and not drop_incomplete:
        problems.append(f"the target has {count(no_target, 'missing value')} (by site: "
                        + ", ".join(f"{s} {r['no_target']}" for s, r in zip(sites, reports)
                                    if r["no_target"])
                        + "): a target is never imputed; --drop-incomplete drops those rows")
    return problems
