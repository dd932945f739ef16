"""Reading a site's rows at the site, and checking that the sites agree on a schema.

:func:`load_site` runs on the site's own worker: a path is opened there (a
relative path is resolved against that worker's ``SKFED_DATA_DIR``), a
callable is called there. The driver only ever sees :func:`describe` of the
result: row count, column names and dtype kinds.
"""

import os
from pathlib import Path

import numpy as np

from ..federation.operations import METADATA, Arg, row_step, site_operation
from .site import SiteData, SiteError

#: environment variable of a site's worker: the directory its relative paths live in
DATA_DIR_ENV = "SKFED_DATA_DIR"

_READERS = {".csv": "csv", ".tsv": "tsv", ".txt": "csv", ".parquet": "parquet", ".pq": "parquet"}


def resolve_path(site, path):
    """Where ``path`` is on this machine (relative paths: under ``$SKFED_DATA_DIR``)."""
    if not str(path).strip():
        raise SiteError(site, "its source path is empty.")
    p = Path(os.path.expanduser(str(path)))
    base = os.environ.get(DATA_DIR_ENV)
    if not p.is_absolute():
        if not base:
            raise SiteError(site, f"the relative path {str(path)!r} needs the site's worker "
                                  f"to set {DATA_DIR_ENV} (its data directory); give an "
                                  "absolute path or start the worker with it set.")
        p = Path(base) / p
    if base:  # a worker with a data directory reads nothing outside it ('..', links)
        root = Path(base).resolve()
        if not p.resolve().is_relative_to(root):
            raise SiteError(site, f"the path {str(path)!r} leads outside the site's data "
                                  f"directory ({DATA_DIR_ENV}); only files under it are read.")
    return p


def read_table(site, path):
    """A CSV / TSV / Parquet file as a DataFrame (read here, at the site)."""
    import pandas as pd

    p = resolve_path(site, path)
    kind = _READERS.get(p.suffix.lower())
    if kind is None:
        raise SiteError(site, f"cannot read {p.name!r}: use a .csv, .tsv or .parquet file.")
    try:
        if kind == "parquet":
            try:
                return pd.read_parquet(p)
            except ImportError:
                raise SiteError(site, "reading Parquet needs pyarrow on the site's worker: "
                                      "pip install 'skfed[parquet]'.") from None
        # round_trip: each number read as the float nearest its text (pandas' default
        # parser is off by the last bit now and then; Python's float() and the
        # analyst's own reads are not)
        return pd.read_csv(p, sep="\t" if kind == "tsv" else ",", float_precision="round_trip")
    except FileNotFoundError:
        raise SiteError(site, f"no file {str(p)!r} on the site's worker.") from None
    except PermissionError:
        raise SiteError(site, f"the site's worker may not read {str(p)!r}.") from None
    except pd.errors.EmptyDataError:
        raise SiteError(site, f"{str(p)!r} is empty (no header, no rows).") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
        raise SiteError(site, f"cannot parse {str(p)!r}: {exc}") from None


def load_site(site, source, target=None, sample_weight=None, drop=(), offset=None):
    """Load one site's rows where this function runs.

    Parameters
    ----------
    site : hashable
    source : str, path-like or callable
        A file (CSV, TSV, Parquet), or a callable returning a DataFrame, a
        tuple ``(X, y)`` / ``(X, y, sample_weight)``, or a :class:`SiteData`.
    target : str, list of str or None
        The column(s) of a table that hold the target (several: a
        multi-output target).
    sample_weight : str or None
        The column of sample weights.
    drop : sequence of str
        Columns to leave out of the features.
    offset : str or None
        Column of a table holding each row's offset (a GLM's log exposure).
    """
    if callable(source):
        try:
            obj = source()
        except SiteError:
            raise
        except Exception as exc:  # the site's own loader failed: say where
            raise SiteError(site, f"its data loader raised {type(exc).__name__}: {exc}") from None
    else:
        obj = read_table(site, source)
    if isinstance(obj, SiteData):
        return obj.replace(site=site)
    if isinstance(obj, tuple):
        if len(obj) not in (2, 3):
            raise SiteError(site, "a loader returns a DataFrame, (X, y) or (X, y, sample_weight).")
        X, y, *sw = obj
        return SiteData(site, X, None if y is None else np.asarray(y),
                        np.asarray(sw[0], dtype=float) if sw and sw[0] is not None else None)
    if not hasattr(obj, "columns"):
        raise SiteError(site, f"the loader returned a {type(obj).__name__}; expected a "
                              "DataFrame, (X, y), (X, y, sample_weight) or SiteData.")
    return split_table(site, obj, target=target, sample_weight=sample_weight, drop=drop,
                       offset=offset)


