"""The site operations of a federated boosting fit (:mod:`skfed.ensemble`).

``FedHistGradientBoostingRegressor`` and ``...Classifier`` reach a site
service through the operations ``boosting.*``: each runs one site function
of :mod:`skfed.ensemble._site` on the rows a dataset reference names, after
:class:`~skfed.sites.host.SiteHost` has checked who asks, and after the
checks here, in this order:

1. protection (rule ``require``): under ``privacy=SecureAggregation()`` the
   fit's totals, bin counts, residual counts, histograms and losses reach the
   site inside masked sums (``sums.masked``, :mod:`.masked_operations`): a
   site that requires secure aggregation serves those and the schema (counts
   only), nothing plain. A site that requires differential privacy serves
   no boosting request: the pooled trees are exact functions of every node's
   histogram, and skfed does not offer noisy trees (the noise, its budget
   over every node of every tree, and its effect on the splits would make
   another model than scikit-learn's, with no pooled reference to test);
2. the request's form (rule ``message``, :mod:`skfed.ensemble._wire`): every
   key, dtype, shape and range of its context, model, nodes, sampling and
   probes, with bounded sizes, before any row is read;
3. the rows' rules: ``allow_exact_quantiles`` for anything that counts rows
   at values the analyst sends (the bin search, the residuals' quantiles,
   and bins at continuous thresholds: counts per bin at thresholds of the
   analyst's choosing are the exact quantile search); ``min_level_count``
   for the levels of a categorical column and the classes; ``min_rows`` for
   every node a histogram or a residual count is computed from, and for its
   sibling (the parent's sums minus the node's), unless the reply travels
   inside a masked sum (only the sum over every site leaves); ``max_local_iterations``
   for the trees of the model a request carries.

Per-row predictions (``site_output``) are not an operation: a model is scored
at the site (``boosting.score``), which releases the score's sums only.
See ``docs/data-officers.md``. A mixin of the host.
"""

import numpy as np

from ..data.site import SiteData
from .operations import serves
from .policy import Refused


#: dataset references whose rows a site keeps between boosting requests
_KEPT_DATASETS = 4


def _one_at_a_time(handler):
    """A boosting handler run under the host's boosting lock: the rows kept between
    requests (and their cache) serve one request at a time."""
    import functools

    @functools.wraps(handler)
    def run(self, analyst, args, record):
        with self._boosting_lock:
            return handler(self, analyst, args, record)
    return run


