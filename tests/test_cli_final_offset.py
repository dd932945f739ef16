"""``skfed fit --offset COLUMN`` and ``--final`` (every row) in process and through real
site services; the treatment coding of ``--categorical`` and the columns' names in the
messages on both paths. Every number is checked against the Python API or statsmodels
on the same rows."""

import json

import numpy as np
import pandas as pd
import pytest

from skfed import FederatedDataset, FedPoissonRegressor
from skfed.cli.fit import holdout_split, original_coefficients
from skfed.cli.main import main

sm = pytest.importorskip("statsmodels.api")
smf = pytest.importorskip("statsmodels.formula.api")

SITES = ("hospital-a", "hospital-b", "hospital-c")
#: the CLI's treatment-coded columns -> statsmodels' names
NAMES = {"age": "age", "sex=M": "C(sex)[T.M]", "ward=b": "C(ward)[T.b]",
         "ward=c": "C(ward)[T.c]", "(intercept)": "Intercept"}


@pytest.fixture(scope="module")
def cohort():
    return _cohort(540)


def _cohort(n):
    """Counts over person-years at three hospitals (by age: shifted sites)."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"age": rng.normal(60, 10, n).round(1),
                          "sex": rng.choice(["F", "M"], n),
                          "ward": rng.choice(["a", "b", "c"], n),
                          "years": rng.uniform(0.5, 3.0, n).round(2)})
    frame["log_years"] = np.log(frame["years"])
    rate = np.exp(-2 + 0.02 * (frame["age"] - 60) + 0.4 * (frame["sex"] == "M"))
    frame["events"] = rng.poisson(rate * frame["years"])
    frame["site"] = np.array(SITES)[np.digitize(frame["age"], [55, 65])]
    return frame


@pytest.fixture(scope="module")
def cohort_services(cohort, tmp_path_factory):
    yield from _services(cohort, tmp_path_factory)


@pytest.fixture(scope="module")
def large_cohort_services(tmp_path_factory):
    """1,800 rows: each site's held-out counts (most of them zero) pass the sites'
    dominance rule when scored there."""
    yield from _services(_cohort(1800), tmp_path_factory)


@pytest.fixture(scope="module")
def cohort_csv(cohort, tmp_path_factory):
    path = tmp_path_factory.mktemp("cohort") / "cohort.csv"
    cohort.to_csv(path, index=False)
    return str(path)


def _statsmodels(frame):
    return smf.glm("events ~ age + C(sex) + C(ward)", frame, family=sm.families.Poisson(),
                   offset=frame["log_years"]).fit()


def _check_table(table, ref):
    """The CLI's regression table (rows named as the CLI names them) against statsmodels'."""
    rows = [NAMES[name] for name in table.index]
    np.testing.assert_allclose(table["coef"], ref.params[rows], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(table["std err"], ref.bse[rows], rtol=1e-6)
    np.testing.assert_allclose(table["P>|z|"], ref.pvalues[rows], rtol=1e-5, atol=1e-12)


def _run(capsys, *argv):
    code = main(["fit", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


POISSON = ["--target", "events", "--model", "poisson", "--alpha", "0", "--offset", "log_years",
           "--categorical", "sex", "ward", "--drop", "years", "--tol", "1e-10"]


def _treatment_coded(frame):
    """The CLI's columns: age, then sex and ward without their first levels."""
    return np.column_stack([frame["age"], frame["sex"] == "M", frame["ward"] == "b",
                            frame["ward"] == "c"]).astype(float)


