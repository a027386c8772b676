"""The one switch: run a workflow's models in this process ("direct") or through the service.

Both kinds own an event loop in a thread of their own and return ``concurrent.futures.Future``
objects, so a stream thread hands its inputs over and is free until it needs the outputs.

- :class:`DirectInference` loads model folders with the server's own code
  (:class:`sonic.server.embedded.EmbeddedModels`: the same config completion, validation, dynamic
  batcher and backends as ``sonic serve``) and calls the models in-process: no sockets, no
  serialization.
- :class:`ServiceInference` sends the same inputs with :class:`sonic.client.AsyncClient` to one or
  more servers (``sonic serve`` or NVIDIA Triton).

The environment is read only in :meth:`InferenceConfig.from_env`:

- ``SONIC_INFERENCE``: ``direct`` or ``service``
- ``SONIC_MODEL_REPOSITORY``: model repositories for direct mode (``os.pathsep``-separated)
- ``SONIC_SERVERS``: servers for service mode (``host:port,host:port``)
"""

from __future__ import annotations

import asyncio
import enum
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import numpy.typing as npt

from sonic.client.config import ClientConfig
from sonic.client.transport.base import ServerTiming

T = TypeVar("T")
Arrays = dict[str, npt.NDArray[Any]]


class InferenceMode(enum.StrEnum):
    DIRECT = "direct"
    SERVICE = "service"


@dataclass(frozen=True)
class InferenceConfig:
    mode: InferenceMode = InferenceMode.SERVICE
    repositories: tuple[Path, ...] = ()  # direct: where the models are
    client: ClientConfig = field(default_factory=ClientConfig)  # service: servers, retries, ...
    direct_threads: int = 0  # direct: onnxruntime intra-op threads per model instance; 0: its default

    def __post_init__(self) -> None:
        if self.mode is InferenceMode.DIRECT and not self.repositories:
            msg = "direct inference needs at least one model repository (SONIC_MODEL_REPOSITORY)"
            raise ValueError(msg)
        if self.mode is InferenceMode.SERVICE and not self.client.servers:
            msg = "service inference needs at least one server address (SONIC_SERVERS)"
            raise ValueError(msg)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if env.get("SONIC_INFERENCE"):
            values["mode"] = InferenceMode(env["SONIC_INFERENCE"])
        if env.get("SONIC_MODEL_REPOSITORY"):
            values["repositories"] = tuple(Path(p) for p in env["SONIC_MODEL_REPOSITORY"].split(os.pathsep))
        values["client"] = ClientConfig.from_env(env)
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class ServerStats:
    """Cumulative server-side figures of one model (Triton's statistics extension).

    ``queue_ns`` is summed over requests; ``execution_ns`` (compute input + infer + output) over
    executions, from the per-batch-size statistics: a dynamic batch that merges several requests runs,
    and counts, once, where each of its requests reports the whole batch's compute time.
    """

    requests: int = 0
    executions: int = 0
    queue_ns: int = 0
    execution_ns: int = 0

    def __add__(self, other: ServerStats) -> ServerStats:
        return ServerStats(
            self.requests + other.requests,
            self.executions + other.executions,
            self.queue_ns + other.queue_ns,
            self.execution_ns + other.execution_ns,
        )

    def __sub__(self, other: ServerStats) -> ServerStats:
        return ServerStats(
            self.requests - other.requests,
            self.executions - other.executions,
            self.queue_ns - other.queue_ns,
            self.execution_ns - other.execution_ns,
        )


def _server_stats(timing: ServerTiming) -> ServerStats:
    return ServerStats(timing.success_count, timing.executions, timing.queue_ns, timing.execution_ns)


