"""Dropout recovery cannot be turned against a site (issue 27, finding 4).

Replayed as a modified client would send it: a relay in the analyst's
process rewrites and adds ``fit.step`` messages of a fit that is running
against three ``skfed site serve`` processes requiring secure aggregation and
differential privacy. The attack of the finding (one round, the round again
at the same model, and a recovery for each pair of sites) gave site a's exact
update; a site now keeps only the vector it released (clipped, noised), never
masks it again under differential privacy, answers a model once, and refuses
a replayed exchange, each refusal in its audit log with its rule.
"""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from sklearn.datasets import load_diabetes  # noqa: E402

from skfed import FederatedDataset, FedLasso  # noqa: E402
from skfed.deploy import make_certificates  # noqa: E402
from skfed.privacy import DifferentialPrivacy, SecureAggregation  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.policy import load_config  # noqa: E402
from skfed.sites.transport import SiteServer  # noqa: E402
from skfed.solvers import FedAvg  # noqa: E402

from ._sites import SITES, site_config, start_site, stop_sites  # noqa: E402

CONSORTIUM = 'consortium = ["hospital-a", "hospital-b", "hospital-c"]'
BOTH = f'require = ["secure_aggregation", "differential_privacy"]\n{CONSORTIUM}'


def _frames():
    frame = load_diabetes(as_frame=True).frame
    return [frame.iloc[k::3].reset_index(drop=True) for k in range(3)]


def _local_rows():
    """The sites' rows in this process: ``(X, y, site of each row)``."""
    frames = _frames()
    X = pd.concat([f.drop(columns="target") for f in frames], ignore_index=True)
    y = pd.concat([f["target"] for f in frames], ignore_index=True).to_numpy()
    return X, y, np.repeat(list(SITES), [len(f) for f in frames])


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("recovery-certs"), list(SITES))


def _write_sites(root, certs, policy):
    folders = {}
    for name, frame in zip(SITES, _frames()):
        folder = root / name
        folder.mkdir()
        frame.to_csv(folder / "visits.csv", index=False)
        folders[name] = site_config(folder, name, certs=certs,
                                    datasets={"visits": ("visits.csv", None)}, policy=policy)
    return folders


@pytest.fixture(scope="module")
def protected(tmp_path_factory, certs):
    """Three ``skfed site serve`` processes requiring both protections."""
    root = tmp_path_factory.mktemp("protected")
    configs = _write_sites(root, certs, f"min_rows = 10\n{BOTH}\nepsilon_budget = 1000.0")
    processes, addresses = [], {}
    try:
        for name, config in configs.items():
            proc, port = start_site(config)
            processes.append(proc)
            addresses[name] = f"127.0.0.1:{port}"
        yield {"addresses": addresses, "folders": {n: c.parent for n, c in configs.items()}}
    finally:
        stop_sites(processes)


@pytest.fixture(params=["consortium", "voluntary"])
def masked_only(request, tmp_path, certs):
    """Three site services (in this process, over gRPC and mutual TLS) requiring secure
    aggregation over their consortium, or requiring nothing (the analyst masks anyway)."""
    policy = ('min_rows = 10\nrequire = ["secure_aggregation"]\n' + CONSORTIUM
              if request.param == "consortium" else "min_rows = 10")
    configs = _write_sites(tmp_path, certs, policy)
    servers = [SiteServer(load_config(config)).start() for config in configs.values()]
    try:
        yield {"addresses": {n: f"127.0.0.1:{s.port}" for n, s in zip(SITES, servers)},
               "folders": {n: c.parent for n, c in configs.items()},
               "consortium": request.param == "consortium"}
    finally:
        for server in servers:
            server.stop()


def _remote(sites, certs):
    return FederatedDataset.from_sites(sites["addresses"], dataset="visits", target="target",
                                       ca_file=certs.ca.cert, cert_file=certs.client.cert,
                                       key_file=certs.client.key)


def _dp_model(rounds=10, privacy=None, **params):
    privacy = privacy or DifferentialPrivacy(1.0, clip_norm=50.0, delta=1e-6)
    return FedLasso(alpha=0.5, solver=FedAvg(client_lr=0.1), client_weighting="uniform",
                    max_rounds=rounds, tol=0, privacy=privacy, **params)


class _Stop(Exception):
    """Ends the fit once the relay has made its attempt (carries what came back)."""

    def __init__(self, found):
        super().__init__("the relay's attempt is over")
        self.found = found


