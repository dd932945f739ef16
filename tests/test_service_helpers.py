"""The helpers that start the tests' service processes cannot hang a test."""

import sys

import pytest

from ._sites import spawn_service, stop_sites

NOISY = ("import sys, time; sys.stderr.write('x' * 200_000); sys.stderr.flush(); "
         "print('skfed site serving on port 1;', flush=True); time.sleep(60)")


def test_a_service_that_writes_more_than_a_pipe_holds_to_stderr_still_starts():
    """200 KB on stderr before its first line: through an unread pipe (64 KB) the
    process would block in that write and never say it serves."""
    proc, line = spawn_service([sys.executable, "-c", NOISY], "serving", timeout=60)
    try:
        assert "serving on port 1" in line
        proc.errors.seek(0)
        assert len(proc.errors.read()) == 200_000
    finally:
        stop_sites([proc])
    assert proc.stdout.closed and proc.errors.closed


def test_a_service_that_neither_starts_nor_dies_fails_within_its_timeout():
    with pytest.raises(RuntimeError, match="did not start within 1 s"):
        spawn_service([sys.executable, "-c", "import time; time.sleep(60)"], "serving",
                      timeout=1)
