"""The running server: explicit state, start-up, and orderly shutdown.

One process, one asyncio loop: the front ends (gRPC on our HTTP/2 code or grpc.aio, HTTP/REST, metrics; see
:mod:`sonic.server.frontends.base`) share it. Shutdown order: stop intake (the server turns not-ready, the
front ends refuse new calls), let requests in flight finish for up to ``exit_timeout_s``, cancel what is
left, stop the metrics endpoint, unload the models.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from contextlib import suppress
from typing import Any

from sonic.logs import LogControl
from sonic.protocol.errors import ModelConfigError, SonicError
from sonic.server.config import ModelControlMode, ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.base import Frontend
from sonic.server.frontends.factory import configured_frontends
from sonic.server.guard import Guard
from sonic.server.log_settings import LogSettingsService
from sonic.server.manager import ModelManager
from sonic.server.observe import RequestObserver, load_tracer
from sonic.server.traffic_switch import open_traffic_log

log = logging.getLogger(__name__)


class ServerState(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Server:
    def __init__(
        self, config: ServerConfig, *, tracer_provider: Any = None, log_control: LogControl | None = None
    ) -> None:
        """``tracer_provider``: an OpenTelemetry provider; None uses the global one. ``log_control``: the
        process's log handler that the log-settings API changes (``sonic serve``'s); None: a server inside
        another program, whose API changes only the ``sonic`` loggers' level."""
        self.config = config
        self.traffic = open_traffic_log(config.traffic_log)
        self.models = ModelManager(config, traffic=self.traffic)
        self.dataplane = DataPlane(config, self.models)
        self.dataplane.log_settings = LogSettingsService(log_control or LogControl.in_process(), self.traffic)
        if config.log_requests or config.otel_tracing:
            tracer = load_tracer(tracer_provider) if config.otel_tracing else None
            self.dataplane.observer = RequestObserver(log_requests=config.log_requests, tracer=tracer)
        self.state = ServerState.CREATED
        self.guard = Guard.create(config, self.models)
        self.frontends: list[Frontend] = []  # in start order: gRPC first
        self._poller: asyncio.Task[None] | None = None
        self._stop_polling = asyncio.Event()

    @property
    def ready_line(self) -> str:
        """The one line launchers wait for: ``sonic: ready grpc=H:P [http=H:P] [metrics=H:P]``."""
        return "sonic: ready " + " ".join(f"{f.name}={f.address}" for f in self.frontends)

    def _port(self, name: str) -> int | None:
        return next((f.port for f in self.frontends if f.name == name), None)

    @property
    def grpc_port(self) -> int:
        return self._port("grpc") or 0

    @property
    def http_port(self) -> int | None:
        return self._port("http")

    @property
    def metrics_port(self) -> int | None:
        return self._port("metrics")

    async def start(self) -> None:
        if self.state is not ServerState.CREATED:
            raise RuntimeError(f"server can only be started once (state: {self.state.value})")
        self.state = ServerState.STARTING
        if self.traffic is not None:
            await self.traffic.start()
        mode = self.config.model_control_mode
        # The first line of a start that may take minutes (one more per model loaded): what
        # `sonic deploy local` shows and times its --ready-timeout-s from.
        log.info("loading models (model control mode %s)", mode.value)
        if mode in {ModelControlMode.NONE, ModelControlMode.POLL} or "*" in self.config.load_models:
            await self.models.load_all()
        else:
            for name in self.config.load_models:
                try:
                    await self.models.load(name)
                except SonicError:
                    continue  # listed as UNAVAILABLE with its reason
        failed = [row for row in self.models.index(ready_only=False) if row.state == "UNAVAILABLE"]
        if self.config.exit_on_error and failed:  # Triton's --exit-on-error=true
            raise ModelConfigError(
                "failed to load all models (--exit-on-error): "
                + "; ".join(f"{row.name}: {row.reason}" for row in failed)
            )
        for frontend in configured_frontends(self.config, self.dataplane, self.models, self.guard):
            self.frontends.append(frontend)  # before it starts, so shutdown stops one that fails half-way
            await frontend.start()
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

    @staticmethod
    def _log_drain(grace_s: float, cut_off: int) -> None:
        if cut_off:
            log.warning(
                "drain: %d request(s) still in flight at the exit timeout (%g s) were cut off; "
                "clients retry them elsewhere",
                cut_off,
                grace_s,
            )
        else:
            log.info("drain: every request in flight finished")

    async def shutdown(self) -> None:
        if self.state in {ServerState.STOPPING, ServerState.STOPPED}:
            return
        self.state = ServerState.STOPPING
        self.dataplane.accepting = False
        self._stop_polling.set()
        if self._poller is not None:
            await self._poller
        # The front ends that carry requests stop intake at once and drain concurrently, within one
        # exit_timeout_s; the others (metrics) stay up until then, so the drain can be watched.
        grace_s = self.config.exit_timeout_s
        cut_off: list[int] = []  # requests still in flight when the grace ran out (a timer, not a sync)
        timer = asyncio.get_running_loop().call_later(
            grace_s, lambda: cut_off.append(self.dataplane.in_flight)
        )
        for carries_requests in (True, False):
            await asyncio.gather(
                *(f.stop(grace_s) for f in self.frontends if f.carries_requests is carries_requests)
            )
            if carries_requests:
                timer.cancel()
                self._log_drain(grace_s, cut_off[0] if cut_off else 0)
        await self.models.close()
        if self.traffic is not None:  # after the models: the last requests' records are written too
            await self.traffic.close()
        self.dataplane.shared_memory.close()
        self.state = ServerState.STOPPED
        log.info("server stopped")
