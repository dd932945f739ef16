"""Relays for tests: dial-out site processes, a relay that records or tampers, and a
small HTTP CONNECT proxy."""

import select
import socket
import sys
import threading
import time
from pathlib import Path

from skfed.sites.relay import RelayServer

from ._sites import site_config, spawn_service


def relay_site_config(folder, name, relay, **options):
    """``site_config`` of a site that dials out to ``relay`` (``[site] relay``, no listen)."""
    path = site_config(folder, name, **options)
    lines = [f'relay = "{relay}"' if line.startswith("listen = ") else line
             for line in Path(path).read_text().splitlines()]
    Path(path).write_text("\n".join(lines) + "\n")
    return path


def start_dialout_site(config, env=None, timeout=60):
    """``skfed site serve config`` of a dial-out site; returns the process once it runs."""
    return spawn_service([sys.executable, "-m", "skfed", "site", "serve", str(config)],
                         "through relay", env, timeout)[0]


def start_relay_process(config, env=None, timeout=60):
    """``skfed relay serve config``; returns ``(process, port)``."""
    proc, line = spawn_service([sys.executable, "-m", "skfed", "relay", "serve", str(config)],
                               " on port ", env, timeout)
    return proc, int(line.rsplit(" ", 1)[1])


def relay_toml(path, certs, name="relay", listen="127.0.0.1:0"):
    Path(path).write_text(f'[relay]\nlisten = "{listen}"\n[tls]\nca = "{certs.ca.cert}"\n'
                          f'cert = "{certs.relays[name].cert}"\n'
                          f'key = "{certs.relays[name].key}"\n')
    return path


class TestRelay(RelayServer):
    """A relay that records every byte it forwards and, when told, tampers.

    ``mode``: ``None`` (forward), ``"forge"`` (flip one byte of the next request),
    ``"replay"`` (forward the next request twice), ``"hold"`` (keep the next request,
    answer nothing; :meth:`release` sends it later), ``"break"`` (close the site's stream
    after the next reply: the site reconnects).
    """

    __test__ = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.recorded, self.mode, self.held, self.extra = [], None, None, []
        self._mode_lock = threading.Lock()

    def set_mode(self, mode):
        with self._mode_lock:
            self.mode = mode

    def _take_mode(self):
        with self._mode_lock:
            mode, self.mode = self.mode, None
            return mode

    def forward(self, site, envelope, timeout):
        mode = self._take_mode()
        self.recorded.append(bytes(envelope))
        if mode == "forge":
            envelope = bytearray(envelope)
            envelope[len(envelope) // 2] ^= 0x01
            envelope = bytes(envelope)
        if mode == "hold":  # the analyst waits past its deadline: a drop
            self.held = (site, envelope)
            time.sleep(timeout + 1.0)
            return None
        reply = super().forward(site, envelope, timeout)
        if mode == "replay":
            self.extra.append(super().forward(site, envelope, timeout))
        if mode == "break":
            self.disconnect(site)
        if reply is not None:
            self.recorded.append(bytes(reply))
        return reply

    def release(self, timeout=30):
        """Send the held request now (after its successors); the site's answer."""
        site, envelope = self.held
        self.held = None
        return super().forward(site, envelope, timeout)


class ConnectProxy:
    """An HTTP CONNECT proxy on 127.0.0.1 (a thread per tunnel); ``requests`` lists the
    ``host:port`` each CONNECT asked for."""

    def __init__(self):
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port, self.requests = self._sock.getsockname()[1], []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client):
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode()
        method, target = line.split(" ")[:2]
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            client.close()
            return
        self.requests.append(target)
        host, port = target.rsplit(":", 1)
        try:
            upstream = socket.create_connection((host, int(port)))
        except OSError:  # the relay is down (a test restarts it): what a proxy answers
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            client.close()
            return
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        _pipe(client, upstream)

    def close(self):
        self._stop = True
        self._sock.close()


def _pipe(a, b):
    sockets = [a, b]
    try:
        while True:
            ready, _, _ = select.select(sockets, [], [], 1.0)
            for s in ready:
                data = s.recv(65536)
                if not data:
                    return
                (b if s is a else a).sendall(data)
    except OSError:
        pass
    finally:
        a.close()
        b.close()


def wait_until(predicate, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False
