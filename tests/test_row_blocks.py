"""Sites' rows in process: views of the caller's rows, exactly the rows of a mask."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from skfed.data import FederatedDataset
from skfed.data.blocks import row_blocks
from skfed.datafits.base import hessian_from_raw
from skfed.federation.layout import Layout


def _indices(clients):
    return [np.flatnonzero(clients == c) for c in np.unique(clients)]


def test_grouped_rows_are_read_only_views_of_the_callers_array():
    X = np.arange(60.0).reshape(20, 3)
    clients = np.repeat([0, 1, 2], [5, 8, 7])
    blocks = row_blocks(X, _indices(clients))
    for block, idx in zip(blocks, _indices(clients)):
        assert np.shares_memory(block, X)
        np.testing.assert_array_equal(block, X[idx])
        assert block.flags.c_contiguous and not block.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            block[0, 0] = -1.0
    assert X.flags.writeable and X[0, 0] == 0.0  # the caller's array is untouched


def test_interleaved_rows_are_reordered_once_in_their_original_order():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 4))
    clients = rng.integers(0, 4, size=50)
    idx = _indices(clients)
    blocks = row_blocks(X, idx)
    assert not any(np.shares_memory(b, X) for b in blocks)
    assert all(np.shares_memory(b, blocks[0].base) for b in blocks)  # one copy, cut
    for block, rows in zip(blocks, idx):
        np.testing.assert_array_equal(block, X[rows])
    for block, rows in zip(row_blocks(clients, idx), idx):  # 1-D values alike
        np.testing.assert_array_equal(block, clients[rows])


@pytest.mark.parametrize("make", [lambda X: np.asfortranarray(X), sp.csr_matrix,
                                  lambda X: pd.DataFrame(X)])
def test_other_containers_are_indexed_per_site(make):
    X = np.arange(24.0).reshape(8, 3)
    clients = np.array([1, 0, 1, 0, 1, 0, 1, 0])
    for block, rows in zip(row_blocks(make(X), _indices(clients)), _indices(clients)):
        dense = block.to_numpy() if hasattr(block, "to_numpy") else (
            block.toarray() if sp.issparse(block) else block)
        np.testing.assert_array_equal(dense, X[rows])


def test_from_arrays_sites_hold_views_and_the_same_rows():
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((30, 3)), rng.standard_normal(30)
    clients = np.repeat(["a", "b", "c"], 10)
    sites = FederatedDataset.from_arrays(X, y, clients=clients).map(
        lambda site: (site.X, site.y))
    for (Xs, ys), rows in zip(sites, _indices(clients)):
        assert np.shares_memory(Xs, X) and np.shares_memory(ys, y)
        np.testing.assert_array_equal(Xs, X[rows])
        np.testing.assert_array_equal(ys, y[rows])


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("equal", [True, False])
def test_hessian_written_in_place_is_the_weighted_gram(fit_intercept, equal):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((40, 5))
    h = np.full(40, 0.025) if equal else rng.uniform(0, 1, 40)
    layout = Layout(n_features=5, n_outputs=1, fit_intercept=fit_intercept)
    A = np.column_stack([X, np.ones(40)]) if fit_intercept else X
    H = hessian_from_raw(X, h[:, None], layout)
    np.testing.assert_allclose(H, A.T @ (h[:, None] * A), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(H, H.T)
