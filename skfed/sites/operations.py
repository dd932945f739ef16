"""The closed set of named operations a site service runs on its rows.

Each operation is skfed's own site code (the functions the in-process and
Dask paths call: :func:`~skfed.data.site.site_summary`,
:func:`~skfed.data.site.client_objective`, the solvers' ``client_update``
through :func:`~skfed.executors.base.client_round`, ...), reached by name
with typed arguments (:mod:`skfed.sites.codec`), so every home of the rows
gives the same numbers. ``releases`` says what the reply discloses; the site
checks its policy (:mod:`skfed.sites.policy`) before the operation runs.

The analyst's side finds an operation by the function it would have run
(:func:`registry`): a function that is not there is not a site operation,
and a site service never runs it.
"""

from dataclasses import dataclass

import numpy as np

from ..data.site import client_objective, site_score_terms, site_summary
from ..data.sources import describe
from ..data.steps import check_numeric, inspect_site
from ..executors.base import client_round
from ..federation.rounds import client_monitor, client_summary
from ..federation.smoothness import client_curvature_matvec, client_feature_mean
from ..preprocessing._summaries import _summarize_site, _template_site


#: what a reply may carry, by class (the site's gate reads it, :mod:`skfed.sites.host`):
#: ``nothing`` row-derived (a handle, a check that passed, a zero-row schema); ``counts``
#: (row, level and missing-value counts and weight sums, each under ``min_rows`` /
#: ``min_level_count``: the public setup of a fit, released whatever protection the site
#: requires); ``rows``: numbers computed from this site's rows alone (sums, moments,
#: curvature, scores), which a site that requires secure aggregation or differential
#: privacy never releases; ``masked``: a fit's step, whose protection the site's guard
#: decides from the session (:mod:`skfed.sites.guard`)
DISCLOSURES = ("nothing", "counts", "rows", "masked")


#: the most entries a broadcast vector or an argument list may hold
MAX_VECTOR = 1 << 24


@dataclass(frozen=True)
class Arg:
    """One typed argument of a site operation (checked at the site before it runs).

    ``kind``: ``"float"`` (finite, in ``[low, high]``), ``"int"`` (in ``[low, high]``),
    ``"bool"``, ``"str"``, ``"choice"`` (one of ``choices``), ``"floats"`` (a float
    vector of at most :data:`MAX_VECTOR` entries), ``"bytes"`` (a uint8 array),
    ``"list"`` (at most :data:`MAX_VECTOR` entries), ``"dict"``, or ``"value"`` (any
    decoded value: an allow-listed object, checked by the operation itself).
    """

    name: str
    kind: str
    low: float = None
    high: float = None
    choices: tuple = ()
    optional: bool = False

    def check(self, value):
        """``None`` if ``value`` fits, else what is wrong (for the refusal)."""
        kind = self.kind
        if kind in ("float", "int"):
            ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
                value, (bool, np.bool_)) and (kind == "float" or float(value).is_integer())
            ok = ok and np.isfinite(value) and (self.low is None or value >= self.low) and (
                self.high is None or value <= self.high)
        elif kind == "choice":
            ok = any(value is c or (type(value) is type(c) and value == c)
                     for c in self.choices)
        elif kind == "floats":
            ok = isinstance(value, np.ndarray) and value.dtype.kind == "f" and \
                value.ndim == 1 and value.size <= MAX_VECTOR
        elif kind == "bytes":
            ok = isinstance(value, np.ndarray) and value.dtype == np.uint8
        elif kind == "list":
            ok = isinstance(value, (list, tuple)) and len(value) <= MAX_VECTOR
        else:
            ok = {"bool": isinstance(value, (bool, np.bool_)), "str": isinstance(value, str),
                  "dict": isinstance(value, dict), "value": True}[kind]
        return None if ok else f"argument {self.name!r} is not a valid {kind}"


#: the arguments every operation takes besides its own: what it runs on
_TARGET = {False: "dataset", True: "session"}
ARGS = (Arg("args", "list"),)  # a site function's positional arguments, as they are


