"""A service dataset's row steps as the analyst meets them: a refused step says what to
do about it, and a dataset derived by a step still says where its rows are."""

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from skfed.data import FederatedDataset  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402

from ._sites import SITES, services_of  # noqa: E402


def _frames(few=3):
    """Three sites of 100 rows; the first has ``few`` rows without ``x``, the others 20."""
    rng = np.random.default_rng(0)
    frames = []
    for k in range(3):
        frame = pd.DataFrame({"x": rng.normal(size=100), "z": rng.normal(size=100),
                              "y": rng.normal(size=100)})
        frame.loc[frame.index[:few if k == 0 else 20], "x"] = np.nan
        frames.append(frame)
    return frames


def test_a_refused_drop_incomplete_says_what_to_do(tmp_path):
    with services_of(tmp_path, _frames(), target="y") as data:
        with pytest.raises(SiteRefusal) as info:
            data.drop_incomplete()
        message = str(info.value)
        assert info.value.rule == "min_rows" and info.value.site == SITES[0]
        assert "the row step 'drop_incomplete' would leave out, or keep, fewer than 10" \
            in message
        assert "drop_incomplete(features=False)" in message
        assert 'population = "complete"' in message
        # the fixed text never says which of the two, nor how many rows
        assert "3" not in message.replace("hospital", "")
        # the first remedy: keep the rows for an imputer (only rows without a target go)
        kept = data.drop_incomplete(features=False)
        assert kept.n_samples.tolist() == [100, 100, 100]


def test_the_officers_remedy_an_analysis_population(tmp_path):
    """With ``population = "complete"`` declared, every analysis reads the complete
    cases, so drop_incomplete leaves out nothing more and is served."""
    frames = _frames()
    with services_of(tmp_path, frames, target="y",
                     declare='population = "complete"') as data:
        dropped = data.drop_incomplete()
        assert dropped.n_samples.tolist() == [len(f.dropna()) for f in frames]


def test_a_service_dataset_after_a_row_step_says_where_its_rows_are(tmp_path):
    frames = _frames(few=20)
    with services_of(tmp_path, frames, target="y") as data:
        assert repr(data).endswith("at site services)")
        dropped = data.drop_incomplete()
        assert repr(dropped) == ("FederatedDataset(3 sites, 240 rows, 2 features, "
                                 "at site services)")
        assert repr(dropped.subset([SITES[1]])).endswith("at site services)")
    pooled = pd.concat(frames)
    here = FederatedDataset.from_arrays(pooled[["x", "z"]], pooled["y"].to_numpy(),
                                        np.repeat(SITES, 100))
    assert repr(here.drop_incomplete()).endswith("simulated in this process)")
