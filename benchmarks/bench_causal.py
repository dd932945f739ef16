"""NHEFS over four sites: FedIPW and FedAIPW against the pooled computations' time.

The "What If" book's weight-gain analysis (Hernan & Robins, ch. 12; the 1,566
complete cases of ``causaldata.nhefs_complete``), its propensity model with the
quadratic terms (``tests/test_causal_nhefs.py``'s design), the rows split round
robin into four sites. Timed, interleaved (medians of ``--repeat`` runs, BLAS and
OpenMP threads pinned, ``benchmarks/_measure.py``):

- **skfed, in process**: ``FedIPW()`` (ATE; the stacked Newton and one sandwich
  pass, ``balance=False``), the same with the balance table and the overlap
  counts (the default), and ``FedAIPW()`` (a linear outcome model per arm);
- **the pooled point estimates** (the floor skfed's fit is divided by):
  statsmodels' logistic fit (Newton) and the Hajek weighted means (numpy), and
  for AIPW the logistic fit, an OLS fit per arm and the augmented means;
- **the pooled sandwich**: delicatessen's ``MEstimator`` on ``ee_ipw``
  (``weight_type="hajek"``) and on ``ee_aipw`` (its fully interacted outcome
  model: one model per arm), exact derivatives, started at statsmodels' fits
  (timed with them: the squared columns' scales defeat its solver from zeros);
  and statsmodels' weighted ``GEE``, the book's interval with the score fixed;
- with ``--services``, the same two fits through four real ``skfed site serve``
  processes on 127.0.0.1 (gRPC over mutual TLS), connected and warmed once
  before the timing. Their policy is ``min_rows = 1`` (``--min-rows``): the book's
  model crosses binary columns whose cells hold single patients (race x education
  level 4: 9 rows pooled, 1 at site 0; education 4 x inactive: 7 pooled, 1 at
  site 0), so a site with any dominance rule refuses the propensity model's
  information matrix (rule ``dominance``), at any split (it is 9 rows pooled).
  With ``--secure-aggregation`` the fits send every sum masked (the server
  learns only the sums over sites; no site releases a sum of its own, so its
  dominance rule has nothing to check) and the services take ``min_rows = 10``.

Then the largest differences from the references: the effect and the stacked
parameters (relative to delicatessen's), the variance (relative), the book's
fixed-score interval against the GEE's, and the service fits against the
in-process ones.

Run: python benchmarks/bench_causal.py [--repeat 5] [--threads 1] [--services]
     [--secure-aggregation] [--min-rows N]
"""

import argparse
import os
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import statsmodels.api as sm
from causaldata import nhefs_complete
from delicatessen import MEstimator
from delicatessen.estimating_equations import ee_aipw, ee_ipw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _measure import add_options, measure, pinned_threads  # noqa: E402
from skfed.causal import FedAIPW, FedIPW  # noqa: E402
from tests.test_causal_nhefs import nhefs_design  # noqa: E402

N_SITES = 4
SITES = tuple(f"site-{k}" for k in range(N_SITES))


def nhefs():
    frame = nhefs_complete.load_pandas().data
    X = nhefs_design(frame)
    return X, frame.qsmk.to_numpy(float), frame.wt82_71.to_numpy(float)


def _logit(a, W):
    return sm.Logit(a, W).fit(disp=0, method="newton", tol=1e-12).params


def pooled_ipw_point(W, a, y):
    """statsmodels' logistic fit and the Hajek means: ``[mu1, mu0]``."""
    e = 1 / (1 + np.exp(-W @ _logit(a, W)))
    w1, w0 = a / e, (1 - a) / (1 - e)
    return np.array([w1 @ y / w1.sum(), w0 @ y / w0.sum()])


def pooled_aipw_point(W, a, y):
    """The logistic fit, an OLS fit per arm, the augmented means: ``[mu1, mu0]``."""
    e = 1 / (1 + np.exp(-W @ _logit(a, W)))
    mu = []
    for arm, p in ((1, e), (0, 1 - e)):
        rows = a == arm
        m = W @ sm.OLS(y[rows], W[rows]).fit().params
        mu.append(np.mean(m + rows * (y - m) / p))
    return np.array(mu)


