"""Federated histogram gradient boosting against scikit-learn's pooled model.

Part 1, the same model: a binary classification problem (default 20,000 rows x
20 features, 4 IID sites, 100 trees, early stopping off), fitted by
FedHistGradientBoostingClassifier in process and by scikit-learn's
HistGradientBoostingClassifier on the pooled rows, ``--repeat`` times each
(five by default, the two interleaved) with BLAS and OpenMP pinned to
``--threads`` threads (one by default: the federated fit is single-threaded).
Prints the median fit times and their ratio, rounds and bytes per tree
(history_: the trees' rounds; setup: schema, totals, bin thresholds), node
histograms per tree, the largest difference of predicted probabilities and of
leaf values, and whether every tree is scikit-learn's node for node.

In process the sites' rows share the process: a round's histograms are one pass
over their rows pooled in site order (skfed/ensemble/_pooled_sites.py), the
ledger charging the per-site messages. ``--per-site`` also times the fit with one
pass per site, as on Dask and at site services, and checks its trees and history.

Part 2, what the pooled-equal model is worth on heterogeneous sites (split by
the quantiles of one feature, one site per slice): test AUC of the federated
model against each site's own scikit-learn model (mean and range of their AUCs
on the pooled test rows) and against the average of the sites' models'
probabilities (what bagging peers do). One run: no goal rides on its time.

Part 3, secure aggregation: the same fit with ``privacy=SecureAggregation()``
(every sum masked at the sites in exact integer limbs), ``--repeat`` times
interleaved with the plain federated fit of one pass per site (a masked sum masks
each site's own reply: the same protocol without the masks): median fit time and the trees'
bytes (history_, setup excluded, as issue 37's 4.4x) against the plain fit's,
setup rounds, and whether the trees are the plain fit's bit for bit. Then the
floors no exact masking beats here: in time, the plain fit plus the sites' pairwise
masks alone (every message of one masked fit, recorded, masked again with no sum,
encoding or decoding: the keystreams and their additions), and in bytes, the bits
a histogram cell's exact code needs (each float sum on the 2**-149 grid of float32
gradients, within its public range, with a sign) against the plain cell's 160.

Last, issue 37's goals as one table (benchmarks/_measure.py): what, today's
figure from the issue, the median now, the floor (scikit-learn's pooled fit;
the plain fit for the masked one), the ratio, the goal and whether it is met
(a goal with trees to keep is not met when they differ).

Run: python benchmarks/bench_boosting.py [--rows 20000 --features 20 --sites 4
--trees 100] [--repeat 5] [--threads 1] [--large] [--skip-value] [--skip-masked]
[--per-site] [--discrete N]

``--discrete N``: the last N features are integer codes of few values (2 to 20,
binary and ordinal columns as tabular records hold them). A masked sum sends the
histogram cells a row can be in only (each feature's bins from its thresholds and
the missing bin: public), so its words shrink with them; the plain fit in process
keeps every cell (through services its replies travel sparse). Issue 37's goals are
set on the continuous problem (N = 0).

``--large`` (also spelled ``--issue-scale``, issue 28's measurement):
1,000,000 rows x 28 features on 8 sites (100 trees), the ratios against the
goals (fit time at most 1.3x scikit-learn's for issue 37, 2x for issue 28;
rounds per tree about the tree depth + 1); it takes minutes a run.
Issue 37's goals for the fit-time ratio: at most 3x at 20,000 x 20, at most
1.3x at 1M x 28; for the masked fit at most 1.5x the plain fit's time and 2x
its bytes. docs/performance.md has the measured medians.

Measured (issue 37, item 3; the 2-core machine shared with other work, its load
3 to 4 during the runs, ``--rows 20000 --features 20 --sites 4 --trees 100``):

- before, one run: federated 6.98 s (setup 0.62 s, trees 6.35 s), scikit-learn
  0.70 s, ratio 9.97 (the issue's run: 7.0 s vs 0.56 s, 12.5x). A profile put a
  third of the trees' time in the server's numpy split search (0.25 ms a node,
  about 70 nodes a tree), half in the sites' answers and the session (about
  11.5 rounds a tree, 4 sites), the rest in the replays' bookkeeping.
- after, one run: federated 5.79 s (setup 0.41 s, trees 5.38 s), scikit-learn
  0.72 s, ratio 8.05 under that load (after the splitter change alone, in a
  quieter run: 3.56 s vs 0.46 s, 7.75x); the same trees (largest differences
  0). In CPU time, which the
  load disturbs less (both versions in one sitting): federated 6.65 s before,
  3.61 s after, scikit-learn 0.49-0.54 s: 12.4x before, 7.3x after.
- what changed: scikit-learn's compiled splitter on the pooled histograms
  where no categorical feature is allowed and no feature drawn (0.05 ms a
  node); views of the reply instead of copies; the bins' order-statistic
  search merges its keys instead of sorting and searching them again (setup
  0.62 s to 0.41 s). Batching every node of a round into one vectorised numpy
  search was tried and measured slower per node (0.50 ms against 0.25 ms: the
  stacked arrays leave the cache), so the search stays per node.
- what remains: about 32 ms of CPU a tree, two thirds at the sites and in the
  session (per request and site: the context's digest, the node rows, the
  model check, the histogram kernel), the rest the server's replays and split
  searches. The goal (3x) needs the sites' per-request work cut (item 1's
  site-resident state), not the server's.
- after item 1 and a later pass (the replay resumes where it last missed a
  histogram, 44% fewer node splits replayed; replies added in place; paths
  unpacked once a request): CPU time 4.09 s -> 3.27 s against scikit-learn's
  0.62 s (6.65x -> 5.25x), medians of three fits interleaved with the code
  before, load average 5-14. 47.8 node histograms a tree are asked for, 28.0
  of them ones scikit-learn's run needs (the rest keep a tree within depth + 1
  rounds); an oracle asking for those alone took 19% less CPU time with the
  same rounds and trees: the histograms' bytes, not Python, are what is left.
- a node the real run is likely not to split held back (its gain below 0.7x the
  awaited node's while the leaf budget is tight; docs/boosting.md): 38.2 node
  histograms a tree for 11.7 rounds (47.8 for 11.5 before); 1M x 28: 37.7 for
  11.7 (55.0 for 10.6).
- issue 37, item 3/6 at 1M x 28 on 8 sites (one thread): the sites bin their rows by
  a branch-free binary search vectorised over the rows (0.053 s a 125k x 28 site
  against 0.177 s for np.searchsorted and 0.170 s for scikit-learn's _map_to_bins;
  the same bins), the bin search sorts only the rows the 200,000-row draw counts,
  interleaved rows are reordered with np.take. Interleaved with the code before, load
  about 1: 15 trees 6.78-7.19 s -> 5.33-5.56 s CPU (three pairs), 40 trees 11.52 s ->
  10.17 s; the same trees. One --large pair at load 2-4 was noise-bound: 24.06 s (ratio
  1.41, scikit-learn 17.10 s) before, 26.37 s (1.58, 16.67 s) after, its trees' part
  2.4 s slower, which the 15- and 40-tree pairs (the same 1.35-1.4 s saved) rule out as
  a per-tree cost. 20,000 x 20: 2.73 -> 2.54 s CPU
  (medians of three pairs, load 9-12), ratio about 5 either way.
"""