def test_offset_in_process_equals_the_python_api(capsys, cohort, cohort_csv, tmp_path):
    path = tmp_path / "fit.json"
    code, out, err = _run(capsys, cohort_csv, "--clients", "site", *POISSON, "--json",
                          str(path))
    assert code == 0, err
    report = json.loads(path.read_text())
    assert set(report["coefficients"]) == {"age", "sex=M", "ward=b", "ward=c"}
    assert "reference levels" in out and "sex 'F', ward 'a'" in out
    # the same rows, the same model in Python: the training rows the CLI held out from
    sites = cohort["site"].to_numpy()
    test = holdout_split(sites, 0.2, 0)
    X, y, offset = _treatment_coded(cohort), cohort["events"].to_numpy(), \
        cohort["log_years"].to_numpy()
    ref = FedPoissonRegressor(alpha=0, tol=1e-10).fit(X[~test], y[~test], clients=sites[~test],
                                                      offset=offset[~test])
    printed = np.array([report["coefficients"][n][1] for n in ("age", "sex=M", "ward=b",
                                                               "ward=c")])
    np.testing.assert_allclose(printed, ref.coef_, rtol=1e-7)
    assert report["intercept"][1] == pytest.approx(ref.intercept_, rel=1e-7)
    # the held-out R2 of the predicted counts, each row with its own exposure
    pred = ref.predict(X[test], offset=offset[test])
    r2 = 1 - np.sum((y[test] - pred) ** 2) / np.sum((y[test] - y[test].mean()) ** 2)
    assert report["overall"]["federated"] == pytest.approx(r2, rel=1e-7)
    # --final --summary: statsmodels' GLM with the offset and treatment coding, all rows
    code, out, err = _run(capsys, cohort_csv, "--clients", "site", *POISSON, "--final",
                          "--summary", "--json", str(path))
    assert code == 0, err
    assert "none held out" in out and "no held-out score" in out
    report = json.loads(path.read_text())
    table = pd.DataFrame(report["summary"]).T
    _check_table(table, _statsmodels(cohort))


def test_offset_errors_name_the_column(capsys, cohort, cohort_csv, tmp_path):
    code, _, err = _run(capsys, cohort_csv, "--clients", "site", "--target", "events",
                        "--model", "lasso", "--offset", "log_years")
    assert code == 2 and "--offset is for --model linear, ridge, poisson" in err
    code, _, err = _run(capsys, cohort_csv, "--clients", "site", *POISSON[:-2], "--offset",
                        "exposure")
    assert code == 2 and "column 'exposure' (--offset) not found" in err
    gappy = cohort.copy()
    gappy.loc[[3, 8], "log_years"] = np.nan
    gappy.to_csv(tmp_path / "gappy.csv", index=False)
    code, _, err = _run(capsys, str(tmp_path / "gappy.csv"), "--clients", "site", *POISSON)
    assert code == 2 and "offset 'log_years' has 2 missing values" in err
    code, out, err = _run(capsys, str(tmp_path / "gappy.csv"), "--clients", "site", *POISSON,
                          "--drop-incomplete")
    assert code == 0 and "dropped 2 rows" in out


def test_collinear_columns_are_named_in_the_message(capsys, cohort, tmp_path):
    twin = cohort.assign(age_again=cohort["age"])
    twin.to_csv(tmp_path / "twin.csv", index=False)
    code, _, err = _run(capsys, str(tmp_path / "twin.csv"), "--clients", "site", *POISSON,
                        "--summary")
    assert code == 2 and "the columns age, age_again are (nearly) collinear" in err
    # every level kept (a penalized learner's coding) is what made the CLI's table fail
    code, out, err = _run(capsys, str(tmp_path / "twin.csv"), "--clients", "site",
                          "--target", "events", "--model", "lasso", "--categorical", "sex",
                          "--drop", "years", "ward", "log_years", "age_again")
    assert code == 0 and "sex=F" in out and "sex=M" in out


