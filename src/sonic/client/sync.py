"""Blocking and future/callback ("pseudo-async") use of :class:`~sonic.client.client.AsyncClient`.

The common blocking call skips the loop: see :mod:`sonic.client.blocking`. The client owns one event
loop for the rest. While only one thread makes blocking calls, each call runs that loop
in the calling thread (``run_until_complete``): no hop to another thread and back, which cost a
blocking call two thread wake-ups (half its time on a busy machine). Retries, failover, deadlines
and shared memory are the same code either way; background work (health probes, keepalive PINGs)
then runs during calls. The first ``submit``, a blocking call from a second thread while one is in
progress, or a call from a thread whose own asyncio loop is running (a notebook) starts the loop's
own thread instead, for good: from then on every call hops to it. ``submit`` returns a
``concurrent.futures.Future`` so plain threaded code (a framework's event loop, a coffea processor)
keeps working while requests are in flight, at most ``config.max_in_flight`` at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from sonic.client.batching import Parameters
from sonic.client.blocking import FastPath
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
        # Held by the thread running the loop: a caller for one call, or the loop's own thread for good.
        self._driving = threading.Lock()
        self._starting = threading.Lock()  # one thread hands the loop to its own thread
        self._threaded = False  # the loop runs in self._thread, for good
        self._handoff = threading.Event()  # wakes the parked thread: to run the loop, or to exit
        self._run_loop = threading.Event()  # set with the handoff: run it
        # The loop's thread is started now and parks until it is needed, so that a client never
        # closed keeps its loop and connections until exit as it always did (daemon, so it cannot hang
        # exit; never closed by the garbage collector from whichever thread it runs in).
        self._thread = threading.Thread(
            target=_park,
            args=(self._loop, self._handoff, self._run_loop),
            name=f"sonic-client-{model}",
            daemon=True,
        )
        self._thread.start()
        self._closed = False
        self._fast = FastPath(self._client)  # used only while this thread holds _driving

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

    def _start_thread(self) -> None:
        """Hand the loop to its own thread, once (waits for a call another thread is running)."""
        with self._starting:
            if self._threaded:
                return
            self._driving.acquire()  # kept by the loop's thread until close()
            if self._closed:  # closed while this waited for a call to end
                self._driving.release()
                msg = f"client for model '{self.model}' is closed"
                raise ClientStateError(msg)
            self._threaded = True
            self._run_loop.set()
            self._handoff.set()

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        if self._closed:
            coroutine.close()
            msg = f"client for model '{self.model}' is closed"
            raise ClientStateError(msg)
        try:
            self._start_thread()
        except ClientStateError:
            coroutine.close()
            raise
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if not self._threaded and _no_running_loop() and self._driving.acquire(blocking=False):
            try:
                if self._closed:
                    coroutine.close()
                    msg = f"client for model '{self.model}' is closed"
                    raise ClientStateError(msg)
                return self._loop.run_until_complete(coroutine)
            finally:
                self._driving.release()
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
        class_counts: Mapping[str, int] | None = None,
    ) -> Arrays:
        # The common call goes out on a blocking connection (sonic.client.blocking) while this thread
        # may drive the client: no loop turns. Anything else, or a failed first try's retries, on the loop.
        if class_counts:
            return self._run(
                self._client.infer(inputs, outputs, parameters=parameters, class_counts=class_counts)
            )
        if not parameters and not self._threaded and self._driving.acquire(blocking=False):
            try:
                if not self._closed and _no_running_loop():
                    outcome = self._fast.infer(inputs, outputs)
                    if isinstance(outcome, dict):
                        return outcome
                    if outcome is not None:
                        return self._loop.run_until_complete(self._client.after_first_try(*outcome))
            finally:
                self._driving.release()
        return self._run(self._client.infer(inputs, outputs, parameters=parameters))

    def infer_detailed(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        *,
        parameters: Parameters | None = None,
        class_counts: Mapping[str, int] | None = None,
    ) -> InferResult:
        return self._run(
            self._client.infer_detailed(inputs, outputs, parameters=parameters, class_counts=class_counts)
        )

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
            with self._starting:
                threaded = self._threaded
                if threaded:
                    self._loop.call_soon_threadsafe(self._loop.stop)
                self._handoff.set()  # a parked thread exits
            self._thread.join()
            with self._driving if not threaded else contextlib.nullcontext():
                self._fast.close()
                self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _no_running_loop() -> bool:
    """No asyncio loop runs in this thread (a notebook's does): this thread may run the client's."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def _park(loop: asyncio.AbstractEventLoop, handoff: threading.Event, run_loop: threading.Event) -> None:
    """The loop's thread: waits until it is handed the loop (then runs it until close) or closed."""
    handoff.wait()
    if run_loop.is_set():
        loop.run_forever()
