"""One rule for the rows ``skfed fit`` holds out, in every path, and the note that says
which rows were held out and why.

The rule: **a regression table is fitted on every row unless the user asks for a
held-out evaluation.** ``--summary`` (a GLM's or a Cox model's table) and
``--formula`` (whose report is its table) use every row by default, as
statsmodels, lifelines and R do; ``--test-size 0.2`` asks for a held-out score
(the table then comes from the other rows, and the output says so). A run
without a table compares the federated, local-only and pooled models by their
predictions, so it holds out ``DEFAULT_TEST_SIZE`` of every site's rows unless
told otherwise (``--test-size 0`` or ``--final``: none). Boosted trees have no
table: their score is that comparison.

Where the held-out rows come from depends on where the rows are: in this process
(local CSV files) ``ceil(test_size * n)`` rows of each site drawn from
``--random-state``; on Dask workers each worker draws its site's rows from
``--random-state`` and the site's name; a site service holds out whole
partitions of its rows, dealt from a secret only the site holds (each of at least
its ``min_rows`` rows, the share rounded to whole partitions), so that no analyst
chooses which rows are left out: the held-out rows of a run through services are
not those of the same run on the same rows in this process.
"""

from .errors import CLIError

#: the share of each site's rows a run without a regression table holds out
DEFAULT_TEST_SIZE = 0.2

#: where the held-out rows were drawn, by home of the rows
_DRAWN = {
    "local": "drawn here from --random-state {seed}",
    "dask": "drawn by each site's worker from --random-state {seed} and the site's name",
    "services": "drawn by each site from its own secret as whole partitions of at least "
                "its min_rows rows (the share rounded to whole partitions; --random-state "
                "{seed} picks partitions, never rows), so they are not the rows a run on "
                "the same rows in this process holds out",
}


def test_size(args):
    """The share of every site's rows held out under the rule (``0.0``: none).

    Parameters
    ----------
    args : argparse.Namespace
        ``skfed fit``'s options: ``final``, ``test_size`` and ``summary``.

    Returns
    -------
    float
    """
    if getattr(args, "final", False):
        if args.test_size not in (None, 0):
            raise CLIError("--final fits on every row: it takes no --test-size.")
        return 0.0
    if args.test_size is not None:
        return args.test_size
    return 0.0 if getattr(args, "summary", False) else DEFAULT_TEST_SIZE


def none_held_out(args):
    """Why a run holds no row out, in a few words (the report's first line)."""
    if getattr(args, "summary", False) and args.test_size is None and not args.final:
        return "--summary: a regression table is fitted on every row unless --test-size asks"
    return "--test-size 0: the final model, fitted on every row"


def _by_site(site_rows, k):
    return ", ".join(f"{row[0]} {row[k]}" for row in site_rows)


def holdout_note(args, site_rows, home):
    """What the output says of the held-out rows: which (how many per site) and why.

    Parameters
    ----------
    args : argparse.Namespace
        ``skfed fit``'s options.
    site_rows : list of tuple
        ``(site, training rows, held-out rows, ...)`` per site, as the report has them.
    home : {"local", "dask", "services"}
        Where the rows are.

    Returns
    -------
    str
    """
    n_train = sum(int(row[1]) for row in site_rows)
    n_test = sum(int(row[2]) for row in site_rows)
    summary = getattr(args, "summary", False)
    if not n_test:
        if summary and args.test_size is None and not args.final:
            return (f"no held-out score: a regression table (--summary) is fitted on every "
                    f"row (rows by site: {_by_site(site_rows, 1)}); --test-size 0.2 holds "
                    "out a fifth of each site's rows to score the model (the table then "
                    "comes from the other rows)")
        return (f"no held-out score: --test-size 0 fits on every row (training rows by site: "
                f"{_by_site(site_rows, 1)}); run with --test-size 0.2 to estimate how well "
                "the model predicts")
    share = test_size(args)
    why = ("as asked" if args.test_size is not None else
           "the default of a run without a regression table: the federated, local-only "
           "and pooled models are compared on rows none was fitted on")
    note = (f"held-out rows: {n_test} of {n_train + n_test} (by site: "
            f"{_by_site(site_rows, 2)}), {share:.0%} of each site's rows (--test-size "
            f"{share:g}, {why}), " + _DRAWN[home].format(seed=args.random_state))
    if summary:
        note += (f"; the regression table comes from the {n_train} training rows, not all "
                 f"{n_train + n_test} (without --test-size it is fitted on every row)")
    return note
