"""What a site checks before a masked or noisy reply leaves it.

Secure aggregation is set up through the server, the party it protects
against; a site service therefore does not take the server's word for it:

- **its key is signed**: the site signs ``(session, party, site name, public
  key, weight sum)`` with its certificate's key, and sends the signature and
  its certificate with its public key;
- **every peer key is verified** before the site masks anything: each peer's
  certificate must be a *site* certificate of the federation's CA, naming the
  site it claims, and its signature must cover the key the server relayed. A
  substituted key, a forged certificate or a replayed signature is refused;
- **the coefficients are the site's own**: a round's coefficient of a field
  must be what the public rule gives from the signed weight sums (``sum``: 1;
  ``weighted``: the site's share of the participants' weights, by samples or
  uniform; under differential privacy: 1), so the server cannot weigh one
  site by 1 and the others by 0;
- **one party set per dataset**: where the site names a *consortium* for the
  dataset (required where it requires secure aggregation), the key list must be
  exactly the consortium's sites and every masked round, monitor and sums pass
  must be over all of them: masked sums over different subsets of sites would give
  one site's sums by difference (``(ab + ac - bc) / 2``), so a lost site ends the
  fit, with the reason, and no reply is masked again for fewer sites;
- **no small rounds** (without a consortium): a round must list the site and at
  least ``max(2, min_sites)`` verified parties, and a pending reply is masked
  again (dropout recovery) at most once, for fewer parties;
- **no replays**: the exchange numbers of a session's masked messages must
  increase (a replayed exchange would use its one-time masks twice);
- **one answer per model, one recovery per round**: under differential
  privacy nothing is masked again (an honest fit stops on a lost site, and
  a recovery would leave one site's noise share alone in a difference of
  two sums), and a second round at a model the session has already
  answered is refused while the site adds noise; without noise a repeated
  model is answered (Newton evaluates its point again when its step
  vanishes) but never recovered, so one round's replies at a model are
  masked again at most once;
- under differential privacy the **noise is the site's**: it draws it with its
  operating system's randomness, at the standard deviation it computes from a
  noise multiplier and clip bound no weaker than its policy, and charges its
  own budget (:mod:`skfed.sites.ledger`) before the first noisy reply.
"""

import hashlib
from numbers import Integral

import numpy as np

from ..federation.operations import Refused as _Refused


def Refused(rule, detail):  # noqa: N802 (raised as the class is)
    """A refusal of a protocol message: its detail comes from the message (keys,
    coefficients, parties, exchanges), never from rows, so the analyst reads it."""
    return _Refused(rule, detail, public=True)

_DOMAIN = b"skfed secure aggregation key v1"


def key_payload(session, party, site, public_key, weight_sum):
    """The bytes a site signs for its key-agreement key."""
    site = site.encode()
    return b"|".join([_DOMAIN, bytes(session), str(int(party)).encode(), site,
                      bytes(public_key), float(weight_sum).hex().encode()])