@dataclass(frozen=True)
class Operation:
    """A named site operation: what it runs, its typed arguments, and what its reply
    releases. The analyst's client packs a site function's positional arguments with
    :meth:`pack`; the site's gate refuses any other argument (:meth:`check`)."""

    name: str
    releases: str
    #: the site function the in-process and Dask paths call for it
    function: object = None
    #: runs on a fit session's client objective (else on a dataset's rows)
    on_session: bool = False
    #: the class of what the reply releases (:data:`DISCLOSURES`)
    disclosure: str = "rows"
    #: its own typed arguments (:class:`Arg`), in the site function's order
    arguments: tuple = ()
    #: the analyst's packing of the site function's positional arguments into named
    #: ones, where it is not one name per position (``None``: by position)
    packer: object = None
    #: its reply is a dict of sums over the rows that ``sums.masked`` may carry masked
    #: (within a session of verified keys, :mod:`skfed.sites.masked_operations`)
    maskable: bool = False

    def discloses(self, args):
        """The disclosure class of one request: a client summary without smoothness
        constants (``exact=None``) releases counts only."""
        if self.name == "fit.client_summary" and args.get("exact") is None:
            return "counts"
        return self.disclosure

    def pack(self, positional):
        """The named arguments of a call of the site function with ``positional``."""
        if self.packer is not None:
            return self.packer(*positional)
        if len(self.arguments) == 1 and self.arguments[0].name == "args":
            return {"args": list(positional)}
        return {a.name: v for a, v in zip(self.arguments, positional)}

    def check(self, args):
        """``None`` if ``args`` are this operation's (each of its declared type), else
        what is wrong: an unknown or missing argument, or a value of the wrong type."""
        declared = {a.name: a for a in self.arguments}
        target = _TARGET[self.on_session]
        unknown = sorted(set(args) - set(declared) - {target})
        if unknown:
            return f"{self.name} takes no argument {str(unknown[0])[:32]!r}"
        for name, arg in declared.items():
            if name not in args:
                if not arg.optional:
                    return f"{self.name} needs its argument {name!r}"
                continue
            problem = arg.check(args[name])
            if problem is not None:
                return f"{self.name}: {problem}"
        return None


def serves(name):
    """Mark a method of the site's host as the handler of operation ``name`` (its policy
    checks around the site function): the host finds handlers by this mark, never by
    building a method's name."""
    if name not in OPERATION_NAMES:
        raise ValueError(f"{name!r} is not a declared site operation")

    def mark(method):
        method.serves = name
        return method
    return mark


def handlers(cls):
    """``{operation name: method}`` of a host class's marked methods (:func:`serves`);
    every operation of the table has exactly one."""
    found = {}
    for klass in reversed(cls.__mro__):
        for value in vars(klass).values():
            name = getattr(value, "serves", None)
            if name is not None:
                found[name] = value
    missing = sorted(set(OPERATIONS) - set(found))
    if missing:
        raise TypeError(f"{cls.__name__} serves no handler for {missing}")
    return found


def model_message(estimator):
    """A fitted linear estimator's arrays, as :op:`evaluate.score` takes them."""
    classes = getattr(estimator, "classes_", None)
    if classes is not None and np.asarray(classes).dtype.kind == "O":
        classes = np.asarray(classes).astype(str)
    if hasattr(estimator, "steps") or not hasattr(estimator, "coef_"):
        raise ValueError(f"a site service scores linear models only, not a "
                         f"{type(estimator).__name__} (a Pipeline's steps would run custom "
                         "code at the site).")
    message = {"coef": np.asarray(estimator.coef_, dtype=np.float64),
               "intercept": np.asarray(estimator.intercept_, dtype=np.float64),
               "classes": None if classes is None else np.asarray(classes)}
    if classes is None and hasattr(estimator, "_inference_family"):
        # a GLM's predictions are its link's inverse of the linear predictor, with the
        # site's own offsets: the site needs the family to score them
        message["family"] = estimator._inference_family()
    return message


def _local_baseline_arguments(estimator, test_size, seed, classifier=False, scale=False,
                              indicators=()):
    return {"estimator": estimator, "test_size": float(test_size), "seed": int(seed),
            "classifier": bool(classifier), "scale": bool(scale),
            "indicators": [int(i) for i in indicators]}


