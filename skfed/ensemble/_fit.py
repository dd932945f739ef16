"""One federated boosting fit, on the server: setup, bins, baseline, trees.

:class:`BoostingRun` follows ``BaseHistGradientBoosting.fit`` of
scikit-learn 1.9 step by step, with every number about the rows summed at the
sites through the federation session:

1. the random seeds, drawn as scikit-learn draws them (``_random_seed``, then
   the feature-subsampling generator's seed);
2. early stopping's held-out rows, drawn by each site from its own rows
   (:meth:`FederatedDataset.holdout`);
3. the schema (per site: categorical columns' levels, class labels and
   counts) and the pooled totals (missing values, weights, target sums);
4. the bin thresholds (:mod:`._binning`);
5. the baseline (``fit_intercept_only`` on pooled sums, or on exact pooled
   quantiles for the absolute error and quantile losses);
6. the iterations: the trees of an iteration grown together
   (:func:`._grower.grow_iteration`), leaves refitted for the absolute error
   and quantile losses, losses pooled for ``train_score_``,
   ``validation_score_`` and ``history_``, and scikit-learn's stopping rule.

The fitted model equals ``HistGradientBoosting*`` fitted on the pooled rows
(sites in order, each site's rows in its order); with early stopping, fitted on
the pooled training rows with the held-out rows passed as ``X_val``, ``y_val``
(and ``sample_weight_val``).
"""

import contextlib
import time
from numbers import Integral

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.validation import _check_categorical_features

from ..federation.session import FederationSession
from ._binning import SUBSAMPLE, federated_thresholds
from ._compiled_split import compiled_splitter
from ._grower import TreeReplay, grow_iteration, make_predictor
from ._history import BoostingHistory
from ._losses import QUANTILE_LOSSES, baseline_from_sums, make_loss
from ._model_chain import ChainedModel, FitWire
from ._pooled_sites import PooledSites
from ._quantiles import QuantileRefit, pooled_quantile_baseline
from ._site import (pack_nodes, site_histograms, site_loss, site_schema, site_sketch,
                    site_totals)
from ._site_rows import node_cells
from ._sketch import sketch_thresholds
from ._splitting import Splitter


def _column_name(names, j):
    return repr(names[j]) if names is not None else f"at index {j}"


def union_levels(level_sets, *, as_float=True):
    """The sorted union of the sites' levels of one column (``OrdinalEncoder``'s order;
    ``as_float=False`` keeps integer labels integers, as ``LabelEncoder``)."""
    sets = [np.asarray(s) for s in level_sets if s is not None and len(s)]
    if not sets:
        return np.empty(0)
    if all(s.dtype.kind in "fiub" for s in sets):
        return np.unique(np.concatenate([s.astype(np.float64) if as_float else s
                                         for s in sets]))
    if all(s.dtype.kind == "U" for s in sets):
        return np.unique(np.concatenate(sets))
    return np.asarray(sorted(set().union(*[s.tolist() for s in sets])), dtype=object)


