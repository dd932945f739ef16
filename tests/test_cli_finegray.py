"""``skfed fit --model finegray --target EVENT TIME --cause K``: the Python API's
FedFineGray on the same rows (and so R's finegray + weighted coxph, tests/test_finegray.py),
from local CSV files and through site services; refused, with the reason, where the
sites keep their event times (their default policy)."""

import io
import json

import numpy as np
import pandas as pd
import pytest

from skfed.cli.fit import CLIError
from skfed.cli.main import main, run_fit
from skfed.survival import FedFineGray

from .test_cli_formula import _args
from .test_finegray import R_FIT, check_r, frames

OPEN = 'allow_event_times = true\nfiner_sums = ["survival.finegray_sums"]\nmin_rows = 10'


@pytest.fixture(scope="module")
def bmt(tmp_path_factory):
    """scikit-survival's load_bmt at three sites, as one CSV with a site column."""
    frame = frames()["bmt"]
    path = tmp_path_factory.mktemp("bmt") / "bmt.csv"
    frame.to_csv(path, index=False)
    return pd.read_csv(path, float_precision="round_trip"), str(path)


def _python(frame, **options):
    return FedFineGray(**options).fit(frame, duration_col="ftime", event_col="status",
                                      event_of_interest=1, covariates=["dis"], clients="site")


def test_the_command_line_is_the_python_api(bmt, tmp_path):
    frame, path = bmt
    out = io.StringIO()
    model = run_fit(_args(path, "--clients", "site", "--model", "finegray", "--target",
                          "status", "ftime", "--cause", "1", "--json",
                          str(tmp_path / "fg.json")), out=out)
    python = _python(frame)
    np.testing.assert_array_equal(model.coef_, python.coef_)
    np.testing.assert_array_equal(model.cov_params_, python.cov_params_)
    # R stops at 3 iterations, 1.8e-9 short of the optimum (tests/test_finegray.py)
    check_r(model, R_FIT["bmt"], atol=5e-9)
    text = out.getvalue()
    assert "FedFineGray (finegray, cause 1 of status, time ftime)" in text
    assert "Fine-Gray subdistribution hazards" in text and "dis" in text
    assert f"{python.n_iter_} Newton rounds, converged" in text
    saved = json.loads((tmp_path / "fg.json").read_text())
    assert saved["coef"] == {"dis": float(python.coef_[0])}
    assert saved["se_robust"]["dis"] == float(python.bse_[0])
    assert saved["summary"]["dis"]["exp(coef)"] == pytest.approx(np.exp(python.coef_[0]),
                                                                 rel=1e-15)
    assert saved["cause"] == 1 and saved["converged"] is True


def test_r_numbers_at_rs_iterations(bmt):
    _, path = bmt
    out = io.StringIO()
    # the report says the fit stopped short (the ConvergenceWarning is not raised again)
    model = run_fit(_args(path, "--clients", "site", "--model", "finegray", "--target",
                          "status", "ftime", "--cause", "1", "--max-rounds", "3"), out=out)
    check_r(model, R_FIT["bmt"], atol=1e-14)
    assert "3 Newton rounds, did NOT converge (raise --max-rounds)" in out.getvalue()


def test_one_file_per_site_and_the_other_cause(bmt, tmp_path):
    frame, _ = bmt
    files = []
    for site, rows in frame.groupby("site"):
        files.append(str(tmp_path / f"site{site}.csv"))
        rows.drop(columns="site").to_csv(files[-1], index=False)
    model = run_fit(_args("--site-files", *files, "--model", "finegray", "--target",
                          "status", "ftime", "--cause", "2"), out=io.StringIO())
    python = FedFineGray().fit(frame, duration_col="ftime", event_col="status",
                               event_of_interest=2, covariates=["dis"], clients="site")
    np.testing.assert_array_equal(model.coef_, python.coef_)
    np.testing.assert_array_equal(model.bse_, python.bse_)


@pytest.mark.parametrize("extra, message", [
    (["--target", "status", "ftime"], "needs --cause K"),
    (["--target", "ftime", "--cause", "1"], "needs --target EVENT TIME"),
    (["--target", "status", "ftime", "--cause", "1", "--alpha", "1"], "unpenalized"),
    (["--target", "status", "ftime", "--cause", "1", "--dp-epsilon", "1"],
     "differential privacy"),
    (["--target", "status", "ftime", "--cause", "1", "--drop", "nothing"],
     "--drop names columns"),
    (["--target", "status", "ftime", "--cause", "7"], "no event of cause 7"),
])
def test_what_the_command_line_refuses(bmt, extra, message):
    _, path = bmt
    with pytest.raises(CLIError, match=message):
        run_fit(_args(path, "--clients", "site", "--model", "finegray", *extra),
                out=io.StringIO())


def test_cause_goes_with_finegray_only(bmt):
    _, path = bmt
    with pytest.raises(CLIError, match="--cause is for --model finegray"):
        run_fit(_args(path, "--clients", "site", "--model", "cox", "--target", "status",
                      "ftime", "--cause", "1"), out=io.StringIO())


def _served(frame):
    from ._sites import SITES

    return frame.assign(site=frame["site"].map(dict(enumerate(SITES))))


def test_through_site_services(tmp_path, capsys):
    """Sites that allow event times give R's numbers (the local fit's), masked where they
    require secure aggregation; the sites' default policy refuses, saying why."""
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    from ._cli_services import cli_services
    from ._sites import SITES

    frame = _served(frames()["cgvhd"])
    local = FedFineGray().fit(frame, duration_col="ftime", event_col="status",
                              event_of_interest=1, covariates=["age", "tx_pb"],
                              clients="site")
    argv = ["--model", "finegray", "--target", "status", "ftime", "--cause", "1",
            "--drop", "extent_l"]
    with cli_services(tmp_path / "open", frame, clients="site", policy=OPEN) as options:
        assert main(["fit", *options, *argv, "--json", str(tmp_path / "s.json")]) == 0
    saved = json.loads((tmp_path / "s.json").read_text())
    np.testing.assert_allclose(list(saved["coef"].values()), local.coef_, rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(list(saved["se_robust"].values()), local.bse_, rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(list(saved["coef"].values()), R_FIT["cgvhd_age_tx"]["coef"],
                               rtol=0, atol=1e-12)
    assert "Fine-Gray subdistribution hazards" in capsys.readouterr().out
    with cli_services(tmp_path / "default", frame, clients="site") as options:
        with pytest.raises(CLIError, match="no approximate form on cut points"):
            run_fit(_args(*options, *argv), out=io.StringIO())
    consortium = ", ".join(f'"{name}"' for name in SITES)
    protected = ('allow_event_times = true\nrequire = ["secure_aggregation"]\n'
                 f'consortium = [{consortium}]')
    with cli_services(tmp_path / "masked", frame, clients="site", policy=protected) as options:
        # the pooled counts in the clear: one site's would show a time's few rows
        with pytest.raises(CLIError, match="refused: stats.competing_counts"):
            run_fit(_args(*options, *argv), out=io.StringIO())
        model = run_fit(_args(*options, *argv, "--secure-aggregation"), out=io.StringIO())
    check_r(model, R_FIT["cgvhd_age_tx"], atol=1e-11)
