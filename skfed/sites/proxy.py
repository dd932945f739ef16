"""Whether a dial-out site's stream to its relay goes through an HTTP ``CONNECT`` proxy.

``HTTPS_PROXY`` (or ``https_proxy``) names the proxy; ``NO_PROXY`` (or ``no_proxy``)
the addresses reached directly, in the forms curl, Python's ``urllib`` and Go share:
a comma-separated list (spaces ignored, case-insensitive) of

- ``*``: every address;
- a host name, ``relay.example.org``, or a domain, ``example.org`` or
  ``.example.org`` (a leading dot changes nothing): that name and every name under
  it (``relay.example.org`` matches ``example.org``; ``badexample.org`` does not);
- ``name:port``: that name (as above) on that port only;
- an IP address, ``10.0.0.5`` or ``::1`` (``[::1]:7443`` with a port): that address;
- a CIDR block, ``10.0.0.0/8`` or ``fd00::/8``: every IP address in it.

Names are compared as written, never resolved: a CIDR block matches a relay given by
its IP address, not a name that resolves into the block (as curl and Go do).
"""

import ipaddress
import os

__all__ = ["bypasses_proxy", "proxy_options"]


def proxy_options(target, environ=None):
    """The gRPC channel options for the stream to ``target`` (``host:port``): the
    proxy of ``HTTPS_PROXY`` / ``https_proxy``, unless ``NO_PROXY`` / ``no_proxy``
    matches ``target`` (see the module docstring); none if no proxy is set.

    A matched target turns gRPC's own proxy lookup off too: gRPC reads the lower-case
    variables itself, and its ``no_proxy`` rules are not these.
    """
    environ = os.environ if environ is None else environ
    url = environ.get("HTTPS_PROXY") or environ.get("https_proxy")
    if not url:
        return []
    if bypasses_proxy(target, environ.get("NO_PROXY") or environ.get("no_proxy") or ""):
        return [("grpc.enable_http_proxy", 0)]
    return [("grpc.http_proxy", url)]


def _split(address):
    """``(host, port)`` of ``host:port``, ``[v6]:port``, ``v6`` or ``host`` (port ``None``),
    the host lower-case without brackets or a trailing dot (a gRPC ``dns:///`` target
    names its host after the scheme)."""
    address = address.strip().split("///", 1)[-1]
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif address.count(":") == 1:
        host, port = address.split(":")
    else:  # a bare name, or an IPv6 address without brackets
        host, port = address, None
    return host.lower().rstrip("."), (port or None)


def _ip(host):
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _matches(entry, host, port):
    if entry == "*":
        return True
    if "/" in entry:  # a CIDR block: IP addresses only
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
        address = _ip(host)
        return address is not None and address.version == network.version \
            and address in network
    name, entry_port = _split(entry)
    if entry_port is not None and entry_port != port:
        return False
    name = name.lstrip(".")
    if _ip(name) is not None or _ip(host) is not None:
        return _ip(name) == _ip(host)
    return bool(name) and (host == name or host.endswith("." + name))


def bypasses_proxy(target, no_proxy):
    """Whether ``no_proxy`` (a ``NO_PROXY`` value) matches ``target`` (``host:port``).

    Parameters
    ----------
    target : str
        The relay's address, ``host:port`` (``[v6]:port`` for an IPv6 address).
    no_proxy : str
        Comma-separated entries (see the module docstring); empty: none.

    Returns
    -------
    bool
    """
    host, port = _split(target)
    entries = [e.strip().lower() for e in no_proxy.replace(" ", ",").split(",")]
    return any(_matches(entry, host, port) for entry in entries if entry)