class BoostingRun:
    """The server's side of one fit of ``estimator`` on ``dataset``."""

    #: whether sites simulated in this process compute a round's histograms in one
    #: pass over their rows (:mod:`._pooled_sites`); False: one pass per site, as on
    #: Dask and at site services (tests and benchmarks compare the two)
    pools_sites = True

    def __init__(self, estimator, dataset):
        self.est, self.dataset = estimator, dataset
        self.classifier = hasattr(estimator, "class_weight")
        self.val_context = None  # built once: the sites keep it by its name

    def fit(self):
        est = self.est
        self._seeds()
        self._hold_out()
        with contextlib.ExitStack() as stack:
            protections = self._protect(stack)
            self._schema()
            self._context()
            self._totals()
            self._bins()
            self._baseline()
            self._iterate()
        est.history_.setup_rounds = self.session.ledger.rounds("setup")
        est.history_.setup_bytes = self.session.ledger.bytes("setup")
        if protections:
            record = protections[0].privacy_record()
            record["masked_sums"] = sum(p.exchanges_ for p in protections)
            est.history_.privacy = record
        return est

    def _protect(self, stack):
        """Under secure aggregation, the sites agree the keys of each session's masked
        sums (the training rows, and the held-out rows apart), closed with ``stack``."""
        from ..privacy.masked_sums import masked

        if self.est.privacy is None:
            return []
        return [stack.enter_context(masked(session, self.est.privacy))
                for session in (self.session, self.val_session) if session is not None]

    # -- 1, 2: seeds and held-out rows ---------------------------------------
    def _seeds(self):
        est = self.est
        rng = check_random_state(est.random_state)
        est._random_seed = rng.randint(np.iinfo(np.uint32).max, dtype="u8")
        feature_seed = rng.randint(np.iinfo(np.uint32).max, dtype="u8")
        est._feature_subsample_rng = np.random.default_rng(feature_seed)

    def _hold_out(self):
        est, dataset = self.est, self.dataset
        n = int(dataset.n_samples.sum())
        est.do_early_stopping_ = (n > 10_000 if est.early_stopping == "auto"
                                  else bool(est.early_stopping))
        self.train, self.val = dataset, None
        fraction = est.validation_fraction
        if est.do_early_stopping_ and fraction is not None:
            share = fraction / n if isinstance(fraction, Integral) else fraction
            self.train, self.val = dataset.holdout(share, random_state=int(est._random_seed))
        self.session = FederationSession.for_dataset(self.train)
        self.val_session = None if self.val is None else FederationSession.for_dataset(
            self.val)
        # the requests that carry the fit's context and model name what the sites hold
        self.wire = FitWire(self.session)
        # sites simulated here: the trees' sums in one pass over their rows
        pooled = PooledSites.of(self.train, self.est.privacy, self.wire) \
            if self.pools_sites else None
        self.sums = self.wire if pooled is None else pooled
        self.val_wire = None if self.val is None else FitWire(self.val_session)

    # -- 3: schema, context, totals ------------------------------------------
    def _schema(self):
        est, names = self.est, self.train.columns
        n_columns = self.train.n_features
        by_dtype = isinstance(est.categorical_features, str)
        # no categorical feature (scikit-learn's None) is sent as a mask of False: the
        # sites' schema check takes one flag per column
        declared = None if by_dtype else self._categorical_mask(None)
        request = {"categorical": "from_dtype" if by_dtype else (
                       np.zeros(n_columns, dtype=bool) if declared is None else declared),
                   "task": "classification" if self.classifier else "regression"}
        replies = self.session.per_site(site_schema, request, phase="setup")
        if by_dtype:
            flags = [tuple(r["category_dtype"]) for r in replies]
            if len(set(flags)) > 1:
                raise ValueError("the sites disagree on which columns have a categorical "
                                 "dtype; give categorical_features explicitly.")
        mask = self._categorical_mask(np.asarray(flags[0])) if by_dtype else declared
        est.is_categorical_ = mask
        self.mask = np.zeros(n_columns, dtype=bool) if mask is None else mask
        self._check_text_columns()
        self.categories = {}
        for j in np.flatnonzero(self.mask):
            levels = union_levels([r["levels"][j] for r in replies])
            if levels.size > est.max_bins:
                raise ValueError(f"Categorical feature {_column_name(names, j)} is expected "
                                 f"to have a cardinality <= {est.max_bins} but actually has "
                                 f"a cardinality of {levels.size} across the sites.")
            self.categories[j] = levels
        self.schema = replies
        if self.classifier:
            self._classes(replies)

    def _categorical_mask(self, dtype_flags):
        """scikit-learn's ``_check_categorical_features`` on a stand-in of the columns."""
        import pandas as pd

        names, n_columns = self.train.columns, self.train.n_features
        spec = self.est.categorical_features
        if dtype_flags is not None:
            spec = dtype_flags if dtype_flags.any() else None
        if names is None:
            stand_in = np.empty((0, n_columns))
        else:
            stand_in = pd.DataFrame({c: pd.Series([], dtype="float64") for c in names})
        return _check_categorical_features(stand_in, spec)

    def _check_text_columns(self):
        kinds = self.train.metadata[0]["kinds"]
        for j, kind in enumerate(kinds):
            if kind == "text" and not self.mask[j]:
                raise ValueError(f"column {_column_name(self.train.columns, j)} is not "
                                 "numeric: declare it in categorical_features (or give it a "
                                 "pandas 'category' dtype).")

    def _classes(self, replies):
        est = self.est
        est.classes_ = union_levels([r["classes"] for r in replies], as_float=False)
        counts = np.zeros(len(est.classes_))
        for r in replies:
            counts[np.searchsorted(est.classes_, r["classes"])] += r["class_counts"]
        self.class_counts = counts
        est.n_trees_per_iteration_ = 1 if len(est.classes_) <= 2 else len(est.classes_)
        if est.monotonic_cst is not None and est.n_trees_per_iteration_ != 1:
            raise ValueError("monotonic constraints are not supported for multiclass "
                             "classification.")
        self.class_weight = None
        if est.class_weight is not None:
            stand_in = np.repeat(est.classes_, counts.astype(np.int64))
            self.class_weight = compute_class_weight(est.class_weight, classes=est.classes_,
                                                     y=stand_in)

    def _context(self):
        est = self.est
        order = np.concatenate([np.flatnonzero(self.mask), np.flatnonzero(~self.mask)])
        self.order = order
        self.weighted = self.class_weight is not None if self.classifier else False
        self.weighted |= any(d["has_weights"] for d in self.train.metadata)
        self.context = {
            "order": order, "categorical": self.mask[order],
            "categories": [self.categories.get(int(j), np.empty(0)) for j in order],
            "names": self.train.columns, "thresholds": None, "sketch": None,
            "max_bins": est.max_bins,
            "loss": "log_loss" if self.classifier else est.loss,
            "quantile": None if self.classifier else est.quantile,
            "classes": est.classes_ if self.classifier else None,
            "class_weight": self.class_weight if self.classifier else None,
            "weighted": self.weighted}
        if not self.classifier:
            est.n_trees_per_iteration_ = 1

    def _totals(self):
        est = self.est
        self.totals = self.wire.sum(site_totals, self.context, phase="setup")
        if not self.totals["w"] > 0:
            raise ValueError("the sample weights of the training rows sum to zero.")
        if not self.classifier and est.loss == "poisson" and not self.totals["y"] > 0:
            raise ValueError("loss='poisson' requires non-negative y and sum(y) > 0.")
        self.has_missing = self.totals["missing"] > 0
        n_classes = len(est.classes_) if self.classifier else None
        self.loss = make_loss(self.context["loss"], n_classes=n_classes,
                              quantile=self.context["quantile"], weighted=self.weighted)
        est._loss = self.loss

    # -- 4, 5: bins and baseline ---------------------------------------------
    def _bins(self):
        est, context = self.est, self.context
        continuous = np.flatnonzero(~context["categorical"])
        sampling = self._sampling(int(self.train.n_samples.sum()))
        found, rounds = {}, 0
        if continuous.size and est.binning != "exact":
            found, rounds = self._sketch_bins(continuous), 1
        elif continuous.size:
            found, rounds = federated_thresholds(self.wire, context, features=continuous,
                                                 max_bins=est.max_bins, sampling=sampling)
        thresholds = [np.arange(len(cats), dtype=np.float64) if is_cat else found[f]
                      for f, (is_cat, cats) in enumerate(zip(context["categorical"],
                                                             context["categories"]))]
        # a new context object (never one changed in place): the sites' state follows it
        self.context = context = dict(self.context, thresholds=thresholds)
        est._context = context
        est.bin_thresholds_ = thresholds
        est.n_bins_non_missing_ = np.array(
            [len(t) + (0 if is_cat else 1) for t, is_cat in zip(thresholds,
                                                                 context["categorical"])],
            dtype=np.uint32)
        est.has_missing_values_ = self.has_missing
        est.binning_exact_ = est.binning == "exact" and not (
            sampling["mode"] == "draw" and self.weighted)
        self.binning_rounds = rounds

    def _sketch_bins(self, continuous):
        """The continuous features' thresholds from the sites' coarsened sketches
        (:mod:`._sketch`); the sketches then travel in the context, so that each site
        can check the thresholds it bins at."""
        rows = int(self.est.binning)
        sketches = self.wire.per_site(site_sketch, self.context, rows, phase="setup")
        self.context = dict(self.context, sketch={"rows": rows, "sites": sketches})
        return dict(zip(continuous, sketch_thresholds(sketches, self.est.max_bins)))

    def _sampling(self, n_train):
        """How the sites count their rows for the thresholds (scikit-learn's
        subsample replayed at each site above ``SUBSAMPLE`` rows)."""
        if n_train <= SUBSAMPLE:
            return {"mode": "weighted" if self.weighted else "all"}
        sizes = np.asarray(self.train.n_samples, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        labels = [str(s) for s in self.train.sites]
        spec = {"mode": "draw", "seed": int(self.est._random_seed), "n_total": n_train,
                "size": SUBSAMPLE, "offsets": dict(zip(labels, starts.tolist()))}
        if self.weighted:
            weights = np.array([self._site_weight(r) for r in self.schema])
            total = weights.sum()
            shares = weights / total
            spec.update(weight_total=float(total), p_total=float(shares.sum()),
                        weight_offsets=dict(zip(labels, np.concatenate(
                            [[0.0], np.cumsum(shares)[:-1]]).tolist())))
        return spec

    def _site_weight(self, reply):
        if self.classifier and self.class_weight is not None:
            at = np.searchsorted(self.est.classes_, reply["classes"])
            return float(reply["class_weight_sums"] @ self.class_weight[at])
        return reply["weight_sum"]

    def _baseline(self):
        if self.context["loss"] in QUANTILE_LOSSES:
            baseline, _ = pooled_quantile_baseline(self.wire, self.context, self.loss)
        else:
            baseline = baseline_from_sums(self.loss, self.totals)
        self.est._baseline_prediction = baseline

    # -- 6: the iterations ---------------------------------------------------
    def _iterate(self):
        est = self.est
        self.splitter = Splitter(
            n_bins_non_missing=est.n_bins_non_missing_, missing_bin=est.max_bins,
            has_missing_values=self.has_missing, is_categorical=self.context["categorical"],
            monotonic_cst=est._monotonic_cst[self.order],
            l2_regularization=est.l2_regularization, min_samples_leaf=est.min_samples_leaf,
            hessians_are_constant=self.loss.constant_hessian,
            feature_fraction_per_split=est.max_features)
        self.compiled = compiled_splitter(self.splitter)
        est._predictors, est.train_score_, est.validation_score_ = [], [], []
        est.history_ = BoostingHistory()
        est.history_.n_clients = len(self.dataset)
        est.history_.binning_rounds = self.binning_rounds
        self.train_losses, self.records = [], []
        self.piggyback = not (est.do_early_stopping_ and self.val is None)
        self.start = time.perf_counter()
        self.model = ChainedModel(est._baseline_prediction)
        if est.do_early_stopping_:
            self._score(self._model())
        for _ in range(est.max_iter):
            before = self.session.ledger.as_dict()["rounds"]
            trees, n_histograms = self._grow_iteration()
            est._predictors.append(trees)
            self.model = self.model.extended(trees)
            after = self.session.ledger.as_dict()["rounds"]
            self.records.append({
                "rounds": after["rounds"] - before["rounds"],
                "bytes": after["bytes"] - before["bytes"], "histograms": n_histograms,
                "n_leaves": sum(t.get_n_leaf_nodes() for t in trees),
                "max_depth": max(t.get_max_depth() for t in trees),
                "wall_time": time.perf_counter() - self.start})
            if est.verbose:
                record = self.records[-1]
                print(f"[{len(est._predictors)}/{est.max_iter}] {record['n_leaves']} leaves, "
                      f"depth {record['max_depth']}, {record['rounds']} rounds, "
                      f"{record['bytes'] / 1e6:.2f} MB, {record['wall_time']:.2f} s")
            if est.do_early_stopping_ and self._score(self._model()):
                break
        if self.piggyback:
            self.train_losses.append(self._loss_of(self._model()))
        self._write_history()

    def _model(self):
        """What the sites need to recompute their raw predictions (the model so far, sent
        as the trees the sites do not hold: :class:`._model_chain.FitWire`)."""
        return self.model

    def _grow_iteration(self):
        est = self.est
        model = self._model()
        replays = [TreeReplay(self.splitter, n_samples=int(self.totals["n"]),
                              max_leaf_nodes=est.max_leaf_nodes, max_depth=est.max_depth,
                              min_samples_leaf=est.min_samples_leaf,
                              shrinkage=est.learning_rate,
                              interaction_cst=est._interaction_cst,
                              hessian_one=np.float32(1.0) if self.loss.constant_hessian
                              else None, compiled=self.compiled)
                   for _ in range(est.n_trees_per_iteration_)]
        fetch = _Fetcher(self, model)
        grown, _ = grow_iteration(replays, est._feature_subsample_rng, fetch)
        for _, leaves in grown:
            for leaf in leaves:
                leaf.value *= est.learning_rate
        if self.context["loss"] in QUANTILE_LOSSES:
            QuantileRefit(self.sums, self.context, model, est.learning_rate,
                          self.loss).refit(grown)
        trees = [make_predictor(root, est.bin_thresholds_, est.n_bins_non_missing_)
                 for root, _ in grown]
        return trees, fetch.n_histograms

    def _loss_of(self, model, session=None, context=None):
        session = session or self.sums
        reply = session.sum(site_loss, context or self.context, model, phase="monitor")
        return reply["loss"] / reply["weight"]

    def _score(self, model):
        """Append the scores of ``model``; True when scikit-learn's rule stops."""
        est = self.est
        if self.val is None:
            self.train_losses.append(self._loss_of(model))
            return self._should_stop([-v for v in self.train_losses])
        if self.val_context is None:
            self.val_context = dict(self.context, class_weight=None,
                                    weighted=any(d["has_weights"] for d in self.val.metadata))
        est.validation_score_.append(-self._loss_of(model, self.val_wire, self.val_context))
        return self._should_stop(est.validation_score_)

    def _should_stop(self, scores):
        est = self.est
        reference = est.n_iter_no_change + 1
        if len(scores) < reference:
            return False
        threshold = scores[-reference] + est.tol
        return not any(score > threshold for score in scores[-reference + 1:])

    def _write_history(self):
        est, history = self.est, self.est.history_
        val = list(est.validation_score_)
        for i, loss in enumerate(self.train_losses):
            record = {"iteration": i, "train_loss": loss,
                      "validation_loss": -val[i] if i < len(val) else np.nan}
            if i > 0:
                record.update(self.records[i - 1])
            else:
                record.update(rounds=0, bytes=0, histograms=0, wall_time=0.0)
            history.append(**record)
        ledgers = [self.session.ledger] + ([self.val_session.ledger] if self.val else [])
        history.monitor_rounds = sum(led.rounds("monitor") for led in ledgers)
        history.monitor_bytes = sum(led.bytes("monitor") for led in ledgers)
        est.train_score_ = (-np.asarray(self.train_losses) if est.do_early_stopping_
                            else np.asarray([]))
        est.validation_score_ = np.asarray(val)


class _Fetcher:
    """Pooled node histograms for the grower: one federated sum per call (a round)."""

    def __init__(self, run, model):
        self.run, self.model, self.first, self.n_histograms = run, model, True, 0

    def __call__(self, requests):
        run = self.run
        n_features, n_bins = len(run.order), run.est.max_bins + 1
        packed = pack_nodes(requests, n_features)
        packed["with_loss"] = self.first and run.piggyback
        # masked, a cell costs its limbs and masks: only the cells a row can be in travel
        kept = packed["kept_cells"] = run.est.privacy is not None
        reply = run.sums.sum(site_histograms, run.context, self.model, packed,
                             phase="rounds")
        if packed["with_loss"]:
            run.train_losses.append(reply["loss"] / reply["weight"])
        self.first = False
        self.n_histograms += len(requests)
        return _node_histograms(reply, requests, n_features, n_bins,
                                run.context if kept else None)


def _node_histograms(reply, requests, n_features, n_bins, kept_in=None):
    """Per requested node ``(gradients, hessians or None, counts)``, each of shape
    (features, bins) (zero where a feature was not asked for, and, with ``kept_in`` a
    context, in the cells no row can be in, which the sites left out: ``node_cells``):
    views of the reply where every cell of every feature came (the grower reads them,
    never writes)."""
    out, at = [], 0
    for _, _, allowed in requests:
        features = np.arange(n_features) if allowed is None else np.asarray(allowed)
        cells = None if kept_in is None else node_cells(kept_in, features)
        size = len(features) * n_bins if cells is None else len(cells)
        parts = []
        for name in ("gradients", "hessians", "counts"):
            if name not in reply:
                parts.append(None)
                continue
            block = reply[name][at:at + size]
            if cells is not None:  # spread back: the cells left out are zeros
                dense = np.zeros(len(features) * n_bins)
                dense[cells] = block
                block = dense
            if allowed is None:
                full = np.asarray(block, dtype=np.float64).reshape(n_features, n_bins)
            else:
                full = np.zeros((n_features, n_bins))
                full[np.asarray(allowed)] = block.reshape(len(allowed), n_bins)
            parts.append(full.astype(np.int64) if name == "counts" else full)
        out.append(tuple(parts))
        at += size
    return out
