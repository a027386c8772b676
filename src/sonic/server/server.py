"""The running server: explicit state, start-up, and orderly shutdown.

One process, one asyncio loop: the front ends (gRPC on our HTTP/2 code or grpc.aio, HTTP/REST, metrics; see
:mod:`sonic.server.frontends.base`) share it. Shutdown order: stop intake (the server turns not-ready, the
front ends refuse new calls), let requests in flight finish for up to ``exit_timeout_s``, cancel what is
left, stop the metrics endpoint, unload the models. :class:`ShutdownSignals` maps SIGINT and SIGTERM onto
that for ``sonic serve``, as uvicorn does: the first drains, a second one during the drain exits at once.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable
from contextlib import suppress
from types import FrameType, TracebackType
from typing import Any, Self

from sonic.logs import LogControl
from sonic.protocol.errors import NotFoundError, SonicError
from sonic.protocol.wire import ModelState
from sonic.server.config import ModelControlMode, ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.base import Frontend
from sonic.server.frontends.factory import configured_frontends
from sonic.server.guard import Guard
from sonic.server.log_settings import LogSettingsService
from sonic.server.models.manager import ModelManager
from sonic.server.models.repository import StartFailure, check_repository_roots
from sonic.server.observe import RequestObserver, load_tracer
from sonic.server.trace.requests import TraceManager
from sonic.server.traffic.switch import open_traffic_log

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
        # Triton's trace extension (its settings API is always there); ``tracer_provider`` serves its
        # OpenTelemetry mode too.
        self.dataplane.traces = TraceManager(config.trace, tracer_provider=tracer_provider)
        if config.log_requests or config.otel_tracing:
            tracer = load_tracer(tracer_provider) if config.otel_tracing else None
            self.dataplane.observer = RequestObserver(log_requests=config.log_requests, tracer=tracer)
        self.state = ServerState.CREATED
        self.guard = Guard.create(config.security, self.models)
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

    async def start(self, *, freeze_heap: bool = False) -> None:
        """Check the repositories, start the front ends, load the models, serve. ``freeze_heap``
        (``sonic serve``): the process is the server's own, so what start-up left alive is frozen before
        serving (:func:`freeze_start_up`); a caller that starts a server inside a process of its own
        (tests, embedders) keeps its heap as is.

        As Triton 2.51: a repository that cannot be read stops the start (:class:`StartFailure`), and so
        does a model that fails to load, unless ``exit_on_error`` is off. Unlike Triton, the ports are
        bound before the models load, so a port in use fails at once rather than after minutes of
        loading; until loading is done the server answers live but not ready.
        """
        if self.state is not ServerState.CREATED:
            raise RuntimeError(f"server can only be started once (state: {self.state.value})")
        self.state = ServerState.STARTING
        check_repository_roots(self.config.model_repositories)
        self.dataplane.traces.start_writer()
        if self.traffic is not None:
            await self.traffic.start()
        for frontend in configured_frontends(self.config, self.dataplane, self.models, self.guard):
            self.frontends.append(frontend)  # before it starts, so shutdown stops one that fails half-way
            await frontend.start()
        await self._load_at_start()
        if freeze_heap:
            freeze_start_up()
        if self.config.model_control_mode is ModelControlMode.POLL:
            self._poller = asyncio.create_task(self._poll_repository(), name="repository-poll")
        self.dataplane.accepting = True
        self.state = ServerState.SERVING
        log.info(
            "serving %d model(s) on %s:%d", len(self.models.loaded_models()), self.config.host, self.grpc_port
        )
        self._warn_if_not_ready()

    async def _load_at_start(self) -> None:
        mode = self.config.model_control_mode
        # The first line of a start that may take minutes (one more per model loaded): what
        # `sonic deploy local` shows and times its --ready-timeout-s from.
        log.info("loading models (model control mode %s)", mode.value)
        failed: dict[str, str] = {}  # model: why, also a --load-model name that is no model (as Triton)
        if mode in {ModelControlMode.NONE, ModelControlMode.POLL} or "*" in self.config.load_models:
            await self.models.load_all()
        else:
            for name in self.config.load_models:
                try:
                    await self.models.load(name)
                except SonicError as exc:
                    failed[name] = str(exc)  # a model is listed as UNAVAILABLE with its reason too
                    if isinstance(exc, NotFoundError):  # no such model folder: nothing else logs it
                        log.error("--load-model %s: %s", name, exc)  # noqa: TRY400  (says it all)
        for row in self.models.index(ready_only=False):
            if row.state is ModelState.UNAVAILABLE:
                failed.setdefault(row.name, row.reason)
        if self.config.exit_on_error and failed:  # Triton's --exit-on-error=true, its default
            msg = "failed to load all models"
            raise StartFailure(
                msg,
                "; ".join(f"model '{name}': {reason}" for name, reason in failed.items())
                + " (--exit-on-error=false serves the others)",
            )

    def _warn_if_not_ready(self) -> None:
        """Say why a server that serves is not ready, or serves nothing from repositories that hold models."""
        unready = self.models.unready_models()
        if unready and self.config.strict_readiness:
            log.warning(
                "server not ready (--strict-readiness): model(s) %s not ready; "
                "--strict-readiness=false makes it ready with the others",
                ", ".join(unready),
            )
        explicit = self.config.model_control_mode is ModelControlMode.EXPLICIT
        if self.models.loaded_models() or (explicit and not self.config.load_models):
            return
        found, _ = self.models.repository.scan()
        entries = sum(1 for root in self.models.repository.roots for _ in root.iterdir())
        if entries:
            log.warning(
                "serving 0 models from model repositories %s, which hold %d entries (%d model folders)",
                [str(root) for root in self.config.model_repositories],
                entries,
                len(found),
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
        await asyncio.to_thread(self.dataplane.traces.close)  # kept traces written, files closed
        self.dataplane.shared_memory.close()
        self.state = ServerState.STOPPED
        log.info("server stopped")


SignalHandler = Callable[[int, FrameType | None], Any] | int | None  # what signal.getsignal returns
# Generation 0's collection threshold while serving (CPython's default: 700). The requests in flight hold
# ~25 objects each that the collector tracks: at 32 in flight they already pass 700, so a collection
# walked them all every ~30 small requests and freed nothing (~2,000 collections per 70,000 requests,
# ~1.4 us per request: docs/benchmarks.md, "issue 37: identity rate"). Requests make no cyclic garbage of
# note, so collections that rare cost nothing in memory.
SERVING_GEN0_THRESHOLD = 10_000


def freeze_start_up() -> None:
    """Move what start-up left alive (modules, the models loaded at start, configuration) out of the
    garbage collector's reach, once, before serving: every full collection walked it (~70,000 objects,
    45-94 ms per pass in a server of the demo models, ~244 ms with pyarrow and pandas under load:
    benchmarks/serve_gc.py, docs/perf.md), a pause taken by whichever request was on the loop. Start-up's own garbage is collected first so that none of it is
    kept for good. Models loaded later through the API are not frozen: their objects must stay
    collectable, or each load/unload cycle would keep its cycles for good (a model loaded at start and
    unloaded later keeps its cyclic objects: at most what start-up loaded, once). Blocking, but before
    the server turns ready: the front ends listen, and refuse inferences meanwhile (the objects of a
    connection open at that moment, a probe's, are frozen with the rest: a few, once). Then generation 0
    is collected at :data:`SERVING_GEN0_THRESHOLD` objects rather than 700."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(SERVING_GEN0_THRESHOLD, *gc.get_threshold()[1:])


def exit_now(code: int) -> None:
    """End the process at once: logs and standard streams flushed, no thread or finalizer waited for
    (a model thread busy with a long request would otherwise hold the exit)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


class ShutdownSignals:
    """SIGINT and SIGTERM of a server run from the command line, as uvicorn handles them.

    The first sets :attr:`requested` (the caller drains); a second one, during the drain or before it
    began, cuts it short: requests still in flight are cut off and the process exits at once with
    128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports a process a signal
    ended. On leaving, the handlers that were there before come back (the loop's own removal would leave
    Python's defaults instead). Use on the loop's thread, the main thread.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        server: Server,
        force_exit: Callable[[int], None] = exit_now,
    ) -> None:
        self.requested = asyncio.Event()
        self._loop = loop
        self._server = server
        self._force_exit = force_exit  # the tests' way to see the exit without ending the test process
        self._previous: dict[signal.Signals, SignalHandler] = {}

    def __enter__(self) -> Self:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.getsignal(sig)
            self._loop.add_signal_handler(sig, self._received, sig)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, previous in self._previous.items():
            self._loop.remove_signal_handler(sig)
            # None: a handler not set from Python, which cannot be set back; the default is the nearest.
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def _received(self, sig: signal.Signals) -> None:
        if not self.requested.is_set():
            self.requested.set()
            return
        log.warning(
            "%s again: exiting now; %d request(s) in flight cut off",
            sig.name,
            self._server.dataplane.in_flight,
        )
        self._force_exit(128 + sig.value)
