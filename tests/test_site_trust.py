"""The trusted Dask mode, honestly bounded (issue 20): data paths stay in the site's data
directory, the default timeout is finite."""

import os

import pytest

from skfed.data.site import SiteError
from skfed.data.sources import DATA_DIR_ENV, resolve_path
from skfed.executors.dask_executor import DaskExecutor


def test_paths_stay_in_the_data_directory(tmp_path, monkeypatch):
    mine, other = tmp_path / "hospital-a", tmp_path / "hospital-b"
    mine.mkdir()
    other.mkdir()
    (mine / "visits.csv").write_text("a\n1\n")
    (other / "visits.csv").write_text("a\n2\n")
    os.symlink(other / "visits.csv", mine / "link.csv")
    monkeypatch.setenv(DATA_DIR_ENV, str(mine))
    assert resolve_path("hospital-a", "visits.csv") == mine / "visits.csv"
    for path in ["../hospital-b/visits.csv", str(other / "visits.csv"), "link.csv"]:
        with pytest.raises(SiteError, match="outside the site's data directory"):
            resolve_path("hospital-a", path)


def test_the_default_timeout_is_finite():
    assert DaskExecutor().timeout == 600.0
