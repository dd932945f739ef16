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
are ignored, missing values are imputed as in the fit). The two steps are
:class:`~skfed.preprocessing._column_imputer.ColumnImputer` and
:class:`~skfed.preprocessing._column_encoder.ColumnEncoder`; the row steps
a site runs for them (and for ``--drop-incomplete``) are in
:mod:`skfed.data.steps`.
"""

import math

import numpy as np

from .._messages import count

IMPUTE_STRATEGIES = ("median", "mean", "most_frequent")


def is_missing(cell):
    """Whether a cell of :func:`~skfed.cli.fit.read_csv_files` is a missing value: it
    reads every missing-value token (pandas.read_csv's and ``--na-values``,
    :mod:`skfed.cli.missing_values`) as the empty cell."""
    return cell == ""


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
                  drop_incomplete, survival=False, strata=None, offset=None):
    """Every problem of the input at once: returns ``keep`` (the rows to use) and the
    per-row notes, or raises one :class:`~skfed.cli.fit.CLIError` listing them all.

    ``survival``: ``targets`` are the event column (0/1) and the time column
    (>= 0). ``strata``: the Cox model's strata column (any values, none
    missing). ``offset``: a GLM's offset column (finite numbers, none missing:
    never imputed).
    """
    from .errors import CLIError

    n = len(table.rows)
    problems, incomplete = [], np.zeros(n, dtype=bool)
    no_target = np.zeros(n, dtype=bool)
    columns = [(name, "feature") for name in features] + [(t, "target") for t in targets]
    if strata is not None:
        columns.append((strata, "strata"))
    if offset is not None:
        columns.append((offset, "offset"))
    target_missing = {}
    for name, role in columns:
        k = table.columns.index(name)
        cells = [row[k] for row in table.rows]
        missing = np.array([is_missing(c) for c in cells])
        numeric = role == "feature" and name not in categorical or (
            role == "target" and regression and not survival) or role == "offset"
        if role == "target":
            target_missing[name] = missing
        if missing.any():
            first = _where(table, int(np.argmax(missing)))
            if role == "strata":
                no_target |= missing  # never imputed: its rows go with --drop-incomplete
                problems.append(f"strata column {name!r} has "
                                f"{count(int(missing.sum()), 'missing value')} (the first in "
                                f"{first}): --drop-incomplete drops those rows")
            elif role in ("target", "offset"):
                no_target |= missing
                problems.append(f"{role} {name!r} has "
                                f"{count(int(missing.sum()), 'missing value')} (the first in "
                                f"{first}): a {role} is never imputed; --drop-incomplete "
                                "drops those rows")
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


def shown_count(value):
    """A site's count as reported: a number, or "a few" where a site service blanked a
    count of 1 to min_level_count - 1 rows (``None``)."""
    return "a few" if value is None else str(value)


def total_count(values):
    """The sum of sites' counts, ``"some"`` where one of them is blanked (``None``)."""
    values = list(values)
    return "some" if any(v is None for v in values) else sum(values)


def _counted(number, what):
    return f"some {what}s" if number == "some" else count(number, what)


def site_problems(sites, reports, categorical, *, impute, drop_incomplete):
    """The problems of the sites' inputs from their :func:`~skfed.data.steps.inspect_site`
    reports, as the lines of one error (empty: none); every column and every site at once.
    A count a site service blanked (1 to its ``min_level_count - 1``) reads "a few"."""
    problems = []
    names = list(reports[0]["columns"])
    for name in names:
        per = [(s, r["columns"][name]) for s, r in zip(sites, reports)]
        where = lambda k: ", ".join(f"{s} {shown_count(c[k])}"  # noqa: E731
                                    for s, c in per if c[k] is None or c[k])
        missing = total_count(c[0] for _, c in per)
        if missing == sum(r["rows"] for r in reports):
            problems.append(f"feature column {name!r} has no value at any site: leave it out "
                            f"with --drop {name}")
            continue
        if missing and not impute and not drop_incomplete:
            how = ("--impute most_frequent" if name in categorical else
                   "--impute median (or mean, most_frequent)")
            problems.append(f"feature column {name!r} has {_counted(missing, 'missing value')} "
                            f"(by site: {where(0)}): {how} fills them at the sites, or "
                            "--drop-incomplete drops those rows")
        text = total_count(c[1] for _, c in per)
        if text:
            problems.append(f"feature column {name!r} is not numeric: {_counted(text, 'value')} "
                            f"(by site: {where(1)}); declare it --categorical {name} "
                            f"(one-hot), or leave it out with --drop {name}")
        inf = total_count(c[2] for _, c in per)
        if inf:
            problems.append(f"feature column {name!r} has {_counted(inf, 'non-finite value')} "
                            f"(by site: {where(2)})")
    no_target = total_count(r["no_target"] for r in reports)
    if no_target and not drop_incomplete:
        problems.append(f"the target has {_counted(no_target, 'missing value')} (by site: "
                        + ", ".join(f"{s} {shown_count(r['no_target'])}"
                                    for s, r in zip(sites, reports)
                                    if r["no_target"] is None or r["no_target"])
                        + "): a target is never imputed; --drop-incomplete drops those rows")
    return problems


def reference_notes(encoder):
    """``"--categorical: reference levels ... ward 'a'"``: the level each coefficient of a
    treatment-coded column (:class:`~skfed.preprocessing._column_encoder.
    ReferenceCodedEncoder`) is compared with."""
    references = getattr(encoder, "references_", {})
    if not references:
        return []
    return ["--categorical: reference levels (no column of their own; each coefficient "
            "compares a level with them): "
            + ", ".join(f"{name} {str(level)!r}" for name, level in references.items())]
