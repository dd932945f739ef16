"""Federated preprocessing, from per-site summaries only, equals scikit-learn's on pooled rows."""

import doctest
import importlib
import warnings
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfed import FedLasso
from skfed.preprocessing import FedOneHotEncoder, FedSimpleImputer, FedStandardScaler
from skfed.preprocessing import _summaries as summaries
from skfed.preprocessing._imputer import _midpoint, federated_median

N_SITES = 4


# -- data ----------------------------------------------------------------------
def _numeric(n=400, d=5, *, nan=False, seed=0):
    """Features on very different scales and offsets; sites = quantiles of feature 0
    (site means differ a lot), or an IID split, or one site."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 1e-3, 50.0, 1.0, 1e4])[:d] \
        + np.array([0.0, 1e6, -3.0, 1e3, 0.0])[:d]
    X[:, 3] = np.round(X[:, 3])  # ties
    quantile = np.digitize(X[:, 0], np.quantile(X[:, 0], [0.25, 0.5, 0.75]))
    X[:, 1] += 5.0 * quantile  # heterogeneous site means in another feature too
    if nan:
        X[rng.random(X.shape) < 0.15] = np.nan
        X[quantile == 0, 2] = np.nan  # a site whose column is all missing
    sites = {"one": None, "iid": rng.integers(0, N_SITES, size=n), "quantile": quantile}
    return X, sites


def _frame(n=300, seed=0):
    """Mixed DataFrame: string columns (with NaN), numeric ones; one site lacks a category,
    one site's numeric column is all missing."""
    rng = np.random.default_rng(seed)
    city = rng.choice(["lyon", "paris", "nice", "brest"], size=n)
    site = np.where(city == "brest", 3, rng.integers(0, 3, size=n))  # only site 3 has brest
    colour = rng.choice(["red", "green", "blue"], size=n).astype(object)
    colour[rng.random(n) < 0.1] = np.nan
    age = rng.normal(40, 12, size=n)
    age[rng.random(n) < 0.2] = np.nan
    income = rng.lognormal(10, 1, size=n) + 1e4 * site
    income[site == 1] = np.nan
    df = pd.DataFrame({"city": city, "colour": pd.Series(colour, dtype="str"), "age": age,
                       "income": income})
    y = 0.05 * np.nan_to_num(age) + (city == "paris") + 1e-4 * np.nan_to_num(income) \
        + rng.normal(scale=0.1, size=n)
    return df, y, site


# -- summaries: small, per site ------------------------------------------------
def test_summaries_are_small_and_of_one_site():
    X, _ = _numeric(n=200, nan=True)
    d = X.shape[1]
    site = X[:50]
    for out in (summaries.moments_summary(site, None),
                summaries.mean_summary(site, None, np.nan),
                summaries.range_summary(site, None, np.nan),
                summaries.count_below_summary(site, None, np.zeros(d), np.nan)):
        for value in out.values():
            assert np.ndim(value) == 0 or np.shape(value) == (d,)
    cats = summaries.categories_summary(np.array([["a"], ["b"], ["a"]], dtype=object))
    assert [list(c) for c in cats] == [["a", "b"]]


def test_map_sites_groups_rows_and_refuses_bad_clients():
    X = np.arange(12.0).reshape(6, 2)
    labels, out = summaries._map_sites(lambda X, sw: X.shape[0], X, ["b", "a", "b", "b", "a", "c"],
                                       None)
    assert list(labels) == ["a", "b", "c"] and out == [2, 3, 1]
    with pytest.raises(ValueError, match="clients has 3 entries but X has 6 rows"):
        summaries._map_sites(summaries.moments_summary, X, [0, 1, 2], None)
    with pytest.raises(ValueError, match="client 'z' has no samples with positive weight"):
        summaries._map_sites(summaries.moments_summary, X, ["y"] * 3 + ["z"] * 3,
                             np.array([1.0, 1, 1, 0, 0, 0]))


