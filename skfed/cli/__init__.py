"""The command line (``skfed demo|fit|support-matrix``) and its report.

- :mod:`~skfed.cli.main`: argument parsing and the ``demo`` command;
- :mod:`~skfed.cli.fit`: ``skfed fit`` on CSV rows in this process;
- :mod:`~skfed.cli.remote`: ``skfed fit --scheduler ... --site NAME=PATH``, rows at the sites;
- :mod:`~skfed.cli.html_report`: the self-contained HTML report;
- :mod:`~skfed.cli.boosting_report`: its page for boosted trees (``--model boosting``).
"""

from .main import main

__all__ = ["main"]