def _relay(monkeypatch, executor_cls, attempt):
    """The analyst's executor as a relay: at the fit's first round, ``attempt(run, solver,
    jobs)`` sends what it wants (``run(jobs)``: the replies of one batch of ``fit.step``
    messages) and the fit stops with what it found (:class:`_Stop`)."""
    original = executor_cls.run_round

    def run_round(self, solver, rnd, jobs, *, retry=False):
        if not any(isinstance(m, dict) and m.get("kind") == "round" for _, m, _ in jobs):
            return original(self, solver, rnd, jobs, retry=retry)

        def run(batch):
            replies, failures = original(self, solver, rnd, batch, retry=False)
            assert not failures, failures
            return replies

        raise _Stop(attempt(run, solver, jobs))

    monkeypatch.setattr(executor_cls, "run_round", run_round)


def _site_executor():
    from skfed.sites.remote import SiteServiceExecutor

    return SiteServiceExecutor


def _remask(jobs, pair, exchange, coefficient=1.0):
    """The recovery messages for ``pair``: the round again, masked among those sites."""
    return [(j, dict(m, kind="remask", exchange=exchange, parties=tuple(pair),
                     coefficients={f: coefficient for f in m["coefficients"]}), seed)
            for j, m, seed in jobs if j in pair]


def _renumbered(jobs, exchange, **inner):
    """The same round again under a fresh exchange number (``inner``: changed fields)."""
    return [(j, dict(m, exchange=exchange, inner=dict(m["inner"], **inner)), seed)
            for j, m, seed in jobs]


def _finding_4(run, solver, jobs):
    """The finding's attack: a round, then for each pair of sites the round again at the
    same model and a recovery for that pair; per pair, its decoded sum or the refusal."""
    exchange = max(m["exchange"] for _, m, _ in jobs) + 100
    found = {"share_std": solver.share_std_}
    run(jobs)
    for k, pair in enumerate([(0, 1), (0, 2), (1, 2)]):
        try:
            if k:
                exchange += 1
                run(_renumbered(jobs, exchange))
            exchange += 1
            replies = run(_remask(jobs, pair, exchange))
            found[pair] = solver._sums([replies[j] for j in pair])
        except SiteRefusal as refusal:
            found[pair] = refusal
    return found


def _exact_first_updates(monkeypatch):
    """Each site's reply to the first round, in this process on the same rows (the model
    is zero in both homes): ``{client: reply}``, filled by the fit that follows."""
    replies, original = [], FedAvg.client_update

    def recording(self, client, state, message, rng):
        reply, state = original(self, client, state, message, rng)
        replies.append(reply)
        return reply, state

    monkeypatch.setattr(FedAvg, "client_update", recording)
    X, y, sites = _local_rows()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _dp_model(rounds=1, executor="sequential").fit(X, y, clients=sites)
    monkeypatch.undo()
    return {j: np.concatenate([np.ravel(replies[j][f]) for f in ("dw", "delta")])
            for j in range(3)}


def _refusals(sites, rule):
    lines = []
    for folder in sites["folders"].values():
        lines += [line for line in read_audit(folder / "audit.jsonl")
                  if line["operation"] == "fit.step" and line["outcome"] == "refused"
                  and line.get("rule") == rule]
    return lines


def _attempt(monkeypatch, sites, certs, attempt, model=_dp_model):
    _relay(monkeypatch, _site_executor(), attempt)
    data = _remote(sites, certs)
    try:
        with pytest.raises(_Stop) as stop, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model().fit(data)
    finally:
        data.close()
        monkeypatch.undo()
    return stop.value.found


# --- finding 4 ---------------------------------------------------------------------
def test_recovery_of_pairs_does_not_isolate_a_site_exact_update(monkeypatch, protected, certs):
    exact = _exact_first_updates(monkeypatch)
    found = _attempt(monkeypatch, protected, certs, _finding_4)
    pairs = [(0, 1), (0, 2), (1, 2)]
    refused = [found[p] for p in pairs if isinstance(found[p], SiteRefusal)]
    if refused:  # the recoveries are refused, each with its rule, in the audit log
        for refusal in refused:  # (a consortium site masks over all of it, or not at all)
            assert refusal.rule in ("consortium", "differential_privacy", "require")
            assert any(line["reason"] in str(refusal)
                       for line in _refusals(protected, refusal.rule))
    else:  # what came back is site a's released vector: its noise is still on it
        total = {f: found[(0, 1)][f] + found[(0, 2)][f] - found[(1, 2)][f] for f in
                 found[(0, 1)]}
        a = np.concatenate([np.ravel(total[f]) / 2 for f in ("dw", "delta")])
        error = np.sqrt(np.mean((a - exact[0]) ** 2))
        assert error > 0.3 * found["share_std"], (error, found["share_std"])


def test_a_noised_reply_is_never_masked_again(monkeypatch, protected, certs):
    def recover(run, solver, jobs):
        run(jobs)
        return run(_remask(jobs, (0, 1), max(m["exchange"] for _, m, _ in jobs) + 1))

    with pytest.raises(SiteRefusal, match="fewer than every site of the consortium") as info:
        _attempt(monkeypatch, protected, certs, recover)
    assert info.value.rule == "consortium"
    assert any("consortium" in line["reason"] for line in _refusals(protected, "consortium"))


