"""Every example script runs (so the gallery cannot rot).

The gallery's longest examples (over ten seconds each on two cores) run with the long
runs (``pytest -m slow``); the documentation build executes every gallery example as
well (``make -C docs html``, CI's third step).
"""

import pathlib
import runpy

import matplotlib
import pytest

matplotlib.use("Agg")

EXAMPLES = sorted((pathlib.Path(__file__).parents[1] / "examples").glob("*.py"))
#: the gallery examples of 10-25 s each (two thirds of this file's time)
LONG = {"plot_fco_sparse_recovery.py", "plot_afedpd_participation.py",
        "plot_local_gecl_heterogeneity.py", "plot_fedmls_svm.py"}


@pytest.mark.parametrize("path", [
    pytest.param(path, marks=pytest.mark.slow) if path.name in LONG else path
    for path in EXAMPLES], ids=lambda p: p.name)
def test_example_runs(path, monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    runpy.run_path(str(path), run_name="__main__")
    plt.close("all")


@pytest.mark.parametrize("module_name", [
    "skfed.linear_model._coordinate", "skfed.linear_model._logistic", "skfed.svm._classes",
    "skfed.low_rank._low_rank", "skfed.linear_model._glm"])
def test_docstring_examples(module_name):
    import doctest
    import importlib

    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_the_long_examples_are_there():
    # a renamed long example fails here instead of leaving LONG stale
    assert LONG <= {path.name for path in EXAMPLES}
