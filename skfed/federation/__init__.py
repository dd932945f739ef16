"""The federation session, the round loop and what they need.

- :mod:`~skfed.federation.session`: the session that carries every exchange of a
  fit or an analysis with the sites (its ``sum``, its per-site releases, its
  ledger of rounds and bytes per phase, the protection the sites agreed to);
- :mod:`~skfed.federation.rounds`: the loop itself (broadcast, client updates,
  aggregation, monitoring, stopping, fault handling);
- :mod:`~skfed.federation.problem`: what the server knows of the global
  objective before round one;
- :mod:`~skfed.federation.layout`: how the flat parameter vector is laid out;
- :mod:`~skfed.federation.clients`: grouping rows into clients and their weights;
- :mod:`~skfed.federation.smoothness`: the federated estimate of the pooled
  smoothness constants.
"""