@pytest.mark.parametrize("renumber", [False, True], ids=["same", "renumbered"])
def test_a_second_round_at_the_same_model_is_refused(monkeypatch, protected, certs, renumber):
    def again(run, solver, jobs):
        run(jobs)
        fields = {"round": 7} if renumber else {}  # a new round counter, the same model
        return run(_renumbered(jobs, max(m["exchange"] for _, m, _ in jobs) + 1, **fields))

    with pytest.raises(SiteRefusal, match="second round at a model") as info:
        _attempt(monkeypatch, protected, certs, again)
    assert info.value.rule == "differential_privacy"
    assert any("second round" in line["reason"]
               for line in _refusals(protected, "differential_privacy"))


def test_a_replayed_round_is_refused(monkeypatch, protected, certs):
    def replay(run, solver, jobs):
        run(jobs)
        return run(jobs)  # the very same messages: the same exchange number

    with pytest.raises(SiteRefusal, match="replayed exchange") as info:
        _attempt(monkeypatch, protected, certs, replay)
    assert info.value.rule == "require"
    assert any("replayed" in line["reason"] for line in _refusals(protected, "require"))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_an_honest_private_fit_passes_every_rule(protected, certs):
    """Issue 35, finding 2: a DP fit through services runs to its end with its monitor
    noised; each site's ledger lists every kind of step it charged (the rounds and the
    planned monitoring passes), and its audit names each step's kind."""
    charged_before = {n: _charges(protected, n) for n in SITES}
    data = _remote(protected, certs)
    try:
        est = _dp_model(rounds=5).fit(data)
    finally:
        data.close()
    assert est.n_iter_ == 5 and np.all(np.isfinite(est.coef_))
    # the monitor's objective is the noised one: its stationarity is not measured
    assert np.all(np.isnan(est.history_["stationarity"]))
    for name in SITES:
        new = _charges(protected, name)[len(charged_before[name]):]
        assert [c["rounds"] for c in new] == [{"round": 5, "monitor": 2}]
        kinds = {line.get("kind") for line in read_audit(
            protected["folders"][name] / "audit.jsonl") if line["outcome"] == "ok"}
        assert {"fit.step:round", "fit.step:monitor"} <= kinds


def _charges(sites, name):
    path = sites["folders"][name] / "privacy-ledger.json"
    if not path.exists():
        return []
    return json.loads(path.read_text()).get("visits", {}).get("charges", [])


def _monitor_passes(theta, jobs, exchange):
    """A relay's own monitoring pass at ``theta`` over the round's sites (unweighted, as
    under differential privacy), asking the sites for no noise."""
    return [(j, {"kind": "monitor", "theta": theta, "weight": 1.0, "clip": m["clip"],
                 "noise_std": 0.0, "noise_seed": 0, "exchange": exchange,
                 "parties": m["parties"]}, seed) for j, m, seed in jobs]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_relays_monitor_passes_are_noised_and_charged(monkeypatch, protected, certs):
    """Issue 35, finding 2: a relay's own monitoring passes in a DP session (at a model
    it chooses, asking for no noise) come back noised by the sites, and past the passes
    the fit planned and the sites charged they are refused."""
    def monitor(run, solver, jobs):
        exchange = max(m["exchange"] for _, m, _ in jobs) + 1
        theta = np.zeros(solver.problem_.layout.size)
        found = {"share_std": solver.share_std_, "sums": []}
        for _ in range(12):
            exchange += 1
            try:
                replies = run(_monitor_passes(theta, jobs, exchange))
            except SiteRefusal as refusal:
                found["refusal"] = refusal
                break
            sums = solver._sums([replies[j] for j in range(3)])
            found["sums"].append(np.concatenate([np.ravel(sums[f]) for f in ("value",
                                                                              "grad")]))
        return found

    privacy = DifferentialPrivacy(1.0, clip_norm=50.0, delta=1e-6, monitor="every")
    found = _attempt(monkeypatch, protected, certs, monitor,
                     model=lambda: _dp_model(rounds=4, privacy=privacy))
    # planned: 1 + 4 monitoring passes; the fit's own first one is spent: 4 answered
    assert len(found["sums"]) == 4
    assert found["refusal"].rule == "epsilon_budget"
    # the same model each time: the answers differ by the sites' noise (its spread
    # is the three shares', 11 coordinates: far from 0 but for ~1e-9 of draws)
    differences = np.diff(np.array(found["sums"]), axis=0)
    total_std = found["share_std"] * np.sqrt(3)
    assert np.all(np.linalg.norm(differences, axis=1) > 0.3 * total_std * np.sqrt(11))


