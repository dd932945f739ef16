"""``skfed km``, ``skfed mixed`` and ``skfed meta``: what the three commands share.

Each reads the rows in one of the two ways ``skfed describe`` does: one CSV
file with a column naming each row's site (``--clients``; numbers and text
read as :func:`skfed.cli.describe.read_frame` reads them, missing values as
``pandas.read_csv`` does, :mod:`skfed.cli.missing_values`), or the sites' own
services (``--site-service NAME=HOST:PORT ... --dataset NAME`` with the
analyst's TLS files), whose every answer runs under the site's rules. Each
prints a text table, writes ``--json`` (every number) and ``--report`` (one
self-contained HTML page, its figures inline as SVG and written beside it as
SVG and PDF). A problem with the input is a :class:`~skfed.cli.errors.CLIError`,
printed as ``skfed km: error: ...`` with exit code 2.
"""

import json
import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import CLIError
from .json_values import json_value

#: the commands of this module, by name: (module, its parser adder, its runner)
COMMANDS = {"km": ("km", "add_km_parser", "run_km"),
            "mixed": ("mixed", "add_mixed_parser", "run_mixed"),
            "meta": ("meta", "add_meta_parser", "run_meta"),
            "causal": ("causal", "add_causal_parser", "run_causal")}


def _command(name, attribute):
    from importlib import import_module

    return getattr(import_module(f"skfed.cli.{COMMANDS[name][0]}"), attribute)


def add_analysis_parsers(sub):
    """Add ``skfed km``, ``skfed mixed`` and ``skfed meta`` to the subcommands ``sub``."""
    for name, (_, adder, _) in COMMANDS.items():
        _command(name, adder)(sub)


