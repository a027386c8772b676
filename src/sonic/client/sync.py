"""Blocking and future/callback ("pseudo-async") use of :class:`~sonic.client.client.AsyncClient`.

The client owns one event-loop thread. ``infer`` blocks the caller; ``submit`` returns a
``concurrent.futures.Future`` at once so plain threaded code (a framework's event loop, a coffea
processor) keeps working while requests are in flight, at most ``config.max_in_flight`` at a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from sonic.client.batching import Parameters
from sonic.client.client import AsyncClient
from sonic.client.config import ClientConfig
from sonic.client.errors import ClientStateError
from sonic.client.results import Arrays, InferResult
from sonic.client.stats import ClientStatistics
from sonic.client.transport.base import ModelInfo, Transport

T = TypeVar("T")


class SyncClient:
    def __init__(
        self,
        model: str,
        config: ClientConfig | None = None,
        *,
        version: str = "",
        transports: Sequence[Transport] | None = None,
        model_config: Path | None = None,
    ) -> None:
        """As :class:`AsyncClient`; ``model_config`` turns on its checksum verification."""
        self._client = AsyncClient(
            model, config, version=version, transports=transports, model_config=model_config
        )
        self._loop = asyncio.new_event_loop()
        # Daemon, so a client that is never closed cannot hang interpreter exit; errors are not lost:
        # they travel back through each call's future. close() stops and joins the thread.
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"sonic-client-{model}", daemon=True
        )
        self._thread.start()
        self._closed = False

    @classmethod
    def from_env(cls, model: str, *, version: str = "", **overrides: Any) -> Self:
        return cls(model, ClientConfig.from_env(**overrides), version=version)

    @property
    def model(self) -> str:
        return self._client.model

    @property
    def config(self) -> ClientConfig:
        return self._client.config

    def __getstate__(self) -> dict[str, Any]:
        return self._client.__getstate__()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["model"], state["config"], version=state["version"], model_config=state.get("model_config")
        )

    @property
    def statistics(self) -> ClientStatistics:
        """What the client met so far: retries and their causes (see :class:`ClientStatistics`)."""
        return self._client.statistics

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        if self._closed:
            coroutine.close()
            msg = f"client for model '{self.model}' is closed"
            raise ClientStateError(msg)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            msg = "blocking SyncClient call from a callback of this client would deadlock; use submit()"
            raise ClientStateError(msg)
        return self._submit(coroutine).result()

    def model_info(self) -> ModelInfo:
        return self._run(self._client.model_info())

    def infer(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        *,
        parameters: Parameters | None = None,
    ) -> Arrays:
        return self._run(self._client.infer(inputs, outputs, parameters=parameters))

    def infer_detailed(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        *,
        parameters: Parameters | None = None,
    ) -> InferResult:
        return self._run(self._client.infer_detailed(inputs, outputs, parameters=parameters))

    def infer_ragged(
        self,
        objects: Sequence[Mapping[str, Any]],
        outputs: Sequence[str] | None = None,
        *,
        parameters: Parameters | None = None,
    ) -> list[Arrays]:
        return self._run(self._client.infer_ragged(objects, outputs, parameters=parameters))

    def submit(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        callback: Callable[[Future[Arrays]], object] | None = None,
        *,
        parameters: Parameters | None = None,
    ) -> Future[Arrays]:
        """Start a request and return its future; ``callback(future)`` runs when it is done."""
        future = self._submit(self._client.infer(inputs, outputs, parameters=parameters))
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._run(self._client.close())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
