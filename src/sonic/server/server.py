"""The running server: explicit state, start-up, and orderly shutdown.

Shutdown order: stop intake (the server turns not-ready and gRPC refuses new calls), let requests
in flight finish for up to ``exit_timeout_s``, cancel what is left, unload the models.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from contextlib import suppress

from sonic.errors import SonicError
from sonic.server.config import ModelControlMode, ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.grpc import GrpcFrontend
from sonic.server.manager import ModelManager

log = logging.getLogger(__name__)


class ServerState(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Server:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.models = ModelManager(config)
        self.dataplane = DataPlane(config, self.models)
        self.state = ServerState.CREATED
        self._grpc: GrpcFrontend | None = None
        self._poller: asyncio.Task[None] | None = None
        self._stop_polling = asyncio.Event()
        self.grpc_port = 0

    @property
    def ready_line(self) -> str:
        """The one line launchers wait for."""
        return f"sonic: ready grpc={self._format_host()}:{self.grpc_port}"

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
        self._grpc = GrpcFrontend(self.dataplane, max_message_bytes=self.config.grpc_max_message_bytes)
        self.grpc_port = await self._grpc.start(self.config.host, self.config.grpc_port)
        if mode is ModelControlMode.POLL:
            self._poller = asyncio.create_task(self._poll_repository(), name="repository-poll")
        self.dataplane.accepting = True
        self.state = ServerState.SERVING
        log.info(
            "serving %d model(s) on %s:%d", len(self.models.loaded_models()), self.config.host, self.grpc_port
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
        if self._grpc is not None:
            await self._grpc.stop(self.config.exit_timeout_s)
        await self.models.close()
        self.dataplane.shared_memory.close()
        self.state = ServerState.STOPPED
        log.info("server stopped")
