"""A formula through three site services (gRPC over mutual TLS): the site checks the
design it receives (data, never code), builds its design matrix from its own rows, and
the fit equals the same formula on the same rows in this process."""

import numpy as np
import pandas as pd
import pytest

from skfed.formula import coxph, glm

from ._sites import SITES, services_of

pytest.importorskip("grpc")


def _frames():
    rng = np.random.default_rng(4)
    n = 900  # 300 rows a site: each sum of the fits' designs passes the dominance rule
    frame = pd.DataFrame({"age": rng.normal(60, 10, n), "sex": rng.choice(["F", "M"], n),
                          "stage": rng.choice(["I", "II", "III"], n),
                          "x": rng.normal(size=n)})
    eta = 0.8 * frame["x"] + 0.5 * (frame["sex"] == "M") - 0.02 * (frame["age"] - 60)
    frame["y"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    frame["time"] = rng.exponential(np.exp(-eta))
    frame["event"] = (rng.random(n) < 0.8).astype(int)
    # heterogeneous sites: by age
    rank = frame["age"].rank(method="first").to_numpy() - 1
    site = (rank * len(SITES) // n).astype(int)
    frames = [frame[site == k].reset_index(drop=True) for k in range(len(SITES))]
    # incomplete rows: at least min_rows = 10 at each site, for each column (a
    # complete-case filter that left out fewer would be refused: the difference of two
    # answers would be a sum over a few rows)
    for part in frames:
        part.loc[part.index[::7], "stage"] = None
        part.loc[part.index[3::9], "x"] = np.nan
    return frames


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    frames = _frames()
    pooled = pd.concat(frames, ignore_index=True)
    labels = np.repeat(list(SITES), [len(f) for f in frames])
    policy = ("min_rows = 10\nmin_level_count = 5\nallow_exact_quantiles = true\n"
              "allow_event_times = true")
    # the sites declare age's range: log(age) is finite on it, and the spline's bounds
    # (the pooled extremes) hold it
    declare = "domains = { age = [%r, %r] }" % (float(pooled["age"].min()),
                                                   float(pooled["age"].max()))
    with services_of(tmp_path_factory.mktemp("formula"), frames, policy=policy,
                     declare=declare) as remote:
        yield remote, pooled, labels


def test_a_glm_formula_through_services_equals_in_process(federation):
    remote, pooled, labels = federation
    formula = "y ~ C(sex) + C(stage, Treatment('II')) + x + np.log(age) + x:C(sex)"
    through = glm(formula, remote, family="binomial")
    here = glm(formula, pooled, family="binomial", clients=labels)
    assert through.param_names == here.param_names
    assert "C(stage, Treatment('II'))[T.I]" in through.param_names
    np.testing.assert_allclose(through.params, here.params, rtol=1e-9)
    np.testing.assert_allclose(through.bse, here.bse, rtol=1e-9)
    assert through.rows_by_site.tolist() == here.rows_by_site.tolist()


def test_spline_knots_from_the_sites_quantiles(federation):
    remote, pooled, labels = federation
    formula = "y ~ bs(age, df=4) + x"
    through = glm(formula, remote, family="binomial")
    here = glm(formula, pooled, family="binomial", clients=labels)
    np.testing.assert_allclose(through.params, here.params, rtol=1e-9)


def test_given_knots_and_bounds_ask_the_sites_for_no_extremes(tmp_path):
    """A spline whose knots and bounds are given asks no site for its column's extremes
    or quantiles (single rows' values): sites without allow_exact_quantiles serve it,
    their declared range within the bounds, and the fit equals statsmodels' (patsy's
    ``bs``) on the pooled rows."""
    from skfed.sites.audit import read_audit

    frames = _frames()
    pooled = pd.concat(frames, ignore_index=True)
    formula = "y ~ bs(age, knots=[50, 60, 70], lower_bound=10, upper_bound=110) + x"
    with services_of(tmp_path, frames, policy="min_rows = 10\nmin_level_count = 5",
                     declare="domains = { age = [15, 105] }") as remote:
        through = glm(formula, remote, family="binomial")
    operations = {record.get("operation") for name in SITES
                  for record in read_audit(tmp_path / name / "audit.jsonl")}
    assert "fit.step" in operations  # the fit ran, and asked for no single row's value
    assert not operations & {"formula.extremes", "stats.count_below"}
    smf = pytest.importorskip("statsmodels.formula.api")
    sm = pytest.importorskip("statsmodels.api")
    reference = smf.glm(formula, pooled, family=sm.families.Binomial()).fit(tol=1e-12)
    # measured: 9e-14 (coefficients) and 4e-12 (standard errors) from statsmodels'
    np.testing.assert_allclose(through.params, reference.params.to_numpy(), rtol=1e-10)
    np.testing.assert_allclose(through.bse, reference.bse.to_numpy(), rtol=1e-10)


def test_a_cox_formula_through_services_equals_in_process(federation):
    remote, pooled, labels = federation
    formula = "age + C(sex) + x"
    through = coxph(formula, remote, duration_col="time", event_col="event")
    here = coxph(formula, pooled, duration_col="time", event_col="event", clients=labels)
    np.testing.assert_allclose(through.params, here.params, rtol=1e-8)


def test_a_crafted_design_is_refused_by_the_site(federation):
    """A modified client sends a design whose factor calls a function outside the
    allow-list: the site refuses the row step before it reads a row."""
    from skfed.formula._design import design_rows
    from skfed.sites import SiteRefusal

    remote, _, _ = federation
    crafted = {"format": "skfed.formula/1",
               "factors": {"x": {"kind": "numeric", "tree": {"call": "system", "args": [
                   {"column": "x"}]}}}}
    with pytest.raises(SiteRefusal, match="malformed design"):
        remote.apply(design_rows, crafted).n_samples


def test_complete_cases_that_leave_out_a_few_rows_are_refused(tmp_path):
    """A site drops its incomplete rows only when it leaves out none or at least
    min_rows (DataSHIELD's subset rule): here 3 rows of one site have a gap."""
    from skfed.sites import SiteRefusal

    frames = _frames()
    for frame in frames:
        frame.loc[:, ["stage", "x"]] = frame[["stage", "x"]].ffill().bfill()
    frames[0].loc[[0, 5, 9], "x"] = np.nan
    with services_of(tmp_path, frames) as remote:
        with pytest.raises(SiteRefusal, match="min_rows"):
            glm("y ~ x + C(sex)", remote, family="binomial")
