"""Certificates for a federation's mutually authenticated TLS, and Dask ``Security``.

A small private certificate authority (CA) signs one certificate for the
coordinator (the Dask scheduler), one per site (its Dask worker) and one for
the analyst (the Dask client). Every process presents its certificate and
accepts only peers whose certificate the same CA signed, so a machine without
one of these certificates can neither submit work nor join as a site.

This is meant for tests, demonstrations and small federations. An
organization with its own public key infrastructure should issue the
certificates from it instead: :func:`tls_security` only needs the files.
"""

import datetime
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .._messages import show

#: file stems of the non-site certificates; sites may not take these names
CA, COORDINATOR, ANALYST = "ca", "coordinator", "analyst"
#: the DNS name every relay certificate holds: sites and analysts reach "a relay"
RELAY_HOST = "skfed-relay"
_RESERVED = {CA, COORDINATOR, ANALYST, RELAY_HOST}
#: the folder (inside the certificates' directory) that holds the CA's private key
CA_PRIVATE = "ca-private"
#: a site name becomes a file name and a certificate CN (at most 64 characters)
_SITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ROLES = {"scheduler": COORDINATOR, "client": ANALYST, "worker": None}


@dataclass(frozen=True)
class KeyPair:
    """Paths of one PEM certificate and its private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    """What :func:`make_certificates` wrote.

    Attributes
    ----------
    directory : pathlib.Path
        The directory holding every file.
    ca : KeyPair
        The certificate authority (``ca.pem``, ``ca-private/ca.key``). Keep ``ca.key``
        off the sites' machines: whoever holds it can admit new members.
    scheduler : KeyPair
        The coordinator's certificate (``coordinator.pem``, ``coordinator.key``).
    client : KeyPair
        The analyst's certificate (``analyst.pem``, ``analyst.key``).
    sites : dict of str to KeyPair
        One certificate per site (``<site>.pem``, ``<site>.key``), in the
        order given.
    analysts : dict of str to KeyPair
        The further analysts' certificates (``analysts=``).
    relays : dict of str to KeyPair
        The relays' certificates (``relays=``).
    """

    directory: Path
    ca: KeyPair
    scheduler: KeyPair
    client: KeyPair
    sites: dict
    analysts: dict = None
    relays: dict = None


def check_site_name(name):
    """Return ``name`` if it can name a site's certificate files; else ``ValueError``.

    Parameters
    ----------
    name : str
        A site name: 1 to 64 letters, digits, ``.``, ``_`` or ``-``,
        starting with a letter or digit, and not ``ca``, ``coordinator`` or
        ``analyst`` (the other certificates' files).

    Returns
    -------
    name : str
        The name, unchanged.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a site name must be a non-empty string; got {name!r}.")
    if not _SITE_NAME.fullmatch(name):
        raise ValueError(
            f"site name {name!r} cannot name a certificate file: use 1 to 64 letters, digits, "
            "'.', '_' or '-', starting with a letter or a digit (no '/', spaces or '..').")
    if name.lower() in _RESERVED:
        raise ValueError(f"site name {name!r} is reserved for the {name.lower()} certificate; "
                         "choose another name for the site.")
    return name


def _check_sites(sites):
    if isinstance(sites, str) or not hasattr(sites, "__iter__"):
        raise ValueError(f"sites must be a list of site names, not {sites!r} "
                         "(for one site, pass ['name']).")
    sites = [check_site_name(s) for s in sites]
    if not sites:
        raise ValueError("sites is empty: a federation needs at least one site.")
    seen = {}
    for s in sites:  # case-insensitive: 'A.pem' and 'a.pem' are one file on some systems
        if s.lower() in seen:
            raise ValueError(f"site names must be unique; {seen[s.lower()]!r} and {s!r} "
                             "would share a certificate file.")
        seen[s.lower()] = s
    return sites


def _san(hosts):
    from cryptography import x509

    if isinstance(hosts, str):
        hosts = [hosts]
    names = []
    for host in hosts:
        if not isinstance(host, str) or not host:
            raise ValueError(f"hosts must be non-empty host names or IP addresses; got {host!r}.")
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    if not names:
        raise ValueError("hosts is empty: give at least one host name or IP address.")
    return x509.SubjectAlternativeName(names)


#: the role a certificate is bound to, written as its subject's organizational unit
ROLE_SITE, ROLE_ANALYST, ROLE_COORDINATOR, ROLE_CA = "site", "analyst", "coordinator", "ca"
ROLE_RELAY = "relay"
_ROLE_UNIT = "skfed {}"


def _name(common_name, role):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "skfed federation"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME,
                                         _ROLE_UNIT.format(role)),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def certificate_identity(pem):
    """``(role, name)`` a certificate is bound to (:func:`make_certificates`).

    Parameters
    ----------
    pem : bytes or str
        A PEM certificate.

    Returns
    -------
    role : str or None
        ``"site"``, ``"analyst"``, ``"coordinator"`` or ``"ca"``; ``None`` for
        a certificate that names no skfed role.
    name : str or None
        Its common name (a site's name for a site certificate).
    """
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_pem_x509_certificate(pem.encode() if isinstance(pem, str) else pem)
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    roles = [u.value[len("skfed "):] for u in units if str(u.value).startswith("skfed ")]
    role = roles[0] if len(roles) == 1 else None
    return role, (str(names[0].value) if len(names) == 1 else None)


