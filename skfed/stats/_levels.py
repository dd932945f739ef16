"""The levels of a categorical column as the site tables count them (one place for the
site functions, their suppression and the server's pooling)."""

#: the name under which a missing value of a categorical column is counted
MISSING = "<missing>"


def sorted_levels(levels):
    """The distinct levels but the missing marker, sorted (by type then text if mixed).

    Parameters
    ----------
    levels : iterable
        Levels, with repeats and the missing marker :data:`MISSING` possibly among them.

    Returns
    -------
    list
        Each level once, :data:`MISSING` left out, sorted.
    """
    levels = [lv for lv in dict.fromkeys(levels) if lv != MISSING]
    try:
        return sorted(levels)
    except TypeError:
        return sorted(levels, key=lambda x: (str(type(x)), str(x)))
