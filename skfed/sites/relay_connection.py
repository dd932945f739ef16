"""The analyst's connection to one site through a relay (:mod:`skfed.sites.relay`).

The same calls as a direct :class:`~skfed.sites.transport.SiteConnection`;
each request travels sealed (:mod:`skfed.sites.envelope`): signed with the
analyst's certificate key, encrypted to the site's certificate key (the relay
hands the site's certificate over; it is checked against the federation's CA
and must name the site, so a relay cannot put its own key in its place), and
its reply opened with the key of that request only. Requests on one connection
go one at a time, in sequence: the site refuses any number not above the last
it accepted, so a request a relay holds back cannot be played later.

The requests travel on one long-lived stream to the relay (``Open``), opened
again after it breaks: a message on a stream costs both ends less than a call
of its own. A request not answered within the timeout cancels the stream (a
watchdog thread checks twice a second).
"""

import itertools
import queue
import threading
import time

from ..deploy.certificates import RELAY_HOST, ROLE_SITE, certificate_identity
from .envelope import RESTART, EnvelopeError, Sealer
from .proxy import proxy_options
from .relay import SERVICE, analyst_frame, drain, unframe
from .transport import _OPTIONS, DEFAULT_TIMEOUT, SiteConnection, _grpc, _read

#: seconds between the watchdog's looks at a request's deadline
WATCH = 0.5


def check_site_certificate(ca, pem, site):
    """Raise ``ValueError`` unless ``pem`` is a certificate the CA signed for site ``site``
    (valid now)."""
    import datetime

    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    try:
        cert = x509.load_pem_x509_certificate(bytes(pem))
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(bytes(ca)))
    except (ValueError, TypeError, InvalidSignature):
        raise ValueError(f"the relay gave a certificate for site {site!r} that the "
                         "federation's CA did not sign") from None
    now = datetime.datetime.now(datetime.timezone.utc)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise ValueError(f"site {site!r}'s certificate is outside its validity")
    if certificate_identity(bytes(pem)) != (ROLE_SITE, site):
        raise ValueError(f"the relay gave a certificate that is not site {site!r}'s")


class RelayConnection(SiteConnection):
    """The analyst's connection to site ``site`` through the relay at ``relay``.

    Parameters
    ----------
    site : str
        The site's name (its certificate must name it).
    relay : str
        ``host:port`` of the relay.
    ca_file, cert_file, key_file : path-like
        The federation's CA certificate and the analyst's certificate and key.
    timeout : float, default=120
        Seconds to wait for one reply before the site is reported lost (also each
        request's lifetime: the site refuses it once expired).
    """

    def __init__(self, site, relay, *, ca_file, cert_file, key_file, timeout=DEFAULT_TIMEOUT):
        grpc = _grpc()
        self.site, self.address, self.timeout = site, relay, timeout
        ca, cert, key = _read(ca_file), _read(cert_file), _read(key_file)
        credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                                   certificate_chain=cert)
        # the analyst's own HTTPS_PROXY / NO_PROXY, as a dial-out site's
        self._channel = grpc.secure_channel(
            relay, credentials, options=_OPTIONS + [("grpc.ssl_target_name_override",
                                                     RELAY_HOST)] + proxy_options(relay))
        self._open = self._channel.stream_stream(f"/{SERVICE}/Open")
        self.bytes_sent = self.bytes_received = 0
        self._lock, self._order = threading.Lock(), threading.Lock()
        self._stream, self._waiting, self._ids = None, None, itertools.count(1)
        self._closed = threading.Event()
        try:
            pem = self._rpc(self._channel.unary_unary(f"/{SERVICE}/Certificate"),
                            site.encode(), what="certificate of the site from the relay")
            check_site_certificate(ca, pem, site)
        except BaseException:
            self._channel.close()
            raise
        self._sealer = Sealer(site, pem, cert, key)

    def _exchange(self, request):
        from . import SiteServiceError, SiteUnavailable

        for attempt in range(2):  # twice: a restarted site has the connection start over
            try:
                return self._sealed_exchange(request)
            except EnvelopeError as exc:
                if exc.reason in RESTART and attempt == 0:
                    continue
                if exc.reason in ("refused", *RESTART):
                    # the site's word, unauthenticated: an error only
                    raise SiteServiceError(self.site, str(exc)) from None
                raise SiteUnavailable(self.site, f"the reply to request {self._sealer.seq} "
                                                 f"is not the site's ({exc})") from None

    def _sealed_exchange(self, request):
        # one request at a time: each is sent after its predecessor's reply came back,
        # so the sequence the site checks is the order the analyst asked in
        with self._order:
            envelope, open_reply = self._sealer.seal(request, self.timeout)
            data = self._relayed(envelope, f"reply to request {self._sealer.seq}")
            with self._lock:
                self.bytes_sent += len(envelope)
                self.bytes_received += len(data)
            return open_reply(data)

    def _relayed(self, envelope, what):
        """The site's reply to ``envelope``, sent on this connection's stream."""
        from . import SiteUnavailable

        grpc = _grpc()
        if self._stream is None or self._stream[1].done():  # none yet, or it ended idle
            self._end_stream()
            self._start_stream()
        outgoing, replies = self._stream
        ident = next(self._ids)
        outgoing.put(analyst_frame(ident, self.site, envelope, self.timeout))
        self._waiting = waiting = [time.monotonic() + self.timeout, replies, False]
        try:
            while True:
                got, data = unframe(next(replies))
                if got == ident:  # else a late reply to a request that timed out
                    break
        except (grpc.RpcError, StopIteration) as exc:
            self._end_stream()
            if waiting[2]:
                raise SiteUnavailable(self.site, f"no {what} within {self.timeout:g} s"
                                      ) from None
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else "the stream ended"
            raise SiteUnavailable(self.site, f"{getattr(code, 'name', code)}: {detail}"
                                  ) from None
        finally:
            self._waiting = None
        if data[:1] != b"\0":  # the relay's error
            raise SiteUnavailable(self.site, data[1:].decode("utf-8", "replace"))
        return data[1:]

    def _start_stream(self):
        outgoing = queue.Queue()
        self._stream = (outgoing, self._open(drain(outgoing)))
        if not getattr(self, "_watchdog", None):
            self._watchdog = threading.Thread(target=self._watch, daemon=True)
            self._watchdog.start()

    def _end_stream(self):
        stream, self._stream = self._stream, None
        if stream is not None:
            stream[0].put(None)
            stream[1].cancel()

    def _watch(self):
        """Cancel the stream of a request past its deadline (its caller then raises)."""
        while not self._closed.wait(WATCH):
            waiting = self._waiting
            if waiting is not None and time.monotonic() > waiting[0]:
                waiting[2] = True
                waiting[1].cancel()

    def close(self):
        self._closed.set()
        self._end_stream()
        super().close()
