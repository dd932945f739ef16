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


from ..exceptions import SiteRefusal, SiteServiceError, SiteUnavailable

__all__ = ["SiteRefusal", "SiteServiceError", "SiteUnavailable"]
