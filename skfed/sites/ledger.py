"""The site's own privacy budget: a ledger on its disk, charged before noisy replies.

Every differentially private fit on a dataset is charged the epsilon and
delta that the site computes itself, with ``dp-accounting``'s RDP accountant
(:class:`~skfed.privacy.accounting.GaussianAccountant`), from the noise
multiplier it adds noise for and the rounds the fit declared. Fits compose
by adding their epsilons and deltas (basic composition: a valid bound,
looser than composing the Renyi divergences across fits, and independent of
the analysts' honesty about anything but what the site itself measures).

The charge is written, and flushed to disk, before the fit's first noisy
reply leaves; a fit that would pass the dataset's budget is refused whole.
The file survives restarts: it is read at start and rewritten atomically
(a temporary file, ``fsync``, ``rename``).
"""

import datetime
import json
import os
import threading
from pathlib import Path


class PrivacyLedger:
    """Epsilon and delta spent per dataset, persisted in a JSON file.

    Parameters
    ----------
    path : path-like
    epsilon_budget : float
        What each dataset may spend, in total, across every fit.
    """

    def __init__(self, path, epsilon_budget):
        self.path, self.epsilon_budget = Path(path), float(epsilon_budget)
        self._lock = threading.Lock()
        self._entries = json.loads(self.path.read_text()) if self.path.exists() else {}

    def spent(self, dataset):
        """``(epsilon, delta)`` spent on ``dataset`` so far."""
        entry = self._entries.get(dataset, {})
        return entry.get("epsilon", 0.0), entry.get("delta", 0.0)

    def charge(self, dataset, epsilon, delta, *, analyst, rounds):
        """Charge a fit; ``False`` (nothing written) when it would pass the budget.

        ``rounds`` is the number of noisy releases charged, or ``{kind: number}`` (a
        fit's rounds and monitoring passes): the entry lists every kind it charged."""
        with self._lock:
            spent, spent_delta = self.spent(dataset)
            if spent + epsilon > self.epsilon_budget * (1 + 1e-12):
                return False
            entry = self._entries.setdefault(dataset, {"epsilon": 0.0, "delta": 0.0,
                                                       "charges": []})
            entry["epsilon"] = spent + float(epsilon)
            entry["delta"] = spent_delta + float(delta)
            entry["charges"].append({
                "time": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"),
                "analyst": analyst, "epsilon": float(epsilon), "delta": float(delta),
                "rounds": ({k: int(v) for k, v in rounds.items()} if isinstance(rounds, dict)
                           else int(rounds))})
            self._write()
            return True

    def _write(self):
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        try:
            os.write(fd, json.dumps(self._entries, indent=1).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
