"""The HTML report of ``skfed fit --model boosting ... --report PATH``.

The same page as the linear models' (:mod:`skfed.cli.html_report`, whose
helpers it uses): each site's held-out score with the terminal's four
decimals, the loss per tree as a figure (inline SVG, and next to the page as
``NAME-loss.svg`` and ``NAME-loss.pdf``) and as a table, the trees' settings
and what the fit cost in rounds and bytes. Without matplotlib (the ``plot``
extra) the page is written without the figure and says so.
"""

import html
import math

import numpy as np

from .html_report import _STYLE, _decimals, _figure, _head, _site_section, _table


def shown_iterations(n_records, most):
    """``(step, indices)``: every ``step``-th record of ``n_records`` and the last, at
    most about ``most`` of them (the baseline, record 0, first)."""
    step = max(1, math.ceil((n_records - 1) / most))
    return step, sorted(set(range(0, n_records, step)) | {n_records - 1})


def _count(v):
    """A count with thousands separators; a mean with one decimal; NaN as ``n/a``."""
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    return "n/a" if math.isnan(v) else f"{v:,.1f}"


def _loss_figure(history):
    """The training loss (and the held-out loss of early stopping) after each tree, and
    the trees' cumulative traffic."""
    from ..history import integer_round_ticks
    from ..plotting._style import journal_style, new_figure

    iteration = history["iteration"]
    validation = history["validation_loss"]
    sent = np.cumsum(history["bytes"]) / 1e3
    unit = "KB" if sent[-1] < 1e4 else "MB"  # no five-digit ticks
    sent = sent if unit == "KB" else sent / 1e3
    with journal_style():
        fig, axes = new_figure(7.0, 2.8, ncols=2, wspace=0.3)
        axes[0].plot(iteration, history["train_loss"], label="training")
        if np.isfinite(validation).any():  # early stopping held rows out
            axes[0].plot(iteration, validation, label="validation (held out)")
        axes[0].set(title="loss per tree", xlabel="tree (0: the baseline)")
        axes[0].legend()
        axes[1].plot(iteration, sent, color="#009E73")
        axes[1].set(title=f"trees' traffic ({unit}, cumulative)", xlabel="tree")
        for ax in axes:
            ax.grid(alpha=0.3)
            integer_round_ticks(ax)
    return fig


def _loss_section(est, path, most):
    """The loss figure (a note instead without matplotlib) and the loss table, thinned
    as the terminal's."""
    history = est.history_
    try:
        fig = _loss_figure(history)
    except ImportError:  # the plot extra is optional: the tables still say it all
        parts = ["<p>No figure of the loss per tree: it is drawn with matplotlib "
                 "(pip install 'skfed[plot]'). The table below and --json hold the "
                 "numbers.</p>"]
    else:
        parts = [_figure(fig, path, "loss", "Training loss after each tree (pooled from "
                         "the sites' sums) and the trees' cumulative traffic")]
    step, shown = shown_iterations(len(history), most)
    columns = [history[f] for f in ("train_loss", "validation_loss", "rounds", "bytes")]
    rows = [("baseline" if i == 0 else str(i), float(columns[0][i]), float(columns[1][i]),
             int(columns[2][i]), int(columns[3][i])) for i in shown]
    every = "every tree" if step == 1 else f"one row every {step} trees, and the last"
    return ["<h2>Loss per tree</h2>"] + parts + [
        f"<p>Loss after each tree ({every}); validation: the rows early stopping held "
        "out, if any.</p>",
        _table(["tree", "training loss", "validation loss", "rounds", "bytes"], rows,
               formats=[_decimals(6), _decimals(6), _count, _count])]


def _settings_section(report):
    """The trees' settings, as the estimator holds them."""
    est = report.estimator
    names = ("loss", "max_iter", "learning_rate", "max_leaf_nodes", "max_depth",
             "min_samples_leaf", "l2_regularization", "max_bins", "binning", "early_stopping",
             "random_state", "privacy")
    params = est.get_params()
    rows = [(n, str(params[n])) for n in names if n in params]
    rows += [("categorical", ", ".join(report.categorical) or "none"),
             ("missing values", "their own bin (nothing imputed)"),
             ("early stopping done", str(bool(getattr(est, "do_early_stopping_", False)))),
             ("iterations fitted", str(est.n_iter_)),
             ("trees per iteration", str(est.n_trees_per_iteration_))]
    return ["<h2>Settings</h2>", _table(["setting", "value"], rows, formats=[str])]


def _cost_section(est):
    """Rounds and bytes: the trees' (in all and per tree), the setup's and monitoring's."""
    history = est.history_
    rounds, sent = history["rounds"][1:], history["bytes"][1:]  # record 0: no tree
    per = "tree" if est.n_trees_per_iteration_ == 1 else \
        f"iteration ({est.n_trees_per_iteration_} trees)"
    mean = (lambda a: float(np.mean(a)) if len(a) else float("nan"))
    most = (lambda a: int(np.max(a)) if len(a) else 0)
    rows = [(f"trees ({est.n_iter_} iterations)", int(rounds.sum()), int(sent.sum())),
            (f"per {per}, mean", mean(rounds), int(round(mean(sent))) if len(sent) else 0),
            (f"per {per}, most", most(rounds), most(sent)),
            ("setup: schema, totals, bins", int(history.setup_rounds),
             int(history.setup_bytes)),
            ("monitoring: held-out and last losses", int(history.monitor_rounds),
             int(history.monitor_bytes))]
    total = [sum(r[k] for r in rows if not r[0].startswith("per ")) for k in (1, 2)]
    rows.append(("total, monitoring included", *total))
    return ["<h2>Rounds and traffic</h2>",
            "<p>Rounds of exchange with the sites and their bytes (both directions, every "
            "site).</p>",
            _table(["cost", "rounds", "bytes"], rows, formats=[_count, _count])]


def _what_model(est):
    if getattr(est, "binning", "exact") != "exact":
        return ("scikit-learn's model on the training rows' bin indices at the thresholds "
                "of the sites' sketches (--binning), tree for tree")
    return "scikit-learn's model on the pooled training rows, tree for tree"


def write_boosting_html_report(report, path, max_loss_rows=20):
    """Write the report of a boosting fit to ``path`` (one file, its figure inline as SVG)
    and the figure next to it as SVG and PDF.

    Parameters
    ----------
    report : skfed.cli.boosting_fit.BoostingReport
    path : str or path-like
    max_loss_rows : int, default=20
        About the most rows of the loss-per-tree table (every k-th tree, and the last).
    """
    est = report.estimator
    name = html.escape(type(est).__name__)
    held = f"{report.overall[1]} held out" if report.held_out else "none held out"
    parts = _head(f"skfed fit: {type(est).__name__}") + [
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>skfed fit: {name} ({html.escape(report.model)})</h1>",
        f"<p>Loss <b>{html.escape(str(getattr(est, 'loss', 'log_loss')))}</b>, "
        f"{est.n_iter_} iteration(s) of {est.n_trees_per_iteration_} tree(s), "
        f"{len(report.site_rows)} sites, {report.overall[0]} training rows, {held}. "
        f"{_what_model(est)}; missing values in their own bin.</p>"]
    # the terminal's four decimals, so that the page and the terminal agree
    parts += _site_section(report, scores=_decimals(4))
    parts += [f"<p>Note: {html.escape(n)}</p>" for n in report.notes]
    parts += _loss_section(est, path, max_loss_rows)
    parts += _settings_section(report) + _cost_section(est) + ["</body></html>"]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts))
