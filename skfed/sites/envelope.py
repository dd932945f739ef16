"""End-to-end envelopes between an analyst and a site, for messages a relay forwards.

Behind a relay (:mod:`skfed.sites.relay`) the site's TLS peer is the relay, so
TLS alone says neither who asks nor keeps the relay from reading. Each request
is therefore sealed by the analyst for one site:

- **encrypted to the site**: an ephemeral ECDH (P-256) key agreement with the
  public key of the site's certificate, HKDF-SHA256, AES-256-GCM; only the
  holder of the site's certificate key can read it;
- **signed by the analyst**: ECDSA (SHA-256) with the analyst certificate's key
  over the header, the ephemeral key and the request; the certificate travels
  inside (once the site answered, its SHA-256 digest only: the site remembers
  the certificates it checked, and a site that forgot asks for it again) and the
  site checks it against its CA, its validity and its role (analyst). Who asks,
  at the site, is this certificate's name;
- **bound** to the site's name, the analyst's connection id, a sequence number
  and an expiry (the clear header, authenticated by AES-GCM and signed); the
  dataset reference and any session handle are inside the signed, encrypted
  request (a clear digest of them would let the relay test guesses of names);
- **once and in order**: the site keeps, per analyst and connection, the highest
  sequence number accepted (:class:`ReplayRecord`, a file in its folder that
  survives a restart) and refuses any number not above it (a replay or a
  reordering) and any expired request.

The reply is encrypted under a key derived from the same agreement (only the
analyst who chose the ephemeral key can read it) and carries the same
connection id and sequence number.

The key agreement is a connection's first request's. Once the site has answered
it, the connection's later requests are encrypted under keys derived (HKDF, per
request header) from that agreement's secret, which only the analyst who signed
the first request and the site hold, and each is still signed by the analyst: an
ECDSA signature and its check per request instead of five elliptic-curve
operations. A site that restarted has forgotten the secret and the certificate:
it refuses with ``session-unknown`` and the analyst starts the connection over.
Primitives from ``cryptography`` only.
"""

import hashlib
import json
import math
import os
import secrets
import struct
import threading
import time

REQUEST, SESSION, REPLY, REFUSAL = b"SKE1", b"SKS1", b"SKR1", b"SKX1"
#: the refusals after which the analyst starts its connection over (the site restarted)
RESTART = ("session-unknown", "certificate-unknown")
#: the furthest in the future a request's expiry may be (seconds): bounds the record
MAX_AHEAD = 3600.0
_CONTEXT = b"skfed envelope v1"


class EnvelopeError(ValueError):
    """A sealed message refused: ``reason`` is one of ``"malformed"``, ``"site"``,
    ``"tampered"``, ``"certificate"``, ``"analyst"``, ``"signature"``, ``"expired"``,
    ``"sequence"``."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason, self.analyst = reason, None


def _pack(*fields):
    return b"".join(struct.pack(">I", len(f)) + bytes(f) for f in fields)


def _unpack(data, count):
    fields, at = [], 0
    for _ in range(count):
        if at + 4 > len(data):
            raise EnvelopeError("malformed", "a truncated envelope")
        (size,) = struct.unpack_from(">I", data, at)
        at += 4
        if at + size > len(data):
            raise EnvelopeError("malformed", "a truncated envelope")
        fields.append(bytes(data[at:at + size]))
        at += size
    if at != len(data):
        raise EnvelopeError("malformed", "trailing bytes after the envelope")
    return fields


def _keys(shared, salt, header, session=False):
    """The request's and the reply's AES-256 keys from one ECDH secret (and the
    connection's session secret), or from a session secret (``session=True``)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    info = _CONTEXT + (b"\0session\0" if session else b"\0") + header
    okm = HKDF(algorithm=hashes.SHA256(), length=64 if session else 96, salt=salt,
               info=info).derive(shared)
    return okm[:32], okm[32:64], okm[64:]


def _point(public_key):
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.X962,
                                   serialization.PublicFormat.UncompressedPoint)


def _signed(header, ephemeral, request):
    return _pack(_CONTEXT + b" request", header, ephemeral, request)


def _request_header(site, connection, seq, expires):
    name = site.encode()
    return struct.pack(">B", len(name)) + name + connection + struct.pack(">Qd", seq, expires)


