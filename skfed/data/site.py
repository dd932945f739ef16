"""What runs at a site: its rows, their checks, and the client objective built from them.

Every function here takes one site's :class:`SiteData` and runs where that
site's rows live (this process for simulated data, the site's own Dask worker
for resident data). Only what they return crosses the network, and they
return summaries (counts, sums, label sets) or objects that stay at the site.
"""

import inspect
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from sklearn.base import is_classifier
from sklearn.utils import get_tags

from .._messages import show
from ..datafits.links import inverse_link
from ..federation import dominance
from ..federation.combine import tree_combine
from ..federation.operations import COUNTS, NOTHING, SUMS, Arg, Refused, site_operation
from ..federation.wire import role_of, wire_class


class SiteError(ValueError):
    """A problem with one site's data, named by the site (and column)."""

    def __init__(self, site, message):
        self.site, self.detail = site, message
        super().__init__(f"site {show(site)}: {message}")

    def __reduce__(self):  # raised on a worker, re-raised here: keep both parts
        return (type(self), (self.site, self.detail))


@dataclass
class SiteData:
    """One site's rows: features, optional target and sample weights.

    Parameters
    ----------
    site : hashable
        The site's label.
    X : pandas.DataFrame, ndarray or sparse matrix of shape (n_rows, n_columns)
    y : ndarray of shape (n_rows,) or (n_rows, n_targets), or None
    sample_weight : ndarray of shape (n_rows,) or None
    offset : ndarray of shape (n_rows,) or None
        A known term of each row's linear predictor (a GLM's offset, such as
        log exposure), carried like the target: it never leaves the site.
    """

    site: object
    X: object
    y: object = None
    sample_weight: object = None
    meta: dict = field(default_factory=dict)
    offset: object = None

    @property
    def n_samples(self):
        return self.X.shape[0]

    def columns(self):
        """Column names when ``X`` is a table, else ``None``."""
        cols = getattr(self.X, "columns", None)
        return None if cols is None else [str(c) for c in cols]

    def weights(self):
        """Sample weights (ones when none were given)."""
        if self.sample_weight is None:
            return np.ones(self.n_samples)
        return np.asarray(self.sample_weight, dtype=np.float64)

    def replace(self, **changes):
        values = {"site": self.site, "X": self.X, "y": self.y,
                  "sample_weight": self.sample_weight, "meta": dict(self.meta),
                  "offset": self.offset}
        values.update(changes)
        return SiteData(**values)


def numeric_matrix(site):
    """``X`` as float64 (dense or CSR), or a :class:`SiteError` naming the column.

    A table column that is not numeric (text, categories) is refused: encode
    it first (``skfed.preprocessing.FedOneHotEncoder``) or drop it.
    """
    X = site.X
    if hasattr(X, "dtypes"):  # a DataFrame
        for name, dtype in zip(X.columns, X.dtypes):
            if not (np.issubdtype(np.dtype(dtype), np.number)
                    if _is_numpy_dtype(dtype) else False) and str(dtype) != "bool":
                raise SiteError(
                    site.site, f"column {str(name)!r} is not numeric (dtype {dtype}); "
                    "encode it first (skfed.preprocessing.FedOneHotEncoder) or drop it.")
        X = np.ascontiguousarray(X.to_numpy(dtype=np.float64))  # same BLAS path as arrays
    elif sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
    else:
        X = np.asarray(X)
        if X.dtype.kind not in "biuf":
            raise SiteError(site.site, f"features have dtype {X.dtype}, not numbers.")
        X = X.astype(np.float64, copy=False)
        if X.ndim != 2:
            raise SiteError(site.site, f"features must be 2-D; got shape {X.shape}.")
    values = X.data if sp.issparse(X) else X
    # a finite sum proves every entry finite without a mask the size of the rows;
    # only a sum that is not (a non-finite entry, or an overflow) looks at each entry
    if not np.isfinite(np.sum(values)) and not np.all(np.isfinite(values)):
        bad = np.flatnonzero(~np.isfinite(X.toarray() if sp.issparse(X) else X).all(axis=0))
        names = site.columns()
        where = repr(names[bad[0]]) if names else f"{bad[0]}"
        raise SiteError(site.site, f"column {where} contains NaN or infinity; impute it "
                                   "(skfed.preprocessing.FedSimpleImputer) or drop the rows.")
    return X