def test_a_pass_of_sums_in_a_dp_session_is_refused(monkeypatch, protected, certs):
    """Issue 35, finding 2: a pass of sums (an inference pass) in a DP session would carry
    no noise: each site refuses it before it reads a row."""
    from skfed.federation.smoothness import client_curvature_matvec

    def sums(run, solver, jobs):
        exchange = max(m["exchange"] for _, m, _ in jobs) + 1
        theta = np.zeros(solver.problem_.layout.size)
        return run([(j, {"kind": "sums", "fn": client_curvature_matvec, "args": [theta],
                         "coefficient": 1.0, "exchange": exchange,
                         "parties": m["parties"]}, seed) for j, m, seed in jobs])

    with pytest.raises(SiteRefusal, match="pass in a differentially private") as info:
        _attempt(monkeypatch, protected, certs, sums)
    assert info.value.rule == "differential_privacy"


# --- the same code in this process -------------------------------------------------
def test_in_process_a_recovery_masks_the_released_noised_vector(monkeypatch):
    """In this process too (the same client code as at a site), a recovery sends what the
    round released: the noise on it is the site's one draw, not a fresh one, and nothing
    from before the noise."""
    from skfed.executors.base import Executor

    exact = _exact_first_updates(monkeypatch)

    def recover_twice(run, solver, jobs):
        exchange = max(m["exchange"] for _, m, _ in jobs)
        run(jobs)
        sums = [solver._sums([r[j] for j in (0, 1)]) for r in (
            run(_remask(jobs, (0, 1), exchange + 1)), run(_remask(jobs, (0, 1), exchange + 2)))]
        return sums, solver.share_std_

    _relay(monkeypatch, Executor, recover_twice)
    X, y, sites = _local_rows()
    with pytest.raises(_Stop) as stop, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _dp_model(executor="sequential").fit(X, y, clients=sites)
    (first, second), share_std = stop.value.found
    flat = [np.concatenate([np.ravel(s[f]) for f in ("dw", "delta")]) for s in (first, second)]
    np.testing.assert_allclose(flat[0], flat[1], rtol=0, atol=1e-8)  # the same draw
    noise = flat[0] - (exact[0] + exact[1])
    assert np.sqrt(np.mean(noise ** 2)) > 0.3 * share_std * np.sqrt(2)


# --- secure aggregation without noise ------------------------------------------------
def test_without_noise_a_repeated_model_is_answered_but_not_recovered(monkeypatch,
                                                                       masked_only, certs):
    """Newton evaluates its point again when its step vanishes: a repeated model is
    answered. A site requiring secure aggregation masks over its whole consortium only,
    so it recovers nothing (a lost site ends the fit); a site masking voluntarily
    recovers a model's round at most once (recoveries of one model for different pairs
    would give each site's reply), and never for fewer than two sites."""
    found = {}

    def attempt(run, solver, jobs):
        exchange = max(m["exchange"] for _, m, _ in jobs)
        run(jobs)
        found["recovered"] = run(_remask(jobs, (0, 1), exchange + 1, coefficient=0.5))
        for name, batch in [("twice", _remask(jobs, (0, 2), exchange + 2, coefficient=0.5)),
                            ("again", _renumbered(jobs, exchange + 3)),
                            ("after_repeat", _remask(jobs, (0, 2), exchange + 4, 0.5)),
                            ("alone", _remask(jobs, (0,), exchange + 5))]:
            try:
                found[name] = run(batch)
            except SiteRefusal as refusal:
                found[name] = refusal
        return found

    def model():  # Newton: the first-order solvers' per-site constants are refused here
        return FedLasso(alpha=0.5, solver="newton", client_weighting="uniform",
                        max_rounds=3, privacy=SecureAggregation())

    if masked_only["consortium"]:  # every recovery is for fewer sites: refused
        def attempt_all(run, solver, jobs):
            try:
                attempt(run, solver, jobs)
            except SiteRefusal as refusal:
                found["recovered"] = refusal
            return found

        _attempt(monkeypatch, masked_only, certs, attempt_all, model=model)
        assert found["recovered"].rule == "consortium"
        return
    _attempt(monkeypatch, masked_only, certs, attempt, model=model)
    assert set(found["recovered"]) == {0, 1}  # an honest recovery still works
    assert set(found["again"]) == {0, 1, 2}  # the repeated model is answered
    assert isinstance(found["twice"], SiteRefusal) and found["twice"].rule == "require"
    after = found["after_repeat"]
    assert isinstance(after, SiteRefusal) and after.rule == "require"
    assert "already answered" in str(after)
    alone = found["alone"]
    assert isinstance(alone, SiteRefusal) and alone.rule == "min_sites"
    assert any("already answered" in line["reason"]
               for line in _refusals(masked_only, "require"))
