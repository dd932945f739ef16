"""FedGEE equals statsmodels' GEE on the pooled rows.

Patients (clusters of 2 to 8 visits, unequal sizes) with a within-patient
correlation, in three hospitals: split at random by patient (IID) and by patient
size and covariates (heterogeneous: small clusters at one site, large at another).
For each working correlation and a few families: the estimates, the robust and the
model-based standard errors, the working correlation's parameter and the scale to
1e-6 of statsmodels' (its AR(1) estimate over all pairs is Brent's search, which
stops at ~1e-8: those to 1e-6 too, every other to 1e-9).
"""

import warnings

import numpy as np
import pandas as pd
import pytest

sm = pytest.importorskip("statsmodels.api")

from skfed import FederatedDataset  # noqa: E402
from skfed.gee import FedGEE  # noqa: E402
from skfed.gee._site import site_gee_clusters  # noqa: E402
from skfed.privacy import DifferentialPrivacy, SecureAggregation  # noqa: E402

FAMILIES = {"gaussian": "Gaussian", "binomial": "Binomial", "poisson": "Poisson",
            "gamma": "Gamma"}


def visits(seed=0, n_patients=90):
    """A long table: patient ``id``, visit number ``visit``, covariates, four outcomes."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 9, n_patients)
    pid = np.repeat(np.arange(n_patients), sizes)
    visit = np.concatenate([np.arange(s) for s in sizes])
    n = pid.size
    age = rng.normal(size=n_patients)[pid]
    dose = rng.normal(size=n) + 0.3 * visit
    # an AR(1) patient process plus a patient effect: every working correlation has
    # something to estimate
    e = np.zeros(n)
    for i in range(n):
        e[i] = rng.normal() + (0.6 * e[i - 1] if visit[i] > 0 else 0.0)
    eta = 0.2 + 0.4 * age - 0.3 * dose + 0.5 * rng.normal(size=n_patients)[pid] + 0.5 * e
    return pd.DataFrame({
        "id": pid, "visit": visit, "age": age, "dose": dose, "sizes": sizes[pid],
        "gaussian": eta + rng.normal(size=n),
        "binomial": (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(float),
        "poisson": rng.poisson(np.exp(0.5 * eta)).astype(float),
        "gamma": rng.gamma(3.0, np.exp(0.3 * eta) / 3.0)})


def sites_of(rows, split):
    """Each row's hospital: by patient at random (IID), or by cluster size and age
    (heterogeneous)."""
    if split == "iid":
        rng = np.random.default_rng(1)
        by_patient = rng.choice(np.array(["A", "B", "C"]), rows["id"].max() + 1)
        return by_patient[rows["id"]]
    return np.where(rows["sizes"] <= 3, "A", np.where(rows["age"] < 0, "B", "C"))


def reference(rows, family, cov_struct, grid=False, link=None):
    fam = getattr(sm.families, FAMILIES[family])
    fam = fam() if link is None else fam(link=link)
    struct = {"independence": sm.cov_struct.Independence(),
              "exchangeable": sm.cov_struct.Exchangeable(),
              "autoregressive": sm.cov_struct.Autoregressive(grid=grid)}[cov_struct]
    exog = sm.add_constant(rows[["age", "dose"]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.GEE(rows[family], exog, groups=rows["id"].to_numpy(),
                      time=rows["visit"].to_numpy(), family=fam, cov_struct=struct).fit()


def assert_equal_to(est, ref, tol=1e-9):
    np.testing.assert_allclose(est.params_, ref.params, rtol=tol, atol=tol)
    np.testing.assert_allclose(est.bse_robust_, ref.standard_errors("robust"), rtol=tol,
                               atol=tol)
    np.testing.assert_allclose(est.bse_naive_, ref.standard_errors("naive"), rtol=tol,
                               atol=tol)
    np.testing.assert_allclose(est.dep_params_, ref.cov_struct.dep_params or 0.0,
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(est.scale_, ref.scale, rtol=tol, atol=tol)


def fit(rows, split, family, cov_struct, **params):
    X = rows[["age", "dose", "id", "visit"]]
    return FedGEE(family, cov_struct=cov_struct, **params).fit(
        X, rows[family], clients=sites_of(rows, split), groups="id", time="visit")


@pytest.fixture(scope="module")
def rows():
    return visits()


@pytest.mark.parametrize("split", ["iid", "heterogeneous"])
@pytest.mark.parametrize("family, cov_struct", [
    ("gaussian", "independence"), ("gaussian", "exchangeable"),
    ("gaussian", "autoregressive"), ("binomial", "independence"),
    ("binomial", "exchangeable"), ("binomial", "autoregressive"),
    ("poisson", "exchangeable"), ("poisson", "autoregressive"),
    ("gamma", "independence"), ("gamma", "exchangeable")])
def test_equals_statsmodels(rows, split, family, cov_struct):
    est = fit(rows, split, family, cov_struct)
    ref = reference(rows, family, cov_struct)
    assert_equal_to(est, ref, 1e-6 if cov_struct == "autoregressive" else 1e-9)
    assert est.converged_ and est.n_clusters_ == rows["id"].nunique()


@pytest.mark.parametrize("family", ["gaussian", "poisson", "gamma"])
def test_ar1_on_the_lag_one_grid_equals_statsmodels(rows, family):
    est = fit(rows, "heterogeneous", family, "autoregressive", grid=True)
    assert_equal_to(est, reference(rows, family, "autoregressive", grid=True))


@pytest.mark.parametrize("family, link, sm_link", [
    ("gamma", "log", "Log"), ("poisson", "identity", "Identity"),
    ("gaussian", "log", "Log")])
def test_common_links_equal_statsmodels(rows, family, link, sm_link):
    if family != "gamma":  # identity and log links of positive means
        rows = rows.assign(**{family: rows[family] + 6.0})
    est = fit(rows, "iid", family, "exchangeable", link=link)
    ref = reference(rows, family, "exchangeable", link=getattr(sm.families.links, sm_link)())
    assert_equal_to(est, ref)


def test_the_table_is_statsmodels(rows):
    est = fit(rows, "iid", "binomial", "exchangeable")
    ref = reference(rows, "binomial", "exchangeable")
    results = est.results_
    np.testing.assert_allclose(results.conf_int(), ref.conf_int(), rtol=1e-9)
    np.testing.assert_allclose(results.pvalues, ref.pvalues, rtol=1e-8)
    R = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    mine, theirs = results.wald_test(R), ref.wald_test(R, scalar=True)
    np.testing.assert_allclose(mine.statistic, theirs.statistic, rtol=1e-8)
    text = str(est.summary())
    assert "binomial" in text and "Exchangeable" in text and "No. clusters:" in text
    assert results.endog_name == "binomial" and "odds ratio" == results._measure()
    naive = FedGEE("binomial", cov_struct="exchangeable", cov_type="naive").fit(
        rows[["age", "dose", "id"]], rows["binomial"], clients=sites_of(rows, "iid"),
        groups="id")
    np.testing.assert_allclose(naive.bse_, ref.standard_errors("naive"), rtol=1e-9)


def test_secure_aggregation_is_exact_and_differential_privacy_refused(rows):
    plain = fit(rows, "heterogeneous", "poisson", "exchangeable")
    masked = fit(rows, "heterogeneous", "poisson", "exchangeable",
                 privacy=SecureAggregation())
    np.testing.assert_allclose(masked.params_, plain.params_, rtol=1e-12)
    np.testing.assert_allclose(masked.bse_, plain.bse_, rtol=1e-12)
    assert "masked" in masked.results_._summary_info()["Sums:"]
    with pytest.raises(ValueError, match="DifferentialPrivacy is refused.*unbounded"):
        fit(rows, "iid", "poisson", "exchangeable",
            privacy=DifferentialPrivacy(1.0))


def test_a_label_at_two_sites_is_two_clusters_and_no_label_leaves(rows):
    """The labels (a patient's identifier) stay at their site: a label at two sites is
    two clusters, statsmodels' fit with the groups qualified by the site."""
    site = sites_of(rows, "iid").copy()
    moved = (rows["id"].to_numpy() < 3) & (rows["visit"].to_numpy() == 0)
    site[moved] = np.where(site[moved] == "A", "B", "A")
    est = FedGEE("gaussian", cov_struct="exchangeable").fit(
        rows[["age", "dose", "id", "visit"]], rows["gaussian"], clients=site, groups="id",
        time="visit")
    qualified = rows.assign(id=pd.factorize(pd.Series(site) + "/" + rows["id"].astype(str))[0])
    ref = reference(qualified, "gaussian", "exchangeable")
    assert_equal_to(est, ref)
    assert est.n_clusters_ == qualified["id"].nunique() > rows["id"].nunique()
    data = FederatedDataset.from_arrays(rows[["age", "dose", "id", "visit"]],
                                        rows["gaussian"], site)
    design = {"groups": "id", "time": "visit", "time_feature": False, "family": "gaussian",
              "link": "identity", "fit_intercept": True, "cov_struct": "exchangeable"}
    replies = data.map(site_gee_clusters, design)
    assert all(set(r) == {"clusters", "rows", "sizes", "max_lag"} for r in replies)


def test_bad_input_is_named(rows):
    X = rows[["age", "dose", "id"]]
    site = sites_of(rows, "iid")
    with pytest.raises(ValueError, match="unknown cov_struct='unstructured'"):
        FedGEE(cov_struct="unstructured").fit(X, rows["gaussian"], clients=site, groups="id")
    with pytest.raises(ValueError, match="groups is required"):
        FedGEE().fit(X, rows["gaussian"], clients=site)
    holes = X.assign(dose=X["dose"].where(rows["visit"] != 2))
    with pytest.raises(ValueError, match="(?i)nan|missing"):
        FedGEE().fit(holes, rows["gaussian"], clients=site, groups="id")
    with pytest.raises(ValueError, match="privacy must be None or SecureAggregation"):
        FedGEE(privacy="masked").fit(X, rows["gaussian"], clients=site, groups="id")
    twice = rows["visit"].where(rows["visit"] != 1, 0)
    with pytest.raises(ValueError, match="two rows of a cluster share a time"):
        FedGEE(cov_struct="autoregressive").fit(X, rows["gaussian"], clients=site,
                                                groups="id", time=twice)
    with pytest.raises(ValueError, match="link='logit' is not one of the poisson"):
        FedGEE("poisson", link="logit").fit(X, rows["poisson"], clients=site, groups="id")
    unlabelled = X.assign(id=X["id"].where(rows["visit"] != 3))
    with pytest.raises(ValueError, match="grouping column 'id' has .* missing value"):
        FedGEE().fit(unlabelled, rows["gaussian"], clients=site, groups="id")