OPERATIONS = {op.name: op for op in [
    Operation("dataset.describe", "row count, column names and kinds, whether a target and "
              "weights are present", describe, disclosure="counts"),
    Operation("data.summary", "row count, weight sum, feature count; for a classifier the "
              "classes held, with counts (each >= min_level_count)", site_summary,
              disclosure="counts",
              arguments=(Arg("task", "choice", choices=("none", "regression", "classification",
                                                        "survival")),)),
    Operation("fit.open", "nothing (the site builds its client objective and keeps it)",
              client_objective, disclosure="nothing",
              arguments=(Arg("datafit", "value"), Arg("layout", "value"), Arg("targets", "value"))),
    Operation("fit.client_summary", "row count, weight sum and the loss's smoothness "
              "constants", client_summary, True,
              arguments=(Arg("exact", "choice", choices=(None, True, False)),),
              packer=lambda exact=True: {"exact": exact}),
    Operation("fit.monitor", "the mean loss and its gradient at the broadcast model",
              client_monitor, True,
              arguments=(Arg("theta", "floats"),),
              packer=lambda theta: {"theta": np.asarray(theta, dtype=np.float64)}),
    Operation("fit.curvature", "the mean loss's curvature along one broadcast vector",
              client_curvature_matvec, True,
              arguments=(Arg("vector", "floats"),),
              packer=lambda v: {"vector": np.asarray(v, dtype=np.float64)}),
    Operation("fit.feature_mean", "the weighted mean of the features", client_feature_mean,
              True),
    Operation("fit.step", "the solver's reply of one round (its declared sums; masked under "
              "secure aggregation)", client_round, True, disclosure="masked",
              arguments=(Arg("solver", "bytes", optional=True), Arg("solver_digest", "str"),
                         Arg("client", "int", low=0), Arg("seed", "int", low=0),
                         Arg("message", "value"), Arg("state", "value", optional=True))),
    Operation("fit.close", "nothing (the session's objective and states are dropped)",
              on_session=True, disclosure="nothing"),
    Operation("fit.inference", "at the fitted model: the p x p information, and the sandwich's "
              "p x p meat (HC0/HC1) or the outer product of the site's score sum (cluster); "
              "Pearson chi-square, deviance and log-likelihood sums", None, True,
              arguments=ARGS),
    Operation("fit.inference_null", "the null model's score, information and deviance sums "
              "at a broadcast intercept", None, True,
              arguments=ARGS),
    Operation("fit.inference_dispersion", "the Tweedie density's series term, summed", None,
              True,
              arguments=ARGS),
    Operation("preprocess.schema", "the checked columns' names and dtypes (zero rows)",
              _template_site, disclosure="nothing",
              arguments=(Arg("estimator", "value"), Arg("validate", "value"))),
    Operation("preprocess.summary", "one federated transformer's per-site summary: sums and "
              "counts (scaler, mean imputer); levels each held by >= min_level_count rows "
              "(one-hot encoder, most-frequent imputer); with allow_exact_quantiles, the "
              "site's values nearest a threshold (exact median)", _summarize_site,
              arguments=(Arg("estimator", "value"), Arg("validate", "value"),
                         Arg("weighted", "bool"), Arg("summary", "value"), Arg("args", "list")),
              packer=lambda estimator, validate, weighted, summary, args: {
                  "estimator": estimator, "validate": validate, "weighted": bool(weighted),
                  "summary": summary, "args": list(args)}),
    Operation("stats.describe", "per column and stratum: row counts, counts, missing counts, "
              "mean and sum of squares; level counts and names; every count from 1 to "
              "min_level_count - 1 blanked, with the complementary counts that would give it "
              "back through a total (and the statistics of a blanked count), each listed with "
              "the reason; columns tabulated by level whose values are mostly in such levels "
              "refused; the site's own quantiles, minimum and maximum only with "
              "allow_exact_quantiles", None,
              arguments=ARGS),
    Operation("stats.count_below", "per query: the count of values below a threshold and the "
              "site's values next to it (only with allow_exact_quantiles)", None,
              arguments=ARGS),
    Operation("stats.crosstab", "the count of every pair of levels (missing values a level) and "
              "the margins; every count from 1 to min_level_count - 1 blanked, with the "
              "complementary cells along its row and column, each listed with the reason; "
              "columns whose values are mostly in levels below min_level_count refused", None,
              disclosure="counts",
              arguments=ARGS),
    Operation("stats.event_table", "per time (coarsened until every bin holds "
              ">= min_level_count rows) the numbers of events and censorings, per group", None,
              disclosure="counts",
              arguments=ARGS),
    Operation("evaluate.response_sums", "two numbers: the sum of weights and of weighted "
              "targets (the mean response of a GLM score's null model)", None),
    Operation("evaluate.deviances", "two numbers: the weighted deviance of a GLM's predictions "
              "and of a constant (its D^2 score)", None,
              arguments=(Arg("model", "dict"), Arg("ybar", "float")),
              packer=lambda estimator, ybar: {"model": dict(
                  model_message(estimator), family=estimator._inference_family()),
                  "ybar": float(ybar)}),
    Operation("data.check_target", "nothing (the target is checked to be in the family's "
              "range; an error gives the number of values outside it)", None, disclosure="nothing",
              arguments=ARGS),
    Operation("data.inspect", "per column the numbers of missing, non-numeric and non-finite "
              "values, and the numbers of rows without a target or incomplete (no value)",
              inspect_site, disclosure="counts",
              arguments=ARGS),
    Operation("data.check", "nothing (the site's features are checked to be numeric and "
              "finite; an error names the column)", check_numeric, disclosure="nothing"),
    Operation("evaluate.local_baseline", "one number: the held-out score of a model fitted on "
              "the site's own training rows (the local-only baseline of skfed fit)", None,
              arguments=(Arg("estimator", "value"), Arg("test_size", "float", low=0, high=1),
                         Arg("seed", "int", low=0), Arg("classifier", "bool"),
                         Arg("scale", "bool"), Arg("indicators", "list")),
              packer=_local_baseline_arguments),
    Operation("evaluate.score", "four weighted sums per target (regression) or two "
              "(classification): never a prediction", site_score_terms,
              arguments=(Arg("model", "dict"),),
              packer=lambda estimator: {"model": model_message(estimator)}),
    Operation("survival.event_times", "per stratum, the distinct event times (or the time "
              "grid's interval indices) with the number of events at each; without "
              "allow_event_times each must hold >= min_level_count events (times coarsened "
              "so for the quantiles of time_grid=k)", None, disclosure="counts",
              arguments=ARGS),
    Operation("fit.risk_sets", "at each broadcast event time (a shared Cox baseline): the "
              "sums of w exp(x'b), w exp(x'b) x and w exp(x'b) x x' over the site's rows at "
              "risk and over its events there, and its event count and weight; without "
              "allow_event_times only where each time holds 0 or >= min_level_count events "
              "and rows leaving the risk set", None, True,
              arguments=ARGS),
    Operation("fit.cox_inference", "at the fitted Cox model (each site its own stratum): the "
              "p x p information, the log partial likelihoods at the fit and at zero, and "
              "the sandwich's p x p meat", None, True,
              arguments=ARGS),
    Operation("fit.cox_baseline", "Breslow's cumulative baseline hazard per stratum (each "
              "site its own stratum): at the site's event times only with allow_event_times; "
              "else at the analyst's cut points or at cut points the site chooses (released "
              "with it), every interval holding 0 or >= min_level_count events and rows",
              None, True, arguments=ARGS),
    Operation("fit.cox_residuals", "the sandwich's p x p meat from the site's score "
              "residuals at a broadcast baseline", None, True,
              arguments=ARGS),
    Operation("survival.strata_levels", "the levels of a Cox model's strata column with "
              "their row counts (each >= min_level_count)", None, disclosure="counts",
              arguments=ARGS),
    Operation("evaluate.concordance", "four counts: concordant, discordant, tied and "
              "comparable pairs of the site's rows (Harrell's concordance)", None,
              arguments=ARGS),
    Operation("mixed.totals", "a linear mixed model's sums over the site's rows: X'X, X'y, "
              "y'y and the row count", None, arguments=ARGS),
    Operation("mixed.group_blocks", "per group of the site (each of >= min_rows rows): its "
              "label, row count, Z'Z, Z'X and Z'y", None, arguments=ARGS),
    Operation("mixed.site_fit", "the site's own least-squares coefficients, their "
              "covariance and residual degrees of freedom (stage one of a two-stage "
              "meta-analysis)", None, arguments=ARGS),
    Operation("mixed.glmm_groups", "per group of the site (each of >= min_rows rows): its "
              "label and row count", None, disclosure="counts", arguments=ARGS),
    Operation("mixed.glmm_totals", "two numbers: the sums of the outcome and of the trials",
              None, arguments=ARGS),
    Operation("mixed.glmm_terms", "at the broadcast parameters, the site's groups' "
              "marginal log-likelihood, its gradient and Hessian, summed over its groups",
              None, arguments=ARGS),
    Operation("mixed.glmm_modes", "per group of the site (each of >= min_rows rows): the "
              "conditional mode and standard deviation of its random intercept", None,
              arguments=ARGS),
    Operation("survival.schoenfeld_sums", "a proportional-hazards test's sums at the "
              "fitted Cox model, at each public grid time: the risk-set sums of order 1, the "
              "event counts and weights and the events' covariate sums, and the pooled "
              "Kaplan-Meier's events and rows at risk; without allow_event_times only where "
              "each time holds 0 or >= min_level_count events and rows leaving the risk set",
              None, arguments=ARGS),
    Operation("survival.schoenfeld_moments", "a proportional-hazards test's sums at the "
              "fitted Cox model (each site its own stratum): the event count, the summed "
              "Schoenfeld residuals, times t and times log t, and the sums and sums of squares "
              "of the event times and their logs; only with >= min_level_count events", None,
              arguments=ARGS),
    Operation("formula.levels", "per categorical column of a formula, the levels the site "
              "holds (each held by >= min_level_count rows, else a refusal naming the "
              "column)", None, disclosure="counts", arguments=ARGS),
    Operation("formula.extremes", "per spline column of a formula, its non-missing count, "
              "minimum and maximum (single rows' values: only with allow_exact_quantiles)",
              None, arguments=ARGS),
    # a boosting fit (skfed.ensemble); its requests' form is checked by skfed.ensemble._wire
    Operation("boosting.schema", "the row count and weight sum; per categorical column "
              "the levels the site holds, for a classifier the classes with their counts "
              "and weight sums (each >= min_level_count)", None, disclosure="counts",
              arguments=ARGS),
    Operation("boosting.totals", "per feature the count of missing values; the row count, "
              "weight sum and the target's (weighted) sums, or the weight of each class",
              None, arguments=ARGS, maskable=True),
    Operation("boosting.sketch", "per continuous feature the means and row counts of "
              "consecutive groups of min_rows or more of the site's values in value order "
              "(at most max_bins groups; never a row's value), signed with the site's "
              "certificate", None, arguments=ARGS),
    Operation("boosting.bin_counts", "per probe of a continuous feature the count (and "
              "weight) of the site's values at or below it, and the sums of its values "
              "between probes: the exact bin search, single rows' values (only with "
              "allow_exact_quantiles)", None, arguments=ARGS, maskable=True),
    Operation("boosting.residual_counts", "the same counts and sums for the residuals "
              "y - raw of each requested leaf (each leaf and its sibling 0 or >= min_rows "
              "rows here unless masked; only with allow_exact_quantiles)", None,
              arguments=ARGS, maskable=True),
    Operation("boosting.histograms", "per requested node and feature, per bin: the sums "
              "of the gradients and hessians and the row count (each node and its sibling "
              "0 or >= min_rows rows here unless masked; bins at continuous thresholds only "
              "with allow_exact_quantiles); optionally the loss sums", None, arguments=ARGS,
              maskable=True),
    Operation("boosting.loss", "two numbers: the weighted loss of the broadcast model "
              "over the site's rows and the weight sum", None, arguments=ARGS, maskable=True),
    Operation("boosting.score", "four weighted sums (regression) or two (classification) "
              "of the model's predictions at the site: never a prediction", None,
              arguments=ARGS, packer=lambda estimator: {"args": [_boosting_message(estimator)]},
              maskable=True),
    # masked sums of an analysis (skfed.privacy.masked_sums), in a session of verified keys
    Operation("sums.open", "the site's public key for a session of masked sums, signed "
              "with its certificate, and the weight sum of the dataset's rows", None,
              disclosure="counts",
              arguments=(Arg("key_session", "bytes"), Arg("party", "int", low=0))),
    Operation("sums.key_list", "nothing (the site checks every peer's signed key)", None,
              True, disclosure="nothing", arguments=(Arg("keys", "dict"), Arg("proofs", "dict"))),
    Operation("sums.masked", "one masked vector: the reply of a maskable operation on the "
              "session's rows, in exact integer limbs; only the sum over every verified site "
              "can be decoded", None, True,
              disclosure="masked",
              arguments=(Arg("operation", "str"), Arg("args", "dict"),
                         Arg("exchange", "int", low=1),
                         Arg("parties", "list"), Arg("coefficient", "float", low=0))),
    Operation("sums.close", "nothing (the session's keys are dropped)", None, True,
              disclosure="nothing"),
]}