def sign_release(private_key, payload):
    """The site's ECDSA (SHA-256) signature of ``payload`` with its certificate's key
    (PEM): what lets the other sites check a release the server relays."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_private_key(bytes(private_key), password=None)
    return key.sign(payload, ec.ECDSA(hashes.SHA256()))


def check_site_signature(ca, certificate, signature, payload, site):
    """Raise ``ValueError`` unless ``certificate`` is a *site* certificate of the CA
    (PEM) naming ``site`` and ``signature`` is its key's over ``payload``."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    from ..deploy.certificates import ROLE_SITE, certificate_identity

    try:
        cert = x509.load_pem_x509_certificate(bytes(certificate))
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(bytes(ca)))
        role, name = certificate_identity(bytes(certificate))
        if role != ROLE_SITE or name != site:
            raise ValueError("not that site's certificate")
        cert.public_key().verify(bytes(signature), payload, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ValueError("a signature that does not verify") from None


class SecureAggregationGuard:
    """One fit session's checks of the secure-aggregation messages at a site.

    Parameters
    ----------
    site : str
        This site's name.
    certificate, private_key : bytes
        This site's PEM certificate and key (its TLS identity signs its key).
    ca : bytes
        The federation's CA certificate (PEM).
    min_sites : int
        The policy's smallest number of participating sites.
    consortium : sequence of str, optional
        The sites every masked sum must be over, all of them (see the module).
    """

    def __init__(self, site, certificate, private_key, ca, min_sites, consortium=None):
        self.site, self.certificate, self.ca = site, certificate, ca
        self._key = private_key
        self.min_sites = max(2, int(min_sites))
        self.consortium = None if consortium is None else frozenset(consortium)
        self.session = self.party = None
        self.weights = None  # party -> signed weight sum, once the key list is verified
        self.last_exchange = None  # the last masked exchange answered (they must increase)
        self.last_parties, self.remasked, self.repeated = set(), False, False
        self.models = set()  # digests of the models of the rounds this session answered

    # -- key agreement -----------------------------------------------------
    def sign_key(self, message, reply, weight_sum):
        """Add the signature, certificate, name and weight sum to a ``keys`` reply."""
        self.session, self.party = bytes(message["session"]), int(message["party"])
        # new keys, new masks: exchanges count afresh, against a key list verified anew
        self.weights, self.last_exchange = None, None
        self.last_parties, self.remasked = set(), False
        payload = key_payload(self.session, self.party, self.site, reply["public_key"],
                              weight_sum)
        return dict(reply, signature=sign_release(self._key, payload),
                    certificate=self.certificate, site=self.site, weight_sum=float(weight_sum))

    def verify_key_list(self, message, own_key):
        """Check every relayed key against its site's signature before any masking."""
        if self.session is None:
            raise Refused("require", "a key list before this site's own key")
        keys, proofs = message.get("keys") or {}, message.get("proofs") or {}
        if set(keys) != set(proofs):
            raise Refused("require", "a relayed key carries no signature of its site (the "
                                     "key list cannot be verified)")
        names, weights = set(), {}
        for party, public in keys.items():
            proof = proofs[party]
            try:
                name = str(proof["site"])
                check_site_signature(self.ca, proof["certificate"], proof["signature"],
                                     key_payload(self.session, party, name, public,
                                                 proof["weight_sum"]), name)
            except (ValueError, TypeError, KeyError) as exc:
                raise Refused("require", f"the key of party {int(party)} is not signed by "
                                         f"a site of the federation ({type(exc).__name__}): "
                                         "a substituted or forged key") from None
            names.add(name)
            weights[int(party)] = float(proof["weight_sum"])
        if len(names) != len(keys):
            raise Refused("require", "one site appears twice in the key list")
        if self.consortium is not None and names != self.consortium:
            raise Refused("consortium", f"the key list's sites {sorted(names)} are not this "
                                        f"dataset's consortium {sorted(self.consortium)}")
        if bytes(keys.get(self.party, b"")) != bytes(own_key):
            raise Refused("require", "the key list does not hold this site's own key")
        if len(keys) < self.min_sites:
            raise Refused("min_sites", f"{len(keys)} sites in the key list; this site "
                                       f"requires at least {self.min_sites}")
        self.weights = weights

    # -- rounds ------------------------------------------------------------
    def check_round(self, message, differentially_private, noisy=False):
        """A masked round's parties and this site's coefficients, before it masks.

        Parameters
        ----------
        message : dict
            A ``"round"``, ``"remask"`` or ``"monitor"`` message.
        differentially_private : bool
            The session's fit is differentially private (coefficients of 1,
            no recovery).
        noisy : bool, default=False
            The site adds noise to the round (a repeated model is refused).

        Returns
        -------
        parties : list of int
        """
        if self.weights is None:
            raise Refused("require", "a masked round before a verified key list")
        parties = [int(p) for p in message.get("parties", ())]
        if self.party not in parties or len(set(parties)) != len(parties) or not set(
                parties) <= set(self.weights):
            raise Refused("require", "the round's parties are not verified sites with this "
                                     "one among them")
        if len(parties) < self.min_sites:
            raise Refused("min_sites", f"a round of {len(parties)} sites; this site requires "
                                       f"at least {self.min_sites}")
        kind = message.get("kind")
        if self.consortium is not None and (set(parties) != set(self.weights) or
                                            kind == "remask"):
            raise Refused("consortium", "a masked pass over fewer than every site of the "
                                        "consortium (a lost site ends the fit)")
        exchange = self._next_exchange(message)
        model = self._check_recovery(message, kind, parties, differentially_private, noisy)
        # a public scale of the sites' sums (a shared Cox baseline): one for every site
        scales = [m["sum_scale"] for m in (message, message.get("inner")) if isinstance(m, dict)
                  and "sum_scale" in m]
        total = 1.0 / max(sum(self.weights.values()), 1.0)
        if any(not np.isclose(float(s), total, rtol=1e-9, atol=0) for s in scales):
            raise Refused("require", "the scale of the sums is not the public one (the "
                                     "inverse of the signed total weight)")
        if kind == "monitor":  # under differential privacy unweighted, as a round
            share = 1.0 if differentially_private else self._share("weighted",
                                                                   list(self.weights))
            expected = {"value": share, "grad": share}
            given = {"value": message.get("weight"), "grad": message.get("weight")}
        else:
            kinds = message.get("kinds") or {}
            given = message.get("coefficients") or {}
            if set(kinds) != set(given):
                raise Refused("require", "coefficients without their kinds")
            expected = {f: (1.0 if differentially_private else self._share(k, parties))
                        for f, k in kinds.items()}
        for field, value in given.items():
            value = np.asarray(value, dtype=float)
            ok = [np.allclose(value, e, rtol=1e-9, atol=0) for e in np.atleast_1d(
                expected[field]) if e is not None]
            if value.ndim != 0 or not any(ok):
                raise Refused("require", f"the coefficient of {field!r} is not the share the "
                                         "public weights give this site (a server singling "
                                         "a site out)")
        # every check passed: the exchange is spent, the round's model answered
        self.last_exchange = exchange
        if kind == "round":
            self.last_parties, self.remasked = set(parties), False
            self.repeated = model in self.models
            self.models.add(model)
        elif kind == "remask":
            self.remasked = True
        return parties

    def _next_exchange(self, message):
        """The message's exchange number, refused unless after the session's last."""
        exchange = message.get("exchange")
        if not isinstance(exchange, Integral) or isinstance(exchange, bool):
            raise Refused("message", "a masked message without an integer exchange number")
        if self.last_exchange is not None and exchange <= self.last_exchange:
            raise Refused("require", f"exchange {int(exchange)} is not after this session's "
                                     f"last ({int(self.last_exchange)}): a replayed exchange "
                                     "(its one-time masks would be used twice)")
        return int(exchange)

    def _check_recovery(self, message, kind, parties, differentially_private, noisy):
        """Refuse a repeated noisy round and an unsafe recovery; returns a round's model
        digest (None for other kinds)."""
        if kind == "round":
            model = _model_digest(message.get("inner"))
            if noisy and model in self.models:
                raise Refused("differential_privacy", "a second round at a model this "
                              "session has already answered (each answer at one model "
                              "would add a fresh draw of the noise)")
            return model
        if kind != "remask":
            return None
        if differentially_private:
            raise Refused("differential_privacy", "a noised reply masked again for fewer "
                          "sites (the difference of the two sums would be one site's reply "
                          "under its own share of the noise only)")
        if self.remasked or not set(parties) < self.last_parties:
            raise Refused("require", "a reply masked again with the same or more sites, "
                                     "or twice (two masks of one reply under different "
                                     "coefficients would reveal it)")
        if self.repeated:
            raise Refused("require", "a recovery of a round at a model this session had "
                                     "already answered (recoveries of one model for "
                                     "different sites would reveal each site's reply)")
        return None

    def check_pass(self, message, coefficient=None):
        """A masked pass of sums (an inference pass, or an analysis's sums): every verified
        site taking part, the public coefficient (``coefficient``, else the inverse of
        the signed total weight), and an exchange after the session's last."""
        if self.weights is None or sorted(int(p) for p in message.get("parties", ())) != sorted(
                self.weights):
            raise Refused("require", "a masked pass must include every verified site")
        expected = (1.0 / max(sum(self.weights.values()), 1.0) if coefficient is None
                    else coefficient)
        if not np.isclose(float(message.get("coefficient", np.nan)), expected, rtol=1e-9,
                          atol=0):
            raise Refused("require", "the pass's coefficient is not the public scale (a server "
                                     "singling a site out)")
        self.last_exchange = self._next_exchange(message)

    def _share(self, kind, parties):
        """This site's coefficient(s) under the public rules (samples, or uniform)."""
        if kind == "sum":
            return 1.0
        if kind != "weighted":
            raise Refused("require", f"coefficients of kind {kind!r} cannot be checked by "
                                     "the site (their public values are not signed); use a "
                                     "solver with weighted or summed replies")
        total = sum(self.weights[p] for p in parties)
        return (self.weights[self.party] / total, 1.0 / len(parties))


def _model_digest(inner):
    """A digest of a round's model: the floating-point values of its broadcast, by place.

    Integers and strings are left out: a round counter renumbered by the
    server does not make a model new.
    """
    digest = hashlib.sha256()

    def walk(value, place):
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                walk(value[key], f"{place}/{key}")
        elif isinstance(value, (list, tuple)):
            for k, item in enumerate(value):
                walk(item, f"{place}/{k}")
        elif isinstance(value, (float, np.floating, np.ndarray)) and np.asarray(
                value).dtype.kind in "fc":
            array = np.asarray(value)
            array = array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)
            digest.update(f"{place}:{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())

    walk(inner, "")
    return digest.hexdigest()


class PrivateRounds:
    """One session's differentially private releases at a site: its noise, its charge.

    Every noisy release of the session (a round, a monitoring pass) is one Gaussian
    mechanism of the fit's composition: the site charges its ledger once, before the
    first, for every release the fit planned (its rounds and monitoring passes,
    listed by kind), and refuses any release beyond them, or of another kind (an
    inference or smoothness pass would carry no noise).
    """

    #: the kinds of step a noisy session answers
    KINDS = ("round", "monitor")

    def __init__(self):
        self.charged = None  # (noise multiplier, planned releases, epsilon) once charged
        self.used = dict.fromkeys(self.KINDS, 0)

    @classmethod
    def check_kind(cls, kind):
        """Refuse a step of a kind a private session does not answer (it would carry no
        noise): only rounds and monitoring passes, each clipped and noised by the site."""
        if kind not in cls.KINDS:
            raise Refused("differential_privacy", f"a {str(kind)[:16]!r} pass in a "
                          "differentially private session (only rounds and monitoring "
                          "passes, each clipped and noised by the site, are answered)")

    def prepare(self, solver, message, parties, *, policy, charge):
        """The message with the site's own noise; charges the fit on its first release.

        ``charge(epsilon, delta, releases)`` (``releases``: ``{kind: number}``) returns
        ``False`` when the ledger refuses; the epsilon comes from the site's own
        accountant.
        """
        from ..privacy.accounting import GaussianAccountant, distributed_noise_std

        kind = message.get("kind")
        self.check_kind(kind)
        config = solver.config
        if getattr(config, "noise", None) != "distributed":
            raise Refused("differential_privacy", "only noise added at the sites "
                                                  "(noise='distributed') can be checked here")
        sigma = float(solver.noise_multiplier_)
        planned = {"round": int(solver.rounds_),
                   "monitor": int(getattr(solver, "monitor_passes_", 0) or 0)}
        delta, clip = float(config.delta), float(message.get("clip", np.inf))
        if not (np.isfinite(clip) and clip > 0):
            raise Refused("differential_privacy", "the round has no finite clipping bound")
        if delta > policy.max_delta:
            raise Refused("max_delta", f"delta={delta:g} is above this site's "
                                       f"{policy.max_delta:g}")
        if sigma < policy.min_noise_multiplier:
            raise Refused("min_noise_multiplier", f"noise multiplier {sigma:g} is below this "
                                                  f"site's {policy.min_noise_multiplier:g}")
        if self.charged is None:
            epsilon = (GaussianAccountant(sigma, 1.0, delta).epsilon_after(
                sum(planned.values())) if sigma > 0 else float("inf"))
            if not charge(epsilon, delta, planned):
                raise Refused("epsilon_budget", f"this fit's epsilon {epsilon:.3g} would pass "
                                                "the dataset's privacy budget at this site")
            self.charged = (sigma, planned, epsilon)
        elif self.charged[:2] != (sigma, planned):
            raise Refused("epsilon_budget", "the noise or the planned releases changed after "
                                            "the charge")
        self.used[kind] += 1
        if self.used[kind] > planned[kind]:
            raise Refused("epsilon_budget", f"more {kind} releases than the {planned[kind]} "
                                            "charged")
        m = len(parties) if config.min_honest is None else min(len(parties), config.min_honest)
        # the site's noise: its standard deviation computed here, its randomness the OS's
        return dict(message, noise_seed=None,
                    noise_std=distributed_noise_std(sigma, clip, len(parties), min_honest=m))
