"""The site operations on a dataset's rows that are not a fit's rounds.

Input checks, the federated preprocessing, descriptive and survival
statistics, aggregate evaluation and the inference passes at a fitted model:
each runs skfed's own site function on the rows a dataset reference names,
after :class:`~skfed.sites.host.SiteHost` has checked who asks and the
policy's row counts, and checks what the reply would release
(``min_level_count``, ``allow_exact_quantiles``). A mixin of the host.
"""

import numpy as np

from ..data.site import SiteData, numeric_matrix
from .operations import serves
from .policy import Refused


class DataOperations:
    """The host's dataset-level operations (see the module docstring)."""

    @serves("preprocess.schema")
    def _op_preprocess_schema(self, analyst, args, record):
        from ..preprocessing._summaries import _template_site

        site, _ = self._rows(args, record, "a schema")
        estimator, validate = _transformer(args)
        template = _template_site(site, estimator, validate)
        if hasattr(template, "dtypes"):
            return {"columns": [str(c) for c in template.columns],
                    "dtypes": [str(t) for t in template.dtypes]}
        return {"columns": None, "dtypes": [template.dtype.str], "width": template.shape[1]}

    @serves("preprocess.summary")
    def _op_preprocess_summary(self, analyst, args, record):
        from ..preprocessing import _summaries

        site, n = self._rows(args, record, "a preprocessing summary")
        estimator, validate = _transformer(args)
        fn, fn_args = args.get("summary"), args.get("args") or ()
        exact = (_summaries.range_summary, _summaries.count_below_summary)
        if fn in exact and not self.policy.allow_exact_quantiles:
            raise Refused("allow_exact_quantiles", "the exact federated median releases "
                           "single rows' values (the site's extremes and the values next to "
                           "each threshold); use strategy='mean' or 'most_frequent'")
        if fn not in vars(_summaries).values() or not getattr(fn, "__name__", "").endswith(
                "_summary"):
            raise Refused("message", "not a preprocessing summary")
        if fn in (_summaries.categories_summary, _summaries.value_counts_summary):
            self._check_levels(validate(estimator, site.X), args, fn_args)
        return _summaries._summarize_site(site, estimator, validate,
                                          bool(args.get("weighted")), fn, tuple(fn_args))

    def _check_levels(self, X, args, fn_args):
        """No level (category, or value counted for a mode) held by too few rows."""
        from ..preprocessing._summaries import encoder_columns

        names = [str(c) for c in X.columns] if hasattr(X, "columns") else None
        for i, column in enumerate(encoder_columns(X)):
            column = np.asarray(column, dtype=object)
            present = np.array([v is not None and v == v for v in column], dtype=bool)
            if fn_args:  # value counts leave the missing marker out
                present &= np.array([not _same(v, fn_args[-1]) for v in column], dtype=bool)
            _, counts = np.unique(column[present].astype(str), return_counts=True)
            if counts.size and counts.min() < self.policy.min_level_count:
                where = repr(names[i]) if names else f"{i}"
                raise Refused("min_level_count", f"a level of column {where} is held by "
                               f"fewer than {self.policy.min_level_count} rows here")

    @serves("data.check_target")
    def _op_data_check_target(self, analyst, args, record):
        from ..linear_model._glm import check_target_range

        site, (family, lower, strict) = self._stats_args(args, record, "a target check", 3)
        return check_target_range(site, str(family), float(lower), bool(strict))

    @serves("data.inspect")
    def _op_data_inspect(self, analyst, args, record):
        from ..data.steps import inspect_site

        site, (categorical,) = self._stats_args(args, record, "an inspection", 1)
        return inspect_site(site, [str(c) for c in categorical])

    @serves("data.check")
    def _op_data_check(self, analyst, args, record):
        site, _ = self._rows(args, record, "a check")
        numeric_matrix(site)
        return None

    @serves("evaluate.local_baseline")
    def _op_evaluate_local_baseline(self, analyst, args, record):
        from ..base import FederatedLinearModel
        from ..model_selection._local_baseline import local_only_score

        site, n = self._rows(args, record, "a local baseline")
        estimator = args.get("estimator")
        if not isinstance(estimator, FederatedLinearModel):
            raise Refused("message", "the local baseline needs one of skfed's estimators")
        return local_only_score(site, estimator, float(args.get("test_size")),
                                int(args.get("seed")), bool(args.get("classifier")),
                                bool(args.get("scale")), tuple(args.get("indicators") or ()))

    # -- inference at the fitted model (the session's objective) ----------------------
    def _inference(self, fn, analyst, args, record):
        session = self._on_session(analyst, args, record)
        values = args.get("args")
        if not isinstance(values, list):
            raise Refused("message", "an inference pass takes its arguments as a list")
        return fn(session.objective, *values)

    @serves("fit.inference")
    def _op_fit_inference(self, analyst, args, record):
        from ..linear_model._inference import client_inference_terms

        return self._inference(client_inference_terms, analyst, args, record)

    @serves("fit.inference_null")
    def _op_fit_inference_null(self, analyst, args, record):
        from ..linear_model._inference import client_null_terms

        return self._inference(client_null_terms, analyst, args, record)

    @serves("fit.inference_dispersion")
    def _op_fit_inference_dispersion(self, analyst, args, record):
        from ..linear_model._inference import client_tweedie_log_c

        return self._inference(client_tweedie_log_c, analyst, args, record)

    # -- descriptive and survival statistics (skfed.stats), under the same rules --
    def _stats_args(self, args, record, what, n_args):
        site, _ = self._rows(args, record, what)
        return site, self._positional(args, what, n_args)

    @staticmethod
    def _positional(args, what, n_args):
        """A site function's positional arguments (``args["args"]``), ``n_args`` of them."""
        values = args.get("args")
        if not isinstance(values, list) or len(values) != n_args:
            raise Refused("message", f"{what} takes {n_args} arguments")
        return values

    @serves("stats.describe")
    def _op_stats_describe(self, analyst, args, record):
        from ..stats._site import _column, is_numeric, site_describe

        site, (columns, by, quantiles, min_count) = self._stats_args(args, record,
                                                                     "a description", 4)
        self._check_level_names(site, [c for c in columns if not is_numeric(_column(site, c))]
                                + ([by] if by is not None else []))
        # the site's own threshold when it is larger: its small cells are hidden here,
        # with their complements, and the reply lists them (skfed.stats._suppress)
        out = site_describe(site, columns, by, quantiles,
                            max(int(min_count), self.policy.min_level_count))
        if not self.policy.allow_exact_quantiles:
            for cell in out["cells"].values():
                if "quantiles" in cell:  # single rows' values: the extremes, own quantiles
                    cell.update(min=np.nan, max=np.nan,
                                quantiles=np.full(len(cell["quantiles"]), np.nan))
        return out

    def _check_level_names(self, site, columns):
        """A hidden level's count is blanked but its name is released (the table has its
        row): refuse a column tabulated by level whose rows are mostly in such levels (an
        identifier, a continuous measurement)."""
        from ..stats._site import _column

        k = self.policy.min_level_count
        for name in columns:
            counts = _column(site, name).value_counts(dropna=True).to_numpy()
            rare = int(counts[counts < k].sum())
            if rare and 2 * rare > counts.sum():
                raise Refused("min_level_count", f"column {str(name)[:64]!r}: {rare} of its "
                               f"{int(counts.sum())} values here are levels held by fewer "
                               f"than {k} rows (an identifier-like column); their names "
                               "are not released")

    @serves("stats.count_below")
    def _op_stats_count_below(self, analyst, args, record):
        from ..stats._site import site_count_below

        site, values = self._stats_args(args, record, "a quantile step", 3)
        if not self.policy.allow_exact_quantiles:
            raise Refused("allow_exact_quantiles", "exact quantiles release single rows' "
                           "values (the values next to each threshold)")
        return site_count_below(site, *values)

    @serves("stats.crosstab")
    def _op_stats_crosstab(self, analyst, args, record):
        from ..stats._site import site_crosstab

        site, (row, col, min_count) = self._stats_args(args, record, "a cross-tabulation", 3)
        self._check_level_names(site, [row, col])
        return site_crosstab(site, row, col, max(int(min_count), self.policy.min_level_count))

    @serves("stats.event_table")
    def _op_stats_event_table(self, analyst, args, record):
        from ..stats._site import site_event_table

        site, (time, event, group, min_count) = self._stats_args(args, record,
                                                                 "an event table", 4)
        # the site's small-count rule: times coarsened until each bin holds enough rows
        floor = self.policy.min_level_count
        return site_event_table(site, time, event, group,
                                max(int(min_count or 0), floor) if floor > 1 else min_count)

    # -- survival (skfed.survival.FedCoxPH) ---------------------------------------
    @serves("survival.event_times")
    def _op_survival_event_times(self, analyst, args, record):
        from ..survival._site import site_event_times

        site, (time_grid, min_count) = self._stats_args(args, record, "event times", 2)
        time_grid = None if time_grid is None else _cut_points(time_grid)
        floor = self.policy.min_level_count
        if not self.policy.allow_event_times:
            if time_grid is None and min_count is None:
                raise Refused("allow_event_times", "a Cox baseline shared across sites at "
                               "exact event times makes the sites' event times public (and "
                               "the sums at a time with one event are that row's covariates); "
                               "fit on a time grid (time_grid=) or with strata='site'")
            if min_count is not None:
                min_count = max(int(min_count), floor)
        out = site_event_times(site, None if time_grid is None else
                               np.asarray(time_grid, dtype=float), min_count)
        if not self.policy.allow_event_times and np.any(out["events"] < floor):
            if time_grid is not None:  # the refusal names the cut points that would pass
                from ..data.site import Targets

                Y, _ = Targets("survival").encode(site.y, site.weights())
                self._check_cut_points(Y, np.asarray(time_grid, dtype=float),
                                       "survival.event_times")
            raise Refused("min_level_count", f"an interval of the time grid holds fewer than "
                                              f"{floor} events here; use wider intervals")
        return out

    def _check_risk_sets(self, Y, grid):
        """Without ``allow_event_times``: every grid time's events at this site, and the
        rows leaving its risk set after it, number 0 or at least ``min_level_count``
        (differences of the risk-set sums are sums over those rows)."""
        if self.policy.allow_event_times:
            return
        floor = self.policy.min_level_count
        if not isinstance(grid, dict):
            raise Refused("message", "a grid of event times is {stratum: times}")
        time, event, stratum = Y[:, 0], Y[:, 1] > 0, Y[:, 2]
        for code, times in grid.items():
            times = np.asarray(times, dtype=float)
            rows = stratum == float(code)
            k = np.searchsorted(times, time[rows], side="right") - 1
            inside = k >= 0
            leaving = np.bincount(k[inside], minlength=times.size)
            events = np.bincount(k[inside & event[rows] & (time[rows] == times[np.maximum(k, 0)])],
                                 minlength=times.size)
            for what, counts in (("events", events), ("rows leaving the risk set", leaving)):
                if np.any((counts > 0) & (counts < floor)):
                    raise Refused("min_level_count", f"a time of the grid has fewer than "
                                  f"{floor} {what} here (its sums would describe single "
                                  "rows); use a coarser time_grid")

    @serves("survival.schoenfeld_sums")
    def _op_survival_schoenfeld_sums(self, analyst, args, record):
        from ..data.site import Targets
        from ..survival._site import site_schoenfeld_sums

        site, (coef, grid, time_grid) = self._stats_args(args, record,
                                                         "a proportional-hazards test", 3)
        if not isinstance(grid, dict):
            raise Refused("message", "a grid of event times is {stratum: times}")
        # the same rule as the fit's risk sets: by stratum, and with the strata merged
        # (the Kaplan-Meier at the union of the grid's times)
        Y, _ = Targets("survival", time_grid=time_grid).encode(site.y, site.weights())
        self._check_risk_sets(Y, grid)
        union = np.unique(np.concatenate([np.asarray(t, dtype=float) for t in grid.values()]
                                         or [np.zeros(0)]))
        self._check_risk_sets(np.column_stack([Y[:, :2], np.zeros(len(Y))]), {0.0: union})
        return site_schoenfeld_sums(site, _parameters(coef), grid, time_grid)

    @serves("survival.schoenfeld_moments")
    def _op_survival_schoenfeld_moments(self, analyst, args, record):
        from ..data.site import Targets
        from ..survival._site import site_schoenfeld_moments

        site, (coef, ties) = self._stats_args(args, record, "a proportional-hazards test", 2)
        Y, _ = Targets("survival").encode(site.y, site.weights())
        if np.sum(Y[:, 1] > 0) < self.policy.min_level_count:
            raise Refused("min_level_count", f"fewer than {self.policy.min_level_count} "
                                             "events here (the moments of the event times "
                                             "would describe single rows)")
        return site_schoenfeld_moments(site, _parameters(coef), ties)

    @serves("fit.risk_sets")
    def _op_fit_risk_sets(self, analyst, args, record):
        from ..solvers.risk_sets import client_risk_set_sums

        session = self._on_session(analyst, args, record)
        values = args.get("args")
        if not isinstance(values, list) or len(values) not in (3, 4):
            raise Refused("message", "risk-set sums take (theta, grid, order[, scale])")
        theta, grid, order, scale = (*values, 1.0)[:4]
        self._check_risk_sets(session.objective.Y, grid)
        return client_risk_set_sums(session.objective, np.asarray(theta, dtype=float), grid,
                                    int(order), float(scale))

    @serves("fit.cox_inference")
    def _op_fit_cox_inference(self, analyst, args, record):
        from ..survival._site import client_cox_inference

        return self._inference(client_cox_inference, analyst, args, record)

    @serves("fit.cox_baseline")
    def _op_fit_cox_baseline(self, analyst, args, record):
        from ..survival._site import client_cox_baseline

        session = self._on_session(analyst, args, record)
        values = args.get("args")
        if not isinstance(values, list) or len(values) not in (2, 3):
            raise Refused("message", "a baseline takes (theta, cut points[, min_count])")
        theta, cuts, min_count = (*values, None)[:3]
        if min_count is not None and (isinstance(min_count, bool) or not isinstance(
                min_count, (int, np.integer))):
            raise Refused("message", "a baseline's min_count is an integer")
        Y = session.objective.Y
        if self.policy.allow_event_times:
            return client_cox_baseline(session.objective, theta, cuts, min_count)
        floor = self.policy.min_level_count
        if cuts is None:  # not at its event times: at cut points the site chooses
            min_count = max(int(min_count or 0), floor)
            self._check_own_grid(Y, min_count)
        else:
            cuts = _cut_points(cuts)
            self._check_cut_points(Y, cuts, "fit.cox_baseline")
        out = client_cox_baseline(session.objective, theta, cuts, min_count)
        self._check_released_grid(Y, out)
        return out

    def _check_own_grid(self, Y, min_count):
        """A stratum here without a grid of intervals of >= ``min_count`` events and rows
        gets no baseline: refused before any work."""
        from ..survival._grid import passing_cut_points

        for code in np.unique(Y[Y[:, 1] > 0, 2]):
            rows = Y[:, 2] == code
            if passing_cut_points(Y[rows, 0], Y[rows, 1] > 0, min_count) is None:
                raise Refused("min_level_count", "no time grid here has each interval "
                              f"holding 0 or at least {min_count} events and rows (too few "
                              "events in a stratum); its baseline hazard is not released")

    def _check_cut_points(self, Y, cuts, operation):
        """The analyst's cut points: every interval holds 0 or ``min_level_count`` events
        and rows in each stratum here, else a refusal naming the largest subset of them
        that would pass here (found at the site; see docs/data-officers.md)."""
        from ..survival._grid import cut_points_passing_here, intervals_pass, show_grid

        floor = self.policy.min_level_count
        if all(intervals_pass(Y[Y[:, 2] == code, 0], Y[Y[:, 2] == code, 1] > 0, cuts, floor)
               for code in np.unique(Y[:, 2])):
            return
        subset = cut_points_passing_here(Y, cuts, floor)
        if subset is None:
            hint = (f"no subset of these cut points passes here (fewer than {floor} events "
                    "or rows in all)")
        else:
            dropped = [c for c in cuts if c not in set(subset.tolist())]
            which = (show_grid(dropped)[1:-1] if len(dropped) <= 6
                     else f"{len(dropped)} of them")
            hint = f"time_grid={show_grid(subset)} passes here (these cut points without {which})"
            if operation == "fit.cox_baseline":
                hint += ", and so does no time_grid (the site then chooses its cut points)"
        raise Refused("min_level_count", f"an interval of the time grid holds fewer than "
                      f"{floor} events or rows here; {hint}")

    def _check_released_grid(self, Y, out):
        """Whatever chose the cut points, every interval of each stratum's grid in the
        reply holds 0 or ``min_level_count`` events and rows here."""
        from ..survival._grid import intervals_pass

        for code in np.unique(out["strata"]):
            rows = Y[:, 2] == code
            if not intervals_pass(Y[rows, 0], Y[rows, 1] > 0,
                                  out["times"][out["strata"] == code],
                                  self.policy.min_level_count):
                raise Refused("min_level_count", "an interval of the baseline's time grid "
                              "holds too few events or rows here")

    @serves("fit.cox_residuals")
    def _op_fit_cox_residuals(self, analyst, args, record):
        from ..survival._site import client_cox_residual_meat

        return self._inference(client_cox_residual_meat, analyst, args, record)

    @serves("survival.strata_levels")
    def _op_survival_strata_levels(self, analyst, args, record):
        from ..survival._site import site_stratum_levels

        site, (column,) = self._stats_args(args, record, "strata levels", 1)
        out = site_stratum_levels(site, str(column))
        if np.any(out["counts"] < self.policy.min_level_count):
            raise Refused("min_level_count", f"a level of strata column {str(column)!r} is "
                                              f"held by fewer than "
                                              f"{self.policy.min_level_count} rows here")
        return out

    # -- mixed models: a design of plain values, groups of at least min_rows rows --
    _MIXED_KEYS = {"groups": (str, type(None)), "re_columns": (list,), "fit_intercept": (bool,),
                   "re_intercept": (bool,), "min_group_rows": (int,),
                   "trials": (str, type(None)), "family": (str,)}
    #: the most quadrature nodes a GLMM request may ask for (bounds the site's work)
    MAX_QUADRATURE_NODES = 64

    def _mixed_args(self, args, record, what, n_args):
        """``(site rows, design, other arguments)`` of a mixed model's request, the
        design checked and its smallest group raised to the site's ``min_rows``."""
        site, values = self._stats_args(args, record, what, n_args)
        design = values[0]
        if not isinstance(design, dict) or not set(design) <= set(self._MIXED_KEYS) or any(
                not isinstance(v, self._MIXED_KEYS[k]) for k, v in design.items()):
            raise Refused("message", f"a malformed design of {what}")
        if not all(isinstance(c, int) and c >= 0 for c in design.get("re_columns", [])):
            raise Refused("message", f"a malformed design of {what}")
        # a group's sums over fewer rows than the site's min_rows are not released
        floor = max(int(design.get("min_group_rows", 0)), self.policy.min_rows)
        return site, dict(design, min_group_rows=floor), values[1:]

    def _on_design(self, args, record, what, site_function):
        """``site_function(rows, design)`` of a request that carries a design only."""
        site, design, _ = self._mixed_args(args, record, what, 1)
        return site_function(site, design)

    @serves("mixed.totals")
    def _op_mixed_totals(self, analyst, args, record):
        from ..mixed._site import site_totals

        return self._on_design(args, record, "a mixed model's totals", site_totals)

    @serves("mixed.group_blocks")
    def _op_mixed_group_blocks(self, analyst, args, record):
        from ..mixed._site import site_group_blocks

        return self._on_design(args, record, "a mixed model's group sums", site_group_blocks)

    @serves("mixed.site_fit")
    def _op_mixed_site_fit(self, analyst, args, record):
        from ..mixed._site import site_ols

        return self._on_design(args, record, "a site's own fit", site_ols)

    @serves("mixed.glmm_groups")
    def _op_mixed_glmm_groups(self, analyst, args, record):
        from ..mixed._glmm_site import site_glmm_groups

        return self._on_design(args, record, "a GLMM's groups", site_glmm_groups)

    @serves("mixed.glmm_totals")
    def _op_mixed_glmm_totals(self, analyst, args, record):
        from ..mixed._glmm_site import site_glmm_totals

        return self._on_design(args, record, "a GLMM's totals", site_glmm_totals)

    @serves("mixed.glmm_terms")
    def _op_mixed_glmm_terms(self, analyst, args, record):
        from ..mixed._glmm_site import site_glmm_terms

        site, design, (params, n_nodes) = self._mixed_args(args, record, "a GLMM's terms", 3)
        if not isinstance(n_nodes, int) or not 1 <= n_nodes <= self.MAX_QUADRATURE_NODES:
            raise Refused("max_local_iterations", f"a GLMM's quadrature takes 1 to "
                                                  f"{self.MAX_QUADRATURE_NODES} nodes")
        return site_glmm_terms(site, design, _parameters(params), n_nodes)

    @serves("mixed.glmm_modes")
    def _op_mixed_glmm_modes(self, analyst, args, record):
        from ..mixed._glmm_site import site_glmm_modes

        site, design, (params,) = self._mixed_args(args, record, "a GLMM's modes", 2)
        return site_glmm_modes(site, design, _parameters(params))

    @serves("formula.levels")
    def _op_formula_levels(self, analyst, args, record):
        from ..formula._design import site_levels

        site, (columns, min_count) = self._stats_args(args, record, "a formula's levels", 2)
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            raise Refused("message", "a formula's levels name columns")
        self._check_level_names(site, columns)
        return site_levels(site, columns, max(int(min_count), self.policy.min_level_count))

    @serves("formula.extremes")
    def _op_formula_extremes(self, analyst, args, record):
        from ..formula._design import site_extremes

        site, (columns,) = self._stats_args(args, record, "a spline's range", 1)
        if not self.policy.allow_exact_quantiles:
            raise Refused("allow_exact_quantiles", "a spline's boundary knots are single "
                                                   "rows' values (the minimum and maximum)")
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            raise Refused("message", "a spline's range names columns")
        return site_extremes(site, columns)

    @serves("evaluate.concordance")
    def _op_evaluate_concordance(self, analyst, args, record):
        from ..survival._site import site_concordance

        site, (coef, edges) = self._stats_args(args, record, "a concordance index", 2)
        out = site_concordance(site, np.asarray(coef, dtype=float), edges)
        if "rows" in out and not self.policy.allow_event_times:
            # a histogram cell of one row places that row's time and risk score in a
            # small box: the pairs across sites are left out instead
            small = [h for h in (out["rows"], out["events"])
                     if np.any((h > 0) & (h < self.policy.min_level_count))]
            if small:
                del out["rows"], out["events"]
        return out

    @serves("evaluate.response_sums")
    def _op_evaluate_response_sums(self, analyst, args, record):
        from ..linear_model._glm import site_response_sums

        site, _ = self._rows(args, record, "a GLM score")
        return site_response_sums(site)

    @serves("evaluate.deviances")
    def _op_evaluate_deviances(self, analyst, args, record):
        from ..linear_model._glm import site_deviances
        from ..linear_model._inference import Family

        site, _ = self._rows(args, record, "a GLM score")
        model = args.get("model")
        if not isinstance(model, dict) or not isinstance(model.get("family"), Family):
            raise Refused("message", "a GLM score needs a model with its family")
        return site_deviances(site, _GLMModel.from_message(model), float(args.get("ybar")))

    @serves("evaluate.score")
    def _op_evaluate_score(self, analyst, args, record):
        from ..data.site import site_score_terms

        site, n = self._rows(args, record, "a score")
        model = args.get("model")
        glm = isinstance(model, dict) and model.get("family") is not None
        return site_score_terms(site, (_GLMModel if glm else _LinearModel).from_message(model))


