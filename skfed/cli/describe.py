"""``skfed describe``: the descriptive Table 1 (and cross-tables) of several sites' rows.

Reads one CSV with a column naming each row's site (``--clients``), or
reaches the sites' own services (``--site-service NAME=HOST:PORT ...
--dataset NAME``), and runs :func:`skfed.stats.describe` and
:func:`skfed.stats.crosstab`: every site hides its counts below
``--min-count`` (a site service: its own ``min_level_count`` when larger) and
their complementary cells, and the pooled table adds only what the sites
released. The table is printed as text (pooled, by group; per site with
``--per-site``), suppressed cells shown as ``<5`` (a count below the
threshold) or ``suppressed`` (a complementary cell, a pooled cell lacking a
site's part), each with a numbered footnote saying why. ``--html`` writes a
self-contained report, ``--json`` every number.
"""

import json
import math
from dataclasses import dataclass, field

import numpy as np

from .._messages import count
from .errors import CLIError
from .missing_values import add_missing_value_options, check_local_only, missing_tokens
from .table1 import Footnotes, chi2_text, comparison_text, crosstab_grid, grid, \
    header_rows, rule_text

#: the quantiles of a local Table 1 (median and quartiles)
DEFAULT_QUANTILES = (0.25, 0.5, 0.75)
#: a text column with more distinct values than this is not described unless named
MAX_LEVELS = 50


@dataclass
class Table1:
    """What ``skfed describe`` computed, for the text, HTML and JSON outputs.

    Attributes
    ----------
    result : skfed.stats.DescribeResult
    crosstabs : list of (str, str, skfed.stats.CrosstabResult)
    sites : list of str
    rows : list of int
        Each site's row count.
    min_count : int
    by : str or None
    per_site : bool
    source : str
        Where the rows are (the file, or the site services and dataset).
    notes : list of str
    secure : bool
        The pooled cells are masked sums (by default over two sites or more).
    """

    result: object
    crosstabs: list
    sites: list
    rows: list
    min_count: int
    by: str = None
    per_site: bool = False
    source: str = ""
    notes: list = field(default_factory=list)
    secure: bool = False


# -- reading the input ---------------------------------------------------------------
def _names(values, option):
    """``--columns a,b c``: the names, commas or spaces between them."""
    out = [v.strip() for value in values or () for v in value.split(",")]
    if any(not v for v in out):
        raise CLIError(f"{option} has an empty column name.")
    return out


def read_frame(path, clients, categorical=(), missing=None):
    """The rows of a CSV file as a DataFrame and each row's site.

    A column is numeric when every value that is not missing reads as a
    finite number and it is not in ``categorical``; otherwise its values are
    text (a category). Missing values: the ``missing`` tokens (default:
    pandas.read_csv's, :mod:`skfed.cli.missing_values`).
    """
    import pandas as pd

    from .fit import read_csv_files
    from .inputs import is_missing

    table = read_csv_files([path], missing=missing)
    if not clients:
        raise CLIError("say which column names each row's site: --clients COLUMN.")
    _check_names(table.columns, [clients], "--clients")
    _check_names(table.columns, categorical, "--categorical")
    k = table.columns.index(clients)
    sites = np.array([row[k] for row in table.rows], dtype=object)
    empty = [i for i, s in enumerate(sites) if is_missing(s)]
    if empty:
        raise CLIError(f"--clients column {clients!r} has no site in "
                       f"{count(len(empty), 'row')} (the first in "
                       "{} line {})".format(*table.origin[empty[0]]) + ".")
    data = {}
    for j, name in enumerate(table.columns):
        if j == k:
            continue
        cells = [row[j] for row in table.rows]
        values = [None if is_missing(c) else c for c in cells]
        if name not in categorical:
            numbers = [_float(v) for v in values if v is not None]
            if numbers and all(x is not None for x in numbers):
                bad = [i for i, v in enumerate(values) if v is not None
                       and not math.isfinite(float(v))]
                if bad:
                    raise CLIError(f"column {name!r} has a non-finite value {cells[bad[0]]!r} "
                                   "in {} line {}".format(*table.origin[bad[0]])
                                   + "; fix or blank it.")
                data[name] = np.array([np.nan if v is None else float(v) for v in values])
                continue
        data[name] = pd.Series(values, dtype=object)
    return pd.DataFrame(data), sites