import argparse
import time

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score

from _measure import Goal, add_options, measure, pinned_threads, print_goals
from skfed.ensemble import FedHistGradientBoostingClassifier

#: (rows, features, sites, trees) -> issue 37's figures for today at that size
ISSUE_SIZE = (20_000, 20, 4, 100)
LARGE_SIZE = (1_000_000, 28, 8, 100)


#: the levels of the few-valued features of ``--discrete`` (binary, ordinal, counts)
DISCRETE_LEVELS = (2, 2, 3, 4, 5, 7, 10, 20)


def make_problem(n, d, seed=0, discrete=0):
    """``n`` rows of ``d`` features (2% missing), the last ``discrete`` of them integer
    codes of few values (DISCRETE_LEVELS, in turn), and a binary outcome."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[rng.random(X.shape) < 0.02] = np.nan
    for j in range(max(d - discrete, 0), d):
        X[:, j] = rng.integers(0, DISCRETE_LEVELS[j % len(DISCRETE_LEVELS)], n)
    Z = np.nan_to_num(X)
    logit = Z[:, 0] - 0.8 * Z[:, 1] ** 2 + np.sin(2 * Z[:, 2]) + 0.5 * Z[:, 3] * Z[:, 4]
    y = (logit + rng.logistic(size=n) > 0).astype(int)
    return X, y, rng


def _discrete(args):
    return f" ({args.discrete} few-valued)" if args.discrete else ""


def size(args):
    return (args.rows, args.features, args.sites, args.trees)


def same_trees(a, b):
    """Whether two fitted boosting models hold the same trees, node for node, to the bit."""
    return all(np.array_equal(x.nodes, z.nodes) for fa, fb in zip(a._predictors, b._predictors)
               for x, z in zip(fa, fb))


def same_model(args):
    """Part 1: the federated fit against scikit-learn's pooled fit; returns its goal."""
    X, y, rng = make_problem(args.rows, args.features, discrete=args.discrete)
    site = rng.integers(0, args.sites, args.rows)
    order = np.argsort(site, kind="stable")
    Xo, yo = X[order], y[order]  # the pooled rows in the sites' order: the same bins
    params = dict(max_iter=args.trees, early_stopping=False, random_state=0)
    fits = {
        "federated": lambda: FedHistGradientBoostingClassifier(**params).fit(
            X, y, clients=site),
        "scikit-learn": lambda: HistGradientBoostingClassifier(**params).fit(Xo, yo)}
    if args.per_site:
        fits["one pass per site"] = lambda: _per_site(
            lambda: FedHistGradientBoostingClassifier(**params).fit(X, y, clients=site))
    t = measure(fits, args.repeat)
    fed, ref = t["federated"].result, t["scikit-learn"].result
    same = same_trees(fed, ref)
    report_same_model(args, t, X, same)
    if args.per_site:
        other = t["one pass per site"]
        print(f"  one pass per site (as on Dask and at site services): {other.median:.2f} s, "
              f"{other.median / t['scikit-learn'].median:.2f}x scikit-learn's; its trees "
              f"scikit-learn's node for node: {same_trees(other.result, ref)}, the history's "
              f"rounds and bytes the pooled fit's: "
              f"{_same_ledger(other.result.history_, fed.history_)}")
    if size(args) == ISSUE_SIZE and not args.discrete:
        today = "12.5x (7.0 s vs 0.56 s)"
    elif size(args) == LARGE_SIZE and not args.discrete:
        today = "1.68-2.0x (40.5 s vs 24.0 s / 20.3 s)"
    else:
        today = "- (not the issue's problem)"
    return Goal(f"boosting in process, {args.rows:,} x {args.features}{_discrete(args)}, "
                f"{args.sites} sites, {args.trees} trees", today, t["federated"],
                t["scikit-learn"],
                "scikit-learn's pooled fit", 1.3 if args.rows >= LARGE_SIZE[0] else 3.0,
                holds=same, condition="the same trees")


