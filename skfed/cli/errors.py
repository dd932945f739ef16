"""The command line's error: a problem with the input that the person can fix.

It lives beneath every module of :mod:`skfed.cli` so that any of them can
raise it without importing another (``fit`` imports ``summary`` and
``inputs``, which raise it too); :mod:`skfed.cli.fit` re-exports it.
"""


class CLIError(ValueError):
    """A problem with the input that the person running the command can fix."""