def _float(text):
    try:
        return float(text)
    except ValueError:
        return None


def _check_names(columns, names, option):
    for name in names:
        if name not in columns:
            raise CLIError(f"{option} {name!r}: no such column; the columns are: "
                           + ", ".join(map(str, columns)) + ".")


def _crosstab_pairs(specs, columns):
    pairs = []
    for spec in specs or ():
        row, sep, col = spec.partition(":")
        if not sep or not row.strip() or not col.strip():
            raise CLIError(f"--crosstab takes ROW:COLUMN (two column names); got {spec!r}.")
        row, col = row.strip(), col.strip()
        _check_names(columns, [row, col], "--crosstab")
        if row == col:
            raise CLIError(f"--crosstab {spec!r} names the same column twice.")
        pairs.append((row, col))
    return pairs


def _quantiles(text, default):
    if text is None:
        return default
    if text.strip().lower() == "none":
        return ()
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise CLIError(f"--quantiles takes numbers in [0, 1] separated by commas, or "
                       f"'none'; got {text!r}.") from None
    if not values or any(not 0 <= q <= 1 for q in values):
        raise CLIError(f"--quantiles takes numbers in [0, 1] separated by commas, or "
                       f"'none'; got {text!r}.")
    return values


# -- running -----------------------------------------------------------------------
def run_describe(args, out=None):
    """``skfed describe``: prints Table 1, writes ``--html`` and ``--json``; returns the
    :class:`Table1`."""
    import sys

    out = sys.stdout if out is None else out
    if args.min_count < 1:
        raise CLIError(f"--min-count must be at least 1; got {args.min_count}.")
    check_local_only(args, "skfed describe")
    if args.site_service:
        report = _describe_services(args)
    else:
        report = _describe_file(args)
    print(format_table1(report), end="", file=out)
    if args.html:
        from .html_report import write_table1_html

        write_table1_html(report, args.html)
        print(f"HTML report written to {args.html}", file=out)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(table1_json(report), fh, indent=1)
        print(f"JSON written to {args.json}", file=out)
    _export(report, args, out)
    return report


def _export(report, args, out):
    """``--csv``, ``--latex``, ``--docx``: Table 1 as laid out for a journal."""
    result = report.result
    for path, write, what in ((args.csv, result.to_csv, "CSV"),
                              (args.latex, result.to_latex, "LaTeX"),
                              (args.docx, result.to_docx, "Word")):
        if not path:
            continue
        try:
            write(path, per_site=report.per_site)
        except ImportError as exc:
            raise CLIError(str(exc)) from exc
        print(f"{what} table written to {path}", file=out)


def _choose_columns(args, available, frame=None):
    columns = _names(args.columns, "--columns")
    by = args.by
    _check_names(available, columns + ([by] if by else []),
                 "--columns" if not by or by in available else "--by")
    if by and by in columns:
        raise CLIError(f"--by {by!r} is also in --columns: a column is not described by "
                       "itself.")
    if not columns:
        columns = [c for c in available if c != by]
        if frame is not None:  # an identifier or free text: only when asked for
            wide = [c for c in columns if frame[c].dtype == object
                    and frame[c].nunique() > MAX_LEVELS and c not in (args.categorical or ())]
            if wide:
                raise CLIError(
                    f"text column(s) {', '.join(map(repr, wide))} have more than {MAX_LEVELS} "
                    "distinct values (identifiers or free text?): choose the columns to "
                    "describe with --columns.")
            columns = [c for c in columns if c not in wide]
    if not columns:
        raise CLIError("no columns to describe besides the site column and --by.")
    return columns, by


def _describe_file(args):
    from ..data import FederatedDataset

    if not args.data:
        raise CLIError("give a CSV file with every site's rows (and --clients COLUMN), or "
                       "--site-service NAME=HOST:PORT ... with --dataset NAME.")
    if args.dataset or args.tls_ca_file or args.tls_cert or args.tls_key:
        raise CLIError("--dataset and --tls-* go with --site-service, not with a local file.")
    categorical = _names(args.categorical, "--categorical")
    frame, sites = read_frame(args.data, args.clients, categorical, missing_tokens(args))
    args.categorical = categorical
    columns, by = _choose_columns(args, list(frame.columns), frame)
    pairs = _crosstab_pairs(args.crosstab, list(frame.columns))
    quantiles = _quantiles(args.quantiles, DEFAULT_QUANTILES)
    try:
        data = FederatedDataset.from_arrays(frame, clients=sites)
        result, tables = _tables(args, data, columns, by, pairs, quantiles)
    except (ValueError, ImportError) as exc:
        raise CLIError(str(exc)) from exc
    return Table1(result, tables, list(data.sites), [int(n) for n in data.n_samples],
                  args.min_count, by, args.per_site, source=str(args.data),
                  secure=result.masked)


