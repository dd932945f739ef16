"""The Fine-Gray model over sites equals R's ``finegray`` + weighted ``coxph`` on the
pooled rows (numbers stored below): the censoring curve of the pooled rows, each site's
rows expanded by it, Efron's ties, R's robust and model-based standard errors; in
process, masked, and at site services under their rules.
"""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning

from skfed import FederatedDataset
from skfed.privacy import DifferentialPrivacy, SecureAggregation
from skfed.survival import FedFineGray

#: R 4.2.2 (survival 3.5.3), on the pooled rows, cause 1:
#:   d$status <- factor(d$status, 0:3, c("censor", "c1", "c2", "c3"))
#:   pd <- finegray(Surv(ftime, status) ~ ., data = d, etype = "c1")
#:   fit <- coxph(Surv(fgstart, fgstop, fgstatus) ~ <covariates>, data = pd,
#:                weights = fgwt)
#:   sprintf("%.17g", c(coef(fit), sqrt(diag(fit$var)), sqrt(diag(fit$naive.var)),
#:                      fit$loglik))
#: bmt: scikit-survival's load_bmt (dis); cgvhd: load_cgvhd with age, tx == "PB" and
#: extent == "L" as 0/1 columns (tx_pb, extent_l)
R_FIT = {
    "bmt": {"coef": [0.79264076808153283], "robust": [0.69496752140995022],
            "naive": [0.71174459131070322],
            "loglik": [-30.331190245194495, -29.670448589108041], "iter": 3},
    "cgvhd": {"coef": [-0.013837675271377019, 0.19181105354147623, 1.8956507409304073],
              "robust": [0.0093187474861143905, 0.21016778423354182, 0.72810544141197009],
              "naive": [0.010669623496614199, 0.21759969277106539, 0.72127616018746832],
              "loglik": [-335.88889433589202, -327.61750802124044], "iter": 6},
    # cgvhd with age + tx_pb (the model the site services fit: extent_l's few 0 rows
    # per site make its meat fail their dominance rule)
    "cgvhd_age_tx": {"coef": [-0.013094521054978813, 0.31620336504484553],
                     "robust": [0.0089622967078069639, 0.21181728352641957],
                     "naive": [0.010244675124785144, 0.21708919994366757],
                     "loglik": [-335.88889433589202, -334.10314913112825], "iter": 3},
}


def frames():
    from sksurv.datasets import load_bmt, load_cgvhd

    X, y = load_bmt()
    bmt = pd.DataFrame({"ftime": y["ftime"], "status": y["status"],
                        "dis": X["dis"].astype(int).to_numpy()})
    X, y = load_cgvhd()
    cgvhd = pd.DataFrame({"ftime": y["ftime"], "status": y["status"],
                          "age": X["age"].astype(float).to_numpy(),
                          "tx_pb": (X["tx"] == "PB").astype(int).to_numpy(),
                          "extent_l": (X["extent"] == "L").astype(int).to_numpy()})
    return {name: df.assign(site=np.arange(len(df)) % 3) for name, df in
            (("bmt", bmt), ("cgvhd", cgvhd))}


def _fit(df, **params):
    return FedFineGray(**params).fit(df, duration_col="ftime", event_col="status",
                                     event_of_interest=1, clients="site")


def check_r(fg, ref, atol=1e-12):
    np.testing.assert_allclose(fg.coef_, ref["coef"], rtol=0, atol=atol)
    np.testing.assert_allclose(fg.bse_, ref["robust"], rtol=0, atol=atol)
    np.testing.assert_allclose(np.sqrt(np.diag(fg.cov_params_naive_)), ref["naive"],
                               rtol=0, atol=atol)
    np.testing.assert_allclose([fg.loglike_null_, fg.loglike_], ref["loglik"], rtol=1e-13)


def test_cgvhd_equals_r():
    fg = _fit(frames()["cgvhd"])
    check_r(fg, R_FIT["cgvhd"])
    assert fg.param_names_ == ["age", "tx_pb", "extent_l"]
    assert list(fg.summary_frame().index) == fg.param_names_
    fg = FedFineGray().fit(frames()["cgvhd"], duration_col="ftime", event_col="status",
                           event_of_interest=1, covariates=["age", "tx_pb"], clients="site")
    check_r(fg, R_FIT["cgvhd_age_tx"])
    assert fg.n_iter_ == R_FIT["cgvhd_age_tx"]["iter"]


