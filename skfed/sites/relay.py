"""The relay: sites that only dial out, reached through it (``skfed relay serve``).

A hospital's firewall lets connections out, not in. Such a site opens one
long-lived gRPC stream *out* to the relay (:mod:`skfed.sites.dialout`); the
analyst sends each request to the relay addressed to a site's name, and the
relay puts it on that site's stream and returns the site's answer. Everything
is mutual TLS under the federation's CA, with roles: the relay's certificate
has the relay role (``make_certificates(relays=[...])``, naming the host
``skfed-relay``), a stream is accepted from a site certificate only (its name
is the site's), a request from an analyst certificate only.

What travels through the relay are envelopes (:mod:`skfed.sites.envelope`):
signed by the analyst, encrypted to the site, replies encrypted to the
analyst. The relay forwards opaque bytes: it sees sizes, timing and site
names, never a request, a reply or who the site believes asks. A relay that
drops, replays, reorders or forges is refused at the site (and logged there)
or seen by the analyst as a missing or altered reply.

Methods of ``skfed.Relay``: ``Connect`` (the site's stream: frames are an
8-byte id and an envelope), ``Call`` (the analyst's request: a site's name and
an envelope) and ``Certificate`` (a connected site's certificate, which the
analyst checks against the CA before sealing anything to it).
"""

import itertools
import logging
import queue
import struct
import threading
import time
from concurrent import futures
from pathlib import Path

from ..deploy.certificates import ROLE_ANALYST, ROLE_RELAY, ROLE_SITE, certificate_identity
from .envelope import _unpack
from .transport import _OPTIONS, _grpc, peer_identity

SERVICE = "skfed.Relay"
_LOG = logging.getLogger("skfed.relay")
#: seconds a request waits for its site to (re)connect before it is reported lost
WAIT_FOR_SITE = 30.0
#: gRPC keepalive on the sites' streams: a dead peer is noticed within a minute
KEEPALIVE = [("grpc.keepalive_time_ms", 20000), ("grpc.keepalive_timeout_ms", 10000),
             ("grpc.keepalive_permit_without_calls", 1),
             ("grpc.http2.max_pings_without_data", 0),
             ("grpc.http2.min_ping_interval_without_data_ms", 10000)]


def frame(ident, data):
    return struct.pack(">Q", ident) + bytes(data)


def unframe(data):
    if len(data) < 8:
        raise ValueError("a frame shorter than its id")
    return struct.unpack_from(">Q", data)[0], bytes(data[8:])


class SiteLink:
    """One connected site's stream at the relay: requests out, replies matched by id."""

    def __init__(self, name, certificate):
        self.name, self.certificate = name, certificate
        self.outgoing, self.closed = queue.Queue(), threading.Event()
        self._pending, self._lock = {}, threading.Lock()
        self._ids = itertools.count(1)

    def send(self, envelope, timeout):
        """The site's reply to ``envelope``, or ``None`` if the stream broke or
        ``timeout`` passed."""
        ident, done = next(self._ids), threading.Event()
        slot = [done, None]
        with self._lock:
            if self.closed.is_set():
                return None
            self._pending[ident] = slot
        self.outgoing.put(frame(ident, envelope))
        done.wait(timeout)
        with self._lock:
            self._pending.pop(ident, None)
        return slot[1]

    def resolve(self, data):
        ident, reply = unframe(data)
        with self._lock:
            slot = self._pending.pop(ident, None)
        if slot is not None:  # a reply nobody waits for (late, or forged ids): dropped
            slot[1] = reply
            slot[0].set()

    def close(self):
        with self._lock:
            self.closed.set()
            pending, self._pending = list(self._pending.values()), {}
        for slot in pending:
            slot[0].set()
        self.outgoing.put(None)

    def stream(self, context):
        """The frames for the site, until the stream ends."""
        while not self.closed.is_set() and context.is_active():
            try:
                item = self.outgoing.get(timeout=1.0)
            except queue.Empty:
                continue
            if item is None:
                return
            yield item