def _parse_header(header):
    """``(site, connection, seq, expires)`` of a request's header."""
    if not header or len(header) != 1 + header[0] + 16 + 16:
        raise EnvelopeError("malformed", "an envelope header that is not skfed's")
    size = header[0]
    try:
        site = header[1:1 + size].decode()
    except UnicodeDecodeError:
        raise EnvelopeError("malformed", "an envelope header that is not skfed's") from None
    seq, expires = struct.unpack_from(">Qd", header, 1 + size + 16)
    if not math.isfinite(expires):
        raise EnvelopeError("malformed", "an envelope header that is not skfed's")
    return site, header[1 + size:1 + size + 16], seq, expires


def _reply_header(connection, seq):
    return connection + struct.pack(">Q", seq)


class Sealer:
    """The analyst's side for one site: seals requests, opens their replies.

    Parameters
    ----------
    site : str
        The site's name.
    site_certificate : bytes
        The site's PEM certificate (checked by the caller against the CA).
    cert, key : bytes
        The analyst's PEM certificate and private key.
    """

    def __init__(self, site, site_certificate, cert, key):
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        self.site, self.cert = site, bytes(cert)
        self._site_key = x509.load_pem_x509_certificate(bytes(site_certificate)).public_key()
        self._key = serialization.load_pem_private_key(bytes(key), password=None)
        self.connection = secrets.token_bytes(16)
        self.seq = 0
        #: the certificate travels until the site has it (then its SHA-256 digest only)
        self.certificate_known = False
        #: the connection's secret, once the site accepted its first request
        self.session = None
        self._digest = hashlib.sha256(self.cert).digest()
        self._lock = threading.Lock()

    def seal(self, request, lifetime):
        """``(envelope, opener)``: ``request`` sealed to the site, expiring in ``lifetime``
        seconds; ``opener(reply_bytes)`` returns the reply's bytes."""
        with self._lock:
            self.seq += 1
            seq = self.seq
        header = _request_header(self.site, self.connection, seq, time.time() + float(lifetime))
        if self.session is not None:
            envelope, reply_key, secret = self._seal_in_session(header, request)
        else:
            envelope, reply_key, secret = self._seal_first(header, request)
        expected = _reply_header(self.connection, seq)

        def opener(data):
            try:
                reply = open_reply(data, reply_key, expected)
            except EnvelopeError as exc:
                if exc.reason in RESTART:  # the site restarted: start over
                    self.session, self.certificate_known = None, False
                raise
            self.session, self.certificate_known = secret, True
            return reply

        return envelope, opener

    def _sign(self, header, bound, request):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        return self._key.sign(_signed(header, bound, request), ec.ECDSA(hashes.SHA256()))

    def _seal_first(self, header, request):
        """A connection's first request: a key agreement with the site's certificate key."""
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        ephemeral_key = ec.generate_private_key(ec.SECP256R1())
        ephemeral = _point(ephemeral_key.public_key())
        request_key, reply_key, secret = _keys(
            ephemeral_key.exchange(ec.ECDH(), self._site_key), ephemeral, header)
        nonce = secrets.token_bytes(12)
        who = self._digest if self.certificate_known else self.cert
        sealed = AESGCM(request_key).encrypt(
            nonce, _pack(who, self._sign(header, ephemeral, request), request),
            header + ephemeral)
        return REQUEST + _pack(header, ephemeral, nonce, sealed), reply_key, secret

    def _seal_in_session(self, header, request):
        """A later request: keys from the connection's secret, still signed."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        request_key, reply_key, _ = _keys(self.session, self.connection, header, session=True)
        nonce = secrets.token_bytes(12)
        sealed = AESGCM(request_key).encrypt(
            nonce, _pack(self._sign(header, SESSION, request), request), header)
        return SESSION + _pack(header, nonce, sealed), reply_key, self.session


def open_reply(data, key, expected):
    """The reply's bytes, if sealed under ``key`` for the expected header (site,
    connection, sequence number); else :class:`EnvelopeError`."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    data = bytes(data)
    if data[:4] == REFUSAL:
        text = data[4:4096].decode("utf-8", "replace")
        reason = [r for r in RESTART if f"({r})" in text]
        raise EnvelopeError(reason[0] if reason else "refused", text)
    if data[:4] != REPLY:
        raise EnvelopeError("malformed", "not a sealed reply")
    header, nonce, sealed = _unpack(data[4:], 3)
    if header != expected:
        raise EnvelopeError("sequence", "a reply to another request (its site, connection "
                                        "or sequence number differs)")
    try:
        return AESGCM(key).decrypt(nonce, sealed, header)
    except InvalidTag:
        raise EnvelopeError("tampered", "a reply that was altered in transit") from None


