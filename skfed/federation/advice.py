"""What a fit that did not converge should change, measured on its own history."""

import math

import numpy as np


#: a rate is steady when its log over the last quarter of the rounds is at
#: least this fraction of the third quarter's (else extrapolating it would
#: promise too few rounds)
STEADY = 0.9


def _round_up(n):
    """``n`` rounded up to two significant digits (a max_rounds to type)."""
    n = max(int(math.ceil(n)), 1)
    scale = 10 ** max(len(str(n)) - 2, 0)
    return int(math.ceil(n / scale) * scale)


def _alternative(solver, problem, participation):
    """``", or solver=..."`` naming an exact solver likely faster here ("" if none)."""
    if not problem.datafit.smooth:
        name = "dualfl" if participation >= 1.0 else None
    elif participation >= 1.0:
        name = "newton"
    else:
        name = "feddyn" if solver.name != "feddyn" else "afedpd"
    if name is None or name == solver.name:
        return ""
    why = " (a handful of rounds on a smooth loss)" if name == "newton" else ""
    return f", or solver={name!r}{why}"


def convergence_advice(history, *, tol, solver, problem, participation):
    """One sentence for the ConvergenceWarning: where the fit stopped and the
    change that would finish it, from the rate measured over the second half
    of its rounds (monitored rounds only).

    A steady linear rate (the same over the third and the last quarter of
    the rounds) gives the rounds still needed (``max_rounds=...``); a slowing
    rate or a stall says so, with the solver's guarantee when it is biased,
    and an exact solver likely faster here.
    """
    rounds = history["round"]
    status, reason = solver.guarantee(problem, participation)
    if not problem.datafit.smooth:
        objective = history["objective"]
        seen = ~np.isnan(objective)
        r, v = rounds[seen], objective[seen]
        window = r >= r[-1] / 2
        change = (np.min(v[~window]) - np.min(v[window])) / max(abs(np.min(v)), 1e-300) \
            if np.any(~window) else np.nan
        return (f"the objective still improved by {change:.1e} (relative) over rounds "
                f"{int(r[window][0])}-{int(r[-1])}, more than tol: raise max_rounds or tol"
                f"{_alternative(solver, problem, participation)}")
    s = history["stationarity"]
    seen = ~np.isnan(s)
    r, v = rounds[seen], s[seen]
    target = tol * v[0]
    where = f"stationarity {v[-1]:.3e}, target {target:.3e}"
    other = _alternative(solver, problem, participation)
    biased = (f"; solver {solver.name!r} is biased ({reason}): it may stall before the "
              "target" if status == "biased" else "")
    if not target > 0:
        return f"{where}; tol=0 runs max_rounds rounds"
    # the rate per round over the third and the last quarter of the rounds
    marks = [int(np.searchsorted(r, r[-1] * q)) for q in (0.5, 0.75)] + [len(r) - 1]
    marks = sorted({min(m, len(r) - 1) for m in marks})
    if len(marks) < 2 or not np.all(v[marks] > 0):
        return f"{where}; increase max_rounds{other}{biased}"
    rates = [float((v[b] / v[a]) ** (1.0 / (r[b] - r[a]))) for a, b in zip(marks, marks[1:])]
    measured = f"rounds {int(r[marks[0]])}-{int(r[-1])}"
    late = rates[-1]
    use = other.replace(", or ", "; use ", 1)
    if late >= 1 - 1e-6:
        return (f"{where}; over {measured} it did not improve: more rounds will not "
                f"help{use}{biased}")
    more = math.log(target / v[-1]) / math.log(late)
    if len(rates) == 2 and (rates[0] >= 1 or np.log(late) / np.log(rates[0]) < STEADY):
        return (f"{where}; its rate is slowing (x{rates[0]:.4f} then x{late:.4f} per round "
                f"over {measured}): even at the latest rate it needs over "
                f"{_round_up(more)} more rounds{use}{biased}")
    return (f"{where}; at the rate measured over {measured} (x{late:.4f} per round, "
            f"steady) it needs about {_round_up(more)} more rounds: max_rounds="
            f"{_round_up(r[-1] + 1.2 * more)}{other}{biased}")
