"""End-to-end envelopes (skfed.sites.envelope): what a relay in the middle cannot do."""

import time

import pytest

from skfed.deploy import make_certificates
from skfed.sites.envelope import EnvelopeError, Opener, ReplayRecord, Sealer


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs"), ["hospital-a", "hospital-b"],
                             analysts=["analyst-b"], relays=["relay"])


def _read(pair):
    return pair.cert.read_bytes(), pair.key.read_bytes()


def _sealer(certs, site="hospital-a", who=None):
    cert, key = _read(who or certs.client)
    return Sealer(site, certs.sites[site].cert.read_bytes(), cert, key)


def _opener(certs, tmp_path, site="hospital-a"):
    cert, key = _read(certs.sites[site])
    return Opener(site, cert, key, certs.ca.cert.read_bytes(),
                  ReplayRecord(tmp_path / f"{site}-replay.json"))


def _reason(opener, data):
    with pytest.raises(EnvelopeError) as info:
        opener.open(data)
    return info.value.reason


def test_round_trip_names_the_analyst_and_seals_the_reply(certs, tmp_path):
    sealer, opener = _sealer(certs), _opener(certs, tmp_path)
    request = b"coefficients 0.123456789 column bmi"
    envelope, open_reply = sealer.seal(request, 60)
    assert request not in envelope and b"bmi" not in envelope
    opened = opener.open(envelope)
    assert (opened.analyst, opened.request) == ("analyst", request)
    reply = opened.seal(b"reply 3.14159")
    assert b"3.14159" not in reply
    assert open_reply(reply) == b"reply 3.14159"
    # a reply is the answer to its own request only (same connection and sequence number)
    second, open_second = sealer.seal(request, 60)
    with pytest.raises(EnvelopeError):
        open_second(reply)
    assert open_second(opener.open(second).seal(b"x")) == b"x"


