"""The front ends a server configuration asks for, in ready-line order: gRPC, then HTTP/REST, then metrics.

All of them share one :class:`CallGate`, so a call is admitted, traced and mapped to a status the same way
whichever protocol it came by.
"""

from __future__ import annotations

import functools

from sonic.server.budget import RequestBudget
from sonic.server.config import GrpcServerKind, ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.base import Frontend
from sonic.server.frontends.gate import CallGate
from sonic.server.frontends.grpc_aio import GrpcAioFrontend
from sonic.server.frontends.grpc_h2 import H2GrpcFrontend
from sonic.server.frontends.http import HttpFrontend
from sonic.server.frontends.metrics import MetricsFrontend
from sonic.server.guard import Guard
from sonic.server.manager import ModelManager


def configured_frontends(
    config: ServerConfig, dataplane: DataPlane, models: ModelManager, guard: Guard | None
) -> list[Frontend]:
    gate = CallGate(dataplane, guard)
    # One budget for every connection that buffers request bodies (grpcio's server keeps its own buffers).
    budget = RequestBudget(config.request_buffer_budget_bytes, config.request_buffer_wait_s)
    # The native stack takes the HTTP/2 limits that grpcio's server has no equivalent for.
    grpc_kind = (
        GrpcAioFrontend
        if config.grpc_server is GrpcServerKind.GRPCIO
        else functools.partial(
            H2GrpcFrontend,
            max_decompressed_bytes=config.grpc_max_decompressed_bytes,
            http2_limits=config.grpc_http2_limits,
            budget=budget,
        )
    )
    grpc: Frontend = grpc_kind(
        dataplane,
        gate,
        config.host,
        config.grpc_port,
        max_message_bytes=config.grpc_max_message_bytes,
        tls=config.tls,
        max_concurrent_streams=config.grpc_max_concurrent_streams,
    )
    frontends: list[Frontend] = [grpc]
    if config.http_port is not None:
        frontends.append(
            HttpFrontend(
                dataplane,
                gate,
                config.host,
                config.http_port,
                max_message_bytes=config.grpc_max_message_bytes,
                tls=config.tls,
                max_connections_per_client=config.http_max_connections_per_client,
                max_decompressed_bytes=config.grpc_max_decompressed_bytes,
                budget=budget,
            )
        )
    if config.metrics_port is not None:
        frontends.append(MetricsFrontend(models, config.host, config.metrics_port, budget))
    return frontends
