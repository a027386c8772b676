"""The front ends a server configuration asks for, in ready-line order: gRPC, then HTTP/REST, then metrics.

All of them share one :class:`CallGate`, so a call is admitted, traced and mapped to a status the same way
whichever protocol it came by.
"""

from __future__ import annotations

from sonic.server.budget import RequestBudget
from sonic.server.config import GrpcServerKind, ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.base import Frontend, FrontendSettings
from sonic.server.frontends.gate import CallGate
from sonic.server.frontends.grpc_aio import GrpcAioFrontend
from sonic.server.frontends.grpc_h2 import H2GrpcFrontend
from sonic.server.frontends.http import HttpFrontend
from sonic.server.frontends.metrics import MetricsFrontend
from sonic.server.guard import Guard
from sonic.server.models.manager import ModelManager


def configured_frontends(
    config: ServerConfig, dataplane: DataPlane, models: ModelManager, guard: Guard | None
) -> list[Frontend]:
    gate = CallGate(dataplane, guard)
    settings = FrontendSettings.from_config(config)
    # One budget for every connection that buffers request bodies (grpcio's server keeps its own buffers).
    budget = RequestBudget(config.budget.total_bytes, config.budget.wait_s)
    grpc: Frontend = (
        GrpcAioFrontend(dataplane, gate, config.grpc.port, settings)
        if config.grpc.server is GrpcServerKind.GRPCIO
        # The h2 stack takes the HTTP/2 limits that grpcio's server has no equivalent for.
        else H2GrpcFrontend(
            dataplane, gate, config.grpc.port, settings, http2_limits=config.grpc.http2_limits, budget=budget
        )
    )
    frontends: list[Frontend] = [grpc]
    if config.http.port is not None:
        frontends.append(HttpFrontend(dataplane, gate, config.http.port, settings, budget=budget))
    if config.metrics.port is not None:
        frontends.append(MetricsFrontend(models, config.host, config.metrics.port, budget))
    return frontends
