"""skfed.stats takes ``clients=`` a column name, as the formula functions do, and gives
pandas' numbers per group of that column."""

import numpy as np
import pandas as pd
import pytest

from skfed.data import FederatedDataset
from skfed.stats import crosstab, describe, kaplan_meier


def _frame(n=300, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "hospital": rng.choice(["north", "south", "west"], n),
        "age": np.round(rng.normal(60, 12, n)),
        "dose": rng.exponential(2.0, n),
        "sex": rng.choice(["f", "m"], n),
        "time": rng.integers(1, 40, n).astype(float),
        "died": rng.integers(0, 2, n),
    })
    df.loc[rng.random(n) < 0.1, "dose"] = np.nan
    return df


def test_describe_with_a_clients_column_equals_pandas_per_group():
    df = _frame()
    table = describe(df, clients="hospital", min_level_count=1, per_site=True).table
    # the key is not described, as pandas' groupby leaves it out
    assert "hospital" not in table.index.get_level_values(0)
    expected = df.groupby("hospital")[["age", "dose"]].describe()
    for site, rows in df.groupby("hospital"):
        column = table[("all", site)]
        assert column[("N", "", "count")] == len(rows)
        for c in ["age", "dose"]:
            for stat in ["count", "25%", "50%", "75%"]:
                assert column[(c, "", stat)] == expected.loc[site, (c, stat)], (site, c, stat)
            for stat in ["mean", "std"]:
                np.testing.assert_allclose(column[(c, "", stat)], expected.loc[site, (c, stat)],
                                           rtol=1e-12)
        for level, n in rows["sex"].value_counts().items():
            assert column[("sex", level, "count")] == n
    # the same table as with one label per row
    by_labels = describe(df.drop(columns="hospital"), clients=df["hospital"].to_numpy(),
                         min_level_count=1, per_site=True).table
    pd.testing.assert_frame_equal(table, by_labels)


def test_other_stats_functions_take_a_clients_column():
    df = _frame(seed=1)
    got = crosstab(df, "sex", "died", clients="hospital").table
    expected = crosstab(df, "sex", "died", clients=df["hospital"].to_numpy()).table
    pd.testing.assert_frame_equal(got, expected)
    km = kaplan_meier(df, time="time", event="died", clients="hospital")
    labels = df["hospital"].to_numpy()
    pd.testing.assert_frame_equal(
        km, kaplan_meier(df, time="time", event="died", clients=labels))


def test_a_clients_column_that_is_not_there_is_named():
    df = _frame(n=60)
    with pytest.raises(ValueError, match="clients='site' is not a column"):
        describe(df, clients="site")
    dataset = FederatedDataset.from_arrays(df, clients=df["hospital"].to_numpy())
    with pytest.raises(ValueError, match="names a column: pass a DataFrame"):
        describe(dataset, clients="hospital")
