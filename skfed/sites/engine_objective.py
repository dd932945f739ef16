"""A fit session's objective on a site whose rows are partitions on an engine.

Each partition's client objective stays on its worker; :class:`EngineObjective`, in
the site service, evaluates the sum of theirs under the site's audit merged across
them (:mod:`skfed.sites.engine` builds it). The functions here that take an
objective run on the workers.
"""

import numpy as np

from ..data.site import SiteError
from ..federation import dominance
from ..federation.combine import tree_combine
from ..federation.operations import Refused


def _audited(function, target, args, audit):
    """``function(target, *args)`` under a part's recording audit (or none), a refusal
    returned rather than raised (it crosses to the site as a value)."""
    try:
        if audit is None:
            with dominance.suspended():
                return "ok", function(target, *args), None
        with dominance.Recording(*audit) as recording:
            out = function(target, *args)
        return "ok", out, recording.records
    except Refused as exc:
        return "refused", (exc.rule, exc.detail, exc.public), None


def objective_plain(objective, *, function, args):
    """``function`` on a partition's client objective, unaudited (a check's counts)."""
    with dominance.suspended():
        return function(objective, *args)


def run_on_objective(objective, *, function, args, audit):
    return _audited(function, objective, args, audit)


def call_method(objective, name, *args):
    return getattr(objective, name)(*args)


def _describe_objective(objective):
    return {"datafit": objective.datafit, "layout": objective.layout,
            "weighted_rows": bool(getattr(objective, "weighted_rows", False)),
            "n_features": int(objective.X.shape[1])}


class EngineObjective:
    """A fit session's client objective whose rows are partitions on an engine: each
    partition's :class:`~skfed.datafits.ClientObjective` is kept on its worker (dividing
    by the whole dataset's weight sum) and an evaluation is the sum of theirs, under
    the site's audit merged across them."""

    def __init__(self, engine, objectives, weight_sum, n_samples, *, datafit, layout,
                 weighted_rows, n_features):
        self.engine, self.objectives = engine, objectives
        self.weight_sum, self._n_samples = weight_sum, n_samples
        self.datafit, self.layout = datafit, layout
        self.weighted_rows, self.n_features = weighted_rows, n_features
        self.meta = {}

    @property
    def n_samples(self):
        return self._n_samples

    def run(self, operation, args):
        if operation.combine == "objective":  # its evaluations are this object's sums
            return operation.function(self, *args)
        return self.engine.run(operation, run_on_objective, self.objectives, args)

    def map_parts(self, function, *args):
        """``function(objective, *args)`` on every partition's client objective, in
        order: what a check reads of the rows (their counts), decided on the whole."""
        return self.engine.client.gather(self.engine.client.map(
            objective_plain, self.objectives, function=function, args=args, pure=False))

    def lipschitz(self, exact=True):
        """:meth:`~skfed.datafits.ClientObjective.lipschitz` from the partitions' sums:
        the weighted Gram (its top eigenvalue here), the trace, the largest row."""
        from ..datafits.base import joint_factor

        curv = self.datafit.step_curvature
        if curv is None:
            return {"coef": np.inf, "intercept": np.inf, "joint": 1.0, "row": np.inf}
        terms = self.engine.run(_LIPSCHITZ, run_on_objective, self.objectives, ())
        if exact:
            L_coef = curv * float(np.linalg.eigvalsh(terms["gram"])[-1]) / self.weight_sum \
                if terms["gram"].size else 0.0
        else:
            L_coef = curv * terms["trace"] / self.weight_sum
        L_int = curv if self.layout.fit_intercept else 0.0
        joint = 1.0
        if self.layout.fit_intercept:
            joint = joint_factor(curv, terms["mean"] / self.weight_sum, L_coef, L_int)
        return {"coef": L_coef, "intercept": L_int, "joint": joint,
                "row": curv * terms["row"]}

    def _sum(self, name, *args):
        return self.engine.run(_METHOD, run_on_objective, self.objectives,
                               (name, *args))

    def _whole(self, rows):
        if rows is not None:
            raise Refused("engine", "a minibatch of rows is not served on a dataset on an "
                                    "engine (rows are drawn by partition)", public=True)

    def value(self, theta, rows=None):
        self._whole(rows)
        return self._sum("value", theta)

    def value_and_gradient(self, theta, rows=None):
        self._whole(rows)
        return self._sum("value_and_gradient", theta)

    def gradient(self, theta, rows=None):
        self._whole(rows)
        return self._sum("gradient", theta)

    def value_gradient_hessian(self, theta, rows=None, with_value=True):
        self._whole(rows)
        return self._sum("value_gradient_hessian", theta, None, with_value)

    def hessian(self, theta, rows=None):
        return self.value_gradient_hessian(theta, rows, with_value=False)[2]

    def normal_equations(self):
        return self._sum("normal_equations")

    def feature_mean(self):
        return self._sum("feature_mean")

    def curvature_matvec(self, v):
        return self._sum("curvature_matvec", v)

    @property
    def X(self):
        """The design's shape (a check's), its rows on the partitions."""
        return RowsElsewhere(self.engine.site, (self._n_samples, self.n_features))

    def __getattr__(self, name):  # what a partition holds row by row does not leave it
        if name in ("Y", "sample_weight", "offset", "raw", "raw_offset"):
            raise SiteError(self.__dict__.get("engine").site if "engine" in self.__dict__
                            else "?", f"{name} of a fit on an engine is not served: it is "
                                      "not a sum over rows")
        raise AttributeError(name)


class RowsElsewhere:
    """The shape of rows kept on an engine's partitions; any use of their values here is
    an error naming the site (an operation that needs them declares no ``combine``)."""

    def __init__(self, site, shape):
        self.site, self.shape, self.ndim = site, tuple(shape), len(shape)

    def __getattr__(self, name):
        raise SiteError(self.site, f"the rows of a fit on an engine are not here ({name})")


class _Method:
    """The declaration an objective's evaluation runs under on an engine: the method
    named by its first argument, its replies added."""

    name = "fit.evaluate"
    combine = "sum"

    @staticmethod
    def function(objective, name, *args):
        return call_method(objective, name, *args)


_METHOD = _Method()


def lipschitz_terms(objective):
    """A partition's part of the smoothness constants (audited as one process would:
    the weighted squared row norms' sum; the mean and the Gram are not released)."""
    import scipy.sparse as sp

    X, sw = objective.X, objective.sample_weight
    sq = np.asarray(X.multiply(X).sum(axis=1)).ravel() if sp.issparse(X) else np.einsum(
        "ij,ij->i", X, X)
    dominance.check_rows(sw * sq, "a smoothness constant")
    A = X.multiply(np.sqrt(sw)[:, None]).tocsr() if sp.issparse(X) else X * np.sqrt(sw)[:, None]
    gram = A.T @ A
    return {"mean": np.asarray(X.T @ sw).ravel(), "trace": float(sw @ sq),
            "row": float(np.max(sq)) if len(sq) else 0.0,
            "gram": gram.toarray() if sp.issparse(gram) else np.asarray(gram)}


def _combine_lipschitz(replies):
    out = tree_combine("sum", [{k: r[k] for k in ("mean", "trace", "gram")} for r in replies])
    out["row"] = max(r["row"] for r in replies)
    return out


class _Lipschitz:
    name, combine = "fit.client_summary", staticmethod(_combine_lipschitz)
    function = staticmethod(lipschitz_terms)


_LIPSCHITZ = _Lipschitz()