def _hosts(hosts):
    return [hosts] if isinstance(hosts, str) else list(hosts)


def _builder(subject, issuer, public_key, days):
    from cryptography import x509

    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            # a few minutes of slack for machines whose clocks disagree a little
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key),
                           critical=False))


def _key_usage(*, ca):
    from cryptography import x509

    return x509.KeyUsage(digital_signature=True, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False)


def _make_ca(days):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("skfed federation CA", ROLE_CA)
    cert = (_builder(name, name, key.public_key(), days)
            # path_length=0: the CA signs members only, never another CA
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _make_leaf(common_name, role, san, ca_key, ca_cert, days):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (_builder(_name(common_name, role), ca_cert.subject, key.public_key(), days)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            # every Dask process both accepts connections and opens them (the
            # scheduler calls workers, workers call each other): both usages
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(san, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def _write(path, data, mode):
    """Write ``data`` to ``path`` readable only as ``mode`` allows (also under a lax umask).

    A symbolic link at ``path`` is refused, never followed: it could point a
    private key at a file another user reads."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                     mode)
    except OSError as exc:
        if os.path.islink(path):
            raise FileExistsError(f"{str(path)!r} is a symbolic link; refusing to write a "
                                  "key or certificate through it.") from None
        raise exc
    try:
        os.fchmod(fd, mode)  # the file may have existed with wider permissions
        os.write(fd, data)
    finally:
        os.close(fd)


def _save(pair, key, cert):
    from cryptography.hazmat.primitives import serialization

    # unencrypted PKCS#8: Dask loads keys without a passphrase; 0o600 protects them
    _write(pair.key, key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()), 0o600)
    _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _pair(directory, stem):
    return KeyPair(cert=directory / f"{stem}.pem", key=directory / f"{stem}.key")


def _check_names(sites, analysts, days, relays=()):
    """``(sites, analysts, relays)`` checked: names safe as file names, no name with two
    roles, and ``days`` a positive integer."""
    sites = _check_sites(sites)
    analysts = _check_sites(list(analysts)) if len(analysts) else []
    relays = _check_sites(list(relays)) if len(relays) else []
    for other, kind in ((analysts, "an analyst"), (relays, "a relay")):
        clash = {s.lower() for s in sites} & {a.lower() for a in other}
        if clash:
            raise ValueError(f"{sorted(clash)[0]!r} names both a site and {kind}: a "
                             "certificate has one role.")
    if {a.lower() for a in analysts} & {r.lower() for r in relays}:
        raise ValueError("a name is both an analyst's and a relay's: a certificate has one "
                         "role.")
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"days must be a positive integer; got {show(days)}.")
    return sites, analysts, relays


def _refuse_existing(pairs):
    existing = [str(p) for pair in pairs for p in (pair.cert, pair.key) if p.exists()]
    if existing:
        raise FileExistsError(f"certificate files exist already: {existing}; pass "
                              "overwrite=True to replace them (and the CA with them).")


def make_certificates(directory, sites, *, hosts=("localhost", "127.0.0.1"), days=30,
                      overwrite=False, analysts=(), relays=()):
    """Create a certificate authority and the certificates of a federation.

    Writes, in ``directory``: ``ca.pem`` (the authority; its key apart, in
    ``ca-private/ca.key``),
    ``coordinator.pem`` / ``.key`` (the Dask scheduler), ``analyst.pem`` /
    ``.key`` (the Dask client) and ``<site>.pem`` / ``<site>.key`` for each
    site (its Dask worker or site service; the certificate's common name is
    the site name). Each certificate is bound to its role (its subject's
    organizational unit, ``skfed site``, ``skfed analyst`` or ``skfed
    coordinator``; see :func:`certificate_identity`): a site service accepts
    analyst certificates only, and a site's certificate also names the site
    as a DNS name, so that an analyst reaching ``hospital-a`` accepts no other
    certificate. Keys are ECDSA P-256, unencrypted PEM, with permissions ``0o600``;
    certificates are SHA-256 signed, valid for both TLS server and client
    authentication, and list ``hosts`` as subject alternative names.

    For tests, demonstrations and small federations: sites of an organization
    with its own public key infrastructure should use certificates from it
    (:func:`tls_security` only needs the files).

    Parameters
    ----------
    directory : str or os.PathLike
        Where to write the files; created (mode ``0o700``) if missing.
    sites : list of str
        Site names, unique (ignoring case), each 1 to 64 letters, digits,
        ``.``, ``_`` or ``-``, not ``ca``, ``coordinator`` or ``analyst``.
        Use the names the sites' workers will have (``dask worker --name``).
    hosts : sequence of str, default=("localhost", "127.0.0.1")
        Host names and IP addresses written as subject alternative names in
        the coordinator's, the analyst's and the sites' certificates. (Dask
        checks the CA signature, not host names, but other TLS tools do.)
    days : int, default=30
        Validity of every certificate, in days from now.
    overwrite : bool, default=False
        Replace existing files. By default existing files are an error: a new
        CA would silently invalidate the certificates already handed out.
    analysts : sequence of str, default=()
        Further analysts, each with a certificate of the analyst role
        (``<name>.pem`` / ``<name>.key``) and its own identity at the site
        services (policies name them; fit sessions are kept apart by it).
    relays : sequence of str, default=()
        Relays (``skfed relay serve``), each with a certificate of the relay role
        (``<name>.pem`` / ``<name>.key``) naming the host ``skfed-relay``, which
        sites and analysts check when they connect to one.

    Returns
    -------
    certificates : Certificates
        The paths of what was written.

    Raises
    ------
    ValueError
        A site name that is empty, repeated, reserved or unsafe as a file
        name; empty ``hosts``; ``days`` not a positive integer.
    FileExistsError
        A file to write exists and ``overwrite`` is false.

    Examples
    --------
    >>> import tempfile
    >>> from skfed.deploy import make_certificates, tls_security
    >>> certs = make_certificates(tempfile.mkdtemp(), ["hospital-a", "hospital-b"])
    >>> certs.sites["hospital-a"].cert.name
    'hospital-a.pem'
    >>> tls_security(certs, "worker", "hospital-a").require_encryption
    True
    """
    sites, analysts, relays = _check_names(sites, analysts, days, relays)
    san = _san(hosts)
    directory = Path(directory)
    ca, scheduler, client = (_pair(directory, s) for s in (CA, COORDINATOR, ANALYST))
    # the CA key apart, in a folder of its own: the folder handed to the sites and
    # the analyst (certificates and their keys) then need not hold it
    ca = KeyPair(cert=ca.cert, key=directory / CA_PRIVATE / f"{CA}.key")
    site_pairs = {s: _pair(directory, s) for s in sites}
    analyst_pairs = {a: _pair(directory, a) for a in analysts}
    relay_pairs = {r: _pair(directory, r) for r in relays}
    pairs = [ca, scheduler, client, *site_pairs.values(), *analyst_pairs.values(),
             *relay_pairs.values()]
    if not overwrite:
        _refuse_existing(pairs)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    (directory / CA_PRIVATE).mkdir(mode=0o700, exist_ok=True)
    ca_key, ca_cert = _make_ca(days)
    _save(ca, ca_key, ca_cert)
    for pair, cn, role in [(scheduler, COORDINATOR, ROLE_COORDINATOR),
                           (client, ANALYST, ROLE_ANALYST),
                           *((site_pairs[s], s, ROLE_SITE) for s in sites),
                           *((analyst_pairs[a], a, ROLE_ANALYST) for a in analysts),
                           *((relay_pairs[r], r, ROLE_RELAY) for r in relays)]:
        # a site's certificate also names the site (DNS name), so that an analyst
        # connecting to 'hospital-a' accepts hospital-a's certificate only
        extra = {ROLE_SITE: [cn], ROLE_RELAY: [RELAY_HOST]}.get(role)
        leaf_san = san if extra is None else _san([*_hosts(hosts), *extra])
        _save(pair, *_make_leaf(cn, role, leaf_san, ca_key, ca_cert, days))
    return Certificates(directory=directory, ca=ca, scheduler=scheduler, client=client,
                        sites=site_pairs, analysts=analyst_pairs, relays=relay_pairs)


def tls_security(directory, role, name=None):
    """A Dask ``Security`` for mutual TLS, from the files of :func:`make_certificates`.

    Parameters
    ----------
    directory : str, os.PathLike or Certificates
        The directory holding ``ca.pem`` and the role's certificate and key
        (or what :func:`make_certificates` returned).
    role : {"scheduler", "worker", "client"}
        Who uses it: the coordinator's scheduler (``coordinator.pem``), a
        site's worker (``<name>.pem``) or the analyst's client
        (``analyst.pem``).
    name : str, optional
        The site's name; required for ``role="worker"``, refused otherwise.

    Returns
    -------
    security : distributed.security.Security
        With ``require_encryption=True``, the CA file and the role's
        certificate and key. For ``"scheduler"`` the coordinator's
        certificate also serves the client role: a cluster object that owns
        the scheduler (``LocalCluster``, ``SpecCluster``) talks to it as a
        client.

    Raises
    ------
    ValueError
        An unknown role, a missing or unexpected ``name``, an invalid site name.
    FileNotFoundError
        The CA file, or the role's certificate or key, is missing.
    """
    from distributed.security import Security

    if isinstance(directory, Certificates):
        directory = directory.directory
    if role not in _ROLES:
        raise ValueError(f"role must be one of {sorted(_ROLES)}; got {role!r}.")
    if role == "worker":
        if name is None:
            raise ValueError("role='worker' needs name=<site name> (whose certificate to use).")
        stem = check_site_name(name)
    elif name is not None:
        raise ValueError(f"name is only for role='worker' (a site); role={role!r} uses "
                         f"{_ROLES[role]}.pem.")
    else:
        stem = _ROLES[role]
    directory = Path(directory)
    ca, pair = directory / f"{CA}.pem", _pair(directory, stem)
    missing = [str(p) for p in (ca, pair.cert, pair.key) if not p.is_file()]
    if missing:
        who = f"role={role!r}" + (f", site {name!r}" if name else "")
        raise FileNotFoundError(f"TLS files for {who} are missing: {missing} (create them with "
                                "skfed.deploy.make_certificates, or copy them from your PKI).")
    files = {"tls_ca_file": str(ca), f"tls_{role}_cert": str(pair.cert),
             f"tls_{role}_key": str(pair.key)}
    if role == "scheduler":
        files.update(tls_client_cert=str(pair.cert), tls_client_key=str(pair.key))
    return Security(require_encryption=True, **files)
