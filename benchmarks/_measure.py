"""What every goal-stating benchmark shares: pinned threads, medians, a goal table.

Issue 37 states its goals as ratios measured on a shared 2-core machine, where
one run swings by 2x with the load and with the number of BLAS/OpenMP threads.
So a benchmark here

- pins the threads (:func:`pinned_threads`: threadpoolctl in this process,
  ``OMP_NUM_THREADS`` and its kin for the processes it starts; one thread by
  default, ``--threads``);
- times each measured callable ``--repeat`` times (five by default),
  interleaved with its floor (:func:`measure`: a, b, a, b, ... so a change of
  load hits both sides), and reports the median with the min and max;
- prints one row per goal (:class:`Goal`, :func:`print_goals`): what is
  measured, the issue's figure for today, the median now, the floor it is
  divided by (the reference: scikit-learn's pooled fit, the plain fit, a no-op
  round), the ratio, the goal and whether it is met.

Use::

    parser = argparse.ArgumentParser()
    add_options(parser)
    args = parser.parse_args()
    with pinned_threads(args.threads):
        t = measure({"fed": fit_fed, "pooled": fit_pooled}, args.repeat)
        goals = [Goal("the fit", "12.5x", t["fed"], t["pooled"], "scikit-learn", 3.0)]
    print_goals(goals, args.repeat, args.threads)
"""

import argparse
import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from threadpoolctl import threadpool_limits

#: the variables the usual BLAS and OpenMP runtimes read when a process starts
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def _count(minimum, what):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {value}")
        return value
    return parse


def add_options(parser, thread_flags=("--threads",)):
    """Add ``--repeat`` and the thread option to an argument parser.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The benchmark's parser.
    thread_flags : tuple of str, default=("--threads",)
        The flags of the thread option (a benchmark with an older spelling,
        such as ``--blas-threads``, passes both); its value is ``args.threads``.
    """
    parser.add_argument("--repeat", type=_count(1, "--repeat"), default=5,
                        help="runs of each timed fit; the median is reported (default 5)")
    parser.add_argument(*thread_flags, dest="threads", type=_count(0, thread_flags[0]),
                        default=1,
                        help="BLAS and OpenMP threads, here and in the processes started "
                             "(default 1: stable figures on a shared machine; 0 leaves "
                             "the libraries' own defaults)")


@contextmanager
def pinned_threads(threads):
    """Limit BLAS and OpenMP to ``threads`` threads inside the block.

    Parameters
    ----------
    threads : int
        Threads per pool; 0 changes nothing (the libraries' own defaults).

    Notes
    -----
    threadpoolctl limits the pools already loaded in this process; the
    environment variables (restored on exit) reach the processes started in
    the block, such as site services and Dask workers, whose pools read them
    when they load.
    """
    if threads < 0:
        raise ValueError(f"threads must be at least 0, got {threads}")
    if threads == 0:
        yield
        return
    saved = {name: os.environ.get(name) for name in THREAD_ENV}
    os.environ.update({name: str(threads) for name in THREAD_ENV})
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass(frozen=True)
class Timing:
    """Wall times of repeated runs of one callable, in seconds.

    Attributes
    ----------
    times : tuple of float
        One wall time per run, in the order run.
    result : object
        What the last run returned (a fitted estimator, to check and report on).
    """

    times: tuple
    result: object = field(default=None, compare=False, repr=False)

    @property
    def median(self):
        return statistics.median(self.times)

    @property
    def min(self):
        return min(self.times)

    @property
    def max(self):
        return max(self.times)

    def __str__(self):
        return f"{self.median:.3f} s (min {self.min:.3f}, max {self.max:.3f})"


def measure(calls, repeat=5):
    """Time each callable ``repeat`` times, the callables interleaved.

    Parameters
    ----------
    calls : dict of str to callable
        The callables (no arguments) to time, by name; run in this order in
        each of the ``repeat`` passes, so a change in the machine's load during
        the measurement falls on all of them.
    repeat : int, default=5
        Runs of each callable.

    Returns
    -------
    dict of str to Timing
        Each callable's wall times and its last result.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    if not calls or not all(callable(fn) for fn in calls.values()):
        raise TypeError("calls must be a non-empty dict of callables without arguments")
    times = {name: [] for name in calls}
    results = {}
    for _ in range(repeat):
        for name, fn in calls.items():
            start = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {name: Timing(tuple(times[name]), results[name]) for name in calls}


def _amount(value, unit):
    if isinstance(value, Timing):
        return value.median, f"{value.median:.3f} s ({value.min:.3f}-{value.max:.3f})"
    if unit == "B":
        return value, f"{value / 1e6:.2f} MB"
    return value, f"{value:.3g} {unit}".rstrip()


@dataclass
class Goal:
    """One goal of an issue: a measured figure against its floor.

    Parameters
    ----------
    what : str
        What is measured (the problem, its size and sites).
    today : str
        The issue's figure before the work, as the issue states it.
    now : Timing or float
        The figure measured now: a :class:`Timing` (its median is used) or a
        number in ``unit``.
    floor : Timing or float
        The reference ``now`` is divided by, in the same unit.
    floor_name : str
        What the floor is ("scikit-learn's pooled fit", "the plain fit").
    goal : float or None
        The largest ratio ``now / floor`` that meets the goal; None for a
        figure reported beside the goals without one.
    unit : str, default="s"
        The unit of numbers (``"B"`` prints bytes as MB).
    holds : bool or None, default=None
        A condition the goal also needs (the same trees bit for bit); False
        fails the goal whatever the ratio.
    condition : str, default=""
        The condition's words, printed with the goal.
    """

    what: str
    today: str
    now: object
    floor: object
    floor_name: str
    goal: object
    unit: str = "s"
    holds: object = None
    condition: str = ""

    @property
    def ratio(self):
        floor = _amount(self.floor, self.unit)[0]
        if floor <= 0:
            raise ValueError(f"the floor of {self.what!r} must be positive, got {floor}")
        return _amount(self.now, self.unit)[0] / floor

    @property
    def met(self):
        if self.goal is None:
            return None
        return self.ratio <= self.goal and self.holds is not False

    def cells(self):
        """The row's cells: what, today, now, floor, ratio, goal, met?"""
        goal = "-" if self.goal is None else f"<= {self.goal:g}x"
        if self.condition:
            goal += f", {self.condition}" + ("" if self.holds is None else
                                             f" ({'yes' if self.holds else 'NO'})")
        met = {None: "-", True: "yes", False: "no"}[self.met]
        return [self.what, self.today, _amount(self.now, self.unit)[1],
                f"{_amount(self.floor, self.unit)[1]} {self.floor_name}",
                f"{self.ratio:.2f}x", goal, met]


def print_goals(goals, repeat, threads):
    """Print the goals as one table (Markdown rows), with how they were measured.

    Parameters
    ----------
    goals : list of Goal
        The rows.
    repeat : int
        Runs behind each median (for the header).
    threads : int
        The pinned BLAS/OpenMP threads (0: the libraries' defaults).
    """
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    pinned = "the libraries' defaults" if threads == 0 else str(threads)
    print(f"\ngoals (median of {repeat} runs, interleaved with the floor; BLAS/OpenMP "
          f"threads: {pinned}; {os.cpu_count()} cores, load average {load})")
    print("| what | today | now (median of %d, min-max) | floor | ratio | goal | met? |"
          % repeat)
    print("|---|---|---|---|---|---|---|")
    for goal in goals:
        print("| " + " | ".join(goal.cells()) + " |")
