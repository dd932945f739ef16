"""The one rule on a categorical column's levels at a site: each held by enough rows.

A level's name is released with it (a one-hot column, a histogram's bin, a
formula's dummy), and a column of a rare value is an indicator of a few rows;
every operation that reads levels at a site applies :func:`check_levels`.
"""

import numpy as np
import pandas as pd

from ..federation.operations import Refused


def _present(values, missing):
    present = ~pd.isna(values)
    if missing is not None:  # an imputer's own marker for a missing value
        if isinstance(missing, float) and missing != missing:
            return present
        present &= np.array([not (v == missing) for v in values], dtype=bool)
    return present


def level_counts(columns, missing=None):
    """Each of ``columns``' count per level, by its text (what :func:`check_levels`
    decides on; a site's partitions' counts add up to the site's)."""
    out = []
    for values in columns:
        values = np.asarray(values, dtype=object)
        text, counts = np.unique(values[_present(values, missing)].astype(str),
                                 return_counts=True)
        out.append(dict(zip(text.tolist(), counts.tolist())))
    return out


def check_levels(columns, names, min_count, *, missing=None, counts=None):
    """Refuse (rule ``min_level_count``) if a level of any of ``columns`` (1-D value
    arrays; missing values, and ``missing``, left out) is held by fewer than
    ``min_count`` rows here; the refusal names the column, never the level or a count.
    ``counts``: the columns' :func:`level_counts`, in place of ``columns``."""
    if counts is None:
        counts = level_counts(columns, missing)
    for held, name in zip(counts, names):
        sizes = np.asarray(list(held.values()), dtype=np.int64)
        if sizes.size and sizes.min() < min_count:
            shown = str(name)[:64]
            raise Refused("min_level_count", f"a level of column {shown!r} is held by fewer "
                          f"than {min_count} rows here",
                          columns=[name] if isinstance(name, str) else (), public=True)
