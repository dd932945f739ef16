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
    assert "local-only, site 4" in text and "selected features:" in text


def test_cli_entry_point(capsys):
    assert main(["demo", "--sites", "3", "--alpha", "0.5"]) == 0
    assert "held by 3 sites" in capsys.readouterr().out


def test_python_dash_m():
    proc = subprocess.run([sys.executable, "-m", "skfed", "demo", "--sites", "3"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "federated (FedLasso)" in proc.stdout
