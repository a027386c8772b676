"""Transports: how requests reach a server (gRPC, or in memory for tests).

- :mod:`.base`: the :class:`~.base.Transport` interface; :mod:`.factory`: the one place a transport is chosen;
- :mod:`.h2` (native gRPC, the default) on :mod:`.h2_connection` (one HTTP/2 connection), and :mod:`.stream`
  (small requests multiplexed on one ``ModelStreamInfer`` stream);
- :mod:`.grpc`: gRPC on grpcio's asyncio API; :mod:`.control`: control-plane calls both gRPC transports share;
- :mod:`.memory`: an in-memory server and transport for tests.
"""