@pytest.mark.parametrize("offset", [1e6, 1e9, 1e12])
def test_chan_merge_is_stable_far_from_zero(offset):
    rng = np.random.default_rng(3)
    X = offset + rng.normal(size=(1000, 1))
    parts = np.array_split(np.sort(X, axis=0), 7)  # sites whose means differ little vs offset
    pooled = summaries.merge_moments([summaries.moments_summary(p, None) for p in parts])
    values = [Fraction(float(v)) for v in X[:, 0]]  # the exact variance of the stored values
    mean = sum(values) / len(values)
    reference = float(sum((v - mean) ** 2 for v in values) / len(values))
    np.testing.assert_allclose(pooled["var"], reference, rtol=1e-14)
    naive = np.mean(X**2) - np.mean(X) ** 2  # raw sums of squares: lost in cancellation
    assert abs(naive - reference) > 1e-5 * reference


# -- FedStandardScaler -----------------------------------------------------------
@pytest.mark.parametrize("split", ["one", "iid", "quantile"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("nan", [False, True])
def test_scaler_equals_sklearn(split, weighted, nan):
    X, sites = _numeric(nan=nan)
    sw = np.random.default_rng(1).uniform(0.1, 3.0, size=len(X)) if weighted else None
    ref = StandardScaler().fit(X, sample_weight=sw)
    fed = FedStandardScaler().fit(X, clients=sites[split], sample_weight=sw)
    assert fed.n_clients_ == (1 if split == "one" else N_SITES)
    if split == "one":  # one site: the same arithmetic, bit for bit
        for name in ("mean_", "var_", "scale_", "n_samples_seen_"):
            np.testing.assert_array_equal(getattr(fed, name), getattr(ref, name))
    for name in ("mean_", "var_", "scale_", "n_samples_seen_"):
        np.testing.assert_allclose(getattr(fed, name), getattr(ref, name), rtol=1e-12)
    assert np.shape(fed.n_samples_seen_) == np.shape(ref.n_samples_seen_)
    Xt = fed.transform(X)
    np.testing.assert_allclose(Xt, ref.transform(X), rtol=1e-10, atol=1e-10)
    assert np.array_equal(np.isnan(Xt), np.isnan(X))  # NaNs kept
    np.testing.assert_allclose(fed.inverse_transform(Xt), X, rtol=1e-12)


@pytest.mark.parametrize("with_mean,with_std,sparse", [
    (True, False, False), (False, True, False), (False, False, False),
    (False, True, True), (False, False, True)])  # sparse input cannot be centred
def test_scaler_options_and_sparse_equal_sklearn(with_mean, with_std, sparse):
    X, sites = _numeric(nan=True)
    X[np.random.default_rng(2).random(X.shape) < 0.3] = 0.0
    X = sp.csr_matrix(X) if sparse else X
    sw = np.random.default_rng(1).uniform(0.1, 3.0, size=X.shape[0])
    for weights in (None, sw):
        ref = StandardScaler(with_mean=with_mean, with_std=with_std).fit(X, sample_weight=weights)
        fed = FedStandardScaler(with_mean=with_mean, with_std=with_std).fit(
            X, clients=sites["quantile"], sample_weight=weights)
        for name in ("mean_", "var_", "scale_", "n_samples_seen_"):
            a, b = getattr(fed, name), getattr(ref, name)
            assert (a is None) == (b is None), name
            if b is not None:
                np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=name)
        np.testing.assert_array_equal(np.asarray(fed.n_samples_seen_).dtype,
                                      np.asarray(ref.n_samples_seen_).dtype)
        a, b = fed.transform(X), ref.transform(X)
        if sparse:
            assert sp.issparse(a)
            a, b = a.toarray(), b.toarray()
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_scaler_constant_and_float32_like_sklearn():
    X, sites = _numeric()
    X[:, 2] = 0.1  # constant across every site: scale 1
    fed = FedStandardScaler().fit(X, clients=sites["quantile"])
    assert fed.scale_[2] == 1.0 and StandardScaler().fit(X).scale_[2] == 1.0
    X32 = X.astype(np.float32)
    out = FedStandardScaler().fit(X32, clients=sites["iid"]).transform(X32)
    assert out.dtype == np.float32
    with pytest.raises(ValueError, match="Cannot center sparse"):
        FedStandardScaler().fit(sp.csr_matrix(X))


def test_scaler_bad_input():
    X, sites = _numeric(n=40)
    with pytest.raises(ValueError, match="clients has 3 entries but X has 40 rows"):
        FedStandardScaler().fit(X, clients=[0, 1, 2])
    sw = np.ones(40)
    sw[sites["quantile"] == 2] = 0.0
    with pytest.raises(ValueError, match="client 2 has no samples with positive weight"):
        FedStandardScaler().fit(X, clients=sites["quantile"], sample_weight=sw)
    with pytest.raises(TypeError, match="clients="):
        FedStandardScaler().fit(X, groups=sites["quantile"])
    with pytest.raises(ValueError, match="could not convert"):
        FedStandardScaler().fit(np.array([["a", 1.0]], dtype=object))


# -- FedSimpleImputer --------------------------------------------------------------
def _imputer_pair(strategy, **kw):
    return SimpleImputer(strategy=strategy, **kw), FedSimpleImputer(strategy=strategy, **kw)


@pytest.mark.parametrize("split", ["one", "iid", "quantile"])
@pytest.mark.parametrize("strategy", ["mean", "median", "most_frequent", "constant"])
def test_imputer_equals_sklearn(split, strategy):
    X, sites = _numeric(nan=True)
    X[:, 1] = np.nan  # missing at every site: dropped, with scikit-learn's warning
    ref, fed = _imputer_pair(strategy, add_indicator=True)
    ref.fit(X)
    fed.fit(X, clients=sites[split])
    if strategy == "mean":
        np.testing.assert_allclose(fed.statistics_, ref.statistics_, rtol=1e-12)
    else:
        np.testing.assert_array_equal(fed.statistics_.astype(float),
                                      ref.statistics_.astype(float))
    with pytest.warns(UserWarning, match="Skipping features without any observed values"):
        out = fed.transform(X)
    with pytest.warns(UserWarning, match="Skipping features"):
        expected = ref.transform(X)
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    np.testing.assert_array_equal(fed.indicator_features_, ref.indicator_.features_)
    np.testing.assert_array_equal(fed.get_feature_names_out(), ref.get_feature_names_out())
    kept = _imputer_pair(strategy, keep_empty_features=True)
    np.testing.assert_allclose(kept[1].fit(X, clients=sites[split]).transform(X),
                               kept[0].fit(X).transform(X), rtol=1e-12)


def test_median_is_exact_and_bounded():
    rng = np.random.default_rng(7)
    worst = 0
    for trial in range(40):
        n = int(rng.integers(1, 400))
        bits = rng.integers(0, 2**63 - 2**52, size=(n, 4), dtype=np.int64)
        X = bits.view(np.float64) * rng.choice([-1.0, 1.0], size=(n, 4))  # every exponent
        X[:, 1] = rng.choice([0.0, -0.0, 5e-324, -5e-324, 1.0], size=n)  # ties, signed zeros
        X[:, 2] = 1.0 + np.arange(n) * np.finfo(float).eps  # adjacent floats
        X[:, 3] = rng.normal(size=n) * 1e3
        X[rng.random(X.shape) < 0.1] = np.nan
        site = rng.integers(0, 6, size=n)
        fed = FedSimpleImputer(strategy="median", keep_empty_features=True).fit(X, clients=site)
        for j in range(4):
            column = X[~np.isnan(X[:, j]), j]
            expected = np.median(column) if column.size else 0.0
            assert fed.statistics_[j] == expected, (trial, j)
        worst = max(worst, fed.n_rounds_)
    assert worst <= 66  # 1 range round + <= 64 bisection steps + 1 (even count)


def test_median_bisection_messages_and_round_bound():
    """What the server sends and gets each round; the 64-step bound of float64 bisection."""
    # values at 2**-1000 ... 2**1000: a plain value-space bisection would need ~2000 steps
    X = np.ldexp(1.0, np.arange(-1000, 1001, 7))[:, None]
    X = np.hstack([X, -X[::-1]])
    site = np.arange(len(X)) % 3
    log = []

    def map_sites(fn, *args):
        labels, out = summaries._map_sites(fn, X, site, None, *args)
        log.append((fn.__name__, [{k: np.shape(v) for k, v in s.items()} for s in out]))
        return out

    median, count, n_rounds, _ = federated_median(map_sites, np.nan)
    np.testing.assert_array_equal(median, np.median(X, axis=0))
    assert n_rounds == len(log) <= 66
    assert log[0][0] == "range_summary" and all(name == "count_below_summary"
                                                for name, _ in log[1:])
    for _, shapes in log[1:]:  # 3 numbers per feature per site, never rows
        assert shapes == [{"count": (2,), "below": (2,), "above": (2,)}] * 3
    # the threshold halves the float64 values in between
    lo, hi = np.array([-np.finfo(float).max, 1.0]), np.array([np.finfo(float).max, 2.0])
    t = _midpoint(lo, hi)
    assert t[0] == 0.0 and t[1] == 1.5


def test_imputer_strings_like_sklearn():
    df, _, site = _frame()
    cols = ["city", "colour"]
    for strategy, kw in (("most_frequent", {}), ("constant", {}),
                         ("constant", {"fill_value": "unknown"})):
        ref = SimpleImputer(strategy=strategy, **kw).fit(df[cols])
        fed = FedSimpleImputer(strategy=strategy, **kw).fit(df[cols], clients=site)
        np.testing.assert_array_equal(fed.statistics_, ref.statistics_)
        np.testing.assert_array_equal(fed.transform(df[cols]), ref.transform(df[cols]))
        np.testing.assert_array_equal(fed.get_feature_names_out(), ref.get_feature_names_out())
    # ties go to the smallest value, as scikit-learn (sites disagree on their own mode)
    X = np.array([["b"], ["b"], ["a"], ["a"], ["c"]], dtype=object)
    fed = FedSimpleImputer(strategy="most_frequent").fit(X, clients=[0, 0, 1, 1, 2])
    assert fed.statistics_[0] == "a"
    assert SimpleImputer(strategy="most_frequent").fit(X).statistics_[0] == "a"
    # a placeholder other than NaN, integer data
    Xi = np.array([[1, -1], [2, 3], [2, -1], [1, 3], [-1, 3]])
    ref = SimpleImputer(strategy="most_frequent", missing_values=-1).fit(Xi)
    fed = FedSimpleImputer(strategy="most_frequent", missing_values=-1).fit(
        Xi, clients=[0, 1, 0, 1, 1])
    np.testing.assert_array_equal(fed.transform(Xi), ref.transform(Xi))


def test_imputer_bad_input():
    df, _, site = _frame(n=60)
    for strategy in ("mean", "median"):
        with pytest.raises(ValueError, match="non-numeric data: column 'city'"):
            FedSimpleImputer(strategy=strategy).fit(df, clients=site)
        with pytest.raises(ValueError, match="non-numeric data: column 1 "):
            FedSimpleImputer(strategy=strategy).fit(
                np.array([[1.0, "x"], [2.0, "y"]], dtype=object))
    with pytest.raises(InvalidParameterError, match="strategy"):
        FedSimpleImputer(strategy="mode").fit(df[["age"]])
    with pytest.raises(ValueError, match="clients has 2 entries but X has 60 rows"):
        FedSimpleImputer().fit(df[["age"]], clients=[0, 1])
    imp = FedSimpleImputer().fit(df[["age"]], clients=site)
    saved = dict(imp.__dict__)
    with pytest.raises(ValueError):  # a failed fit changes nothing
        imp.fit(df[["city"]])
    assert imp.__dict__.keys() == saved.keys() and imp.clients_ is saved["clients_"]


# -- FedOneHotEncoder --------------------------------------------------------------
def _assert_same_categories(fed, ref):
    assert len(fed.categories_) == len(ref.categories_)
    for a, b in zip(fed.categories_, ref.categories_):
        assert a.dtype == b.dtype
        assert [repr(v) for v in a] == [repr(v) for v in b]  # NaN categories compare too


@pytest.mark.parametrize("split", ["one", "iid", "quantile"])
@pytest.mark.parametrize("kw", [{}, {"drop": "first"}, {"drop": "if_binary"},
                                {"handle_unknown": "ignore"}])
def test_encoder_equals_sklearn_on_frames(split, kw):
    df, _, site = _frame()
    sites = {"one": None, "iid": np.arange(len(df)) % N_SITES, "quantile": site}
    cols = ["city", "colour"]
    ref = OneHotEncoder(sparse_output=False, **kw).fit(df[cols])
    fed = FedOneHotEncoder(**kw).fit(df[cols], clients=sites[split])
    _assert_same_categories(fed, ref)
    assert np.isnan(fed.categories_[1][-1])  # missing values: a category, last
    np.testing.assert_array_equal(fed.transform(df[cols]), ref.transform(df[cols]))
    np.testing.assert_array_equal(fed.get_feature_names_out(), ref.get_feature_names_out())
    np.testing.assert_array_equal(fed.drop_idx_ is None, ref.drop_idx_ is None)
    if kw.get("handle_unknown") == "ignore":
        new = pd.DataFrame({"city": ["rome"], "colour": pd.Series(["red"], dtype="str")})
        np.testing.assert_array_equal(fed.transform(new), ref.transform(new))


def test_encoder_numeric_sparse_and_site_lacking_category():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, 5, 200), rng.choice([1.5, -2.0, 7.0], 200)])
    site = np.where(X[:, 0] == 4, 9, rng.integers(0, 3, 200))  # category 4 at site 9 only
    ref = OneHotEncoder().fit(X)
    fed = FedOneHotEncoder(sparse_output=True).fit(X, clients=site)
    _assert_same_categories(fed, ref)
    out = fed.transform(X)
    assert sp.issparse(out)
    np.testing.assert_array_equal(out.toarray(), ref.transform(X).toarray())
    with pytest.raises(ValueError, match="Found unknown categories"):
        fed.transform([[11, 1.5]])
    back = fed.inverse_transform(out[:5])
    np.testing.assert_array_equal(back, X[:5])
    # explicit categories: each site checks its rows against them
    with pytest.raises(ValueError, match=r"Found unknown categories \[.*4\.0.*\] in column 0"):
        FedOneHotEncoder(categories=[[0, 1, 2, 3], [-2.0, 1.5, 7.0]]).fit(X, clients=site)
    fixed = FedOneHotEncoder(categories=[[0, 1, 2, 3, 4, 5], [-2.0, 1.5, 7.0]])
    fixed.fit(X, clients=site)
    assert fixed.transform(X).shape == (200, 9)


