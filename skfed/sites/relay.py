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
8-byte id and an envelope), ``Open`` (an analyst's stream: frames are an id,
the seconds the analyst waits, a site's name and an envelope; answered by the
id and the site's reply or the relay's error), ``Call`` (one request as a call
of its own: a site's name and an envelope) and ``Certificate`` (a connected
site's certificate, which the analyst checks against the CA before sealing
anything to it).
"""

import asyncio
import itertools
import logging
import struct
import threading
from concurrent import futures
from pathlib import Path

from ..deploy.certificates import ROLE_ANALYST, ROLE_RELAY, ROLE_SITE, certificate_identity
from .envelope import _pack, _unpack
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


def drain(outgoing):
    """The items put on the queue ``outgoing`` until ``None`` (a stream's messages)."""
    while True:
        item = outgoing.get()
        if item is None:
            return
        yield item


def analyst_frame(ident, site, envelope, timeout):
    """An analyst's request on its stream: the id, the seconds it waits, the site, the
    envelope."""
    return frame(ident, struct.pack(">d", timeout) + _pack(site.encode(), envelope))


def relay_reply(ident, reply=None, error=None):
    """The relay's answer on an analyst's stream: the site's reply, or the relay's error."""
    return frame(ident, b"\0" + reply if error is None else b"\1" + error.encode())


class SiteLink:
    """One connected site's stream at the relay: requests out, replies matched by id
    (on the relay's event loop only)."""

    def __init__(self, name, certificate):
        self.name, self.certificate = name, certificate
        self.outgoing, self.closed = asyncio.Queue(), False
        self._pending, self._ids = {}, itertools.count(1)

    async def send(self, envelope, timeout):
        """The site's reply to ``envelope``, or ``None`` if the stream broke or
        ``timeout`` passed."""
        if self.closed:
            return None
        ident = next(self._ids)
        reply = self._pending[ident] = asyncio.get_running_loop().create_future()
        self.outgoing.put_nowait(frame(ident, envelope))
        try:
            return await asyncio.wait_for(reply, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self._pending.pop(ident, None)

    def resolve(self, data):
        ident, reply = unframe(data)
        future = self._pending.pop(ident, None)
        if future is not None and not future.done():  # else late, or a forged id: dropped
            future.set_result(reply)

    def close(self):
        if self.closed:
            return
        self.closed, pending, self._pending = True, list(self._pending.values()), {}
        for future in pending:
            if not future.done():
                future.set_result(None)
        self.outgoing.put_nowait(None)


class RelayServer:
    """A running relay (``skfed relay serve CONFIG``).

    The relay is one asyncio event loop (``grpc.aio``) in a thread of its own: a
    request goes from the analyst's call onto its site's stream, and the reply back,
    without a hand-off between threads (each cost about as much as the envelope's
    cryptography on a loaded machine).

    Parameters
    ----------
    listen : str
        ``host:port`` to listen on (port 0: any free port, see :attr:`port`).
    ca, cert, key : path-like
        The federation's CA certificate, and the relay's certificate (relay role) and key.
    max_workers : int, default=256
        Threads for a :meth:`forward` a subclass overrides (a recording relay in the
        tests); the relay's own forwarding needs none.
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
        self._links, self._stopped = {}, threading.Event()
        # a subclass's forward (blocking) runs in a thread; the relay's own in the loop
        self._threads = (None if type(self).forward is RelayServer.forward
                         else futures.ThreadPoolExecutor(max_workers=max_workers))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="skfed-relay")
        self._thread.start()
        credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                                  require_client_auth=True)
        try:
            self.port = self._run(self._serve(listen, credentials))
        except BaseException:
            self._end_loop()
            raise

    def _run(self, coroutine):
        """Run ``coroutine`` on the relay's loop from another thread; its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _serve(self, listen, credentials):
        grpc = _grpc()
        self._arrival = asyncio.Event()  # set (and replaced) whenever a site connects
        self._server = grpc.aio.server(options=_OPTIONS + KEEPALIVE)
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "Connect": grpc.stream_stream_rpc_method_handler(self._connect),
            "Open": grpc.stream_stream_rpc_method_handler(self._open),
            "Call": grpc.unary_unary_rpc_method_handler(self._call),
            "Certificate": grpc.unary_unary_rpc_method_handler(self._certificate)})
        self._server.add_generic_rpc_handlers((handler,))
        try:
            port = self._server.add_secure_port(listen, credentials)
        except RuntimeError:
            port = 0
        if port == 0:
            raise OSError(f"the relay cannot listen on {listen!r}.")
        return port

    # -- the sites' streams ----------------------------------------------------
    async def _connect(self, replies, context):
        grpc = _grpc()
        role, name = peer_identity(context)
        if role != ROLE_SITE:
            _LOG.warning("refused a stream from a %s certificate (%r)", role, name)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                "only a site's certificate may open a site stream")
        link = SiteLink(name, context.auth_context()["x509_pem_cert"][0])
        old, self._links[name] = self._links.get(name), link
        self._arrival.set()
        self._arrival = asyncio.Event()
        if old is not None:  # a reconnect: requests on the old stream are lost
            old.close()
        reader = asyncio.ensure_future(self._read(link, replies))
        _LOG.info("site %r connected", name)
        try:
            while True:
                item = await link.outgoing.get()
                if item is None:
                    return
                await context.write(item)
        finally:
            link.close()
            reader.cancel()
            if self._links.get(name) is link:
                del self._links[name]

    @staticmethod
    async def _read(link, replies):
        try:
            async for data in replies:
                link.resolve(data)
        except Exception:  # the stream ended (the site left, or the network)
            pass
        link.close()

    async def _link(self, site, timeout):
        """The site's stream, waiting up to ``timeout`` for it to (re)connect."""
        end = self._loop.time() + timeout
        while True:
            link = self._links.get(site)
            if link is not None and not link.closed:
                return link
            left = end - self._loop.time()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(self._arrival.wait(), left)
            except asyncio.TimeoutError:
                return None

    # -- the analysts' requests -------------------------------------------------
    async def _analyst(self, context):
        role, name = peer_identity(context)
        if role != ROLE_ANALYST:
            await context.abort(_grpc().StatusCode.PERMISSION_DENIED,
                                "only an analyst's certificate may send requests through "
                                "the relay")
        return name

    def _remaining(self, context):
        left = context.time_remaining()
        return self.wait_for_site if left is None else max(0.0, left)

    async def _certificate(self, request, context):
        await self._analyst(context)
        site = request.decode("utf-8", "replace")[:64]
        link = await self._link(site, min(self.wait_for_site, self._remaining(context)))
        if link is None:
            await context.abort(_grpc().StatusCode.UNAVAILABLE,
                                f"site {site!r} is not connected to the relay")
        return link.certificate.encode() if isinstance(link.certificate, str) \
            else link.certificate

    async def _open(self, requests, context):
        """An analyst's stream: its requests answered in turn (a message on a stream
        costs the relay about half a call's CPU)."""
        await self._analyst(context)
        async for data in requests:
            try:
                ident, body = unframe(data)
                (timeout,), (site, envelope) = struct.unpack_from(">d", body), \
                    _unpack(body[8:], 2)
                site = site.decode()
            except (ValueError, UnicodeDecodeError, struct.error):
                await context.abort(_grpc().StatusCode.INVALID_ARGUMENT,
                                    "not a relay request")
            if not 0 <= timeout < float("inf"):
                timeout = self.wait_for_site
            reply = await self._relayed(site, envelope, timeout)
            await context.write(relay_reply(ident, reply, None if reply is not None
                                            else _unanswered(site)))

    async def _call(self, request, context):
        """One request as a call of its own (``Call``; the analysts' streams are
        cheaper)."""
        grpc = _grpc()
        await self._analyst(context)
        try:
            site, envelope = _unpack(request, 2)
            site = site.decode()
        except (ValueError, UnicodeDecodeError):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not a relay request")
        reply = await self._relayed(site, envelope, self._remaining(context))
        if reply is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, _unanswered(site))
        return reply

    async def _relayed(self, site, envelope, timeout):
        if self._threads is None:
            return await self._forward(site, envelope, timeout)
        return await self._loop.run_in_executor(self._threads, self.forward, site, envelope,
                                                timeout)

    async def _forward(self, site, envelope, timeout):
        start = self._loop.time()
        link = await self._link(site, min(self.wait_for_site, timeout))
        if link is None:
            return None
        return await link.send(envelope, max(0.0, timeout - (self._loop.time() - start)))

    def forward(self, site, envelope, timeout):
        """Put ``envelope`` on ``site``'s stream; its reply (``None``: none came). Called
        from any thread but the relay's loop."""
        return self._run(self._forward(site, envelope, timeout))

    def disconnect(self, site):
        """Close ``site``'s stream (it reconnects); from any thread but the relay's loop."""
        async def close():
            link = self._links.get(site)
            if link is not None:
                link.close()

        self._run(close())

    def connected(self):
        """The names of the sites whose streams are open."""
        return sorted(n for n, link in list(self._links.items()) if not link.closed)

    def start(self):
        self._run(self._server.start())
        return self

    def wait(self):
        while not self._stopped.wait(1.0):
            pass

    def stop(self, grace=1.0):
        if self._stopped.is_set():
            return
        self._stopped.set()

        async def stop():
            for link in list(self._links.values()):
                link.close()
            await self._server.stop(grace)

        try:
            self._run(stop())
        finally:
            self._end_loop()

    def _end_loop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        if self._threads is not None:
            self._threads.shutdown(wait=False)


def _unanswered(site):
    return (f"site {site[:64]!r} did not answer through the relay (not connected, or its "
            "stream broke)")


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