def _per_site(fit):
    """``fit()`` with one histogram pass per site (as on Dask and at site services), not
    one pass over the sites' pooled rows (the default in process)."""
    from skfed.ensemble._fit import BoostingRun

    BoostingRun.pools_sites = False
    try:
        return fit()
    finally:
        BoostingRun.pools_sites = True


def _same_ledger(a, b):
    return all(np.array_equal(a[f], b[f]) for f in ("rounds", "bytes", "histograms")) and \
        a.setup_bytes == b.setup_bytes


def report_same_model(args, t, X, same):
    """Print part 1's figures (the last fits' history and differences)."""
    fed, ref = t["federated"].result, t["scikit-learn"].result
    h = fed.history_
    rounds, depth = h["rounds"][1:], h["max_depth"][1:]
    t_trees = h["wall_time"][-1]  # the first tree's start (sites bin their rows) to the end
    t_last = t["federated"].times[-1]
    leaf_gap = max(np.max(np.abs(a.nodes["value"] - b.nodes["value"]))
                   for fa, ra in zip(fed._predictors, ref._predictors) for a, b in zip(fa, ra))
    ratio = t["federated"].median / t["scikit-learn"].median
    print(f"same model: {args.rows} rows x {args.features} features, {args.sites} sites, "
          f"{args.trees} trees (median of {args.repeat} fits each)")
    print(f"  fit time   federated {t['federated'].median:7.2f} s (last fit: setup "
          f"{t_last - t_trees:.2f} s, trees {t_trees:.2f} s)   scikit-learn "
          f"{t['scikit-learn'].median:6.2f} s   ratio {ratio:5.2f} "
          f"(goal <= {1.3 if args.rows >= LARGE_SIZE[0] else 3}, issue 37)")
    print(f"  rounds per tree  mean {rounds.mean():.2f}  max {rounds.max():.0f}   "
          f"(tree depth mean {depth.mean():.2f}, max {depth.max():.0f}; "
          f"leaves {h['n_leaves'][1:].mean():.1f}); rounds / (depth + 1): "
          f"mean {np.mean(rounds / (depth + 1)):.2f}, max {np.max(rounds / (depth + 1)):.2f} "
          f"(about 1 without max_depth, at most 1 under it)")
    print(f"  bytes per tree   mean {h['bytes'][1:].mean() / 1e6:.2f} MB   "
          f"histograms per tree {h['histograms'][1:].mean():.1f}")
    print(f"  setup            {h.setup_rounds} rounds ({h.binning_rounds} for the bins), "
          f"{h.setup_bytes / 1e6:.1f} MB")
    print(f"  largest difference: probabilities "
          f"{np.max(np.abs(fed.predict_proba(X) - ref.predict_proba(X))):.1e}, "
          f"leaf values {leaf_gap:.1e}; every tree scikit-learn's node for node: {same}")