class RelayServer:
    """A running relay (``skfed relay serve CONFIG``).

    Parameters
    ----------
    listen : str
        ``host:port`` to listen on (port 0: any free port, see :attr:`port`).
    ca, cert, key : path-like
        The federation's CA certificate, and the relay's certificate (relay role) and key.
    max_workers : int, default=256
        Threads: each connected site's stream holds one, each request in flight one.
    wait_for_site : float, default=30
        Seconds a request waits for its site to (re)connect.
    """

    def __init__(self, *, listen, ca, cert, key, max_workers=256, wait_for_site=WAIT_FOR_SITE):
        grpc = _grpc()
        cert, key, ca = (Path(p).read_bytes() for p in (cert, key, ca))
        role, name = certificate_identity(cert)
        if role != ROLE_RELAY:
            raise ValueError(f"the relay's certificate is bound to role {role!r} ({name!r}), "
                             "not 'relay'; use one make_certificates(relays=[...]) wrote.")
        self.name, self.wait_for_site = name, float(wait_for_site)
        self._links, self._cond = {}, threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                                   options=_OPTIONS + KEEPALIVE)
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "Connect": grpc.stream_stream_rpc_method_handler(self._connect),
            "Call": grpc.unary_unary_rpc_method_handler(self._call),
            "Certificate": grpc.unary_unary_rpc_method_handler(self._certificate)})
        self._server.add_generic_rpc_handlers((handler,))
        credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                                  require_client_auth=True)
        self.port = self._server.add_secure_port(listen, credentials)
        if self.port == 0:
            raise OSError(f"the relay cannot listen on {listen!r}.")

    # -- the sites' streams ----------------------------------------------------
    def _connect(self, replies, context):
        grpc = _grpc()
        role, name = peer_identity(context)
        if role != ROLE_SITE:
            _LOG.warning("refused a stream from a %s certificate (%r)", role, name)
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          "only a site's certificate may open a site stream")
        link = SiteLink(name, context.auth_context()["x509_pem_cert"][0])
        with self._cond:
            old, self._links[name] = self._links.get(name), link
            self._cond.notify_all()
        if old is not None:  # a reconnect: requests on the old stream are lost
            old.close()
        context.add_callback(link.close)
        threading.Thread(target=self._read, args=(link, replies), daemon=True).start()
        _LOG.info("site %r connected", name)
        yield from link.stream(context)

    def _read(self, link, replies):
        try:
            for data in replies:
                link.resolve(data)
        except Exception:  # the stream ended (the site left, or the network)
            pass
        link.close()
        with self._cond:
            if self._links.get(link.name) is link:
                del self._links[link.name]

    def _link(self, site, timeout):
        """The site's stream, waiting up to ``timeout`` for it to (re)connect."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                link = self._links.get(site)
                if link is not None and not link.closed.is_set():
                    return link
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    # -- the analysts' requests -------------------------------------------------
    def _analyst(self, context):
        role, name = peer_identity(context)
        if role != ROLE_ANALYST:
            context.abort(_grpc().StatusCode.PERMISSION_DENIED,
                          "only an analyst's certificate may send requests through the relay")
        return name

    def _remaining(self, context):
        left = context.time_remaining()
        return self.wait_for_site if left is None else max(0.0, left)

    def _certificate(self, request, context):
        self._analyst(context)
        site = request.decode("utf-8", "replace")[:64]
        link = self._link(site, min(self.wait_for_site, self._remaining(context)))
        if link is None:
            context.abort(_grpc().StatusCode.UNAVAILABLE,
                          f"site {site!r} is not connected to the relay")
        return link.certificate.encode() if isinstance(link.certificate, str) \
            else link.certificate

    def _call(self, request, context):
        grpc = _grpc()
        self._analyst(context)
        try:
            site, envelope = _unpack(request, 2)
            site = site.decode()
        except (ValueError, UnicodeDecodeError):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not a relay request")
        reply = self.forward(site, envelope, self._remaining(context))
        if reply is None:
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          f"site {site!r} did not answer through the relay (not connected, "
                          "or its stream broke)")
        return reply

    def forward(self, site, envelope, timeout):
        """Put ``envelope`` on ``site``'s stream; its reply (``None``: none came)."""
        start = time.monotonic()
        link = self._link(site, min(self.wait_for_site, timeout))
        if link is None:
            return None
        return link.send(envelope, max(0.0, timeout - (time.monotonic() - start)))

    def connected(self):
        """The names of the sites whose streams are open."""
        with self._cond:
            return sorted(n for n, link in self._links.items() if not link.closed.is_set())

    def start(self):
        self._server.start()
        return self

    def wait(self):
        self._server.wait_for_termination()

    def stop(self, grace=1.0):
        with self._cond:
            links = list(self._links.values())
        for link in links:
            link.close()
        self._server.stop(grace).wait()


def load_relay_config(path):
    """``{"listen", "ca", "cert", "key"}`` of a relay's TOML file (paths relative to it)::

        [relay]
        listen = "0.0.0.0:7443"
        [tls]
        ca = "certs/ca.pem"
        cert = "certs/relay.pem"
        key = "certs/relay.key"

    Raises ``ValueError`` naming every problem (an unknown table or key included)."""
    import tomllib

    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"no relay configuration at {str(path)!r}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not valid TOML: {exc}.") from None
    tables = {"relay": ("listen", "wait_for_site"), "tls": ("ca", "cert", "key")}
    problems = [f"an unknown table [{t}]" for t in raw if t not in tables]
    for table, keys in tables.items():
        value = raw.get(table)
        if not isinstance(value, dict):
            problems.append(f"a [{table}] table is needed")
            continue
        problems += [f"[{table}] has an unknown key {k!r}" for k in value if k not in keys]
        problems += [f"[{table}] needs {k}" for k in keys
                     if k not in value and k != "wait_for_site"]
    if problems:
        raise ValueError(f"{str(path)!r}: " + "; ".join(problems) + ".")
    base = path.resolve().parent
    config = {k: base / raw["tls"][k] for k in tables["tls"]}
    config["listen"] = str(raw["relay"]["listen"])
    if "wait_for_site" in raw["relay"]:
        config["wait_for_site"] = float(raw["relay"]["wait_for_site"])
    return config