def _is_numpy_dtype(dtype):
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return True


def held_out_mask(site, test_size, seed, *, min_rows=2):
    """The site's held-out rows, drawn at the site.

    Where the rows carry no :class:`SitePartitions` (in process, on a Dask
    worker: the analyst's own trusted homes), ``ceil(test_size * n)`` rows (at
    least one) drawn from ``seed`` and the site's name. A site service gives
    its rows fixed partitions drawn from a secret only the site holds: the
    held-out part is then a union of whole partitions, which ``seed`` picks,
    so that no analyst chooses which rows are left out (:func:`partition_mask`).
    """
    import zlib

    n = site.n_samples
    if n < min_rows:
        raise SiteError(site.site, f"{n} rows: each site needs at least {min_rows} (some "
                                   "to train on, some to evaluate on).")
    if not 0 < test_size < 1:
        raise ValueError(f"test_size must be in (0, 1); got {show(test_size)}.")
    rng = np.random.default_rng([int(seed), zlib.crc32(str(site.site).encode())])
    partitions = site.meta.get("partitions")
    if partitions is not None:
        return partitions.mask(site, test_size, rng)
    mask = np.zeros(n, dtype=bool)
    mask[rng.permutation(n)[:max(1, int(np.ceil(test_size * n)))]] = True
    return mask


