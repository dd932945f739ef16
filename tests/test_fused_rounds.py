"""One request per site per round through site services: the monitor fused into the step.

Through site services, a round's ``fit.step`` request carries the ``fit.monitor``
request of the model the step starts from (the model the last round ended on),
so a monitored round asks each site once instead of twice. The history is the
one the separate monitoring passes give, bit for bit (objective, stationarity,
the monitor's bytes), and the fitted model too. At the site the fused monitor is
the ``fit.monitor`` operation under every rule of its own request: a crafted
fused request that a separate ``fit.monitor`` would be refused is refused (the
dominance rule at a model an attacker chose, an operation the policy does not
serve, arguments of the wrong form, a masked step's monitor in the clear), and
the step it rode on does not run.
"""

import functools
import hashlib
import warnings
from collections import Counter
from contextlib import contextmanager, nullcontext
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from skfed import FedLasso  # noqa: E402
from skfed.data.site import Targets  # noqa: E402
from skfed.datafits import Quadratic  # noqa: E402
from skfed.datafits.base import ClientObjective  # noqa: E402
from skfed.federation import dominance  # noqa: E402
from skfed.deploy import make_certificates  # noqa: E402
from skfed.federation.layout import Layout  # noqa: E402
from skfed.federation.operations import Refused  # noqa: E402
from skfed.federation.operations import default_operations  # noqa: E402
from skfed.federation.problem import FederatedProblem  # noqa: E402
from skfed.privacy import SecureAggregation  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.codec import encode  # noqa: E402
from skfed.sites.fit_sessions import FitSessions  # noqa: E402
from skfed.sites.monitor_reuse import MonitorTap, Reusing  # noqa: E402
from skfed.sites.policy import load_config  # noqa: E402
from skfed.sites.remote import SiteServiceExecutor  # noqa: E402
from skfed.sites.transport import SiteConnection, SiteServer  # noqa: E402
from skfed.solvers import FedAvg  # noqa: E402

from ._sites import services_of, site_config  # noqa: E402

N_FEATURES = 5


def _frames(seed=0, n_sites=3, n_rows=60):
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(n_sites):
        X = rng.normal(size=(n_rows, N_FEATURES))
        frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(N_FEATURES)])
        frame["y"] = X @ np.array([1.0, -2.0, 0.0, 0.0, 0.5]) + rng.normal(size=n_rows)
        frames.append(frame)
    return frames


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    frames = _frames()
    with services_of(tmp_path_factory.mktemp("fused"), frames, target="y") as data:
        yield data, frames


def _counted(data):
    """Count the requests of each operation the analyst's connections send."""
    calls = Counter()
    for conn in data._backend.connections:
        call = conn.call

        def counting(op, _call=call, **args):
            calls[op] += 1
            return _call(op, **args)
        conn.call = counting
    return calls


@contextmanager
def _restored(data):
    calls = [conn.call for conn in data._backend.connections]
    try:
        yield _counted(data)
    finally:
        for conn, call in zip(data._backend.connections, calls):
            conn.call = call


def _fit(data, monkeypatch, fused, **params):
    monkeypatch.setattr(SiteServiceExecutor, "fuses_monitor", fused)
    with warnings.catch_warnings(), _restored(data) as calls:
        warnings.simplefilter("ignore")
        est = FedLasso(alpha=0.05, **params).fit(data)
    return est, calls


@pytest.mark.parametrize("params", [
    dict(solver="fedavg", max_rounds=8, tol=0),
    dict(solver="fedavg", max_rounds=9, tol=0, monitor_every=3),
    dict(solver="dualfl", max_rounds=6, tol=0),  # client states kept at the sites
    dict(solver="fedavg", max_rounds=60, tol=0.2),  # the fused monitor stops the fit
])
def test_the_fused_history_is_the_separate_passes_bit_for_bit(federation, monkeypatch,
                                                             params):
    data, frames = federation
    fused, fused_calls = _fit(data, monkeypatch, True, **params)
    plain, plain_calls = _fit(data, monkeypatch, False, **params)
    assert fused.n_iter_ == plain.n_iter_
    if params["tol"]:
        assert fused.n_iter_ < params["max_rounds"]  # it stopped on a fused monitor
    np.testing.assert_array_equal(fused.coef_, plain.coef_)
    assert fused.intercept_ == plain.intercept_
    for key in ("objective", "stationarity", "bytes_up", "bytes_down", "nnz"):
        np.testing.assert_array_equal(fused.history_[key], plain.history_[key])
    mon_fused, mon_plain = (np.asarray(e.history_["monitor_bytes"]) for e in (fused, plain))
    last = -1 if params["tol"] else None  # a stopping round's step counts as monitoring
    np.testing.assert_array_equal(mon_fused[:last], mon_plain[:last])
    # one request per site and round: every monitored round's model but the last rides
    # the next round's steps (the start's and a polish are passes of their own); a fit
    # stopped by a fused monitor spends one more step (its reply unused) instead
    n_sites, rounds, every = len(frames), fused.n_iter_, params.get("monitor_every", 1)
    carried = rounds if params["tol"] else sum(r % every == 0 for r in range(1, rounds))
    assert carried >= 2
    assert plain_calls["fit.monitor"] - fused_calls["fit.monitor"] == carried * n_sites
    assert fused_calls["fit.step"] - plain_calls["fit.step"] == (params["tol"] > 0) * n_sites
    # and in process: the same numbers to round-off
    pooled = pd.concat(frames, ignore_index=True)
    site = np.repeat(np.arange(len(frames)), [len(f) for f in frames])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = FedLasso(alpha=0.05, **params).fit(pooled.drop(columns="y"), pooled["y"],
                                                   clients=site)
    assert local.n_iter_ == fused.n_iter_
    np.testing.assert_allclose(fused.coef_, local.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fused.history_["objective"], local.history_["objective"],
                               rtol=1e-12)


