"""Every example script runs (so the gallery cannot rot)."""

import pathlib
import runpy

import matplotlib
import pytest

matplotlib.use("Agg")

EXAMPLES = sorted((pathlib.Path(__file__).parents[1] / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
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