def test_encoder_lists_of_strings_and_mixed_types():
    X = [["a", "x"], ["b", "y"], ["a", "y"]]
    ref = OneHotEncoder(sparse_output=False).fit(X)
    fed = FedOneHotEncoder().fit(X, clients=[0, 1, 1])
    _assert_same_categories(fed, ref)
    np.testing.assert_array_equal(fed.transform(X), ref.transform(X))
    mixed = np.array([["a"], [1]], dtype=object)
    with pytest.raises(TypeError, match="uniformly strings or numbers"):
        FedOneHotEncoder().fit(mixed, clients=[0, 1])


def test_encoder_categorical_boolean_and_integer_columns():
    df = pd.DataFrame({"c": pd.Categorical(["b", "a", "c", "a", "b"]), "n": [3, 1, 2, 1, 3],
                       "b": [True, False, True, True, False]})
    ref = OneHotEncoder(sparse_output=False).fit(df)
    fed = FedOneHotEncoder().fit(df, clients=[0, 0, 1, 1, 2])
    _assert_same_categories(fed, ref)
    np.testing.assert_array_equal(fed.transform(df), ref.transform(df))
    np.testing.assert_array_equal(fed.get_feature_names_out(), ref.get_feature_names_out())


def test_encoder_pandas_output():
    df, _, site = _frame(n=50)
    out = FedOneHotEncoder().set_output(transform="pandas").fit_transform(
        df[["city"]], clients=site)
    assert list(out.columns) == ["city_brest", "city_lyon", "city_nice", "city_paris"]


