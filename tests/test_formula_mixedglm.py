"""skfed.formula.mixedglm: lme4's glmer from a formula (``(1 | herd)``), Laplace and
adaptive Gauss-Hermite quadrature (nAGQ = 10), binomial with trials and Poisson, and
random slopes (``(1 + x | herd)``, Laplace),
against glmer's numbers on the same rows computed once with R 4.2.2 and lme4 1.1.31
(tests/data/glmm_herds.R, its output glmm_herds_lme4.txt)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import gammaln, xlogy

import skfed.formula as sf
from skfed.formula import FormulaError

DATA = Path(__file__).parent / "data"
CASES = {"binomial": ("cases ~ x + treated + (1 | herd)", "size"),
         "poisson": ("count ~ x + treated + (1 | herd)", None)}


def herds():
    """The rows of tests/data/glmm_herds.csv: 30 herds in three sites (how the file
    was made)."""
    rng = np.random.default_rng(2024)
    rows = []
    for h in range(30):
        u = rng.normal(0, 0.8)
        for _ in range(rng.integers(4, 9)):
            size = int(rng.integers(5, 26))
            x = round(float(rng.normal()), 4)
            treated = int(rng.integers(0, 2))
            eta = -1.0 + 0.6 * x - 0.5 * treated + u
            cases = int(rng.binomial(size, 1 / (1 + np.exp(-eta))))
            count = int(rng.poisson(np.exp(0.8 + 0.3 * x - 0.4 * treated + 0.7 * u)))
            rows.append((f"herd{h:02d}", f"site{h % 3}", x, treated, size, cases, count))
    return pd.DataFrame(rows, columns=["herd", "site", "x", "treated", "size", "cases",
                                       "count"])


def slopes():
    """The rows of tests/data/glmm_slopes.csv: 40 herds, a random intercept and a random
    slope of ``x`` each."""
    rng = np.random.default_rng(7)
    rows = []
    for h in range(40):
        u = rng.multivariate_normal([0, 0], [[0.6, 0.15], [0.15, 0.3]])
        for _ in range(rng.integers(6, 11)):
            size = int(rng.integers(5, 26))
            x = round(float(rng.normal()), 4)
            treated = int(rng.integers(0, 2))
            eta = -0.8 + (0.6 + u[1]) * x - 0.5 * treated + u[0]
            cases = int(rng.binomial(size, 1 / (1 + np.exp(-eta))))
            count = int(rng.poisson(np.exp(0.8 + (0.3 + u[1]) * x - 0.4 * treated + u[0])))
            rows.append((f"herd{h:02d}", f"site{h % 3}", x, treated, size, cases, count))
    return pd.DataFrame(rows, columns=["herd", "site", "x", "treated", "size", "cases",
                                       "count"])


def lme4():
    """``{(family/method, name): (estimate, standard error)}`` from R's output."""
    out = {}
    for line in (DATA / "glmm_herds_lme4.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        label, name, value, se = line.split()
        out[label, name] = (float(value), float(se) if se != "NA" else np.nan)
    return out


def _saturated(data, family):
    """The saturated model's log-likelihood (lme4's nAGQ > 1 logLik is relative to it)."""
    if family == "binomial":
        y, n = data["cases"], data["size"]
        return float(np.sum(gammaln(n + 1) - gammaln(y + 1) - gammaln(n - y + 1)
                            + xlogy(y, y / n) + xlogy(n - y, 1 - y / n)))
    y = data["count"]
    return float(np.sum(xlogy(y, y) - y - gammaln(y + 1)))


def test_the_stored_rows_are_the_generators():
    stored = pd.read_csv(DATA / "glmm_herds.csv")
    pd.testing.assert_frame_equal(stored, herds(), check_exact=False, rtol=1e-12)
    stored = pd.read_csv(DATA / "glmm_slopes.csv")
    pd.testing.assert_frame_equal(stored, slopes(), check_exact=False, rtol=1e-12)
    assert "R version 4.2.2" in (DATA / "glmm_herds_lme4.txt").read_text()


@pytest.mark.parametrize("n_nodes", [1, 10])
@pytest.mark.parametrize("family", ["binomial", "poisson"])
def test_formula_glmm_equals_glmer(family, n_nodes):
    data = pd.read_csv(DATA / "glmm_herds.csv")
    formula, trials = CASES[family]
    res = sf.mixedglm(formula, data, family=family, trials=trials, n_nodes=n_nodes,
                      clients="site")
    ref = lme4()
    label = f"{family}/{'laplace' if n_nodes == 1 else 'agq10'}"
    names = {"Intercept": "(Intercept)", "x": "x", "treated": "treated"}
    for name, r_name in names.items():
        estimate, se = ref[label, r_name]
        assert res.fe_params[name] == pytest.approx(estimate, abs=1e-5)
        assert res.bse_fe[name] == pytest.approx(se, rel=1e-5)
    assert res.sigma == pytest.approx(ref[label, "sigma"][0], abs=1e-5)
    # lme4's Laplace logLik is the normalised one skfed reports; with nAGQ > 1 it is
    # relative to the saturated model
    llf = res.llf - (0.0 if n_nodes == 1 else _saturated(data, family))
    assert llf >= ref[label, "logLik"][0] - 1e-8  # never a lower likelihood
    assert llf == pytest.approx(ref[label, "logLik"][0], abs=1e-6)
    assert res.estimator.converged_


@pytest.mark.parametrize("family", ["binomial", "poisson"])
def test_random_slopes_equal_glmer_laplace(family):
    data = pd.read_csv(DATA / "glmm_slopes.csv")
    formula, trials = CASES[family]
    res = sf.mixedglm(formula.replace("(1 |", "(1 + x |"), data, family=family,
                      trials=trials, clients="site")
    ref = lme4()
    label = f"{family}/slopes"
    for name, r_name in {"Intercept": "(Intercept)", "x": "x",
                         "treated": "treated"}.items():
        estimate, se = ref[label, r_name]
        assert res.fe_params[name] == pytest.approx(estimate, abs=1e-5)
        assert res.bse_fe[name] == pytest.approx(se, rel=1e-5)
    L = np.linalg.cholesky(res.cov_re.to_numpy())  # lme4's theta: its relative factor
    np.testing.assert_allclose(L[np.tril_indices(2)],
                               [ref[label, f"theta{i}"][0] for i in (1, 2, 3)], atol=1e-5)
    assert res.llf >= ref[label, "logLik"][0] - 1e-8  # never a lower likelihood
    assert res.llf == pytest.approx(ref[label, "logLik"][0], abs=1e-6)
    assert list(res.cov_re.index) == ["Group", "x"]
    assert res.aic == pytest.approx(-2 * ref[label, "logLik"][0] + 2 * 6, abs=1e-5)  # lme4's
    assert "Group x x Cov" in res.summary_frame().index
    # the predicted mean uses each herd's intercept and slope
    est = res.estimator
    X = res.estimator.feature_names_in_
    rows = data.assign(Intercept=1.0)[list(X)].to_numpy(dtype=float)
    u = res.random_effects.loc[data["herd"]].to_numpy()
    eta = rows @ est.coef_ + u[:, 0] + u[:, 1] * data["x"].to_numpy()
    mean = est.predict(rows, groups=data["herd"])
    link = 1 / (1 + np.exp(-eta)) if family == "binomial" else np.exp(eta)
    np.testing.assert_allclose(mean, link, rtol=1e-12)


def test_summary_names_the_response_and_bad_terms_are_refused():
    data = pd.read_csv(DATA / "glmm_herds.csv")
    res = sf.mixedglm("count ~ x + (1 | herd)", data, family="poisson", clients="site")
    assert "Dependent Variable: count" in " ".join(str(res.summary()).split())
    with pytest.raises(FormulaError, match="not \\(0 \\+ x \\| group\\)"):
        sf.mixedglm("count ~ x + (0 + x | herd)", data, family="poisson", clients="site")
    with pytest.raises(ValueError, match="adaptive quadrature is for one scalar"):
        sf.mixedglm("count ~ x + (1 + x | herd)", data, family="poisson", n_nodes=5,
                    clients="site")
    with pytest.raises(FormulaError, match="random slope 'z'"):
        sf.mixedglm("count ~ x + (1 + z | herd)", data, family="poisson", clients="site")
    with pytest.raises(FormulaError, match="nested components"):
        sf.mixedglm("count ~ x + (1 | site/herd)", data, family="poisson", clients="site")
    with pytest.raises(FormulaError, match="disagree"):
        sf.mixedglm("count ~ x + (1 | herd)", data, family="poisson", groups="site",
                    clients="site")
