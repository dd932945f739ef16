"""Splitting a federation into training and test sites."""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from .._messages import show


class LeaveOneSiteOut:
    """Each site is the test set once; the other sites train.

    The question a network asks before deploying at a new hospital: how
    well does a model fitted elsewhere do at a site it has never seen?

    Examples
    --------
    >>> from skfed.model_selection import LeaveOneSiteOut
    >>> list(LeaveOneSiteOut().split(["a", "b", "c"]))[0]
    (['b', 'c'], ['a'])
    """

    def split(self, sites):
        """Yield ``(train_sites, test_sites)``.

        Parameters
        ----------
        sites : FederatedDataset or sequence of site labels

        Yields
        ------
        train_sites, test_sites : list
        """
        sites = _site_list(sites)
        if len(sites) < 2:
            raise ValueError(f"LeaveOneSiteOut needs at least 2 sites; got {len(sites)}.")
        for k, site in enumerate(sites):
            yield sites[:k] + sites[k + 1:], [site]

    def get_n_splits(self, sites=None):
        """Number of folds (one per site)."""
        return len(_site_list(sites))

    def __repr__(self):
        return "LeaveOneSiteOut()"


class SiteKFold:
    """K folds of whole sites (scikit-learn's ``GroupKFold`` with sites as groups).

    Parameters
    ----------
    n_splits : int, default=5
        Number of folds; at most the number of sites.
    shuffle : bool, default=False
        Shuffle the sites before cutting them into folds; otherwise the
        folds balance rows (largest site first into the smallest fold, as
        ``GroupKFold`` does), using only the sites' row counts.
    random_state : int, RandomState instance or None, default=None
        Used when ``shuffle=True``.

    Examples
    --------
    >>> from skfed.model_selection import SiteKFold
    >>> [test for _, test in SiteKFold(n_splits=2).split(["a", "b", "c", "d"])]
    [['a', 'c'], ['b', 'd']]
    """

    def __init__(self, n_splits=5, *, shuffle=False, random_state=None):
        if not isinstance(n_splits, numbers.Integral) or n_splits < 2:
            raise ValueError(f"n_splits must be an int >= 2; got {show(n_splits)}.")
        self.n_splits = n_splits
        self.shuffle = shuffle
        self.random_state = random_state

    def split(self, sites):
        """Yield ``(train_sites, test_sites)``.

        Parameters
        ----------
        sites : FederatedDataset or sequence of site labels

        Yields
        ------
        train_sites, test_sites : list
        """
        sizes = np.asarray(getattr(sites, "n_samples", None) if hasattr(sites, "n_samples")
                           else np.ones(len(_site_list(sites))))
        sites = _site_list(sites)
        if self.n_splits > len(sites):
            raise ValueError(f"SiteKFold(n_splits={self.n_splits}) needs at least "
                             f"{self.n_splits} sites; got {len(sites)}.")
        if self.shuffle:
            order = check_random_state(self.random_state).permutation(len(sites))
            folds = [order[k::self.n_splits] for k in range(self.n_splits)]
        else:
            load = np.zeros(self.n_splits)
            folds = [[] for _ in range(self.n_splits)]
            for k in sorted(range(len(sites)), key=lambda k: (-sizes[k], k)):
                f = int(np.argmin(load))
                folds[f].append(k)
                load[f] += sizes[k]
        for fold in folds:
            test = sorted(fold)
            yield ([sites[k] for k in range(len(sites)) if k not in test],
                   [sites[k] for k in test])

    def get_n_splits(self, sites=None):
        """Number of folds."""
        return self.n_splits

    def __repr__(self):
        return (f"SiteKFold(n_splits={self.n_splits}, shuffle={self.shuffle}, "
                f"random_state={self.random_state!r})")


def _site_list(sites):
    sites = getattr(sites, "sites", sites)
    return [s.item() if isinstance(s, np.generic) else s for s in sites]


def check_site_cv(cv):
    """``cv`` as a splitter: an int is ``SiteKFold(cv)``, None is ``LeaveOneSiteOut()``."""
    if cv is None:
        return LeaveOneSiteOut()
    if isinstance(cv, numbers.Integral):
        return SiteKFold(cv)
    if not hasattr(cv, "split"):
        raise TypeError(f"cv must be None, an int or a site splitter; got {cv!r}.")
    return cv
