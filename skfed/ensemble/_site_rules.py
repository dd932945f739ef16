"""The rules a site service applies to a boosting request before it reads a row.

``FedHistGradientBoostingRegressor`` and ``...Classifier`` reach a site service
through the operations ``boosting.*`` (declared beside their functions in
:mod:`skfed.ensemble._site` and :mod:`skfed.ensemble._sketch`). Besides the
gate's own rules (who asks, the protection a site requires, the dominance rule
on sums in the clear), each request passes, in this order:

1. its form (rule ``message``, :mod:`skfed.ensemble._wire`): every key, dtype,
   shape and range of its context, model, nodes, sampling and probes, with
   bounded sizes, before any row is read;
2. the rows' rules: ``allow_exact_quantiles`` for anything that counts rows at
   values the analyst sends (the bin search, the residuals' quantiles, and bins
   at continuous thresholds that are not the sites' signed sketches);
   ``min_level_count`` for the levels of a categorical column and the classes;
   ``min_rows`` for every node a histogram or a residual count is computed
   from, and for its sibling (the parent's sums minus the node's), unless the
   reply travels inside a masked sum (only the sum over every site leaves);
   ``max_local_iterations`` for the trees of the model a request carries.

Per-row predictions are not an operation: a model is scored at the site
(``boosting.score``), which releases the score's sums only.
"""

import hashlib

import numpy as np

from ..data.levels import _present as present
from ..data.levels import check_levels as held_levels
from ..data.site import SiteData
from ..federation import whole_counts
from ..federation.operations import Refused
from ._fit_state import FitStateLost
from ._site_rows import (bin_features, fit_state, model_features, node_rows, prepared,
                         unpack_nodes)
from ._sketch import check_sketch_thresholds, sketch_payload
from ._wire import (WireError, check_context, check_context_reference, check_model,
                    check_model_message, check_nodes, check_probes, check_sampling,
                    check_schema_request, check_score_message, is_reference)

#: the most verified sketch digests a site remembers (a bounded memory of fits)
_SKETCH_MEMORY = 1024


def wire(check, *values):
    """``check(*values)`` of :mod:`skfed.ensemble._wire`; its complaint is a refusal."""
    try:
        return check(*values)
    except WireError as exc:
        raise Refused("message", f"a malformed boosting request: {exc}",
                      public=True) from None


def check_levels(site, columns, rules):
    """Each level of a categorical column binned here is held by at least
    ``min_level_count`` of this site's rows (a bin, and a released level name); on a
    partition of a dataset on an engine, counted there and decided on the whole."""
    names = site.columns()
    X = site.X
    values = [X.iloc[:, j] if hasattr(X, "iloc") else np.asarray(X)[:, j] for j in columns]
    names = [names[j] if names else f"{j}" for j in columns]
    if not whole_counts.recording():
        held_levels(values, names, rules.min_level_count)
        return
    for column, name in zip(values, names):
        column = np.asarray(column, dtype=object)
        levels, counts = np.unique(column[present(column, None)].astype(str),
                                   return_counts=True)
        shown = str(name)[:64]
        whole_counts.at_least(f"levels of {shown}", {
            level: (n, n) for level, n in zip(levels.tolist(), counts.tolist())},
            rules.min_level_count, ("min_level_count", f"a level of column {shown!r} is held "
                                    f"by fewer than {rules.min_level_count} rows here",
                                    [name] if isinstance(name, str) else ()))


def _exact_quantiles(rules, why):
    if not rules.allow_exact_quantiles:
        raise Refused("allow_exact_quantiles", f"{why}: it releases single rows' values",
                      public=True)


def checked_context(site, context, rules, *, binned, per_level=True):
    """The fit's context (whole, or a reference to the fit's state here): its form, its
    categorical columns' levels (where the reply holds numbers per level: bins,
    ``per_level``) and, once binned, the rule on continuous thresholds (the sites'
    signed sketches, or exact quantiles); each check once per fit state."""
    if is_reference(context):
        wire(check_context_reference, context)
    else:
        wire(lambda: check_context(context, site.X.shape[1], binned=binned))
    state = fit_state(site, context)
    if (binned, per_level) not in state.checked:
        _check_context_rules(site, state.context, rules, binned=binned, per_level=per_level)
        state.checked.add((binned, per_level))
    return state


