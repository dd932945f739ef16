"""The cells the command line reads as missing values: ``pandas.read_csv``'s.

A CSV cell is missing when it is, after its spaces are stripped, one of
pandas' default missing-value tokens (:data:`PANDAS_NA_VALUES`, case-sensitive
as pandas: ``NA``, ``None`` and ``null`` are missing, a level written ``none``
or ``na`` is a value) or one of the ``--na-values`` tokens. ``--no-default-na``
keeps only the ``--na-values`` tokens (pandas' ``keep_default_na=False``), and
the empty cell, which a CSV has no other way to write. Every reader of the
command line takes the same tokens (the cells of :func:`~skfed.cli.fit.
read_csv_files` and the data frames of ``--formula``), and they are the tokens
a site reads its own files with (pandas' defaults,
:func:`skfed.data.sources.read_table`).
"""

#: ``pandas.read_csv``'s default ``na_values`` (pandas >= 2.0, where ``"None"`` joined
#: them; the same in pandas 3): the tokens read as missing with ``keep_default_na=True``
PANDAS_NA_VALUES = frozenset({
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})


def add_missing_value_options(parser):
    """``--na-values TOKEN ...`` and ``--no-default-na`` on a command that reads CSVs."""
    parser.add_argument("--na-values", nargs="+", default=[], metavar="TOKEN",
                        help="more cells read as missing values, besides pandas.read_csv's "
                             "defaults (empty, NA, N/A, NaN, nan, None, NULL, null, #N/A, "
                             "<NA>, ...; case-sensitive: a level written none or na is a "
                             "value)")
    parser.add_argument("--no-default-na", action="store_true",
                        help="read only the --na-values tokens and empty cells as missing, "
                             "not pandas' defaults (pandas' keep_default_na=False)")


def missing_tokens(args):
    """The cells read as missing under the command's options (a frozenset of strings)."""
    given = {str(token).strip() for token in getattr(args, "na_values", None) or ()}
    default = frozenset() if getattr(args, "no_default_na", False) else PANDAS_NA_VALUES
    return frozenset(default | given | {""})


def _as_number(text):
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if value != value else value  # NaN is never a missing-value number


def spelled(tokens):
    """``(texts, numbers)``: the cells pandas reads as missing for ``tokens`` (a number
    token also as pandas writes it, ``-99`` and ``-99.0``), and the numbers a numeric
    column reads as missing whatever their spelling (``-9.9e1``)."""
    texts, numbers = set(tokens), set()
    for token in tokens:
        value = _as_number(token)
        if value is None:
            continue
        numbers.add(value)
        if value == int(value):
            texts |= {str(int(value)), f"{int(value)}.0"}
    return frozenset(texts), frozenset(numbers)


def blank_missing(rows, tokens):
    """Every missing cell of ``rows`` (lists of stripped cells) as the empty cell, as
    pandas.read_csv reads ``tokens``: a spelling of a token anywhere, and a number
    equal to a number token in a column of numbers."""
    texts, numbers = spelled(tokens)
    for row in rows:
        row[:] = ["" if cell in texts else cell for cell in row]
    if not numbers or not rows:
        return rows
    for j in range(len(rows[0])):
        values = [_as_number(row[j]) if row[j] else 0.0 for row in rows]
        if all(v is not None for v in values):  # a column of numbers
            for row, value in zip(rows, values):
                if row[j] and value in numbers:
                    row[j] = ""
    return rows


def pandas_options(tokens):
    """``pandas.read_csv``'s options that read exactly ``tokens`` as missing."""
    return {"na_values": sorted(tokens), "keep_default_na": False}


def check_local_only(args, command="skfed fit"):
    """``--na-values`` and ``--no-default-na`` are about the local CSV files: a site reads
    its own files (pandas' default tokens), so they are refused with site-resident data."""
    from .errors import CLIError

    remote = any(getattr(args, name, None) for name in ("site_service", "scheduler", "site"))
    given = [flag for flag, name in (("--na-values", "na_values"),
                                     ("--no-default-na", "no_default_na"))
             if getattr(args, name, None)]
    if remote and given:
        raise CLIError(f"{given[0]} is for local CSV files: each site reads its own file "
                       "with pandas' default missing-value tokens.")