# -- pipelines and metadata routing -----------------------------------------------
def test_pipeline_scaler_then_fedlasso_routing_off():
    X, sites = _numeric(n=300)
    rng = np.random.default_rng(0)
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    y = Z @ rng.normal(size=X.shape[1]) + rng.normal(size=len(X))
    site = sites["quantile"]
    fed = make_pipeline(FedStandardScaler(), FedLasso(alpha=0.1))
    fed.fit(X, y, fedstandardscaler__clients=site, fedlasso__clients=site)
    ref = make_pipeline(StandardScaler(), FedLasso(alpha=0.1)).fit(X, y, fedlasso__clients=site)
    assert fed[0].n_clients_ == N_SITES and fed[-1].n_clients_ == N_SITES
    np.testing.assert_allclose(fed[-1].coef_, ref[-1].coef_, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fed[-1].intercept_, ref[-1].intercept_, rtol=1e-10)


def _column_transformers():
    num, cat = ["age", "income"], ["city", "colour"]
    fed = ColumnTransformer([("num", make_pipeline(FedSimpleImputer(), FedStandardScaler()), num),
                             ("cat", FedOneHotEncoder(handle_unknown="ignore"), cat)])
    ref = ColumnTransformer([("num", make_pipeline(SimpleImputer(), StandardScaler()), num),
                             ("cat", OneHotEncoder(handle_unknown="ignore",
                                                   sparse_output=False), cat)])
    return fed, ref


