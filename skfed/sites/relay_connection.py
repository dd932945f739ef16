"""The analyst's connection to one site through a relay (:mod:`skfed.sites.relay`).

The same calls as a direct :class:`~skfed.sites.transport.SiteConnection`;
each request travels sealed (:mod:`skfed.sites.envelope`): signed with the
analyst's certificate key, encrypted to the site's certificate key (the relay
hands the site's certificate over; it is checked against the federation's CA
and must name the site, so a relay cannot put its own key in its place), and
its reply opened with the key of that request only. Requests on one connection
go one at a time, in sequence: the site refuses any number not above the last
it accepted, so a request a relay holds back cannot be played later.
"""

from ..deploy.certificates import RELAY_HOST, ROLE_SITE, certificate_identity
from .envelope import RESTART, EnvelopeError, Sealer, _pack
from .relay import SERVICE
from .transport import _OPTIONS, DEFAULT_TIMEOUT, SiteConnection, _grpc, _read


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
        import threading

        grpc = _grpc()
        self.site, self.address, self.timeout = site, relay, timeout
        ca, cert, key = _read(ca_file), _read(cert_file), _read(key_file)
        credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                                   certificate_chain=cert)
        self._channel = grpc.secure_channel(
            relay, credentials, options=_OPTIONS + [("grpc.ssl_target_name_override",
                                                     RELAY_HOST)])
        self._call = self._channel.unary_unary(f"/{SERVICE}/Call")
        self.bytes_sent = self.bytes_received = 0
        self._lock, self._order = threading.Lock(), threading.Lock()
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
            data = self._rpc(self._call, _pack(self.site.encode(), envelope),
                             what=f"reply to request {self._sealer.seq}")
            with self._lock:
                self.bytes_sent += len(envelope)
                self.bytes_received += len(data)
            return open_reply(data)
