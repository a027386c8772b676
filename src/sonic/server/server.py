"""The running server: explicit state, start-up, and orderly shutdown.

One process, one asyncio loop: gRPC (our HTTP/2 code, or grpc.aio), HTTP/REST and the metrics endpoint share it.
Shutdown order: stop intake (the server turns not-ready, gRPC and HTTP refuse new calls), let
requests in flight finish for up to ``exit_timeout_s``, cancel what is left, unload the models.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from contextlib import suppress
from typing import Any

from sonic.errors import SonicError
from sonic.server.config import GrpcServerKind, ModelControlMode, ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.grpc_aio import GrpcAioFrontend
from sonic.server.frontends.grpc_native import NativeGrpcFrontend
from sonic.server.frontends.http import HttpFrontend
from sonic.server.guard import Guard
from sonic.server.manager import ModelManager
from sonic.server.metrics import MetricsEndpoint
from sonic.server.observe import RequestObserver, load_tracer
from sonic.server.tls import grpc_server_credentials, grpc_ssl_context, http_ssl_context

log = logging.getLogger(__name__)


class ServerState(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Server:
    def __init__(self, config: ServerConfig, *, tracer_provider: Any = None) -> None:
        """``tracer_provider``: an OpenTelemetry provider; None uses the global one."""
        self.config = config
        self.models = ModelManager(config)
        self.dataplane = DataPlane(config, self.models)
        if config.log_requests or config.otel_tracing:
            tracer = load_tracer(tracer_provider) if config.otel_tracing else None
            self.dataplane.observer = RequestObserver(log_requests=config.log_requests, tracer=tracer)
        self.state = ServerState.CREATED
        self.guard = Guard.create(config, self.models)
        self._grpc: NativeGrpcFrontend | GrpcAioFrontend | None = None
        self._http: HttpFrontend | None = None
        self._metrics: MetricsEndpoint | None = None
        self._poller: asyncio.Task[None] | None = None
        self._stop_polling = asyncio.Event()
        self.grpc_port = 0
        self.http_port: int | None = None
        self.metrics_port: int | None = None

    @property
    def ready_line(self) -> str:
        """The one line launchers wait for: ``sonic: ready grpc=H:P [http=H:P] [metrics=H:P]``."""
        host = self._format_host()
        fields = [f"grpc={host}:{self.grpc_port}"]
        if self.http_port is not None:
            fields.append(f"http={host}:{self.http_port}")
        if self.metrics_port is not None:
            fields.append(f"metrics={host}:{self.metrics_port}")
        return "sonic: ready " + " ".join(fields)

    def _format_host(self) -> str:
        host = self.config.host
        return f"[{host}]" if ":" in host else host

    async def start(self) -> None:
        if self.state is not ServerState.CREATED:
            raise RuntimeError(f"server can only be started once (state: {self.state.value})")
        self.state = ServerState.STARTING
        mode = self.config.model_control_mode
        if mode in {ModelControlMode.NONE, ModelControlMode.POLL} or "*" in self.config.load_models:
            await self.models.load_all()
        else:
            for name in self.config.load_models:
                try:
                    await self.models.load(name)
                except SonicError:
                    continue  # listed as UNAVAILABLE with its reason
        config = self.config
        self._grpc = self._grpc_frontend(config)
        self.grpc_port = await self._grpc.start(config.host, config.grpc_port)
        if config.http_port is not None:
            self._http = HttpFrontend(
                self.dataplane,
                max_message_bytes=config.grpc_max_message_bytes,
                guard=self.guard,
                ssl_context=http_ssl_context(config.tls) if config.tls is not None else None,
                max_connections_per_client=config.http_max_connections_per_client,
                max_decompressed_bytes=config.grpc_max_decompressed_bytes,
            )
            self.http_port = await self._http.start(config.host, config.http_port, config.exit_timeout_s)
        if config.metrics_port is not None:
            self._metrics = MetricsEndpoint(self.models)
            self.metrics_port = await self._metrics.start(config.host, config.metrics_port)
        if mode is ModelControlMode.POLL:
            self._poller = asyncio.create_task(self._poll_repository(), name="repository-poll")
        self.dataplane.accepting = True
        self.state = ServerState.SERVING
        log.info(
            "serving %d model(s) on %s:%d", len(self.models.loaded_models()), self.config.host, self.grpc_port
        )

    def _grpc_frontend(self, config: ServerConfig) -> NativeGrpcFrontend | GrpcAioFrontend:
        if config.grpc_server is GrpcServerKind.GRPCIO:
            return GrpcAioFrontend(
                self.dataplane,
                max_message_bytes=config.grpc_max_message_bytes,
                guard=self.guard,
                credentials=grpc_server_credentials(config.tls) if config.tls is not None else None,
                max_concurrent_streams=config.grpc_max_concurrent_streams,
            )
        return NativeGrpcFrontend(
            self.dataplane,
            max_message_bytes=config.grpc_max_message_bytes,
            guard=self.guard,
            ssl_context=grpc_ssl_context(config.tls) if config.tls is not None else None,
            max_concurrent_streams=config.grpc_max_concurrent_streams,
            max_decompressed_bytes=config.grpc_max_decompressed_bytes,
            http2_limits=config.grpc_http2_limits,
        )

    async def _poll_repository(self) -> None:
        while True:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stop_polling.wait(), self.config.repository_poll_s)
            if self._stop_polling.is_set():
                return
            try:
                await self.models.poll()
            except Exception:
                log.exception("repository poll failed")

    async def shutdown(self) -> None:
        if self.state in {ServerState.STOPPING, ServerState.STOPPED}:
            return
        self.state = ServerState.STOPPING
        self.dataplane.accepting = False
        self._stop_polling.set()
        if self._poller is not None:
            await self._poller
        # Both frontends stop intake at once and drain concurrently, within one exit_timeout_s.
        stopping = []
        if self._grpc is not None:
            stopping.append(self._grpc.stop(self.config.exit_timeout_s))
        if self._http is not None:
            stopping.append(self._http.stop())
        await asyncio.gather(*stopping)
        if self._metrics is not None:
            await self._metrics.stop()
        await self.models.close()
        self.dataplane.shared_memory.close()
        self.state = ServerState.STOPPED
        log.info("server stopped")
