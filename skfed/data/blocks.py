"""Each site's rows of an in-process array as views, not copies."""

import numpy as np


def _grouped(indices):
    """Whether every site's row indices are one contiguous run (rows sorted by site)."""
    return all(len(idx) == 0 or idx[-1] - idx[0] + 1 == len(idx) for idx in indices)


def row_blocks(values, indices):
    """The rows ``values[idx]`` of each site, as read-only views where a view serves.

    A C-ordered array whose rows are grouped by site is cut into views of
    itself; otherwise it is reordered once (sites in turn, each site's rows
    in their original order) and cut into views of that copy. Either way
    each block holds exactly the rows, in the order, of ``values[idx]``; the
    views are read-only, so that no step at a site can write into the
    caller's array. Tables, sparse matrices and other containers are indexed
    as before (one copy per site).

    Parameters
    ----------
    values : ndarray, sparse matrix or DataFrame of shape (n_samples, ...)
    indices : list of ndarray of int
        Each site's row indices, ascending (:func:`~skfed.federation.clients.group_clients`).

    Returns
    -------
    blocks : list
        One block of rows per entry of ``indices``.
    """
    if hasattr(values, "iloc"):
        return [values.iloc[idx] for idx in indices]
    if type(values) is not np.ndarray or not values.flags.c_contiguous:
        return [values[idx] for idx in indices]
    if _grouped(indices):
        base = values
        bounds = [(idx[0], idx[-1] + 1) if len(idx) else (0, 0) for idx in indices]
    else:  # one reordering copy instead of one copy per site
        base = np.take(values, np.concatenate(indices), axis=0)  # faster than values[idx]
        ends = np.cumsum([len(idx) for idx in indices])
        bounds = list(zip(ends - [len(idx) for idx in indices], ends))
    blocks = []
    for lo, hi in bounds:
        block = base[lo:hi]
        block.flags.writeable = False
        blocks.append(block)
    return blocks