def _check_context_rules(site, context, rules, *, binned, per_level):
    if binned and context["thresholds"] is None:  # a reference to a context not binned
        wire(lambda: check_context(context, site.X.shape[1], binned=True))
    if per_level:
        check_levels(site, [int(c) for c, is_cat in zip(context["order"],
                                                        context["categorical"]) if is_cat],
                     rules)
    if binned and any(t.size for t, is_cat in zip(context["thresholds"],
                                                  context["categorical"]) if not is_cat):
        if context["sketch"] is None or rules.allow_exact_quantiles:
            _exact_quantiles(rules, "a boosting request bins continuous features at "
                             "thresholds the analyst sends (binning=min_rows bins at the "
                             "sites' sketches)")
        else:
            _check_sketch(context, rules)
    return context


def _check_sketch(context, rules):
    """Continuous thresholds without ``allow_exact_quantiles``: they must be those the
    sites' signed sketches give (every sketch signed by a distinct site of the
    federation, this site's own among them), so no analyst chose them."""
    entries = context["sketch"]["sites"]
    digest = hashlib.sha256()
    for entry in entries:
        digest.update(sketch_payload(entry.get("site"), entry.get("dataset"), entry))
    for t in context["thresholds"]:
        digest.update(np.ascontiguousarray(t).tobytes())
    verified = rules.memo.setdefault("boosting sketches", set())
    if digest.digest() in verified:
        return
    sites = [entry.get("site") for entry in entries]
    if rules.name not in sites or len(set(sites)) != len(sites):
        raise Refused("allow_exact_quantiles", "the sketches must include this site's own "
                                               "and come from distinct sites", public=True)
    for entry in entries:
        try:
            rules.verify(entry["certificate"], entry["signature"],
                         sketch_payload(entry["site"], entry["dataset"], entry), entry["site"])
        except (ValueError, TypeError, KeyError) as exc:
            raise Refused("message", f"a sketch that its site did not sign "
                                     f"({type(exc).__name__}): a forged sketch",
                          public=True) from None
    problem = check_sketch_thresholds(context)
    if problem is not None:
        raise Refused("allow_exact_quantiles", f"{problem}: the analyst chose them",
                      public=True)
    if len(verified) > _SKETCH_MEMORY:
        verified.clear()
    verified.add(digest.digest())


def checked_model(state, model, rules):
    """The model's form (whole, or the trees after a digest the fit's state here holds),
    and its trees within ``max_local_iterations``."""
    extends, n_trees = wire(check_model_message, model, state.context)
    if extends is not None:
        if not state.digests or state.digests[-1] != extends:
            raise FitStateLost()
        n_trees += state.n_trees
    _check_trees_allowed(n_trees, rules)
    return model


def _check_trees_allowed(n_trees, rules):
    """A model's trees within the site's ``max_local_iterations``."""
    if n_trees > rules.max_local_iterations:
        raise Refused("max_local_iterations", f"a model of {n_trees} trees asks for more "
                      f"than this site's {rules.max_local_iterations} iterations", public=True)


def check_node_rows(site, state, nodes, rules):
    """No node's sums from fewer than ``min_rows`` rows here (0 rows is no row): the
    node's own, and its sibling's, which the parent's sums minus the node's give.
    Inside a masked sum the rule does not apply: only the sum over every site leaves."""
    if rules.masked:
        return
    context = state.context
    binned = prepared(site, state).binned
    positive = site.weights() > 0
    floor, missing_bin = rules.min_rows, context["max_bins"]
    # the count itself is not said: a refusal is one bit, not a number
    refusal = ("min_rows", "a node of the tree, or its sibling, would be computed from "
               f"fewer than {floor} rows here (a deeper tree than this site's rows allow; "
               "raise min_samples_leaf or lower max_depth)")
    counts = {}  # on a partition of an engine: decided on the whole dataset
    for j, (_, steps, _) in enumerate(unpack_nodes(nodes)):
        if not steps:  # the root: every row of the request (min_rows checked)
            continue
        parent = node_rows(binned, steps[:-1], missing_bin)
        node = node_rows(binned, steps[-1:], missing_bin, parent)
        for side, rows in enumerate((node, parent & ~node)):
            counts[j, side] = (np.count_nonzero(rows), np.count_nonzero(rows & positive))
            if not whole_counts.recording():
                whole_counts.at_least("node rows", counts, floor, refusal)
                counts = {}
    whole_counts.at_least("node rows", counts, floor, refusal)


