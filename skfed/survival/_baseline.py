"""Breslow's baseline hazard of a fitted :class:`~skfed.survival.FedCoxPH`, and the
survival curves predicted from it."""

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..linear_model._inference import InferenceError


def _strata_spec(strata):
    """``(by_site, column)`` from the ``strata`` parameter."""
    items = strata if isinstance(strata, (list, tuple)) else [] if strata is None else [strata]
    by_site = any(isinstance(s, str) and s == "site" for s in items)
    columns = [s for s in items if not (isinstance(s, str) and s == "site")]
    if len(columns) > 1:
        raise ValueError(f"strata takes at most one column (besides 'site'); got {strata!r}. "
                         "Combine the columns into one (e.g. their product as a string).")
    return by_site, (columns[0] if columns else None)


class BaselineMixin:
    """The baseline hazard and the predictions of cumulative hazard and survival.

    The fit's pass at the optimum stores ``_baseline``: the pooled baseline
    increments at the grid of a shared baseline, or each site's cumulative
    baseline (``strata="site"``).
    """

    @property
    def strata_(self):
        """The strata's labels (see the class docstring)."""
        check_is_fitted(self)
        return list(self._baselines())

    def _time_of(self, values):
        """Times of the fit's time axis: interval indices on a grid -> interval ends."""
        if self.time_grid_ is None:
            return np.asarray(values, dtype=float)
        ends = np.append(self.time_grid_, np.inf)
        return ends[np.asarray(values, dtype=int)]

    def _baselines(self):
        """``{stratum label: (times, cumulative hazard)}``, or an error saying why none."""
        check_is_fitted(self)
        base = getattr(self, "_baseline", None)
        if base is None:
            why = getattr(self, "_baseline_why", None) or (
                "under secure aggregation each site's own baseline (strata='site') is not "
                "sent: it is not a sum over sites")
            raise InferenceError(f"FedCoxPH: no baseline hazard for this fit: {why}")
        levels = getattr(self, "strata_levels_", None)

        def label(code):
            return None if levels is None else levels[int(code)].item() \
                if isinstance(levels[int(code)], np.generic) else levels[int(code)]
        out = {}
        if base["by_site"]:
            for site, reply in zip(self.clients_, base["replies"]):
                for code in np.unique(reply["strata"]):
                    rows = reply["strata"] == code
                    key = site if levels is None else (site, label(code))
                    out[key] = (reply["times"][rows], reply["cumhaz"][rows])
            return out
        start = 0
        for code in sorted(base["grid"]):
            times = base["grid"][code]
            h = base["hazard"][start:start + len(times)]
            out[label(code)] = (self._time_of(times), np.cumsum(h))
            start += len(times)
        return out

    @property
    def baseline_times_(self):
        """The times of the baseline hazard: an array, or ``{stratum: times}``."""
        out = {k: t for k, (t, _) in self._baselines().items()}
        return out[None] if list(out) == [None] else out

    @property
    def baseline_cumulative_hazard_(self):
        """Breslow's cumulative baseline hazard at ``baseline_times_`` (covariates 0):
        an array, or ``{stratum: array}``."""
        out = {k: H for k, (_, H) in self._baselines().items()}
        return out[None] if list(out) == [None] else out

    def predict_cumulative_hazard(self, X, times=None, strata=None):
        """Each row's cumulative hazard ``exp(x'b) H0(t)`` at ``times``.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        times : array-like of shape (n_times,), default=None
            Default: the baseline's times (all strata's, merged).
        strata : array-like of shape (n_samples,), default=None
            Each row's stratum when the model has several: the site (with
            ``strata="site"``) or the level of the strata column (read from
            ``X`` when it holds the column).

        Returns
        -------
        cumulative_hazard : ndarray of shape (n_samples, n_times)
        """
        baselines = self._baselines()
        risk = np.exp(self.predict(X))
        keys = self._row_strata(X, strata, len(risk), baselines)
        if times is None:
            times = np.unique(np.concatenate([t for t, _ in baselines.values()]))
        times = np.asarray(times, dtype=float)
        out = np.empty((len(risk), times.size))
        for key in set(keys):
            t, H = baselines[key]
            idx = np.searchsorted(t, times, side="right") - 1
            H0 = np.where(idx >= 0, H[np.maximum(idx, 0)], 0.0)
            rows = np.array([k == key for k in keys])
            out[rows] = risk[rows, None] * H0[None, :]
        return out

    def predict_survival_function(self, X, times=None, strata=None):
        """Each row's survival probability ``exp(-exp(x'b) H0(t))`` at ``times``.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        times : array-like of shape (n_times,), default=None
        strata : array-like of shape (n_samples,), default=None
            See :meth:`predict_cumulative_hazard`.

        Returns
        -------
        survival : ndarray of shape (n_samples, n_times)
        """
        return np.exp(-self.predict_cumulative_hazard(X, times, strata))

    def _row_strata(self, X, strata, n, baselines):
        by_site, column = _strata_spec(self.strata)
        if not by_site and column is None:
            return [None] * n
        levels = None
        if column is not None:
            if self._has_strata_column(X):
                _, values = self._split_strata(X, column, fitting=False)
                codes = self._stratum_codes(values, False)
                levels = [self.strata_levels_[int(c)] for c in codes]
                levels = [v.item() if isinstance(v, np.generic) else v for v in levels]
            elif not by_site and strata is not None:
                levels = list(np.asarray(strata).tolist())
        if by_site or levels is None:
            if strata is None:
                raise ValueError("this model has one baseline per stratum: pass strata= (each "
                                 "row's " + ("site" if by_site else "level") + ").")
            strata = list(np.asarray(strata, dtype=object))
            if len(strata) != n:
                raise ValueError(f"strata has {len(strata)} entries but X has {n} rows.")
        if by_site:
            sites = [s.item() if isinstance(s, np.generic) else s for s in strata]
            keys = sites if column is None else list(zip(sites, levels))
        else:
            keys = levels
        unknown = sorted({str(k) for k in keys if k not in baselines})
        if unknown:
            raise ValueError(f"unknown stratum {unknown[:3]}; the fitted strata are "
                             f"{list(map(str, baselines))[:10]}.")
        return keys

