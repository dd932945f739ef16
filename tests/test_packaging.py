"""The package's pins: skfed itself takes pandas 2 and 3; the test extra pins what
lifelines, a reference of the tests, requires of pandas, and says so."""

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pandas_pin(requirements):
    pins = [r for r in requirements if re.match(r"pandas\b", r)]
    assert len(pins) == 1, pins
    return pins[0]


def test_skfed_takes_pandas_3():
    from packaging.requirements import Requirement

    core = Requirement(_pandas_pin(_project()["dependencies"]))
    assert core.specifier.contains("3.0.0") and core.specifier.contains("2.2.0")


def test_the_test_extra_pins_what_lifelines_needs():
    """The test extra's pandas pin equals lifelines' own requirement, and the README says
    which pin the extra brings and why."""
    from packaging.requirements import Requirement

    pytest.importorskip("lifelines")
    extra = Requirement(_pandas_pin(_project()["optional-dependencies"]["test"]))
    theirs = [Requirement(r) for r in importlib.metadata.requires("lifelines")
              if re.match(r"pandas\b", r)]
    assert len(theirs) == 1 and extra.specifier == theirs[0].specifier
    readme = (ROOT / "README.md").read_text()
    said = [Requirement(r) for r in re.findall(r"`(pandas[<>=!][^`]*)`", readme)]
    assert extra.specifier in [r.specifier for r in said]
    assert "lifelines" in readme
