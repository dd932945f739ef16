"""How the replies of parts of a site's rows combine into the reply on all of them.

An operation declares it (``combine=`` of
:func:`~skfed.federation.operations.site_operation`); a site whose dataset is
partitioned on an engine (:mod:`skfed.sites.engine`) combines its partitions'
replies here.
"""

import numpy as np


def tree_combine(combine, replies):
    """The replies of the partitions, in order, as one: ``combine(replies)``, or for
    ``"sum"`` added pairwise (a tree: the same sums whatever order they arrived in)."""
    if callable(combine):
        return combine(list(replies))
    level = list(replies)
    while len(level) > 1:
        level = [add(*level[i:i + 2]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]


def add(a, b):
    """Two replies of sums added: dicts by key (the same keys), tuples and lists by
    position, arrays and numbers; ``None`` with ``None``; equal strings kept."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            raise ValueError("partitions replied with different keys")
        return {key: add(a[key], b[key]) for key in a}
    if isinstance(a, (tuple, list)):
        if len(a) != len(b):
            raise ValueError("partitions replied with different lengths")
        return type(a)(add(x, y) for x, y in zip(a, b))
    if a is None or isinstance(a, str):
        if a != b:
            raise ValueError("partitions replied with different values")
        return a
    if isinstance(a, (bool, np.bool_)):
        raise ValueError("a flag does not add")
    return a + b