def test_every_tampered_byte_is_refused(certs, tmp_path):
    sealer, opener = _sealer(certs), _opener(certs, tmp_path)
    envelope, _ = sealer.seal(b"request", 60)
    step = max(1, len(envelope) // 200)  # ~200 positions across the whole envelope
    for at in range(0, len(envelope), step):
        forged = bytearray(envelope)
        forged[at] ^= 0x01
        with pytest.raises(EnvelopeError):
            opener.open(bytes(forged))
    assert opener.open(envelope).request == b"request"  # the record saw no forgery


def test_a_tampered_reply_is_refused(certs, tmp_path):
    sealer, opener = _sealer(certs), _opener(certs, tmp_path)
    envelope, open_reply = sealer.seal(b"request", 60)
    reply = bytearray(opener.open(envelope).seal(b"reply"))
    reply[-1] ^= 0x01
    with pytest.raises(EnvelopeError, match="altered"):
        open_reply(bytes(reply))


def test_wrong_site_expired_replayed_reordered(certs, tmp_path):
    sealer, opener = _sealer(certs), _opener(certs, tmp_path)
    # sealed to hospital-b: hospital-a refuses it (and could not read it)
    to_b, _ = _sealer(certs, "hospital-b").seal(b"r", 60)
    assert _reason(opener, to_b) == "site"
    # a relay that rewrites the header's site name breaks the authentication
    assert _reason(opener, to_b.replace(b"hospital-b", b"hospital-a")) == "tampered"
    expired, _ = sealer.seal(b"r", 1)
    with pytest.raises(EnvelopeError) as info:
        opener.open(expired, now=time.time() + 5)
    assert info.value.reason == "expired"
    first, _ = sealer.seal(b"1", 60)
    second, _ = sealer.seal(b"2", 60)
    opener.open(second)
    assert _reason(opener, second) == "sequence"  # replayed
    assert _reason(opener, first) == "sequence"  # held back, then sent after its successor


def test_replay_record_survives_a_restart(certs, tmp_path):
    sealer = _sealer(certs)
    envelope, _ = sealer.seal(b"r", 60)
    _opener(certs, tmp_path).open(envelope)
    restarted = _opener(certs, tmp_path)  # a new process reads the same file
    assert _reason(restarted, envelope) == "sequence"
    later, _ = sealer.seal(b"r", 60)
    assert restarted.open(later).request == b"r"
    assert oct((tmp_path / "hospital-a-replay.json").stat().st_mode & 0o777) == "0o600"


def test_another_analysts_signature_or_a_non_analyst_certificate(certs, tmp_path):
    opener = _opener(certs, tmp_path)
    # analyst-b's certificate with the analyst's key: the signature does not verify
    cert_b, _ = _read(certs.analysts["analyst-b"])
    _, key_a = _read(certs.client)
    impostor = Sealer("hospital-a", certs.sites["hospital-a"].cert.read_bytes(), cert_b, key_a)
    assert _reason(opener, impostor.seal(b"r", 60)[0]) == "signature"
    # a relay's or a site's certificate with its own key: not an analyst
    for pair in (certs.relays["relay"], certs.sites["hospital-b"]):
        other = _sealer(certs, who=pair)
        assert _reason(opener, other.seal(b"r", 60)[0]) == "analyst"
    # analyst-b signing for itself is analyst-b at the site
    own = _sealer(certs, who=certs.analysts["analyst-b"])
    assert opener.open(own.seal(b"r", 60)[0]).analyst == "analyst-b"


def test_a_certificate_of_another_ca_is_refused(certs, tmp_path):
    other = make_certificates(tmp_path / "other", ["hospital-a"])
    sealer = Sealer("hospital-a", certs.sites["hospital-a"].cert.read_bytes(),
                    *_read(other.client))
    assert _reason(_opener(certs, tmp_path), sealer.seal(b"r", 60)[0]) == "certificate"


def test_a_relay_certificate_names_the_relay_host(certs):
    from cryptography import x509

    from skfed.deploy.certificates import RELAY_HOST, certificate_identity

    pem = certs.relays["relay"].cert.read_bytes()
    assert certificate_identity(pem) == ("relay", "relay")
    san = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert RELAY_HOST in san.get_values_for_type(x509.DNSName)
    with pytest.raises(ValueError, match="reserved"):
        make_certificates(certs.directory / "x", [RELAY_HOST])


def test_the_certificate_travels_once_then_the_connection_has_a_session(certs, tmp_path):
    sealer, opener = _sealer(certs), _opener(certs, tmp_path)
    first, open_first = sealer.seal(b"r", 60)
    open_first(opener.open(first).seal(b"ok"))
    second, open_second = sealer.seal(b"r" * 50, 60)
    assert second[:4] == b"SKS1" and len(second) < len(first) - 400  # no PEM, no point
    opened = opener.open(second)
    assert (opened.analyst, opened.request) == ("analyst", b"r" * 50)
    assert open_second(opened.seal(b"fine")) == b"fine"
    # every byte of a session request is checked too
    third, _ = sealer.seal(b"r", 60)
    for at in range(0, len(third), 7):
        forged = bytearray(third)
        forged[at] ^= 0x01
        with pytest.raises(EnvelopeError):
            opener.open(bytes(forged))
    assert _reason(opener, second) == "sequence"  # replayed in its session
    # a restarted site has forgotten the session: refused, and the analyst starts over
    restarted = _opener(certs, tmp_path)
    fourth, open_fourth = sealer.seal(b"r", 60)
    assert _reason(restarted, fourth) == "session-unknown"
    from skfed.sites.envelope import refusal

    with pytest.raises(EnvelopeError) as info:
        open_fourth(refusal("site 'hospital-a' refused the envelope (session-unknown)"))
    assert info.value.reason == "session-unknown"
    assert sealer.session is None and not sealer.certificate_known
    fifth, _ = sealer.seal(b"r", 60)
    assert fifth[:4] == b"SKE1" and restarted.open(fifth).analyst == "analyst"


def test_a_digest_or_a_session_is_no_way_around_the_signature(certs, tmp_path):
    sealer, opener = _sealer(certs), _opener(certs, tmp_path)
    envelope, open_reply = sealer.seal(b"r", 60)
    open_reply(opener.open(envelope).seal(b"ok"))
    # analyst-b claims analyst's certificate by its digest, and signs with its own key
    other = _sealer(certs, who=certs.analysts["analyst-b"])
    other.certificate_known, other._digest = True, sealer._digest
    assert _reason(opener, other.seal(b"r", 60)[0]) == "signature"
    # analyst-b with analyst's session secret and connection (stolen): its signature fails
    other.session, other.connection, other.seq = sealer.session, sealer.connection, 5
    assert _reason(opener, other.seal(b"r", 60)[0]) == "signature"
    # a digest the site never saw
    unknown = _sealer(certs, who=certs.analysts["analyst-b"])
    unknown.certificate_known = True
    assert _reason(opener, unknown.seal(b"r", 60)[0]) == "certificate-unknown"