# --- through site services -------------------------------------------------------------
def _services(cohort, tmp_path_factory):
    """The cohort at three site services (each hospital its rows; with a twin column)."""
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    from ._sites import site_config

    root = tmp_path_factory.mktemp("services")
    certs = make_certificates(root / "certs", list(SITES))
    servers, addresses, parts = [], {}, {}
    try:
        for name in SITES:
            folder = root / name
            folder.mkdir()
            parts[name] = cohort[cohort["site"] == name].drop(columns=["site"])
            parts[name].assign(age_again=parts[name]["age"]).to_csv(folder / "cohort.csv",
                                                                   index=False)
            config = site_config(folder, name, certs=certs,
                                 datasets={"cohort": ("cohort.csv", None)})
            servers.append(SiteServer(load_config(config)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        argv = ["--dataset", "cohort", "--tls-ca-file", str(certs.ca.cert), "--tls-cert",
                str(certs.client.cert), "--tls-key", str(certs.client.key),
                *(f"--site-service={n}={a}" for n, a in addresses.items())]
        yield {"argv": argv, "parts": parts, "folders": {n: root / n for n in SITES}}
    finally:
        for server in servers:
            server.stop()


def test_final_with_an_offset_through_site_services(capsys, cohort, cohort_services, tmp_path):
    path = tmp_path / "final.json"
    argv = [*cohort_services["argv"], *POISSON, "--drop", "years", "age_again"]
    saved = tmp_path / "final.joblib"
    code, out, err = _run(capsys, *argv, "--final", "--summary", "--json", str(path),
                          "--output", str(saved))
    assert code == 0, err
    assert "none held out" in out and "--test-size 0: the final model" in out
    report = json.loads(path.read_text())
    assert [s["train_rows"] for s in report["sites"]] == [
        len(cohort_services["parts"][s]) for s in SITES]
    pooled = pd.concat([cohort_services["parts"][s] for s in SITES], ignore_index=True)
    ref = _statsmodels(pooled)
    _check_table(pd.DataFrame(report["summary"]).T, ref)
    # the saved pipeline codes raw rows as the sites did: statsmodels' predicted counts
    import joblib

    model = joblib.load(saved)
    np.testing.assert_allclose(model.predict(pooled[:20], offset=pooled["log_years"][:20]),
                               ref.predict(pooled[:20], offset=pooled["log_years"][:20]),
                               rtol=1e-7)
    # the collinear twin is named, not x0/x1, through the services too
    code, _, err = _run(capsys, *cohort_services["argv"], *POISSON, "--final", "--summary")
    assert code == 2 and "the columns age, age_again are (nearly) collinear" in err


def test_held_out_rows_with_an_offset_through_site_services(capsys, large_cohort_services,
                                                            tmp_path):
    from skfed.cli.remote import fit_sites

    from ._sites import with_site_partitions

    cohort_services = large_cohort_services
    path = tmp_path / "held.json"
    argv = [*cohort_services["argv"], *POISSON, "--drop", "years", "age_again"]
    code, out, err = _run(capsys, *argv, "--json", str(path))
    assert code == 0, err
    # each site scores its held-out rows with the model's log link and its own offsets
    report = json.loads(path.read_text())
    # the fit: the same row steps on the same rows in this process (the sites' own
    # partitions), where the score is the model's with its offsets
    parts = cohort_services["parts"]
    pooled = pd.concat([parts[s] for s in SITES], ignore_index=True)
    local = with_site_partitions(FederatedDataset.from_arrays(
        pooled.drop(columns=["events", "log_years", "years"]), pooled["events"].to_numpy(),
        np.repeat(list(SITES), [len(parts[s]) for s in SITES]),
        offset=pooled["log_years"].to_numpy()), cohort_services["folders"], "cohort")
    ref = fit_sites(local, target="events", model="poisson", categorical=["sex", "ward"],
                    strength=0.0, tol=1e-10, with_offset=True)
    for site, row in zip(report["sites"], ref.site_rows):
        assert (site["train_rows"], site["test_rows"]) == row[1:3]
        assert -1 < row[3] < 1  # an R2 of counts with their exposures
        assert site["federated"] == pytest.approx(row[3], abs=1e-9)
    assert report["overall"]["federated"] == pytest.approx(ref.overall[2], abs=1e-9)
    coef = original_coefficients(ref)[0].ravel()
    np.testing.assert_allclose([report["coefficients"][n][1] for n in ref.feature_names], coef,
                               rtol=1e-7)