class _LoopThread:
    """An event loop running in its own thread; coroutines are handed to it from any other thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        # Daemon so an unclosed object cannot hang interpreter exit; close() stops and joins it.
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.submit(coroutine).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class Inference(ABC):
    """Runs models for workflow modules; a context manager, closed once."""

    mode: InferenceMode

    def __init__(self, name: str) -> None:
        self._loop = _LoopThread(name)
        self._closed = False

    @abstractmethod
    async def _infer(self, model: str, inputs: Arrays, outputs: Sequence[str] | None) -> Arrays: ...

    @abstractmethod
    async def _statistics(self, model: str) -> ServerStats: ...

    @abstractmethod
    async def _close(self) -> None: ...

    def submit(
        self, model: str, inputs: Mapping[str, npt.NDArray[Any]], outputs: Sequence[str] | None = None
    ) -> Future[Arrays]:
        """Start one inference; the future holds the named outputs."""
        if self._closed:
            raise RuntimeError(f"{self.mode} inference is closed; cannot run model '{model}'")
        return self._loop.submit(self._infer(model, dict(inputs), outputs))

    def infer(
        self, model: str, inputs: Mapping[str, npt.NDArray[Any]], outputs: Sequence[str] | None = None
    ) -> Arrays:
        return self.submit(model, inputs, outputs).result()

    def statistics(self, model: str) -> ServerStats:
        """Cumulative server-side figures of ``model``: requests, executions, queue and compute time."""
        return self._loop.run(self._statistics(model))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class DirectInference(Inference):
    """The server's model manager and backends, in this process; models are loaded on first use."""

    mode = InferenceMode.DIRECT

    def __init__(self, repositories: Sequence[Path], *, threads: int = 0) -> None:
        from sonic.server.config import BackendOptions  # noqa: PLC0415  (server code only in direct mode)
        from sonic.server.embedded import EmbeddedModels  # noqa: PLC0415

        super().__init__("sonic-direct")
        per_backend = {"onnxruntime": {"intra_op_thread_count": str(threads)}} if threads > 0 else {}
        self._models = EmbeddedModels(repositories, backend_options=BackendOptions(per_backend=per_backend))

    def load(self, *models: str) -> None:
        """Load models now (otherwise the first event pays for it)."""
        for model in models:
            self._loop.run(self._models.load(model))

    async def _infer(self, model: str, inputs: Arrays, outputs: Sequence[str] | None) -> Arrays:
        return await self._models.infer(model, inputs, outputs)

    async def _statistics(self, model: str) -> ServerStats:
        from sonic.client.transport.control import server_timing_from  # noqa: PLC0415  (protobuf when used)

        return _server_stats(server_timing_from(await self._models.statistics(model)))

    async def _close(self) -> None:
        await self._models.close()


class ServiceInference(Inference):
    """A :class:`sonic.client.AsyncClient` per model, all on this object's loop."""

    mode = InferenceMode.SERVICE

    def __init__(self, config: ClientConfig) -> None:
        super().__init__("sonic-service")
        self.config = config
        self._clients: dict[str, Any] = {}

    def _client(self, model: str) -> Any:
        from sonic.client.client import AsyncClient  # noqa: PLC0415

        client = self._clients.get(model)
        if client is None:
            client = self._clients[model] = AsyncClient(model, self.config)
        return client

    async def _infer(self, model: str, inputs: Arrays, outputs: Sequence[str] | None) -> Arrays:
        result: Arrays = await self._client(model).infer(inputs, outputs)
        return result

    async def _statistics(self, model: str) -> ServerStats:
        from sonic.client.transport.factory import open_transport  # noqa: PLC0415

        total = ServerStats()
        for address in self.config.servers:
            transport = open_transport(address, self.config)
            try:
                total = total + _server_stats(await transport.model_statistics(model, ""))
            finally:
                await transport.close()
        return total

    async def _close(self) -> None:
        for client in self._clients.values():
            await client.close()


def open_inference(config: InferenceConfig) -> Inference:
    if config.mode is InferenceMode.DIRECT:
        return DirectInference(config.repositories, threads=config.direct_threads)
    return ServiceInference(config.client)
