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


class Combine:
    """How an operation's reply on all the rows comes from its parts when a sum is not
    enough: the rules of a reply (small counts hidden, a level's rows counted) are
    decided on the whole, never per part.

    Parameters
    ----------
    merge : "sum" or callable, default="sum"
        ``merge(replies, args) -> reply``: the parts' replies, in order, as one.
    part : callable, optional
        ``part(rows, *args)``: a part's reply, in place of the operation's function
        (one that carries what the whole's rules need: the counts behind level names,
        a cross-table's cells before any is hidden).
    finish : callable, optional
        ``finish(reply, args, site) -> reply``: the whole's reply from the merged one,
        its rules applied (as the operation's function applies them on all the rows).
    """

    def __init__(self, merge="sum", *, part=None, finish=None):
        self.merge, self.part, self.finish = merge, part, finish

    def __call__(self, replies, args=(), site="?"):
        replies = list(replies)
        merged = tree_combine("sum", replies) if self.merge == "sum" else \
            self.merge(replies, tuple(args))
        return merged if self.finish is None else self.finish(merged, tuple(args), site)


def add_counts(a, b):
    """Two ``{key: count}`` dicts added over the union of their keys (first seen first)."""
    out = dict(a)
    for key, count in b.items():
        out[key] = out.get(key, 0) + count
    return out