class EnsembleOperations:
    """The host's boosting operations (see the module docstring)."""

    # -- the checks shared by the operations --------------------------------------
    def _boosting_args(self, args, record, what, n_args, counts_only=False):
        """``(site rows, arguments)`` of a boosting request, refused first where the
        policy requires a protection the request does not have: differential privacy
        always (see the module), secure aggregation unless the reply travels inside a
        masked sum (or releases counts only)."""
        required = set(self.policy.require)
        if record.get("masked") or counts_only:
            required.discard("secure_aggregation")
        if "differential_privacy" in required:
            raise Refused("require", "this site requires differential privacy, which skfed's "
                                     "boosting does not offer: the pooled trees are exact "
                                     "functions of every node's histogram, and noise would "
                                     "change the trees (boosting is not served here)")
        if required:
            raise Refused("require", "this site requires secure aggregation: a boosting fit's "
                                     "sums are served here only inside masked sums (fit with "
                                     "privacy=SecureAggregation())")
        return self._kept_rows(args, record, what), self._positional(args, what, n_args)

    def _kept_rows(self, args, record, what):
        """The request's rows, kept between the requests of one analyst on one dataset
        reference (the last few): the fit's cache at the site (its rows' bins, the
        predictions of the trees so far) then lasts the fit, not one request. The
        policy is fixed for the service's life, so the checks the first request passed
        hold for the same analyst and reference; the audit line is the same."""
        import hashlib

        from .codec import encode

        key = (record["analyst"], hashlib.sha256(encode(args.get("dataset"))).hexdigest())
        with self._lock:
            kept = self._kept_rows_by_key.get(key)
            if kept is not None:
                self._kept_rows_by_key.move_to_end(key)
        if kept is not None:
            site, fields = kept
            record.update(fields)
            return site
        site, _ = self._rows(args, record, what)
        with self._lock:
            self._kept_rows_by_key[key] = (site, {k: record[k] for k in
                                                  ("dataset", "rows", "columns")})
            while len(self._kept_rows_by_key) > _KEPT_DATASETS:
                self._kept_rows_by_key.popitem(last=False)
        return site

    @staticmethod
    def _wire(check, *values):
        """``check(*values)`` of :mod:`skfed.ensemble._wire`; its complaint is a refusal."""
        from ..ensemble._wire import WireError

        try:
            return check(*values)
        except WireError as exc:
            raise Refused("message", f"a malformed boosting request: {exc}") from None

    def _boosting_context(self, site, context, *, binned):
        """The fit's context checked: its form, its categorical columns' levels and, once
        binned, the rule on continuous thresholds."""
        from ..ensemble._wire import check_context

        self._wire(lambda: check_context(context, site.X.shape[1], binned=binned))
        categorical = [int(c) for c, is_cat in zip(context["order"], context["categorical"])
                       if is_cat]
        self._check_boosting_levels(site, categorical)
        if binned and any(t.size for t, is_cat in zip(context["thresholds"],
                                                      context["categorical"]) if not is_cat):
            if context["sketch"] is None or self.policy.allow_exact_quantiles:
                self._check_exact_quantiles("a boosting request bins continuous features at "
                                            "thresholds the analyst sends (counts per bin at "
                                            "thresholds of the analyst's choosing are the "
                                            "exact quantile search; binning=min_rows bins at "
                                            "the sites' sketches)")
            else:
                self._check_sketch(context)
        return context

    def _check_sketch(self, context):
        """Continuous thresholds without ``allow_exact_quantiles``: they must be those the
        sites' signed sketches give (every sketch signed by a distinct site of the
        federation, this site's own among them), so no analyst chose them."""
        import hashlib

        from ..ensemble._sketch import check_sketch_thresholds, sketch_payload
        from .guard import check_site_signature

        entries = context["sketch"]["sites"]
        digest = hashlib.sha256()
        for entry in entries:
            digest.update(sketch_payload(entry.get("site"), entry.get("dataset"), entry))
        for t in context["thresholds"]:
            digest.update(np.ascontiguousarray(t).tobytes())
        if digest.digest() in self._checked_sketches:
            return
        sites = [entry.get("site") for entry in entries]
        if self.name not in sites or len(set(sites)) != len(sites):
            raise Refused("allow_exact_quantiles", "the sketches must include this site's "
                                                   "own and come from distinct sites")
        ca = self.config.ca.read_bytes()
        for entry in entries:
            try:
                check_site_signature(ca, entry["certificate"], entry["signature"],
                                     sketch_payload(entry["site"], entry["dataset"], entry),
                                     entry["site"])
            except (ValueError, TypeError, KeyError) as exc:
                raise Refused("message", f"a sketch that its site did not sign "
                                         f"({type(exc).__name__}): a forged sketch") from None
        problem = check_sketch_thresholds(context)
        if problem is not None:
            raise Refused("allow_exact_quantiles", f"{problem}: the analyst chose them")
        if len(self._checked_sketches) > 1024:  # a bounded memory of verified fits
            self._checked_sketches.clear()
        self._checked_sketches.add(digest.digest())

    def _check_exact_quantiles(self, why):
        if not self.policy.allow_exact_quantiles:
            raise Refused("allow_exact_quantiles", f"{why}: it releases single rows' values")

    def _check_boosting_levels(self, site, columns):
        """Each level of a categorical column binned here is held by at least
        ``min_level_count`` of this site's rows (a bin, and a released level name)."""
        import pandas as pd

        floor = self.policy.min_level_count
        names = site.columns()
        X = site.X
        for j in columns:
            values = X.iloc[:, j] if hasattr(X, "iloc") else np.asarray(X)[:, j]
            counts = pd.Series(np.asarray(values, dtype=object)).value_counts(dropna=True)
            if counts.size and counts.min() < floor:
                where = repr(str(names[j])[:64]) if names else f"{j}"
                raise Refused("min_level_count", f"a level of categorical column {where} is "
                                                 f"held by fewer than {floor} rows here")

    def _boosting_model(self, model, context):
        """The model's form, and its trees within ``max_local_iterations``."""
        from ..ensemble._wire import check_model

        n_trees = self._wire(check_model, model, context)
        most = self.policy.max_local_iterations
        if n_trees > most:
            raise Refused("max_local_iterations", f"a model of {n_trees} trees asks for more "
                                                  f"than this site's {most} iterations")
        return model

    def _check_node_rows(self, site, context, nodes, record):
        """No node's sums from fewer than ``min_rows`` rows here (0 rows is no row): the
        node's own, and its sibling's, which the parent's sums minus the node's give.
        Inside a masked sum the rule does not apply: only the sum over every site of
        the session leaves, never this site's node."""
        from ..ensemble._site import node_rows, prepared, unpack_nodes

        if record.get("masked"):
            return

        binned = prepared(site, context).binned
        positive = site.weights() > 0
        floor, missing_bin = self.policy.min_rows, context["max_bins"]
        for _, steps, _ in unpack_nodes(nodes):
            if not steps:  # the root: every row of the request (min_rows checked)
                continue
            parent = node_rows(binned, steps[:-1], missing_bin)
            node = node_rows(binned, steps[-1:], missing_bin, parent)
            for rows in (node, parent & ~node):
                if rows.any() and np.count_nonzero(rows & positive) < floor:
                    # the count itself is not said: a refusal is one bit, not a number
                    raise Refused("min_rows", "a node of the tree, or its sibling, would "
                                              f"be computed from fewer than {floor} rows "
                                              "here (a deeper tree than this site's rows "
                                              "allow; raise min_samples_leaf or lower "
                                              "max_depth)")

    # -- the operations ---------------------------------------------------------
    @serves("boosting.schema")
    @_one_at_a_time
    def _op_boosting_schema(self, analyst, args, record):
        from ..ensemble._site import site_schema
        from ..ensemble._wire import check_schema_request

        site, (request,) = self._boosting_args(args, record, "a boosting schema", 1,
                                               counts_only=True)
        self._wire(check_schema_request, request, site.X.shape[1])
        if isinstance(request["categorical"], str):  # the columns of category dtype
            X = site.X
            wanted = [j for j in range(X.shape[1]) if hasattr(X, "iloc")
                      and str(X.iloc[:, j].dtype) == "category"]
        else:
            wanted = np.flatnonzero(request["categorical"]).tolist()
        self._check_boosting_levels(site, wanted)
        out = site_schema(site, request)
        counts = out.get("class_counts")
        if counts is not None and np.min(counts) < self.policy.min_level_count:
            raise Refused("min_level_count", "a class of the target has fewer than "
                                             f"{self.policy.min_level_count} rows here")
        return out

    @serves("boosting.totals")
    @_one_at_a_time
    def _op_boosting_totals(self, analyst, args, record):
        from ..ensemble._site import site_totals

        site, (context,) = self._boosting_args(args, record, "a boosting fit's totals", 1)
        return site_totals(site, self._boosting_context(site, context, binned=False))

    @serves("boosting.sketch")
    @_one_at_a_time
    def _op_boosting_sketch(self, analyst, args, record):
        from ..ensemble._sketch import site_sketch, sketch_payload
        from .guard import sign_release

        site, (context, rows) = self._boosting_args(args, record, "a boosting sketch", 2)
        self._boosting_context(site, context, binned=False)
        floor = self.policy.min_rows
        if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows != floor:
            # one group size only: two sizes would give single values by difference
            raise Refused("min_rows", f"this site sketches its values in groups of its "
                                      f"min_rows = {floor} rows: fit with binning={floor}")
        sketch = site_sketch(site, context, int(rows))
        dataset = str(args["dataset"]["name"])
        signature = sign_release(self.config.key.read_bytes(),
                                 sketch_payload(self.name, dataset, sketch))
        return dict(sketch, site=self.name, dataset=dataset,
                    certificate=self.config.cert.read_bytes(), signature=signature)

    @serves("boosting.bin_counts")
    @_one_at_a_time
    def _op_boosting_bin_counts(self, analyst, args, record):
        from ..ensemble._site import site_bin_counts
        from ..ensemble._wire import check_probes, check_sampling

        site, (context, sampling, probes, starts) = self._boosting_args(
            args, record, "a boosting fit's bin search", 4)
        self._check_exact_quantiles("the exact bin thresholds are the pooled quantiles or "
                                    "distinct values of each feature, found from counts at "
                                    "values the analyst sends (binning=min_rows bins at the "
                                    "sites' sketches instead)")
        self._boosting_context(site, context, binned=False)
        features = self._wire(check_sampling, sampling, context, site.site, site.n_samples)
        self._wire(check_probes, probes, starts, len(features))
        return site_bin_counts(site, context, sampling, probes, starts)

    @serves("boosting.residual_counts")
    @_one_at_a_time
    def _op_boosting_residual_counts(self, analyst, args, record):
        from ..ensemble._site import site_residual_counts
        from ..ensemble._wire import check_nodes, check_probes

        site, (context, model, paths, probes, starts) = self._boosting_args(
            args, record, "a boosting fit's leaf quantiles", 5)
        self._check_exact_quantiles("a leaf's quantile of the residuals y - raw is found "
                                    "from counts at values the analyst sends")
        self._boosting_context(site, context, binned=True)
        if model is not None:
            self._boosting_model(model, context)
        n_paths = self._wire(lambda: check_nodes(paths, context, with_loss=False))
        self._wire(check_probes, probes, starts, n_paths)
        self._check_node_rows(site, context, paths, record)
        return site_residual_counts(site, context, model, paths, probes, starts)

    @serves("boosting.histograms")
    @_one_at_a_time
    def _op_boosting_histograms(self, analyst, args, record):
        from ..ensemble._site import site_histograms
        from ..ensemble._wire import check_nodes

        site, (context, model, request) = self._boosting_args(
            args, record, "a boosting fit's histograms", 3)
        self._boosting_context(site, context, binned=True)
        self._boosting_model(model, context)
        self._wire(lambda: check_nodes(request, context, with_loss=True))
        self._check_node_rows(site, context, request, record)
        return site_histograms(site, context, model, request)

    @serves("boosting.loss")
    @_one_at_a_time
    def _op_boosting_loss(self, analyst, args, record):
        from ..ensemble._site import site_loss

        site, (context, model) = self._boosting_args(args, record, "a boosting fit's loss", 2)
        self._boosting_context(site, context, binned=True)
        return site_loss(site, context, self._boosting_model(model, context))

    @serves("boosting.score")
    @_one_at_a_time
    def _op_boosting_score(self, analyst, args, record):
        from ..ensemble._site import site_score_terms
        from ..ensemble._wire import check_score_message

        site, (message,) = self._boosting_args(args, record, "a boosting model's score", 1)
        context, model = self._wire(check_score_message, message)
        self._boosting_context(site, context, binned=True)
        self._boosting_model(model, context)
        return site_score_terms(site, _BoostingModel(site.site, context, model))


