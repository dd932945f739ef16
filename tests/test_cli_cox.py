"""``skfed fit --model cox``: Cox regression on the command line, equal to FedCoxPH fitted
in Python on the same training rows and to lifelines' CoxPHFitter on every row; the
hazard-ratio table, the HTML report, the input errors, and the site-service path."""

import argparse
import io

import numpy as np
import pandas as pd
import pytest

lifelines = pytest.importorskip("lifelines")

from skfed.cli.fit import CLIError, original_coefficients  # noqa: E402
from skfed.cli.main import _fit_parser, main, run_fit  # noqa: E402
from skfed.survival import FedCoxPH, survival_target  # noqa: E402

COVARIATES = ["fin", "age", "race", "wexp", "mar", "paro", "prio"]


def _args(*argv):
    parser = argparse.ArgumentParser()
    _fit_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["fit", *argv])


@pytest.fixture(scope="module")
def rossi(tmp_path_factory):
    """lifelines' rossi data as one CSV, three sites by a column (age tertiles)."""
    from lifelines.datasets import load_rossi

    frame = load_rossi()
    rank = frame["age"].rank(method="first").to_numpy() - 1
    frame["site"] = np.array(["young", "middle", "older"])[(rank * 3 // len(frame)).astype(int)]
    path = tmp_path_factory.mktemp("rossi") / "rossi.csv"
    frame.to_csv(path, index=False)
    return path, pd.read_csv(path, float_precision="round_trip")


def _fit(path, *extra):
    return run_fit(_args(str(path), "--clients", "site", "--model", "cox", "--target",
                         "arrest", "week", "--tol", "1e-10", *extra), out=io.StringIO())


def _printed(out, name):
    """The numbers on the coefficient table's row of ``name`` (the first such row)."""
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == [name])
    return [float(v) for v in row[1:]]


def test_every_row_equals_lifelines(rossi):
    path, frame = rossi
    out = io.StringIO()
    report = run_fit(_args(str(path), "--clients", "site", "--model", "cox", "--target",
                           "arrest", "week", "--summary", "--test-size", "0", "--tol", "1e-10"),
                     out=out)
    ref = lifelines.CoxPHFitter().fit(frame[COVARIATES + ["arrest", "week"]], "week", "arrest")
    table = report.summary.loc[COVARIATES]
    np.testing.assert_allclose(table["coef"], ref.params_[COVARIATES], rtol=1e-7)
    np.testing.assert_allclose(table["se(coef)"], ref.standard_errors_[COVARIATES], rtol=1e-6)
    for column in ("exp(coef)", "exp(coef) lower 95%", "exp(coef) upper 95%", "z", "p"):
        np.testing.assert_allclose(table[column], ref.summary.loc[COVARIATES, column],
                                   rtol=1e-6)
    np.testing.assert_allclose(report.estimator.loglike_, ref.log_likelihood_, rtol=1e-9)
    # the printed row of the hazard-ratio table (the coefficients as fitted are not
    # printed beside it: one table, issue 36)
    text = out.getvalue()
    row = next(line for line in text.splitlines() if line.startswith("  prio "))
    original, _, ratio = (float(v) for v in row.split()[1:4])
    # printed with five significant digits (the numbers themselves: to 1e-6 above)
    assert original == pytest.approx(ref.params_["prio"], rel=5e-5)
    assert ratio == pytest.approx(np.exp(ref.params_["prio"]), rel=5e-5)
    assert "no held-out score" in text and "(intercept)" not in text
    assert "likelihood-ratio test" in text and "exp(coef) lower 95%" in text


def test_held_out_concordance_and_site_strata_equal_python(rossi):
    path, frame = rossi
    # a held-out evaluation beside the table is asked for (else the table uses every row)
    report = _fit(path, "--strata", "site", "--cov-type", "cluster", "--summary",
                  "--test-size", "0.2")
    train, test = ~report.test, report.test
    X = frame[COVARIATES].to_numpy(float)
    y = survival_target(frame["arrest"], frame["week"])
    sites = frame["site"].to_numpy()
    ref = FedCoxPH(strata="site", cov_type="cluster").fit(X[train], y[train],
                                                         clients=sites[train])
    coef = original_coefficients(report)[0].ravel()
    np.testing.assert_allclose(coef, ref.coef_, rtol=1e-8)
    np.testing.assert_allclose(report.summary["se(coef)"], ref.bse_, rtol=1e-6)
    assert report.metric == "Harrell's concordance"
    for name, n_tr, n_te, fed, local, pooled in report.site_rows:
        rows = test & (sites == name)
        assert n_te == rows.sum() and fed == pytest.approx(ref.score(X[rows], y[rows]),
                                                           rel=1e-12)
        assert pooled == pytest.approx(fed, rel=1e-9)  # the federated fit is the pooled one
        own = FedCoxPH().fit(X[train & (sites == name)], y[train & (sites == name)])
        assert local == pytest.approx(own.score(X[rows], y[rows]), abs=1e-12)
    assert report.overall[2] == pytest.approx(ref.score(X[test], y[test]), rel=1e-12)


def test_strata_column_no_scale_and_time_grid(rossi):
    path, frame = rossi
    # a strata column: lifelines' strata=, every row, features as they are
    report = _fit(path, "--strata", "wexp", "--test-size", "0", "--no-scale", "--ties",
                  "breslow")
    names = [c for c in COVARIATES if c != "wexp"]
    assert report.feature_names == names and report.scaler is None
    ref = lifelines.CoxPHFitter(strata=["wexp"]).fit(
        frame[COVARIATES + ["arrest", "week"]], "week", "arrest")  # efron in lifelines
    efron = _fit(path, "--strata", "wexp", "--test-size", "0", "--no-scale")
    np.testing.assert_allclose(efron.estimator.coef_, ref.params_[names], rtol=1e-7)
    assert report.estimator.ties == "breslow"
    assert not np.allclose(report.estimator.coef_, efron.estimator.coef_, rtol=1e-6)
    # a shared baseline on a time grid: FedCoxPH with the same cut points
    report = _fit(path, "--time-grid", "13,26,39", "--test-size", "0", "--no-scale")
    y = survival_target(frame["arrest"], frame["week"])
    grid = FedCoxPH(time_grid=[13.0, 26.0, 39.0]).fit(frame[COVARIATES].to_numpy(float), y,
                                                      clients=frame["site"].to_numpy())
    np.testing.assert_allclose(report.estimator.coef_, grid.coef_, rtol=1e-8)


def test_the_saved_pipeline_predicts_survival_curves(rossi, tmp_path):
    """``--output``: the saved pipeline (impute, encode, scale, model) takes rows as the
    CSV has them and gives lifelines' curves (Breslow's baseline) on every row."""
    import joblib

    path, frame = rossi
    saved = tmp_path / "cox.joblib"
    _fit(path, "--final", "--output", str(saved))
    model = joblib.load(saved)
    ref = lifelines.CoxPHFitter().fit(frame[COVARIATES + ["arrest", "week"]], "week", "arrest")
    times, rows = [5.0, 20.0, 40.0, 52.0], frame[:8]  # extra columns (site, target) ignored
    np.testing.assert_allclose(model.predict_survival_function(rows, times),
                               ref.predict_survival_function(rows[COVARIATES], times=times)
                               .to_numpy().T, rtol=1e-6)
    np.testing.assert_allclose(model.predict_cumulative_hazard(rows, times),
                               ref.predict_cumulative_hazard(rows[COVARIATES], times=times)
                               .to_numpy().T, rtol=1e-6)
    # one baseline per site: each row's site says which
    _fit(path, "--final", "--strata", "site", "--output", str(saved))
    model = joblib.load(saved)
    by_site = lifelines.CoxPHFitter().fit(frame[COVARIATES + ["arrest", "week", "site"]],
                                          "week", "arrest", strata=["site"])
    np.testing.assert_allclose(
        model.predict_survival_function(rows, times, strata=rows["site"].to_numpy()),
        by_site.predict_survival_function(rows[COVARIATES + ["site"]], times=times)
        [rows.index].to_numpy().T, rtol=1e-6)  # lifelines groups its columns by stratum


def test_report_html_has_the_hazard_ratio_table(rossi, tmp_path, capsys):
    path, _ = rossi
    html = tmp_path / "cox.html"
    code = main(["fit", str(path), "--clients", "site", "--model", "cox", "--target", "arrest",
                 "week", "--strata", "site", "--summary", "--test-size", "0.2", "--report",
                 str(html)])
    out = capsys.readouterr().out
    assert code == 0 and "held-out Harrell's concordance" in out
    text = html.read_text()
    # the journal table (one hazard-ratio column), the coefficients in full in the appendix
    assert "Hazard ratios (original columns)" in text and "HR (95% CI)" in text
    assert text.index("se(coef)") > text.index("Appendix")
    assert "exp(coef) upper 95%" not in text
    assert "Held-out Harrell&#x27;s concordance by site" in text
    assert "log partial likelihood" in text
    assert "(intercept)" not in text and "strata site" in text
    # the Kaplan-Meier curves of the training rows, beside the page as SVG and PDF too
    assert 'id="figure-kaplan-meier"' in text
    assert (tmp_path / "cox-kaplan-meier.pdf").read_bytes().startswith(b"%PDF")


def test_errors_name_the_column(rossi, tmp_path, capsys):
    path, frame = rossi
    with pytest.raises(CLIError, match="two --target columns"):
        run_fit(_args(str(path), "--clients", "site", "--model", "cox", "--target", "week"),
                out=io.StringIO())
    bad = frame.copy()
    bad.loc[3, "arrest"] = 2
    bad.loc[5, "week"] = -1
    bad_path = tmp_path / "bad.csv"
    bad.to_csv(bad_path, index=False)
    code = main(["fit", str(bad_path), "--clients", "site", "--model", "cox", "--target",
                 "arrest", "week"])
    err = capsys.readouterr().err
    assert code == 2 and "2 problems" in err
    assert "event column 'arrest'" in err and "'2'" in err and "line 5" in err
    assert "time column 'week'" in err and "'-1'" in err and ">= 0" in err
    with pytest.raises(CLIError, match="--cov-type robust"):
        run_fit(_args(str(path), "--clients", "site", "--model", "cox", "--target", "arrest",
                      "week", "--cov-type", "HC0"), out=io.StringIO())
    with pytest.raises(CLIError, match="--strata is for --model cox"):
        run_fit(_args(str(path), "--clients", "site", "--model", "lasso", "--target", "week",
                      "--drop", "arrest", "--strata", "site"), out=io.StringIO())
    with pytest.raises(CLIError, match="--time-grid"):
        run_fit(_args(str(path), "--clients", "site", "--model", "cox", "--target", "arrest",
                      "week", "--time-grid", "30,20"), out=io.StringIO())
    with pytest.raises(CLIError, match="differential privacy.*--secure-aggregation"):
        _fit(path, "--dp-epsilon", "1")
    with pytest.raises(CLIError, match="no standard errors.*L1"):
        _fit(path, "--alpha", "0.01", "--l1-ratio", "0.5", "--summary")


def test_cox_through_site_services(rossi, tmp_path, capsys):
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    from skfed import FederatedDataset
    from skfed.cli.remote import fit_sites
    from skfed.deploy import make_certificates
    from skfed.sites.policy import load_config
    from skfed.sites.transport import SiteServer

    from ._sites import (ROSSI_POLICY, SITES, fix_partition_secret, site_config,
                         split_frames, with_site_partitions)

    _, frame = rossi
    frame = frame.drop(columns=["site"])
    certs = make_certificates(tmp_path / "certs", list(SITES))
    parts, addresses, servers = split_frames(frame, 3, by="age"), {}, []
    try:
        for k, name in enumerate(SITES):
            parts[k].to_csv(tmp_path / f"{name}.csv", index=False)
            config = site_config(tmp_path / name, name, certs=certs,
                                 datasets={"rossi": (str(tmp_path / f"{name}.csv"), None)},
                                 policy=ROSSI_POLICY)
            # a fixed held-out draw: a random one left hospital-a's training rows with a
            # column whose sum two rows dominate now and then (refused, rightly)
            fix_partition_secret(tmp_path / name, "rossi")
            servers.append(SiteServer(load_config(config)).start())
            addresses[name] = f"127.0.0.1:{servers[-1].port}"
        argv = ["fit", "--dataset", "rossi", "--model", "cox", "--target", "arrest", "week",
                "--tls-ca-file", str(certs.ca.cert), "--tls-cert", str(certs.client.cert),
                "--tls-key", str(certs.client.key), "--tol", "1e-10",
                *(f"--site-service={name}={address}" for name, address in addresses.items())]
        saved = tmp_path / "cox.joblib"
        assert main([*argv, "--strata", "site", "--summary", "--test-size", "0.2",
                     "--output", str(saved)]) == 0
        out = capsys.readouterr().out
        assert "hospital-c" in out and "held-out Harrell's concordance" in out
        # the held-out rows are the sites' own partitions, and the output says so
        assert "drawn by each site from its own secret" in out
        assert "the regression table comes from the" in out
        assert "exp(coef)" in out
        # the saved pipeline's curves: each site's baseline at the cut points it chose
        import joblib

        model = joblib.load(saved)
        cuts = model.steps[-1][1].baseline_times_["hospital-a"]
        curves = model.predict_survival_function(parts[0][:3], cuts, strata=["hospital-a"] * 3)
        assert curves.shape == (3, len(cuts)) and np.all(np.diff(curves, axis=1) <= 0)
        # weekly cut points: the fit stands, the report says why there are no curves (the
        # site's rule, never which weeks hold few events)
        weekly = ",".join(str(week) for week in range(1, 53))
        assert main([*argv, "--strata", "site", "--time-grid", weekly]) == 0
        out = capsys.readouterr().out
        assert "no survival curves" in out and "min_level_count" in out
        # the same steps on the same rows in this process
        pooled = pd.concat(parts, ignore_index=True)
        local = with_site_partitions(FederatedDataset.from_arrays(
            pooled[COVARIATES], pooled[["arrest", "week"]].to_numpy(float),
            np.repeat(list(SITES), [len(p) for p in parts])),
            {name: tmp_path / name for name in SITES}, "rossi")
        ref = fit_sites(local, target=["arrest", "week"], model="cox", strata="site",
                        tol=1e-10)
        assert _printed(out, "prio")[2] == pytest.approx(
            np.exp(original_coefficients(ref)[0].ravel()[COVARIATES.index("prio")]), rel=1e-5)
        for site, *scores in ref.site_rows:
            line = next(line for line in out.splitlines() if line.strip().startswith(site))
            assert float(line.split()[3]) == pytest.approx(scores[2], abs=1e-4)
        # a shared baseline at exact event times: the sites refuse, and the error says
        # what to do on the command line
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "allow_event_times" in err and "--strata site" in err and "--time-grid" in err
        assert main([*argv, "--strata", "prio"]) == 2
        assert "FedCoxPH(strata=COLUMN)" in capsys.readouterr().err
    finally:
        for server in servers:
            server.stop()
