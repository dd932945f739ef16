"""``skfed fit --formula ... --model ordinal|multinomial``: skfed.formula.ordinal and
mnlogit from the command line, the Python API's numbers (and statsmodels')."""

import io
import json

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from skfed.cli.fit import CLIError
from skfed.cli.main import run_fit
from skfed.formula import mnlogit, ordinal

from .test_cli_formula import _args

FORMULA = "grade ~ age + C(sex)"


@pytest.fixture(scope="module")
def grades(tmp_path_factory):
    rng = np.random.default_rng(11)
    n = 450
    frame = pd.DataFrame({"age": rng.normal(60, 10, n).round(1),
                          "sex": rng.choice(["F", "M"], n),
                          "hospital": rng.choice(["north", "south", "east"], n)})
    latent = 0.08 * (frame["age"] - 60) + 0.5 * (frame["sex"] == "M")
    frame["grade"] = np.digitize(latent + rng.logistic(size=n), [-1.0, 0.3, 1.5]) + 1
    path = tmp_path_factory.mktemp("grades") / "grades.csv"
    frame.to_csv(path, index=False)
    return frame, str(path)


def test_ordinal_and_multinomial_from_the_command_line(grades, tmp_path):
    frame, path = grades
    out = io.StringIO()
    report = run_fit(_args(path, "--clients", "hospital", "--formula", FORMULA, "--model",
                           "ordinal", "--json", str(tmp_path / "o.json")), out=out)
    python = ordinal(FORMULA, frame, clients="hospital")
    pd.testing.assert_frame_equal(report.summary, python.summary(), rtol=1e-10)
    text = out.getvalue()
    assert "FedOrderedModel" in text and "2/3" in text and "log-likelihood" in text
    saved = json.loads((tmp_path / "o.json").read_text())
    assert saved["summary"]["age"]["coef"] == pytest.approx(python.params["age"], rel=1e-10)
    multi = run_fit(_args(path, "--clients", "hospital", "--formula", FORMULA, "--model",
                          "multinomial"), out=io.StringIO())
    robust = run_fit(_args(path, "--clients", "hospital", "--formula", FORMULA, "--model",
                           "multinomial", "--cov-type", "HC0"), out=io.StringIO())
    ref_hc0 = smf.mnlogit(FORMULA, frame).fit(method="newton", tol=1e-12, disp=0,
                                              cov_type="HC0")
    np.testing.assert_allclose(robust.summary["std err"].to_numpy(),
                               ref_hc0.bse.to_numpy().ravel(order="F"), rtol=1e-6)
    ref = smf.mnlogit(FORMULA, frame).fit(method="newton", tol=1e-12, disp=0)
    np.testing.assert_allclose(multi.summary["coef"].to_numpy(),
                               ref.params.to_numpy().ravel(order="F"), atol=1e-6)
    np.testing.assert_allclose(
        multi.summary["coef"], mnlogit(FORMULA, frame, clients="hospital").params, rtol=1e-10)


@pytest.mark.parametrize("extra, message", [
    (["--target", "grade", "--model", "ordinal"], "fitted from a formula naming its outcome"),
    (["--formula", FORMULA, "--model", "multinomial", "--cov-type", "HC1"],
     "takes --cov-type nonrobust, HC0 or cluster"),
])
def test_what_the_command_line_refuses(grades, extra, message):
    _, path = grades
    with pytest.raises(CLIError, match=message):
        run_fit(_args(path, "--clients", "hospital", *extra), out=io.StringIO())


def test_ordinal_through_site_services_masked(grades, tmp_path):
    """``--site-service`` at sites that require secure aggregation: plain sums refused,
    ``--secure-aggregation`` gives the local fit."""
    pytest.importorskip("grpc")
    pytest.importorskip("cryptography")
    from ._cli_services import cli_services
    from ._sites import SITES

    frame = grades[0].assign(hospital=lambda f: f["hospital"].map(dict(zip(
        ("north", "south", "east"), SITES))))
    policy = ('min_rows = 10\nrequire = ["secure_aggregation"]\n'
              f'consortium = [{", ".join(repr(s).replace(chr(39), chr(34)) for s in SITES)}]')
    with cli_services(tmp_path, frame, clients="hospital", policy=policy) as options:
        with pytest.raises(CLIError, match="requires secure aggregation"):
            run_fit(_args(*options, "--formula", FORMULA, "--model", "ordinal"),
                    out=io.StringIO())
        report = run_fit(_args(*options, "--formula", FORMULA, "--model", "ordinal",
                               "--secure-aggregation"), out=io.StringIO())
    local = ordinal(FORMULA, frame, clients="hospital")
    pd.testing.assert_frame_equal(report.summary, local.summary(), rtol=1e-9)