# -- each operation's checks: (rows, arguments, the site's rules) ----------------------
def schema_rules(site, values, rules):
    request = values["request"]
    wire(check_schema_request, request, site.X.shape[1])
    if isinstance(request["categorical"], str):  # the columns of category dtype
        X = site.X
        wanted = [j for j in range(X.shape[1]) if hasattr(X, "iloc")
                  and str(X.iloc[:, j].dtype) == "category"]
    else:
        wanted = np.flatnonzero(request["categorical"]).tolist()
    check_levels(site, wanted, rules)


def schema_reply(site, values, out, rules):
    counts = out.get("class_counts")
    if counts is not None and np.min(counts) < rules.min_level_count:
        raise Refused("min_level_count", "a class of the target has fewer than "
                                         f"{rules.min_level_count} rows here", public=True)
    return out


def context_rules(site, values, rules):
    checked_context(site, values["context"], rules, binned=False)


def sketch_rules(site, values, rules):
    checked_context(site, values["context"], rules, binned=False)
    rows = values["rows"]
    if rows != rules.min_rows:  # one group size only: two would give values by difference
        raise Refused("min_rows", f"this site sketches its values in groups of its "
                                  f"min_rows = {rules.min_rows} rows: fit with "
                                  f"binning={rules.min_rows}", public=True)


def sketch_reply(site, values, sketch, rules):
    """The sketch signed with the site's certificate (what lets the other sites check
    the thresholds later requests carry)."""
    if rules.sign is None:  # not at a site service: nothing to sign with
        return sketch
    dataset = str(rules.dataset)
    return dict(sketch, site=rules.name, dataset=dataset, certificate=rules.certificate,
                signature=rules.sign(sketch_payload(rules.name, dataset, sketch)))


def bin_count_rules(site, values, rules):
    context = checked_context(site, values["context"], rules, binned=False).context
    features = wire(check_sampling, values["sampling"], context, site.site, site.n_samples)
    wire(check_probes, values["probes"], values["starts"], len(features))


def residual_rules(site, values, rules):
    state, model = checked_context(site, values["context"], rules, binned=True), \
        values["model"]
    if model is not None:
        checked_model(state, model, rules)
    n_paths = wire(lambda: check_nodes(values["paths"], state.context, with_loss=False))
    wire(check_probes, values["probes"], values["starts"], n_paths)
    check_node_rows(site, state, values["paths"], rules)


def histogram_rules(site, values, rules):
    state = checked_context(site, values["context"], rules, binned=True)
    checked_model(state, values["model"], rules)
    wire(lambda: check_nodes(values["request"], state.context, with_loss=True))
    check_node_rows(site, state, values["request"], rules)


def loss_rules(site, values, rules):
    # a loss and a score are sums over all the rows (under the dominance rule): no
    # number per level leaves, so a level rare among these rows is no refusal
    state = checked_context(site, values["context"], rules, binned=True, per_level=False)
    checked_model(state, values["model"], rules)


def score_rules(site, values, rules):
    """A scored model's form and rules; the site rebuilds it to predict its own rows."""
    message = values["estimator"]
    if isinstance(message, BoostingModel):
        return
    context, model = wire(check_score_message, message)
    if is_reference(context) or set(model) != {"baseline", "trees"}:
        raise Refused("message", "a scored model travels whole (its context and trees)",
                      public=True)
    wire(lambda: check_context(context, site.X.shape[1], binned=True))
    _check_context_rules(site, context, rules, binned=True, per_level=False)
    _check_trees_allowed(wire(check_model, model, context), rules)
    values["estimator"] = BoostingModel(site.site, context, model)


class BoostingModel:
    """A fitted boosting model's arrays, rebuilt at the site for an aggregate score.

    Its predictions are those of the analyst's estimator (each row binned at the
    model's thresholds and walked down the packed trees, as scikit-learn does
    during fit); they never leave the site: only the score's sums do.
    """

    def __init__(self, site, context, model):
        self.site, self.context, self.model = site, context, model
        if context["classes"] is not None:
            self.classes_ = context["classes"]

    def _raw(self, X):
        from ._tree import packed_leaf_values, unpack_trees

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
        from ._losses import make_loss

        raw = self._raw(X)
        context = self.context
        if context["classes"] is None:
            loss = make_loss(context["loss"], quantile=context["quantile"],
                             weighted=context["weighted"])
            return loss.link.inverse(raw.ravel())
        encoded = (raw.ravel() > 0).astype(int) if raw.shape[1] == 1 else np.argmax(raw, 1)
        return self.classes_[encoded]