def split_table(site, table, *, target=None, sample_weight=None, drop=(), offset=None):
    """A DataFrame's feature columns, target column, weight and offset columns."""
    table = table.rename(columns=str)
    targets = list(target) if isinstance(target, (list, tuple)) else [target]
    named = [c for c in (*targets, sample_weight, offset, *drop) if c is not None]
    missing = [c for c in named if c not in table.columns]
    if missing:
        role = ("target" if missing[0] in targets else
                "sample-weight" if missing[0] == sample_weight else
                "offset" if missing[0] == offset else "drop")
        raise SiteError(site, f"no {role} column {missing[0]!r}; its columns are "
                              f"{list(table.columns)!r}.")
    # several target columns: a multi-output target (FedLowRank)
    y = (table[list(target)] if isinstance(target, (list, tuple)) else table[target]).to_numpy() \
        if target is not None else None
    sw = None
    if sample_weight is not None:
        sw = _numeric_column(site, table, sample_weight).astype(np.float64)
    off = None
    if offset is not None:
        off = _numeric_column(site, table, offset).astype(np.float64)
    X = table.drop(columns=named)
    # the target's column name: what a results table calls the response
    meta = {} if target is None else {"target_name": (
        [str(t) for t in target] if isinstance(target, (list, tuple)) else str(target))}
    return SiteData(site, X, y, sw, meta, offset=off)


def _numeric_column(site, table, name):
    values = table[name]
    if not np.issubdtype(values.dtype, np.number):
        raise SiteError(site, f"column {name!r} is not numeric (dtype {values.dtype}).")
    return values.to_numpy()


def dtype_kind(dtype):
    """``"number"``, ``"bool"`` or ``"text"`` (strings, objects, categories)."""
    try:
        kind = np.dtype(dtype).kind
    except TypeError:  # pandas extension dtypes (category, string)
        return "number" if str(dtype).lower().startswith(("int", "float", "uint")) else "text"
    return {"b": "bool", "i": "number", "u": "number", "f": "number"}.get(kind, "text")


def combine_descriptions(replies):
    """The descriptions of parts of a site's rows (partitions on an engine) as one: the
    rows added; the rest the same in every part, else the parts' difference named."""
    out = dict(replies[0], n_samples=sum(r["n_samples"] for r in replies))
    for reply in replies[1:]:
        for key, value in reply.items():
            if key != "n_samples" and value != out[key]:
                raise SiteError(out["site"], f"the dataset's partitions differ in {key} "
                                             "(a column's type, or its columns)")
    return out


@site_operation("dataset.describe", releases=METADATA, combine=combine_descriptions,
                describes="row count, column names and kinds, whether a target (and its "
                          "column's name) and weights are present")
def describe(site):
    """The metadata a site sends once: rows, columns, dtype kinds, target shape."""
    X = site.X
    cols = site.columns()
    kinds = ([dtype_kind(t) for t in X.dtypes] if cols is not None
             else [dtype_kind(getattr(X, "dtype", np.float64))] * X.shape[1])
    y = site.y
    return {"site": site.site, "n_samples": int(X.shape[0]), "n_columns": int(X.shape[1]),
            "columns": cols, "kinds": kinds,
            "has_target": y is not None, "target_name": site.meta.get("target_name"),
            "target_kind": None if y is None else dtype_kind(np.asarray(y).dtype),
            "has_weights": site.sample_weight is not None}


def check_schema(descriptions):
    """Refuse sites that disagree, before any round: one message naming site and column.

    The first site sets the reference. Columns must be the same set (their
    order may differ: the sites then reorder theirs); a column must be
    numeric everywhere or text everywhere; a target is present everywhere or
    nowhere; no site may be empty. Returns the reference column order.
    """
    ref = descriptions[0]
    for d in descriptions:
        name = repr(d["site"].item() if isinstance(d["site"], np.generic) else d["site"])
        if d["n_samples"] == 0:
            raise ValueError(f"site {name} has no rows.")
        if d["has_target"] != ref["has_target"]:
            raise ValueError(f"site {name} {'has' if d['has_target'] else 'lacks'} a target "
                             f"column, unlike site {ref['site']!r}.")
        if (d["columns"] is None) != (ref["columns"] is None):
            raise ValueError(f"site {name} gives {'a table' if d['columns'] else 'an array'}, "
                             f"site {ref['site']!r} does not: give every site the same form.")
        if d["columns"] is None:
            if d["n_columns"] != ref["n_columns"]:
                raise ValueError(f"site {name} has {d['n_columns']} features; site "
                                 f"{ref['site']!r} has {ref['n_columns']}.")
            continue
        extra = [c for c in d["columns"] if c not in ref["columns"]]
        lacking = [c for c in ref["columns"] if c not in d["columns"]]
        if extra or lacking:
            what = (f"has a column {extra[0]!r} that site {ref['site']!r} does not" if extra
                    else f"lacks the column {lacking[0]!r}")
            raise ValueError(f"site {name} {what}: every site must have the same columns.")
        ref_kind = dict(zip(ref["columns"], ref["kinds"]))
        for col, kind in zip(d["columns"], d["kinds"]):
            if {kind, ref_kind[col]} == {"number", "text"}:
                raise ValueError(
                    f"site {name}: column {col!r} is {kind} there but {ref_kind[col]} at site "
                    f"{ref['site']!r} (a text value in a numeric column?).")
    return ref["columns"]


@row_step("reorder_columns", arguments=(Arg("columns", "names", most=1 << 16),))
def reorder_columns(site, columns):
    """The site's table with ``columns`` in the reference order."""
    if site.columns() == list(columns):
        return site
    return site.replace(X=site.X[list(columns)])
