"""What a site decides cannot be claimed by a message (issue 27, findings 2 and 5).

A modified client sends, over the real transport, a plain Newton solver that
carries attributes its class does not have: ``solver = FedAvg()`` (as if a
privacy wrapper held it) and ``differentially_private = True``. When the codec
set every attribute a message listed and the site read those claims, the
``require`` and ``solvers`` rules passed, the step ran unmasked and one site's
exact ``X'X / n`` came back, with no ledger charge. Now the codec rebuilds an
allow-listed object from its constructor's parameters and the derived
attributes its class declares, refusing anything else by name, and the site
decides masking and noise from the solver's class.
"""

import hashlib
import json
import struct

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from sklearn.datasets import load_diabetes  # noqa: E402

from skfed.datafits import Quadratic  # noqa: E402
from skfed.deploy import make_certificates  # noqa: E402
from skfed.federation.layout import Layout  # noqa: E402
from skfed.federation.problem import FederatedProblem  # noqa: E402
from skfed.privacy import DifferentialPrivacy, SecureAggregation  # noqa: E402
from skfed.privacy.secure_aggregation import FixedPoint  # noqa: E402
from skfed.sites import SiteRefusal  # noqa: E402
from skfed.sites.audit import read_audit  # noqa: E402
from skfed.sites.codec import MAGIC, MessageError, decode, encode  # noqa: E402
from skfed.sites.policy import Refused, load_config  # noqa: E402
from skfed.sites.transport import SiteConnection, SiteServer  # noqa: E402
from skfed.solvers import FedAvg, FedNewton  # noqa: E402

from ._sites import site_config  # noqa: E402

N_FEATURES = 10  # the diabetes columns besides the target
SITE = "hospital-a"


# --- a modified client's messages -----------------------------------------------------
def _newton():
    """A set-up Newton solver for the diabetes columns, as an honest server sends it."""
    problem = FederatedProblem(Layout(1, N_FEATURES), Quadratic(), None, weights=np.ones(1),
                               n_samples=np.array([120]),
                               lipschitz=[{"coef": 1.0, "intercept": 1.0, "joint": 1.0,
                                           "row": 1.0}])
    return FedNewton().setup(problem)


def _split(data):
    (size,) = struct.unpack("<I", data[4:8])
    return json.loads(data[8:8 + size]), data[8 + size:]


def _with_claims(target, **claims):
    """``encode(target)`` with attributes added to its top object's state, as a modified
    client writes them (each claim a value without arrays: the tail is unchanged)."""
    header, tail = _split(encode(target))
    for name, claim in claims.items():
        header["state"][name] = _split(encode(claim))[0]
    raw = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(raw)) + raw + tail


def _claimed(target, **claims):
    """``target`` with attributes set in this process, as if a codec had let them in."""
    for name, value in claims.items():
        object.__setattr__(target, name, value)
    return target


CLAIMS = {"solver": FedAvg(), "differentially_private": True}


# --- the codec -------------------------------------------------------------------------
def test_the_codec_refuses_an_attribute_its_class_does_not_declare():
    honest = decode(encode(_newton()))  # its parameters and declared derived state
    assert type(honest) is FedNewton and honest.hessian_ == "full"
    np.testing.assert_array_equal(honest.initial_curvature_, _newton().initial_curvature_)
    assert honest.problem_.smooth_penalty is None  # rebuilt by its constructor
    for name, claim in CLAIMS.items():
        with pytest.raises(MessageError, match=f"FedNewton cannot carry the attribute "
                                               f"'{name}'"):
            decode(_with_claims(_newton(), **{name: claim}))
    # deeper in the tree too: the solver's problem carrying an undeclared attribute
    header, tail = _split(encode(_newton()))
    header["state"]["problem_"]["state"]["scale"] = 2.0
    raw = json.dumps(header).encode()
    with pytest.raises(MessageError, match="FederatedProblem cannot carry the attribute "
                                           "'scale'"):
        decode(MAGIC + struct.pack("<I", len(raw)) + raw + tail)
    # a class attribute of the privacy wrapper is not a message's to set either
    wrapper = DifferentialPrivacy(1.0).wrap(FedAvg(client_lr=0.1), max_rounds=5)
    with pytest.raises(MessageError, match="'differentially_private'"):
        decode(_with_claims(wrapper, differentially_private=False))


def test_only_the_declared_state_travels():
    lipschitz = {"coef": 1.0, "intercept": 1.0, "joint": 1.0, "row": 1.0}
    problem = FederatedProblem(Layout(1, N_FEATURES), Quadratic(), None,
                               weights=np.full(3, 1 / 3), n_samples=np.full(3, 40),
                               lipschitz=[lipschitz] * 3)
    wrapper = DifferentialPrivacy(1.0, random_state=0).wrap(FedAvg(client_lr=0.1),
                                                            max_rounds=5).setup(problem)
    sent = _split(encode(wrapper))[0]["state"]
    assert set(sent) == {"solver", "config", "max_rounds", "monitor_every", "problem_",
                         "fixed_point_", "noise_multiplier_", "rounds_", "monitor_passes_"}
    # the server's own bookkeeping stays with it: the solver's bytes do not change with
    # the rounds, so it travels once per fit
    before = encode(wrapper)
    wrapper.exchanges_ += 1
    wrapper.noisy_energy_.append(1.0)
    assert encode(wrapper) == before


