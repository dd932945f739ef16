"""Secondary suppression of counts released together: no hidden count follows from the
shown ones by any combination of their additive relations.

A set of tables released together (a site's Table 1; the pooled, per-site and
by-group columns of a Table 1 with their margins; a cross-table) is a set of count
*cells* and of *relations* ``total = part_1 + ... + part_m`` among them: the levels
and the missing count of a column add up to its stratum's rows, the strata add up
to all rows, the sites add up to the pooled cell. Once some cells are hidden, the
shown cells fix the hidden ones to the solutions of those relations. A hidden
cell is **pinned** when that set, with every count non-negative, holds one integer
value of it: the cell follows by subtraction, however many relations it takes.

The audit is the interval (linear programming) audit of statistical agencies'
tools (tau-argus): whether each hidden cell's smallest and largest value under
every relation and ``x >= 0`` hold two integers or more, one connected block of
hidden cells at a time. It is decided in steps, each exact, the cheap ones first:
a cell alone in a relation is pinned (one subtraction); a cell the equations fix
(its unit vector in the row space of the block's relations, by an SVD) is pinned;
a cell that moves a unit both ways from the block's most interior solution along
the null space is not; the few others get their two linear programs
(:func:`scipy.optimize.linprog`, HiGHS). A Table 1 of 20 columns of 6 levels by 4
groups at 3 sites and pooled is audited in well under a second. A simpler rule ("each line has two
hidden cells or none") is not enough here: with pooled, per-site and by-group
columns each cell lies in three relations, and two lines that each hold two hidden
cells can still pin one through a third (a bridge between two cycles of hidden
cells). :func:`protect` hides one more shown cell next to each pinned one, the
cheapest by the caller's cost (a site's cell before a pooled one, an inner cell
before a margin, the smallest count), and audits again until nothing is pinned.

Sums go with counts: the statistics of a hidden count (its mean, SD, quantiles)
are hidden with it, and the strata's and sites' sums obey the same relations as
their counts, so a sum is never pinned where its count is not (a direction along
which the hidden counts move, restricted to one variable's non-missing counts,
moves their sums too).
"""

import math
from collections import defaultdict

import numpy as np
from scipy.optimize import linprog

#: an LP bound within this of an integer is that integer (the bounds are exact
#: rationals of small integers; HiGHS returns them to about 1e-9)
_TOLERANCE = 1e-6


def _components(hidden, relations):
    """The blocks of hidden cells tied by the relations (union-find), each with the
    relations that hold any of its cells."""
    parent = {h: h for h in hidden}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for total, parts in relations:
        cells = [c for c in (total, *parts) if c in parent]
        for c in cells[1:]:
            parent[find(c)] = find(cells[0])
    blocks = defaultdict(lambda: ([], []))
    for h in hidden:
        blocks[find(h)][0].append(h)
    for k, (total, parts) in enumerate(relations):
        cells = [c for c in (total, *parts) if c in parent]
        if cells:
            blocks[find(cells[0])][1].append(k)
    return list(blocks.values())


def _block_system(cells, relation_ids, relations, values):
    """``A x = b`` over one block's hidden ``cells``: each relation with the shown
    cells' values moved to the right-hand side."""
    index = {c: j for j, c in enumerate(cells)}
    A = np.zeros((len(relation_ids), len(cells)))
    b = np.zeros(len(relation_ids))
    for i, k in enumerate(relation_ids):
        total, parts = relations[k]
        for cell, sign in [(total, -1.0)] + [(p, 1.0) for p in parts]:
            if cell in index:
                A[i, index[cell]] += sign
            else:
                b[i] -= sign * values[cell]
    return A, b


def _bounds(A, b, j):
    """The least and largest value of ``x_j`` under ``A x = b``, ``x >= 0``."""
    ends = []
    for sign in (1.0, -1.0):
        c = np.zeros(A.shape[1])
        c[j] = sign
        res = linprog(c, A_eq=A, b_eq=b, bounds=(0, None), method="highs")
        if res.status == 3:  # unbounded: only the maximum can be
            ends.append(math.inf)
        elif res.status != 0:
            raise RuntimeError(f"the suppression audit's LP failed: {res.message}")
        else:
            ends.append(sign * res.fun)
    return ends[0], ends[1]


def intervals(values, hidden, relations):
    """Each hidden cell's smallest and largest value under the relations and ``x >= 0``.

    Parameters
    ----------
    values : dict
        ``{cell: count}`` of every shown cell (hidden cells may be absent).
    hidden : set
        The hidden cells.
    relations : list of (cell, list of cells)
        ``total = sum(parts)``; every cell named is shown or hidden.

    Returns
    -------
    bounds : dict
        ``{cell: (low, high)}``; ``high`` is ``inf`` when nothing bounds it.
    """
    bounds = {}
    for cells, relation_ids in _components(hidden, relations):
        if not relation_ids:
            bounds.update({c: (0.0, math.inf) for c in cells})
            continue
        A, b = _block_system(cells, relation_ids, relations, values)
        bounds.update({cell: _bounds(A, b, j) for j, cell in enumerate(cells)})
    return bounds


def is_pinned(low, high):
    """Whether ``[low, high]`` holds at most one integer (then it is the cell's count)."""
    if math.isinf(high):
        return False
    return math.floor(high + _TOLERANCE) - math.ceil(low - _TOLERANCE) < 1