def _mestimate(psi, init):
    m = MEstimator(psi, init=list(init))
    m.estimate(solver="lm", tolerance=1e-13, deriv_method="exact")
    return m


def pooled_ipw_sandwich(W, a, y):
    """delicatessen's ``ee_ipw`` (Hajek): ``[ATE, mu1, mu0, beta]`` and its variance."""
    return _mestimate(lambda theta: ee_ipw(theta, y, a, W, weight_type="hajek"),
                      [3.0, 4.0, 2.0, *_logit(a, W)])


def pooled_aipw_sandwich(W, a, y):
    """delicatessen's ``ee_aipw`` with a fully interacted outcome model (one model per
    arm): ``[ATE, mu1, mu0, beta, gamma0, gamma1]``."""
    full = np.hstack([(1 - a)[:, None] * W, a[:, None] * W])
    X1, X0 = np.hstack([0 * W, W]), np.hstack([W, 0 * W])
    gammas = [sm.OLS(y[a == arm], W[a == arm]).fit().params for arm in (0, 1)]
    return _mestimate(lambda theta: ee_aipw(theta, y, a, W, full, X1, X0),
                      [3.0, 4.0, 2.0, *_logit(a, W), *gammas[0], *gammas[1]])


def rescaled(sandwich, W, a, y):
    """``sandwich`` (one of the two above) on the columns divided by their largest
    absolute values, its coefficients and variance mapped back: the same M-estimation,
    reparametrised. The book's squared columns (wt71^2 up to 2e4) make the design's
    condition number 1.4e5; delicatessen's bread then loses digits the scaled one keeps
    (the AIPW stack's variances 9e-6 apart; 2e-11 from skfed's once scaled).

    Returns ``(theta, variance)`` on the original columns' scale."""
    scale = np.abs(W).max(axis=0)
    m = sandwich(W / scale, a, y)
    blocks = (len(m.theta) - 3) // W.shape[1]
    back = np.concatenate([np.ones(3), *[1 / scale] * blocks])
    return m.theta * back, m.variance * np.outer(back, back)


def pooled_gee(a, y, weights):
    """The book's interval: the weighted regression's sandwich, the weights given."""
    return sm.GEE(y, sm.add_constant(a), groups=np.arange(len(a)), weights=weights).fit()


@contextmanager
def services(frame, min_rows):
    """Four ``skfed site serve`` processes, site ``k`` serving ``frame``'s rows
    ``k::4``; yields ``FederatedDataset.from_sites`` of them."""
    from bench_site_service import start_federation

    from skfed import FederatedDataset
    from skfed.deploy import make_certificates
    from tests._sites import site_config, stop_sites

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        certs = make_certificates(root / "certs", list(SITES))
        configs = []
        for k, name in enumerate(SITES):
            folder = root / name
            folder.mkdir()
            frame.iloc[k::N_SITES].to_csv(folder / "nhefs.csv", index=False)
            configs.append(site_config(folder, name, certs=certs,
                                       policy=f"min_rows = {min_rows}",
                                       datasets={"nhefs": ("nhefs.csv", None)}))
        processes, addresses = start_federation(SITES, configs)
        try:
            data = FederatedDataset.from_sites(addresses, dataset="nhefs",
                                               ca_file=certs.ca.cert,
                                               cert_file=certs.client.cert,
                                               key_file=certs.client.key)
            try:
                yield data
            finally:
                data.close()
        finally:
            stop_sites(processes)


def timed_calls(X, a, y, remote=None, privacy=None):
    """The callables to time, by name (each returns what the checks read)."""
    W = np.column_stack([np.ones(len(a)), X.to_numpy()])
    site = np.arange(len(a)) % N_SITES
    columns = list(X.columns)
    e = 1 / (1 + np.exp(-W @ _logit(a, W)))  # the GEE's weights, given (not timed)
    weights = np.where(a == 1, 1 / e, 1 / (1 - e))
    calls = {
        "ipw": lambda: FedIPW(balance=False).fit(X, a, y, clients=site),
        "ipw+balance": lambda: FedIPW().fit(X, a, y, clients=site),
        "aipw": lambda: FedAIPW(balance=False).fit(X, a, y, clients=site),
        "sm ipw": lambda: pooled_ipw_point(W, a, y),
        "sm aipw": lambda: pooled_aipw_point(W, a, y),
        "deli ipw": lambda: pooled_ipw_sandwich(W, a, y),
        "deli aipw": lambda: pooled_aipw_sandwich(W, a, y),
        "gee": lambda: pooled_gee(a, y, weights),
    }
    if remote is not None:
        fit = dict(treatment="qsmk", outcome="wt82_71", covariates=columns)
        options = dict(balance=False, privacy=privacy)
        calls["ipw services"] = lambda: FedIPW(**options).fit(remote, **fit)
        calls["aipw services"] = lambda: FedAIPW(**options).fit(remote, **fit)
    return calls, W