@dataclass(frozen=True)
class SitePartitions:
    """A site's fixed partitions of one dataset's rows, drawn from the site's secret.

    The rows of the whole table are dealt, in an order only the site knows,
    into ``count`` partitions of nearly equal size, each of at least
    ``min_rows`` rows; a row keeps its partition whatever row steps come
    before a held-out part is drawn. Any two held-out parts then differ by
    whole partitions of at least ``min_rows`` rows each (the differencing attack
    of issue 27 needs single rows); what other row steps select is judged across
    requests by the site's row-set record (:mod:`skfed.sites.rowsets`).

    Parameters
    ----------
    of_row : ndarray of int, shape (n_table_rows,) or None
        The partition of each row of the whole table (``None``: too few rows
        to hold out any part).
    count : int
    min_rows : int
        The site's ``min_rows``: the fewest rows of a part and of its rest.
    """

    of_row: object
    count: int
    min_rows: int

    #: partitions at the most (a held-out share is a multiple of 1 / count)
    MOST = 10

    @classmethod
    def draw(cls, secret, n_rows, min_rows):
        """Partitions of ``n_rows`` rows from the site's ``secret`` (bytes)."""
        count = min(cls.MOST, n_rows // max(1, int(min_rows)))
        if count < 2:
            return cls(None, 0, int(min_rows))
        order = np.random.default_rng(int.from_bytes(secret, "big")).permutation(n_rows)
        of_row = np.empty(n_rows, dtype=np.intp)
        of_row[order] = np.arange(n_rows) * count // n_rows
        return cls(of_row, count, int(min_rows))

    def mask(self, site, test_size, rng):
        """The held-out rows: ``round(test_size * count)`` whole partitions (at least
        one, at most all but one) that ``rng`` picks; refused where the part, its
        rest or a partition the rows touch holds fewer than ``min_rows`` rows."""
        if self.of_row is None:
            raise SiteError(site.site, f"too few rows to hold out a part of at least "
                                       f"{self.min_rows} rows and keep as many (the site's "
                                       "min_rows)")
        part = self.of_row[site.meta["row_ids"]]
        taken = int(np.clip(round(test_size * self.count), 1, self.count - 1))
        mask = np.isin(part, rng.permutation(self.count)[:taken])
        sizes = np.bincount(part, minlength=self.count)
        if min(mask.sum(), (~mask).sum()) < self.min_rows or np.any(
                (sizes > 0) & (sizes < self.min_rows)):
            raise SiteError(site.site, f"after the row steps, a held-out part, its rest or "
                                       f"one of the site's partitions would hold fewer than "
                                       f"{self.min_rows} rows (the site's min_rows)")
        return mask


def site_rows(site, mask):
    """The site's rows where ``mask`` is true (their original row numbers kept along)."""
    take = (lambda m: site.X.iloc[m]) if hasattr(site.X, "iloc") else (lambda m: site.X[m])
    meta = dict(site.meta)
    for key in ("row_ids", "supports"):  # per-row facts follow their rows
        if key in meta:
            meta[key] = np.asarray(meta[key])[mask]
    return site.replace(X=take(mask), y=None if site.y is None else site.y[mask],
                        sample_weight=None if site.sample_weight is None
                        else site.sample_weight[mask], meta=meta,
                        offset=None if site.offset is None else np.asarray(site.offset)[mask])


def holdout_rows(site, test_size, seed, held_out, *, min_rows=2):
    """The site's training rows (``held_out=False``) or held-out rows (``True``)."""
    mask = held_out_mask(site, test_size, seed, min_rows=min_rows)
    return site_rows(site, mask if held_out else ~mask)


def weighted_rows(site, args):
    """A reply's class when its only sums are weight sums: counts, or sums where the
    rows carry a weight column (one the site's dataset declares)."""
    return SUMS if site.sample_weight is not None else COUNTS


def _summary_reply(site, values, out, rules):
    """No class of the target held by fewer than ``min_level_count`` rows here."""
    counts = out.get("class_counts")
    if counts is not None and np.min(counts) < rules.min_level_count:
        raise Refused("min_level_count", "a class of the target has fewer than "
                                         f"{rules.min_level_count} rows here")
    return out


def combine_summaries(replies):
    """The summaries of parts of a site's rows (partitions on an engine) as one: counts
    and weight sums added, the classes' union with their counts, a survival target's
    strata's union with their rows and events."""
    first = replies[0]
    if any(set(r) != set(first) for r in replies):
        raise Refused("engine", "the partitions' summaries differ in form", public=True)
    out = dict(first, n_samples=sum(r["n_samples"] for r in replies),
               weight_sum=tree_combine("sum", [r["weight_sum"] for r in replies]))
    for key in ("n_features", "y_ndim", "n_targets"):
        if key in first and any(r[key] != first[key] for r in replies):
            raise SiteError(first.get("site", "?"), f"the partitions differ in {key}")
    if "classes" in first:
        labels = np.unique(np.concatenate([r["classes"] for r in replies]))
        counts = np.zeros(len(labels), dtype=np.int64)
        sums = [np.zeros(len(labels)) for _ in replies]
        for r, s in zip(replies, sums):
            where = np.searchsorted(labels, r["classes"])
            counts[where] += r["class_counts"]
            s[where] = r["class_weight_sums"]
        out.update(classes=labels, class_counts=counts,
                   class_weight_sums=tree_combine("sum", sums))
    if "n_events" in first:
        out.update(_survival_counts(replies))
    return out


def _survival_counts(replies):
    levels = np.unique(np.concatenate([r["strata"] for r in replies]))
    rows, events = np.zeros(len(levels), dtype=np.int64), np.zeros(len(levels))
    for r in replies:
        where = np.searchsorted(levels, r["strata"])
        rows[where] += r["stratum_rows"]
        events[where] += r["stratum_events"]
    return {"n_events": sum(r["n_events"] for r in replies), "strata": levels,
            "stratum_rows": rows, "stratum_events": events}


@site_operation(
    "data.summary", releases=weighted_rows,
    describes="row count and feature count; for a classifier the classes held, with "
              "counts (each >= min_level_count); with a declared weight column, the sums "
              "of the weights (over all rows and per class), under the dominance rule",
    arguments=(Arg("task", "choice", choices=("none", "regression", "classification",
                                              "survival")),),
    reply=_summary_reply, combine=combine_summaries)
def site_summary(site, task):
    """What a site tells the server before round one.

    Row count, weight sum and number of features; for a classifier the
    labels it holds with their counts (needed for ``classes_`` and
    ``class_weight="balanced"``); for a regressor the number of targets.
    Checks the site's rows on the way (an error names the site).
    """
    X = numeric_matrix(site)
    n = X.shape[0]
    if n == 0:
        raise SiteError(site.site, "no rows.")
    sw = site.weights()
    if sw.shape != (n,):
        raise SiteError(site.site, f"{n} rows but {sw.shape[0]} sample weights.")
    if not np.all(np.isfinite(sw)) or np.any(sw < 0):
        raise SiteError(site.site, "sample weights must be finite and non-negative.")
    if site.sample_weight is not None:
        dominance.check_rows(sw, "the weight sum")
    out = {"n_samples": n, "weight_sum": float(sw.sum()), "n_features": X.shape[1]}
    if site.offset is not None:
        offset = np.asarray(site.offset)
        if offset.shape != (n,):
            raise SiteError(site.site, f"{n} rows but an offset of shape {offset.shape}; "
                                       "give one offset per row (e.g. log exposure).")
        if offset.dtype.kind not in "biuf" or not np.all(np.isfinite(offset)):
            raise SiteError(site.site, "the offset contains NaN, infinity or non-numbers; "
                                       "an offset is log(exposure) with exposure > 0.")
    if task == "none":
        return out
    if site.y is None:
        raise SiteError(site.site, "no target (y).")
    y = np.asarray(site.y)
    if y.shape[0] != n:
        raise SiteError(site.site, f"{n} rows but {y.shape[0]} targets.")
    if task == "survival":
        out.update(survival_summary(site.site, y, sw))
        return out
    if task == "classification":
        if y.ndim != 1:
            raise SiteError(site.site, f"class labels must be 1-D; got shape {y.shape}.")
        if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
            raise SiteError(site.site, "the target contains NaN or infinity.")
        labels, index, counts = np.unique(y, return_inverse=True, return_counts=True)
        if site.sample_weight is not None:
            dominance.check_rows(np.eye(len(labels))[index.ravel()] * sw[:, None],
                                 "a class's weight sum")
        out.update(classes=labels, class_counts=counts,
                   class_weight_sums=np.bincount(index.ravel(), weights=sw,
                                                 minlength=len(labels)))
    else:
        try:
            yf = y.astype(np.float64)
        except (TypeError, ValueError):
            raise SiteError(site.site, f"the target is not numeric (dtype {y.dtype}).") from None
        if not np.all(np.isfinite(yf)):
            raise SiteError(site.site, "the target contains NaN or infinity.")
        out.update(y_ndim=y.ndim, n_targets=1 if y.ndim == 1 else y.shape[1])
    return out


def survival_array(y):
    """A survival target as floats of shape ``(n, 2 or 3)``: event, time[, stratum code].

    A structured array (scikit-survival's ``Surv``: event field first, then
    time) is unpacked; a plain array is taken as its columns."""
    y = np.asarray(y)
    if y.dtype.names is not None:
        return np.column_stack([np.asarray(y[name], dtype=np.float64)
                                for name in y.dtype.names])
    return np.asarray(y, dtype=np.float64).reshape(len(y), -1)


def survival_summary(site, y, sw):
    """A survival target's checks at a site, and its counts per stratum.

    ``y`` holds (event, time[, stratum code]) per row. Returns ``n_events``,
    the stratum codes present and each one's numbers of rows and events
    (counts only; the server refuses a stratum of one row and, when each site
    is its own stratum, a site without events)."""
    try:
        y = survival_array(y)
    except (TypeError, ValueError):
        raise SiteError(site, "the survival target is not numeric (event, time).") from None
    if y.shape[1] not in (2, 3):
        raise SiteError(site, f"a survival target has two columns (event, time); got "
                              f"{y.shape[1]}.")
    event, time = y[:, 0], y[:, 1]
    if np.isnan(time).any():
        raise SiteError(site, f"{int(np.isnan(time).sum())} missing time(s); drop those rows "
                              "or impute them before fitting.")
    if not np.all(np.isfinite(time)) or np.any(time < 0):
        raise SiteError(site, f"{int(np.sum(~np.isfinite(time) | (time < 0)))} negative or "
                              "infinite time(s): follow-up times are durations >= 0.")
    if not np.all(np.isin(event, (0.0, 1.0))):
        bad = sorted(set(np.unique(event[~np.isin(event, (0.0, 1.0))]).tolist()))[:3]
        raise SiteError(site, f"the event indicator must be 0/1 (or False/True); it has "
                              f"{show(bad)}.")
    codes = y[:, 2] if y.shape[1] > 2 else np.zeros(len(y))
    levels, index = np.unique(codes, return_inverse=True)
    return {"n_events": int(np.sum(event > 0)), "strata": levels,
            "stratum_rows": np.bincount(index, minlength=levels.size),
            "stratum_events": np.bincount(index, weights=event > 0, minlength=levels.size)}


@wire_class(role="targets")
@dataclass(frozen=True)
class Targets:
    """How a site encodes its target for the loss (sent to the sites once).

    ``kind``: ``"continuous"`` (float columns), ``"binary"`` (+-1 for
    ``classes[1]``), ``"onehot"`` (0/1 per class) or ``"ovr"`` (+-1 per class).
    ``class_weight`` (one per class) multiplies the sample weights.
    """

    kind: str = "continuous"
    classes: object = None
    class_weight: object = None
    #: ``kind="survival"``: cut points of a coarsened time axis (each time becomes
    #: the index of its interval ``(c_{k-1}, c_k]``), or ``None`` (exact times)
    time_grid: object = None

    def encode(self, y, sw):
        y = np.asarray(y)
        if self.kind == "survival":  # (event, time[, stratum]) -> time, event, stratum
            y = survival_array(y)
            time = y[:, 1]
            if self.time_grid is not None:
                time = np.searchsorted(np.asarray(self.time_grid, dtype=float), time,
                                       side="left").astype(np.float64)
            stratum = y[:, 2] if y.shape[1] > 2 else np.zeros(len(y))
            return np.column_stack([time, y[:, 0], stratum]), sw
        if self.kind == "continuous":
            Y = y.astype(np.float64)
            return (Y.reshape(-1, 1) if Y.ndim == 1 else Y), sw
        index = np.searchsorted(self.classes, y)
        if self.class_weight is not None:
            sw = sw * np.asarray(self.class_weight)[index]
        if self.kind == "binary":
            return np.where(index == 1, 1.0, -1.0)[:, None], sw
        onehot = np.eye(len(self.classes))[index]
        return (onehot if self.kind == "onehot" else np.where(onehot > 0, 1.0, -1.0)), sw


def _fit_rules(site, values, rules):
    """The policy's fit rules: the loss allowed, and no more parameters than
    ``max_parameters_per_row`` per row (a saturated model's moments reveal rows)."""
    datafit, layout = values["datafit"], values["layout"]
    if rules.losses is not None and type(datafit).__name__ not in rules.losses:
        raise Refused("losses", f"models with the {type(datafit).__name__} loss are not "
                                "allowed at this site", public=True)
    n = int(site.meta["n_positive"]) if "n_positive" in site.meta else int(
        np.count_nonzero(site.weights() > 0))  # rows on an engine: counted there
    size = int(getattr(layout, "size", 0))
    if size > rules.max_parameters_per_row * n:
        raise Refused("max_parameters_per_row", f"a model of {size} parameters on {n} rows")


@site_operation(
    "fit.open", releases=NOTHING, opens="fit", reads_design=True,
    describes="nothing (the site builds its client objective and keeps it in a session "
              "only its analyst can use)",
    arguments=(Arg("datafit", "object", role="datafit"), Arg("layout", "object", role="layout"),
               Arg("targets", "object", role="targets")),
    checks=(_fit_rules,))
def client_objective(site, datafit, layout, targets):
    """The site's :class:`~skfed.datafits.ClientObjective` (built and kept at the site)."""
    from ..datafits import ClientObjective

    X = numeric_matrix(site)
    Y, sw = targets.encode(site.y, site.weights())
    offset = None if site.offset is None else np.asarray(site.offset, dtype=np.float64)
    objective = ClientObjective(datafit, X, Y, sw, layout, offset=offset)
    objective.weighted_rows = site.sample_weight is not None  # its weight sums are sums
    return objective


def site_predictions(site, estimator, method):
    """``estimator.<method>(X)`` on the site's rows (the rows stay at the site), with
    the site's offsets when it has some and the method takes them (GLMs)."""
    return _call(site, estimator, method)


def _call(site, estimator, method):
    fn = getattr(estimator, method)
    if site.offset is not None and "offset" in inspect.signature(fn).parameters:
        return fn(_feature_input(site, estimator), offset=np.asarray(site.offset, dtype=float))
    return fn(_feature_input(site, estimator))


def _feature_input(site, estimator):
    """Checked features; a table keeps its column names (the estimator checks them).
    A pipeline gets the site's rows as they are (its first steps encode them)."""
    if hasattr(estimator, "steps"):
        return site.X
    if get_tags(estimator).input_tags.allow_nan:  # its own missing-value rule
        return site.X
    X = numeric_matrix(site)
    return site.X if hasattr(site.X, "columns") else X


def model_message(estimator):
    """A fitted linear estimator's arrays, as ``evaluate.score`` takes them at a site
    service (never a Pipeline: its steps would run custom code at the site)."""
    classes = getattr(estimator, "classes_", None)
    if classes is not None and np.asarray(classes).dtype.kind == "O":
        classes = np.asarray(classes).astype(str)
    if hasattr(estimator, "steps") or not hasattr(estimator, "coef_"):
        raise ValueError(f"a site service scores linear models only, not a "
                         f"{type(estimator).__name__} (a Pipeline's steps would run custom "
                         "code at the site).")
    message = {"coef": np.asarray(estimator.coef_, dtype=np.float64),
               "intercept": np.asarray(estimator.intercept_, dtype=np.float64),
               "classes": None if classes is None else np.asarray(classes)}
    if classes is None and hasattr(estimator, "_inference_family"):
        # a GLM's predictions are its link's inverse of the linear predictor, with the
        # site's own offsets: the site needs the family to score them
        message["family"] = estimator._inference_family()
    return message


#: the most coefficients a scored model may carry
MAX_MODEL = 1 << 20


def _model_problem(model):
    """The form of a scored model's message (its arrays and, for a GLM, its family)."""
    if not isinstance(model, dict) or not set(model) <= {"coef", "intercept", "classes",
                                                         "family"}:
        return "a model is {coef, intercept, classes[, family]}"
    for key in ("coef", "intercept"):
        value = model.get(key)
        if not (isinstance(value, np.ndarray) and value.dtype.kind == "f" and
                value.size <= MAX_MODEL and np.all(np.isfinite(value))):
            return f"the model's {key} is a finite float array"
    classes = model.get("classes")
    if classes is not None and not (isinstance(classes, np.ndarray) and
                                    classes.dtype.kind in "biuUS" and classes.size <= 4096):
        return "the model's classes are an array of labels"
    if model.get("family") is not None and role_of(model["family"]) != "family":
        return "a GLM's family is one of skfed's"
    return None


def _model_from_message(model):
    return (_GLMModel if model.get("family") is not None else _LinearModel)(model)


class _LinearModel:
    """A linear model's arrays, rebuilt at the site for an aggregate score: its
    predictions stay at the site, only the score's sums leave."""

    def __init__(self, model):
        self.coef_ = model["coef"]
        self.intercept_ = model["intercept"]
        self.classes_ = model.get("classes")

    def __sklearn_tags__(self):
        from sklearn.utils import Tags, TargetTags

        kind = "regressor" if self.classes_ is None else "classifier"
        return Tags(estimator_type=kind, target_tags=TargetTags(required=True))

    def predict(self, X):
        X = numeric_matrix(SiteData(None, X))
        scores = X @ np.atleast_2d(self.coef_).T + self.intercept_
        if self.classes_ is None:
            return scores.ravel() if np.ndim(self.coef_) == 1 else scores
        if scores.shape[1] == 1:
            return self.classes_[(scores[:, 0] > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]


class _GLMModel(_LinearModel):
    """A GLM's arrays and family, rebuilt at the site for its score and deviance."""

    def __init__(self, model):
        super().__init__(model)
        self.family_ = model["family"]

    def _inference_family(self):
        return self.family_

    def predict(self, X, offset=None):
        eta = numeric_matrix(SiteData(None, X)) @ self.coef_.ravel() + float(
            np.ravel(self.intercept_)[0])
        if offset is not None:
            eta = eta + offset
        return inverse_link(self.family_.link, eta)


@site_operation(
    "evaluate.score", releases=SUMS, combine="sum",
    describes="four weighted sums per target (regression) or two (classification), "
              "under the dominance rule: never a prediction",
    arguments=(Arg("model", "value", check=_model_problem, convert=_model_from_message),),
    packer=lambda estimator: {"model": model_message(estimator)})
def site_score_terms(site, estimator):
    """Weighted sums from which the pooled score (R2 or accuracy) is assembled.

    A regressor returns ``sum w``, ``sum w y``, ``sum w y^2`` and
    ``sum w (y - y_hat)^2`` per target; a classifier ``sum w`` and
    ``sum w [y == y_hat]``. Four numbers per target, never a row.
    """
    sw = site.weights()
    pred = _call(site, estimator, "predict")
    y = np.asarray(site.y)
    if is_classifier(estimator):
        correct = sw * (pred == y)
        dominance.check_rows(np.column_stack([sw, correct]), "a score")
        return {"kind": "accuracy", "w": float(sw.sum()), "correct": float(sw @ (pred == y))}
    y2 = y.reshape(len(y), -1).astype(np.float64)
    p2 = np.asarray(pred).reshape(len(y), -1)
    dominance.check_rows(np.column_stack([sw, sw[:, None] * y2, sw[:, None] * y2 * y2,
                                          sw[:, None] * (y2 - p2) ** 2]), "a score")
    return {"kind": "r2", "w": float(sw.sum()), "wy": sw @ y2, "wy2": sw @ (y2 * y2),
            "res": sw @ ((y2 - p2) ** 2)}


def combine_scores(terms):
    """The pooled score from the sites' :func:`site_score_terms` (the same number
    ``estimator.score`` gives on the pooled rows, with sample weights)."""
    if terms[0].get("kind", "accuracy" if "correct" in terms[0] else "r2") == "accuracy":
        return sum(t["correct"] for t in terms) / sum(t["w"] for t in terms)
    w = sum(t["w"] for t in terms)
    wy = sum(t["wy"] for t in terms)
    total = sum(t["wy2"] for t in terms) - wy * wy / w
    res = sum(t["res"] for t in terms)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(total > 0, 1.0 - res / np.where(total > 0, total, 1.0),
                      np.where(res > 0, 0.0, 1.0))
    return float(np.mean(r2))


def site_score(terms):
    """One site's own score from its terms."""
    return combine_scores([terms])