def masked_cost(args):
    """Part 3: the masked fit against the plain one; returns its goals (time, bytes)."""
    from skfed.privacy import SecureAggregation

    X, y, rng = make_problem(args.rows, args.features, discrete=args.discrete)
    site = rng.integers(0, args.sites, args.rows)
    params = dict(max_iter=args.trees, early_stopping=False, random_state=0)
    t = measure({  # the plain fit as the masked one runs: one pass per site
        "plain": lambda: _per_site(lambda: FedHistGradientBoostingClassifier(**params).fit(
            X, y, clients=site)),
        "masked": lambda: FedHistGradientBoostingClassifier(
            **params, privacy=SecureAggregation()).fit(X, y, clients=site),
    }, args.repeat)
    plain, masked = t["plain"].result, t["masked"].result
    same = same_trees(plain, masked)
    hp, hm = plain.history_, masked.history_
    # the trees' bytes, setup excluded: the measure of issue 37's 4.4x
    b_plain, b_masked = hp["bytes"][1:].sum(), hm["bytes"][1:].sum()
    print(f"secure aggregation ({args.rows} rows, {args.sites} sites, {args.trees} trees, "
          f"sites simulated in this process; median of {args.repeat} fits each)")
    print(f"  fit time   masked {t['masked'].median:7.2f} s   plain {t['plain'].median:7.2f} s"
          f"   ratio {t['masked'].median / t['plain'].median:5.2f}")
    print(f"  bytes per tree   masked {hm['bytes'][1:].mean() / 1e6:.2f} MB   plain "
          f"{hp['bytes'][1:].mean() / 1e6:.2f} MB   ratio {b_masked / b_plain:.2f}   "
          f"(with setup: {(b_masked + hm.setup_bytes) / (b_plain + hp.setup_bytes):.2f})")
    print(f"  setup rounds     masked {hm.setup_rounds}   plain {hp.setup_rounds}; "
          f"masked sums {hm.privacy['masked_sums']}; trees bit for bit the plain "
          f"fit's: {same}")
    kept = kept_cells(masked)
    print(f"  cells a node     masked {kept} (the bins a row can be in, and "
          f"the missing bin)   plain {args.features * (masked.max_bins + 1)} (every bin)")
    report_masking_floors(args, X, y, site, params, t["plain"].median, kept)
    issue = size(args) == ISSUE_SIZE and not args.discrete
    what = f"masked boosting, {args.rows:,} x {args.features}{_discrete(args)}, " \
        f"{args.sites} sites"
    keep = dict(holds=same, condition="the plain fit's trees bit for bit")
    return [Goal(f"{what}: time", "6.1x" if issue else "-", t["masked"], t["plain"],
                 "the plain fit", 1.5, **keep),
            Goal(f"{what}: the trees' bytes", "4.4x" if issue else "-", b_masked, b_plain,
                 "the plain fit's", 2.0, unit="B", **keep)]