def test_an_object_is_rebuilt_by_its_own_constructor():
    good = FixedPoint(30, bound=1.0, n_parties=3)
    assert decode(encode(good)).fraction_bits == 30
    header, tail = _split(encode(good))
    header["state"]["fraction_bits"] = 80  # past what the code can hold: its check runs
    raw = json.dumps(header).encode()
    with pytest.raises(MessageError, match="FixedPoint cannot be built"):
        decode(MAGIC + struct.pack("<I", len(raw)) + raw + tail)


# --- against a real service ------------------------------------------------------------
@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs"), [SITE], analysts=["analyst-b"])


@pytest.fixture
def site(tmp_path, certs):
    """A service for hospital-a (120 diabetes rows) under ``policy``; stopped after."""
    servers = []

    def start(policy):
        folder = tmp_path / f"site{len(servers)}"
        folder.mkdir()
        load_diabetes(as_frame=True).frame.iloc[:120].to_csv(folder / "visits.csv",
                                                             index=False)
        path = site_config(folder, SITE, certs=certs, datasets={"visits": ("visits.csv", None)},
                           policy=policy)
        servers.append(SiteServer(load_config(path)).start())
        conn = SiteConnection(SITE, f"127.0.0.1:{servers[-1].port}", ca_file=certs.ca.cert,
                              cert_file=certs.client.cert, key_file=certs.client.key)
        return conn, servers[-1].host, folder

    yield start
    for server in servers:
        server.stop()


def _step(conn, solver_bytes):
    """``fit.open`` then one ``fit.step`` of a crafted solver, by raw transport calls; the
    step's reply (the site's refusal is raised)."""
    from skfed.data.site import Targets

    session = conn.call("fit.open", dataset={"name": "visits", "target": "target"},
                        datafit=Quadratic(), layout=Layout(1, N_FEATURES), targets=Targets())
    blob = np.frombuffer(solver_bytes, dtype=np.uint8)
    return conn.call("fit.step", session=session, solver=blob,
                     solver_digest=hashlib.sha256(blob).hexdigest(), client=0, seed=0,
                     state=None, message={"theta": np.zeros(N_FEATURES + 1)})


def _last_step(folder):
    return [r for r in read_audit(folder / "audit.jsonl") if r["operation"] == "fit.step"][-1]


def test_required_protections_cannot_be_claimed(site):
    conn, host, folder = site('require = ["secure_aggregation", "differential_privacy"]\n'
                              'consortium = ["hospital-a", "hospital-b"]\n'
                              "epsilon_budget = 1.0")
    with pytest.raises(SiteRefusal) as info:  # the reply is a refusal: no X'X in it
        _step(conn, _with_claims(_newton(), **CLAIMS))
    assert info.value.rule in ("message", "require") and info.value.site == SITE
    if info.value.rule == "message":  # the codec's refusal names what it refused
        assert "FedNewton cannot carry the attribute 'solver'" in str(info.value)
    line = _last_step(folder)
    assert line["outcome"] == "refused" and line["rule"] == info.value.rule
    assert line["epsilon"] == 0.0 and line["bytes"] == 0
    # the site's own check, had the claims reached it: a Newton solver is neither masked
    # nor noised, whatever it says it holds
    for claims in (CLAIMS, {"solver": SecureAggregation().wrap(FedAvg())}):
        with pytest.raises(Refused) as refused:
            host._check_solver(_claimed(_newton(), **claims))
        assert refused.value.rule == "require"
    conn.close()


def test_the_solvers_rule_reads_a_real_wrappers_solver_only(site):
    conn, host, folder = site('solvers = ["fedavg"]')
    with pytest.raises(SiteRefusal) as info:
        _step(conn, _with_claims(_newton(), solver=FedAvg()))
    assert info.value.rule in ("message", "solvers")
    line = _last_step(folder)
    assert line["outcome"] == "refused" and line["rule"] == info.value.rule
    # the site's own check: the claimed inner solver is not read; a real wrapper's is
    with pytest.raises(Refused) as refused:
        host._check_solver(_claimed(_newton(), solver=FedAvg()))
    assert refused.value.rule == "solvers" and "'newton'" in str(refused.value)
    with pytest.raises(Refused) as refused:
        host._check_solver(SecureAggregation().wrap(FedNewton()))
    assert refused.value.rule == "solvers"
    host._check_solver(SecureAggregation().wrap(FedAvg()))  # allowed: a wrapped FedAvg
    conn.close()
