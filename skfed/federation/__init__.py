"""The round loop and what it needs.

- :mod:`~skfed.federation.rounds`: the loop itself (broadcast, client updates,
  aggregation, monitoring, stopping, fault handling);
- :mod:`~skfed.federation.problem`: what the server knows of the global
  objective before round one;
- :mod:`~skfed.federation.layout`: how the flat parameter vector is laid out;
- :mod:`~skfed.federation.clients`: grouping rows into clients and their weights;
- :mod:`~skfed.federation.smoothness`: the federated estimate of the pooled
  smoothness constants.
"""