def kept_cells(est):
    """The histogram cells of a node over every feature that a masked sum sends."""
    from skfed.ensemble._site_rows import kept_bins

    return sum(est.max_bins + 1 if bins is None else len(bins)
               for bins in kept_bins(est._context))


def _masked_message_sizes(X, y, site, params):
    """``[(party, words)]``: every message the sites mask in one masked fit, recorded by
    wrapping the parties' masking (a fit of its own: the timed fits run unwrapped)."""
    from skfed.privacy import SecureAggregation
    from skfed.privacy.secure_aggregation import SecureAggregationParty

    sizes, original = [], SecureAggregationParty.mask_words

    def recording(party, words, *rest, **options):
        sizes.append((party.party_id, int(np.asarray(words).size)))
        return original(party, words, *rest, **options)

    SecureAggregationParty.mask_words = recording
    try:
        FedHistGradientBoostingClassifier(**params, privacy=SecureAggregation()).fit(
            X, y, clients=site)
    finally:
        SecureAggregationParty.mask_words = original
    return sizes


def _masks_alone(sizes, n_sites, repeat):
    """Median seconds of the masks alone of those messages: each party's pairwise
    keystreams (its seeds, AES-128-CTR) added to zero words, the fit's work without
    its sums, encoding or decoding."""
    from skfed.privacy.secure_aggregation import SecureAggregationParty

    times = []
    for rep in range(repeat):
        parties = [SecureAggregationParty(j, session=f"floor-{rep}") for j in range(n_sites)]
        keys = {j: p.public_key() for j, p in enumerate(parties)}
        largest = max(words for _, words in sizes)
        zeros = np.zeros(largest, dtype=np.uint64)
        start = time.perf_counter()
        for exchange, (party, words) in enumerate(sizes):
            parties[party].mask_words(zeros[:words], exchange, keys, copy=False)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def report_masking_floors(args, X, y, site, params, plain_seconds, kept):
    """What no exact masking of these sums can beat here: in time, the plain fit plus
    the sites' pairwise masks alone (four sites simulated one after another in this
    process); in bytes, the exact code's bits per histogram cell against the plain
    cell's 20 bytes (float64 gradient and hessian sums, uint32 count), for the ``kept``
    cells of a node a masked sum sends against the plain fit's every cell."""
    from skfed.privacy.masked_sums import EXPONENT, range_bits_for

    sizes = _masked_message_sizes(X, y, site, params)
    masks = _masks_alone(sizes, args.sites, args.repeat)
    words = sum(w for _, w in sizes)
    print(f"  floors: the masks alone {masks:.2f} s ({len(sizes)} messages, "
          f"{words * 8 * (args.sites - 1) / 1e9:.2f} GB of keystream): the plain fit plus "
          f"them {(plain_seconds + masks) / plain_seconds:.2f}x the plain fit's time")
    # a log loss's cell: |sum g| <= rows, 0 <= sum h <= rows / 4, a count <= rows; each
    # float exact on the 2**-EXPONENT grid (float32 gradients) with a sign
    bits = (EXPONENT + range_bits_for(args.rows) + 1) + \
        (EXPONENT + range_bits_for(args.rows / 4) + 1) + range_bits_for(args.rows)
    every = args.features * (params.get("max_bins", 255) + 1)
    print(f"          a cell's exact code needs {bits} bits against the plain cell's 160: "
          f"{bits / 160:.2f}x the plain bytes, {bits * kept / (160 * every):.2f}x for the "
          f"{kept} of {every} cells a node that travel masked")


