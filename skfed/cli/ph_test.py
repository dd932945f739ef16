"""The proportional-hazards test in every Cox report of ``skfed fit --summary``.

Each Cox model's regression table (``--model cox --summary``, with or without
``--formula``; in process, on Dask workers or through site services) is
followed by the Grambsch-Therneau test of its scaled Schoenfeld residuals
(:func:`skfed.survival.proportional_hazard_test`: lifelines'
``proportional_hazard_test`` on the pooled rows, with R's ``cox.zph`` global
test), one row per covariate and the global test, on the rows the model was
fitted on. The test asks the sites for one more set of sums; where it cannot
be had (a fit under secure aggregation, whose test sums would leave each site
unmasked; a site's refusal; a penalized fit without standard errors) the
report says why instead of failing.

``--ph-test survival3`` gives R survival 3.x's ``cox.zph`` score test instead
(``method="survival3"``, its default transform ``km``, or the time itself for a
model stratified by site; a formula's categorical tested as one term).
"""

import math
from dataclasses import dataclass

#: the time transform of the test, by how the model's baseline is shared and the method:
#: the method's default (lifelines' rank of the event times, R's Kaplan-Meier), or the
#: time itself when each site is its own stratum (the pooled event times, which rank and
#: km need, never left the sites)
TRANSFORMS = {("shared", "lifelines"): "rank", ("site", "lifelines"): "identity",
              ("shared", "survival3"): "km", ("site", "survival3"): "identity"}

_TRANSFORM_TEXT = {"rank": "the rank of the event times", "identity": "the event times",
                   "km": "one minus the Kaplan-Meier estimate (its left limit)"}
#: the methods of ``--ph-test``: the test each gives
METHODS = ("lifelines", "survival3")


@dataclass
class PHTest:
    """A Cox model's proportional-hazards test, or why there is none.

    Attributes
    ----------
    table : pandas.DataFrame or None
        :func:`~skfed.survival.proportional_hazard_test`'s: ``test_statistic``,
        ``df``, ``p`` per covariate and ``GLOBAL``.
    reason : str
        Why there is no table (empty when there is one).
    time_transform : str
    method : {"lifelines", "survival3"}
    """

    table: object = None
    reason: str = ""
    time_transform: str = "rank"
    method: str = "lifelines"


def ph_test_of(model, X=None, y=None, clients=None, method="lifelines"):
    """The test of ``model`` (a fitted :class:`~skfed.survival.FedCoxPH` with its
    training rows ``X`` (a FederatedDataset, or arrays with ``y`` and ``clients``), or a
    :func:`skfed.formula.coxph` result, which carries its rows) as a :class:`PHTest`;
    a problem the analyst cannot fix here becomes its ``reason``. ``method``: one of
    :data:`METHODS` (``True``: lifelines')."""
    from ..exceptions import SiteRefusal, SiteServiceError, SiteUnavailable
    from ..survival import FedCoxPH, proportional_hazard_test

    method = "lifelines" if method is True else method
    fitted = model if isinstance(model, FedCoxPH) else model.estimator
    transform = TRANSFORMS.get(("site" if fitted.strata == "site" else "shared", method), "km")
    try:
        rows = {} if X is None else {"X": _dataset(X, y, clients)}
        table = proportional_hazard_test(model, **rows, time_transform=transform,
                                         method=method)
    except (ValueError, SiteRefusal, SiteServiceError, SiteUnavailable) as exc:
        return PHTest(reason=str(exc).strip(), time_transform=transform, method=method)
    return PHTest(table, time_transform=transform, method=method)


def _dataset(X, y, clients):
    """The training rows as a dataset: the command line's model predicts from arrays (its
    columns' names are the report's), so a frame's names are not checked against it."""
    import numpy as np

    from ..data import FederatedDataset
    from ..survival._target import split_survival

    if isinstance(X, FederatedDataset):
        return X
    event, time = split_survival(y)
    return FederatedDataset.from_arrays(X, np.column_stack([event, time]), clients)


def ph_test_title(test):
    """The sentence above the test's table."""
    if test.method == "survival3":
        return (f"proportional-hazards test: R survival 3.x's cox.zph score test of "
                f"coefficients varying with {_TRANSFORM_TEXT[test.time_transform]}, "
                "per term, from the sites' sums")
    return (f"proportional-hazards test: scaled Schoenfeld residuals against "
            f"{_TRANSFORM_TEXT[test.time_transform]} (Grambsch and Therneau; lifelines' "
            "proportional_hazard_test, R's cox.zph global test), from the sites' sums")


def ph_test_rows(test):
    """``(covariate, chi-square, df, p)`` per row of the table, ``GLOBAL`` last."""
    return [(str(name), float(row["test_statistic"]), int(row["df"]), float(row["p"]))
            for name, row in test.table.iterrows()]


def ph_test_lines(test):
    """The test in the text report: its table, or why there is none."""
    if test is None:
        return []
    if test.table is None:
        return [f"proportional-hazards test: not available: {test.reason}"]
    from .._format import format_p

    rows = ph_test_rows(test)
    width = max(12, max(len(r[0]) for r in rows) + 2)
    lines = [ph_test_title(test), f"  {'':<{width}}{'chi2':>10}{'df':>5}{'p':>9}"]
    for name, statistic, df, p in rows:
        lines.append(f"  {name:<{width}}{statistic:>10.3f}{df:>5d}{format_p(p):>9}")
    return lines


def ph_test_json(test):
    """The test as JSON values (``None`` without ``--summary`` or for another model)."""
    if test is None:
        return None
    table = None if test.table is None else {
        name: {"test_statistic": s if math.isfinite(s) else None, "df": df,
               "p": p if math.isfinite(p) else None}
        for name, s, df, p in ph_test_rows(test)}
    return {"method": test.method, "time_transform": test.time_transform, "table": table,
            "reason": test.reason or None}


def ph_test_html(test):
    """The test in the HTML report: a heading, the sentence and the table (in the
    report's ``box`` and ``name`` styles), or why there is none."""
    import html

    if test is None:
        return []
    head = "<h2>Proportional-hazards test</h2>"
    if test.table is None:
        return [head, f"<p>Not available: {html.escape(test.reason)}</p>"]
    from .._format import format_p

    cells = ['<div class="box"><table><tr><th class="name">covariate</th><th>chi-square</th>'
             "<th>df</th><th>p</th></tr>"]
    for name, statistic, df, p in ph_test_rows(test):
        cells.append(f'<tr><td class="name">{html.escape(name)}</td><td>{statistic:.3f}</td>'
                     f"<td>{df}</td><td>{html.escape(format_p(p))}</td></tr>")
    title = ph_test_title(test)
    return [head, f"<p>{html.escape(title[0].upper() + title[1:])}.</p>",
            "\n".join(cells) + "</table></div>"]
