"""The README's main job: ``python -m skfed demo``."""

import io
import subprocess
import sys

from skfed.cli.main import main, run_demo


def test_demo_reaches_the_pooled_model():
    out = io.StringIO()
    fed = run_demo(out=out)
    text = out.getvalue()
    assert "same support: True" in text
    gap = float(text.split("relative objective gap ")[1].split(",")[0])
    assert abs(gap) < 1e-8
    assert fed.n_clients_ == 5
    assert "site-4" in text and "selected features:" in text
    assert "held-out R2" in text and "local-only" in text  # the same report as skfed fit
    # skfed fit's default: the features standardized from per-site sums, the
    # evidence against scikit-learn's StandardScaler + Lasso on the pooled rows
    assert "features standardized (mean 0, sd 1 on the training rows" in text
    sd_diff = float(text.split("max relative difference of the standard deviations ")[1]
                    .split()[0])
    assert sd_diff < 1e-12
    assert "standardized  original units" in text


def test_cli_entry_point(capsys, tmp_path):
    report, model = tmp_path / "demo.html", tmp_path / "demo.joblib"
    assert main(["demo", "--sites", "3", "--alpha", "0.5", "--report", str(report),
                 "--output", str(model)]) == 0
    assert "held by 3 sites" in capsys.readouterr().out
    assert "<table>" in report.read_text() and model.stat().st_size > 0


def test_python_dash_m():
    proc = subprocess.run([sys.executable, "-m", "skfed", "demo", "--sites", "3"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "skfed fit: FedLasso (lasso, alpha=2)" in proc.stdout


def test_demo_writes_the_csv_of_the_command_it_prints(capsys, tmp_path, monkeypatch):
    """The demo's "same fit" command runs as printed and gives the demo's model."""
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--sites", "3", "--csv", "diabetes.csv"]) == 0
    demo = capsys.readouterr().out
    command = demo.split("the same fit: ")[1].splitlines()[0]
    assert command.startswith("skfed fit diabetes.csv ")
    assert main(command.split()[1:]) == 0
    fit = capsys.readouterr().out
    def tables(text):  # the header, the coefficients and the held-out scores
        return text.split("skfed fit: ")[1].split("\n\n")[:3]

    assert tables(fit) == tables(demo)
    out = io.StringIO()
    run_demo(n_sites=3, out=out)
    assert "the same as: skfed demo --csv diabetes.csv, then skfed fit diabetes.csv" in \
        out.getvalue()