def heterogeneous_value(args):
    X, y, rng = make_problem(2 * args.rows, args.features, seed=1)
    test = rng.random(len(y)) < 0.5
    Xtr, ytr, Xte, yte = X[~test], y[~test], X[test], y[test]
    cuts = np.nanquantile(Xtr[:, 0], np.arange(1, args.sites) / args.sites)
    site = np.searchsorted(cuts, np.nan_to_num(Xtr[:, 0]), side="right")
    params = dict(max_iter=args.trees, early_stopping=False, random_state=0)
    fed = FedHistGradientBoostingClassifier(**params).fit(Xtr, ytr, clients=site)
    auc_fed = roc_auc_score(yte, fed.predict_proba(Xte)[:, 1])
    local = []
    for s in range(args.sites):
        rows = site == s
        local.append(HistGradientBoostingClassifier(**params).fit(Xtr[rows], ytr[rows]))
    local_auc = [roc_auc_score(yte, m.predict_proba(Xte)[:, 1]) for m in local]
    bagged = np.mean([m.predict_proba(Xte)[:, 1] for m in local], axis=0)
    print(f"heterogeneous sites ({args.sites} slices of feature 0), test AUC on "
          f"{test.sum()} rows")
    print(f"  federated (= pooled) {auc_fed:.4f}   local models mean {np.mean(local_auc):.4f} "
          f"(min {np.min(local_auc):.4f}, max {np.max(local_auc):.4f})   "
          f"bagged local models {roc_auc_score(yte, bagged):.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ISSUE_SIZE[0])
    parser.add_argument("--features", type=int, default=ISSUE_SIZE[1])
    parser.add_argument("--sites", type=int, default=ISSUE_SIZE[2])
    parser.add_argument("--trees", type=int, default=ISSUE_SIZE[3])
    parser.add_argument("--large", "--issue-scale", dest="issue_scale", action="store_true",
                        help="1,000,000 rows x 28 features, 8 sites (issue 28's "
                             "measurement; issue 37's goal there: at most 1.3x)")
    parser.add_argument("--skip-value", action="store_true",
                        help="no heterogeneous-sites comparison (part 2)")
    parser.add_argument("--skip-masked", action="store_true",
                        help="no secure-aggregation measurement (part 3)")
    parser.add_argument("--per-site", action="store_true",
                        help="also time the fit with one histogram pass per site (as on "
                             "Dask and at site services; in process the sites' rows pool)")
    parser.add_argument("--discrete", type=int, default=0, metavar="N",
                        help="the last N features integer codes of 2 to 20 values (a "
                             "masked sum then sends a node's cells a row can be in only)")
    add_options(parser)
    args = parser.parse_args()
    if args.issue_scale:
        args.rows, args.features, args.sites = LARGE_SIZE[:3]
    if min(size(args)) < 1:
        parser.error(f"--rows, --features, --sites and --trees must be at least 1, "
                     f"got {size(args)}")
    with pinned_threads(args.threads):
        goals = [same_model(args)]
        if not args.skip_value:
            heterogeneous_value(args)
        if not args.skip_masked:
            goals += masked_cost(args)
    print_goals(goals, args.repeat, args.threads)


if __name__ == "__main__":
    main()
