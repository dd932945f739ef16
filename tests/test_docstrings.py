"""Every public estimator documents each of its parameters, once.

The estimators' docstrings are assembled from shared pieces
(``skfed/_docstrings.py``, ``skfed/_constraints.py``): a parameter written
both in a shared piece and in an estimator's own text would appear twice.
"""

import collections
import inspect

import pytest
from sklearn.base import BaseEstimator
from sklearn.externals._numpydoc.docscrape import NumpyDocString

import skfed
import skfed.model_selection
import skfed.preprocessing
import skfed.solvers


def _public(module, base=BaseEstimator):
    return {name: obj for name, obj in vars(module).items()
            if name in module.__all__ and isinstance(obj, type) and issubclass(obj, base)
            and not inspect.isabstract(obj)}


ESTIMATORS = {**_public(skfed), **_public(skfed.preprocessing),
              **_public(skfed.model_selection)}
SOLVERS = _public(skfed.solvers)


def _documented(obj):
    """The names in the "Parameters" section (``a, b : ...`` counts both)."""
    doc = NumpyDocString(inspect.getdoc(obj) or "")
    return [n.strip() for p in doc["Parameters"] for n in p.name.split(",")]


def _init_parameters(cls):
    return [name for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def test_the_estimators_are_found():
    assert {"FedLasso", "FedElasticNet", "FedLogisticRegression", "FedLinearSVC",
            "FedLowRank", "FedStandardScaler"} <= set(ESTIMATORS)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_estimator_parameters_documented_once(name):
    cls = ESTIMATORS[name]
    documented = _documented(cls)
    twice = sorted(n for n, c in collections.Counter(documented).items() if c > 1)
    assert not twice, f"{name} documents {twice} more than once"
    missing = [p for p in _init_parameters(cls) if p not in documented]
    assert not missing, f"{name} does not document {missing}"
    unknown = [n for n in documented if n not in _init_parameters(cls)]
    assert not unknown, f"{name}'s Parameters section has {unknown} (a section header lost?)"


@pytest.mark.filterwarnings("ignore:Unknown section:UserWarning")
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_solver_parameters_documented_at_most_once(name):
    # many solvers document the parameters they share in their base class
    # ("Parameters (shared by subclasses)"), so only duplicates are checked here
    documented = _documented(SOLVERS[name])
    assert not [n for n, c in collections.Counter(documented).items() if c > 1]


@pytest.mark.parametrize("name", ["FedLasso", "FedLogisticRegression", "FedLowRank"])
def test_fit_says_that_no_clients_means_one_client(name):
    doc = NumpyDocString(inspect.getdoc(ESTIMATORS[name].fit))
    clients = " ".join(next(p.desc for p in doc["Parameters"] if p.name == "clients"))
    assert "one client" in clients and "centralized" in clients and "clients=site" in clients
    attributes = {a.name: " ".join(a.desc) for a in NumpyDocString(
        inspect.getdoc(ESTIMATORS["FedLasso"]))["Attributes"]}
    assert "without ``clients=``" in attributes["n_clients_"]