def _transformer(args, check_validate=True):
    """The transformer and its row check, as the analyst named them (allow-listed)."""
    from ..preprocessing import FedOneHotEncoder, FedSimpleImputer, FedStandardScaler
    from ..preprocessing._feature_scaler import FeatureScaler
    from .codec import allowed_functions

    estimator, validate = args.get("estimator"), args.get("validate")
    if not isinstance(estimator, (FedOneHotEncoder, FedSimpleImputer, FedStandardScaler,
                                  FeatureScaler)):
        raise Refused("message", "a preprocessing operation needs one of skfed's transformers")
    if check_validate and validate not in allowed_functions().values():
        raise Refused("message", "not one of skfed's row checks")
    return estimator, validate


def _same(value, missing):
    if isinstance(missing, float) and missing != missing:
        return value != value
    return value == missing


class _LinearModel:
    """A linear model's arrays, rebuilt at the site for an aggregate score.

    The analyst sends ``coef``, ``intercept`` and, for a classifier,
    ``classes``; the site computes predictions on its rows and releases
    only the score's sums (:func:`~skfed.data.site.site_score_terms`).
    """

    def __init__(self, coef, intercept, classes):
        self.coef_, self.intercept_, self.classes_ = coef, intercept, classes

    @classmethod
    def from_message(cls, model):
        if not isinstance(model, dict):
            raise Refused("message", "evaluate.score needs a model")
        coef = np.asarray(model.get("coef"), dtype=np.float64)
        intercept = np.asarray(model.get("intercept", 0.0), dtype=np.float64)
        classes = model.get("classes")
        if classes is not None and not isinstance(classes, np.ndarray):
            raise Refused("message", "classes must be an array")
        return cls(coef, intercept, classes)

    def __sklearn_tags__(self):
        from sklearn.utils import Tags, TargetTags

        kind = "regressor" if self.classes_ is None else "classifier"
        return Tags(estimator_type=kind, target_tags=TargetTags(required=True))

    def predict(self, X):
        X = numeric_matrix(SiteData(None, X))
        scores = X @ np.atleast_2d(self.coef_).T + self.intercept_
        if self.classes_ is None:
            return scores.ravel() if np.ndim(self.coef_) == 1 else scores
        if scores.shape[1] == 1:
            return self.classes_[(scores[:, 0] > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]


class _GLMModel(_LinearModel):
    """A GLM's arrays and family, rebuilt at the site for its deviance (D^2 score)."""

    @classmethod
    def from_message(cls, model):
        from ..linear_model._inference import Family

        out = super().from_message(model)
        if not isinstance(model.get("family"), Family):
            raise Refused("message", "a GLM's score needs its family")
        out.family_ = model["family"]
        return out

    def _inference_family(self):
        return self.family_

    def predict(self, X, offset=None):
        eta = numeric_matrix(SiteData(None, X)) @ self.coef_.ravel() + float(
            np.ravel(self.intercept_)[0])
        if offset is not None:
            eta = eta + offset
        link = self.family_.link
        return np.exp(eta) if link == "log" else (
            1.0 / (1.0 + np.exp(-eta)) if link == "logit" else eta)


def _cut_points(cuts):
    """A time grid's cut points: finite and increasing (an unsorted grid would place the
    small-count rule's intervals elsewhere than the times it releases), or a refusal."""
    try:
        values = np.asarray(cuts, dtype=np.float64)
    except (TypeError, ValueError):
        raise Refused("message", "a time grid's cut points are numbers") from None
    if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(np.diff(values) <= 0):
        raise Refused("message", "a time grid's cut points are finite and increasing")
    return values


def _parameters(params):
    """A broadcast parameter vector: finite floats, or a refusal."""
    values = np.asarray(params, dtype=object)
    if values.ndim != 1 or not all(isinstance(v, (int, float, np.floating, np.integer))
                                   and not isinstance(v, bool) for v in values):
        raise Refused("message", "a malformed parameter vector")
    values = values.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise Refused("message", "a parameter vector with NaN or infinity")
    return values