def test_column_transformer_routing_on():
    df, y, site = _frame()
    fed_ct, ref_ct = _column_transformers()
    with sklearn.config_context(enable_metadata_routing=True):
        fed = make_pipeline(fed_ct, FedLasso(alpha=0.01)).fit(df, y, clients=site)
        ref = make_pipeline(ref_ct, FedLasso(alpha=0.01)).fit(df, y, clients=site)
    ct = fed[0]
    assert ct.named_transformers_["num"][0].n_clients_ == N_SITES
    assert ct.named_transformers_["num"][1].n_clients_ == N_SITES
    assert ct.named_transformers_["cat"].n_clients_ == N_SITES
    np.testing.assert_allclose(ct.transform(df), ref[0].transform(df), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(ct.get_feature_names_out(), ref[0].get_feature_names_out())
    np.testing.assert_allclose(fed[-1].coef_, ref[-1].coef_, rtol=1e-10, atol=1e-10)


def test_column_transformer_routing_off():
    df, y, site = _frame(n=80)
    fed_ct, ref_ct = _column_transformers()
    # with routing off a ColumnTransformer takes no fit parameters at all ...
    with pytest.raises(ValueError, match="enable_metadata_routing=True"):
        fed_ct.fit(df, y, clients=site)
    # ... so its transformers see one site; the statistics are the pooled ones anyway
    fed_ct.fit(df, y)
    assert fed_ct.named_transformers_["cat"].n_clients_ == 1
    np.testing.assert_allclose(fed_ct.transform(df), ref_ct.fit(df).transform(df), rtol=1e-12,
                               atol=1e-12)


# -- scikit-learn's estimator checks -----------------------------------------------
CHECKED = [FedStandardScaler(), FedStandardScaler(with_mean=False),
           FedSimpleImputer(), FedSimpleImputer(strategy="median"),
           FedSimpleImputer(strategy="most_frequent"),
           FedSimpleImputer(strategy="constant", add_indicator=True),
           FedOneHotEncoder(), FedOneHotEncoder(handle_unknown="ignore", drop="if_binary")]


def _expected_failed_checks(estimator):
    # every check passes (the federated statistics equal the pooled ones, so even
    # the sample-weight equivalence checks of the scaler hold)
    return {}


@parametrize_with_checks(CHECKED, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check(estimator)


@pytest.mark.parametrize("module_name", ["skfed.preprocessing._scaler",
                                         "skfed.preprocessing._imputer",
                                         "skfed.preprocessing._encoder"])
def test_docstring_examples(module_name):
    result = doctest.testmod(importlib.import_module(module_name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