def _rel(ours, theirs):
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    return float(np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-300)))


def _scaled(ours, theirs):
    """The covariances' largest difference over the reference's SEs' product: a
    covariance near 0 between two squared columns' coefficients (ill-conditioned; the
    elementwise relative difference reaches 3e-5 there) is compared on its scale."""
    se = np.sqrt(np.diag(theirs))
    return float(np.max(np.abs(ours - theirs) / np.outer(se, se)))


def _against(name, est, theta, variance, order):
    """One estimator's stacked parameters and sandwich against a reference's
    (``order``: the reference's entries in skfed's order)."""
    V = variance[np.ix_(order, order)]
    return {f"{name} stacked parameters": _rel(est.params_, theta[order]),
            f"{name} stacked variances (diagonal)": _rel(np.diag(est.cov_params_), np.diag(V)),
            f"{name} covariances / (SE x SE)": _scaled(est.cov_params_, V),
            f"{name} effect's variance": _rel(est.std_err_ ** 2, variance[0, 0])}


def differences(t, W, a, y):
    """The largest relative differences of skfed's numbers from the pooled references."""
    ipw, aipw = t["ipw"].result, t["aipw"].result
    q = W.shape[1]
    # delicatessen's ee_ipw: [ATE, mu1, mu0, beta]; its ee_aipw: [ATE, mu1, mu0, beta,
    # gamma0, gamma1]; skfed's: [mu1, mu0, beta (, gamma1, gamma0)]
    at_ipw = list(range(1, 3 + q))
    at_aipw = [1, 2, *range(3, 3 + q), *range(3 + 2 * q, 3 + 3 * q), *range(3 + q, 3 + 2 * q)]
    deli = {"IPW": t["deli ipw"].result, "AIPW": t["deli aipw"].result}
    out = {"IPW means vs statsmodels + numpy": _rel(ipw.params_[:2], t["sm ipw"].result),
           "AIPW means vs statsmodels + numpy": _rel(aipw.params_[:2], t["sm aipw"].result),
           "IPW fixed-score interval vs statsmodels GEE": _rel(
               ipw.conf_int(fixed_score=True), t["gee"].result.conf_int()[1])}
    for name, est, order, sandwich in (("IPW", ipw, at_ipw, pooled_ipw_sandwich),
                                       ("AIPW", aipw, at_aipw, pooled_aipw_sandwich)):
        out[f"{name} effect vs delicatessen"] = _rel(est.effect_, deli[name].theta[0])
        raw = _against(name, est, deli[name].theta, deli[name].variance, order)
        out.update({f"{k} vs delicatessen": v for k, v in raw.items()})
        scaled = _against(name, est, *rescaled(sandwich, W, a, y), order)
        out.update({f"{k} vs delicatessen, columns scaled": v for k, v in scaled.items()})
    for name, local in (("ipw", ipw), ("aipw", aipw)):
        if f"{name} services" in t:
            remote = t[f"{name} services"].result
            out[f"{name.upper()} at services vs in process: parameters"] = _rel(
                remote.params_, local.params_)
            out[f"{name.upper()} at services vs in process: variances (diagonal)"] = _rel(
                np.diag(remote.cov_params_), np.diag(local.cov_params_))
            out[f"{name.upper()} at services vs in process: covariances / (SE x SE)"] = \
                _scaled(remote.cov_params_, local.cov_params_)
    return out


