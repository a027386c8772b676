"""Protocol front ends: thin adapters from gRPC, HTTP/REST and Prometheus onto the data plane.

Each implements :class:`sonic.server.frontends.base.Frontend`; :mod:`~sonic.server.frontends.factory` builds
the ones a configuration asks for, and all share one :class:`~sonic.server.frontends.gate.CallGate` (guard,
trace context, error mapping).
"""
