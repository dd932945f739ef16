"""The site's audit log: one JSON line per request, appended, never rewritten.

Each line holds ``time`` (UTC, ISO 8601), ``analyst`` (the certificate
identity), ``operation``, ``dataset``, ``columns``, ``rows`` (rows the reply
was computed from), ``bytes`` (bytes released), ``epsilon`` (privacy charged),
``outcome`` (``"ok"``, ``"refused"`` or ``"error"``), and for a refusal the
``rule`` and its ``reason``. No row value and no local path is written.
"""

import datetime
import json
import os
import threading


class AuditLog:
    """Append-only JSON-lines file (opened with ``O_APPEND``; one write per line)."""

    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        self._fd = os.open(path, flags, 0o600)

    def record(self, **fields):
        """Append one line (``time`` is added)."""
        line = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="milliseconds")}
        line.update(fields)
        data = (json.dumps(line, default=str, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, data)

    def close(self):
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def read_audit(path):
    """The audit log's lines as dicts (for the site's administrator and tests)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
