"""Small-cell suppression of count tables with margins (primary and complementary).

A table of counts has one axis per dimension (site, stratum, level, ...);
every axis gets a margin (the sum over it: the pooled site, all strata, the
total). **Primary** suppression hides every cell, margins included, with
``0 < count < min_count``. **Complementary** suppression then looks at every
line of the table (the cells along one axis with their margin, which is
their sum): a line with exactly one hidden cell would give it back by
subtraction, so one more cell of that line is hidden -- the smallest
positive one that is not a margin (else the smallest cell that is not a
margin, else the margin) -- and the lines are checked again until no line has
exactly one hidden cell.

This closes recovery by one subtraction along any line; like every simple
heuristic (and unlike a linear-programming audit such as tau-argus) it does
not prove that no combination of several lines recovers a hidden cell.
Zero cells are shown (they count no person).
"""

import itertools

import numpy as np


def with_margins(inner):
    """``inner`` with one more index on every axis holding the sum over that axis."""
    out = np.asarray(inner, dtype=np.int64)
    for axis in range(out.ndim):
        out = np.concatenate([out, out.sum(axis=axis, keepdims=True)], axis=axis)
    return out


def suppress(table, min_count, seed=None, axis_names=None):
    """Suppression mask of a table with margins (see the module docstring).

    Parameters
    ----------
    table : ndarray of int
        Counts with margins (:func:`with_margins`): the last index of every
        axis is the sum over that axis.
    min_count : int
        Cells with ``0 < count < min_count`` are hidden.
    seed : ndarray of bool, default=None
        Cells already hidden (e.g. a stratum size hidden in another table).
    axis_names : list of str, default=None
        For the reasons.

    Returns
    -------
    mask : ndarray of bool
        Hidden cells.
    reasons : dict
        ``{cell index: reason}`` for every hidden cell.
    """
    table = np.asarray(table)
    axis_names = axis_names or [f"axis {a}" for a in range(table.ndim)]
    primary = (table > 0) & (table < min_count)
    mask = primary.copy()
    reasons = {idx: f"count below {min_count}" for idx in zip(*np.nonzero(primary))}
    if seed is not None:
        for idx in zip(*np.nonzero(seed & ~mask)):
            reasons[idx] = "hidden in the table of stratum sizes"
        mask |= seed
    changed = True
    while changed:
        changed = False
        for axis in range(table.ndim):
            others = [range(s) for k, s in enumerate(table.shape) if k != axis]
            for rest in itertools.product(*others):
                cells = [rest[:axis] + (i,) + rest[axis:] for i in range(table.shape[axis])]
                hidden = [c for c in cells if mask[c]]
                if len(hidden) != 1:
                    continue
                inner = cells[:-1]
                candidates = ([c for c in inner if not mask[c] and table[c] > 0]
                              or [c for c in inner if not mask[c]] or [cells[-1]])
                pick = min(candidates, key=lambda c: table[c])
                mask[pick] = True
                reasons[pick] = (f"complementary: with the total along {axis_names[axis]} it "
                                 f"would reveal a hidden cell")
                changed = True
    return mask, {tuple(int(i) for i in k): v for k, v in reasons.items()}
