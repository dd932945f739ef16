"""The Quickstart's first command needs only the core dependencies.

``.ci/run`` proves it in a fresh venv; this test keeps the regular suite honest too: it
hides every package of the optional extras from a subprocess, then imports skfed and runs
the demo there.
"""

import subprocess
import sys
import textwrap

# packages that only the optional extras (plot, dask, privacy, site, formula, test, docs)
# install
EXTRAS_ONLY = ["matplotlib", "dask", "distributed", "cryptography", "dp_accounting", "grpc",
               "pyarrow", "statsmodels", "lifelines", "sksurv", "pytest", "hypothesis",
               "sphinx", "formulaic"]

BLOCKER = textwrap.dedent(f"""
    import sys
    import importlib.abc

    class HideExtras(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {EXTRAS_ONLY!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}} (hidden: an extra)")
            return None

    sys.meta_path.insert(0, HideExtras())
    """)


def run_without_extras(code):
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300)


def test_import_skfed_needs_no_extra():
    result = run_without_extras("""
        import skfed
        from skfed import FedLasso, FedCoxPH, FederatedDataset
        import skfed.stats, skfed.preprocessing, skfed.model_selection, skfed.cli.main
        print(skfed.__version__)
        """)
    assert result.returncode == 0, result.stderr


def test_demo_runs_without_extras():
    result = run_without_extras("""
        import sys
        from skfed.cli.main import main
        sys.exit(main(["demo"]))
        """)
    assert result.returncode == 0, result.stderr
    assert "federated vs scikit-learn Lasso on the pooled standardized rows" in result.stdout


def test_hidden_extra_is_really_hidden():
    # the test above could pass vacuously if the blocker did nothing
    result = run_without_extras("import matplotlib")
    assert result.returncode != 0
    assert "hidden: an extra" in result.stderr