def print_tables(t, diffs, ipw, aipw):
    rows = [("FedIPW ATE (sandwich), 4 sites in process", "ipw", "sm ipw", "deli ipw"),
            ("FedIPW ATE + balance table and overlap counts", "ipw+balance", "sm ipw",
             "deli ipw"),
            ("FedAIPW ATE (linear outcome model per arm)", "aipw", "sm aipw", "deli aipw"),
            ("FedIPW ATE, 4 site services (gRPC, mTLS)", "ipw services", "sm ipw",
             "deli ipw"),
            ("FedAIPW ATE, 4 site services (gRPC, mTLS)", "aipw services", "sm aipw",
             "deli aipw")]
    print("| skfed fit | seconds (median, min-max) | pooled point estimate (statsmodels) "
          "| ratio | pooled sandwich (delicatessen) | ratio |")
    print("|---|---|---|---|---|---|")
    for what, ours, point, sandwich in rows:
        if ours not in t:
            continue
        fed = t[ours]
        print(f"| {what} | {fed} | {t[point]} | {fed.median / t[point].median:.2f}x "
              f"| {t[sandwich]} | {fed.median / t[sandwich].median:.3f}x |")
    for name, est in (("FedIPW", ipw), ("FedAIPW", aipw)):
        ledger = est.ledger_
        print(f"\n{name}: effect {est.effect_:.4f} kg, 95% CI {np.round(est.conf_int(), 3)}"
              f" (SE {est.std_err_:.4f}); {ledger['rounds']['rounds']} Newton passes "
              f"({ledger['rounds']['bytes'] / 1e3:.0f} kB) and "
              f"{ledger['inference']['rounds']} sandwich pass "
              f"({ledger['inference']['bytes'] / 1e3:.0f} kB)")
    print(f"FedIPW with the score held fixed (the book's interval): "
          f"{np.round(ipw.conf_int(fixed_score=True), 3)}")
    print("\nlargest relative differences from the references:")
    for what, value in diffs.items():
        print(f"  {what}: {value:.1e}")
    raw = [k for k in diffs if "varian" in k and k.endswith("vs delicatessen")
           or "covariances" in k and k.endswith("vs delicatessen")]
    print(f"largest of all: {max(diffs.values()):.1e}; leaving out the raw columns' "
          f"variances (ill-conditioned): "
          f"{max(v for k, v in diffs.items() if k not in raw):.1e}")


def run(args, remote=None):
    from skfed.privacy import SecureAggregation

    X, a, y = nhefs()
    calls, W = timed_calls(X, a, y, remote,
                           SecureAggregation() if args.secure_aggregation else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the extreme-weight counts
        if remote is not None:  # connect and warm the services before the timing
            calls["ipw services"]()
        t = measure(calls, args.repeat)
    diffs = differences(t, W, a, y)
    print(f"# NHEFS (What If, ch. 12): {len(a)} rows, {W.shape[1]} propensity "
          f"columns (intercept included), {N_SITES} sites round robin; median of "
          f"{args.repeat} interleaved runs, {args.threads or 'default'} BLAS thread(s), "
          f"{os.cpu_count()} cores, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if remote is not None:
        print(f"site services: min_rows = {args.min_rows}, the sums "
              f"{'masked (secure aggregation)' if args.secure_aggregation else 'plain'}")
    print()
    print_tables(t, diffs, t["ipw"].result, t["aipw"].result)
    print(f"statsmodels' weighted GEE (the book's interval, pooled): {t['gee']}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_options(parser)
    parser.add_argument("--services", action="store_true",
                        help="also fit through four real site services on 127.0.0.1")
    parser.add_argument("--secure-aggregation", action="store_true",
                        help="the service fits send their sums masked (with --services)")
    parser.add_argument("--min-rows", type=int, default=None,
                        help="the services' min_rows (their dominance rule's count; default "
                             "1, and 10 with --secure-aggregation: with plain sums any "
                             "larger refuses the book's model, see the docstring)")
    args = parser.parse_args(argv)
    with pinned_threads(args.threads):
        if not args.services:
            run(args)
            return
        X, a, y = nhefs()
        frame = X.assign(qsmk=a, wt82_71=y)
        args.min_rows = args.min_rows or (10 if args.secure_aggregation else 1)
        with services(frame, args.min_rows) as remote:
            run(args, remote)


if __name__ == "__main__":
    main()