def _tables(args, data, columns, by, pairs, quantiles):
    """Table 1 and the cross-tables of ``data``: pooled (per site with ``--per-site``),
    from masked sums with ``--secure-aggregation``."""
    from ..stats import crosstab, describe

    privacy = "auto"  # masked pooled cells over two sites or more (skfed.stats.describe)
    if args.no_secure_aggregation:
        if args.secure_aggregation:
            raise CLIError("--secure-aggregation and --no-secure-aggregation: give one.")
        privacy = None
    if args.secure_aggregation:
        from ..privacy import SecureAggregation

        privacy = SecureAggregation()
    options = dict(min_level_count=args.min_count, per_site=args.per_site, privacy=privacy)
    result = describe(data, by=by, columns=columns, quantiles=quantiles,
                      labels=_labels(args, columns, by), **options,
                      categorical=[c for c in args.categorical or () if c in columns])
    return result, [(r, c, crosstab(data, r, c, **options)) for r, c in pairs]


def _labels(args, columns, by):
    """``--label COLUMN="Text"``: the names a report shows (with units)."""
    labels = {}
    for spec in args.label or ():
        name, sep, text = spec.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise CLIError(f'--label takes COLUMN="Label (unit)"; got {spec!r}.')
        _check_names(columns + ([by] if by else []), [name.strip()], "--label")
        labels[name.strip()] = text.strip()
    return labels


def _describe_services(args):
    from ..data import FederatedDataset
    from ..sites import SiteRefusal, SiteServiceError, SiteUnavailable

    sites = check_service_options(args)
    args.categorical = _names(args.categorical, "--categorical")
    quantiles = _quantiles(args.quantiles, ())
    notes = [] if args.quantiles else [
        "no quantiles: the pooled quantiles need each site's allow_exact_quantiles (they "
        "release single rows' values); ask with --quantiles 0.25,0.5,0.75"]
    failures = (ValueError, OSError, SiteRefusal, SiteServiceError, SiteUnavailable)
    try:
        data = FederatedDataset.from_sites(sites, dataset=args.dataset,
                                           ca_file=args.tls_ca_file, cert_file=args.tls_cert,
                                           key_file=args.tls_key)
    except failures as exc:
        raise CLIError(str(exc)) from exc
    try:
        available = [str(c) for c in data.columns or ()]
        _check_names(available, args.categorical, "--categorical")
        columns, by = _choose_columns(args, available)
        pairs = _crosstab_pairs(args.crosstab, available)
        result, tables = _tables(args, data, columns, by, pairs, quantiles)
        return Table1(result, tables, list(data.sites), [int(n) for n in data.n_samples],
                      args.min_count, by, args.per_site,
                      source=f"dataset {args.dataset!r} of the site services "
                             + ", ".join(f"{k}={v}" for k, v in sites.items()),
                      notes=notes, secure=result.masked)
    except failures + (ImportError,) as exc:
        raise CLIError(str(exc)) from exc
    finally:
        data.close()


def check_service_options(args):
    """The sites of ``--site-service NAME=HOST:PORT ...``, after the options that go
    with it (``--dataset``, the analyst's TLS files; no local file, no ``--clients``)."""
    sites = parse_services(args.site_service)
    if args.data or args.clients:
        raise CLIError("--site-service reaches the sites' own services: give no local file "
                       "or --clients with it.")
    if not args.dataset:
        raise CLIError("--site-service needs --dataset NAME (the dataset's name in the "
                       "sites' configurations).")
    if not all([args.tls_ca_file, args.tls_cert, args.tls_key]):
        raise CLIError("site services need --tls-ca-file, --tls-cert and --tls-key (mutual "
                       "TLS with the analyst's certificate).")
    return sites