def run_analysis(args, out=None):
    """Run ``args.command`` (one of :data:`COMMANDS`); returns the exit code (2: an error
    in the input, its message on stderr)."""
    from .missing_values import check_local_only

    out = sys.stdout if out is None else out
    try:
        check_local_only(args, f"skfed {args.command}")
        _command(args.command, COMMANDS[args.command][2])(args, out)
    except CLIError as exc:
        print(f"skfed {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


def library_errors():
    """The exceptions a library call raises for a problem the analyst can fix (bad input,
    a site's refusal, a site out of reach): the command turns them into its error."""
    from ..exceptions import SiteRefusal, SiteServiceError, SiteUnavailable

    return (ValueError, OSError, SiteRefusal, SiteServiceError, SiteUnavailable)


# -- the options -------------------------------------------------------------------
def add_rows_options(parser, data_help="CSV file with every site's rows and a site column"):
    """The two inputs: a CSV file with ``--clients``, or ``--site-service``."""
    from .missing_values import add_missing_value_options
    from .remote import add_site_service_options

    parser.add_argument("data", nargs="?", help=data_help)
    parser.add_argument("--clients", metavar="COLUMN", help="the column naming each row's site")
    add_missing_value_options(parser)
    remote = parser.add_argument_group(
        "site services", "the sites' own services compute every number under their "
                         "policies (docs/data-officers.md); no row leaves a site")
    add_site_service_options(remote, "a site service: the site's name and address; repeat "
                                     "for every site; with --dataset")


def add_output_options(parser):
    """``--report`` and ``--json``."""
    parser.add_argument("--report", metavar="HTML",
                        help="write a self-contained HTML page (its figures also beside it "
                             "as SVG and PDF)")
    parser.add_argument("--json", metavar="JSON", help="write every number as JSON")


def add_label_option(parser):
    parser.add_argument("--label", action="append", default=[], metavar='COLUMN="LABEL"',
                        help='the name a column has in the tables, with its unit (repeat: '
                             '--label age="Age (years)")')


# -- the rows ----------------------------------------------------------------------
@dataclass
class Rows:
    """The rows an analysis runs on.

    Attributes
    ----------
    data : skfed.FederatedDataset
        Without a target: every column in the sites' tables.
    source : str
        Where the rows are (the file, or the services and dataset), for the output.
    kinds : dict
        ``{column: "number" | "bool" | "text"}`` over the sites (text wins).
    services : bool
        The rows are at site services.
    """

    data: object
    source: str
    kinds: dict
    services: bool = False

    @property
    def columns(self):
        return list(self.kinds)


def _kinds(data):
    kinds = {}
    for description in data.metadata:
        for column, kind in zip(description["columns"], description["kinds"]):
            seen = kinds.get(str(column), kind)
            kinds[str(column)] = "text" if "text" in (seen, kind) else seen
    return kinds


@contextmanager
def open_rows(args):
    """The rows of ``args`` (a CSV file with ``--clients``, or ``--site-service``) as
    :class:`Rows`; the services' connections are closed on exit."""
    from ..data import FederatedDataset

    if args.site_service:
        data, source = _service_rows(args), (
            f"dataset {args.dataset!r} of the site services "
            + ", ".join(args.site_service))
    else:
        from .describe import read_frame
        from .missing_values import missing_tokens

        if not args.data:
            raise CLIError("give a CSV file with every site's rows (and --clients COLUMN), "
                           "or --site-service NAME=HOST:PORT ... with --dataset NAME.")
        if args.dataset or args.tls_ca_file or args.tls_cert or args.tls_key:
            raise CLIError("--dataset and --tls-* go with --site-service, not with a local "
                           "file.")
        frame, sites = read_frame(args.data, args.clients, (), missing_tokens(args))
        data, source = FederatedDataset.from_arrays(frame, clients=sites), str(args.data)
    try:
        yield Rows(data, source, _kinds(data), services=bool(args.site_service))
    finally:
        data.close()


def _service_rows(args):
    from ..data import FederatedDataset
    from .describe import check_service_options

    sites = check_service_options(args)
    try:
        return FederatedDataset.from_sites(sites,
                                           dataset=args.dataset, ca_file=args.tls_ca_file,
                                           cert_file=args.tls_cert, key_file=args.tls_key)
    except library_errors() as exc:
        raise CLIError(str(exc)) from exc


def check_column(rows, name, option, *, numeric=False):
    """``name`` is a column of the rows (and numeric when asked), else a clear error."""
    if name not in rows.kinds:
        raise CLIError(f"{option} {name!r}: no such column; the columns are: "
                       + ", ".join(rows.columns) + ".")
    if numeric and rows.kinds[name] == "text":
        raise CLIError(f"{option} {name!r} is not numeric (it holds text); give a column "
                       "of numbers.")


def parse_labels(specs, columns):
    """``--label COLUMN="Text"`` -> ``{column: text}``, each a column of the rows."""
    labels = {}
    for spec in specs or ():
        name, sep, text = (part.strip() for part in spec.partition("="))
        if not sep or not name or not text:
            raise CLIError(f'--label takes COLUMN="Label (unit)"; got {spec!r}.')
        if name not in columns:
            raise CLIError(f"--label {name!r}: no such column; the columns are: "
                           + ", ".join(columns) + ".")
        labels[name] = text
    return labels


# -- the outputs --------------------------------------------------------------------
def frame_json(frame):
    """``{row: {column: value}}`` of a DataFrame, as JSON values."""
    return json_value({str(k): dict(v) for k, v in frame.to_dict(orient="index").items()})


def table_rows_json(table):
    """``[{"row": label, column: text...}]`` of a table of text cells (a journal table),
    in its order."""
    return [{"row": str(name), **{str(c): str(v) for c, v in row.items()}}
            for name, row in table.iterrows()]


def write_outputs(args, payload, page, out):
    """``--json`` (``payload()``: the numbers) and ``--report`` (``page(path)``: the HTML
    parts after the head), each announced on ``out``."""
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(json_value(payload()), fh, indent=1)
        print(f"JSON written to {args.json}", file=out)
    if args.report:
        try:
            parts = page(args.report)
        except ImportError as exc:
            raise CLIError("--report draws figures with matplotlib: pip install "
                           "'skfed[plot]'.") from exc
        with open(args.report, "w", encoding="utf-8") as fh:
            fh.write("\n".join(parts))
        print(f"report written to {args.report}", file=out)


def page_head(title):
    """The start of a self-contained page: its head and style, then ``<h1>title``."""
    import html

    from .html_report import _STYLE, _head

    return _head(title) + [f"<style>{_STYLE}</style></head><body>",
                           f"<h1>{html.escape(title)}</h1>"]


def summary_html(summary):
    """A results base's :class:`~skfed.stats._results.Summary` as a page's tables: its
    header facts, then its table with fixed decimals per column."""
    from .._format import format_p
    from .html_report import _column_formats, _table

    facts = [(str(k).rstrip(":"), str(v)) for k, v in summary.info.items()]
    rows = [(str(name), *map(float, row)) for name, row in summary.table.iterrows()]
    formats = [format_p if str(c).startswith("P>") or c == "p" else f
               for c, f in zip(summary.columns, _column_formats(rows))]
    blank_nan = [lambda v, f=f: "" if math.isnan(v) else f(v) for f in formats]
    parts = [_table(["fact", "value"], facts)] if facts else []
    return parts + [_table(["", *map(str, summary.columns)], rows, formats=blank_nan)]


def text_table_html(table):
    """A table of text cells (a journal table) as HTML, its index the first column."""
    from .html_report import _table

    rows = [(str(name), *map(str, row)) for name, row in table.iterrows()]
    return _table([str(table.index.name or ""), *map(str, table.columns)], rows,
                  formats=[str] * len(table.columns))