class _BoostingModel:
    """A fitted boosting model's arrays, rebuilt at the site for an aggregate score.

    Its predictions are those of the analyst's estimator (each row binned at
    the model's thresholds and walked down the packed trees, as scikit-learn
    does during fit); they never leave the site: only the score's sums do
    (:func:`skfed.ensemble._site.site_score_terms`).
    """

    def __init__(self, site, context, model):
        self.site, self.context, self.model = site, context, model
        if context["classes"] is not None:
            self.classes_ = context["classes"]

    def _raw(self, X):
        from ..ensemble._site import bin_features, model_features
        from ..ensemble._tree import packed_leaf_values, unpack_trees

        context = self.context
        features = model_features(SiteData(self.site, X), context)
        binned = bin_features(features, context["thresholds"], context["max_bins"])
        baseline = self.model["baseline"]
        raw = np.zeros((binned.shape[0], baseline.size), order="F")
        raw += baseline.reshape(1, -1)
        for t, tree in enumerate(unpack_trees(self.model["trees"])):
            raw[:, t % baseline.size] += packed_leaf_values(tree, binned, context["max_bins"])
        return raw

    def predict(self, X):
        """The model's predictions of ``X`` (values, or class labels)."""
        from ..ensemble._losses import make_loss

        raw = self._raw(X)
        context = self.context
        if context["classes"] is None:
            loss = make_loss(context["loss"], quantile=context["quantile"],
                             weighted=context["weighted"])
            return loss.link.inverse(raw.ravel())
        encoded = (raw.ravel() > 0).astype(int) if raw.shape[1] == 1 else np.argmax(raw, 1)
        return self.classes_[encoded]
