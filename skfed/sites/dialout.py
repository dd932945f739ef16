"""A site that only dials out: its service over one outbound stream to a relay.

With ``[site] relay = "host:port"`` in ``site.toml``, ``skfed site serve``
opens no listening socket: it connects *out* to the relay
(:mod:`skfed.sites.relay`) with its site certificate, and answers the requests
that arrive on that stream. Each request is an envelope
(:mod:`skfed.sites.envelope`) the site opens with its certificate key: who
asks is the analyst whose certificate signed it (the gate, the audit log, the
privacy ledger and every per-analyst record read that name, never the
relay's); a request that is altered, replayed, reordered, expired, for another
site or not an analyst's is refused, written to the audit and officer logs,
and answered with a refusal in the clear (it holds the reason only).

The stream reconnects with exponential backoff (0.5 s doubling to 30 s, with
jitter) when it breaks; the fit sessions live in the site's process, so a fit
goes on across a reconnect between its rounds. An HTTP ``CONNECT`` proxy in
``HTTPS_PROXY`` (or ``https_proxy``) carries the stream (TLS stays end to end),
unless ``NO_PROXY`` (or ``no_proxy``) names the relay (:mod:`skfed.sites.proxy`).
"""

import logging
import queue
import random
import threading
import time
from concurrent import futures

from ..deploy.certificates import RELAY_HOST, ROLE_SITE, certificate_identity
from .envelope import EnvelopeError, Opener, ReplayRecord, refusal
from .proxy import proxy_options
from .relay import KEEPALIVE, SERVICE, drain, frame, unframe
from .transport import _OPTIONS, _grpc

_LOG = logging.getLogger("skfed.site")
#: the reconnect backoff: first wait, longest wait (seconds)
BACKOFF = (0.5, 30.0)
#: the replay record's file, in the site's folder
REPLAY_FILE = "relay-replay.json"


class DialOutSite:
    """A site service over an outbound stream to a relay (no listening socket).

    Parameters
    ----------
    config : skfed.sites.policy.SiteConfig
        With ``relay`` set.
    max_workers : int, default=4
        Requests answered at once.
    """

    def __init__(self, config, *, max_workers=4):
        from .host import SiteHost

        cert, key, ca = config.cert.read_bytes(), config.key.read_bytes(), config.ca.read_bytes()
        role, name = certificate_identity(cert)
        if role != ROLE_SITE or name != config.name:
            raise ValueError(f"the certificate {str(config.cert)!r} is not site "
                             f"{config.name!r}'s (it is bound to role {role!r}, name "
                             f"{name!r}); use the site certificate skfed.deploy.make_certificates "
                             "wrote for this site.")
        self.config, self.relay = config, config.relay
        self.host = SiteHost(config)
        self.opener = Opener(config.name, cert, key, ca,
                             ReplayRecord(config.data_dir / REPLAY_FILE))
        self._credentials = (ca, key, cert)
        self._pool = futures.ThreadPoolExecutor(max_workers=max_workers)
        self._stopped, self.connected = threading.Event(), threading.Event()
        self.reconnects = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def wait(self):
        while not self._stopped.wait(1.0):
            pass

    def stop(self, grace=1.0):
        self._stopped.set()
        channel = getattr(self, "_channel", None)
        if channel is not None:
            channel.close()
        self._thread.join(grace + 5)
        self._pool.shutdown(wait=True)
        self.host.close()

    def _run(self):
        wait = BACKOFF[0]
        while not self._stopped.is_set():
            began = time.monotonic()
            try:
                self._session()
            except Exception as exc:  # the stream broke: reconnect after a while
                if not self._stopped.is_set():
                    _LOG.warning("relay stream to %s ended: %s", self.relay, exc)
            self.connected.clear()
            if time.monotonic() - began > 10 * BACKOFF[0]:  # it had been up: start over
                wait = BACKOFF[0]
            if self._stopped.wait(wait * random.uniform(0.5, 1.0)):
                return
            wait = min(2 * wait, BACKOFF[1])
            self.reconnects += 1

    def _session(self):
        grpc = _grpc()
        ca, key, cert = self._credentials
        credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                                   certificate_chain=cert)
        options = (_OPTIONS + KEEPALIVE + proxy_options(self.relay)
                   + [("grpc.ssl_target_name_override", RELAY_HOST)])
        self._channel = channel = grpc.secure_channel(self.relay, credentials,
                                                      options=options)
        outgoing = queue.Queue()
        try:
            stream = channel.stream_stream(f"/{SERVICE}/Connect")(drain(outgoing))
            for data in stream:
                self.connected.set()
                self._pool.submit(self._answer, data, outgoing)
        finally:
            outgoing.put(None)
            channel.close()

    def _answer(self, data, outgoing):
        try:
            ident, envelope = unframe(data)
        except ValueError:
            return
        try:
            opened = self.opener.open(envelope)
        except EnvelopeError as exc:
            self._refused(exc)
            outgoing.put(frame(ident, refusal(f"site {self.config.name!r} refused the "
                                              f"envelope ({exc.reason}): {exc}")))
            return
        except Exception as exc:  # never let one bad frame end the stream
            self._refused(EnvelopeError("malformed", f"{type(exc).__name__}: {exc}"))
            outgoing.put(frame(ident, refusal(f"site {self.config.name!r} refused the "
                                              "envelope (malformed)")))
            return
        reply = self.host.handle(opened.analyst, opened.request)
        outgoing.put(frame(ident, opened.seal(reply)))

    def _refused(self, exc):
        """An envelope refused: to the audit log and the officer's log (with the analyst
        when its signature held: an expired, replayed or reordered request)."""
        analyst = getattr(exc, "analyst", None)
        self.host.audit.record(analyst=analyst, operation=None, outcome="refused",
                               rule="envelope", reason=f"{exc.reason}: {exc}")
        self.host.officer.write(analyst=analyst, operation=None, rule="envelope",
                                detail=f"{exc.reason}: {exc}")

