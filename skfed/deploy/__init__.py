"""Cross-silo deployment: certificates and mutual TLS for a Dask federation.

Needs ``skfed[dask]`` (``dask[distributed]`` and ``cryptography``), imported
only when a function is called. See ``docs/deployment.md``.
"""

from .certificates import (Certificates, KeyPair, certificate_identity, check_site_name,
                           make_certificates, tls_security)
from .cluster import local_tls_cluster

__all__ = ["make_certificates", "tls_security", "local_tls_cluster", "Certificates", "KeyPair",
           "certificate_identity",
           "check_site_name"]