# --- a modified client's fused requests ---------------------------------------------------
SITE = "hospital-a"


def _outlier_frame(n_rows=40):
    """Rows with one outlier in ``z`` whose target is 0: at the zero model no sum is
    dominated by it, at a model with a large ``z`` coefficient the loss is that row's."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(size=(n_rows, 3)), columns=["x0", "x1", "z"])
    frame["y"] = frame["x0"] - frame["x1"] + rng.normal(size=n_rows)
    frame.loc[0, "z"], frame.loc[0, "y"] = 60.0, 0.0
    return frame


@pytest.fixture
def site(tmp_path):
    """A service for hospital-a (the outlier rows) under ``policy``: ``(connection,
    folder)``; stopped after."""
    certs = make_certificates(tmp_path / "certs", [SITE])
    servers, conns = [], []

    def start(policy="min_rows = 10"):
        folder = tmp_path / f"site{len(servers)}"
        folder.mkdir()
        _outlier_frame().to_csv(folder / "rows.csv", index=False)
        path = site_config(folder, SITE, certs=certs, datasets={"rows": ("rows.csv", None)},
                           policy=policy)
        servers.append(SiteServer(load_config(path)).start())
        conns.append(SiteConnection(SITE, f"127.0.0.1:{servers[-1].port}",
                                    ca_file=certs.ca.cert, cert_file=certs.client.cert,
                                    key_file=certs.client.key))
        return conns[-1], folder

    yield start
    for conn in conns:
        conn.close()
    for server in servers:
        server.stop()


def _solver():
    problem = FederatedProblem(Layout(1, 3), Quadratic(), None, weights=np.ones(1),
                               n_samples=np.array([40]),
                               lipschitz=[{"coef": 1.0, "intercept": 1.0, "joint": 1.0,
                                           "row": 1.0}])
    return FedAvg(client_lr=0.05).setup(problem)


def _open(conn):
    return conn.call("fit.open", dataset={"name": "rows", "target": "y"}, datafit=Quadratic(),
                     layout=Layout(1, 3), targets=Targets())


def _step(conn, session, solver=None, first=True, **extra):
    blob = np.frombuffer(encode(_solver() if solver is None else solver), dtype=np.uint8)
    args = dict(session=session, solver_digest=hashlib.sha256(blob).hexdigest(), client=0,
                seed=0, message={"w": np.zeros(4), "round": 0})
    args.update(extra)
    if first:
        args.update(solver=blob, state=None)
    return conn.call("fit.step", **args)


ATTACK = np.array([0.0, 0.0, 10.0, 0.0])  # the outlier's residual is then the loss


def test_an_honest_fused_step_answers_as_the_two_requests(site):
    conn, _ = site()
    session = _open(conn)
    honest = np.array([0.5, -0.5, 0.0, 0.1])
    fused = _step(conn, session, monitor={"theta": honest})
    value, grad = conn.call("fit.monitor", session=session, theta=honest)
    assert fused["monitor"][0] == value
    np.testing.assert_array_equal(fused["monitor"][1], grad)
    other = _open(conn)
    np.testing.assert_array_equal(_step(conn, other)["dw"], fused["reply"]["dw"])


def test_a_fused_monitor_cannot_escape_the_dominance_rule(site):
    conn, folder = site()
    session = _open(conn)
    with pytest.raises(SiteRefusal) as separate:  # today's separate monitor: refused
        conn.call("fit.monitor", session=session, theta=ATTACK)
    assert separate.value.rule == "dominance"
    with pytest.raises(SiteRefusal) as fused:  # riding an honest step: refused the same
        _step(conn, session, monitor={"theta": ATTACK})
    assert fused.value.rule == "dominance"
    line = [r for r in read_audit(folder / "audit.jsonl") if r["operation"] == "fit.step"][-1]
    assert line["outcome"] == "refused" and line["kind"] == "fit.step+fit.monitor"
    # the refusal was the monitor's: the same step alone is answered (its first time:
    # the refused request placed no state and received no solver)
    assert "dw" in _step(conn, session)


_NOT_SERVED = "min_rows = 10\noperations = [" + ", ".join(
    f'"{op}"' for op in default_operations() if op != "fit.monitor") + "]"


@pytest.mark.parametrize("policy, rule", [
    (_NOT_SERVED, "operations"),
    ('require = ["secure_aggregation"]\nconsortium = ["hospital-a", "b"]', "require")])
def test_a_fused_monitor_is_refused_where_a_separate_one_is(site, policy, rule):
    """The monitor not served, or protection required: the fused monitor is refused by
    the rule that refuses the separate request (and a step alone is still answered
    where steps are served in the clear)."""
    conn, _ = site(policy)
    session = _open(conn)
    with pytest.raises(SiteRefusal) as separate:
        conn.call("fit.monitor", session=session, theta=np.zeros(4))
    with pytest.raises(SiteRefusal) as fused:
        _step(conn, session, monitor={"theta": np.zeros(4)})
    assert separate.value.rule == fused.value.rule == rule
    if rule == "operations":
        assert "dw" in _step(conn, session)


@pytest.mark.parametrize("monitor", [{"theta": np.zeros(7)}, {"theta": np.zeros(4), "x": 1},
                                     {"theta": np.full(4, np.nan)}, {}])
def test_a_fused_monitor_of_the_wrong_form_is_refused(site, monitor):
    conn, _ = site()
    session = _open(conn)
    with pytest.raises(SiteRefusal) as fused:
        _step(conn, session, monitor=monitor)
    assert fused.value.rule == "message"


def test_a_protected_step_carries_no_monitor_in_the_clear(site):
    conn, _ = site()
    session = _open(conn)
    masked = SecureAggregation().wrap(FedAvg(client_lr=0.05))
    with pytest.raises(SiteRefusal, match="no monitor in the clear") as fused:
        _step(conn, session, solver=masked, monitor={"theta": np.zeros(4)})
    assert fused.value.rule == "message"


# --- the step reuses its fused monitor's gradient ------------------------------------------
def test_a_fused_fit_computes_each_monitored_gradient_once(federation, monkeypatch,
                                                           evaluations):
    """Each step that starts at the model its monitor was asked at takes the monitor's
    audited gradient (one pass over the rows instead of two), and the fit is the one the
    separate passes give, bit for bit (a step whose only gradient is the monitor's is
    still one an audit saw: it is answered)."""
    data, frames = federation
    params = dict(solver="fedavg", max_rounds=8, tol=0)
    fused, _ = _fit(data, monkeypatch, True, **params)
    fused_passes = dict(evaluations)
    evaluations.clear()
    plain, _ = _fit(data, monkeypatch, False, **params)
    np.testing.assert_array_equal(fused.coef_, plain.coef_)
    assert fused.intercept_ == plain.intercept_
    for key in ("objective", "stationarity", "monitor_bytes", "bytes_up", "bytes_down"):
        np.testing.assert_array_equal(fused.history_[key], plain.history_[key])
    carried = fused.n_iter_ - 1  # rounds 2..8 start at a monitored model
    assert fused_passes["value"] == evaluations["value"]  # every monitor still computed
    assert evaluations["gradient"] - fused_passes["gradient"] == carried * len(frames)


def _step_at(conn, session, w, **extra):
    return _step(conn, session, message={"w": w, "round": 0}, **extra)


def test_a_fused_step_at_its_monitors_model_answers_as_the_two_requests(site, evaluations):
    conn, _ = site()
    w = np.array([0.5, -0.5, 0.0, 0.1])
    fused = _step_at(conn, _open(conn), w, monitor={"theta": w.copy()})
    assert dict(evaluations) == {"value": 1}  # the step's gradient was the monitor's
    value, grad = conn.call("fit.monitor", session=_open(conn), theta=w)
    alone = _step_at(conn, _open(conn), w)
    assert fused["monitor"][0] == value
    np.testing.assert_array_equal(fused["monitor"][1], grad)
    np.testing.assert_array_equal(fused["reply"]["dw"], alone["dw"])
    assert fused["reply"]["delta"] == alone["delta"]


@pytest.mark.parametrize("change", ["one bit", "negative zero", "float32"])
def test_a_monitor_at_another_model_lends_the_step_nothing(site, evaluations, change):
    """A crafted request whose monitor asks at a model that differs from the step's in
    one bit (or in its sign of zero, or its type) gets no reuse: the step computes its own
    gradient under its own audit, and answers as it would alone."""
    conn, _ = site()
    w = np.array([0.5, -0.5, 0.0, 0.1])
    theta = w.copy()
    if change == "one bit":
        theta[1] = np.nextafter(theta[1], 0.0)
    elif change == "negative zero":
        theta[2] = -0.0
    else:
        theta = theta.astype(np.float32)
    fused = _step_at(conn, _open(conn), w, monitor={"theta": theta})
    assert dict(evaluations) == {"value": 1, "gradient": 1}
    alone = _step_at(conn, _open(conn), w)
    np.testing.assert_array_equal(fused["reply"]["dw"], alone["dw"])
    value, grad = conn.call("fit.monitor", session=_open(conn), theta=theta)
    assert fused["monitor"][0] == value
    np.testing.assert_array_equal(fused["monitor"][1], grad)


def test_a_refused_monitor_at_the_steps_model_refuses_the_request(site, evaluations):
    conn, folder = site()
    session = _open(conn)
    with pytest.raises(SiteRefusal) as fused:
        _step_at(conn, session, ATTACK, monitor={"theta": ATTACK.copy()})
    assert fused.value.rule == "dominance"
    assert "gradient" not in evaluations  # the step never ran
    line = [r for r in read_audit(folder / "audit.jsonl") if r["operation"] == "fit.step"][-1]
    assert line["outcome"] == "refused" and line["kind"] == "fit.step+fit.monitor"


def _objective():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 3))
    return ClientObjective(Quadratic(), X, (X[:, :1] + rng.normal(size=(30, 1))),
                           np.ones(30), Layout(1, 3))


def test_only_an_audited_monitor_is_kept_and_only_under_its_rule():
    objective, theta = _objective(), np.array([0.2, 0.0, -1.0, 0.5])
    for context in (dominance.suspended, None):  # no audit saw it: nothing kept
        tap = MonitorTap(objective)
        with (context() if context else nullcontext()):
            tap.value_and_gradient(theta)
        assert tap.kept is None
    tap = MonitorTap(objective)
    with dominance.audit(5, 0.95) as seen:
        value, grad = tap.value_and_gradient(theta)
    kept = tap.kept
    assert kept.checks == seen.checks > 0
    grad[:] = np.nan  # what the monitor's reply does with its array is not the step's
    with dominance.audit(5, 0.95) as own:  # the step's own pass, audited
        expected = objective.gradient(theta)
    reusing = Reusing(objective, kept)
    with dominance.audit(5, 0.95) as step:
        g = reusing.gradient(theta.copy())
        g[:] = 0.0  # a solver adds to its gradient in place: the kept one stays
        np.testing.assert_array_equal(reusing.gradient(theta.copy()), expected)
    assert step.checks == 2 * kept.checks  # the monitor's checks, credited per reuse
    for rule in ((4, 0.95), (5, 0.9)):  # another rule: the step audits its own sums
        with dominance.audit(*rule) as other:
            reusing.gradient(theta.copy())
        assert other.checks == own.checks > 0
    with dominance.audit(5, 0.95) as plain:  # other rows, or another objective: its own
        reusing.gradient(theta, rows=np.arange(10))
        Reusing(_objective(), kept).gradient(theta)
    assert plain.checks == 2 * own.checks and Reusing(objective, kept).n_samples == 30
    assert not MonitorTap.taps(object())


class _Stub:
    """A step that asks its client for the gradient at ``at`` (or for nothing)."""

    replies_as = None

    def __init__(self, at):
        self.at = at

    def client_update(self, client, state, message, rng):
        grad = None if self.at is None else client.gradient(self.at.copy())
        return {"grad": grad}, state


@pytest.mark.parametrize("at, answered", [("monitor", True), ("other", True), (None, False)])
def test_a_step_no_audit_saw_is_refused_though_its_monitor_was_audited(at, answered,
                                                                      evaluations):
    """The monitor's checks count for the step only when the step takes its gradient (it
    then computes nothing and is answered): a step whose own sums no audit saw is
    refused whatever the monitor was."""
    objective, theta = _objective(), np.array([0.2, 0.0, -1.0, 0.5])
    tap = MonitorTap(objective)
    with dominance.audit(5, 0.95):
        tap.value_and_gradient(theta)
    host = SimpleNamespace(policy=SimpleNamespace(min_rows=5, dominance=0.95), name="a")
    step = _Stub({"monitor": theta, "other": theta + 1.0, None: None}[at])
    run = functools.partial(FitSessions._plain_step, host, SimpleNamespace(
        objective=objective), step, step, None, {}, 0, tap.kept)
    if not answered:
        with pytest.raises(Refused, match="no audit saw"):
            run()
        return
    reply, _ = run()
    assert evaluations["gradient"] == (at == "other")
    at_theta = objective.gradient(step.at)
    np.testing.assert_array_equal(reply["grad"], at_theta)
