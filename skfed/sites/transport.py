"""gRPC over mutual TLS between an analyst and a site service.

One unary method, ``/skfed.Site/Call``: a request's bytes go to
:meth:`SiteHost.handle <skfed.sites.host.SiteHost.handle>` with the
analyst's identity, the reply's bytes come back. The message layer
(:mod:`skfed.sites.codec`) is independent of who dials whom: here the site
listens (as DataSHIELD's servers do) and the analyst connects to each site.

Identity is the TLS certificate's, bound to a role (:mod:`skfed.deploy`):

- the site accepts a peer only if the federation's CA signed its certificate
  (mutual TLS) **and** the certificate is an analyst's; a site's or the
  coordinator's certificate is refused, and the refusal is audited;
- the analyst accepts a site only if its certificate names that site
  (``grpc.ssl_target_name_override``), so no other certificate holder can
  answer in its place.
"""

import functools
import threading
from concurrent import futures

from ..deploy.certificates import ROLE_ANALYST, ROLE_SITE, certificate_identity
from .codec import decode, encode

SERVICE, METHOD = "skfed.Site", "Call"
#: the largest message either side accepts (a Hessian of 4,000 features fits)
MAX_MESSAGE = 256 * 1024 * 1024
_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.max_receive_message_length", MAX_MESSAGE)]
#: seconds an analyst waits for one site's reply before naming it as lost
DEFAULT_TIMEOUT = 120.0


def _grpc():
    try:
        import grpc
    except ImportError:
        raise ImportError("the site service needs grpcio: pip install 'skfed[site]'.") from None
    return grpc


def peer_identity(context):
    """``(role, name)`` of the authenticated peer of a gRPC call (``(None, None)``
    without a certificate)."""
    auth = context.auth_context()
    pem = auth.get("x509_pem_cert")
    if not pem:
        return None, None
    return _identity(bytes(pem[0]))


@functools.lru_cache(maxsize=256)
def _identity(pem):
    # parsing a certificate costs about 0.1 ms a request; the same bytes name the same
    # identity (TLS has verified the chain before the call)
    return certificate_identity(pem)


class SiteServer:
    """A running site service (``skfed site serve CONFIG``).

    Parameters
    ----------
    config : skfed.sites.policy.SiteConfig
    max_workers : int, default=4
        Requests answered at once (analysts' fits run side by side,
        isolated in their own sessions).
    """

    def __init__(self, config, *, max_workers=4):
        from .host import SiteHost

        grpc = _grpc()
        cert, key, ca = config.cert.read_bytes(), config.key.read_bytes(), config.ca.read_bytes()
        role, name = certificate_identity(cert)
        if role != ROLE_SITE or name != config.name:
            raise ValueError(f"the certificate {str(config.cert)!r} is not site "
                             f"{config.name!r}'s (it is bound to role {role!r}, name "
                             f"{name!r}); use the site certificate skfed.deploy.make_certificates "
                             "wrote for this site.")
        self.config = config
        self.host = SiteHost(config)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                                   options=_OPTIONS)
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            METHOD: grpc.unary_unary_rpc_method_handler(self._call)})
        self._server.add_generic_rpc_handlers((handler,))
        credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                                  require_client_auth=True)
        self.port = self._server.add_secure_port(config.listen, credentials)
        if self.port == 0:
            raise OSError(f"site {config.name!r} cannot listen on {config.listen!r}.")
        self._stopped = threading.Event()

    def _call(self, request, context):
        role, name = peer_identity(context)
        if role != ROLE_ANALYST:
            who = f"a {role} certificate ({name!r})" if role else "a certificate with no role"
            self.host.audit.record(analyst=name, operation=None, outcome="refused",
                                   rule="analysts", reason=f"{who} is not an analyst's")
            return encode({"error": {"kind": "policy", "rule": "analysts", "message": (
                f"site {self.config.name!r} refused: {who} cannot act as an analyst "
                "(policy rule 'analysts').")}})
        return self.host.handle(name, request)

    def start(self):
        """Start answering; returns ``self``."""
        self._server.start()
        return self

    def wait(self):
        """Block until :meth:`stop` (or the process ends)."""
        self._server.wait_for_termination()

    def stop(self, grace=1.0):
        self._server.stop(grace).wait()
        self.host.close()


class SiteConnection:
    """The analyst's connection to one site service.

    Parameters
    ----------
    site : str
        The site's name (its certificate must name it).
    address : str
        ``host:port`` of its service.
    ca_file, cert_file, key_file : path-like
        The federation's CA certificate and the analyst's certificate and key.
    timeout : float, default=120
        Seconds to wait for one reply before the site is reported lost.
    """

    def __init__(self, site, address, *, ca_file, cert_file, key_file, timeout=DEFAULT_TIMEOUT):
        grpc = _grpc()
        self.site, self.address, self.timeout = site, address, timeout
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(ca_file), private_key=_read(key_file),
            certificate_chain=_read(cert_file))
        self._channel = grpc.secure_channel(
            address, credentials,
            options=_OPTIONS + [("grpc.ssl_target_name_override", site)])
        self._call = self._channel.unary_unary(f"/{SERVICE}/{METHOD}")
        self.bytes_sent = self.bytes_received = 0
        self._lock = threading.Lock()

    def call(self, op, **args):
        """Run operation ``op`` at the site; its reply value, or the site's refusal
        as :class:`~skfed.sites.SiteRefusal` / error as :class:`~skfed.sites.SiteServiceError`."""
        from . import SiteRefusal, SiteServiceError

        reply = decode(self._exchange(encode({"op": op, "args": args})))
        if "error" in reply:
            error = reply["error"]
            if error.get("kind") == "policy":
                raise SiteRefusal(self.site, error.get("rule"), error.get("message"))
            raise SiteServiceError(self.site, error.get("message"))
        return reply["ok"]

    def _exchange(self, request):
        """The reply's bytes to ``request``'s (counted as they travel)."""
        data = self._rpc(self._call, request)
        with self._lock:
            self.bytes_sent += len(request)
            self.bytes_received += len(data)
        return data

    def _rpc(self, method, request, what="reply"):
        """``method(request)`` within the timeout; a transport failure as
        :class:`~skfed.sites.SiteUnavailable` naming this site."""
        from . import SiteUnavailable

        grpc = _grpc()
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise SiteUnavailable(self.site, f"no {what} within {self.timeout:g} s"
                                      ) from None
            raise SiteUnavailable(self.site, f"{getattr(code, 'name', code)}: "
                                             f"{exc.details() if hasattr(exc, 'details') else exc}"
                                  ) from None

    def close(self):
        self._channel.close()


def _read(path):
    with open(path, "rb") as f:
        return f.read()