def parse_services(specs):
    """``["a=host:50051", ...]`` -> ``{"a": "host:50051", ...}`` with clear errors."""
    sites = {}
    for spec in specs:
        name, sep, address = (part.strip() for part in spec.partition("="))
        if not sep or not name or ":" not in address:
            raise CLIError(f"--site-service takes NAME=HOST:PORT (the site's name and its "
                           f"service's address); got {spec!r}.")
        if name in sites:
            raise CLIError(f"--site-service {name} is given twice.")
        sites[name] = address
    return sites


# -- text ----------------------------------------------------------------------------
def _cell_text(cell):
    text, note = cell
    return text if note is None else f"{text} [{note}]"


def _render(header_lines, rows):
    """Left-aligned labels, right-aligned cells."""
    width = [max(len(r[0]) for r in rows + header_lines)]
    n = len(rows[0][1])
    for j in range(n):
        width.append(max(len(r[1][j]) for r in rows + header_lines))
    out = []
    for label, cells in header_lines + rows:
        out.append("  ".join([label.ljust(width[0])]
                             + [c.rjust(w) for c, w in zip(cells, width[1:])]).rstrip())
    return out


def format_table1(report):
    """The text output of ``skfed describe``."""
    headers, rows, reasons = grid(report)
    lines = [f"skfed describe: {report.source}",
             f"{len(report.sites)} sites: " + ", ".join(
                 f"{s} ({count(n, 'row')})" for s, n in zip(report.sites, report.rows)), ""]
    header_lines = [(f"by {report.by}:" if report.by and k == 0 else "", texts)
                    for k, texts in enumerate(header_rows(report, headers))]
    body = [("  " * depth + label, [_cell_text(c) for c in cells])
            for label, depth, cells in rows]
    lines += ["Table 1" + ("" if report.per_site else " (pooled; --per-site for each site)")]
    lines += _render(header_lines, body)
    if report.result.comparison is not None:
        lines.append(comparison_text(report))
    notes = Footnotes()
    notes.reasons = list(reasons)
    for row, col, ct in report.crosstabs:
        lines += ["", f"Cross-table {row} x {col} (pooled counts, 'All': margins)"]
        for site in ["pooled"] + (list(report.sites) if report.per_site else []):
            hdr, cells = crosstab_grid(row, col, ct, site, notes)
            lines += [f"  {site}:"] + ["    " + line for line in _render(
                [(f"{row} \\ {col}", hdr)], [(label, [_cell_text(c) for c in cs])
                                             for label, cs in cells])]
        lines.append("  " + chi2_text(ct))
    lines += ["", rule_text(report)]
    if notes.reasons:
        lines.append("Suppressed cells:")
        lines += [f"  [{i}] {r}" for i, r in enumerate(notes.reasons, start=1)]
    else:
        lines.append("No cell is suppressed.")
    lines += [f"Note: {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


# -- JSON ----------------------------------------------------------------------------
def _plain(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    return v if isinstance(v, (str, int, bool)) or v is None else str(v)


def _comparison_json(result):
    """The group comparison's rows (``null`` without ``--by``; NaN values ``null``)."""
    if result.comparison is None:
        return None
    return [{"variable": var, **{k: _plain(v) for k, v in row.items()}}
            for var, row in result.comparison.iterrows()]


def table1_json(report):
    """Every cell of Table 1 and the cross-tables (``null``: suppressed or undefined),
    with the suppressed cells' reasons."""
    result = report.result
    cells = []
    for (var, level, stat), row in result.table.iterrows():
        for (group, site), v in row.items():
            cells.append({"variable": var, "level": _plain(level), "statistic": stat,
                          "group": _plain(group), "site": site, "value": _plain(v),
                          "suppressed": bool(result.mask.loc[(var, level, stat),
                                                             (group, site)])})
    out = {"source": report.source, "min_count": report.min_count, "by": report.by,
           "sites": dict(zip(report.sites, report.rows)), "rule": rule_text(report),
           "note": result.note, "table": cells, "comparison": _comparison_json(result),
           "suppressed": [{k: _plain(v) for k, v in r.items()}
                          for r in result.suppressed.to_dict("records")],
           "crosstabs": []}
    for row, col, ct in report.crosstabs:
        counts = [{"site": site, "row": _plain(r), "col": _plain(c), "value": _plain(v)}
                  for (site, r), values in ct.by_site.iterrows() for c, v in values.items()]
        out["crosstabs"].append({
            "row": row, "col": col, "counts": counts, "chi2": _plain(ct.chi2),
            "p_value": _plain(ct.p_value), "dof": int(ct.dof),
            "n_missing": _plain(ct.n_missing), "note": ct.note,
            "suppressed": [{k: _plain(v) for k, v in r.items()}
                           for r in ct.suppressed.to_dict("records")]})
    return out


# -- the command line ----------------------------------------------------------------
def add_describe_parser(sub):
    d = sub.add_parser(
        "describe", help="the descriptive Table 1 of several sites' rows, small cells "
                         "suppressed",
        description="Table 1 (counts, missing values, mean and SD, median and quartiles; "
                    "categories with n and %) pooled over the sites, by group with --by, "
                    "per site with --per-site; cross-tables with Pearson's chi-square. Each "
                    "site blanks its counts below --min-count and the cells that would give "
                    "them back; the pooled table adds only what the sites released.")
    d.add_argument("data", nargs="?", help="CSV file with every site's rows and a site column")
    d.add_argument("--clients", metavar="COLUMN", help="the column naming each row's site")
    d.add_argument("--by", metavar="COLUMN", help="a categorical column: the table per level")
    d.add_argument("--columns", nargs="+", metavar="COLUMN",
                   help="the columns to describe (commas or spaces between them; default: "
                        "every column but the site column and --by)")
    d.add_argument("--categorical", nargs="+", metavar="COLUMN",
                   help="numeric columns to describe as categories (codes such as 0/1, a "
                        "binary one on one n (%%) row); text columns always are")
    d.add_argument("--min-count", type=int, default=5, metavar="N",
                   help="the smallest count shown (default 5)")
    d.add_argument("--quantiles", metavar="Q,Q,...",
                   help="quantiles of numeric columns (default 0.25,0.5,0.75 for a file, "
                        "none for site services, whose policy must allow exact quantiles); "
                        "'none' for none")
    d.add_argument("--crosstab", action="append", default=[], metavar="ROW:COLUMN",
                   help="a cross-table of two columns with Pearson's chi-square test "
                        "(repeat for more)")
    d.add_argument("--per-site", action="store_true",
                   help="also show each site's column (each site's own counts in the clear, "
                        "suppressed at the site, audited with the pooled column)")
    d.add_argument("--secure-aggregation", action="store_true",
                   help="insist on the pooled cells as masked sums over the sites (the "
                        "default wherever two sites or more and the cryptography package "
                        "allow it: only the pooled counts and sums decoded, small pooled "
                        "cells suppressed)")
    d.add_argument("--no-secure-aggregation", action="store_true",
                   help="pool the sites' own releases instead (each site suppresses its "
                        "small cells and their complements; a pooled cell is hidden where "
                        "a site hid its part)")
    d.add_argument("--label", action="append", default=[], metavar='COLUMN="LABEL"',
                   help='the name a column has in the table, with its unit (repeat: '
                        '--label age="Age (years)")')
    add_missing_value_options(d)
    d.add_argument("--html", metavar="HTML", help="write a self-contained HTML report")
    d.add_argument("--json", metavar="JSON", help="write every number as JSON")
    d.add_argument("--csv", metavar="CSV", help="write Table 1 as laid out, in CSV")
    d.add_argument("--latex", metavar="TEX", help="write Table 1 as a LaTeX table (booktabs)")
    d.add_argument("--docx", metavar="DOCX",
                   help="write Table 1 as a Word document (needs python-docx: skfed[word])")
    remote = d.add_argument_group("site services", "the sites' own services run every "
                                  "count under their policies (docs/data-officers.md)")
    from .remote import add_site_service_options

    add_site_service_options(remote, "a site service: the site's name and address; repeat "
                                     "for every site; with --dataset")
    return d


def recover_data_file(args):
    """``--columns a b data.csv``: argparse gives the file to the option; give it back."""
    if args.data or args.site_service:
        return
    for option in ("columns", "categorical"):
        values = getattr(args, option)
        if values and len(values) > 1 and values[-1].lower().endswith(
                (".csv", ".tsv", ".txt")):
            args.data = values.pop()
            return
