"""Protocol front ends: thin adapters from gRPC, HTTP/REST and Prometheus onto the data plane.

Each implements :class:`sonic.server.frontends.base.Frontend`; :mod:`~sonic.server.frontends.factory` builds
the ones a configuration asks for, and all share one :class:`~sonic.server.frontends.gate.CallGate` (guard,
trace context, error mapping).

- gRPC: :mod:`.grpc_h2` (the default, on :mod:`sonic.h2`'s server role, one call in :mod:`.grpc_h2_call`,
  request DATA charged to the budget by :mod:`.request_windows`) or :mod:`.grpc_aio` (grpcio), both serving
  :mod:`.grpc_methods` (``ModelInfer`` itself in :mod:`.grpc_infer`, compiled);
- HTTP/REST: :mod:`.http` with :mod:`.http_routes` (the route table), :mod:`.http_connections` (aiohttp's
  server, counting clients; a body framed twice refused in words) and :mod:`.http_body` (bounded bodies), :mod:`.http_payload` (a response's
  outputs written as pieces); ``GET /metrics``: :mod:`.metrics`; both on
  :mod:`.aiohttp_listener`;
- :mod:`.traced`: a traced inference call's protocol activities (Triton's trace extension).
"""