class Opened:
    """A request opened at the site: who sent it, what it asks, and how to seal its
    reply (:meth:`seal`)."""

    def __init__(self, analyst, request, reply_key, header):
        self.analyst, self.request = analyst, request
        self._key, self._header = reply_key, header

    def seal(self, reply):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = secrets.token_bytes(12)
        return REPLY + _pack(self._header, nonce,
                             AESGCM(self._key).encrypt(nonce, bytes(reply), self._header))


def refusal(message):
    """A refusal of an envelope the site could not open (in the clear: it says why
    only, and the analyst treats it as an unauthenticated error)."""
    return REFUSAL + message.encode()[:4000]


class Opener:
    """The site's side: opens requests sealed to it (:class:`Sealer`).

    Parameters
    ----------
    site : str
        This site's name.
    cert, key, ca : bytes
        The site's PEM certificate and key, and the federation's CA certificate.
    record : ReplayRecord
        Where the accepted sequence numbers are kept.
    """

    def __init__(self, site, cert, key, ca, record):
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        self.site, self.record, self._known = site, record, {}
        self._sessions, self._lock = {}, threading.Lock()
        self._key = serialization.load_pem_private_key(bytes(key), password=None)
        self._ca = x509.load_pem_x509_certificate(bytes(ca))

    def open(self, data, now=None):
        """An :class:`Opened` request, or :class:`EnvelopeError` naming why not."""
        now = time.time() if now is None else now
        data = bytes(data)
        if data[:4] == SESSION:
            return self._open_in_session(data, now)
        header, fields = self._header(data, 4)
        ephemeral, nonce, sealed = fields
        request_key, reply_key, secret = self._agree(ephemeral, header)
        cert, signature, request = self._decrypt(request_key, nonce, sealed,
                                                 header + ephemeral, 3)
        known = self._known_for(cert)
        analyst = self._check_signature(known, signature,
                                        _signed(header, ephemeral, request), now)
        opened = self._admitted(analyst, header, request, reply_key, now)
        with self._lock:
            if len(self._sessions) > 10000:  # a bounded memory: analysts start over
                self._sessions.clear()
            self._sessions[_parse_header(header)[1]] = (known, secret)
        return opened

    def _open_in_session(self, data, now):
        header, fields = self._header(data, 3)
        nonce, sealed = fields
        connection = _parse_header(header)[1]
        with self._lock:
            session = self._sessions.get(connection)
        if session is None:
            raise EnvelopeError("session-unknown", "a request on a connection this site does "
                                                   "not know (start it over)")
        known, secret = session
        request_key, reply_key, _ = _keys(secret, connection, header, session=True)
        signature, request = self._decrypt(request_key, nonce, sealed, header, 2)
        analyst = self._check_signature(known, signature, _signed(header, SESSION, request),
                                        now)
        return self._admitted(analyst, header, request, reply_key, now)

    def _admitted(self, analyst, header, request, reply_key, now):
        try:
            return self._admit(analyst, _parse_header(header), request, reply_key, now)
        except EnvelopeError as exc:
            exc.analyst = analyst  # its signature held: the officer may know who
            raise

    def _admit(self, analyst, fields, request, reply_key, now):
        _, connection, seq, expires = fields
        if expires < now:
            raise EnvelopeError("expired", f"a request of analyst {analyst!r} that expired "
                                           f"{now - expires:.0f} s ago")
        if expires > now + MAX_AHEAD:
            raise EnvelopeError("expired", "a request whose expiry is over an hour ahead")
        self.record.accept(analyst, connection.hex(), seq, expires, now)
        return Opened(analyst, request, reply_key, _reply_header(connection, seq))

    def _header(self, data, count):
        if data[:4] not in (REQUEST, SESSION):
            raise EnvelopeError("malformed", "not a sealed request")
        header, *fields = _unpack(data[4:], count)
        site = _parse_header(header)[0]
        if site != self.site:
            raise EnvelopeError("site", f"a request sealed for site {site[:64]!r}, not this "
                                        f"site ({self.site!r})")
        return header, fields

    def _agree(self, ephemeral, header):
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), ephemeral)
        except ValueError:
            raise EnvelopeError("tampered", "an ephemeral key that is not a P-256 point") \
                from None
        return _keys(self._key.exchange(ec.ECDH(), public), ephemeral, header)

    @staticmethod
    def _decrypt(key, nonce, sealed, associated, count):
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            plain = AESGCM(key).decrypt(nonce, sealed, associated)
        except (InvalidTag, ValueError):
            raise EnvelopeError("tampered", "a request that was altered in transit, or not "
                                            "sealed to this site's key") from None
        return _unpack(plain, count)

    def _known_for(self, cert):
        """``(name, public key, valid from, valid to)`` of ``cert``, or of the certificate
        whose digest it is (one this site checked before)."""
        if len(cert) != 32:
            return self._check_certificate(cert)
        known = self._known.get(cert)
        if known is None:
            raise EnvelopeError("certificate-unknown", "a certificate digest this site has "
                                                       "not seen (send it)")
        return known

    @staticmethod
    def _check_signature(known, signature, payload, now):
        """The analyst's name, if its certificate is valid now and its key signed
        ``payload``."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        name, public_key, begins, ends = known
        if not begins <= now <= ends:
            raise EnvelopeError("certificate", "a certificate outside its validity")
        try:
            public_key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError, TypeError):
            raise EnvelopeError("signature", f"a request not signed by analyst {name!r}'s "
                                             "key") from None
        return name

    def _check_certificate(self, cert):
        """``(name, public key, valid from, valid to)`` of an analyst certificate of the
        CA, remembered by its digest (the chain and role are checked once)."""
        from cryptography import x509
        from cryptography.exceptions import InvalidSignature

        from ..deploy.certificates import ROLE_ANALYST, certificate_identity

        try:
            certificate = x509.load_pem_x509_certificate(cert)
            certificate.verify_directly_issued_by(self._ca)
        except (ValueError, TypeError, InvalidSignature):
            raise EnvelopeError("certificate", "a certificate the federation's CA did not "
                                               "sign") from None
        role, name = certificate_identity(cert)
        if role != ROLE_ANALYST:
            raise EnvelopeError("analyst", f"a {role} certificate ({name!r}) is not an "
                                           "analyst's")
        known = (name, certificate.public_key(),
                 certificate.not_valid_before_utc.timestamp(),
                 certificate.not_valid_after_utc.timestamp())
        if len(self._known) > 10000:  # a bounded memory: forgotten ones are sent again
            self._known.clear()
        self._known[hashlib.sha256(cert).digest()] = known
        return known


class ReplayRecord:
    """The highest sequence number accepted per analyst and connection, kept in a file
    (mode 0600) so that a restart of the service forgets nothing; an entry goes once
    every request it could refuse has expired.

    The file is a journal: one line appended per accepted request (written before the
    request runs, not flushed to the disk: it survives the process, and the machine's
    crash loses at most the last moments' requests, which expire within their
    lifetime), compacted when the service starts and every ``compact_every`` lines.

    Parameters
    ----------
    path : path-like or None
        The file (``None``: in memory only, for tests).
    compact_every : int, default=10000
    """

    def __init__(self, path, compact_every=10000):
        self.path, self._lock = path, threading.Lock()
        self._entries, self._lines, self.compact_every = {}, 0, compact_every
        self._fd = None
        if path is None:
            return
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    try:
                        key, seq, until = json.loads(line)
                    except ValueError:  # a line cut by a crash: the others stand
                        continue
                    highest, latest = self._entries.get(key, (0, 0.0))
                    self._entries[key] = (max(highest, seq), max(latest, until))
        self._compact(time.time())

    def accept(self, analyst, connection, seq, expires, now):
        """Record ``seq``, or :class:`EnvelopeError` if it is not above the last accepted
        on this connection (a replay, or a request a relay held back)."""
        key = f"{analyst}|{connection}"
        with self._lock:
            highest, until = self._entries.get(key, (0, 0.0))
            if seq <= highest:
                raise EnvelopeError("sequence", f"request {seq} of analyst {analyst!r} on "
                                                f"connection {connection[:12]} is not after "
                                                f"request {highest} (replayed or reordered)")
            self._entries[key] = (seq, max(until, expires))
            if self.path is None:
                return
            os.write(self._fd, (json.dumps([key, seq, max(until, expires)]) + "\n").encode())
            self._lines += 1
            if self._lines >= self.compact_every:
                self._compact(now)

    def _compact(self, now):
        """Rewrite the journal with the unexpired entries only (atomically)."""
        self._entries = {k: v for k, v in self._entries.items() if v[1] >= now}
        tmp = f"{self.path}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        try:
            os.write(fd, "".join(json.dumps([k, *v]) + "\n"
                                 for k, v in self._entries.items()).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0))
        self._lines = len(self._entries)
