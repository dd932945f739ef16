"""The README's main job: ``python -m skfed demo``."""

import io
import subprocess
import sys

from skfed._cli import main, run_demo


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
    assert "skfed fit: FedLasso (lasso)" in proc.stdout