def _alone(hidden, relations):
    """The hidden cells that are the only hidden cell of a relation (one subtraction)."""
    out = []
    for total, parts in relations:
        members = [c for c in (total, *parts) if c in hidden]
        if len(members) == 1 and members[0] not in out:
            out.append(members[0])
    return out


def _block_pinned(A, b, cells):
    """The cells of one block pinned by ``A x = b``, ``x >= 0``: first those the
    equations fix (``e_j`` in the row space of ``A``), then, for the others, those
    whose moves along the null space the bounds stop short of one unit either way
    (checked from the most interior solution, and by the exact LP where that is not
    enough)."""
    _, sing, vt = np.linalg.svd(A)
    rank = int(np.sum(sing > _TOLERANCE * max(1.0, sing[0] if sing.size else 1.0)))
    null = vt[rank:].T  # k x (k - rank)
    free = np.linalg.norm(null, axis=1) > 1e-9 if null.size else np.zeros(len(cells), bool)
    pinned = [c for c, f in zip(cells, free) if not f]
    if pinned or not free.any():
        return pinned
    # the most interior solution: max t with A x = b, x >= t
    k = len(cells)
    res = linprog(np.r_[np.zeros(k), -1.0], A_eq=np.c_[A, np.zeros(len(b))], b_eq=b,
                  A_ub=np.c_[-np.eye(k), np.ones(k)], b_ub=np.zeros(k),
                  bounds=[(0, None)] * k + [(0, 1e6)], method="highs")
    x = res.x[:k] if res.status == 0 else None
    for j, cell in enumerate(cells):
        if x is not None:
            v = null @ null[j]  # the null-space direction that moves x_j the most
            moving = np.abs(v) > 1e-12
            step = np.min(x[moving] / np.abs(v[moving]))  # as far as x >= 0 allows
            if step * v[j] >= 1 - _TOLERANCE:  # x_j moves one unit both ways
                continue
        if is_pinned(*_bounds(A, b, j)):
            pinned.append(cell)
    return pinned


def pinned_cells(values, hidden, relations):
    """The hidden cells that follow from the shown ones (see the module docstring): those
    alone in a relation if any (the cheap check), else those a block's relations and
    bounds pin."""
    alone = _alone(hidden, relations)
    if alone:
        return alone
    out = []
    for cells, relation_ids in _components(hidden, relations):
        if relation_ids:
            A, b = _block_system(cells, relation_ids, relations, values)
            out += _block_pinned(A, b, cells)
    return out


def protect(values, hidden, relations, cost, reason):
    """Hide shown cells until no hidden cell is pinned (secondary suppression).

    Parameters
    ----------
    values : dict
        ``{cell: count}`` of every shown cell.
    hidden : set
        The hidden cells; grows in place.
    relations : list of (cell, list of cells)
    cost : callable
        ``cost(cell)``: a sortable key; the cheapest shown cell next to a pinned one
        is hidden.
    reason : callable
        ``reason(cell, relation)``: why a complementary cell is hidden.

    Returns
    -------
    added : dict
        ``{cell: reason}`` of the cells hidden here, in order.
    """
    added = {}
    by_cell = defaultdict(list)
    for k, (total, parts) in enumerate(relations):
        for c in (total, *parts):
            by_cell[c].append(k)
    while True:
        pinned = pinned_cells(values, hidden, relations)
        if not pinned:
            return added
        touched = set()  # relations given a new hidden cell in this pass
        for cell in pinned:
            if touched & set(by_cell[cell]):
                continue  # audited again first: the new cell may free it
            pick = _complement(cell, values, hidden, relations, by_cell, cost)
            if pick is None:
                raise RuntimeError(f"cell {cell!r} is pinned with no shown cell beside it.")
            cell_, k = pick
            hidden.add(cell_)
            added[cell_] = reason(cell_, relations[k])
            touched |= set(by_cell[cell_])


def _opened(cell, relation, hidden, relations, by_cell):
    """How many other relations hiding ``cell`` would leave with one hidden cell (each
    would need a complement of its own: a cell that closes a cycle of hidden cells,
    as the fourth corner of a rectangle, opens none)."""
    return sum(1 for k in by_cell[cell] if k != relation
               and not any(c in hidden for c in (relations[k][0], *relations[k][1])))


def _complement(cell, values, hidden, relations, by_cell, cost):
    """The shown cell to hide beside ``cell``, and its relation: in a relation where
    ``cell`` is the only hidden one first (the plain subtraction), then the one that
    leaves the fewest other relations with a single hidden cell, then the cheapest;
    where every cell of its relations is hidden, one step further (through their
    hidden cells)."""
    seen, frontier = set(), [cell]
    while frontier:
        options, ahead = [], []
        for h in frontier:
            for k in by_cell[h]:
                if k in seen:
                    continue
                seen.add(k)
                total, parts = relations[k]
                members = (total, *parts)
                alone = sum(c in hidden for c in members) == 1
                options += [(not alone, _opened(c, k, hidden, relations, by_cell), cost(c),
                             k, c) for c in members if c not in hidden and c in values]
                ahead += [c for c in members if c in hidden and c != h]
        if options:
            *_, k, pick = min(options, key=lambda o: o[:3])
            return pick, k
        frontier = ahead
    return None