def test_bmt_equals_r_at_rs_iterations_and_converges_past_them():
    """R stops bmt's Newton iterations at 3 (its log-likelihood changed by less than
    1e-9): three rounds here give R's numbers to round-off; converged, the
    coefficient moves by 1.6e-9 and the gradient is zero."""
    df = frames()["bmt"]
    with pytest.warns(ConvergenceWarning, match="did not converge in 3 rounds"):
        fg = _fit(df, max_rounds=R_FIT["bmt"]["iter"])
    check_r(fg, R_FIT["bmt"], atol=1e-14)
    converged = _fit(df)
    check_r(converged, R_FIT["bmt"], atol=5e-9)
    assert converged.n_iter_ == 4


#: R's survfit(fit, newdata = data.frame(dis = c(0, 1))) of bmt's fit, at its event times:
#: time, 1 - surv for dis = 0 and dis = 1
R_BMT_CIF = np.array([
    (0, 0.017461917928358384, 0.038170478277242625),
    (1, 0.034923827687352915, 0.075529367102442291),
    (3, 0.090970599188775592, 0.18999179277977685),
    (4, 0.13078411884607888, 0.26629847171605536),
    (8, 0.15451847556732357, 0.30982890665079921),
    (12, 0.18135218999090175, 0.35729431156329694),
])


def test_predicted_incidence_equals_r_survfit():
    with pytest.warns(ConvergenceWarning):
        fg = _fit(frames()["bmt"], max_rounds=R_FIT["bmt"]["iter"])  # R's coefficient
    cif = fg.predict_cumulative_incidence(pd.DataFrame({"dis": [0, 1]}))
    np.testing.assert_array_equal(cif.index, R_BMT_CIF[:, 0])
    np.testing.assert_allclose(cif.to_numpy(), R_BMT_CIF[:, 1:], rtol=0, atol=1e-14)
    between = fg.predict_cumulative_incidence(np.array([[1.0]]), times=[-1.0, 2.0, 100.0])
    np.testing.assert_allclose(between[0], [0.0, R_BMT_CIF[1, 2], R_BMT_CIF[-1, 2]],
                               rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="lacks the model's covariates"):
        fg.predict_cumulative_incidence(pd.DataFrame({"age": [1.0]}))


def test_the_censoring_curve_is_the_pooled_rows():
    """G is the Kaplan-Meier of censoring on all rows (censorings after the events at
    the same time), the curve R's finegray weights by, not any site's own."""
    df = frames()["bmt"]
    fg = _fit(df)
    t, s = df["ftime"].to_numpy(), df["status"].to_numpy()
    expected, G = [], 1.0
    for c in np.unique(t[s == 0]):
        G *= 1 - np.sum((t == c) & (s == 0)) / np.sum((t > c) | ((t == c) & (s == 0)))
        expected.append(G)
    np.testing.assert_array_equal(fg.censoring_times_, np.unique(t[s == 0]))
    np.testing.assert_allclose(fg.censoring_curve_, expected, rtol=1e-15)


def test_masked_sums_give_the_same_fit():
    df = frames()["cgvhd"]
    plain, masked = _fit(df), _fit(df, privacy=SecureAggregation())
    np.testing.assert_allclose(masked.coef_, plain.coef_, rtol=0, atol=1e-13)
    np.testing.assert_allclose(masked.cov_params_, plain.cov_params_, rtol=1e-11)


def test_differential_privacy_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="FedFineGray refuses differential privacy"):
        _fit(frames()["bmt"], privacy=DifferentialPrivacy(epsilon=1.0))


def test_bad_input_is_named():
    df = frames()["bmt"]
    with pytest.raises(ValueError, match="not numeric"):
        _fit(df.assign(dis=df["dis"].map({0: "ALL", 1: "AML"})))
    with pytest.raises(ValueError, match="no event of cause 3"):
        FedFineGray().fit(df, duration_col="ftime", event_col="status",
                          event_of_interest=3, clients="site")
    with pytest.raises(ValueError, match="covariate 'nope'"):
        FedFineGray().fit(df, duration_col="ftime", event_col="status",
                          event_of_interest=1, covariates=["nope"], clients="site")
    with pytest.raises(ValueError, match="singular: a covariate is constant"):
        _fit(df.assign(dis=1.0))
    with pytest.raises(ValueError, match="1 to 256 covariate"):
        FedFineGray().fit(df[["ftime", "status", "site"]], duration_col="ftime",
                          event_col="status", event_of_interest=1, clients="site")


def test_a_federated_dataset_gives_the_same_fit():
    df = frames()["cgvhd"]
    data = FederatedDataset.from_arrays(df.drop(columns="site"), None, df["site"].to_numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fg = FedFineGray().fit(data, duration_col="ftime", event_col="status",
                               event_of_interest=1)
    check_r(fg, R_FIT["cgvhd"])
