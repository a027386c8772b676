"""The front ends a server configuration asks for, in ready-line order: gRPC, then HTTP/REST, then metrics.

All of them share one :class:`CallGate`, so a call is admitted, traced and mapped to a status the same way
whichever protocol it came by.
"""

from __future__ import annotations

from sonic.server.config import GrpcServerKind, ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.base import Frontend
from sonic.server.frontends.gate import CallGate
from sonic.server.frontends.grpc_aio import GrpcAioFrontend
from sonic.server.frontends.grpc_native import NativeGrpcFrontend
from sonic.server.frontends.http import HttpFrontend
from sonic.server.frontends.metrics import MetricsFrontend
from sonic.server.guard import Guard
from sonic.server.manager import ModelManager
from sonic.server.tls import grpc_server_credentials, grpc_ssl_context, http_ssl_context


def configured_frontends(
    config: ServerConfig, dataplane: DataPlane, models: ModelManager, guard: Guard | None
) -> list[Frontend]:
    gate = CallGate(dataplane, guard)
    frontends = [_grpc_frontend(config, dataplane, gate)]
    if config.http_port is not None:
        frontends.append(
            HttpFrontend(
                dataplane,
                gate,
                config.host,
                config.http_port,
                max_message_bytes=config.grpc_max_message_bytes,
                ssl_context=http_ssl_context(config.tls) if config.tls is not None else None,
                max_connections_per_client=config.http_max_connections_per_client,
            )
        )
    if config.metrics_port is not None:
        frontends.append(MetricsFrontend(models, config.host, config.metrics_port))
    return frontends


def _grpc_frontend(config: ServerConfig, dataplane: DataPlane, gate: CallGate) -> Frontend:
    tls = config.tls
    if config.grpc_server is GrpcServerKind.GRPCIO:
        return GrpcAioFrontend(
            dataplane,
            gate,
            config.host,
            config.grpc_port,
            max_message_bytes=config.grpc_max_message_bytes,
            credentials=grpc_server_credentials(tls) if tls is not None else None,
            max_concurrent_streams=config.grpc_max_concurrent_streams,
        )
    return NativeGrpcFrontend(
        dataplane,
        gate,
        config.host,
        config.grpc_port,
        max_message_bytes=config.grpc_max_message_bytes,
        ssl_context=grpc_ssl_context(tls) if tls is not None else None,
        max_concurrent_streams=config.grpc_max_concurrent_streams,
    )
