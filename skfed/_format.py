"""Numbers as a journal prints them: fixed decimals chosen per variable, p-values as
``<0.001`` or three decimals.

Pure Python (no matplotlib): the command line's tables use these too.
"""

import math

#: the smallest p-value printed as a number; below it: ``<0.001``
P_FLOOR = 0.001


def decimals_for(spread, lowest=0, highest=4):
    """The decimals that show ``spread`` (a standard deviation, an interval's width) with
    two significant digits, clipped to ``[lowest, highest]``.

    Parameters
    ----------
    spread : float
    lowest, highest : int, default=0, 4

    Returns
    -------
    decimals : int
        ``lowest`` when ``spread`` is zero, negative or not finite.
    """
    if not (isinstance(spread, (int, float)) and math.isfinite(spread) and spread > 0):
        return lowest
    return int(min(max(1 - math.floor(math.log10(spread)), lowest), highest))


def mean_decimals(sd):
    """Decimals of a variable's mean, SD and quantiles in Table 1, from its SD.

    One decimal for SDs from 1 to 100 (age 60.9 (10.1), BMI 27.1 (4.0)), none
    from 100 up, and two significant digits of the SD below 1 (0.12 (0.50)),
    at most four.

    Parameters
    ----------
    sd : float

    Returns
    -------
    decimals : int
    """
    if isinstance(sd, (int, float)) and math.isfinite(sd) and sd >= 100:
        return 0
    return decimals_for(sd, lowest=1, highest=4)


def fixed(value, decimals):
    """``value`` with ``decimals`` decimals (``-0.0`` printed ``0.0``); ``""`` for NaN.

    Parameters
    ----------
    value : float
    decimals : int

    Returns
    -------
    text : str
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def format_p(p):
    """A p-value as a journal prints it: ``<0.001``, else three decimals.

    Parameters
    ----------
    p : float

    Returns
    -------
    text : str
        ``""`` for NaN.
    """
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return ""
    return f"<{P_FLOOR:g}" if p < P_FLOOR else f"{p:.3f}"


def interval_text(estimate, lower, upper, decimals):
    """``1.23 (1.05 to 1.44)``: an estimate and its interval with fixed decimals.

    Parameters
    ----------
    estimate, lower, upper : float
    decimals : int

    Returns
    -------
    text : str
    """
    return (f"{fixed(estimate, decimals)} ({fixed(lower, decimals)} to "
            f"{fixed(upper, decimals)})")