def _boosting_message(estimator):
    """A fitted boosting estimator as ``boosting.score`` takes it (its arrays only)."""
    from ..ensemble._wire import score_message

    return score_message(estimator)


OPERATION_NAMES = frozenset(OPERATIONS)


def _late_functions():
    """The site functions not in the table above, and the declared row steps (imported
    late: several of their modules import the estimators, whose packages import this
    one's)."""
    from ..data import steps
    from ..data.site import holdout_rows
    from ..data.sources import reorder_columns
    from ..ensemble import _site as boosting
    from ..ensemble import _sketch as sketch
    from ..formula import _design as formula
    from ..mixed import _glmm_site as glmm, _site as mixed
    from ..linear_model import _glm, _inference
    from ..model_selection._local_baseline import local_only_score
    from ..preprocessing._column_imputer import _site_columns
    from ..preprocessing._summaries import _transform_site
    from ..solvers import risk_sets
    from ..stats import _site as stats
    from ..survival import _site as cox_site

    operations = {local_only_score: "evaluate.local_baseline",
                  stats.site_describe: "stats.describe",
                  stats.site_count_below: "stats.count_below",
                  stats.site_crosstab: "stats.crosstab",
                  stats.site_event_table: "stats.event_table",
                  _glm.check_target_range: "data.check_target",
                  _glm.site_response_sums: "evaluate.response_sums",
                  _glm.site_deviances: "evaluate.deviances",
                  _inference.client_inference_terms: "fit.inference",
                  _inference.client_null_terms: "fit.inference_null",
                  _inference.client_tweedie_log_c: "fit.inference_dispersion",
                  cox_site.site_event_times: "survival.event_times",
                  risk_sets.client_risk_set_sums: "fit.risk_sets",
                  cox_site.client_cox_inference: "fit.cox_inference",
                  cox_site.client_cox_baseline: "fit.cox_baseline",
                  cox_site.client_cox_residual_meat: "fit.cox_residuals",
                  cox_site.site_concordance: "evaluate.concordance",
                  cox_site.site_stratum_levels: "survival.strata_levels",
                  cox_site.site_schoenfeld_sums: "survival.schoenfeld_sums",
                  cox_site.site_schoenfeld_moments: "survival.schoenfeld_moments",
                  formula.site_levels: "formula.levels",
                  formula.site_extremes: "formula.extremes",
                  mixed.site_totals: "mixed.totals",
                  mixed.site_group_blocks: "mixed.group_blocks",
                  mixed.site_ols: "mixed.site_fit",
                  glmm.site_glmm_groups: "mixed.glmm_groups",
                  glmm.site_glmm_totals: "mixed.glmm_totals",
                  glmm.site_glmm_terms: "mixed.glmm_terms",
                  glmm.site_glmm_modes: "mixed.glmm_modes",
                  boosting.site_schema: "boosting.schema",
                  boosting.site_totals: "boosting.totals",
                  boosting.site_bin_counts: "boosting.bin_counts",
                  sketch.site_sketch: "boosting.sketch",
                  boosting.site_residual_counts: "boosting.residual_counts",
                  boosting.site_histograms: "boosting.histograms",
                  boosting.site_loss: "boosting.loss",
                  boosting.site_score_terms: "boosting.score"}
    # what a dataset may ask each site to do to its rows before an operation: declared
    # steps of skfed's own code with typed arguments, appended to the dataset reference
    # (the site service applies them in order, then runs the operation)
    row_steps = {holdout_rows, reorder_columns, _transform_site, steps.split_site,
                 steps.select_columns, steps.one_hot_site, steps.standardize_site,
                 _site_columns, steps.impute_site, steps.drop_incomplete_site,
                 cox_site.move_strata_to_target, formula.complete_rows, formula.design_rows}
    return operations, row_steps


def masked_passes():
    """The site functions a masked ``sums`` step of a fit may name (its inference passes,
    the risk-set sums and the monitor's smoothness sums): run at the site, summed masked
    over every verified site (:meth:`skfed.sites.guard.SecureAggregationGuard.check_sums`)."""
    from ..federation.smoothness import client_smoothness_sums
    from ..linear_model import _inference
    from ..solvers.risk_sets import client_risk_set_sums
    from ..survival._site import client_cox_inference, client_cox_residual_meat

    return (_inference.client_inference_terms, _inference.client_null_terms,
            _inference.client_tweedie_log_c, client_cox_inference, client_risk_set_sums,
            client_cox_residual_meat, client_smoothness_sums)


_REGISTRY = None


def registry():
    """``(by_function, row_steps)``: the operation standing for each site function the
    analyst's side may call, and the functions a dataset may apply to a site's rows."""
    global _REGISTRY
    if _REGISTRY is None:
        by_function = {op.function: op.name for op in OPERATIONS.values()
                       if op.function is not None}
        late_operations, row_steps = _late_functions()
        by_function.update(late_operations)
        _REGISTRY = (by_function, frozenset(row_steps))
    return _REGISTRY
