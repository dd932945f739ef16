"""Site services: sites that run only skfed's named operations, under their own policy.

A site's administrator runs ``skfed site serve CONFIG``
(:class:`~skfed.sites.transport.SiteServer`); an analyst connects with
:meth:`FederatedDataset.from_sites <skfed.data.FederatedDataset.from_sites>`.
Requests are typed messages (:mod:`skfed.sites.codec`: nothing received is
executed or unpickled) naming an operation declared beside its site function
(:mod:`skfed.federation.operations`); every release passes the site's gate
(:mod:`skfed.sites.gate`, :mod:`skfed.sites.host`) under its policy
(:mod:`skfed.sites.policy`), and every request is written to its audit log
(:mod:`skfed.sites.audit`). See ``docs/data-officers.md``.
"""


class SiteRefusal(PermissionError):
    """A site's policy refused a request; ``rule`` names the rule."""

    def __init__(self, site, rule, message):
        self.site, self.rule = site, rule
        super().__init__(message)


class SiteServiceError(RuntimeError):
    """A site could not run an operation (its message names no row value or path)."""

    def __init__(self, site, message):
        self.site = site
        super().__init__(f"site {site!r}: {message}")


class SiteUnavailable(ConnectionError):
    """A site service did not answer (down, unreachable, or past the timeout)."""

    def __init__(self, site, detail):
        self.site = site
        super().__init__(f"site {site!r} did not answer: {detail}")


__all__ = ["SiteRefusal", "SiteServiceError", "SiteUnavailable"]
